"""The one bridge from the synchronous API to the asynchronous core.

A single daemon thread runs an event loop; sync calls submit coroutines to it and wait. This
works the same from plain scripts, from threads, and from inside a running loop (Jupyter),
where ``asyncio.run`` would fail.

Reads over stores that work from any event loop (memory, local files) may instead run on an
event loop of the calling thread (``sync(..., here=True)``): that saves the two thread
hand-offs (~0.2 ms, a fifth of a one-chunk read) and lets reads from several user threads
(e.g. dask workers) run side by side instead of queueing on one loop thread.
"""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ._aio import run_inline
from ._lazy import asyncio_imported
from .config import IOConfig

if TYPE_CHECKING:
    import asyncio
else:
    from ._lazy import asyncio

__all__ = ["check_not_on_loop", "codec_pool", "codec_pool_size", "io_pool", "loop_running_here", "sync", "sync_on"]

T = TypeVar("T")

_lock = threading.RLock()  # io_pool() is called while holding it
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None
_pid: int | None = None
#: thread pools by (kind, size), and the process they were made in
_pools: dict[tuple[str, int], ThreadPoolExecutor] = {}
_pools_pid: int | None = None
# counted once: ``os.cpu_count`` reads a file under /sys on Linux, and every blocking read
# asks for its codec pool (tens of microseconds a call, a few percent of a 100^3 box read)
_DEFAULT_CODEC_THREADS = max(os.cpu_count() or 1, 2)
_local = threading.local()


def _after_fork_in_child() -> None:
    # a fork while another thread held ``_lock`` (making the loop or a pool) would leave the
    # child's first blocking call waiting on it forever; the loop and pools are remade lazily
    global _lock
    _lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _ensure_loop() -> asyncio.AbstractEventLoop:
    global _loop, _thread, _pid
    with _lock:
        # a forked child (e.g. a dask or multiprocessing worker) must not reuse the parent's loop
        if _loop is None or _pid != os.getpid():
            _loop = asyncio.new_event_loop()
            _loop.set_default_executor(io_pool())
            _thread = threading.Thread(target=_loop.run_forever, name="shardstore-loop", daemon=True)
            _thread.start()
            _pid = os.getpid()
        return _loop


def _thread_loop() -> asyncio.AbstractEventLoop:
    """This thread's own event loop (made on first use, kept for the thread's life)."""
    pid, loop = getattr(_local, "loop", (None, None))
    if loop is None or pid != os.getpid():
        loop = asyncio.new_event_loop()
        loop.set_default_executor(io_pool())
        _local.loop = (os.getpid(), loop)
        # close it when the thread goes away (else a ResourceWarning for an unclosed loop)
        weakref.finalize(threading.current_thread(), loop.close)
    return loop


def check_not_on_loop() -> None:
    """Refuse to block shardstore's loop thread (a blocking call there waits for work that
    only that loop could do: it would hang)."""
    if _thread is not None and threading.current_thread() is _thread:
        raise RuntimeError("shardstore's synchronous API was called from its own event loop")


def sync(coro: Coroutine[Any, Any, T], *, here: bool = False) -> T:
    """Run ``coro`` to completion and return its result (re-raising its error).

    ``here=True``: run it on this thread's own loop when no loop is running in this thread;
    only for coroutines whose stores work from any loop and that take no asyncio locks.
    """
    if here and threading.current_thread() is not _thread:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return _thread_loop().run_until_complete(coro)
    loop = _ensure_loop()
    check_not_on_loop()
    return asyncio.run_coroutine_threadsafe(coro, loop).result()


class _AnyLoop(Protocol):
    runs_on_any_loop: bool
    answers_inline: bool


def sync_on(store: _AnyLoop, coro: Coroutine[Any, Any, T]) -> T:
    """``sync`` for a coroutine that works on ``store`` alone and takes no asyncio locks (a
    create's or open's metadata): run right here without a loop (``_aio.run_inline``) when the
    store answers inline (local files, memory) and no loop runs in this thread, else on this
    thread's own loop when the store works from any loop, so that no thread hand-off, and
    for a process's first call no loop thread (a first N5 create: 2.7-3.4 -> 2.1-2.4 ms) and
    no asyncio import, is waited for."""
    if store.answers_inline and not loop_running_here():  # (shardstore's loop thread runs one)
        return run_inline(coro)
    return sync(coro, here=store.runs_on_any_loop)


def loop_running_here() -> bool:
    """Whether an event loop runs in this thread (never, while asyncio is not imported)."""
    return asyncio_imported() and asyncio._get_running_loop() is not None


class _SharedPool(ThreadPoolExecutor):
    """An executor shared by several loops: a loop closing (e.g. when its thread ends and
    the loop is collected) shuts down its default executor, which must not stop the others."""

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        return None


def io_pool(threads: int | None = None) -> ThreadPoolExecutor:
    """Threads for blocking I/O (file reads and writes), shared by every loop: one pool per
    size (``IOConfig.io_threads``; None: its default), made on first use in each process."""
    return _pool_of("io", threads or IOConfig.io_threads)


def codec_pool_size(threads: int | None = None) -> int:
    """How many encode/decode jobs can run at once in ``codec_pool(threads)``."""
    return codec_pool(threads)._max_workers


def codec_pool(threads: int | None = None) -> ThreadPoolExecutor:
    """Threads for encode/decode (the C codecs and numpy release the GIL): one pool per size
    (``IOConfig.codec_threads``; None: the number of CPUs, at least 2)."""
    return _pool_of("codec", threads or _DEFAULT_CODEC_THREADS)


def _pool_of(kind: str, threads: int) -> ThreadPoolExecutor:
    global _pools_pid
    with _lock:
        # a forked child must not use the parent's pools (their threads did not survive the fork)
        if _pools_pid != os.getpid():
            _pools.clear()
            _pools_pid = os.getpid()
        pool = _pools.get((kind, threads))
        if pool is None:
            if kind == "io":
                pool = _SharedPool(max_workers=threads, thread_name_prefix="shardstore-io")
            else:
                pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="shardstore-codec")
            _pools[(kind, threads)] = pool
        return pool


@atexit.register
def _shutdown() -> None:  # pragma: no cover - interpreter exit
    if _loop is not None and _loop.is_running():
        _loop.call_soon_threadsafe(_loop.stop)
