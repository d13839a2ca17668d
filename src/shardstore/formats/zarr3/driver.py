"""Zarr v3 driver: metadata + chunk keys -> a ``ChunkLayout`` for the core. No chunk loops."""

from __future__ import annotations

import copy
from typing import Any

from ...codecs.base import ChunkSpec
from ...codecs.sharding_indexed import ShardingCodec
from ...core.grid import RegularGrid
from ...core.layout import ArraySpec, ChunkLayout, FormatDriver
from ...errors import UnsupportedFeatureError
from ...sharding.zarr3 import ShardLayout, ZarrShardingStore, inner_key, parse_inner_key
from ...store.base import Store
from .metadata import ArrayMetadata, chunk_key, encode_json

__all__ = ["Zarr3Driver", "metadata_key"]


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
        self.layout  # validate the codec chain now, not at first read

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
        pipeline = meta.codecs.bind(chunk)
        store: Store = self.store
        key_fn = self._base_key
        levels: list[ShardLayout] = []
        # each sharding level becomes a store adapter; the innermost chain is what the core runs
        while isinstance(pipeline.array_bytes, ShardingCodec):
            if pipeline.array_array or pipeline.bytes_bytes:
                raise UnsupportedFeatureError(
                    f"{metadata_key(self.path)}: codecs around sharding_indexed "
                    f"({[c.name for c in pipeline.codecs]}) are not supported; put them inside it"
                )
            codec = pipeline.array_bytes
            inner = chunk.with_shape(codec.chunk_shape)
            level = ShardLayout(
                codec=codec,
                shard_spec=chunk,
                inner_grid_shape=tuple(-(-s // c) for s, c in zip(meta.shape, inner.shape)),
                shard_key=key_fn,
            )
            levels.append(level)
            store = ZarrShardingStore(store, level)
            key_fn = inner_key
            chunk, pipeline = inner, codec.codecs
        self._shard_shape = meta.chunk_shape if levels else None
        grid = RegularGrid(meta.shape, chunk.shape)
        return ChunkLayout(
            spec=spec,
            grid=grid,
            pipeline=pipeline,
            store=store,
            chunk_key=key_fn,
            write_ratio=tuple(s // c for s, c in zip(meta.chunk_shape, chunk.shape)),
            describe_key=self._describer(levels),
        )

    def _describer(self, levels: list[ShardLayout]):
        if not levels:
            return repr

        def describe(key: str) -> str:
            coords = parse_inner_key(key, len(self.meta.shape))
            factor = [s // c for s, c in zip(self.meta.chunk_shape, self.layout.grid.chunk_shape)]
            top = tuple(c // f for c, f in zip(coords, factor))
            return f"inner chunk {list(coords)} in shard {levels[0].shard_key(top)!r}"

        return describe

    # -- FormatDriver ------------------------------------------------------------------------
    @property
    def read_chunk_shape(self) -> tuple[int, ...]:
        return self.layout.grid.chunk_shape

    @property
    def write_chunk_shape(self) -> tuple[int, ...] | None:
        self.layout
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
