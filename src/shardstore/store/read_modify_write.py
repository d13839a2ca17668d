"""The optimistic read-modify-write of one stored value, described once without I/O.

``update_steps`` yields the steps (read with generation, merge, conditional write, wait); the
event-loop runner (``Store._update``) and the thread runner (``run_update_steps_sync``) differ
only in how they wait. Every store's ``update_many`` goes through one of them, retrying a
lost race ``retry_conflicts`` times (``DEFAULT_RETRY_CONFLICTS``; ``inherited_retry_conflicts``
for an adapter, from the store chain below it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Hashable
from typing import TYPE_CHECKING, Any

from ..config import IOConfig
from ..errors import ConflictError

if TYPE_CHECKING:
    import asyncio

    from .base import Parts, Store
else:
    from .._lazy import asyncio

__all__ = [
    "DEFAULT_RETRY_CONFLICTS",
    "Update",
    "UpdateStep",
    "backoff_seconds",
    "conflict_backoff",
    "inherited_retry_conflicts",
    "run_update",
    "run_update_steps_sync",
    "update_steps",
]

#: a read-modify-write of one stored value: ``update(old) -> new``, where ``old`` is the value
#: as stored (None: missing) and ``new`` the value to store (None: delete the key). It must be
#: a pure function of ``old``: after a lost race it is called again with the newer value.
Update = Callable[[bytes | None], "bytes | Parts | None"]

#: read-modify-writes that lost a race are redone this often by default before the
#: ``ConflictError`` is raised (enough for 16+ writers updating one unit at the same moment)
DEFAULT_RETRY_CONFLICTS = 32


def inherited_retry_conflicts(store: Store | None) -> int:
    """The ``retry_conflicts`` setting of the first store down a ``.base`` chain that has one
    (e.g. ``S3Store(retry_conflicts=3)`` under a sharding adapter), else 0. Adapters expose it
    so the core knows how often to redo a read-merge-write that lost a race."""
    while store is not None:
        value = store.__dict__.get("retry_conflicts", getattr(type(store), "retry_conflicts", None))
        if isinstance(value, int):
            return value
        store = getattr(store, "base", None)
    return 0


def backoff_seconds(attempt: int) -> float:
    """The wait before retry number ``attempt`` (0-based) of a read-modify-write that lost a
    race: exponential (5 ms doubling up to ~0.3 s) with full jitter, so that writers that
    collided spread out instead of colliding again."""
    import random  # (here: only a lost race waits)

    return 0.005 * 2 ** min(attempt, 6) * (0.25 + random.random())


async def conflict_backoff(attempt: int) -> None:
    """Sleep ``backoff_seconds(attempt)`` on the event loop."""
    await asyncio.sleep(backoff_seconds(attempt))


#: one step of a read-modify-write and what the runner sends back: ``("read",)`` -> ``(old,
#: generation)``; ``("merge", old)`` -> ``update(old)``; ``("write", new, generation)`` -> None
#: when the conditional write landed, else its ``ConflictError``; ``("wait", attempt)`` -> None
UpdateStep = tuple[Any, ...]


def update_steps(key: str, update: Update, retries: int) -> Generator[UpdateStep, Any, None]:
    """The optimistic read-modify-write of one key, described once, without I/O: read it with
    its generation, merge, write conditionally on that generation; after a lost race wait,
    re-read and merge again, up to ``retries`` times, then raise ``ConflictError`` naming the
    key. ``Store._update`` runs it on the event loop, ``run_update_steps_sync`` on a thread."""
    for attempt in range(retries + 1):
        old, gen = yield ("read",)
        new = yield ("merge", old)
        if new is None and old is None:
            return  # nothing there, nothing to store (a fill write to a missing unit)
        error = yield ("write", new, gen)
        if error is None:
            return
        if attempt >= retries:
            raise ConflictError(
                f"{key!r} was changed by another writer during each of {attempt + 1} "
                f"read-modify-write attempts (retry_conflicts={retries}); nothing was written"
            ) from error
        yield ("wait", attempt)


def run_update_steps_sync(
    steps: Generator[UpdateStep, Any, None],
    update: Update,
    read: Callable[[], tuple[bytes | None, Hashable | None]],
    write: Callable[[bytes | Parts | None, Hashable | None], None],
) -> None:
    """Run ``update_steps`` on this thread: ``read()`` -> (value, generation); ``write(new,
    generation)`` raises ``ConflictError`` when the value changed since."""
    reply: object = None
    while True:
        try:
            step = steps.send(reply)
        except StopIteration:
            return
        if step[0] == "read":
            reply = read()
        elif step[0] == "merge":
            reply = update(step[1])
        elif step[0] == "write":
            try:
                write(step[1], step[2])
                reply = None
            except ConflictError as e:
                reply = e
        else:
            time.sleep(backoff_seconds(step[1]))
            reply = None



async def run_update(update: Update, old: bytes | None, inline_bytes: int = IOConfig.inline_update_bytes,
                     codec_threads: int | None = None) -> bytes | Parts | None:
    """``update(old)``; for values over ``inline_bytes`` in the codec thread pool (decode,
    merge and encode release the GIL), so the event loop keeps serving other requests."""
    if old is None or len(old) <= inline_bytes:
        return update(old)
    from .._sync import codec_pool

    return await asyncio.get_running_loop().run_in_executor(codec_pool(codec_threads), update, old)
