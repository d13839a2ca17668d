"""Where each format keeps a pyramid: how the levels are named, created and described.

- precomputed: one scale per level in the volume's ``info`` (``add_scale``: resolution, size,
  voxel_offset from the base scale; chunk size and encoding of the base; sharding parameters
  chosen for each level's size as igneous chooses them when the base is sharded).
- Zarr v3: an OME-Zarr 0.5 image group: arrays ``0, 1, 2, ...`` (or the base's name with the
  level number) beside the base, and the group's ``ome.multiscales`` (axes with types and
  units, per level a ``scale`` and a ``translation`` that keeps voxel centres aligned).
- N5: datasets ``s0, s1, ...`` in the base's group, each with ``downsamplingFactors`` (and
  ``pixelResolution``) as BigDataViewer reads them, and the group's ``scales`` /
  ``pixelResolution`` / ``downsamplingFactors`` as n5-viewer reads them.

Factors are given in x, y, z order everywhere (as Neuroglancer and igneous give them) and
mapped onto the array's axes here: precomputed arrays are ``[x, y, z, channel]``; N5 arrays
are C order ``[..., z, y, x]``; Zarr arrays use their ``dimension_names`` when those name x,
y, z, else the last axes are taken as ``z, y, x`` (the OME-Zarr order).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..core.array import Array
from ..errors import ShardStoreError
from ..formats import n5, precomputed, zarr3
from ..formats.precomputed.scales import IGNEOUS_SHARD_BYTES, sharding_for_scale
from .downsample_kernels import downsample_shape

__all__ = ["PyramidTarget", "open_target"]

_SPATIAL = ("x", "y", "z")


@dataclass
class PyramidTarget:
    """A base array and how its format stores the levels above it."""

    base: Array
    location: str  # what the user named, for messages
    spatial_axes: tuple[int, ...]  # array axis of x, y, z (as many as the array has)
    scan: str  # "F": x is axis 0 (precomputed); "C": x is the last axis
    resolution: tuple[float, ...] = ()  # per array axis
    units: tuple[str | None, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def axis_factor(self, xyz: Sequence[int]) -> tuple[int, ...]:
        """A factor per array axis from a factor in x, y, z order (1 on other axes)."""
        if len(xyz) > len(self.spatial_axes):
            raise ShardStoreError(
                f"{self.location}: factor {list(xyz)} (x, y, z) has more entries than the array's "
                f"{len(self.spatial_axes)} spatial axes")
        out = [1] * self.base.ndim
        for axis, f in zip(self.spatial_axes, xyz):
            out[axis] = int(f)
        return tuple(out)

    def create_levels(self, factors: Sequence[tuple[int, ...]],
                      footprints: Sequence[tuple[int, ...] | None]) -> list[Array]:
        """Create the (empty) level arrays for cumulative per-axis ``factors`` and write the
        pyramid's metadata; returns them, writable. ``footprints``: per level, the extent one
        block of the pass writes (None: the level is written whole at the end); shards are
        chosen so that these writes are whole shards where the format allows."""
        return _CREATORS[self.base.format](self, factors, footprints)

    def open_levels(self, count: int) -> list[Array]:
        """The levels 1..count that ``create_levels`` made, opened again for writing (what a
        task on another process or machine does: arrays travel as locations, not objects)."""
        from ..api import open as open_node

        storage = self.extra["storage"]
        if self.base.format == "precomputed":
            return [open_node(self.location, mode="r+", scale=k, **storage) for k in range(1, count + 1)]
        parent, name = _split(self.location)
        return [open_node(f"{parent}/{_next_name(name, k, self.location)}", mode="r+", **storage)
                for k in range(1, count + 1)]


# --------------------------------------------------------------------------- opening

def _split(location: str) -> tuple[str, str]:
    """``("parent", "name")`` of a path or URL."""
    text = str(location).rstrip("/")
    if "/" not in text:
        return ".", text
    parent, name = text.rsplit("/", 1)
    return parent or "/", name


def _next_name(name: str, level: int, where: str) -> str:
    m = re.fullmatch(r"(.*?)(\d+)", name)
    if m is None:
        raise ShardStoreError(
            f"{where}: a pyramid's levels are named by number ('0', '1', ... for OME-Zarr, "
            f"'s0', 's1', ... for N5); the base array is named {name!r}. Copy it to '<group>/0' "
            "(Zarr) or '<group>/s0' (N5), e.g. with `shardstore copy`, and downsample that")
    return f"{m.group(1)}{int(m.group(2)) + level}"


def open_target(location: str | Path, **storage: Any) -> PyramidTarget:
    """The base array at ``location`` (an array, or a pyramid group: OME-Zarr multiscales,
    an N5 group with ``s0``, a precomputed volume) opened for writing its pyramid."""
    from ..api import open as open_node

    location = str(location)
    try:
        node = open_node(location, mode="r+", **storage)
    except ShardStoreError:
        node = None  # an N5 group without attributes.json: look for its s0
    if not isinstance(node, Array):
        node, location = _base_of_group(location, node, storage)
    fmt = node.format
    if fmt == "precomputed":
        info = precomputed.read_info(location, **storage)  # scale 0 is the base
        res = tuple(float(r) for r in info["scales"][0]["resolution"]) + (1.0,)
        return PyramidTarget(node, location, (0, 1, 2), "F", res, ("nanometer",) * 3 + (None,),
                             {"info": info, "storage": storage})
    if fmt == "n5":
        nd = node.ndim
        spatial = tuple(nd - 1 - i for i in range(min(3, nd)))
        pr = node.attrs.get("pixelResolution") or {}
        dims = pr.get("dimensions") if isinstance(pr, dict) else pr if isinstance(pr, list) else None
        n5_res = [1.0] * nd
        for axis, r in zip(spatial, dims or []):
            n5_res[axis] = float(r)
        unit = pr.get("unit", "um") if isinstance(pr, dict) else "um"
        return PyramidTarget(node, location, spatial, "C", tuple(n5_res), tuple(unit for _ in range(nd)),
                             {"storage": storage})
    if fmt == "zarr3":
        names = node.dimension_names or ()
        nd = node.ndim
        if all(n in names for n in _SPATIAL[:min(3, nd)]):
            spatial = tuple(names.index(n) for n in _SPATIAL[:min(3, nd)])
        else:
            spatial = tuple(nd - 1 - i for i in range(min(3, nd)))
        ome = read_ome_base(location, storage)
        zarr_res = [1.0] * nd
        units: list[str | None] = [None] * nd
        for axis in spatial:
            units[axis] = "nanometer"
        if ome is not None:
            for i, ax in enumerate(ome.axes[:nd]):
                units[i] = ax.get("unit", units[i])
            if ome.scale is not None:
                zarr_res = ome.scale
        return PyramidTarget(node, location, spatial, "C", tuple(zarr_res), tuple(units), {"storage": storage})
    raise ShardStoreError(f"{location}: cannot build a pyramid for format {fmt!r} (precomputed, Zarr v3, N5 can)")


def _base_of_group(location: str, group: Any, storage: dict[str, Any]) -> tuple[Array, str]:
    from ..api import open as open_node

    attrs = dict(group.attrs) if group is not None else {}
    ms = (attrs.get("ome") or {}).get("multiscales") or attrs.get("multiscales")
    candidates = [ms[0]["datasets"][0]["path"]] if ms else ["0", "s0"]
    for name in candidates:
        path = f"{location.rstrip('/')}/{name}"
        try:
            node = open_node(path, mode="r+", **storage)
        except ShardStoreError:
            continue
        if isinstance(node, Array):
            return node, path
    what = "a group without a base level" if group is not None else "no array or group found"
    raise ShardStoreError(f"{location}: {what} (looked for the array itself and for {candidates} in it)")


@dataclass(frozen=True)
class OmeBase:
    """What an OME-Zarr ``multiscales`` says of its base level (dataset 0): the axes, and
    the ``scale`` / ``translation`` of its coordinate transformations (None: not given)."""

    axes: list[dict[str, Any]]
    scale: list[float] | None
    translation: list[float] | None


def read_ome_base(location: str, storage: dict[str, Any]) -> OmeBase | None:
    """The OME-Zarr metadata of the group holding the array at ``location``, or None when
    there is no such group or it has no ``ome.multiscales`` (downsample and convert read it)."""
    parent, _ = _split(location)
    try:
        group = zarr3.open_group(parent, **storage)
    except ShardStoreError:
        return None
    ms = (dict(group.attrs).get("ome") or {}).get("multiscales")
    if not ms:
        return None
    datasets = ms[0].get("datasets", [])
    scale = translation = None
    for t in (datasets[0].get("coordinateTransformations", []) if datasets else []):
        if t.get("type") == "scale":
            scale = [float(v) for v in t.get("scale", [])]
        elif t.get("type") == "translation":
            translation = [float(v) for v in t.get("translation", [])]
    return OmeBase(ms[0].get("axes", []), scale, translation)


# --------------------------------------------------------------------------- creating levels

def _xyz(target: PyramidTarget, per_axis: Sequence[int]) -> list[int]:
    return [int(per_axis[a]) for a in target.spatial_axes]


Footprints = Sequence[tuple[int, ...] | None]


def _precomputed_levels(target: PyramidTarget, factors: Sequence[tuple[int, ...]], footprints: Footprints) -> list[Array]:
    info = target.extra["info"]
    storage = target.extra["storage"]
    base = info["scales"][0]
    precomputed.remove_scales(target.location, keep=1, **storage)  # an earlier pyramid goes, as in igneous
    out = []
    itemsize = np.dtype(info["data_type"]).itemsize * info["num_channels"]
    for f, footprint in zip(factors, footprints):
        xyz = _xyz(target, f)
        size = [math.ceil(s / k) for s, k in zip(base["size"], xyz)]
        chunk = [min(int(c), s) for c, s in zip(base["chunk_sizes"][0], size)]
        members: dict[str, Any] = {"chunk_sizes": [chunk]}
        if base.get("sharding") is not None:
            # igneous' rules; a streamed level's shards hold at most what one block writes
            shard_bytes = IGNEOUS_SHARD_BYTES
            if footprint is not None:
                grid = [-(-s // c) for s, c in zip(size, chunk)]
                fits = _morton_chunks_within(grid, [f // c for f, c in zip(_xyz(target, footprint), chunk)])
                shard_bytes = min(shard_bytes, fits * math.prod(chunk) * itemsize)
            members["sharding"] = sharding_for_scale(
                size, chunk, info["data_type"], base["encoding"], num_channels=info["num_channels"],
                uncompressed_shard_bytes=max(shard_bytes, 1))
        out.append(precomputed.add_scale(target.location, factor=xyz, replace=True, **members, **storage))
    return out


def _morton_chunks_within(grid: Sequence[int], box: Sequence[int]) -> int:
    """How many chunks the largest precomputed shard holds that fits whole in ``box`` (chunks
    per axis, a footprint whose origin is a multiple of it): a shard of ``2**b`` chunks spans
    the first ``b`` bits of the compressed Morton code, which take one bit of x, y, z in turn
    (skipping an axis whose grid has no bits left), so its extent doubles axis by axis."""
    if any(b < 1 for b in box):  # the footprint is less than a chunk: one chunk a shard
        return 1
    bits = [max(int(g) - 1, 0).bit_length() for g in grid]
    extent = [1] * len(grid)
    count = 1
    while any(bits):
        for axis in range(len(grid)):
            if not bits[axis]:
                continue
            if box[axis] % (extent[axis] * 2):
                return count
            extent[axis] *= 2
            bits[axis] -= 1
            count *= 2
    return count


def _group_location(target: PyramidTarget) -> tuple[str, str]:
    parent, name = _split(target.location)
    if target.base.format == "zarr3":
        try:
            zarr3.open_group(parent, **target.extra["storage"])
        except ShardStoreError:
            _base_of_group_error(target)
    return parent, name


def _base_of_group_error(target: PyramidTarget) -> None:
    raise ShardStoreError(
        f"{target.location}: an OME-Zarr pyramid is a group of arrays '0', '1', ...; this array has "
        "no parent group. Copy it to '<group>/0' (e.g. `shardstore copy A G/0`) and downsample that")


def _inner_codecs(meta: dict[str, Any]) -> tuple[list[Any], list[Any] | None]:
    codecs = meta.get("codecs", [])
    if len(codecs) == 1 and codecs[0].get("name") == "sharding_indexed":
        config = codecs[0]["configuration"]
        return list(config["codecs"]), list(config.get("index_codecs") or [])
    return list(codecs), None


def _level_shards(chunks: Sequence[int], base_shards: Sequence[int], shape: Sequence[int],
                  footprint: Sequence[int] | None) -> tuple[int, ...]:
    """The base's shard edge clipped to the level, or, for a streamed level, the largest
    whole-chunk shard that divides what one block writes (so those writes are whole shards)."""
    out = []
    fps: Sequence[int | None] = footprint if footprint is not None else [None] * len(chunks)
    for c, sh, s, fp in zip(chunks, base_shards, shape, fps):
        edge = min(sh, -(-s // c) * c)
        if fp is not None and fp % c == 0:
            edge = min(edge, c * math.gcd(fp // c, sh // c))
        out.append(edge)
    return tuple(out)


def _zarr3_levels(target: PyramidTarget, factors: Sequence[tuple[int, ...]], footprints: Footprints) -> list[Array]:
    storage = target.extra["storage"]
    parent, name = _group_location(target)
    base = target.base
    inner, index = _inner_codecs(base.metadata)
    out = []
    names = [name]
    for level, (f, footprint) in enumerate(zip(factors, footprints), start=1):
        shape = downsample_shape(base.shape, f)
        chunks = tuple(min(c, s) for c, s in zip(base.chunks, shape))
        shards = None
        if base.shards is not None:
            shards = _level_shards(chunks, base.shards, shape, footprint)
        level_name = _next_name(name, level, target.location)
        names.append(level_name)
        kwargs: dict[str, Any] = {"index_codecs": index} if index is not None else {}
        out.append(zarr3.create(
            f"{parent}/{level_name}", shape=shape, dtype=base.dtype, chunks=chunks, shards=shards,
            codecs=inner, fill_value=base.fill_value, dimension_names=base.dimension_names,
            mode="w", **kwargs, **storage))
    group = zarr3.open_group(parent, mode="r+", **storage)
    group.attrs["ome"] = {"version": "0.5", "multiscales": [_multiscales(target, names, factors)]}
    return out


def _axis_type(name: str | None) -> str | None:
    if name in _SPATIAL:
        return "space"
    if name in ("t", "time"):
        return "time"
    if name in ("c", "channel"):
        return "channel"
    return None


def _multiscales(target: PyramidTarget, names: list[str], factors: Sequence[tuple[int, ...]]) -> dict[str, Any]:
    """OME-Zarr 0.5 ``multiscales[0]``: a voxel of level k spans ``factor`` base voxels, so its
    centre sits ``(factor - 1) / 2`` base voxels from the base grid's origin."""
    nd = target.base.ndim
    dim_names = list(target.base.dimension_names or [None] * nd)
    default = ["z", "y", "x"][-nd:] if nd <= 3 else [f"d{i}" for i in range(nd - 3)] + ["z", "y", "x"]
    axes = []
    for i in range(nd):
        n = dim_names[i] or default[i]
        if i in target.spatial_axes:
            n = _SPATIAL[target.spatial_axes.index(i)]
        ax: dict[str, Any] = {"name": n}
        kind = "space" if i in target.spatial_axes else _axis_type(n)
        if kind:
            ax["type"] = kind
        if kind in ("space", "time") and target.units[i]:
            ax["unit"] = target.units[i]
        axes.append(ax)
    res = list(target.resolution)
    datasets = []
    for name, f in zip(names, [(1,) * nd, *factors]):
        scale = [r * k for r, k in zip(res, f)]
        translation = [r * (k - 1) / 2 for r, k in zip(res, f)]
        transforms: list[dict[str, Any]] = [{"type": "scale", "scale": scale}]
        if any(translation):
            transforms.append({"type": "translation", "translation": translation})
        datasets.append({"path": name, "coordinateTransformations": transforms})
    return {"name": _split(_split(target.location)[0])[1], "axes": axes, "datasets": datasets}


def _n5_levels(target: PyramidTarget, factors: Sequence[tuple[int, ...]], footprints: Footprints) -> list[Array]:
    storage = target.extra["storage"]
    parent, name = _group_location(target)
    base = target.base
    compression = dict(base.metadata.get("compression") or {"type": "raw"})
    res_xyz = [target.resolution[a] for a in target.spatial_axes]
    unit = target.units[target.spatial_axes[0]] or "um"
    out: list[Array] = []
    scales = [[1] * len(target.spatial_axes)]
    for level, f in enumerate(factors, start=1):
        xyz = _xyz(target, f)
        scales.append(xyz)
        shape = downsample_shape(base.shape, f)
        attrs = {"downsamplingFactors": xyz,
                 "pixelResolution": {"unit": unit, "dimensions": [r * k for r, k in zip(res_xyz, xyz)]}}
        out.append(n5.create(
            parent, _next_name(name, level, target.location), shape=shape, dtype=base.dtype,
            block_size=tuple(min(c, s) for c, s in zip(base.chunks, shape)), compression=compression,
            attributes=attrs, mode="w", **storage))
    base.attrs.update({"downsamplingFactors": scales[0],
                       "pixelResolution": {"unit": unit, "dimensions": res_xyz}})
    group = n5.open_group(parent, mode="r+", **storage)
    group.attrs.update({"scales": scales, "downsamplingFactors": scales,
                        "pixelResolution": {"unit": unit, "dimensions": res_xyz}, "multiScale": True})
    return out


_CREATORS = {"precomputed": _precomputed_levels, "zarr3": _zarr3_levels, "n5": _n5_levels}
