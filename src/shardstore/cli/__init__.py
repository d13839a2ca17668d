"""The ``shardstore`` command: demo, info, ls, verify, repair, convert (alias copy), downsample, serve, view.

One module per command; each has ``add_parser(add)`` (arguments only) and ``run(args)`` (the
work). A new command is a new module listed in ``COMMANDS``.

Exit codes: 0 success; 1 the command ran but found a problem (``verify`` found unreadable
chunks, ``demo`` read back different data); 2 an error (a ``ShardStoreError`` or bad usage),
reported as one line on stderr (``--debug`` shows the traceback instead; the exit code stays 2).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence

from .. import __version__
from ..errors import ShardStoreError
from . import convert, copy, demo, downsample, info, ls, repair, serve, verify, view
from ._common import CommandFailed

__all__ = ["main", "build_parser", "COMMANDS"]

#: the subcommands, in the order ``--help`` lists them
COMMANDS = (demo, info, ls, verify, repair, convert, copy, downsample, serve, view)

_EPILOG = """\
examples:
  shardstore demo /tmp/shardstore-demo            every format, verified, with pyramids
  shardstore info /tmp/shardstore-demo/em.ome.zarr/0
  shardstore verify /tmp/shardstore-demo
  shardstore view /tmp/shardstore-demo            look at it in Neuroglancer
  shardstore convert vol.precomputed vol.zarr --shards 256 --ome
  shardstore convert SRC DST --shards 128 --codecs '[{"name": "zstd", "configuration": {"level": 9}}]'

exit codes: 0 ok, 1 a problem was found (verify, demo), 2 error (message on stderr)
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (also used to render the CLI help in the docs)."""
    parser = argparse.ArgumentParser(
        prog="shardstore",
        description="Chunked, compressed, sharded N-dimensional arrays: Zarr v3 (sharding), N5, "
                    "Neuroglancer precomputed, bcolz.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"shardstore {__version__}")
    # global options work before or after the subcommand: the subcommand's copy defaults to
    # SUPPRESS so that it does not reset a value given before the subcommand
    parser.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def add(name: str, help: str, description: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=description)
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="show tracebacks instead of one-line errors")
        p.add_argument("--no-progress", action="store_true", default=argparse.SUPPRESS,
                       help="no progress bars")
        return p

    for command in COMMANDS:
        command.add_parser(add)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 ok, 1 problem found, 2 error)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.func(args)
    except CommandFailed as e:
        print(f"shardstore: {e}", file=sys.stderr)
        return 1
    except (ShardStoreError, ValueError, TypeError) as e:
        # ValueError / TypeError: argument values the library refuses (e.g. a negative --size)
        if args.debug:  # the whole traceback, and still the exit code of an error
            traceback.print_exc()
        else:
            print(f"shardstore: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("shardstore: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `shardstore info X | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
