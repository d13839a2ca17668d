"""Whole-shard writes streamed chunk by chunk: bounded memory for shards of any size.

A write that covers every chunk of a shard does not need the stored shard, so nothing has to
be merged: its chunks are encoded in the codec pool a bounded window at a time (at least two
per codec thread, and ``IOConfig.stream_window_bytes`` of raw chunks), handed in the shard's
layout order to the sharding adapter as they complete, and written by it to the destination
as they arrive (``store.streamed``: a local temp file renamed into place at the end, an S3
multipart upload); the index is written last. Memory beside the input is the window, not
the shard (a 2 GiB shard would otherwise be held encoded, whole, before one ``set``).

The chunks and their order are described once (``streamed_unit``, ``_encoded_now`` /
``_encoded``); the blocking runner (a thread consuming a plain iterator, for stores that
write from any thread) and the async one (an async iterator, for S3) differ only in how they
wait for the next encoded chunk.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncGenerator, Callable, Generator, Sequence
from concurrent.futures import Executor, Future
from typing import TYPE_CHECKING

from .._sync import codec_pool, codec_pool_size, io_pool
from .indexing import ChunkProjection
from .layout import ChunkLayout

if TYPE_CHECKING:
    import asyncio

    from ..store.streamed import Buffer, SupportsUnitStreams
else:
    from .._lazy import asyncio

__all__ = ["StreamedUnit", "stream_unit", "stream_unit_now", "streamed_unit"]

#: the encoded chunk of one projection of the write (None: all fill, absent from the shard)
Encode = Callable[[ChunkProjection, str], "bytes | None"]

#: a shard's writer and its chunks, in the order its layout takes them
StreamedUnit = tuple["SupportsUnitStreams", list[tuple[ChunkProjection, str]]]


def streamed_unit(layout: ChunkLayout, group: Sequence[ChunkProjection]) -> StreamedUnit | None:
    """The group's shard writer and its chunks in layout order, when the group writes every
    chunk of one shard whole, the shard is at least ``stream_unit_bytes`` and its adapter
    streams (``Store.unit_streams``); else None (write it the usual way)."""
    streams = layout.store.unit_streams
    if streams is None or not group or not all(p.is_complete for p in group):
        return None
    if len(group) * layout.chunk_spec.nbytes < layout.config.stream_unit_bytes:
        return None
    keys = [layout.chunk_key(p.coords) for p in group]
    order = streams.stream_order(keys)
    if order is None:
        return None
    by_key = dict(zip(keys, group))
    return streams, [(by_key[key], key) for key in order]


def _window(layout: ChunkLayout) -> tuple[int, int]:
    """(chunks in flight, chunks per codec-pool job). In flight: ``stream_window_bytes``'
    worth, at least two per codec thread. Per job: enough that each thread has about two
    jobs of the window at a time; a job per chunk costs a thread hand-off (submit, wake-up,
    result, GIL exchange) per chunk, a real share of a fast codec's (blosc, raw) encode."""
    config = layout.config
    threads = codec_pool_size(config.codec_threads)
    window = max(2 * threads, config.stream_window_bytes // max(layout.chunk_spec.nbytes, 1))
    return window, max(1, window // (2 * threads))


def _prepared(
    encode: Encode, prepare: Callable[[bytes], Buffer], batch: list[tuple[ChunkProjection, str]]
) -> list[Buffer | None]:
    """A batch of chunks as the shard stores them, in order (run in the codec pool)."""
    out: list[Buffer | None] = []
    for p, key in batch:
        data = encode(p, key)
        out.append(None if data is None else prepare(data))
    return out


def _batches(items: list[tuple[ChunkProjection, str]], window: tuple[int, int]) -> list[list[tuple[ChunkProjection, str]]]:
    per_job = window[1]
    return [items[i : i + per_job] for i in range(0, len(items), per_job)]


def _encoded_now(
    items: list[tuple[ChunkProjection, str]], encode: Encode, prepare: Callable[[bytes], Buffer],
    window: tuple[int, int], pool: Executor,
) -> Generator[Buffer | None, None, None]:
    """The chunks encoded in ``pool`` (``window``: chunks in flight, chunks per job), yielded
    in order as their jobs finish."""
    jobs_in_flight = max(1, window[0] // window[1])
    pending: deque[Future] = deque()
    try:
        for batch in _batches(items, window):
            pending.append(pool.submit(_prepared, encode, prepare, batch))
            if len(pending) >= jobs_in_flight:
                yield from pending.popleft().result()
        while pending:
            yield from pending.popleft().result()
    finally:  # (stopped early by an error: the queued encodes are dropped)
        for f in pending:
            f.cancel()


async def _encoded(
    items: list[tuple[ChunkProjection, str]], encode: Encode, prepare: Callable[[bytes], Buffer],
    window: tuple[int, int], pool: Executor,
) -> AsyncGenerator[Buffer | None, None]:
    """``_encoded_now`` awaited on the event loop."""
    loop = asyncio.get_running_loop()
    jobs_in_flight = max(1, window[0] // window[1])
    pending: deque[asyncio.Future] = deque()
    try:
        for batch in _batches(items, window):
            pending.append(loop.run_in_executor(pool, _prepared, encode, prepare, batch))
            if len(pending) >= jobs_in_flight:
                for data in await pending.popleft():
                    yield data
        while pending:
            for data in await pending.popleft():
                yield data
    finally:
        for f in pending:
            f.cancel()


def stream_unit_now(layout: ChunkLayout, unit: StreamedUnit, encode: Encode) -> None:
    """Write one shard (``streamed_unit``) on this thread, its chunks encoded in the codec
    pool as the writer consumes them. The caller holds the shard's lock, and is not itself a
    codec pool thread (it waits for that pool's jobs)."""
    streams, items = unit
    chunks = _encoded_now(items, encode, streams.stream_value, _window(layout), codec_pool(layout.config.codec_threads))
    try:
        streams.stream_unit_sync([key for _, key in items], chunks)
    finally:
        chunks.close()


async def stream_unit(layout: ChunkLayout, unit: StreamedUnit, encode: Encode) -> None:
    """``stream_unit_now`` from the event loop: on an I/O thread when the adapter's base
    writes from any thread (files, memory), else with the chunks awaited here (S3)."""
    streams, items = unit
    config = layout.config
    if streams.streams_sync:
        await asyncio.get_running_loop().run_in_executor(io_pool(config.io_threads), stream_unit_now, layout, unit, encode)
        return
    chunks = _encoded(items, encode, streams.stream_value, _window(layout), codec_pool(config.codec_threads))
    try:
        await streams.stream_unit([key for _, key in items], chunks)
    finally:
        await chunks.aclose()
