"""``shardstore serve``: read-only HTTP (byte ranges, CORS) over a directory, s3:// or http(s)://."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..errors import ShardStoreError
from ._common import AddCommand, out

#: addresses that keep the server on this machine
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def storage_options(text: str | None) -> dict[str, Any] | None:
    """``--storage-options`` JSON (an object) or None."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ShardStoreError(f"--storage-options: not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise ShardStoreError(f"--storage-options: expected a JSON object, got {type(value).__name__}")
    return value


def add_server_arguments(p: argparse.ArgumentParser, port: int) -> None:
    """The options ``serve`` and ``view`` share."""
    p.add_argument("--port", type=int, default=port, help=f"TCP port (default {port}; 0 picks a free one)")
    p.add_argument("--bind", default="127.0.0.1", metavar="ADDR",
                   help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--storage-options", metavar="JSON",
                   help='options of an s3:// or http(s):// store, e.g. \'{"endpoint": "http://127.0.0.1:8333"}\'')
    p.add_argument("--max-depth", type=int, default=4, metavar="N",
                   help="look for datasets at most N directories deep (default 4)")


def warn_if_public(bind: str) -> None:
    if bind not in LOOPBACK:
        print(f"shardstore: warning: listening on {bind}: anyone who can reach this machine can read the data",
              file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> None:
    from ..serve import Server

    server = Server(args.path, port=args.port, bind=args.bind,
                    storage_options=storage_options(args.storage_options), max_depth=args.max_depth)
    warn_if_public(args.bind)
    server.start()
    out(f"serving {server.source.where} read-only at {server.url}")
    found = server.sources()
    if not found:
        out("  no datasets found (looked for zarr.json, attributes.json, info, bcolz meta)")
    for dataset, source in found:
        shown = source or "(bcolz: not viewable in Neuroglancer)"
        out(f"  {dataset.path or '.'}  [{dataset.format} {dataset.dtype}]  {shown}")
    out("(Ctrl-C stops the server)")
    server.serve_forever()


def add_parser(add: AddCommand) -> None:
    p = add("serve", "serve a directory or bucket over HTTP for Neuroglancer",
            "Serve PATH read-only over HTTP with byte ranges and CORS, as Neuroglancer needs, and "
            "print a Neuroglancer source string per dataset found.")
    p.add_argument("path", metavar="PATH", help="local directory, s3://bucket/prefix or http(s):// URL")
    add_server_arguments(p, 8000)
    p.set_defaults(func=run)
