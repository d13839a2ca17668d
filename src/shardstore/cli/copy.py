"""``shardstore copy``: re-chunk, re-shard or re-compress an array into a new Zarr v3 array."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from ..api import open as open_node
from ..core.array import Array
from ..demo import codecs_summary, directory_size, format_bytes, write_blocks
from ..errors import ContainsNodeError, ShardStoreError
from ..formats import zarr3
from ._common import (
    AddCommand,
    inner_codecs,
    io_block,
    local_dir,
    out,
    parse_codecs,
    parse_shape,
    summary,
)


def _same_place(src: str, dst: str) -> bool:
    a, b = local_dir(src), Path(dst.removeprefix("file://")).expanduser()
    if a is None:
        return False
    a, b = a.resolve(), b.resolve()
    return a == b or a in b.parents or b in a.parents


def run(args: argparse.Namespace) -> None:
    src = open_node(args.src, mode="r")
    if not isinstance(src, Array):
        raise ShardStoreError(f"copy: {args.src!r} is a group; copy takes one array")
    if _same_place(args.src, args.dst):
        raise ShardStoreError(f"copy: {args.dst!r} overlaps the source {args.src!r}; choose another DST")
    chunks = parse_shape(args.chunks, src.ndim, "chunks") if args.chunks else tuple(src.chunks)
    if args.shards is None:
        shards = tuple(src.shards) if src.shards is not None else None
        if shards is not None and any(s % c for s, c in zip(shards, chunks)):
            shards = tuple(-(-s // c) * c for s, c in zip(shards, chunks))  # keep about the same size
    elif args.shards.lower() == "none":
        shards = None
    else:
        shards = parse_shape(args.shards, src.ndim, "shards")
    codecs = parse_codecs(args.codecs) if args.codecs else inner_codecs(src)
    try:
        dst = zarr3.create(
            args.dst, shape=src.shape, dtype=src.dtype, chunks=chunks, shards=shards, codecs=codecs,
            fill_value=src.fill_value, dimension_names=src.dimension_names,
            attributes=dict(src.attrs), mode="w" if args.overwrite else "w-",
        )
    except ContainsNodeError:
        raise ContainsNodeError(f"copy: {args.dst!r} already holds an array or group (use --overwrite "
                                "to replace it)") from None
    block = dst.shards or io_block(dst.shape, dst.chunks, dst.dtype.itemsize)
    t0 = time.perf_counter()
    n = write_blocks(dst, lambda region: src[region], block=block, progress=not args.no_progress,
                     desc="copying")
    seconds = time.perf_counter() - t0
    local = local_dir(args.dst)
    stored = f", {format_bytes(directory_size(local)[1])} on disk" if local is not None else ""
    out(f"copied {args.src} -> {args.dst}: {summary(dst)}, {n} block(s), "
         f"{format_bytes(src.nbytes)} in {seconds:.2f} s "
         f"({src.nbytes / 1e6 / max(seconds, 1e-9):.1f} MB/s){stored}")
    out(f"  codecs {codecs_summary(dst.metadata.get('codecs', []))}")


def add_parser(add: AddCommand) -> None:
    p = add("copy", "re-chunk, re-shard or re-compress an array into a new Zarr v3 array",
            "Copy the array SRC to a new Zarr v3 array DST, one destination shard at a time. "
            "Unless given, chunks, shards and codecs are the source's; everything else (dtype, "
            "fill value, dimension names, attributes) is copied.")
    p.add_argument("src", metavar="SRC", help="the array to copy (directory or file:// URL)")
    p.add_argument("dst", metavar="DST", help="where to create the new Zarr v3 array")
    p.add_argument("--chunks", metavar="C", help="(inner) chunk shape: 64 or 64,64,32")
    p.add_argument("--shards", metavar="S", help="shard shape (multiple of the chunks), or 'none' for no sharding")
    p.add_argument("--codecs", metavar="JSON",
                   help="inner codec list in Zarr v3 JSON, or @file.json; a list of compressors alone "
                        "gets the bytes codec added")
    p.add_argument("--overwrite", action="store_true", help="replace DST if it exists")
    p.set_defaults(func=run)
