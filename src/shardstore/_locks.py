"""Keyed asyncio locks: one per write unit of an array handle, held while a write runs.

They order the writes of one handle to one unit (a shard, a chunk), so that they do not race
each other inside the store's read-modify-write and need no retries; correctness across
handles, processes and machines comes from that read-modify-write itself
(``Store.update_many``: file locks, conditional PUTs). They are asyncio locks, taken on the
event loop; a write that runs on another thread (``core.writes.write_from_now``) takes them on the
loop too (``hold_from_thread``).
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Callable, Hashable, Iterable

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

    def hold_from_thread(self, loop: asyncio.AbstractEventLoop, keys: Iterable[Hashable]) -> Callable[[], None]:
        """Take the locks of ``keys`` on ``loop`` (which runs in another thread) and return
        the function that releases them; the calling thread blocks until all are held."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:  # waiting here would stop the loop that must grant the locks
            raise RuntimeError("shardstore's synchronous API was called from its own event loop")
        stack = contextlib.AsyncExitStack()

        async def take() -> None:
            await stack.enter_async_context(self.holding(keys))

        asyncio.run_coroutine_threadsafe(take(), loop).result()

        def release() -> None:
            asyncio.run_coroutine_threadsafe(stack.aclose(), loop).result()

        return release
