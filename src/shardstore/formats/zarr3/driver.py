"""Zarr v3 driver: metadata + chunk keys -> a ``ChunkLayout`` for the core. No chunk loops."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np

from ...codecs.base import ChunkSpec
from ...codecs.pipeline import CodecPipeline
from ...codecs.sharding_indexed import ShardingCodec
from ...codecs.transpose import TransposeCodec
from ...core.grid import RegularGrid
from ...core.layout import ArraySpec, ChunkLayout, FormatDriver
from ...errors import MetadataError, UnsupportedFeatureError
from ...sharding.zarr3 import ShardLayout, ZarrShardingStore, inner_key, parse_inner_key
from ...store.base import Store
from .metadata import ArrayMetadata, chunk_key, encode_json

__all__ = ["Zarr3Driver", "metadata_key"]


def _permuted(key_fn: Callable[[tuple[int, ...]], str], order: tuple[int, ...]) -> Callable[[tuple[int, ...]], str]:
    """``key_fn`` taking coordinates of a space transposed by ``order`` (identity: unchanged)."""
    if order == tuple(range(len(order))):
        return key_fn
    inv = tuple(int(i) for i in np.argsort(order))
    return lambda coords: key_fn(tuple(coords[i] for i in inv))


def metadata_key(path: str) -> str:
    return f"{path}/zarr.json" if path else "zarr.json"


class Zarr3Driver(FormatDriver):
    """One Zarr v3 array at ``path`` in ``store``."""

    format_name = "zarr3"

    def __init__(self, store: Store, path: str, meta: ArrayMetadata) -> None:
        self.store = store
        self.path = path.strip("/")
        self.meta = meta
        self._layout: ChunkLayout | None = None
        self._shard_shape: tuple[int, ...] | None = None
        _ = self.layout  # validate the codec chain now, not at first read

    # -- layout ------------------------------------------------------------------------------
    def _base_key(self, coords: tuple[int, ...]) -> str:
        key = chunk_key(self.meta, coords)
        return f"{self.path}/{key}" if self.path else key

    @property
    def layout(self) -> ChunkLayout:
        if self._layout is None:
            self._layout = self._build_layout()
        return self._layout

    def _build_layout(self) -> ChunkLayout:
        meta = self.meta
        spec = ArraySpec(meta.shape, meta.dtype, meta.fill_value, meta.dimension_names)
        chunk = ChunkSpec(meta.chunk_shape, meta.dtype, meta.fill_value)
        try:
            pipeline = meta.codecs.bind(chunk)
        except MetadataError as e:
            raise MetadataError(f"{metadata_key(self.path)}: {e}") from e
        store: Store = self.store
        key_fn: Callable[[tuple[int, ...]], str] = self._base_key
        # ``perm`` maps the codec space of the current level to array space: the chunk the
        # codecs see is the array chunk transposed by ``perm`` (transposes before sharding)
        perm = tuple(range(len(meta.shape)))
        levels: list[ShardLayout] = []
        # each sharding level becomes a store adapter; the innermost chain is what the core runs
        while isinstance(pipeline.array_bytes, ShardingCodec):
            if pipeline.bytes_bytes or not all(isinstance(c, TransposeCodec) for c in pipeline.array_array):
                raise UnsupportedFeatureError(
                    f"{metadata_key(self.path)}: codecs {[c.name for c in pipeline.codecs]}: only "
                    "'transpose' may come before sharding_indexed, and nothing after it"
                )
            rel = tuple(range(len(perm)))
            for t in pipeline.array_array:
                assert isinstance(t, TransposeCodec)  # checked just above
                rel = tuple(rel[i] for i in t.order)
            perm = tuple(perm[i] for i in rel)
            codec = pipeline.array_bytes
            shard = pipeline.specs(chunk)[-1]  # the shard as the sharding codec sees it
            inner = shard.with_shape(codec.chunk_shape)
            shape_here = tuple(meta.shape[p] for p in perm)
            level = ShardLayout(
                codec=codec,
                shard_spec=shard,
                inner_grid_shape=tuple(-(-s // c) for s, c in zip(shape_here, inner.shape)),
                shard_key=_permuted(key_fn, rel),
            )
            levels.append(level)
            store = ZarrShardingStore(store, level, config=self.config)
            key_fn = inner_key
            chunk, pipeline = inner, codec.codecs
        self._shard_shape = meta.chunk_shape if levels else None
        # back to array space for the core: the read chunk, its keys, and a leading transpose
        inv = tuple(int(i) for i in np.argsort(perm))
        read_chunk = tuple(chunk.shape[i] for i in inv)
        if perm != tuple(range(len(perm))):
            pipeline = CodecPipeline([TransposeCodec(perm), *pipeline.codecs])
            key_fn = _permuted(key_fn, inv)
        return ChunkLayout(
            config=self.config,
            spec=spec,
            grid=RegularGrid(meta.shape, read_chunk),
            pipeline=pipeline,
            store=store,
            chunk_key=key_fn,
            write_ratio=tuple(s // c for s, c in zip(meta.chunk_shape, read_chunk)),
            describe_key=self._describer(levels),
            # results in the order chunks are stored in: C, or F behind a reversing transpose
            order=pipeline.stored_order,
        )

    def _describer(self, levels: list[ShardLayout]) -> Callable[[str], str]:
        if not levels:
            return lambda key: f"chunk {key!r}"
        rank = len(self.meta.shape)

        def describe(key: str) -> str:
            outer = key
            for level in reversed(levels):  # inner-chunk key -> its shard's key, level by level
                shard, _ = level.locate(parse_inner_key(outer, rank))
                outer = level.shard_key(shard)
            return f"inner chunk {list(parse_inner_key(key, rank))} in shard {outer!r}"

        return describe

    # -- FormatDriver ------------------------------------------------------------------------
    @property
    def read_chunk_shape(self) -> tuple[int, ...]:
        return self.layout.grid.chunk_shape

    @property
    def write_chunk_shape(self) -> tuple[int, ...] | None:
        _ = self.layout  # computes _shard_shape
        return self._shard_shape

    @property
    def attributes(self) -> dict[str, Any]:
        return copy.deepcopy(self.meta.attributes)

    async def set_attributes(self, attributes: dict[str, Any]) -> None:
        self.meta.attributes = copy.deepcopy(attributes)
        await self.save()

    async def set_shape(self, shape: tuple[int, ...]) -> None:
        self.meta.shape = tuple(shape)
        self._layout = None
        await self.save()

    @property
    def metadata(self) -> dict[str, Any]:
        return self.meta.to_dict()

    async def save(self) -> None:
        await self.store.set(metadata_key(self.path), encode_json(self.meta.to_dict()))
