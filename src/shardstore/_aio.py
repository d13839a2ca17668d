"""Awaiting several coroutines at once, and running a coroutine without an event loop.

``run_inline`` runs a coroutine to its end on the calling thread with no event loop at all,
for the work of a store that answers at once (local files, memory: a create's or open's
metadata). While it runs, ``to_thread`` calls its function right there and ``gather``
awaits one awaitable after the other: nothing waits for a loop, so none is made and asyncio
is not imported (``_lazy``: 6.5 MiB and 25 ms of a process that never needs it). Remote
stores' coroutines ask ``inline_now`` and make obstore's blocking calls instead of awaiting
its futures: a blocking read of one chunk then costs no event loop round trip either.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import asyncio
else:
    from ._lazy import asyncio

__all__ = ["gather", "inline_now", "run_inline", "sleep", "to_thread"]

T = TypeVar("T")

_inline = threading.local()


def inline_now() -> bool:
    """Whether this thread runs a coroutine under ``run_inline`` (its waits must block)."""
    return getattr(_inline, "on", False)


def run_inline(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to its end here, without an event loop; it may await only work that
    completes at once (``to_thread``, ``gather``, stores' inline answers). Raises
    ``RuntimeError`` if it waits for anything else (a loop's future)."""
    before = inline_now()
    _inline.on = True
    try:
        while True:
            try:
                waited = coro.send(None)
            except StopIteration as done:
                return done.value
            if waited is not None:  # (None: a bare yield, as ``asyncio.sleep(0)`` makes)
                coro.close()
                raise RuntimeError(f"a coroutine run without an event loop waited for {waited!r}")
    finally:
        _inline.on = before


async def to_thread(fn: Callable[..., T], /, *args: Any) -> T:
    """``asyncio.to_thread``; under ``run_inline``, ``fn`` called right here."""
    if inline_now():
        return fn(*args)
    return await asyncio.to_thread(fn, *args)


async def sleep(seconds: float) -> None:
    """``asyncio.sleep``; under ``run_inline``, ``time.sleep`` (a retry's backoff)."""
    if inline_now():
        time.sleep(seconds)
    else:
        await asyncio.sleep(seconds)


async def gather(aws: Iterable[Awaitable[T]], *, return_exceptions: bool = False) -> list[Any]:
    """``asyncio.gather`` of ``aws`` (their results in order; the first error raised, or with
    ``return_exceptions`` every outcome once all are done), except that a single awaitable
    is awaited right here: no task and the event loop iterations it costs, on the path of the
    usual read of one chunk, one range or one shard. Under ``run_inline``, one after the
    other."""
    todo = list(aws)
    if len(todo) == 1 and not return_exceptions:
        return [await todo[0]]
    if not inline_now():
        return list(await asyncio.gather(*todo, return_exceptions=return_exceptions))
    out: list[Any] = []
    for i, aw in enumerate(todo):
        try:
            out.append(await aw)
        except Exception as e:
            if not return_exceptions:
                for rest in todo[i + 1 :]:  # (never awaited: closed, not left to warn)
                    if isinstance(rest, Coroutine):
                        rest.close()
                raise
            out.append(e)
    return out
