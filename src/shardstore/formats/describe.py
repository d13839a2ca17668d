"""Describe any opened node in its own format's terms (what ``shardstore info`` / ``ls`` print).

Every format has its own metadata worth showing (Zarr v3 codecs; N5 ``compression`` and
``blockSize``; every precomputed scale; bcolz ``cparams`` and ctable columns; a uint64 kv
store's sharding spec), its own name for a node (N5 dataset, bcolz ctable, ...) and its own
data files (chunk or shard files, never metadata documents). This module is the one place that
knows them, so that the command line stays format-free.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core.array import Array
from .bcolz.carray import CArray
from .bcolz.ctable import CTable
from .n5.nodes import Group as N5Group
from .precomputed.kv import ShardedKV
from .zarr3.nodes import Group as Zarr3Group

__all__ = ["Description", "children", "describe", "node_label"]

_BCOLZ_CHUNK = re.compile(r"(^|/)data/__\d+\.blp$")
_KV_FILE = re.compile(r"^[0-9a-f]+\.(shard|index|data)$")


@dataclass
class Description:
    """What ``info`` shows: ``fields`` (JSON-able, ordered) and which files hold the data."""

    label: str  # "N5 dataset", "bcolz ctable", ...
    format: str  # "zarr3", "n5", "precomputed", "bcolz", "precomputed_kv"
    fields: dict[str, Any] = field(default_factory=dict)
    #: relative path of a file below the node -> whether it is a chunk / shard file
    is_data_file: Callable[[str], bool] | None = None
    #: (what a data file is: "chunk" / "shard" / "block", how many the grid has)
    data_unit: tuple[str, int] | None = None
    #: what it is whatever the format: "array", "group", "table" or "kv store"
    kind: str = "array"


def node_label(node: Any) -> str:
    """The node's kind in its format's words, e.g. ``"N5 group"`` or ``"precomputed volume"``."""
    return describe(node).label


def children(node: Any) -> list[tuple[str, Any]]:
    """The child nodes ``ls`` walks: group members, ctable columns; nothing for arrays."""
    if isinstance(node, (Zarr3Group, N5Group)):
        return [(name, node[name]) for name in node]
    if isinstance(node, CTable):
        return [(name, node.cols[name]) for name in node.names]
    return []


def _grid_cells(shape: tuple[int, ...], unit: tuple[int, ...]) -> int:
    return math.prod(-(-s // u) for s, u in zip(shape, unit)) if shape else 1


def _array_fields(a: Array) -> dict[str, Any]:
    return {
        "shape": list(a.shape),
        "dtype": str(a.dtype),
        "chunks": list(a.chunks),
        "shards": list(a.shards) if a.shards is not None else None,
        "fill_value": a.fill_value,
        "dimension_names": list(a.dimension_names) if a.dimension_names is not None else None,
        "nbytes": a.nbytes,
    }


def _zarr3(a: Array) -> Description:
    fields = _array_fields(a)
    fields["codecs"] = a.metadata.get("codecs")
    fields["attributes"] = dict(a.attrs)
    unit = a.shards or a.chunks
    return Description("Zarr v3 array", "zarr3", fields, lambda rel: not rel.endswith("zarr.json"),
                       ("shard" if a.shards is not None else "chunk", _grid_cells(a.shape, unit)))


def _n5(a: Array) -> Description:
    meta = a.metadata
    fields = _array_fields(a)
    del fields["shards"], fields["dimension_names"]
    fields["dimensions"] = meta.get("dimensions")  # N5 order: the shape reversed
    fields["blockSize"] = meta.get("blockSize")
    fields["dataType"] = meta.get("dataType")
    fields["compression"] = meta.get("compression", meta.get("compressionType"))
    fields["attributes"] = dict(a.attrs)
    return Description("N5 dataset", "n5", fields, lambda rel: not rel.endswith("attributes.json"),
                       ("block", _grid_cells(a.shape, a.chunks)))


def _scale_row(i: int, scale: dict[str, Any]) -> dict[str, Any]:
    sharding = scale.get("sharding")
    return {
        "index": i,
        "key": scale["key"],
        "size": scale["size"],
        "resolution": scale["resolution"],
        "voxel_offset": scale.get("voxel_offset", [0, 0, 0]),
        "chunk_size": scale["chunk_sizes"][0],
        "encoding": scale["encoding"],
        "sharding": (f"shard_bits {sharding['shard_bits']}, minishard_bits {sharding['minishard_bits']}, "
                     f"preshift_bits {sharding['preshift_bits']}, hash {sharding['hash']}"
                     if isinstance(sharding, dict) else None),
    }


def _precomputed(a: Array) -> Description:
    info = a.metadata
    index = getattr(a.driver, "index", 0)
    scale = info["scales"][index]
    fields = _array_fields(a)
    del fields["shards"]  # uint64 sharding has no shard shape: the scales table shows it
    fields["axes"] = "[x, y, z, channel], relative to voxel_offset"
    fields["type"] = info.get("type")
    fields["num_channels"] = info.get("num_channels")
    fields["scale"] = f"{index} {scale['key']!r} of {len(info['scales'])}"
    fields["scales"] = [_scale_row(i, s) for i, s in enumerate(info["scales"])]
    fields["attributes"] = dict(a.attrs)
    key = scale["key"].strip("/")
    if scale.get("sharding"):
        unit = ("shard", 2 ** int(scale["sharding"]["shard_bits"]))
    else:
        unit = ("chunk", _grid_cells(tuple(scale["size"]), tuple(scale["chunk_sizes"][0])))
    return Description("precomputed volume", "precomputed", fields,
                       lambda rel: rel.startswith(f"{key}/"), unit)


def _bcolz_carray(a: CArray) -> Description:
    fields = _array_fields(a)
    del fields["shards"], fields["dimension_names"], fields["fill_value"]
    fields["chunklen"] = a.chunklen
    fields["cparams"] = a.cparams
    fields["dflt"] = a.dflt
    fields["cbytes"] = a.cbytes
    fields["attributes"] = dict(a.attrs)
    return Description("bcolz carray", "bcolz", fields, lambda rel: bool(_BCOLZ_CHUNK.search(rel)),
                       ("chunk", -(-len(a) // a.chunklen) if len(a) else 0))


def _bcolz_ctable(t: CTable) -> Description:
    columns = []
    cells = 0
    for name in t.names:
        col = t.cols[name]
        columns.append({"name": name, "dtype": str(col.dtype), "chunklen": col.chunklen, "cparams": col.cparams})
        cells += -(-len(col) // col.chunklen) if len(col) else 0
    fields = {"rows": len(t), "dtype": str(t.dtype), "columns": columns, "nbytes": t.nbytes, "cbytes": t.cbytes,
              "attributes": dict(t.attrs)}
    return Description("bcolz ctable", "bcolz", fields, lambda rel: bool(_BCOLZ_CHUNK.search(rel)),
                       ("chunk", cells), kind="table")


def _kv(kv: ShardedKV) -> Description:
    spec = kv.spec.to_json()
    fields = {"sharding": spec, "keys": len(kv)}
    return Description("uint64 kv store (neuroglancer_uint64_sharded_v1)", "precomputed_kv", fields,
                       lambda rel: bool(_KV_FILE.match(rel)), ("shard", 2 ** int(spec["shard_bits"])), kind="kv store")


def _group(g: Any, fmt: str, label: str) -> Description:
    return Description(label, fmt, {"children": g.keys(), "attributes": dict(g.attrs)}, kind="group")


def describe(node: Any) -> Description:
    """The description of an opened node of any format (``shardstore.open``'s result)."""
    if isinstance(node, CArray):
        return _bcolz_carray(node)
    if isinstance(node, CTable):
        return _bcolz_ctable(node)
    if isinstance(node, ShardedKV):
        return _kv(node)
    if isinstance(node, Zarr3Group):
        return _group(node, "zarr3", "Zarr v3 group")
    if isinstance(node, N5Group):
        return _group(node, "n5", "N5 group" if node.path else "N5 container (root group)")
    if isinstance(node, Array):
        by_format = {"zarr3": _zarr3, "n5": _n5, "precomputed": _precomputed}
        if node.format in by_format:
            return by_format[node.format](node)
        return Description(f"{node.format} array", node.format, _array_fields(node))
    raise TypeError(f"cannot describe {type(node).__name__}: not a shardstore node")
