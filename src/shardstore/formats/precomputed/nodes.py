"""Precomputed volumes: ``open`` a scale, ``create`` a volume, ``add_scale`` to one."""

from __future__ import annotations

import copy
import dataclasses
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..._reopen import NodeRecord
from ..._sync import sync, sync_on
from ...config import IOConfig, default_config
from ...core.array import Array, AsyncArray
from ...errors import (
    ContainsNodeError,
    MetadataError,
    NodeNotFoundError,
    ScaleNotFoundError,
    SelectionError,
)
from ...store.base import Store
from ...store.registry import store_from_url
from .._entry import CREATE_MODES, OPEN_MODES, check_mode, cleans_up
from .driver import EncodingOptions, PrecomputedDriver, info_key
from .metadata import VolumeInfo, default_key, encode_info, parse_info
from .scales import downscaled_members

__all__ = ["open", "create", "add_scale", "remove_scales", "read_info", "DEFAULT_CHUNK", "PrecomputedArray"]

StoreLike = str | Path | Store
#: chunk size when a scale does not give one (tensorstore picks about 64^3 too)
DEFAULT_CHUNK = (64, 64, 64)


def _resolve(
    store_like: StoreLike, path: str | None, mode: str, storage_options: dict[str, Any] | None = None,
    config: IOConfig | None = None,
) -> tuple[Store, str]:
    store = store_from_url(store_like, mode=mode, storage_options=storage_options, config=config)
    return store, (path or "").strip("/")


async def _read_info(store: Store, path: str) -> VolumeInfo | None:
    key = info_key(path)
    raw = await store.get(key)
    return None if raw is None else parse_info(raw, f"{key!r} in {store!r}")


def _not_found(base: Store, path: str) -> NodeNotFoundError:
    return NodeNotFoundError(f"no precomputed volume at {path or '/'!r} in {base!r} (no {info_key(path)!r})")


def read_info(
    store: StoreLike, *, path: str | None = None, storage_options: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The validated ``info`` of a volume as JSON data."""
    base, path = _resolve(store, path, "r", storage_options)
    info = sync_on(base, _read_info(base, path))
    if info is None:
        raise _not_found(base, path)
    return info.to_dict()


def scales_text(info: VolumeInfo) -> str:
    """``0 '4_4_40' (size [x, y, z]), 1 ...``: the scales a user can pick, for messages."""
    return ", ".join(f"{i} {s.key!r} (size {list(s.size)})" for i, s in enumerate(info.scales))


class PrecomputedArray(Array):
    """One scale of a precomputed volume: shape ``size + [num_channels]``, indexed
    ``[x, y, z, channel]`` relative to ``voxel_offset``. Selection mistakes say so."""

    def _reopen_options(self) -> tuple[tuple[str, Any], ...]:
        # the scale by index (its key could repeat a path), and the writer options
        driver: PrecomputedDriver = self.driver  # type: ignore[assignment]
        opts = [("scale", driver.index), ("jpeg_quality", driver.options.jpeg_quality),
                ("png_level", driver.options.png_level)]
        return tuple((k, v) for k, v in opts if v is not None) + super()._reopen_options()

    def node_record(self) -> NodeRecord:
        return dataclasses.replace(super().node_record(), opener=open)

    def _explain(self, e: IndexError) -> SelectionError:
        driver: PrecomputedDriver = self.driver  # type: ignore[assignment]
        scale = driver.info.scales[driver.index]
        return SelectionError(
            f"{e}; precomputed arrays are indexed [x, y, z, channel] relative to voxel_offset "
            f"{list(scale.voxel_offset)}: this is scale {driver.index} {scale.key!r}, shape {self.shape} "
            f"(scales: {scales_text(driver.info)})")

    def __getitem__(self, selection: Any) -> Any:
        try:
            return super().__getitem__(selection)
        except SelectionError:
            raise
        except IndexError as e:
            raise self._explain(e) from None

    def __setitem__(self, selection: Any, value: Any) -> None:
        try:
            super().__setitem__(selection, value)
        except SelectionError:
            raise
        except IndexError as e:
            raise self._explain(e) from None

    def read(self, selection: Any = Ellipsis, *, strict: bool = False) -> np.ndarray:
        try:
            return super().read(selection, strict=strict)
        except SelectionError:
            raise
        except IndexError as e:
            raise self._explain(e) from None

    @property
    def oindex(self) -> Any:  # an _OIndex that explains selection errors
        return _ExplainedOIndex(self)


class _ExplainedOIndex:
    """``a.oindex[...]`` of a precomputed array, with the same explained selection errors."""

    def __init__(self, array: PrecomputedArray) -> None:
        self._array = array

    def __getitem__(self, selection: Any) -> Any:
        try:
            return Array.oindex.fget(self._array)[selection]  # type: ignore[attr-defined]
        except SelectionError:
            raise
        except IndexError as e:
            raise self._array._explain(e) from None

    def __setitem__(self, selection: Any, value: Any) -> None:
        try:
            Array.oindex.fget(self._array)[selection] = value  # type: ignore[attr-defined]
        except SelectionError:
            raise
        except IndexError as e:
            raise self._array._explain(e) from None


def _array(base: Store, path: str, info: VolumeInfo, index: int, read_only: bool, options: EncodingOptions,
           config: IOConfig | None = None) -> Array:
    driver = PrecomputedDriver(base, path, info, index, options)
    name = f"{path}/{info.scales[index].key}" if path else info.scales[index].key
    return PrecomputedArray(AsyncArray(driver, read_only=read_only, name=name, config=config))


def _scale_index(info: VolumeInfo, scale: Any, base: Store, path: str) -> int:
    try:
        return info.scale_index(scale, info_key(path))
    except (KeyError, IndexError):
        pass
    raise ScaleNotFoundError(
        f"no scale {scale!r} in the precomputed volume at {path or '/'!r} in {base!r}; pass scale= an index "
        f"or a key: {scales_text(info)} (each scale is an array indexed [x, y, z, channel])")


@cleans_up
def open(
    store: StoreLike,
    mode: str | int = "r",
    *,
    scale: int | str = 0,
    path: str | None = None,
    jpeg_quality: int | None = None,
    png_level: int | None = None,
    storage_options: dict[str, Any] | None = None,
    config: IOConfig | None = None,
) -> Array:
    """Open one scale (by index or key) of a precomputed volume as a ``[x, y, z, channel]`` array.

    ``open(store, mode="r", *, scale=0)``: ``mode`` "r" (read-only), "r+" or "a" (read/write);
    ``scale`` an index or a key. (The older ``open(store, scale)`` still works, with a
    DeprecationWarning.) ``jpeg_quality`` / ``png_level`` are
    writer options (default: the scale's ``jpeg_quality`` / ``png_level`` member, else 75 / the
    PNG library's default). ``config`` (an ``IOConfig``) tunes the array and its store.
    """
    if mode not in (*OPEN_MODES, *CREATE_MODES) and (isinstance(mode, int) or (isinstance(mode, str) and scale == 0)):
        # the older open(store, scale): the second argument is the mode now
        warnings.warn(f"precomputed.open(store, {mode!r}): pass the scale as scale={mode!r} (the second "
                      "positional argument is the mode)", DeprecationWarning, stacklevel=3)
        mode, scale = "r", mode
    mode = check_mode(mode, OPEN_MODES, "precomputed.open()")
    config = default_config(config)
    base, path = _resolve(store, path, mode, storage_options, config)
    info = sync_on(base, _read_info(base, path))
    if info is None:
        raise _not_found(base, path)
    index = _scale_index(info, scale, base, path)
    return _array(base, path, info, index, mode == "r", EncodingOptions(jpeg_quality, png_level), config)


def _scale_doc(scale: dict[str, Any]) -> dict[str, Any]:
    """A user's scale description with defaults filled, as ``info`` JSON."""
    if not isinstance(scale, dict):
        raise MetadataError(f"a scale must be a dict (size, resolution, chunk_sizes, encoding, ...), got {scale!r}")
    doc = {k: (list(v) if isinstance(v, tuple) else copy.deepcopy(v)) for k, v in scale.items()}
    if "chunk_size" in doc:  # the singular spelling, for convenience
        if "chunk_sizes" in doc:
            raise MetadataError("give 'chunk_size' or 'chunk_sizes', not both")
        doc["chunk_sizes"] = [list(doc.pop("chunk_size"))]
    if "size" not in doc:
        raise MetadataError(f"scale {scale!r} needs a 'size' [x, y, z]")
    doc["size"] = [int(s) for s in doc["size"]]
    doc.setdefault("resolution", [1, 1, 1])
    doc["resolution"] = list(doc["resolution"])
    doc.setdefault("voxel_offset", [0, 0, 0])
    doc["voxel_offset"] = [int(v) for v in doc["voxel_offset"]]
    doc.setdefault("chunk_sizes", [[min(c, max(s, 1)) for c, s in zip(DEFAULT_CHUNK, doc["size"])]])
    doc["chunk_sizes"] = [[int(c) for c in cs] for cs in doc["chunk_sizes"]]
    doc.setdefault("encoding", "raw")
    doc.setdefault("key", default_key(doc["resolution"]))
    if doc["encoding"] == "compressed_segmentation":
        doc.setdefault("compressed_segmentation_block_size", [8, 8, 8])
        doc["compressed_segmentation_block_size"] = list(doc["compressed_segmentation_block_size"])
    if doc.get("sharding") is None:
        doc.pop("sharding", None)
    return doc


@cleans_up
def create(
    store: StoreLike,
    *,
    data_type: Any,
    scales: Sequence[dict[str, Any]],
    type: str = "image",
    num_channels: int = 1,
    mode: str = "w-",
    path: str | None = None,
    attributes: dict[str, Any] | None = None,
    jpeg_quality: int | None = None,
    png_level: int | None = None,
    storage_options: dict[str, Any] | None = None,
    config: IOConfig | None = None,
) -> Array:
    """Create a precomputed volume (its ``info``) and return its first scale, writable.

    Each scale is a dict of ``info`` members: ``size`` (required), ``resolution`` (default
    [1, 1, 1]), ``voxel_offset`` ([0, 0, 0]), ``chunk_sizes`` or ``chunk_size`` (64^3 clipped to
    the size), ``encoding`` ("raw"; "jpeg", "png", "compressed_segmentation"),
    ``compressed_segmentation_block_size`` ([8, 8, 8]), ``sharding`` (a
    ``neuroglancer_uint64_sharded_v1`` spec, or None), ``key`` (default ``"4_4_40"`` from the
    resolution). ``attributes`` become extra ``info`` members (``mesh``, ...). ``mode="w-"``
    refuses an existing volume, ``"w"`` deletes everything below ``path`` first.
    ``storage_options`` configure a URL's store (``s3://``: endpoint, credentials, ...).
    """
    check_mode(mode, CREATE_MODES, "precomputed.create()")
    config = default_config(config)
    base, path = _resolve(store, path, "w", storage_options, config)
    dtype_name = np.dtype(data_type).name if not isinstance(data_type, str) else data_type.lower()
    if not scales:
        raise MetadataError("create() needs at least one scale")
    doc: dict[str, Any] = dict(copy.deepcopy(attributes or {}))
    doc.update({
        "@type": "neuroglancer_multiscale_volume",
        "type": type,
        "data_type": dtype_name,
        "num_channels": num_channels,
        "scales": [_scale_doc(s) for s in scales],
    })
    key = info_key(path)
    info = parse_info(doc, f"new {key!r}")  # what we write is what we read
    options = EncodingOptions(jpeg_quality, png_level)
    arrays = [PrecomputedDriver(base, path, info, i, options) for i in range(len(info.scales))]  # validate all

    async def write() -> None:
        if mode == "w-" and await base.exists(key):
            raise ContainsNodeError(f"a precomputed volume already exists at {key!r} in {base!r} (use mode='w' to replace it)")
        if mode == "w":
            await base.delete_prefix(f"{path}/" if path else "")
        await base.set(key, encode_info(info))

    sync_on(base, write())
    return _array(base, path, arrays[0].info, 0, False, options, config)


def _derived_members(base: dict[str, Any], spec: dict[str, Any], factor: Sequence[float] | None) -> dict[str, Any]:
    """``spec`` with what it leaves out taken from ``base`` downsampled by ``factor`` (or by
    the ratio of the resolutions): resolution, voxel_offset, size (rounded as CloudVolume and
    igneous round them), chunk size, encoding."""
    if factor is None and "resolution" in spec:
        ratio = [float(r) / float(b) for r, b in zip(spec["resolution"], base["resolution"])]
        factor = ratio if all(r > 0 for r in ratio) else None
    out = dict(spec)
    if factor is not None:
        for k, v in downscaled_members(base, factor).items():
            out.setdefault(k, v)
    if "chunk_size" not in out and "chunk_sizes" not in out and "size" in out:
        out["chunk_sizes"] = [[min(int(c), max(int(s), 1)) for c, s in zip(base["chunk_sizes"][0], out["size"])]]
    if "encoding" not in out:
        out["encoding"] = base["encoding"]
        for member in ("compressed_segmentation_block_size", "jpeg_quality", "png_level"):
            if member in base:
                out.setdefault(member, copy.deepcopy(base[member]))
    return out


@cleans_up
def add_scale(
    store: StoreLike,
    scale: dict[str, Any] | None = None,
    *,
    path: str | None = None,
    factor: Sequence[float] | None = None,
    base: int | str = 0,
    replace: bool = False,
    jpeg_quality: int | None = None,
    png_level: int | None = None,
    storage_options: dict[str, Any] | None = None,
    config: IOConfig | None = None,
    **members: Any,
) -> Array:
    """Append a scale to an existing volume's ``info``; return it as a writable array.

    The scale is a dict of ``info`` members (or keyword arguments), as in ``create``. Members
    left out are derived from scale ``base`` (default the first) and ``factor`` ([x, y, z];
    default: the ratio of the given ``resolution`` to the base's): ``resolution = base *
    factor``, ``voxel_offset = floor(base / factor)``, ``size = ceil(base / factor)`` (as
    CloudVolume and igneous compute them), the base's chunk size (clipped to the size) and
    encoding. ``replace=True`` replaces a scale with the same key and deletes its chunks.
    ``config`` (an ``IOConfig``) tunes the returned array.
    """
    config = default_config(config)
    base_store, path = _resolve(store, path, "r+", storage_options, config)
    spec = {**(scale or {}), **members}
    key = info_key(path)

    async def update() -> tuple[VolumeInfo, int]:
        raw = await base_store.get(key)
        if raw is None:
            raise _not_found(base_store, path)
        old = parse_info(raw, key)
        doc = old.to_dict()
        base_doc = doc["scales"][old.scale_index(base, key)]
        new = _scale_doc(_derived_members(base_doc, spec, factor))
        keys = [s["key"] for s in doc["scales"]]
        if replace and new["key"] in keys:
            index = keys.index(new["key"])
            doc["scales"][index] = new
            await base_store.delete_prefix(f"{path}/{new['key']}/" if path else f"{new['key']}/")
        else:
            index = len(doc["scales"])
            doc["scales"].append(new)
        info = parse_info(doc, key)  # rejects a duplicate key or an inconsistent scale
        PrecomputedDriver(base_store, path, info, index)
        await base_store.set(key, encode_info(info))
        return info, index

    info, index = sync(update())
    return _array(base_store, path, info, index, False, EncodingOptions(jpeg_quality, png_level), config)


def remove_scales(
    store: StoreLike, *, keep: int = 1, path: str | None = None, storage_options: dict[str, Any] | None = None,
) -> list[str]:
    """Drop every scale after the first ``keep`` from ``info`` and delete their chunks (as
    igneous' ``truncate_scales`` does before it builds a pyramid); returns the removed keys."""
    if keep < 1:
        raise ValueError(f"keep must be at least 1 (the base scale), got {keep}")
    base_store, path = _resolve(store, path, "r+", storage_options)
    key = info_key(path)

    async def update() -> list[str]:
        raw = await base_store.get(key)
        if raw is None:
            raise _not_found(base_store, path)
        doc = parse_info(raw, key).to_dict()
        removed = [s["key"] for s in doc["scales"][keep:]]
        if not removed:
            return []
        kept = {s["key"] for s in doc["scales"][:keep]}
        doc["scales"] = doc["scales"][:keep]
        await base_store.set(key, encode_info(parse_info(doc, key)))  # the info first: no scale points at deleted chunks
        for name in removed:
            if name not in kept and "/" not in name.strip("/") and name not in ("", ".", ".."):
                await base_store.delete_prefix(f"{path}/{name}/" if path else f"{name}/")
        return removed

    return sync(update())
