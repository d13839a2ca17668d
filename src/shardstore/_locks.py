"""Keyed asyncio locks: one per shard or write unit, held across a read-merge-write.

Without them two concurrent partial writes to one shard both read the old shard and the later
write drops the earlier one's data. Used by the core (per write unit) and by the sharding
adapters (per shard file); writes run on event loops only, so asyncio locks suffice.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Hashable, Iterable

__all__ = ["KeyedLocks"]


class KeyedLocks:
    """An asyncio lock per key, created on first use and dropped when nobody holds it."""

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[Hashable, asyncio.Lock] = weakref.WeakValueDictionary()

    def __call__(self, key: Hashable) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    @contextlib.asynccontextmanager
    async def holding(self, keys: Iterable[Hashable]) -> AsyncIterator[None]:
        """Hold the locks of ``keys``, taken in sorted order so that two batches with
        overlapping keys never wait on each other crosswise."""
        async with contextlib.AsyncExitStack() as stack:
            for key in sorted(set(keys)):  # type: ignore[type-var]
                await stack.enter_async_context(self(key))
            yield
