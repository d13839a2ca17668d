"""Where the inner chunks of a ``sharding_indexed`` array live: the adapter's keys for them
(``inner_key`` / ``parse_inner_key``) and ``ShardLayout``, the geometry the driver hands the
adapter (``zarr3.ZarrShardingStore``): which shard holds an inner chunk, at which index entry.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..codecs.base import ChunkSpec
from ..codecs.sharding_indexed import ShardingCodec
from ..errors import InvalidKeyError

__all__ = ["ShardLayout", "inner_key", "parse_inner_key"]


def inner_key(coords: Sequence[int]) -> str:
    """The adapter's key for an inner chunk at grid ``coords`` (rank 0: ``"0"``)."""
    return ".".join(map(str, coords)) if coords else "0"


def parse_inner_key(key: str, rank: int) -> tuple[int, ...]:
    """Coordinates from an inner-chunk key; anything else is an InvalidKeyError (this is the
    adapter's whole key validation: digits and dots cannot escape a store)."""
    if not isinstance(key, str):
        raise InvalidKeyError(f"store key must be a str, got {type(key).__name__}: {key!r}")
    if rank == 0:
        if key != "0":
            raise InvalidKeyError(f"not an inner-chunk key of a rank-0 sharded array: {key!r}")
        return ()
    parts = key.split(".")
    if len(parts) != rank or not all(p.isascii() and p.isdigit() for p in parts):
        raise InvalidKeyError(f"not an inner-chunk key of a rank-{rank} sharded array: {key!r}")
    return tuple(int(p) for p in parts)


@dataclass(frozen=True)
class ShardLayout:
    """Where inner chunks live: what the driver tells the adapter."""

    codec: ShardingCodec  # bound: its ``codecs`` pipeline is the inner chain
    shard_spec: ChunkSpec  # the shard as a chunk (full shard shape)
    inner_grid_shape: tuple[int, ...]  # inner chunks per dim over the whole array
    shard_key: Callable[[tuple[int, ...]], str]  # shard grid coords -> base store key

    @functools.cached_property
    def chunks_per_shard(self) -> tuple[int, ...]:
        return self.codec.chunks_per_shard(self.shard_spec)

    @functools.cached_property
    def index_size(self) -> int:
        size = self.codec.index_size(self.shard_spec)
        assert size is not None  # validated when the codec was bound
        return size

    def locate(self, coords: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
        """Inner grid coords -> (shard grid coords, C-order index inside the shard)."""
        cps = self.chunks_per_shard
        if len(coords) != len(cps):
            raise InvalidKeyError(f"inner chunk {list(coords)} does not have rank {len(cps)}")
        shard = []
        index = 0
        # plain arithmetic: this runs once per chunk of every read (np.ravel_multi_index is 10x slower)
        for c, n, g in zip(coords, cps, self.inner_grid_shape):
            if not 0 <= c < g:
                raise InvalidKeyError(f"inner chunk {list(coords)} is outside the grid {list(self.inner_grid_shape)}")
            q, r = divmod(c, n)
            shard.append(q)
            index = index * n + r
        return tuple(shard), index

    def valid_in_shard(self, shard: tuple[int, ...]) -> list[int]:
        """C-order indices of the shard's inner chunks that lie inside the array."""
        cps = self.chunks_per_shard
        counts = [min(n, g - s * n) for s, n, g in zip(shard, cps, self.inner_grid_shape)]
        if all(c == n for c, n in zip(counts, cps)):
            return list(range(math.prod(cps)))
        return [int(np.ravel_multi_index(local, cps)) for local in itertools.product(*map(range, counts))]

    @property
    def shard_grid_shape(self) -> tuple[int, ...]:
        return tuple(-(-g // n) for g, n in zip(self.inner_grid_shape, self.chunks_per_shard))
