"""N5 driver: ``attributes.json`` + block keys -> a ``ChunkLayout`` for the core. No chunk loops.

The core sees the NumPy C-order view: shape and block shape are the N5 lists reversed, and
chunk ``coords`` (C order) are stored under ``<dataset>/<x>/<y>/<z>`` (N5 order, reversed).
Edge blocks are "clipped" (encoded at their in-bounds shape, as n5-java and z5py write them);
missing blocks read as 0.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np

from ...codecs.base import ChunkSpec
from ...codecs.n5_block import N5BlockCodec
from ...codecs.pipeline import CodecPipeline
from ...core.grid import RegularGrid
from ...core.layout import ArraySpec, ChunkLayout, FormatDriver
from ...errors import MetadataError
from ...store.base import Store
from .metadata import DatasetMetadata, attributes_key, encode_json

__all__ = ["N5Driver", "block_key_fn"]

def block_key_fn(path: str) -> Callable[[tuple[int, ...]], str]:
    """Chunk coords (C order) -> block key (N5 order) under the dataset at ``path``."""
    prefix = f"{path}/" if path else ""

    def key(coords: tuple[int, ...]) -> str:
        return prefix + "/".join(map(str, reversed(coords)))

    return key


class N5Driver(FormatDriver):
    """One N5 dataset at ``path`` in ``store``."""

    format_name = "n5"

    def __init__(self, store: Store, path: str, meta: DatasetMetadata) -> None:
        self.store = store
        self.path = path.strip("/")
        self.meta = meta
        self._layout: ChunkLayout | None = None
        self._layout = self._build_layout()  # validate the compression against the data type now

    @property
    def layout(self) -> ChunkLayout:
        if self._layout is None:
            self._layout = self._build_layout()
        return self._layout

    def _build_layout(self) -> ChunkLayout:
        meta = self.meta
        fill = meta.dtype.type(0)
        chunk = ChunkSpec(meta.chunk_shape, meta.dtype, fill)
        try:
            pipeline = CodecPipeline([N5BlockCodec(meta.codec)]).bind(chunk)
        except MetadataError as e:
            raise MetadataError(f"{attributes_key(self.path)}: {e}") from e
        return ChunkLayout(
            config=self.config,
            spec=ArraySpec(meta.shape, meta.dtype, fill),
            grid=RegularGrid(meta.shape, meta.chunk_shape),
            pipeline=pipeline,
            store=self.store,
            chunk_key=block_key_fn(self.path),
            edge_chunks="clipped",
            describe_key=lambda key: f"N5 block {key!r}",
        )

    @property
    def block_codec(self) -> N5BlockCodec:
        """The bound block codec (for varlength blocks)."""
        codec = self.layout.pipeline.array_bytes
        if not isinstance(codec, N5BlockCodec):  # the pipeline is built around one (see layout)
            raise TypeError(f"{attributes_key(self.path)}: array->bytes codec {codec!r} is not an N5 block codec")
        return codec

    # -- FormatDriver ------------------------------------------------------------------------
    @property
    def attributes(self) -> dict[str, Any]:
        return copy.deepcopy(self.meta.attributes)

    async def set_attributes(self, attributes: dict[str, Any]) -> None:
        attributes = copy.deepcopy(dict(attributes))
        reserved = {"dimensions", "blockSize", "dataType", "compression", "compressionType", "n5"} & set(attributes)
        if reserved:
            raise MetadataError(
                f"{attributes_key(self.path)}: {sorted(reserved)} are N5 metadata keys, not user attributes"
            )
        self.meta.attributes = attributes
        await self.save()

    async def set_shape(self, shape: tuple[int, ...]) -> None:
        self.meta.dimensions = tuple(int(s) for s in shape)[::-1]
        self._layout = None
        await self.save()

    @property
    def metadata(self) -> dict[str, Any]:
        return self.meta.to_dict()

    async def save(self) -> None:
        await self.store.set(attributes_key(self.path), encode_json(self.meta.to_dict()))


def native(dtype: Any) -> np.dtype:
    dtype = np.dtype(dtype)
    return dtype.newbyteorder("=") if dtype.byteorder not in "=|" else dtype
