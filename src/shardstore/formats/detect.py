"""Sniff a node's format from the metadata key present (no format ``if`` outside formats/)."""

from __future__ import annotations

import json

from ..errors import UnsupportedFeatureError
from ..store.base import Store

__all__ = ["FORMAT_NAMES", "detect_format"]

# (format name, metadata key relative to the node); first match wins
_MARKERS: list[tuple[str, str]] = [
    ("zarr3", "zarr.json"),
    ("n5", "attributes.json"),  # N5 dataset or group (after zarr.json: a zarr.json wins)
    ("bcolz", "__rootdirs__"),  # ctable
    ("bcolz", "meta/sizes"),  # carray
    ("precomputed", "info"),  # Neuroglancer precomputed volume, or a uint64 kv store (below)
]

#: what each detected name is called in messages
FORMAT_NAMES = {
    "zarr3": "Zarr v3",
    "n5": "N5",
    "bcolz": "bcolz",
    "precomputed": "Neuroglancer precomputed",
    "precomputed_kv": "neuroglancer_uint64_sharded_v1 key-value store",
}

_KV_TYPE = "neuroglancer_uint64_sharded_v1"


def _key(path: str, name: str) -> str:
    return f"{path}/{name}" if path else name


async def _info_kind(store: Store, path: str) -> str:
    """A precomputed ``info`` describes a volume (``scales``) or a sharded uint64 key-value
    store (the spec itself, or a mesh / skeleton info with a ``sharding`` member)."""
    raw = await store.get(_key(path, "info"))
    try:
        doc = json.loads(raw) if raw is not None else None
    except ValueError:
        return "precomputed"  # the volume parser names what is wrong with it
    if isinstance(doc, dict) and "scales" not in doc and (
        doc.get("@type") == _KV_TYPE or isinstance(doc.get("sharding"), dict)
    ):
        return "precomputed_kv"
    return "precomputed"


async def _inside_n5(store: Store, path: str) -> bool:
    """True for a directory with children inside an N5 container (an ancestor's
    ``attributes.json`` has the ``n5`` version): N5 groups need no attributes.json."""
    parts = path.split("/") if path else []
    if not parts:
        return False
    if not await _has_children(store, path):
        return False
    for i in range(len(parts) - 1, -1, -1):
        raw = await store.get(_key("/".join(parts[:i]), "attributes.json"))
        if raw is None:
            continue
        try:
            doc = json.loads(raw)
        except ValueError:
            return False
        return isinstance(doc, dict) and "n5" in doc
    return False


async def _has_children(store: Store, path: str) -> bool:
    async for _ in store.list_prefix(f"{path}/"):
        return True
    return False


async def detect_format(store: Store, path: str) -> str | None:
    """The format of the node at ``path`` ("zarr3", "n5", "bcolz", "precomputed",
    "precomputed_kv"), or None when no known metadata is there."""
    for name, marker in _MARKERS:
        if await store.exists(_key(path, marker)):
            return await _info_kind(store, path) if name == "precomputed" else name
    try:
        if await _inside_n5(store, path):
            return "n5"
    except UnsupportedFeatureError:  # a store that cannot list (HTTP): found by name only
        return None
    return None
