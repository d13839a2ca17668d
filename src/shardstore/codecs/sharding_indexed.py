"""The Zarr v3 ``sharding_indexed`` codec: its configuration and the shard's binary layout.

Chunk I/O never goes through ``encode``/``decode`` here: the Zarr driver unwraps the codec and
reads and writes inner chunks through the sharding store adapter (``sharding/zarr3.py``), which
uses the index helpers of this class. Keeping the layout here lets the adapter stay free of
codec parsing, and keeps codecs/ free of I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import CodecError, MetadataError, UnsupportedFeatureError
from .base import ArrayBytesCodec, ChunkSpec
from .pipeline import CodecPipeline
from .registry import register_codec

__all__ = ["EMPTY", "ShardBuilder", "ShardingCodec"]

#: index value of an absent inner chunk (both offset and nbytes)
EMPTY = np.uint64(0xFFFFFFFFFFFFFFFF)

_DEFAULT_INDEX_CODECS = [
    {"name": "bytes", "configuration": {"endian": "little"}},
    {"name": "crc32c"},
]


@register_codec("sharding_indexed")
class ShardingCodec(ArrayBytesCodec):
    """``sharding_indexed``: a shard holds inner chunks plus a (offset, nbytes) index."""

    name = "sharding_indexed"

    def __init__(
        self,
        chunk_shape: tuple[int, ...],
        codecs: CodecPipeline,
        index_codecs: CodecPipeline | None = None,
        index_location: str = "end",
    ) -> None:
        if index_location not in ("start", "end"):
            raise MetadataError(
                f"sharding_indexed: index_location must be 'start' or 'end', got {index_location!r}"
            )
        if any(isinstance(c, bool) or not isinstance(c, int) or c <= 0 for c in chunk_shape):
            raise MetadataError(f"sharding_indexed: chunk_shape must be positive integers, got {chunk_shape!r}")
        self.chunk_shape = tuple(chunk_shape)
        self.codecs = codecs
        self.index_codecs = index_codecs or CodecPipeline.from_config(_DEFAULT_INDEX_CODECS)
        self.index_location = index_location

    @classmethod
    def _from_configuration(cls, configuration: dict[str, Any]) -> ShardingCodec:
        extra = set(configuration) - {"chunk_shape", "codecs", "index_codecs", "index_location"}
        if extra:
            raise MetadataError(f"sharding_indexed: unknown configuration members {sorted(extra)}")
        for member in ("chunk_shape", "codecs"):
            if member not in configuration:
                raise MetadataError(f"sharding_indexed: configuration lacks {member!r}")
        shape = configuration["chunk_shape"]
        if not isinstance(shape, list):
            raise MetadataError(f"sharding_indexed: chunk_shape must be a list, got {shape!r}")
        index_codecs = configuration.get("index_codecs", _DEFAULT_INDEX_CODECS)
        return cls(
            tuple(shape),
            CodecPipeline.from_config(configuration["codecs"]),
            CodecPipeline.from_config(index_codecs),
            configuration.get("index_location", "end"),
        )

    def _canonical_config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "configuration": {
                "chunk_shape": list(self.chunk_shape),
                "codecs": self.codecs.to_config(),
                "index_codecs": self.index_codecs.to_config(),
                "index_location": self.index_location,
            },
        }

    def canonical_config(self) -> dict[str, Any]:
        config = self._canonical_config()
        config["configuration"]["codecs"] = self.codecs.canonical_config()
        config["configuration"]["index_codecs"] = self.index_codecs.canonical_config()
        return config

    # -- validation -------------------------------------------------------------------------
    def validate(self, spec: ChunkSpec) -> None:
        if len(self.chunk_shape) != len(spec.shape):
            raise MetadataError(
                f"sharding_indexed: chunk_shape {list(self.chunk_shape)} has rank "
                f"{len(self.chunk_shape)}, the shard shape {list(spec.shape)} has rank {len(spec.shape)}"
            )
        if any(s % c for s, c in zip(spec.shape, self.chunk_shape)):
            raise MetadataError(
                f"sharding_indexed: inner chunk_shape {list(self.chunk_shape)} must divide the "
                f"shard shape {list(spec.shape)} exactly"
            )
        self.inner_spec(spec)  # validates the inner chain
        if self.index_size(spec) is None:
            raise MetadataError(
                "sharding_indexed: index_codecs must give a fixed-size index "
                f"(bytes, crc32c, transpose), got {[c.name for c in self.index_codecs.codecs]}"
            )

    def bind(self, spec: ChunkSpec) -> ShardingCodec:
        bound = ShardingCodec(
            self.chunk_shape,
            self.codecs.bind(self.inner_spec(spec)),
            self.index_codecs.bind(self._index_chunk_spec(spec)),
            self.index_location,
        )
        bound._source = self._source
        return bound

    # -- layout helpers used by the sharding adapter ----------------------------------------
    def chunks_per_shard(self, spec: ChunkSpec) -> tuple[int, ...]:
        return tuple(s // c for s, c in zip(spec.shape, self.chunk_shape))

    def inner_spec(self, spec: ChunkSpec) -> ChunkSpec:
        return spec.with_shape(self.chunk_shape)

    def _index_chunk_spec(self, spec: ChunkSpec) -> ChunkSpec:
        return ChunkSpec(self.chunks_per_shard(spec) + (2,), np.dtype("uint64"), EMPTY)

    def index_size(self, spec: ChunkSpec) -> int | None:
        return self.index_codecs.encoded_size(self._index_chunk_spec(spec))

    def decode_index(self, data: bytes, spec: ChunkSpec, key: str) -> np.ndarray:
        """Decode an index into an ``(n, 2)`` uint64 array (C order over inner chunks)."""
        try:
            index = self.index_codecs.decode(data, self._index_chunk_spec(spec))
        except CodecError as e:
            raise type(e)(f"shard {key!r}: cannot decode the shard index: {e}") from e
        return np.ascontiguousarray(index).reshape(-1, 2)

    def encode_index(self, index: np.ndarray, spec: ChunkSpec) -> bytes:
        return self.index_codecs.encode(
            index.reshape(self.chunks_per_shard(spec) + (2,)), self._index_chunk_spec(spec)
        )

    def assemble(self, chunks: Mapping[int, bytes], spec: ChunkSpec) -> list[bytes] | None:
        """Build a shard from encoded inner chunks (by C-order index), as the list of its
        parts in order (the caller joins or writes them); None if it holds none.

        Inner chunks are written in C order without gaps, as tensorstore does. This is
        ``ShardBuilder`` fed all at once, so a streamed shard is byte-identical.
        """
        builder = ShardBuilder(self, spec)
        parts: list[bytes] = []
        for i in sorted(chunks):
            parts.extend(builder.add(i, chunks[i]))
        ends = builder.finish()
        if ends is None:
            return None
        head, tail = ends
        return [head, *parts] if head else [*parts, tail]

    # -- whole-shard transforms are not how shardstore does I/O ------------------------------
    def encode(self, array: np.ndarray, spec: ChunkSpec) -> bytes:
        raise UnsupportedFeatureError(
            "sharding_indexed is applied through the sharding store adapter, not as a plain codec"
        )

    def decode(self, data: bytes, spec: ChunkSpec) -> np.ndarray:
        raise UnsupportedFeatureError(
            "sharding_indexed is applied through the sharding store adapter, not as a plain codec"
        )


class ShardBuilder:
    """One shard laid out as its encoded inner chunks arrive, in ascending C-order index: what
    a streamed shard write needs to know without holding the chunks.

    The chunk data follows ``head_size`` bytes reserved for an index at the start (0 with the
    index at the end), each chunk right after the previous one; ``finish`` gives the index
    bytes for the reserved head or for the tail.
    """

    def __init__(self, codec: ShardingCodec, spec: ChunkSpec) -> None:
        size = codec.index_size(spec)
        if size is None:
            raise MetadataError("sharding_indexed: index_codecs must give a fixed-size index")
        self._codec = codec
        self._spec = spec
        self._index = np.full((math.prod(codec.chunks_per_shard(spec)), 2), EMPTY, dtype=np.uint64)
        self._index_size = size
        #: bytes reserved before the first chunk (the index, when it goes at the start)
        self.head_size = size if codec.index_location == "start" else 0
        self._offset = self.head_size
        self._last = -1
        self._count = 0

    def add(self, i: int, data: Any) -> list[Any]:
        """Place inner chunk ``i`` (bytes-like; None: absent) after the chunks added before
        it; returns what to write next (the chunk, or nothing)."""
        if i <= self._last:
            raise ValueError(f"inner chunks must arrive in ascending order: {i} after {self._last}")
        self._last = i
        if data is None:
            return []
        n = memoryview(data).nbytes
        self._index[i] = (self._offset, n)
        self._offset += n
        self._count += 1
        return [data]

    def finish(self) -> tuple[bytes, bytes] | None:
        """(head, tail): the encoded index as the bytes of the reserved head, or as the tail
        after the chunks; None when no chunk was added (the shard is not stored)."""
        if not self._count:
            return None
        index = self._codec.encode_index(self._index, self._spec)
        return (index, b"") if self.head_size else (b"", index)
