"""``shardstore verify``: decode every chunk; list each failure with its key."""

from __future__ import annotations

import argparse
import sys
import time

from ..api import open as open_node
from ..core.array import Array
from ..demo import count_blocks, format_bytes, iter_blocks
from ..errors import ShardStoreError
from ._common import AddCommand, CommandFailed, io_block, out, walk

#: verify lists at most this many problems (all are counted)
MAX_LISTED = 20


def _region_text(region: tuple[slice, ...]) -> str:
    return "[" + ", ".join(f"{s.start}:{s.stop}" for s in region) + "]"


def _verify_array(a: Array, name: str, progress: bool) -> list[str]:
    """Read every chunk of ``a``; return one message per distinct failure."""
    from tqdm import tqdm

    problems: list[str] = []
    seen: set[str] = set()

    def note(region: tuple[slice, ...], err: ShardStoreError) -> None:
        text = str(err)
        if text not in seen:  # a broken shard index fails every inner chunk the same way
            seen.add(text)
            problems.append(f"{name}{_region_text(region)}: {type(err).__name__}: {text}")

    block = a.shards or io_block(a.shape, a.chunks, a.dtype.itemsize)
    with tqdm(total=count_blocks(a.shape, block), desc=f"verifying {name}",
              unit="shard" if a.shards else "block", disable=not progress, dynamic_ncols=True) as bar:
        for region in iter_blocks(a.shape, block):
            try:
                a[region]  # the fast path: a whole shard (or many chunks) per read
            except ShardStoreError:  # narrow it down to the chunks that fail
                shape = tuple(s.stop - s.start for s in region)
                for inner in iter_blocks(shape, a.chunks):
                    sub = tuple(slice(o.start + i.start, o.start + i.stop) for o, i in zip(region, inner))
                    try:
                        a[sub]
                    except ShardStoreError as err:
                        note(sub, err)
            bar.update(1)
    return problems


def run(args: argparse.Namespace) -> None:
    node = open_node(args.path, mode="r")
    t0 = time.perf_counter()
    problems: list[str] = []
    arrays = 0
    nbytes = 0
    for name, child in walk(node):
        if isinstance(child, Array):
            arrays += 1
            nbytes += child.nbytes
            problems += _verify_array(child, name or args.path, not args.no_progress)
    seconds = time.perf_counter() - t0
    if problems:
        for p in problems[:MAX_LISTED]:
            print(f"  {p}", file=sys.stderr)
        if len(problems) > MAX_LISTED:
            print(f"  ... and {len(problems) - MAX_LISTED} more", file=sys.stderr)
        raise CommandFailed(f"verify: {args.path}: {len(problems)} problem(s) found")
    out(f"verify: OK, {arrays} array(s), {format_bytes(nbytes)} decoded in {seconds:.2f} s")


def add_parser(add: AddCommand) -> None:
    p = add("verify", "read every chunk and report the ones that fail",
            "Decode every chunk of an array (or of every array below a group) and report each "
            "failure with the key concerned. Exit code 1 when anything is unreadable.")
    p.add_argument("path", metavar="PATH", help="array or group (directory or file:// URL)")
    p.set_defaults(func=run)
