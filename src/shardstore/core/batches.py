"""The pieces every chunk read and write is run with (``core/io.py``, ``core/writes.py``):
projections grouped by write unit, a bounded set of coroutines, a batch spread over the codec
pool and the event loop's thread, a native batch with the generic path for what it leaves,
and a chunk's decode that names the key when it fails."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from .._sync import codec_pool, codec_pool_size
from ..config import IOConfig
from ..errors import CodecError
from .indexing import ChunkProjection
from .layout import ChunkLayout
from .threads import Feed

if TYPE_CHECKING:
    import asyncio
else:
    from .._lazy import asyncio

__all__ = ["bounded", "decode_chunk", "group_by_unit", "native_then", "spread", "whole_chunk"]

# Concurrency limits and thresholds come from the layout's ``IOConfig`` (``layout.config``),
# read once per call: ``write_groups_in_flight``, ``write_batch_chunks``,
# ``read_groups_in_flight``, ``small_read_chunks``, ``inline_item_seconds``, the pool sizes.


def group_by_unit(layout: ChunkLayout, projections: Iterable[ChunkProjection]) -> list[list[ChunkProjection]]:
    """Projections grouped by write unit (shard); one-chunk units are batched together, so
    that a group's chunks spread over the codec pool and reach the store as one batch."""
    if layout.one_chunk_units:
        flat = list(projections)
        n = layout.config.write_batch_chunks
        return [flat[i : i + n] for i in range(0, len(flat), n)]
    groups: dict[tuple[int, ...], list[ChunkProjection]] = {}
    for p in projections:
        groups.setdefault(layout.write_unit(p.coords), []).append(p)
    return list(groups.values())


async def bounded(limit: int, jobs: list) -> None:
    """Await coroutine factories with at most ``limit`` running.

    After the first error no further job starts, and the ones running are waited for before
    the error is raised: their thread work (file writes) cannot be cancelled, so a caller
    that sees the error must not have writes of this call still landing afterwards. If the
    caller itself is cancelled, every job is cancelled.
    """
    if len(jobs) == 1:  # the common small read: no tasks, fewer loop iterations
        await jobs[0]()
        return
    sem = asyncio.Semaphore(limit)
    failed = False

    async def run(job: Callable[[], Awaitable[object]]) -> None:
        nonlocal failed
        async with sem:
            if failed:
                return
            try:
                await job()
            except BaseException:
                failed = True
                raise

    tasks = [asyncio.ensure_future(run(job)) for job in jobs]
    try:
        await asyncio.gather(*tasks)
    except asyncio.CancelledError:
        for t in tasks:
            t.cancel()
        raise
    except BaseException:
        failed = True
        await asyncio.gather(*tasks, return_exceptions=True)  # the running ones finish
        raise


def decode_chunk(
    layout: ChunkLayout, key: str, coords: tuple[int, ...], data: bytes, use: Literal["copied", "transient", "kept"] = "copied"
) -> np.ndarray:
    """The decoded chunk. ``use``: "transient" when the caller copies it out before this
    thread decodes again, so it may live in a scratch buffer (``CodecPipeline.decode_transient``);
    "kept" when it becomes a chunk cache entry (``CodecPipeline.decode_kept``)."""
    pipeline = layout.pipeline
    spec = layout.spec_for(coords)
    try:
        if use == "transient":
            return pipeline.decode_transient(data, spec, layout.config.scratch_max_bytes)
        return pipeline.decode_kept(data, spec) if use == "kept" else pipeline.decode(data, spec)
    except CodecError as e:
        raise type(e)(f"{layout.describe_key(key)}: {e}") from e


async def spread(fn: Callable[..., list], items: list, *args: Any, config: IOConfig, light: bool = False) -> list:
    """``fn(batch, *args)`` over ``items`` split across the codec pool *and* this thread.

    This thread takes part (the event loop thread would otherwise sit idle while the pool
    works), and every thread takes shares of one list as it goes (``core/threads.py``'s
    ``Feed``, as the blocking runner's threads do), so that a pool thread that starts late
    or is slowed (by the client's I/O threads, on few cores) leaves the rest to the others
    instead of a fixed half that this thread would wait for.
    Work of about a memory copy per item all runs here, because handing it to threads costs
    more in GIL hand-offs than it saves: ``light`` says so up front (see ``Codec.light``);
    otherwise the first item is timed and cheap items (blosc chunks stored uncompressed, say)
    stay on this thread too (``config.inline_item_seconds``). Returns the concatenated results, in the order of ``items``.
    """
    if not items:
        return []
    if light or len(items) == 1:
        return fn(items, *args)
    started = time.perf_counter()
    out = list(fn(items[:1], *args))
    items = items[1:]
    if time.perf_counter() - started < config.inline_item_seconds:
        out.extend(fn(items, *args))
        return out
    n = min(codec_pool_size(config.codec_threads), len(items))
    feed = Feed(items, n, config.feed_takes, fn, args, collect=True)
    # submitted now (run_in_executor, not a task that would start only after this thread's part)
    loop, pool = asyncio.get_running_loop(), codec_pool(config.codec_threads)
    futures = [loop.run_in_executor(pool, feed.drain) for _ in range(n - 1)]
    try:
        feed.drain()
    finally:
        rest = await asyncio.gather(*futures, return_exceptions=True)
        feed.release()
    for r in rest:
        if isinstance(r, BaseException):
            raise r
    return out + feed.results()


def native_then(batch: list[tuple[ChunkProjection, str]], native: Callable, generic: Callable, *args: Any) -> Any:
    """``native(batch)`` (``core/rawread.py``, ``core/rawwrite.py``), then ``generic(rest,
    *args)`` for the chunks it leaves."""
    rest = native(batch)
    return generic(rest, *args) if rest else []


def whole_chunk(p: ChunkProjection, shape: tuple[int, ...]) -> bool:
    return all(
        isinstance(s, slice) and s.indices(n) == (0, n, 1) for s, n in zip(p.chunk_selection, shape)
    ) and len(p.chunk_selection) == len(shape)


