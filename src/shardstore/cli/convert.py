"""``shardstore convert`` (alias ``copy``): an array into another format, chunking or codecs.

The work is ``shardstore.ops.convert``; this module parses the arguments and prints the
summary: chunks written (verbatim / re-encoded), bytes in and out, time, and every metadata
item that did not carry over or codec that changed.
"""

from __future__ import annotations

import argparse

from ..ops.convert import MANIFEST_KEY, ConvertResult, convert
from ..ops.convert_meta import FORMATS
from ..ops.downsample import parse_size
from ._common import AddCommand, out, parse_codecs


def _size(n: int | None) -> str:
    if n is None:
        return "n/a"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n = n / 1024  # type: ignore[assignment]
    return str(n)


def print_summary(src: str, dst: str, r: ConvertResult) -> None:
    rate = r.bytes_in / 2**20 / max(r.seconds, 1e-9)
    resumed = f", {r.tasks_resumed} of {r.tasks} task(s) done by an earlier run" if r.tasks_resumed else ""
    out(f"converted {src} -> {dst}: {r.chunks_written} chunk(s) ({r.chunks_verbatim} copied verbatim, "
        f"{r.chunks_reencoded} re-encoded){resumed}")
    out(f"  {_size(r.bytes_in)} in, {_size(r.bytes_out)} stored, {r.seconds:.2f} s ({rate:.1f} MiB/s)"
        + (", verified" if r.verified else ""))
    for item in r.changed:
        out(f"  changed: {item}")
    for item in r.dropped:
        out(f"  dropped: {item}")
    if r.oversize:
        out("  note: a destination shard is larger than --max-memory; it was written whole")


def run(args: argparse.Namespace) -> None:
    try:
        r = convert(
            args.src, args.dst, to=args.to, chunks=args.chunks, shards=args.shards,
            codecs=parse_codecs(args.codecs) if args.codecs else None, compression=args.compression,
            encoding=args.encoding, ome=args.ome, overwrite=args.overwrite, max_memory=args.max_memory,
            workers=args.workers, scheduler=args.scheduler, resume=args.resume, verify=args.verify,
            progress=not args.no_progress,
        )
    except KeyboardInterrupt:
        out(f"interrupted: finished shards are recorded in {args.dst}/{MANIFEST_KEY}; rerun the same command to resume")
        raise
    print_summary(args.src, args.dst, r)


def add_parser(add: AddCommand, name: str = "convert") -> None:
    p = add(name, "convert an array between Zarr v3, N5 and precomputed (re-chunk, re-shard, re-compress)",
            "Convert the array SRC (Zarr v3, N5, precomputed, or a bcolz carray / ctable) into a new "
            "array DST, one destination shard at a time, within --max-memory. Unless given, chunks, "
            "shards and codecs follow the source where the destination format allows. Chunks whose "
            "bytes fit the destination are copied without decoding. An interrupted run resumes when "
            "rerun with the same arguments. Axis order: precomputed [x, y, z, c] becomes [c, z, y, x] "
            "in Zarr and N5 (no c axis for one channel), and back.")
    p.add_argument("src", metavar="SRC", help="the array: a path or file://, s3://, http(s):// URL")
    p.add_argument("dst", metavar="DST", help="the new array: a path or file://, s3:// URL")
    p.add_argument("--to", choices=FORMATS, help="destination format (default from DST's suffix "
                   "(.n5, .precomputed), else zarr3)")
    p.add_argument("--chunks", metavar="C", help="(inner) chunk shape in destination axis order: 64 or 64,64,32")
    p.add_argument("--shards", metavar="S", help="shard shape (multiple of the chunks), or 'none' for no sharding")
    p.add_argument("--codecs", metavar="JSON",
                   help="Zarr v3 inner codec list in JSON, or @file.json; a list of compressors alone "
                        "gets the bytes codec added")
    p.add_argument("--compression", metavar="C", help="zstd[:LEVEL], gzip[:LEVEL], blosc[:CNAME[:LEVEL]] or none "
                   "(Zarr v3 and N5)")
    p.add_argument("--encoding", metavar="E", help="precomputed encoding: raw, compressed_segmentation, jpeg, png")
    p.add_argument("--ome", action="store_true", help="write an OME-Zarr 0.5 image (the array is DST/0)")
    p.add_argument("--overwrite", action="store_true", help="replace DST if it exists")
    p.add_argument("--max-memory", type=parse_size, default=None, metavar="SIZE",
                   help="memory budget, e.g. 2G (default: a quarter of RAM, at most 16G)")
    p.add_argument("--workers", type=int, default=1, metavar="N",
                   help="local worker processes, each owning whole destination shards and taking its share of "
                        "the CPUs as codec threads (default 1: one process, whose threads use every CPU)")
    p.add_argument("--scheduler", metavar="ADDRESS", help="run the tasks on this dask.distributed scheduler")
    p.add_argument("--resume", action=argparse.BooleanOptionalAction, default=True,
                   help="continue an interrupted conversion with the same arguments (default on)")
    p.add_argument("--verify", action="store_true", help="compare source and destination after the copy")
    p.set_defaults(func=run)
