"""``shardstore ls``: a group's tree, an array's summary, or the nodes in a directory."""

from __future__ import annotations

import argparse

from ..api import open as open_node
from ..core.array import Array
from ..errors import ShardStoreError
from ._common import AddCommand, local_dir, out, summary, walk


def _ls_directory(path: str) -> bool:
    """For a plain local directory, list the arrays and groups directly inside it."""
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
        if isinstance(node, Array):
            out(f"  {name}  [{node.format} array] {summary(node)}")
        else:
            out(f"  {name}/  [zarr3 group]")
    return True


def run(args: argparse.Namespace) -> None:
    try:
        node = open_node(args.path, mode="r")
    except ShardStoreError:
        if _ls_directory(args.path):
            return
        raise
    if isinstance(node, Array):
        out(f"{args.path}  [{node.format} array] {summary(node)}")
        return
    out(f"{args.path}  [zarr3 group]")
    for name, child in walk(node):
        if not name:
            continue
        indent = "  " * name.count("/") + "  "
        leaf = name.rsplit("/", 1)[-1]
        if isinstance(child, Array):
            out(f"{indent}{leaf}  {summary(child)}")
        else:
            out(f"{indent}{leaf}/")


def add_parser(add: AddCommand) -> None:
    p = add("ls", "list a group's tree (or summarize an array)",
            "List the arrays and groups below PATH with their shape, dtype and chunking.")
    p.add_argument("path", metavar="PATH", help="group, array, or a directory holding them")
    p.set_defaults(func=run)
