"""Neuroglancer precomputed driver: one scale of an ``info`` -> a ``ChunkLayout``. No chunk loops.

The array is ``[x, y, z, channel]`` of shape ``size + [num_channels]``, indexed relative to
``voxel_offset``; the grid is 4-D with chunks ``chunk_size + [num_channels]`` (one chunk along
the channel axis), edge chunks clipped, missing chunks read as 0.

- unsharded: the chunk of grid cell ``g`` is the file ``<scale key>/x0-x1_y0-y1_z0-z1`` (absolute
  voxel coordinates, i.e. with ``voxel_offset`` added, clipped at the volume edge), or
  CloudVolume's gzipped ``<that name>.gz`` (``gzfiles.py``);
- sharded: the data store is the uint64 sharding adapter over ``<scale key>/`` and a chunk's key
  is its compressed Morton code. A write groups chunks by shard (one ``set_many`` per shard),
  and tells the adapter when a batch covers every chunk a shard can hold, so writing whole
  shards never reads them.
"""

from __future__ import annotations

import copy
import functools
import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...codecs.base import ChunkSpec, Codec
from ...codecs.compressed_segmentation import CompressedSegmentationCodec
from ...codecs.jpeg import JpegCodec
from ...codecs.pipeline import CodecPipeline
from ...codecs.png import PngCodec
from ...codecs.precomputed_raw import PrecomputedRawCodec
from ...core.grid import RegularGrid
from ...core.layout import ArraySpec, ChunkLayout, FormatDriver
from ...errors import MetadataError, UnsupportedFeatureError
from ...sharding.morton import compressed_morton
from ...sharding.uint64 import ShardingSpec, Uint64ShardedStore
from ...store.base import Store
from ...store.wrappers import PrefixStore
from .gzfiles import GzipChunkFiles
from .metadata import Scale, VolumeInfo, encode_info

__all__ = ["PrecomputedDriver", "EncodingOptions", "info_key", "scale_prefix"]

#: members of the ``info`` the driver models; the others are the array's "attributes"
_MODELED = frozenset({"@type", "type", "data_type", "num_channels", "scales"})
#: grids up to this many chunks get a per-shard chunk count (for writes without reading);
#: larger ones always read-merge-write (correct, one extra GET per shard written)
_MAX_COUNTED_CHUNKS = 1 << 22
_MAX_MURMUR_COUNTED = 1 << 20


def info_key(path: str) -> str:
    return f"{path}/info" if path else "info"


def scale_prefix(path: str, key: str, where: str) -> str:
    """The store path of a scale's directory (``key`` may hold ``/`` and ``..``)."""
    if key.startswith("/") or "\\" in key or "\0" in key:
        raise MetadataError(f"{where}: scale key {key!r} must be a relative path")
    joined = posixpath.normpath(posixpath.join(path or ".", key.strip("/")))
    if joined in (".", "") or joined == ".." or joined.startswith("../"):
        raise MetadataError(f"{where}: scale key {key!r} points outside the store")
    return joined


@dataclass(frozen=True)
class EncodingOptions:
    """Writer options that the ``info`` does not fix (None: the scale's member, else default)."""

    jpeg_quality: int | None = None
    png_level: int | None = None


def morton_codes(grid_shape: tuple[int, ...]) -> np.ndarray:
    """Compressed Morton codes of every cell of ``grid_shape`` (x fastest), vectorised."""
    axes = np.meshgrid(*(np.arange(g, dtype=np.uint64) for g in grid_shape), indexing="ij")
    coords = [a.reshape(-1, order="F") for a in axes]
    nbits = [max(g - 1, 0).bit_length() for g in grid_shape]
    code = np.zeros(coords[0].shape, dtype=np.uint64)
    j = 0
    for i in range(max(nbits, default=0)):
        for c, n in zip(coords, nbits):
            if i < n:
                code |= ((c >> np.uint64(i)) & np.uint64(1)) << np.uint64(j)
                j += 1
    return code


class PrecomputedDriver(FormatDriver):
    """Scale ``index`` of the precomputed volume whose ``info`` is at ``path`` in ``store``.

    Identity semantics, as every driver: a driver holds a scale's open state (its layout,
    its shard caches), so two drivers are equal only when they are the same object.
    """

    format_name = "precomputed"
    resizable = False  # tensorstore and neuroglancer fix a scale's size once written

    def __init__(
        self, store: Store, path: str, info: VolumeInfo, index: int, options: EncodingOptions | None = None
    ) -> None:
        self.store = store
        self.path = path.strip("/")
        self.info = info
        self.index = index
        self.options = options or EncodingOptions()
        self._layout: ChunkLayout | None = None
        _ = self.layout  # validate now, not at first read

    @property
    def scale(self) -> Scale:
        return self.info.scales[self.index]

    @property
    def where(self) -> str:
        return f"{info_key(self.path)} scales[{self.index}] (key {self.scale.key!r})"

    # -- layout ------------------------------------------------------------------------------
    def _codecs(self) -> list[Codec]:
        scale = self.scale
        enc = scale.encoding
        if enc == "raw":
            return [PrecomputedRawCodec()]
        if enc == "jpeg":
            q = self.options.jpeg_quality
            return [JpegCodec(q if q is not None else scale.raw.get("jpeg_quality", 75))]
        if enc == "png":
            level = self.options.png_level
            return [PngCodec(level if level is not None else scale.raw.get("png_level"))]
        if enc == "compressed_segmentation":
            return [CompressedSegmentationCodec(scale.block_size)]
        raise UnsupportedFeatureError(f"{self.where}: encoding {enc!r} is not supported (shardstore: raw, jpeg, png, compressed_segmentation)")

    @property
    def layout(self) -> ChunkLayout:
        if self._layout is None:
            self._layout = self._build_layout()
        return self._layout

    def _build_layout(self) -> ChunkLayout:
        scale, info = self.scale, self.info
        dtype = info.dtype.newbyteorder("=")
        nc = info.num_channels
        shape = (*scale.size, nc)
        chunk = (*scale.chunk_size, nc)
        spec = ArraySpec(shape, dtype, dtype.type(0), ("x", "y", "z", "channel"))
        try:
            pipeline = CodecPipeline(self._codecs()).bind(ChunkSpec(chunk, dtype, dtype.type(0)))
        except MetadataError as e:
            raise MetadataError(f"{self.where}: {e}") from e
        prefix = scale_prefix(self.path, scale.key, self.where)
        grid = RegularGrid(shape, chunk)
        # results in Fortran order, as chunks are stored (and as CloudVolume returns them)
        common: dict[str, Any] = dict(spec=spec, grid=grid, pipeline=pipeline, edge_chunks="clipped", order="F")
        if scale.sharding is None:
            # CloudVolume's default gzipped chunk files are read too (bounded: a chunk's
            # encodings stay well under 4x its voxel bytes)
            gz_cap = 4 * int(np.prod(chunk, dtype=np.int64)) * dtype.itemsize + (64 << 10)
            return ChunkLayout(
                config=self.config,
                store=GzipChunkFiles(self.store, gz_cap),
                chunk_key=_chunk_name_fn(prefix, scale),
                describe_key=lambda key: f"chunk file {key!r}",
                **common,
            )
        sharding = ShardingSpec.from_json(scale.sharding, f"{self.where}.sharding")
        counts = _ShardCounts(sharding, scale.grid_shape)
        store = Uint64ShardedStore(PrefixStore(self.store, prefix), sharding, complete_shard=counts.complete, config=self.config)
        grid_shape = scale.grid_shape

        @functools.lru_cache(maxsize=1 << 16)
        def code(coords: tuple[int, ...]) -> int:
            return compressed_morton(coords[:3], grid_shape)

        def describe(key: str) -> str:
            return f"chunk {key} in shard file {prefix}/{store.shard_file(int(key))!s}"

        return ChunkLayout(
            config=self.config,
            store=store,
            chunk_key=lambda coords: str(code(coords)),
            describe_key=describe,
            write_unit_of=lambda coords: (sharding.locate(code(coords))[0],),  # shard by hash
            **common,
        )

    # -- FormatDriver ------------------------------------------------------------------------
    @property
    def attributes(self) -> dict[str, Any]:
        """The ``info`` members shardstore does not model (``mesh``, ``skeletons``, ...)."""
        return {k: copy.deepcopy(v) for k, v in self.info.raw.items() if k not in _MODELED}

    async def set_attributes(self, attributes: dict[str, Any]) -> None:
        clash = _MODELED & set(attributes)
        if clash:
            raise MetadataError(f"{info_key(self.path)}: {sorted(clash)} are not attributes; they describe the volume")
        self.info.raw = {**{k: v for k, v in self.info.raw.items() if k in _MODELED}, **copy.deepcopy(attributes)}
        await self.save()

    async def set_shape(self, shape: tuple[int, ...]) -> None:
        raise UnsupportedFeatureError(f"{self.where}: precomputed scales cannot be resized")

    @property
    def metadata(self) -> dict[str, Any]:
        return self.info.to_dict()

    async def save(self) -> None:
        await self.store.set(info_key(self.path), encode_info(self.info))


def _chunk_name_fn(prefix: str, scale: Scale) -> Callable[[tuple[int, ...]], str]:
    """Grid coords -> ``<prefix>/x0-x1_y0-y1_z0-z1`` (absolute, clipped at the volume edge)."""
    (ox, oy, oz), (cx, cy, cz), (sx, sy, sz) = scale.voxel_offset, scale.chunk_size, scale.size

    def name(coords: tuple[int, ...]) -> str:
        i, j, k = coords[0], coords[1], coords[2]
        x0, y0, z0 = i * cx, j * cy, k * cz
        return (
            f"{prefix}/{ox + x0}-{ox + min(x0 + cx, sx)}_{oy + y0}-{oy + min(y0 + cy, sy)}"
            f"_{oz + z0}-{oz + min(z0 + cz, sz)}"
        )

    return name


class _ShardCounts:
    """How many chunks of the grid each shard holds, computed on the first write."""

    def __init__(self, spec: ShardingSpec, grid_shape: tuple[int, ...]) -> None:
        self.spec = spec
        self.grid_shape = grid_shape
        self._counts: dict[int, int] | None = None

    def _compute(self) -> dict[int, int]:
        n = int(np.prod(self.grid_shape, dtype=np.float64))
        spec = self.spec
        if n > _MAX_COUNTED_CHUNKS or (spec.hash != "identity" and n > _MAX_MURMUR_COUNTED):
            return {}
        codes = morton_codes(self.grid_shape)
        if spec.hash == "identity":
            h = codes >> np.uint64(spec.preshift_bits) if spec.preshift_bits < 64 else np.zeros_like(codes)
            mask = np.uint64((1 << spec.shard_bits) - 1)
            shards = (h >> np.uint64(spec.minishard_bits)) & mask if spec.minishard_bits < 64 else np.zeros_like(h)
        else:
            shards = np.fromiter((spec.locate(int(c))[0] for c in codes), dtype=np.uint64, count=len(codes))
        values, counts = np.unique(shards, return_counts=True)
        return {int(v): int(c) for v, c in zip(values, counts)}

    def complete(self, shard: int, keys: frozenset[int]) -> bool:
        if self._counts is None:
            self._counts = self._compute()
        # the core only sends keys of in-grid chunks, each once
        return self._counts.get(shard, -1) == len(keys)
