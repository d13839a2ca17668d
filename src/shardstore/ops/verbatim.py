"""Chunk-byte copies: when a source chunk's stored bytes are a valid destination chunk as they are.

That holds when both arrays have the same dtype, fill value and chunk shape (in destination
axes) and store a chunk's elements with the same codec chain in the same element order:

- ``"all"``: Zarr v3 -> Zarr v3 with the same inner codecs (resharding, adding or removing
  shards: only the shard indexes are rebuilt); N5 -> N5 with the same compression;
  precomputed -> precomputed with the same encoding.
- ``"interior"``: precomputed ``raw`` <-> Zarr v3 ``[bytes (little endian)]`` with the axes
  reversed (``[x, y, z, c]`` x-fastest is ``[c, z, y, x]`` in C order, byte for byte). Edge
  chunks differ (precomputed clips them, Zarr pads them), so those are re-encoded.

Everything else is decoded and re-encoded.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from ..core.array import Array

__all__ = ["verbatim_mode", "src_coords", "is_interior"]


def _inner_codecs(a: Array) -> list[dict[str, Any]]:
    codecs = list(a.metadata.get("codecs", []))
    if codecs and codecs[0].get("name") == "sharding_indexed":
        codecs = list(codecs[0]["configuration"]["codecs"])
    return codecs


def _plain_bytes(codecs: list[dict[str, Any]], itemsize: int) -> bool:
    if len(codecs) != 1 or codecs[0].get("name") != "bytes":
        return False
    endian = (codecs[0].get("configuration") or {}).get("endian", "little")
    return itemsize == 1 or endian == "little"


def _scale(a: Array) -> dict[str, Any]:
    return dict(a.metadata["scales"][getattr(a.driver, "index", 0)])


def _same_fill(a: Array, b: Array) -> bool:
    fa = np.array(a.fill_value if a.fill_value is not None else 0, dtype=a.dtype)
    fb = np.array(b.fill_value if b.fill_value is not None else 0, dtype=b.dtype)
    return fa.tobytes() == fb.tobytes()


def verbatim_mode(src: Array, dst: Array, axis_map: tuple[int | None, ...]) -> str | None:
    """``"all"``, ``"interior"`` or None (decode and re-encode): see the module docstring."""
    if src.dtype != dst.dtype or not _same_fill(src, dst):
        return None
    if tuple(src.chunks[m] if m is not None else 1 for m in axis_map) != tuple(dst.chunks):
        return None
    identity = axis_map == tuple(range(src.ndim))
    pair = (src.format, dst.format)
    if pair == ("zarr3", "zarr3") and identity:
        same = json.dumps(_inner_codecs(src), sort_keys=True) == json.dumps(_inner_codecs(dst), sort_keys=True)
        return "all" if same else None
    if pair == ("n5", "n5") and identity:
        return "all" if src.metadata.get("compression") == dst.metadata.get("compression") else None
    if pair == ("precomputed", "precomputed") and identity:
        keys = ("encoding", "compressed_segmentation_block_size", "jpeg_quality", "png_level")
        a, b = _scale(src), _scale(dst)
        return "all" if all(a.get(k) == b.get(k) for k in keys) else None
    if "precomputed" in pair and "zarr3" in pair:
        pre, zarr = (src, dst) if src.format == "precomputed" else (dst, src)
        mapped = [m for m in axis_map if m is not None]
        reversed_axes = mapped == sorted(mapped, reverse=True)
        if (_scale(pre).get("encoding") == "raw" and _plain_bytes(_inner_codecs(zarr), zarr.dtype.itemsize)
                and reversed_axes):
            return "interior"
    return None


def src_coords(coords: tuple[int, ...], axis_map: tuple[int | None, ...], src_ndim: int) -> tuple[int, ...]:
    """The source chunk holding destination chunk ``coords`` (chunk shapes equal per axis)."""
    out = [0] * src_ndim
    for d, m in enumerate(axis_map):
        if m is not None:
            out[m] = coords[d]
    return tuple(out)


def is_interior(a: Array, coords: tuple[int, ...]) -> bool:
    """Whether chunk ``coords`` of ``a`` lies wholly inside the array (not clipped or padded)."""
    return all((c + 1) * n <= s for c, n, s in zip(coords, a.chunks, a.shape))
