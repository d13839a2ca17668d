"""``shardstore ls``: a group's tree, a node's summary, or the nodes in a directory, each
labelled by its real format (Zarr v3 group, N5 dataset, precomputed volume, bcolz ctable, ...)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

from ..api import open as open_node
from ..errors import ShardStoreError
from ..formats.describe import children, describe
from ._common import AddCommand, local_dir, out, shape


def node_summary(node: Any) -> str:
    """``[label] shape dtype chunks ...`` in one line, for any format."""
    d = describe(node)
    f = d.fields
    parts = [f"[{d.label}]"]
    if "shape" in f:
        parts.append(f"{shape(f['shape'])} {f['dtype']} chunks {shape(f['chunks'])}")
        if f.get("shards") is not None:
            parts.append(f"shards {shape(f['shards'])}")
    if "scales" in f:
        parts.append(f"scale {f['scale']}: " + ", ".join(s["key"] for s in f["scales"]))
    if "rows" in f:
        parts.append(f"{f['rows']} rows, columns {', '.join(c['name'] for c in f['columns'])}")
    if "keys" in f:
        parts.append(f"{f['keys']} keys")
    return " ".join(parts)


def _walk(node: Any, name: str = "") -> Iterator[tuple[str, Any]]:
    for child_name, child in children(node):
        path = f"{name}/{child_name}" if name else child_name
        yield path, child
        yield from _walk(child, path)


def _is_container(node: Any) -> bool:
    return bool(describe(node).fields.get("children") is not None)


def _ls_directory(path: str) -> bool:
    """For a plain local directory, list the nodes directly inside it."""
    local = local_dir(path)
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
    out(f"{path}  [directory]")
    for name, node in found:
        slash = "/" if _is_container(node) else ""
        out(f"  {name}{slash}  {node_summary(node)}")
    return True


def run(args: argparse.Namespace) -> None:
    try:
        node = open_node(args.path, mode="r")
    except ShardStoreError:
        if _ls_directory(args.path):
            return
        raise
    out(f"{args.path}  {node_summary(node)}")
    for name, child in _walk(node):
        indent = "  " * name.count("/") + "  "
        leaf = name.rsplit("/", 1)[-1]
        slash = "/" if _is_container(child) else ""
        out(f"{indent}{leaf}{slash}  {node_summary(child)}")


def add_parser(add: AddCommand) -> None:
    p = add("ls", "list a group's tree (or summarize any node)",
            "List the nodes below PATH (groups, arrays, N5 datasets, precomputed volumes, bcolz "
            "carrays / ctables and their columns, uint64 key-value stores), each labelled by its "
            "format, with shape, dtype and chunking.")
    p.add_argument("path", metavar="PATH", help="a node of any format, or a directory holding nodes")
    p.set_defaults(func=run)
