"""The rows of ``shardstore demo``: where and how each format stores the demo's data.

Each array format writes the EM-like image and its segmentation as the base level of a
pyramid (OME-Zarr 0.5 groups, an N5 container with ``raw/s0`` and ``labels/s0``, two
sharded precomputed volumes); bcolz, which has no N-d arrays, holds a ctable of per-label
statistics (voxel count, mean intensity, centroid), one row per segment. Everything the demo
creates carries the ``DEMO_MARKER`` attribute, so a re-run may replace it and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .core.array import Array
from .formats import n5, precomputed, zarr3
from .formats.precomputed.scales import sharding_for_scale

__all__ = ["DEMO_FORMATS", "DEMO_MARKER", "KINDS", "VOXEL_NM", "DemoFormat", "DemoGrid", "demo_grid"]

#: attribute marking what the demo wrote, so re-running the demo may replace it
DEMO_MARKER = "shardstore_demo"
#: the two datasets of each array format
KINDS = ("image", "segmentation")
#: the synthetic volume's voxel size in nanometres (z, y, x), as written to each format
VOXEL_NM = (8, 8, 8)


@dataclass(frozen=True)
class DemoGrid:
    """The demo's chunking for a volume: chunk edge 64 and shard edge 256, clipped to fit."""

    chunks: tuple[int, ...]
    shards: tuple[int, ...]


def demo_grid(shape: Sequence[int], chunk: int = 64, shard: int = 256) -> DemoGrid:
    """Chunks of ``chunk`` (at most the array's extent) and shards of ``shard`` (at most the
    array's extent rounded up to whole chunks), so small volumes still make sense."""
    chunks = tuple(max(1, min(chunk, s)) for s in shape)
    shards = tuple(min(shard - shard % c or c, -(-s // c) * c) for s, c in zip(shape, chunks))
    return DemoGrid(chunks, shards)


#: create(directory, kind, shape (z, y, x), dtype, grid) -> the empty, writable base array
Create = Callable[[Path, str, tuple[int, ...], np.dtype, DemoGrid], Array]


@dataclass(frozen=True)
class DemoFormat:
    """One row of the demo.

    ``dirname`` / ``labels_dirname``: the base arrays (relative to the demo directory);
    ``containers``: the top-level directories this row writes (checked before replacing);
    ``pyramid``: the location ``downsample`` builds the pyramid of, per kind; ``xyz``: the
    arrays are ``[x, y, z, channel]`` (precomputed), so the volume goes in transposed.
    ``create`` is None for the table row (bcolz).
    """

    name: str
    title: str
    dirname: str
    containers: tuple[str, ...]
    create: Create | None = None
    labels_dirname: str | None = None
    pyramid: dict[str, str] | None = None
    xyz: bool = False

    def base(self, kind: str) -> str:
        return self.dirname if kind == "image" else str(self.labels_dirname)


def _marker(kind: str) -> dict[str, Any]:
    return {DEMO_MARKER: {"generator": "em_like_pair", "kind": kind}}


# --------------------------------------------------------------------------- Zarr v3

def _create_zarr3(directory: Path, kind: str, shape: tuple[int, ...], dtype: np.dtype, grid: DemoGrid) -> Array:
    group = directory / ("em.ome.zarr" if kind == "image" else "labels.ome.zarr")
    # the base level's voxel size, which downsample carries to every level
    ome = {"version": "0.5", "multiscales": [{
        "axes": [{"name": n, "type": "space", "unit": "nanometer"} for n in ("z", "y", "x")],
        "datasets": [{"path": "0", "coordinateTransformations": [{"type": "scale", "scale": list(VOXEL_NM)}]}],
    }]}
    zarr3.create_group(group, attributes={**_marker(kind), "ome": ome}, mode="w")
    return zarr3.create(
        group / "0", shape=shape, dtype=dtype, chunks=grid.chunks, shards=grid.shards,
        dimension_names=["z", "y", "x"], attributes=_marker(kind), mode="w",
    )


# --------------------------------------------------------------------------- N5

def _create_n5(directory: Path, kind: str, shape: tuple[int, ...], dtype: np.dtype, grid: DemoGrid) -> Array:
    container = directory / "em.n5"
    if kind == "image":  # first of the two: (re)make the container's root group
        n5.create_group(container, attributes=_marker("container"), mode="w")
    name = "raw" if kind == "image" else "labels"
    return n5.create(
        container, f"{name}/s0", shape=shape, dtype=dtype, block_size=grid.chunks, mode="w",
        attributes={**_marker(kind), "pixelResolution": {"unit": "nm", "dimensions": list(VOXEL_NM[::-1])}},
    )


# --------------------------------------------------------------------------- precomputed

def _create_precomputed(directory: Path, kind: str, shape: tuple[int, ...], dtype: np.dtype, grid: DemoGrid) -> Array:
    size = list(shape[::-1])  # x, y, z
    chunk = list(grid.chunks[::-1])
    encoding = "compressed_segmentation" if kind == "segmentation" else "raw"
    scale: dict[str, Any] = {
        "size": size, "resolution": list(VOXEL_NM[::-1]), "chunk_size": chunk, "encoding": encoding,
        # sharded as igneous shards, with shards no bigger than the demo's Zarr shards
        "sharding": sharding_for_scale(size, chunk, dtype, encoding,
                                       uncompressed_shard_bytes=int(np.prod(grid.shards)) * dtype.itemsize),
    }
    return precomputed.create(
        directory / ("em.precomputed" if kind == "image" else "labels.precomputed"), data_type=dtype,
        type=kind, scales=[scale], attributes=_marker(kind), mode="w",
    )


#: the demo's formats, in the order they run
DEMO_FORMATS: dict[str, DemoFormat] = {
    f.name: f
    for f in [
        DemoFormat("zarr3", "Zarr v3, sharding_indexed, OME-Zarr 0.5 pyramid", "em.ome.zarr/0",
                   ("em.ome.zarr", "labels.ome.zarr"), _create_zarr3, "labels.ome.zarr/0",
                   {"image": "em.ome.zarr", "segmentation": "labels.ome.zarr"}),
        DemoFormat("n5", "N5, gzip blocks, s0..sN pyramid (n5-viewer / BigDataViewer)", "em.n5/raw/s0",
                   ("em.n5",), _create_n5, "em.n5/labels/s0",
                   {"image": "em.n5/raw", "segmentation": "em.n5/labels"}),
        DemoFormat("precomputed", "Neuroglancer precomputed, sharded, scales pyramid", "em.precomputed",
                   ("em.precomputed", "labels.precomputed"), _create_precomputed, "labels.precomputed",
                   {"image": "em.precomputed", "segmentation": "labels.precomputed"}, xyz=True),
        DemoFormat("bcolz", "bcolz ctable: per-label statistics of the segmentation", "label_stats.bcolz",
                   ("label_stats.bcolz",)),
    ]
}
