"""How an array's axes, voxel size, offset and codecs carry over from one format to another.

Axis order (arrays are indexed in C order, last axis fastest in memory):

- precomputed arrays are ``[x, y, z, c]`` (x fastest on disk, channel last).
- Zarr v3 and N5 arrays converted from precomputed are ``[c, z, y, x]``, the OME-Zarr order,
  with ``dimension_names`` ``["c", "z", "y", "x"]``; the channel axis is left out when the
  volume has one channel (``[z, y, x]``). N5 stores the same array with its ``dimensions``
  reversed (``[x, y, z, c]`` in attributes.json), as every N5 tool does, and an ``axes``
  attribute in that (N5) order.
- Zarr / N5 to precomputed: x, y, z are found by name (Zarr ``dimension_names``, N5 ``axes``),
  else the last three axes are taken as ``z, y, x``; one further axis longer than 1 becomes the
  channel axis; other axes must have length 1; missing spatial axes get length 1.
- Zarr <-> N5 and bcolz -> Zarr keep the axes as they are.

Voxel size and offset (resolution in the source's unit; precomputed's is nanometres):

- precomputed ``resolution`` / ``voxel_offset`` -> Zarr: attribute ``neuroglancer_precomputed``
  (``type``, ``resolution``, ``voxel_offset``, the ``info``'s extra members such as ``mesh``),
  which a conversion back reads; with ``ome`` also OME-Zarr 0.5 ``scale`` and ``translation``
  (``voxel_offset * resolution``).
- -> N5: ``pixelResolution`` ``{"unit", "dimensions"}`` (what n5-viewer and BigDataViewer read)
  and ``resolution``, ``units``, ``voxel_offset``, ``axes``, all in N5 (x-first) order.
- -> precomputed: ``resolution`` (converted to nanometres) and ``voxel_offset`` from the above;
  attributes with no place in an ``info`` are listed in ``ConvertResult.dropped``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.array import Array
from ..errors import ShardStoreError, UnsupportedFeatureError
from .convert_codecs import (
    BCOLZ_SHUFFLE,
    inner_zarr_codecs,
    n5_compression,
    parse_compression,
    source_codecs_text,
    zarr_compressor,
)
from .downsample_formats import read_ome_base

__all__ = ["Geometry", "Target", "describe_source", "plan_target", "ome_attributes", "FORMATS"]

FORMATS = ("zarr3", "n5", "precomputed")
#: the attribute a precomputed source's metadata is kept under in Zarr / N5
NG_ATTR = "neuroglancer_precomputed"
#: nanometres per unit (OME-Zarr unit names and the short forms N5 tools write)
_NM = {"nanometer": 1.0, "nm": 1.0, "micrometer": 1e3, "um": 1e3, "\u00b5m": 1e3, "millimeter": 1e6,
       "mm": 1e6, "meter": 1e9, "m": 1e9, "angstrom": 0.1, "picometer": 1e-3}
_N5_RESERVED = {"pixelResolution", "resolution", "units", "voxel_offset", "axes"}
_ZARR_DEFAULT = {"name": "zstd", "configuration": {"level": 3, "checksum": False}}


@dataclass
class Geometry:
    """A source array's axes as the formats describe them: one entry per array axis."""

    names: list[str]
    scale: list[float]
    units: list[str | None]
    offset: list[float]  # voxels
    kind: str = "image"  # precomputed "image" or "segmentation"
    attrs: dict[str, Any] = field(default_factory=dict)  # user attributes to carry


@dataclass
class Target:
    """The destination array: how to create it and where its axes come from."""

    format: str
    shape: tuple[int, ...]
    dtype: np.dtype
    chunks: tuple[int, ...]
    shards: tuple[int, ...] | None  # Zarr v3 shard shape; precomputed: None or a voxel target
    names: list[str]
    axis_map: tuple[int | None, ...]  # per destination axis: its source axis (None: a new axis of 1)
    create: dict[str, Any]  # keyword arguments of the format's create (JSON-able)
    geometry: Geometry  # the destination's scale/units/offset, per destination axis
    dropped: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)


def _default_names(ndim: int) -> list[str]:
    table = {1: ["x"], 2: ["y", "x"], 3: ["z", "y", "x"], 4: ["c", "z", "y", "x"], 5: ["t", "c", "z", "y", "x"]}
    return table.get(ndim, [f"dim_{i}" for i in range(ndim)])


def _names(given: Any, ndim: int) -> list[str]:
    if not given or all(n is None for n in given) or len(given) != ndim:
        return _default_names(ndim)
    names = [str(n) if n is not None else f"dim_{i}" for i, n in enumerate(given)]
    return names if len(set(names)) == ndim else _default_names(ndim)


def describe_source(a: Array, location: str, storage: dict[str, Any]) -> Geometry:
    """The axes, voxel size and offset of ``a`` (opened from ``location``)."""
    nd = a.ndim
    fmt = a.format
    attrs = dict(a.attrs) if fmt != "bcolz" else dict(getattr(a, "attrs", {}) or {})
    if fmt == "precomputed":
        info = a.metadata
        scale = info["scales"][getattr(a.driver, "index", 0)]
        return Geometry(["x", "y", "z", "c"], [float(r) for r in scale["resolution"]] + [1.0],
                        ["nanometer"] * 3 + [None], [float(v) for v in scale.get("voxel_offset", [0, 0, 0])] + [0.0],
                        kind=info.get("type", "image"), attrs=attrs)
    if fmt == "n5":
        n5_names = attrs.get("axes")
        names = _names(list(reversed(n5_names)) if isinstance(n5_names, list) else None, nd)
        geo = Geometry(names, [1.0] * nd, [None] * nd, [0.0] * nd,
                       attrs={k: v for k, v in attrs.items() if k not in _N5_RESERVED})
        pr = attrs.get("pixelResolution")
        res = attrs.get("resolution")
        if isinstance(res, list) and len(res) == nd:
            geo.scale = [float(r) for r in reversed(res)]
        elif isinstance(pr, dict) and isinstance(pr.get("dimensions"), list) and len(pr["dimensions"]) == nd:
            geo.scale = [float(r) for r in reversed(pr["dimensions"])]
        units = attrs.get("units")
        if isinstance(units, list) and len(units) == nd:
            geo.units = [str(u) for u in reversed(units)]
        elif isinstance(pr, dict) and pr.get("unit"):
            geo.units = [str(pr["unit"]) if n in "xyz" else None for n in names]
        off = attrs.get("voxel_offset")
        if isinstance(off, list) and len(off) == nd:
            geo.offset = [float(o) for o in reversed(off)]
        _from_ng(geo, attrs)
        return geo
    names = _names(a.dimension_names, nd)
    geo = Geometry(names, [1.0] * nd, [None] * nd, [0.0] * nd, attrs=attrs)
    if fmt == "zarr3":
        _from_ng(geo, attrs)
        ome = read_ome_base(location, storage) if NG_ATTR not in attrs else None
        if ome is not None:
            if len(ome.axes) == nd:
                geo.names = [str(ax.get("name", n)) for ax, n in zip(ome.axes, names)]
                geo.units = [ax.get("unit") for ax in ome.axes]
            if ome.scale is not None and len(ome.scale) == nd:
                geo.scale = ome.scale
            if ome.translation is not None and len(ome.translation) == nd:
                geo.offset = [v / s if s else 0.0 for v, s in zip(ome.translation, geo.scale)]
    return geo


def _from_ng(geo: Geometry, attrs: dict[str, Any]) -> None:
    """Resolution, offset and kind kept by an earlier conversion from precomputed."""
    ng = attrs.get(NG_ATTR)
    if not isinstance(ng, dict):
        return
    geo.kind = str(ng.get("type", geo.kind))
    for i, axis in enumerate("xyz"):
        if axis in geo.names:
            j = geo.names.index(axis)
            if i < len(ng.get("resolution", [])):
                geo.scale[j], geo.units[j] = float(ng["resolution"][i]), "nanometer"
            if i < len(ng.get("voxel_offset", [])):
                geo.offset[j] = float(ng["voxel_offset"][i])


# --------------------------------------------------------------------------- axes

def _axis_map(src_names: list[str], src_shape: tuple[int, ...], src_format: str, to: str) -> tuple[list[str], list[int | None]]:
    """Destination axis names and, per destination axis, its source axis."""
    if to == "precomputed":
        if src_format == "precomputed":
            return ["x", "y", "z", "c"], [0, 1, 2, 3]
        names = list(src_names)
        if not any(n in names for n in "xyz"):  # unnamed: the last three axes are z, y, x
            names = names[:-3] + ["z", "y", "x"][-min(3, len(names)):] if len(names) >= 1 else names
        mapping: list[int | None] = [names.index(n) if n in names else None for n in "xyz"]
        rest = [i for i in range(len(names)) if i not in mapping]
        channel = [i for i in rest if names[i] == "c"] or [i for i in rest if src_shape[i] > 1]
        if len(channel) > 1:
            raise UnsupportedFeatureError(
                f"precomputed holds x, y, z and one channel axis; the source's axes {src_names} "
                f"(shape {list(src_shape)}) have {len(channel)} more axes longer than 1")
        mapping.append(channel[0] if channel else None)
        return ["x", "y", "z", "c"], mapping
    if src_format == "precomputed":  # [x, y, z, c] -> [c, z, y, x], c only when > 1 channel
        if src_shape[3] > 1:
            return ["c", "z", "y", "x"], [3, 2, 1, 0]
        return ["z", "y", "x"], [2, 1, 0]
    return list(src_names), list(range(len(src_names)))


def check_axis_map(axis_map: tuple[int | None, ...], src_shape: tuple[int, ...]) -> None:
    for i, n in enumerate(src_shape):
        if i not in axis_map and n != 1:
            raise UnsupportedFeatureError(f"source axis {i} (length {n}) has no place in the destination")


# --------------------------------------------------------------------------- the plan

def plan_target(  # noqa: C901 - one decision per option and format, in one place
    src: Array, geo: Geometry, to: str, *, chunks: tuple[int, ...] | None, shards: tuple[int, ...] | None | str,
    codecs: list[Any] | None, compression: str | None, encoding: str | None, ome: bool,
) -> Target:
    """Decide the destination array of a conversion of ``src`` (described by ``geo``)."""
    if to not in FORMATS:
        raise ShardStoreError(f"--to {to!r}: expected one of {', '.join(FORMATS)}")
    if src.format == "bcolz" and to != "zarr3":
        raise UnsupportedFeatureError(f"bcolz sources convert to Zarr v3, not {to}")
    if ome and to != "zarr3":
        raise ShardStoreError("--ome writes OME-Zarr 0.5: it needs --to zarr3")
    names, amap = _axis_map(geo.names, src.shape, src.format, to)
    check_axis_map(tuple(amap), src.shape)
    shape = tuple(src.shape[m] if m is not None else 1 for m in amap)
    dgeo = Geometry(list(names), [geo.scale[m] if m is not None else 1.0 for m in amap],
                    [geo.units[m] if m is not None else None for m in amap],
                    [geo.offset[m] if m is not None else 0.0 for m in amap], kind=geo.kind, attrs=dict(geo.attrs))
    nd = len(shape)
    if chunks is not None and len(chunks) == 1:  # "64": every (spatial) axis
        chunks = (chunks[0],) * 3 if to == "precomputed" else (chunks[0],) * nd
    if isinstance(shards, tuple) and len(shards) == 1:
        shards = (shards[0],) * (3 if to == "precomputed" else nd)
    src_chunks = tuple(src.chunks[m] if m is not None else 1 for m in amap)
    t = Target(to, shape, src.dtype, src_chunks, None, names, tuple(amap), {}, dgeo)
    if chunks is not None:
        if to == "precomputed" and len(chunks) == 3:
            chunks = (*chunks, shape[3])
        if len(chunks) != len(shape):
            raise ShardStoreError(f"--chunks {list(chunks)}: the destination has {len(shape)} axes {names}")
        t.chunks = tuple(int(c) for c in chunks)
    t.chunks = tuple(max(1, min(c, n)) if n else c for c, n in zip(t.chunks, shape)) if to != "zarr3" else t.chunks
    if to == "zarr3":
        _plan_zarr3(src, t, shards, codecs, compression, ome)
    elif to == "n5":
        _plan_n5(src, t, shards, compression, codecs)
    else:
        _plan_precomputed(src, t, shards, encoding, compression, codecs)
    return t


def _src_shards(src: Array, t: Target) -> tuple[int, ...] | None:
    if src.shards is None or src.format == "precomputed":
        return None
    return tuple(src.shards[m] if m is not None else 1 for m in t.axis_map)


def _plan_zarr3(src: Array, t: Target, shards: Any, codecs: list[Any] | None, compression: str | None, ome: bool) -> None:
    if shards == "none":
        t.shards = None
    elif shards is not None:
        t.shards = tuple(int(s) for s in shards)
        if len(t.shards) != len(t.shape) or any(s % c for s, c in zip(t.shards, t.chunks)):
            raise ShardStoreError(f"--shards {list(t.shards)} must give {len(t.shape)} multiples of the chunks {list(t.chunks)}")
    elif src.format == "precomputed" and src.shards is not None:
        # a sharded volume becomes a sharded array: shards of 4 chunks a side (fewer at the edge)
        t.shards = tuple(min(c * 4, -(-n // c) * c) if name in "xyz" else c
                         for c, n, name in zip(t.chunks, t.shape, t.names))
    else:
        t.shards = _src_shards(src, t)
        if t.shards is not None and any(s % c for s, c in zip(t.shards, t.chunks)):
            t.shards = tuple(-(-s // c) * c for s, c in zip(t.shards, t.chunks))  # about the same size
    if codecs is not None:
        inner = list(codecs)
    elif compression is not None:
        name, params = parse_compression(compression)
        inner = [{"name": "bytes", "configuration": {"endian": "little"}}, *zarr_compressor(name, params, t.dtype.itemsize)]
    elif src.format == "zarr3":
        inner = inner_zarr_codecs(src)
    elif src.format == "bcolz":
        cp = getattr(src, "cparams", {}) or {}
        shuffle = BCOLZ_SHUFFLE.get(int(cp.get("shuffle", 1)), "shuffle")
        inner = [{"name": "bytes", "configuration": {"endian": "little"}},
                 {"name": "blosc", "configuration": {"cname": cp.get("cname", "lz4"), "clevel": int(cp.get("clevel", 5)),
                                                     "shuffle": shuffle, "typesize": t.dtype.itemsize, "blocksize": 0}}]
        t.changed.append(f"compression: bcolz {cp} -> Zarr blosc ({cp.get('cname', 'lz4')}, level "
                         f"{cp.get('clevel', 5)}, {shuffle})")
    else:
        inner = [{"name": "bytes", "configuration": {"endian": "little"}}, _ZARR_DEFAULT]
        t.changed.append(f"codecs: {source_codecs_text(src)} -> [bytes, zstd]")
    if codecs is not None or compression is not None:
        names = [c["name"] if isinstance(c, dict) else str(c) for c in inner]
        if not names or names[0] not in ("bytes", "transpose"):
            names.insert(0, "bytes")  # zarr3.create adds it, as it says
        t.changed.append(f"codecs: {source_codecs_text(src)} -> [{', '.join(names)}]")
    fill = src.fill_value if src.format in ("zarr3", "bcolz") else 0
    attrs = dict(t.geometry.attrs)
    if src.format == "precomputed":
        info = src.metadata
        scale = info["scales"][getattr(src.driver, "index", 0)]
        attrs = {NG_ATTR: {"type": info.get("type", "image"), "resolution": scale["resolution"],
                           "voxel_offset": scale.get("voxel_offset", [0, 0, 0]), **attrs}}
    if ome:
        attrs.pop("ome", None)  # the group holds the new OME metadata
    t.create = {"shape": list(t.shape), "dtype": t.dtype.str, "chunks": list(t.chunks),
                "shards": list(t.shards) if t.shards else None, "codecs": inner,
                "fill_value": _json_scalar(fill), "dimension_names": t.names, "attributes": attrs}
    if src.format == "n5":
        _note_lost_geometry(t, want_ome=ome)


def _note_lost_geometry(t: Target, *, want_ome: bool) -> None:
    """Zarr without OME metadata has no place for a voxel size or offset: say so."""
    if want_ome:
        return
    if any(s != 1.0 for s in t.geometry.scale):
        t.dropped.append(f"resolution {t.geometry.scale} (use --ome to keep it as OME-Zarr scale)")
    if any(o for o in t.geometry.offset):
        t.dropped.append(f"voxel offset {t.geometry.offset} (use --ome to keep it as OME-Zarr translation)")


def _json_scalar(v: Any) -> Any:
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    if isinstance(v, complex):
        return [v.real, v.imag]
    if isinstance(v, bytes):
        return list(v)
    return v


def _plan_n5(src: Array, t: Target, shards: Any, compression: str | None, codecs: list[Any] | None) -> None:
    if shards not in (None, "none"):
        raise UnsupportedFeatureError("N5 has no sharding: drop --shards")
    if codecs is not None:
        raise ShardStoreError("--codecs is for Zarr v3; N5 takes --compression (e.g. gzip:6, zstd:3, raw)")
    if compression is not None:
        comp = n5_compression(*parse_compression(compression))
    elif src.format == "n5":
        comp = dict(src.metadata.get("compression", {"type": "gzip"}))
    else:
        comp = {"type": "gzip", "level": 6}
    if src.format != "n5" or compression is not None:
        t.changed.append(f"compression: {source_codecs_text(src)} -> n5 {comp.get('type')}")
    fill = src.fill_value
    if fill is not None and _json_scalar(fill) not in (0, 0.0, False):
        t.changed.append(f"fill_value {_json_scalar(fill)} -> 0 (N5 has no fill value; every chunk is written)")
    g = t.geometry
    attrs = {k: v for k, v in g.attrs.items() if k not in _N5_RESERVED | {"dimensions", "blockSize", "dataType", "compression", "n5"}}
    if src.format == "precomputed":
        info = src.metadata
        attrs[NG_ATTR] = {"type": info.get("type", "image"), **g.attrs}
    attrs["axes"] = t.names[::-1]
    if any(s != 1.0 for s in g.scale) or any(g.units):
        spatial_unit = next((u for u in g.units if u), "um")
        attrs["resolution"] = g.scale[::-1]
        attrs["units"] = [u or "" for u in g.units[::-1]]
        attrs["pixelResolution"] = {"unit": spatial_unit, "dimensions": g.scale[::-1]}
    if any(g.offset):
        attrs["voxel_offset"] = [int(o) if float(o).is_integer() else o for o in g.offset[::-1]]
    t.create = {"shape": list(t.shape), "dtype": t.dtype.str, "block_size": list(t.chunks), "compression": comp,
                "attributes": attrs}


def _scale_of(a: Array) -> dict[str, Any]:
    """The ``info`` scale of a precomputed array."""
    return dict(a.metadata["scales"][getattr(a.driver, "index", 0)])


def _nm(unit: str | None, where: str, t: Target) -> float:
    if unit is None:
        return 1.0
    if unit not in _NM:
        t.changed.append(f"{where}: unit {unit!r} taken as nanometres")
        return 1.0
    return _NM[unit]


def _plan_precomputed(src: Array, t: Target, shards: Any, encoding: str | None, compression: str | None,
                      codecs: list[Any] | None) -> None:
    from ..formats.precomputed.scales import sharding_for_scale

    if codecs is not None or compression is not None:
        raise ShardStoreError("precomputed takes --encoding (raw, compressed_segmentation, jpeg, png), "
                              "not --codecs / --compression")
    g = t.geometry
    nc = t.shape[3]
    if t.chunks[3] != nc:
        t.chunks = (*t.chunks[:3], nc)
    kind = g.kind if g.kind in ("image", "segmentation") else "image"
    src_encoding = _scale_of(src).get("encoding") if src.format == "precomputed" else None
    if encoding is None:
        if src_encoding is not None:
            encoding = src_encoding
        elif kind == "segmentation" and t.dtype in (np.dtype("uint32"), np.dtype("uint64")):
            encoding = "compressed_segmentation"
        else:
            encoding = "raw"
    if src_encoding != encoding:
        t.changed.append(f"encoding: {source_codecs_text(src)} -> precomputed {encoding}")
    resolution = [g.scale[i] * _nm(g.units[i], "resolution", t) for i in range(3)]
    offset = [int(round(o)) for o in g.offset[:3]]
    if any(float(o) != round(o) for o in g.offset[:3]):
        t.changed.append(f"voxel offset {g.offset[:3]} rounded to {offset}")
    scale: dict[str, Any] = {"size": list(t.shape[:3]), "chunk_sizes": [list(t.chunks[:3])], "encoding": encoding,
                             "resolution": [int(r) if float(r).is_integer() else r for r in resolution],
                             "voxel_offset": offset}
    given = shards if isinstance(shards, tuple) else None
    if given is None and shards is None and src.format == "precomputed":
        scale["sharding"] = _scale_of(src).get("sharding")  # the source's sharding, as it is
    elif given is not None or (shards is None and src.shards is not None):
        # a sharded destination: shards of about the given (else the source's) shard size, by
        # the rules igneous uses (identity hash, a power-of-two number of chunks per shard)
        box = given or _src_shards(src, t) or t.chunks
        shard_bytes = math.prod(int(n) for n in box[:3]) * t.dtype.itemsize * nc
        scale["sharding"] = sharding_for_scale(t.shape[:3], t.chunks[:3], t.dtype, encoding, num_channels=nc,
                                               uncompressed_shard_bytes=shard_bytes)
    if encoding == "compressed_segmentation":
        scale["compressed_segmentation_block_size"] = [8, 8, 8]
    attrs = dict(g.attrs)
    ng = attrs.pop(NG_ATTR, None)
    kept: dict[str, Any] = {}
    if isinstance(ng, dict):
        kept = {k: v for k, v in ng.items() if k not in ("type", "resolution", "voxel_offset")}
    if src.format == "precomputed":
        kept, attrs = attrs, {}
    attrs.pop("ome", None)
    for k in sorted(attrs):
        t.dropped.append(f"attribute {k!r} (an info has no place for user attributes)")
    fill = src.fill_value
    if fill is not None and _json_scalar(fill) not in (0, 0.0, False):
        t.changed.append(f"fill_value {_json_scalar(fill)} -> 0 (precomputed has no fill value; every chunk is written)")
    t.create = {"data_type": t.dtype.name, "type": kind, "num_channels": nc, "scales": [scale],
                "attributes": json.loads(json.dumps(kept))}


def ome_attributes(t: Target, name: str = "0") -> dict[str, Any]:
    """OME-Zarr 0.5 group attributes for the one-level image ``name`` of ``t``."""
    g = t.geometry
    axes = []
    for n, u in zip(t.names, g.units):
        kind = "space" if n in ("x", "y", "z") else "channel" if n == "c" else "time" if n == "t" else None
        ax: dict[str, Any] = {"name": n}
        if kind:
            ax["type"] = kind
        if kind == "space":
            ax["unit"] = _ome_unit(u)
        axes.append(ax)
    scale = [float(s) for s in g.scale]
    translation = [float(o) * s for o, s in zip(g.offset, scale)]
    transforms: list[dict[str, Any]] = [{"type": "scale", "scale": scale}]
    if any(translation):
        transforms.append({"type": "translation", "translation": translation})
    return {"ome": {"version": "0.5", "multiscales": [{
        "name": "image", "axes": axes, "datasets": [{"path": name, "coordinateTransformations": transforms}],
    }]}}


def _ome_unit(u: str | None) -> str:
    short = {"nm": "nanometer", "um": "micrometer", "\u00b5m": "micrometer", "mm": "millimeter", "m": "meter"}
    return short.get(u or "", u or "nanometer")
