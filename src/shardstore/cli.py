"""The ``shardstore`` command: demo, info, ls, verify, copy.

Exit codes: 0 success; 1 the command ran but found a problem (``verify`` found unreadable
chunks, ``demo`` read back different data); 2 an error (a ``ShardStoreError`` or bad usage),
reported as one line on stderr (``--debug`` shows the traceback instead).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import __version__
from .api import open as open_node
from .core.array import Array
from .demo import (
    DEMO_FORMATS,
    codecs_summary,
    count_blocks,
    directory_size,
    format_bytes,
    iter_blocks,
    run_demo,
    write_blocks,
)
from .errors import ContainsNodeError, ShardStoreError
from .formats import zarr3

__all__ = ["main", "build_parser"]

#: metadata documents of each format, left out when counting stored data files
_METADATA_FILES = ("zarr.json",)
#: unsharded arrays are verified and copied in blocks of whole chunks up to about this size
_BLOCK_BYTES = 64 * 2**20
#: verify lists at most this many problems (all are counted)
_MAX_LISTED = 20


class CommandFailed(Exception):
    """The command ran to the end and found a problem (exit code 1)."""


# --------------------------------------------------------------------------- helpers

def _out(*parts: Any) -> None:
    print(*parts, flush=True)


def _local_dir(path: str) -> Path | None:
    """The local directory behind a path or ``file://`` URL, or None (memory, remote)."""
    if path.startswith("file://"):
        path = path[len("file://"):]
    elif "://" in path:
        return None
    p = Path(path).expanduser()
    return p if p.is_dir() else None


def _shape(shape: Sequence[int] | None) -> str:
    return "none" if shape is None else str(tuple(int(s) for s in shape))


def _json(value: Any, indent: int | None = 2, width: int = 80, _level: int = 0) -> str:
    """JSON, indented, but with any value that fits in ``width`` columns kept on one line."""
    flat = json.dumps(value, default=_json_default)
    if indent is None or len(flat) + _level * indent <= width or not isinstance(value, (dict, list)) or not value:
        return flat
    pad, inner = " " * (indent * _level), " " * (indent * (_level + 1))
    if isinstance(value, dict):
        items = [f"{inner}{json.dumps(str(k))}: {_json(v, indent, width, _level + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    items = [inner + _json(v, indent, width, _level + 1) for v in value]
    return "[\n" + ",\n".join(items) + "\n" + pad + "]"


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


def _fill_text(value: Any) -> str:
    return repr(value.item() if isinstance(value, np.generic) else value)


def _is_group(node: Any) -> bool:
    return not isinstance(node, Array)


def _walk(node: Any, name: str = "") -> Iterator[tuple[str, Any]]:
    """``(path, node)`` for ``node`` and everything below it, depth first, sorted."""
    yield name, node
    if _is_group(node):
        for child in node.keys():
            yield from _walk(node[child], f"{name}/{child}" if name else child)


def _parse_shape(text: str, ndim: int, what: str) -> tuple[int, ...]:
    """``"64"`` (every axis) or ``"64,64,32"``."""
    try:
        parts = [int(p) for p in text.replace("x", ",").split(",") if p.strip()]
    except ValueError:
        raise ShardStoreError(f"--{what} {text!r}: expected integers like 64 or 64,64,64") from None
    if len(parts) == 1:
        parts *= ndim
    if len(parts) != ndim or any(p < 1 for p in parts):
        raise ShardStoreError(f"--{what} {text!r}: expected {ndim} positive integers for a {ndim}-d array")
    return tuple(parts)


def _parse_codecs(text: str) -> list[Any]:
    """A JSON codec list, inline or ``@file.json``."""
    source = "--codecs"
    if text.startswith("@"):
        source = text[1:]
        try:
            text = Path(source).read_text()
        except OSError as e:
            raise ShardStoreError(f"--codecs: cannot read {source!r}: {e.strerror or e}") from e
    try:
        codecs = json.loads(text)
    except json.JSONDecodeError as e:
        raise ShardStoreError(f"{source}: not valid JSON ({e})") from None
    if isinstance(codecs, dict):
        codecs = [codecs]
    if not isinstance(codecs, list):
        raise ShardStoreError(f"{source}: expected a JSON list of codecs, got {type(codecs).__name__}")
    return codecs


def _inner_codecs(array: Array) -> list[Any] | None:
    """The codecs of one (inner) chunk of a Zarr v3 array, or None for other formats."""
    if array.format != "zarr3":
        return None
    codecs = list(array.metadata.get("codecs", []))
    if len(codecs) == 1 and codecs[0].get("name") == "sharding_indexed":
        return list(codecs[0]["configuration"]["codecs"])
    return codecs


# --------------------------------------------------------------------------- demo

def cmd_demo(args: argparse.Namespace) -> None:
    formats = None if args.format == "all" else [args.format]
    results = run_demo(args.dir, size=args.size, formats=formats, seed=args.seed,
                       progress=not args.no_progress)
    bad = [r.format for r in results if not r.ok]
    if bad:
        raise CommandFailed(f"demo: data read back differs from what was written ({', '.join(bad)})")


# --------------------------------------------------------------------------- info / ls

def _array_info(a: Array, path: str) -> dict[str, Any]:
    meta = a.metadata
    info: dict[str, Any] = {
        "path": path,
        "node": "array",
        "format": a.format,
        "shape": list(a.shape),
        "dtype": str(a.dtype),
        "chunks": list(a.chunks),
        "shards": list(a.shards) if a.shards is not None else None,
        "fill_value": a.fill_value,
        "codecs": meta.get("codecs"),
        "dimension_names": list(a.dimension_names) if a.dimension_names is not None else None,
        "attributes": dict(a.attrs),
        "nbytes": a.nbytes,
    }
    local = _local_dir(path)
    if local is not None:
        files, stored = directory_size(local, skip_names=_METADATA_FILES)
        unit = a.shards or a.chunks
        info["stored"] = {
            "kind": "shard" if a.shards is not None else "chunk",
            "files": files,
            "grid_cells": count_blocks(a.shape, unit) if a.shape else 1,
            "bytes": stored,
        }
    return info


def _print_array_info(info: dict[str, Any]) -> None:
    rows = [
        ("format", f"{info['format']} array"),
        ("shape", _shape(info["shape"])),
        ("dtype", info["dtype"]),
        ("chunks", _shape(info["chunks"])),
        ("shards", _shape(info["shards"])),
        ("fill value", _fill_text(info["fill_value"])),
        ("dim. names", _json(info["dimension_names"], None)),
        ("data size", format_bytes(info["nbytes"])),
    ]
    stored = info.get("stored")
    if stored is not None:
        ratio = info["nbytes"] / stored["bytes"] if stored["bytes"] else math.inf
        rows.append((
            "stored",
            f"{stored['files']} of {stored['grid_cells']} {stored['kind']} files, "
            f"{format_bytes(stored['bytes'])} (compression {ratio:.2f}x)",
        ))
    _out(info["path"])
    for label, value in rows:
        _out(f"  {label:<11} {value}")
    _out(f"  {'codecs':<11} {codecs_summary(info['codecs'] or [])}")
    _out("  codecs JSON:")
    _out("    " + _json(info["codecs"]).replace("\n", "\n    "))
    _out("  attributes:")
    _out("    " + _json(info["attributes"]).replace("\n", "\n    "))


def cmd_info(args: argparse.Namespace) -> None:
    node = open_node(args.path, mode="r")
    if isinstance(node, Array):
        info = _array_info(node, args.path)
        if args.json:
            _out(_json(info))
        else:
            _print_array_info(info)
        return
    children = node.keys()
    info = {"path": args.path, "node": "group", "format": "zarr3",
            "attributes": dict(node.attrs), "children": children}
    if args.json:
        _out(_json(info))
        return
    _out(args.path)
    _out(f"  {'format':<11} zarr3 group")
    _out(f"  {'children':<11} {', '.join(children) if children else '(none)'}")
    _out("  attributes:")
    _out("    " + _json(info["attributes"]).replace("\n", "\n    "))


def _summary(a: Array) -> str:
    shards = f" shards {_shape(a.shards)}" if a.shards is not None else ""
    return f"{_shape(a.shape)} {a.dtype} chunks {_shape(a.chunks)}{shards}"


def _ls_directory(path: str) -> bool:
    """For a plain local directory, list the arrays and groups directly inside it."""
    local = _local_dir(path)
    if local is None:
        return False
    found = []
    for entry in sorted(local.iterdir()):
        if entry.is_dir():
            try:
                found.append((entry.name, open_node(entry, mode="r")))
            except ShardStoreError:
                continue
    if not found:
        return False
    _out(f"{path}  [directory]")
    for name, node in found:
        if isinstance(node, Array):
            _out(f"  {name}  [{node.format} array] {_summary(node)}")
        else:
            _out(f"  {name}/  [zarr3 group]")
    return True


def cmd_ls(args: argparse.Namespace) -> None:
    try:
        node = open_node(args.path, mode="r")
    except ShardStoreError:
        if _ls_directory(args.path):
            return
        raise
    if isinstance(node, Array):
        _out(f"{args.path}  [{node.format} array] {_summary(node)}")
        return
    _out(f"{args.path}  [zarr3 group]")
    for name, child in _walk(node):
        if not name:
            continue
        indent = "  " * name.count("/") + "  "
        leaf = name.rsplit("/", 1)[-1]
        if isinstance(child, Array):
            _out(f"{indent}{leaf}  {_summary(child)}")
        else:
            _out(f"{indent}{leaf}/")


# --------------------------------------------------------------------------- verify

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

    block = a.shards or _io_block(a.shape, a.chunks, a.dtype.itemsize)
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


def cmd_verify(args: argparse.Namespace) -> None:
    node = open_node(args.path, mode="r")
    t0 = time.perf_counter()
    problems: list[str] = []
    arrays = 0
    nbytes = 0
    for name, child in _walk(node):
        if isinstance(child, Array):
            arrays += 1
            nbytes += child.nbytes
            problems += _verify_array(child, name or args.path, not args.no_progress)
    seconds = time.perf_counter() - t0
    if problems:
        for p in problems[:_MAX_LISTED]:
            print(f"  {p}", file=sys.stderr)
        if len(problems) > _MAX_LISTED:
            print(f"  ... and {len(problems) - _MAX_LISTED} more", file=sys.stderr)
        raise CommandFailed(f"verify: {args.path}: {len(problems)} problem(s) found")
    _out(f"verify: OK, {arrays} array(s), {format_bytes(nbytes)} decoded in {seconds:.2f} s")


# --------------------------------------------------------------------------- copy

def _io_block(shape: tuple[int, ...], chunks: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """Whole chunks, grown from the last axis backwards up to about ``_BLOCK_BYTES``: the unit
    of reading / writing for unsharded arrays, few calls without much memory."""
    block = list(chunks)
    for axis in range(len(block) - 1, -1, -1):
        per = math.prod(block) * itemsize // block[axis]
        fits = max(1, _BLOCK_BYTES // max(per, 1) // chunks[axis]) * chunks[axis]
        block[axis] = min(fits, max(1, -(-shape[axis] // chunks[axis])) * chunks[axis])
    return tuple(block)


def _same_place(src: str, dst: str) -> bool:
    a, b = _local_dir(src), Path(dst.removeprefix("file://")).expanduser()
    if a is None:
        return False
    a, b = a.resolve(), b.resolve()
    return a == b or a in b.parents or b in a.parents


def cmd_copy(args: argparse.Namespace) -> None:
    src = open_node(args.src, mode="r")
    if not isinstance(src, Array):
        raise ShardStoreError(f"copy: {args.src!r} is a group; copy takes one array")
    if _same_place(args.src, args.dst):
        raise ShardStoreError(f"copy: {args.dst!r} overlaps the source {args.src!r}; choose another DST")
    chunks = _parse_shape(args.chunks, src.ndim, "chunks") if args.chunks else tuple(src.chunks)
    if args.shards is None:
        shards = tuple(src.shards) if src.shards is not None else None
        if shards is not None and any(s % c for s, c in zip(shards, chunks)):
            shards = tuple(-(-s // c) * c for s, c in zip(shards, chunks))  # keep about the same size
    elif args.shards.lower() == "none":
        shards = None
    else:
        shards = _parse_shape(args.shards, src.ndim, "shards")
    codecs = _parse_codecs(args.codecs) if args.codecs else _inner_codecs(src)
    try:
        dst = zarr3.create(
            args.dst, shape=src.shape, dtype=src.dtype, chunks=chunks, shards=shards, codecs=codecs,
            fill_value=src.fill_value, dimension_names=src.dimension_names,
            attributes=dict(src.attrs), mode="w" if args.overwrite else "w-",
        )
    except ContainsNodeError:
        raise ContainsNodeError(f"copy: {args.dst!r} already holds an array or group (use --overwrite "
                                "to replace it)") from None
    block = dst.shards or _io_block(dst.shape, dst.chunks, dst.dtype.itemsize)
    t0 = time.perf_counter()
    n = write_blocks(dst, lambda region: src[region], block=block, progress=not args.no_progress,
                     desc="copying")
    seconds = time.perf_counter() - t0
    local = _local_dir(args.dst)
    stored = f", {format_bytes(directory_size(local)[1])} on disk" if local is not None else ""
    _out(f"copied {args.src} -> {args.dst}: {_summary(dst)}, {n} block(s), "
         f"{format_bytes(src.nbytes)} in {seconds:.2f} s "
         f"({src.nbytes / 1e6 / max(seconds, 1e-9):.1f} MB/s){stored}")
    _out(f"  codecs {codecs_summary(dst.metadata.get('codecs', []))}")


# --------------------------------------------------------------------------- parser

_EPILOG = """\
examples:
  shardstore demo /tmp/shardstore-demo            write, read back and verify a 256^3 volume
  shardstore info /tmp/shardstore-demo/em_uint8.zarr
  shardstore verify /tmp/shardstore-demo/em_uint8.zarr
  shardstore copy SRC DST --shards 128 --codecs '[{"name": "zstd", "configuration": {"level": 9}}]'

exit codes: 0 ok, 1 a problem was found (verify, demo), 2 error (message on stderr)
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (also used to render the CLI help in the docs)."""
    parser = argparse.ArgumentParser(
        prog="shardstore",
        description="Chunked, compressed, sharded N-dimensional arrays (Zarr v3 with sharding).",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"shardstore {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def add(name: str, help: str, description: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=description)
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="show tracebacks instead of one-line errors")
        return p

    p = add("demo", "write, read back and verify a synthetic EM-like volume",
            "Generate a synthetic EM-like uint8 volume (seeded; no data or network needed), write "
            "it as a sharded array in DIR (chunks 64^3, shards 256^3), read it back, verify it, "
            "and print shapes, sizes on disk and throughput.")
    p.add_argument("dir", metavar="DIR", help="output directory (created if missing)")
    p.add_argument("--size", type=int, default=256, metavar="N", help="edge of the N^3 volume (default: 256)")
    p.add_argument("--format", default="all", choices=["all", *DEMO_FORMATS],
                   help="which format to demonstrate (default: all)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the volume (default: 0)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_demo)

    p = add("info", "describe an array or group",
            "Print the format, shape, dtype, chunk and shard shape, fill value, codecs, dimension "
            "names and attributes of an array (and, for local paths, how many chunk or shard "
            "files it stores and their size), or the attributes and children of a group.")
    p.add_argument("path", metavar="PATH", help="array or group (directory or file:// URL)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.set_defaults(func=cmd_info)

    p = add("ls", "list a group's tree (or summarize an array)",
            "List the arrays and groups below PATH with their shape, dtype and chunking.")
    p.add_argument("path", metavar="PATH", help="group, array, or a directory holding them")
    p.set_defaults(func=cmd_ls)

    p = add("verify", "read every chunk and report the ones that fail",
            "Decode every chunk of an array (or of every array below a group) and report each "
            "failure with the key concerned. Exit code 1 when anything is unreadable.")
    p.add_argument("path", metavar="PATH", help="array or group (directory or file:// URL)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_verify)

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
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_copy)
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
    except (ShardStoreError, ValueError) as e:
        # ValueError: bad argument values the library refuses (e.g. a negative --size)
        if args.debug:
            raise
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
