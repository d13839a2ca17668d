"""Synchronous reads of Zarr v3 shards held open at one version (``UnitReads``).

The blocking runner asks a ``ZarrShardingStore`` over a store that can hold values open
(``Store.sync_opens``: files, memory) for the shards of a read: each shard is opened once,
its index taken from the open version (or from the adapter's index cache when it was read at
that very generation), and the runner's threads then read each inner chunk they decode with a
positioned read of the same open file. Index and data thus always come from one version of
the shard, with no generation check before and after, and reading overlaps decoding as it
does for chunks stored in separate files.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ..codecs.sharding_indexed import EMPTY
from ..errors import CodecError
from ..store.base import MISSING, ByteRange, RangeBR
from ..store.byte_range import range_within
from ._zarr3_index import NOT_FOUND, checked_chunk

if TYPE_CHECKING:
    from ..store.sync_protocols import OpenValue, SupportsOpenSync
    from .zarr3 import ZarrShardingStore

__all__ = ["OpenShards"]

_EMPTY = int(EMPTY)


class _Shard:
    """One open shard: its version (None: missing), decoded index, where chunk data ends."""

    __slots__ = ("data_end", "index", "name", "value")

    def __init__(self, value: OpenValue | None, index: list[list[int]] | None, data_end: int, name: str) -> None:
        self.value = value
        self.index = index
        self.data_end = data_end
        self.name = name


class OpenShards:
    """Inner chunks of the shards opened for one read, readable from any thread until ``close``."""

    def __init__(self, store: ZarrShardingStore, opens: SupportsOpenSync) -> None:
        self._store = store
        self._opens = opens
        self._shards: dict[str, _Shard] = {}
        self._where: dict[str, tuple[_Shard, int]] = {}  # inner key -> (its shard, index entry)
        self._lock = threading.Lock()  # (a key asked for that was not opened up front)

    def add(self, key: str) -> None:
        """Open the shard holding inner chunk ``key`` (once per shard)."""
        if key in self._where:
            return
        store = self._store
        shard, i = store.layout.locate(store._inner_coords(key))
        shard_key = store.layout.shard_key(shard)
        opened = self._shards.get(shard_key)
        if opened is None:
            opened = self._shards[shard_key] = self._open(shard_key)
        self._where[key] = (opened, i)

    def _open(self, shard_key: str) -> _Shard:
        store = self._store
        name = store._shard_name(shard_key)
        value = self._opens.open_sync(shard_key)
        if value is None:
            store._indexes.put(shard_key, NOT_FOUND, MISSING)
            return _Shard(None, None, 0, name)
        try:
            index = store._indexes.open_index(shard_key, value)
        except BaseException:
            value.close()
            raise
        return _Shard(value, index, value.size - store._end_guard, name)

    def get_sync(self, key: str, byte_range: ByteRange | None = None) -> bytes | None:
        found = self._locate(key)
        if found is None:
            return None
        value, off, n, name, i = found
        r = range_within(off, n, byte_range)
        return checked_chunk(value.read(r.start, r.end), r, name, i)

    def get_transient_sync(self, key: str, max_bytes: int) -> bytes | memoryview | None:
        found = self._locate(key)
        if found is None:
            return None
        value, off, n, name, i = found
        r = RangeBR(off, off + n)
        return checked_chunk(value.read_transient(off, off + n, max_bytes), r, name, i)

    def _locate(self, key: str) -> tuple[OpenValue, int, int, str, int] | None:
        """(open shard, offset, size, shard name, index entry) of an inner chunk; None: absent."""
        where = self._where.get(key)
        if where is None:
            with self._lock:
                self.add(key)
            where = self._where[key]
        opened, i = where
        index, value = opened.index, opened.value
        if index is None or value is None:
            return None
        off, n = index[i]
        if off == _EMPTY and n == _EMPTY:
            return None
        if off + n > opened.data_end:
            raise CodecError(
                f"shard {opened.name!r}: inner chunk {i} at bytes [{off}, {off + n}) runs into the shard "
                "index or past the end of the shard (truncated shard or bad index entry)"
            )
        return value, off, n, opened.name, i

    def close(self) -> None:
        for opened in self._shards.values():
            if opened.value is not None:
                opened.value.close()

