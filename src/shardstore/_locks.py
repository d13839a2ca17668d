"""Keyed locks: one per write unit of an array handle, held while a write runs.

They order the writes of one handle to one unit (a shard, a chunk), so that they do not race
each other inside the store's read-modify-write and need no retries; correctness across
handles, processes and machines comes from that read-modify-write itself
(``Store.update_many``: file locks, conditional PUTs).

Coroutines on any event loop (``holding``) and blocking writes on any thread (``hold_now``,
``core.writes.write_from_now``) take the same locks. A blocking write takes them where it
runs: when they were asyncio locks, a blocking write took and released them on the event
loop's thread, two round trips that cost 1-2 ms per write of a 256^3 N5 volume's 64 blocks
(a tenth of the write) and started the loop thread for a process's first write. A lock is
free or held; a release hands a held lock straight to its oldest waiter (a thread's event
or a coroutine's future, granted on that coroutine's loop), so neither kind can starve the
other, and a waiter cancelled before its grant runs passes the lock on.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable, Hashable, Iterable
from typing import TYPE_CHECKING, TypeVar, Union

if TYPE_CHECKING:
    import asyncio
else:
    from ._lazy import asyncio

__all__ = ["KeyedLocks"]

#: one waiter for a held lock: a blocked thread's event, or a waiting coroutine's future
_Waiter = Union[threading.Event, "asyncio.Future[None]"]
_W = TypeVar("_W", threading.Event, "asyncio.Future[None]")


class _Lock:
    """One key's lock (weakly held by ``KeyedLocks``: dropped when nobody holds or waits)."""

    __slots__ = ("held", "waiters", "__weakref__")

    def __init__(self) -> None:
        self.held = False
        self.waiters: deque[_Waiter] = deque()


class KeyedLocks:
    """A lock per key, created on first use and dropped when nobody holds it."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()  # guards every ``_Lock``'s state and the table
        self._locks: weakref.WeakValueDictionary[Hashable, _Lock] = weakref.WeakValueDictionary()

    def _take_or_queue(self, key: Hashable, waiter: Callable[[], _W]) -> tuple[_Lock, _W | None]:
        """The key's lock, held now (None) or with a new waiter queued for it."""
        with self._mutex:
            lock = self._locks.get(key)
            if lock is None:
                lock = self._locks[key] = _Lock()
            if not lock.held:
                lock.held = True
                return lock, None
            w = waiter()
            lock.waiters.append(w)
            return lock, w

    def _release(self, lock: _Lock) -> None:
        """Free ``lock``, or hand it to its oldest waiter."""
        with self._mutex:
            if not lock.waiters:
                lock.held = False
                return
            w = lock.waiters.popleft()
        if isinstance(w, threading.Event):
            w.set()
            return
        try:
            w.get_loop().call_soon_threadsafe(self._grant, lock, w)
        except RuntimeError:  # that loop is closed: nobody waits there any more
            self._release(lock)

    def _grant(self, lock: _Lock, future: asyncio.Future[None]) -> None:
        if future.cancelled():  # (its coroutine stopped waiting: the lock goes on)
            self._release(lock)
        else:
            future.set_result(None)

    def _abandon(self, lock: _Lock, w: _Waiter) -> None:
        """A waiter that stops waiting: out of the queue, or, if the lock was handed to it
        already, released (a future not granted yet is cancelled: ``_grant`` releases)."""
        with self._mutex:
            try:
                lock.waiters.remove(w)
                return
            except ValueError:
                pass
        if isinstance(w, threading.Event) or (w.done() and not w.cancelled()):
            self._release(lock)
        else:
            w.cancel()

    async def _acquire(self, key: Hashable) -> _Lock:
        lock, w = self._take_or_queue(key, asyncio.get_running_loop().create_future)
        if w is not None:
            try:
                await w
            except BaseException:
                self._abandon(lock, w)
                raise
        return lock

    def _acquire_now(self, key: Hashable) -> _Lock:
        lock, w = self._take_or_queue(key, threading.Event)
        if w is not None:
            try:
                w.wait()
            except BaseException:  # (e.g. KeyboardInterrupt while waiting)
                self._abandon(lock, w)
                raise
        return lock

    @contextlib.asynccontextmanager
    async def holding(self, keys: Iterable[Hashable]) -> AsyncIterator[None]:
        """Hold the locks of ``keys``, taken in sorted order so that two batches with
        overlapping keys never wait on each other crosswise."""
        held: list[_Lock] = []
        try:
            for key in sorted(set(keys)):  # type: ignore[type-var]
                held.append(await self._acquire(key))
            yield
        finally:
            for lock in reversed(held):
                self._release(lock)

    def hold_now(self, keys: Iterable[Hashable]) -> Callable[[], None]:
        """Take the locks of ``keys`` on this thread (in sorted order, as ``holding``),
        blocking until all are held; returns the function that releases them."""
        held: list[_Lock] = []

        def release() -> None:
            for lock in reversed(held):
                self._release(lock)

        try:
            for key in sorted(set(keys)):  # type: ignore[type-var]
                held.append(self._acquire_now(key))
        except BaseException:
            release()
            raise
        return release
