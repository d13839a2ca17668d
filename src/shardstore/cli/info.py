"""``shardstore info``: describe an array or group."""

from __future__ import annotations

import argparse
import math
from typing import Any

from ..api import open as open_node
from ..core.array import Array
from ..demo import codecs_summary, count_blocks, directory_size, format_bytes
from ._common import (
    METADATA_FILES,
    AddCommand,
    fill_text,
    json_text,
    local_dir,
    out,
    shape,
)


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
    local = local_dir(path)
    if local is not None:
        files, stored = directory_size(local, skip_names=METADATA_FILES)
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
        ("shape", shape(info["shape"])),
        ("dtype", info["dtype"]),
        ("chunks", shape(info["chunks"])),
        ("shards", shape(info["shards"])),
        ("fill value", fill_text(info["fill_value"])),
        ("dim. names", json_text(info["dimension_names"], None)),
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
    out(info["path"])
    for label, value in rows:
        out(f"  {label:<11} {value}")
    out(f"  {'codecs':<11} {codecs_summary(info['codecs'] or [])}")
    out("  codecs JSON:")
    out("    " + json_text(info["codecs"]).replace("\n", "\n    "))
    out("  attributes:")
    out("    " + json_text(info["attributes"]).replace("\n", "\n    "))


def run(args: argparse.Namespace) -> None:
    node = open_node(args.path, mode="r")
    if isinstance(node, Array):
        info = _array_info(node, args.path)
        if args.json:
            out(json_text(info))
        else:
            _print_array_info(info)
        return
    children = node.keys()
    info = {"path": args.path, "node": "group", "format": "zarr3",
            "attributes": dict(node.attrs), "children": children}
    if args.json:
        out(json_text(info))
        return
    out(args.path)
    out(f"  {'format':<11} zarr3 group")
    out(f"  {'children':<11} {', '.join(children) if children else '(none)'}")
    out("  attributes:")
    out("    " + json_text(info["attributes"]).replace("\n", "\n    "))


def add_parser(add: AddCommand) -> None:
    p = add("info", "describe an array or group",
            "Print the format, shape, dtype, chunk and shard shape, fill value, codecs, dimension "
            "names and attributes of an array (and, for local paths, how many chunk or shard "
            "files it stores and their size), or the attributes and children of a group.")
    p.add_argument("path", metavar="PATH", help="array or group (directory or file:// URL)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.set_defaults(func=run)
