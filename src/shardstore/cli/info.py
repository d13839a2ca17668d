"""``shardstore info``: describe a node of any format in that format's own terms."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from ..api import open as open_node
from ..demo import codecs_summary, format_bytes
from ..formats.describe import Description, describe
from ._common import AddCommand, fill_text, json_text, local_dir, out, shape

#: fields printed as shapes, as byte sizes, or not as plain rows
_SHAPES = ("shape", "chunks", "shards")
_BYTES = ("nbytes", "cbytes")
_LABELS = {"nbytes": "data size", "cbytes": "cbytes", "fill_value": "fill value", "dimension_names": "dim. names",
           "num_channels": "channels", "blockSize": "blockSize", "dataType": "dataType"}
_TRAILING = ("codecs", "scales", "columns", "attributes")


def data_files(root: Path, is_data_file: Any) -> tuple[int, int]:
    """``(files, bytes)`` of the chunk / shard files below ``root`` (metadata documents and
    in-flight temporary files left out)."""
    files = total = 0
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            if name.startswith(".") and name.endswith(".tmp"):
                continue
            full = os.path.join(dirpath, name)
            if not is_data_file(os.path.relpath(full, root).replace(os.sep, "/")):
                continue
            try:
                total += os.stat(full).st_size
            except FileNotFoundError:  # removed while we walked
                continue
            files += 1
    return files, total


def info_dict(node: Any, path: str) -> tuple[dict[str, Any], Description]:
    """The JSON that ``info --json`` prints (and the description it came from)."""
    d = describe(node)
    info: dict[str, Any] = {"path": path, "node": d.kind, "label": d.label, "format": d.format, **d.fields}
    local = local_dir(path)
    if local is not None and d.is_data_file is not None and d.data_unit is not None:
        files, stored = data_files(local, d.is_data_file)
        info["stored"] = {"kind": d.data_unit[0], "files": files, "grid_cells": d.data_unit[1], "bytes": stored}
    return info, d


def _value_text(name: str, value: Any) -> str:
    if name in _SHAPES:
        return shape(value)
    if name in _BYTES:
        return format_bytes(value)
    if name == "fill_value":
        return fill_text(value)
    if isinstance(value, str):
        return value
    return json_text(value, None)


def _table(rows: list[dict[str, Any]]) -> list[str]:
    """Rows of dicts as aligned text columns (header first)."""
    cols = list(rows[0])
    cells = [[("-" if r.get(c) is None else r[c] if isinstance(r.get(c), str) else json_text(r.get(c), None))
              for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells]
    return lines


def print_info(info: dict[str, Any]) -> None:
    out(info["path"])
    out(f"  {'format':<11} {info['label']}")
    for name, value in info.items():
        if name in ("path", "node", "label", "format", "stored", *_TRAILING):
            continue
        out(f"  {_LABELS.get(name, name.replace('_', ' ')):<11} {_value_text(name, value)}")
    stored = info.get("stored")
    if stored is not None:
        size = info.get("nbytes")
        ratio = f" (compression {size / stored['bytes']:.2f}x)" if size and stored["bytes"] else ""
        out(f"  {'stored':<11} {stored['files']} of {stored['grid_cells']} {stored['kind']} files, "
            f"{format_bytes(stored['bytes'])}{ratio}")
    if "codecs" in info:
        out(f"  {'codecs':<11} {codecs_summary(info['codecs'] or [])}")
        out("  codecs JSON:")
        out("    " + json_text(info["codecs"]).replace("\n", "\n    "))
    for name in ("scales", "columns"):
        if info.get(name):
            out(f"  {name}:")
            for line in _table(info[name]):
                out("    " + line)
    if "attributes" in info:
        out("  attributes:")
        out("    " + json_text(info["attributes"]).replace("\n", "\n    "))


def run(args: argparse.Namespace) -> None:
    node = open_node(args.path, mode="r", scale=args.scale)
    info, _ = info_dict(node, args.path)
    if args.json:
        out(json_text(info))
    else:
        print_info(info)


def _scale(text: str) -> int | str:
    return int(text) if text.lstrip("-").isdigit() else text


def add_parser(add: AddCommand) -> None:
    p = add("info", "describe an array, group, volume, table or key-value store",
            "Print what PATH holds in its format's own terms: shape, dtype, chunking and fill value; "
            "Zarr v3 codecs; N5 compression and blockSize; every scale of a Neuroglancer precomputed "
            "volume (key, size, resolution, voxel offset, encoding, sharding); bcolz cparams and "
            "ctable columns; a uint64 key-value store's sharding spec and key count; attributes. For "
            "local paths also how many chunk or shard files hold data, and their size (metadata "
            "files are not counted).")
    p.add_argument("path", metavar="PATH", help="a node of any format (directory or URL)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.add_argument("--scale", type=_scale, default=None, metavar="KEY|INDEX",
                   help="precomputed volumes: the scale to describe as the array (default: the first)")
    p.set_defaults(func=run)
