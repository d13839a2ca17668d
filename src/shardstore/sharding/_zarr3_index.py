"""The shard indexes of a ``zarr3.ZarrShardingStore``, and where an inner chunk lies in its shard.

``ShardIndexes`` decodes and checks an index from the bytes read (``decode``) and caches it
by shard key with the base's generation it was read at (LRU): an entry is used only while
the shard's generation is unchanged (another writer replacing the shard is noticed), or
always when the base cannot tell (None). Concurrent async reads of a cold shard fetch its
index once. ``store.byte_range.range_within`` turns an index entry (and a byte range of the inner chunk) into
the range to read of the shard, ``checked_chunk`` checks what that read gave.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

import numpy as np

from .._aio import inline_now
from ..codecs.sharding_indexed import EMPTY
from ..errors import CodecError
from ..store.base import ByteRange, RangeBR, Store, SuffixBR

if TYPE_CHECKING:
    import asyncio

    from ..store.sync_protocols import OpenValue
    from ._zarr3_layout import ShardLayout
else:
    from .._lazy import asyncio

__all__ = ["NOT_FOUND", "ShardIndexes", "checked_chunk"]

#: the index cache: "no entry at that generation", and the entry of a missing shard
NOT_FOUND = object()


def checked_chunk(data: bytes | None, want: RangeBR, shard_key: str, i: int) -> bytes:
    """``data`` read for ``want`` of inner chunk ``i``, or a CodecError when it falls short."""
    if data is None or len(data) != want.end - want.start:
        got = "nothing" if data is None else f"{len(data)} bytes"
        raise CodecError(
            f"shard {shard_key!r}: inner chunk {i} should span bytes [{want.start}, {want.end}) "
            f"but the shard gave {got} (truncated shard or bad index entry)"
        )
    return data


class ShardIndexes:
    """Decoded shard indexes by shard key, each with the generation it was read at."""

    def __init__(self, base: Store, layout: ShardLayout, size: int, name: Callable[[str], str]) -> None:
        self._base = base
        self._layout = layout
        #: how messages name a shard (``ZarrShardingStore._shard_name``)
        self._name = name
        # shard key -> (decoded index or NOT_FOUND, the base's generation token when read)
        self._cache: OrderedDict[str, tuple[object, Hashable | None]] = OrderedDict()
        self._size = size
        # shard key -> the index fetch in flight, so that concurrent reads of a cold shard
        # fetch its index once
        self._fetches: dict[str, asyncio.Future] = {}

    def __contains__(self, shard_key: str) -> bool:
        return shard_key in self._cache

    def clear(self) -> None:
        self._cache.clear()

    def forget(self, shard_key: str) -> None:
        self._cache.pop(shard_key, None)

    def put(self, shard_key: str, index: object, generation: Hashable | None) -> None:
        self._cache[shard_key] = (index, generation)
        self._cache.move_to_end(shard_key)
        while len(self._cache) > self._size:
            self._cache.popitem(last=False)

    def decode(self, shard_key: str, data: bytes, whole: bytes | None) -> list[list[int]]:
        """Decode and check an index; ``whole`` is the whole shard when we have it."""
        shard_key = self._name(shard_key)  # (for messages only)
        layout = self._layout
        isz = layout.index_size
        if len(data) < isz:
            raise CodecError(
                f"shard {shard_key!r} is truncated: {len(data)} bytes, shorter than its "
                f"{isz}-byte index"
            )
        index = layout.codec.decode_index(data, layout.shard_spec, shard_key)
        present = ~((index[:, 0] == EMPTY) & (index[:, 1] == EMPTY))
        if present.any():
            offsets, sizes = index[present, 0], index[present, 1]
            at_start = layout.codec.index_location == "start"
            if at_start and (offsets < np.uint64(isz)).any():
                raise CodecError(f"shard {shard_key!r}: an index entry overlaps the {isz}-byte index")
            if whole is not None:  # (a ranged read of an end index cannot know the shard size)
                end = np.uint64(len(whole) - (0 if at_start else isz))  # where chunk data must end
                if (sizes > end).any() or (offsets > end - sizes).any():
                    raise CodecError(
                        f"shard {shard_key!r}: an index entry points past the chunk data (into "
                        f"the index or past the end of the {len(whole)}-byte shard)"
                    )
        # plain ints: looking entries up per chunk is then ~10x cheaper than numpy scalars
        return index.tolist()

    def read_range(self) -> ByteRange:
        """The byte range of a shard that holds its index."""
        isz = self._layout.index_size
        return RangeBR(0, isz) if self._layout.codec.index_location == "start" else SuffixBR(isz)

    def index_bytes(self, whole: bytes) -> bytes:
        """The index's bytes of a whole shard."""
        isz = self._layout.index_size
        if len(whole) < isz:
            return whole
        return whole[:isz] if self._layout.codec.index_location == "start" else whole[len(whole) - isz :]

    def cached(self, shard_key: str, gen: Hashable | None) -> object:
        """The cached index (None for a missing shard) if still current at ``gen``, else NOT_FOUND."""
        cached = self._cache.get(shard_key)
        if cached is None or (gen is not None and cached[1] != gen):
            return NOT_FOUND
        with contextlib.suppress(KeyError):  # reads on several threads share the cache
            self._cache.move_to_end(shard_key)
        return None if cached[0] is NOT_FOUND else cached[0]

    def keep(self, shard_key: str, data: bytes | None, gen: Hashable | None) -> list[list[int]] | None:
        """Decode, check and cache an index read at ``gen`` (None: the shard is missing)."""
        if data is None:
            self.put(shard_key, NOT_FOUND, gen)
            return None
        index = self.decode(shard_key, data, None)
        self.put(shard_key, index, gen)
        return index

    async def get(self, shard_key: str) -> list[list[int]] | None:
        return (await self.at(shard_key))[0]

    async def at(self, shard_key: str) -> tuple[list[list[int]] | None, Hashable | None]:
        """The shard's index (None: missing) and the generation it was read at; cached while
        the base reports that generation unchanged, fetched once for concurrent callers on
        one loop."""
        gen = await self._base.generation(shard_key)
        cached = self._cache.get(shard_key)
        if cached is not None and (gen is None or cached[1] == gen):
            with contextlib.suppress(KeyError):
                self._cache.move_to_end(shard_key)
            return (None if cached[0] is NOT_FOUND else cached[0]), cached[1]  # type: ignore[return-value]
        if inline_now():  # a blocking read on its own (``_aio.run_inline``): no one to share with
            data, read_gen = await self._base.get_versioned(shard_key, self.read_range())
            return self.keep(shard_key, data, read_gen), read_gen
        loop = asyncio.get_running_loop()
        pending = self._fetches.get(shard_key)
        if pending is not None and pending.get_loop() is loop:
            return await asyncio.shield(pending)
        fut: asyncio.Future = loop.create_future()
        self._fetches[shard_key] = fut
        try:
            data, read_gen = await self._base.get_versioned(shard_key, self.read_range())
            result = self.keep(shard_key, data, read_gen), read_gen
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # (retrieved: no "never retrieved" warning when nobody waited)
            raise
        finally:
            if self._fetches.get(shard_key) is fut:
                del self._fetches[shard_key]
        fut.set_result(result)
        return result

    async def read_whole(self, shard_key: str) -> tuple[bytes | None, list[list[int]] | None, Hashable | None]:
        """The whole shard, its index (cached at the generation it was read at) and that generation."""
        whole, gen = await self._base.get_versioned(shard_key)
        if whole is None:
            self.put(shard_key, NOT_FOUND, gen)
            return None, None, gen
        index = self.decode(shard_key, self.index_bytes(whole), whole)
        self.put(shard_key, index, gen)
        return whole, index, gen

    def open_index(self, shard_key: str, value: OpenValue) -> list[list[int]]:
        """The index of the shard version ``value`` holds open: cached at its generation, or
        read from it (and cached)."""
        index = self.cached(shard_key, value.generation)
        if index is NOT_FOUND:  # (not cached at this generation)
            isz = self._layout.index_size
            at_start = self._layout.codec.index_location == "start"
            data = value.read(0, isz) if at_start else value.read(max(value.size - isz, 0), value.size)
            index = self.keep(shard_key, data, value.generation)
        return index  # type: ignore[return-value]  # (an open shard is never cached missing)
