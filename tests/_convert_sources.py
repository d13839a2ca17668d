"""Source arrays of every kind ``convert`` reads, and the arrays a conversion must produce.

Every source holds the same volume. ``canon`` is it in C order ``[c, z, y, x]`` (no c axis
for one channel), as Zarr and N5 hold it; precomputed holds ``[x, y, z, c]``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import shardstore
from shardstore.formats.precomputed.scales import sharding_for_scale

#: source kinds: (format, sharded, channels, segmentation)
KINDS = {
    "zarr3": ("zarr3", False, 1, False),
    "zarr3-sharded": ("zarr3", True, 1, False),
    "zarr3-2ch": ("zarr3", True, 2, False),
    "n5": ("n5", False, 1, False),
    "precomputed": ("precomputed", False, 1, False),
    "precomputed-sharded": ("precomputed", True, 1, False),
    "precomputed-2ch": ("precomputed", False, 2, False),
    "precomputed-seg": ("precomputed", True, 1, True),
}
SHAPE_ZYX = (20, 36, 44)  # edges on every axis for 16^3 chunks
RESOLUTION_XYZ = [4, 6, 40]
OFFSET_XYZ = [10, 20, 30]


def volume(channels: int, segmentation: bool) -> np.ndarray:
    rng = np.random.default_rng(7)
    shape = ((channels,) if channels > 1 else ()) + SHAPE_ZYX
    if segmentation:  # labels in blocks, as segmentations are (compressed_segmentation likes them)
        coarse = rng.integers(0, 2**40, size=tuple(-(-n // 4) for n in shape), dtype=np.uint64)
        full = coarse.repeat(4, 0).repeat(4, 1).repeat(4, 2)
        return full[tuple(slice(0, n) for n in shape)].copy()
    return rng.integers(0, 60000, size=shape, dtype=np.uint16)


def as_precomputed(canon: np.ndarray) -> np.ndarray:
    """``[c, z, y, x]`` / ``[z, y, x]`` -> ``[x, y, z, c]``."""
    return canon.transpose(3, 2, 1, 0) if canon.ndim == 4 else canon.T[..., None]


def make_source(kind: str, root: Path) -> tuple[str, np.ndarray]:
    """(path of a new source of ``kind`` below ``root``, its volume in ``[c, ]z, y, x``)."""
    fmt, sharded, channels, seg = KINDS[kind]
    canon = volume(channels, seg)
    path = root / f"src-{kind}"
    if fmt == "zarr3":
        names = (["c"] if channels > 1 else []) + ["z", "y", "x"]
        chunks = ((channels,) if channels > 1 else ()) + (16, 16, 16)
        shards = ((channels,) if channels > 1 else ()) + (32, 32, 32) if sharded else None
        a = shardstore.zarr3.create(path, shape=canon.shape, dtype=canon.dtype, chunks=chunks, shards=shards,
                                    dimension_names=names, attributes={"note": "zarr source"})
        a[...] = canon
    elif fmt == "n5":
        a = shardstore.n5.create(path, shape=canon.shape, dtype=canon.dtype, block_size=(16, 16, 16),
                                 attributes={"note": "n5 source", "resolution": RESOLUTION_XYZ,
                                             "units": ["nm", "nm", "nm"]})
        a[...] = canon
    else:
        size = list(SHAPE_ZYX[::-1])
        scale: dict = {"size": size, "chunk_size": [16, 16, 16], "resolution": RESOLUTION_XYZ,
                       "voxel_offset": OFFSET_XYZ, "encoding": "compressed_segmentation" if seg else "raw"}
        if sharded:
            scale["sharding"] = sharding_for_scale(size, [16, 16, 16], canon.dtype, num_channels=channels,
                                                   uncompressed_shard_bytes=32 * 32 * 32 * canon.dtype.itemsize)
        a = shardstore.precomputed.create(path, data_type=canon.dtype, scales=[scale], num_channels=channels,
                                          type="segmentation" if seg else "image",
                                          attributes={"mesh": "mesh"} if seg else None)
        a[...] = as_precomputed(canon)
    return str(path), canon
