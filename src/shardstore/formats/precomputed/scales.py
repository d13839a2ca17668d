"""Deriving a downsampled scale from a base scale, as CloudVolume and igneous do.

- ``voxel_offset = floor(base_offset / factor)`` and ``size = ceil(base_size / factor)``
  (CloudVolume's ``add_scale``, which igneous uses); ``resolution = base_resolution * factor``.
- ``sharding_for_scale``: the ``neuroglancer_uint64_sharded_v1`` parameters that CloudVolume's
  ``compute_shard_params_for_image`` recommends (igneous' choice for each downsampled scale):
  identity hash, shards of a power-of-two number of chunks up to an uncompressed byte target,
  shard index at most 8 KiB, minishard indexes of at most a few thousand chunks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import MetadataError

__all__ = ["IGNEOUS_SHARD_BYTES", "downscaled_members", "sharding_for_scale"]

#: igneous' default uncompressed bytes of one shard (``MEMORY_TARGET``)
IGNEOUS_SHARD_BYTES = int(3.5e9)


def downscaled_members(base: dict[str, Any], factor: Sequence[float]) -> dict[str, Any]:
    """``resolution``, ``voxel_offset`` and ``size`` of ``base`` (an ``info`` scale) divided
    by ``factor`` (x, y, z), rounded as CloudVolume / igneous round them."""
    if len(factor) != 3 or any(not f > 0 for f in factor):
        raise MetadataError(f"a scale factor is three positive numbers [x, y, z], got {list(factor)}")
    res = [r * f for r, f in zip(base["resolution"], factor)]
    return {
        "resolution": [int(r) if float(r).is_integer() else r for r in res],
        "voxel_offset": [math.floor(o / f) for o, f in zip(base.get("voxel_offset", [0, 0, 0]), factor)],
        "size": [math.ceil(s / f) for s, f in zip(base["size"], factor)],
    }


def sharding_for_scale(
    size: Sequence[int],
    chunk_size: Sequence[int],
    dtype: Any,
    encoding: str = "raw",
    *,
    num_channels: int = 1,
    uncompressed_shard_bytes: int = IGNEOUS_SHARD_BYTES,
    max_shard_index_bytes: int = 8192,
    max_minishard_index_bytes: int = 40000,
    max_labels_per_minishard: int = 4000,
) -> dict[str, Any]:
    """Sharding parameters for a scale of ``size`` voxels in ``chunk_size`` chunks, chosen by
    the rules of CloudVolume's ``compute_shard_params_for_image`` (same results)."""
    byte_width = np.dtype(dtype).itemsize * num_channels
    grid = [-(-int(s) // int(c)) for s, c in zip(size, chunk_size)]
    num_chunks = math.prod(grid)
    chunk_voxels = math.prod(int(c) for c in chunk_size)
    max_bits = sum(math.ceil(math.log2(g)) for g in grid)

    chunks_per_shard = math.ceil(uncompressed_shard_bytes / (chunk_voxels * byte_width))
    chunks_per_shard = 2 ** int(math.log2(chunks_per_shard))
    if num_chunks < chunks_per_shard:
        chunks_per_shard = 2 ** math.ceil(math.log2(num_chunks))
    num_shards = num_chunks / chunks_per_shard

    def bits() -> tuple[int, int]:
        shard_bits = math.ceil(math.log2(num_shards))
        preshift = min(math.ceil(math.log2(chunks_per_shard)), max_bits - shard_bits)
        return shard_bits, preshift

    shard_bits, preshift = bits()
    per_minishard: float = chunks_per_shard
    minishard_bits = 0
    while per_minishard > max_labels_per_minishard:
        per_minishard /= 2
        minishard_bits += 1
        minishard_index_bytes = 3 * 8 * per_minishard  # three uint64 per chunk
        shard_index_bytes = 2 * 8 * 2 ** minishard_bits  # two uint64 per minishard
        if (minishard_index_bytes > max_minishard_index_bytes and minishard_bits > preshift) or (
            shard_index_bytes > max_shard_index_bytes
        ):
            minishard_bits -= 1
            num_shards *= 2
            shard_bits, preshift = bits()

    # preshift + minishard bits = chunks per shard: the minishard bits come out of preshift;
    # rounding slack goes to the shard bits
    preshift -= minishard_bits
    if int(size[2]) == int(chunk_size[2]):  # a single z chunk: morton codes skip z bits
        extra = preshift // 3
        i = 0
        while i < extra:
            max_bits += 1
            preshift += 1
            if preshift % 3 != 0:
                i += 1
    shard_bits = max(max_bits - preshift - minishard_bits, 0)
    if max_bits > 64 or preshift < 0:
        raise MetadataError(f"no sharding fits a scale of size {list(size)} in chunks {list(chunk_size)}")
    lossy = encoding in ("jpeg", "png")
    return {
        "@type": "neuroglancer_uint64_sharded_v1",
        "hash": "identity",
        "preshift_bits": int(preshift),
        "minishard_bits": int(minishard_bits),
        "shard_bits": int(shard_bits),
        "minishard_index_encoding": "gzip",
        "data_encoding": "raw" if lossy else "gzip",
    }
