"""Sniff a node's format from the metadata key present (no format ``if`` outside formats/)."""

from __future__ import annotations

from ..store.base import Store

__all__ = ["detect_format"]

# (format name, metadata key relative to the node); first match wins
_MARKERS: list[tuple[str, str]] = [
    ("zarr3", "zarr.json"),
    ("n5", "attributes.json"),  # N5 dataset or group (after zarr.json: a zarr.json wins)
    ("bcolz", "__rootdirs__"),  # ctable
    ("bcolz", "meta/sizes"),  # carray
    ("precomputed", "info"),  # Neuroglancer precomputed volume
]


async def detect_format(store: Store, path: str) -> str | None:
    """The format of the node at ``path``, or None when no known metadata is there."""
    for name, marker in _MARKERS:
        if await store.exists(f"{path}/{marker}" if path else marker):
            return name
    return None
