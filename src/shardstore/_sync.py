"""The one bridge from the synchronous API to the asynchronous core.

A single daemon thread runs an event loop; sync calls submit coroutines to it and wait. This
works the same from plain scripts, from threads, and from inside a running loop (Jupyter),
where ``asyncio.run`` would fail.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import threading
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ._malloc import tune_malloc

__all__ = ["sync", "codec_pool", "codec_pool_size", "run_in_codec_pool"]

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None
_pool: ThreadPoolExecutor | None = None
_pid: int | None = None


def _ensure_loop() -> asyncio.AbstractEventLoop:
    global _loop, _thread, _pid
    tune_malloc()
    with _lock:
        # a forked child (e.g. a dask or multiprocessing worker) must not reuse the parent's loop
        if _loop is None or _pid != os.getpid():
            _loop = asyncio.new_event_loop()
            _loop.set_default_executor(ThreadPoolExecutor(max_workers=32, thread_name_prefix="shardstore-io"))
            _thread = threading.Thread(target=_loop.run_forever, name="shardstore-loop", daemon=True)
            _thread.start()
            _pid = os.getpid()
        return _loop


def sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on the background loop and return its result (re-raising its error)."""
    loop = _ensure_loop()
    if threading.current_thread() is _thread:
        raise RuntimeError("shardstore's synchronous API was called from its own event loop")
    return asyncio.run_coroutine_threadsafe(coro, loop).result()


def codec_pool_size() -> int:
    """How many encode/decode jobs can run at once."""
    return codec_pool()._max_workers


def codec_pool() -> ThreadPoolExecutor:
    """Threads for encode/decode: the C codecs and numpy release the GIL."""
    global _pool
    with _lock:
        if _pool is None or _pid != os.getpid():
            _pool = ThreadPoolExecutor(max_workers=max(os.cpu_count() or 1, 2), thread_name_prefix="shardstore-codec")
        return _pool


async def run_in_codec_pool(fn, *args) -> Any:
    """Await ``fn(*args)`` run in the codec pool."""
    return await asyncio.get_running_loop().run_in_executor(codec_pool(), fn, *args)


@atexit.register
def _shutdown() -> None:  # pragma: no cover - interpreter exit
    if _loop is not None and _loop.is_running():
        _loop.call_soon_threadsafe(_loop.stop)
