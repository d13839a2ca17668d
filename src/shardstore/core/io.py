"""Chunk reads and writes: the only place in shardstore that loops over chunks.

Projections are grouped by write unit (a shard, or a single chunk when unsharded) so that each
group is one ``get_many`` / ``set_many`` batch: a sharding adapter then fetches each shard's
index once and rewrites each shard once. Decoding and encoding run in the codec thread pool
(the C codecs and numpy copies release the GIL) while the event loop fetches the next groups.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import time
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import Future
from typing import Any

import numpy as np

from .._assign import assign
from .._locks import KeyedLocks
from .._sync import codec_pool, codec_pool_size, io_pool
from ..config import IOConfig
from ..errors import ChunkNotFoundError, CodecError
from ..store.base import RangeBR
from ..store.sync_protocols import SupportsGetSync, SupportsGetTransientSync, SupportsSetSync, UnitReads
from .chunk_cache import (
    Generations,
    bypassed,
    keep_placed,
    owned,
    place_hits,
    take_cached,
    unit_generations,
    unit_generations_async,
)
from .indexing import ChunkProjection
from .layout import ChunkLayout, fill_mask
from .rawread import raw_reader
from .rawwrite import raw_writer
from .spanread import span_reader, span_units
from .streaming import stream_unit, stream_unit_now, streamed_unit
from .threads import share_now

__all__ = ["UnitLocks", "read_into", "read_into_now", "reshape_chunks", "write_from", "write_from_now", "writes_now"]

# Concurrency limits and thresholds come from the layout's ``IOConfig`` (``layout.config``),
# read once per call: ``write_groups_in_flight``, ``write_batch_chunks``,
# ``read_groups_in_flight``, ``small_read_chunks``, ``inline_item_seconds``, the pool sizes.


def _group(layout: ChunkLayout, projections: Iterable[ChunkProjection]) -> list[list[ChunkProjection]]:
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


async def _bounded(limit: int, jobs: list) -> None:
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


def _decode(layout: ChunkLayout, key: str, coords: tuple[int, ...], data: bytes, transient: bool = False) -> np.ndarray:
    """The decoded chunk; ``transient``: the caller copies it out before this thread decodes
    again, so it may live in a scratch buffer (``CodecPipeline.decode_transient``)."""
    pipeline = layout.pipeline
    try:
        if transient:
            return pipeline.decode_transient(data, layout.spec_for(coords), layout.config.scratch_max_bytes)
        return pipeline.decode(data, layout.spec_for(coords))
    except CodecError as e:
        raise type(e)(f"{layout.describe_key(key)}: {e}") from e


# -- reads -----------------------------------------------------------------------------------
def _selected(layout: ChunkLayout, p: ChunkProjection, key: str, data: bytes) -> np.ndarray:
    """``decoded chunk[p.chunk_selection]``, to be copied out at once; a partial selection
    first asks the pipeline for a partial decode (e.g. only the blosc blocks it needs), else
    the whole chunk is decoded."""
    if not p.is_complete and layout.pipeline.decodes_partially:
        try:
            part = layout.pipeline.decode_region(data, layout.spec_for(p.coords), p.chunk_selection)
        except CodecError as e:
            raise type(e)(f"{layout.describe_key(key)}: {e}") from e
        if part is not None:
            return part
    return _decode(layout, key, p.coords, data, transient=True)[p.chunk_selection]


def _selected_from(layout: ChunkLayout, p: ChunkProjection, key: str, read: Callable[..., bytes | None]) -> np.ndarray | None:
    """``chunk[p.chunk_selection]`` read piecewise: the codec asks for the byte ranges it needs
    (headers, then a few blosc blocks) instead of the whole chunk; None: read it whole."""
    try:
        return layout.pipeline.decode_region_from(
            lambda start, stop: read(key, RangeBR(start, stop)), layout.spec_for(p.coords), p.chunk_selection
        )
    except CodecError as e:
        raise type(e)(f"{layout.describe_key(key)}: {e}") from e


def _into(layout: ChunkLayout, p: ChunkProjection, key: str, data: bytes, out: np.ndarray) -> bool:
    """Decode a chunk the projection takes whole straight into its place in ``out`` (no
    decoded buffer, no copy); False when the codec or the place does not allow it."""
    spec = layout.spec_for(p.coords)
    if not _whole_chunk(p, spec.shape):
        return False
    target = out[p.out_selection]
    if target.shape != spec.shape or not target.flags.c_contiguous:
        return False
    try:
        return layout.pipeline.decode_into(data, spec, target)
    except CodecError as e:
        raise type(e)(f"{layout.describe_key(key)}: {e}") from e


def _scatter(
    batch: list[tuple[ChunkProjection, str, bytes | None]],
    layout: ChunkLayout,
    out: np.ndarray,
    strict: bool,
    reads: UnitReads | None = None,
    gens: Generations | None = None,
) -> list:
    """The one description of a chunk read after its fetch: decode each chunk of ``batch``
    (``(projection, key, stored bytes or None when missing)``) and place its part in ``out``;
    a missing chunk gives the fill value, or with ``strict`` raises ``ChunkNotFoundError``.

    With ``reads`` (the blocking runner: the store, or the shards opened for this read) the
    bytes are fetched here, on this thread: a partial selection first through the codec's
    ranged partial decode, then the whole chunk; the async runner fetched them on the event
    loop and passes them in. Chunks named in ``gens``
    are decoded whole and kept in the chunk cache at that generation (``take_cached``).
    """
    ranged = reads is not None and layout.pipeline.reads_partially
    scratch = layout.config.scratch_max_bytes
    into = layout.pipeline.decodes_into
    cache = layout.chunk_cache if gens else None
    for p, key, data in batch:
        gen = gens.get(key) if cache is not None and gens is not None else None
        if reads is not None:
            if ranged and not p.is_complete and gen is None:
                part = _selected_from(layout, p, key, reads.get_sync)
                if part is not None:
                    assign(out, p.out_selection, part)
                    continue
            # (decoded and copied out before this thread reads again: its reusable buffer)
            data = reads.get_transient_sync(key, scratch)
        if data is None:
            if strict:
                raise ChunkNotFoundError(f"{layout.describe_key(key)} is missing")
            out[p.out_selection] = layout.spec.fill_value
        elif gen is not None and cache is not None:
            chunk = owned(_decode(layout, key, p.coords, data))
            cache.put(key, gen, chunk)
            assign(out, p.out_selection, chunk[p.chunk_selection])
        elif not (into and p.is_complete and _into(layout, p, key, data, out)):
            assign(out, p.out_selection, _selected(layout, p, key, data))
    return []


def read_into_now(
    layout: ChunkLayout, projections: Iterable[ChunkProjection], out: np.ndarray, *, strict: bool = False
) -> bool:
    """``read_into`` without an event loop, for stores with synchronous reads (files, memory,
    shards of those): the calling thread and the codec pool read, decode and scatter the
    chunks directly, which skips the sync bridge and the loop's per-chunk hops (hundreds of
    microseconds on a read of a few dozen chunks). Returns False, having done nothing, when
    the store declares no synchronous reads.
    """
    reads = layout.store.sync_reads
    if reads is None:
        return False
    strict = strict or layout.missing_chunks == "error"
    pipeline = layout.pipeline
    config = layout.config
    gens: Generations | None = None
    if layout.chunk_cache is not None:
        projections = list(projections)
        if not bypassed(layout, projections):
            generations = unit_generations(layout, projections, reads.generation_sync)
            projections, gens, hits = take_cached(layout, projections, generations)
            share_now(place_hits, hits, out, config=config, free=True)
            if not projections:
                return True
    unit_reads = None if layout.one_chunk_units else layout.store.sync_unit_reads
    spans = None
    if unit_reads is not None:
        projections = list(projections)
        spans = span_reader(layout, out) if len(projections) > 1 else None  # (one: core/spanread.py)
    if spans is not None:
        # shard files read, decoded and placed natively (core/spanread.py); the chunks it
        # leaves (missing, damaged) take the generic path, one by one. The native calls hold
        # no GIL, so a second thread pays off as for any GIL-free batch. Chunks to cache go
        # native only when the read places them whole (``keep_placed`` copies them back)
        whole, projections = _placed_whole(layout, projections) if gens else (projections, [])
        units = span_units(layout, whole)
        chunk_reads = _StoreReads(reads, layout.store.transient_reads)
        if gens:
            share_now(_native_kept, [[unit] for unit in units], spans, layout, out, strict, chunk_reads, gens,
                      config=config, free=True, memo=layout.threads_memo)
        else:
            share_now(_native_then, units, spans, _scatter, layout, out, strict, chunk_reads,
                      config=config, free=True, memo=layout.threads_memo)
        if not projections:
            return True
    if unit_reads is not None:
        # shards: each opened once at one version (its index read once), then the threads
        # read the chunks they decode from it, so reading overlaps decoding
        def read_units(group: list[ChunkProjection]) -> None:
            items = [(p, layout.chunk_key(p.coords), None) for p in group]
            units = unit_reads.open_units_sync([key for _, key, _ in items])
            try:
                share_now(_scatter, items, layout, out, strict, units, gens, config=config, slow=pipeline.slow_decode,
                          gil=pipeline.holds_gil, memo=layout.threads_memo)
            finally:
                units.close()

        groups = _group(layout, projections)
        if sum(map(len, groups)) <= config.small_read_chunks:  # (as the async runner: one spread)
            read_units([p for g in groups for p in g])
        else:
            for g in groups:
                read_units(g)
        return True

    chunks = _StoreReads(reads, layout.store.transient_reads)
    native = raw_reader(layout, out)
    if native is not None:
        whole, projections = _placed_whole(layout, projections) if gens else (list(projections), [])
        items = [(p, layout.chunk_key(p.coords), None) for p in whole]
        if gens:
            share_now(_native_kept, [[it] for it in items], native, layout, out, strict, chunks, gens, config=config,
                      free=True, memo=layout.threads_memo)
        else:
            share_now(_native_then, items, native, _scatter, layout, out, strict, chunks, config=config, free=True,
                      memo=layout.threads_memo)
    items = [(p, layout.chunk_key(p.coords), None) for p in projections]
    if items:
        share_now(_scatter, items, layout, out, strict, chunks, gens, config=config, slow=pipeline.slow_decode,
                  gil=pipeline.holds_gil, memo=layout.threads_memo)
    return True


class _StoreReads:
    """A store's chunk values (one per key: chunk files, memory) as the ``UnitReads`` that
    ``_scatter`` reads through."""

    __slots__ = ("_transient", "get_sync")

    def __init__(self, reads: SupportsGetSync, transient: SupportsGetTransientSync | None) -> None:
        self.get_sync = reads.get_sync
        self._transient = transient

    def get_transient_sync(self, key: str, max_bytes: int) -> bytes | memoryview | None:
        # chunk files read into this thread's reused buffer where the store offers one
        t = self._transient
        return self.get_sync(key) if t is None else t.get_transient_sync(key, max_bytes)

    def close(self) -> None:
        pass


def _placed_whole(
    layout: ChunkLayout, projections: Iterable[ChunkProjection]
) -> tuple[list[ChunkProjection], list[ChunkProjection]]:
    """(the chunks a read places whole into its output, the others)."""
    whole: list[ChunkProjection] = []
    rest: list[ChunkProjection] = []
    for p in projections:
        (whole if p.is_complete and _whole_chunk(p, layout.spec_for(p.coords).shape) else rest).append(p)
    return whole, rest


def _native_then(batch: list[tuple[ChunkProjection, str]], native: Callable, generic: Callable, *args: Any) -> Any:
    """``native(batch)`` (``core/rawread.py``, ``core/rawwrite.py``), then ``generic(rest,
    *args)`` for the chunks it leaves."""
    rest = native(batch)
    return generic(rest, *args) if rest else []


def _native_kept(
    batch: list[list], native: Callable, layout: ChunkLayout, out: np.ndarray, strict: bool, reads: UnitReads,
    gens: Generations,
) -> list:
    """``_native_then`` for each native call of ``batch`` (the items of one chunk file, or a
    list of one shard's items), keeping the whole chunks it placed in the chunk cache right
    after (``keep_placed``), while they are still in the CPU's caches."""
    for call in batch:
        _native_then(call, native, _scatter, layout, out, strict, reads)
        items = call[0] if call and isinstance(call[0], list) else call
        keep_placed([item[0] for item in items], layout, out, gens)
    return []


async def _spread(fn: Callable[..., list], items: list, *args: Any, config: IOConfig, light: bool = False) -> list:
    """``fn(batch, *args)`` over ``items`` split across the codec pool *and* this thread.

    One batch per worker, the first run right here: a pool hop costs tens of microseconds
    per job, and the event loop thread would otherwise sit idle while the pool works.
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
    size = -(-len(items) // n)
    batches = [items[i : i + size] for i in range(0, len(items), size)]
    # submitted now (run_in_executor, not a task that would start only after the inline batch)
    loop, pool = asyncio.get_running_loop(), codec_pool(config.codec_threads)
    futures = [loop.run_in_executor(pool, fn, b, *args) for b in batches[1:]]
    try:
        out.extend(fn(batches[0], *args))
    finally:
        rest = await asyncio.gather(*futures, return_exceptions=True)
    for r in rest:
        if isinstance(r, BaseException):
            raise r
        out.extend(r)
    return out


async def read_into(
    layout: ChunkLayout, projections: Iterable[ChunkProjection], out: np.ndarray, *, strict: bool = False
) -> None:
    """Fill ``out`` from the chunks the projections name; missing chunks give the fill value.

    With ``strict`` (or a layout whose ``missing_chunks`` is "error") a missing chunk raises
    ``ChunkNotFoundError`` naming it.
    """
    strict = strict or layout.missing_chunks == "error"
    config = layout.config
    if layout.store.sync_reads is not None:
        # files or memory: the loop-free path, off this loop's thread (one mechanism for both)
        await asyncio.get_running_loop().run_in_executor(
            io_pool(config.io_threads), lambda: read_into_now(layout, projections, out, strict=strict)
        )
        return
    gens: Generations | None = None
    if layout.chunk_cache is not None:
        projections = list(projections)
        if not bypassed(layout, projections):
            # (remote stores: a HEAD per unit, so that a hit is never another writer's old data)
            generations = await unit_generations_async(layout, projections, layout.store.checked_generation)
            projections, gens, hits = take_cached(layout, projections, generations)
            await _spread(place_hits, hits, out, config=config)
            if not projections:
                return
    groups = _group(layout, projections)

    async def fetch(group: list[ChunkProjection]) -> list[tuple[ChunkProjection, str, bytes | None]]:
        keys = [layout.chunk_key(p.coords) for p in group]
        datas = await layout.store.get_many([(k, None) for k in keys])
        return list(zip(group, keys, datas))

    if sum(map(len, groups)) <= config.small_read_chunks:
        # a small read (a box across a few shards): fetch everything, then decode it all in
        # one spread, so the work is balanced across threads instead of per shard
        fetched = await asyncio.gather(*(fetch(g) for g in groups))
        await _spread(_scatter, [item for found in fetched for item in found], layout, out, strict, None, gens,
                      config=config,
                      light=layout.pipeline.light)
        return

    async def read_group(group: list[ChunkProjection]) -> None:
        await _spread(_scatter, await fetch(group), layout, out, strict, None, gens, config=config,
                      light=layout.pipeline.light)

    # a large read streams shard by shard: bounded memory, fetching overlaps decoding
    await _bounded(config.read_groups_in_flight, [lambda g=g: read_group(g) for g in groups])


# -- writes ----------------------------------------------------------------------------------
def _reset_outside(layout: ChunkLayout, chunk: np.ndarray, coords: tuple[int, ...], shape: tuple[int, ...]) -> None:
    """Set the part of a padded edge chunk beyond ``shape`` to the fill value."""
    for dim, (c, n, s) in enumerate(zip(coords, layout.grid.chunk_shape, shape)):
        inside = s - c * n
        if inside < chunk.shape[dim]:
            index = [slice(None)] * chunk.ndim
            index[dim] = slice(max(inside, 0), None)
            chunk[tuple(index)] = layout.spec.fill_value


def _whole_chunk(p: ChunkProjection, shape: tuple[int, ...]) -> bool:
    return all(
        isinstance(s, slice) and s.indices(n) == (0, n, 1) for s, n in zip(p.chunk_selection, shape)
    ) and len(p.chunk_selection) == len(shape)


def _encode(
    layout: ChunkLayout, p: ChunkProjection, key: str, old: bytes | None, value: np.ndarray
) -> tuple[str, bytes | None]:
    spec = layout.spec_for(p.coords)
    fill = layout.spec.fill_value
    if p.is_complete and _whole_chunk(p, spec.shape):
        chunk = value[p.out_selection]  # a view: the pipeline lays it out (one copy, not two)
    else:
        # merged in the stored memory order (``layout.order``), so that encoding it is no transpose
        if p.is_complete or old is None:
            chunk = np.full(spec.shape, fill, dtype=spec.dtype, order=layout.order)
        else:
            chunk = _decode(layout, key, p.coords, old)
            if not chunk.flags.writeable:
                chunk = chunk.copy(order="K")
        assign(chunk, p.chunk_selection, value[p.out_selection])
        if layout.edge_chunks == "padded" and layout.grid.chunk_is_edge(p.coords):
            _reset_outside(layout, chunk, p.coords, layout.spec.shape)
    if not layout.store_fill_chunks and fill_mask(chunk, fill):
        return key, None
    return key, layout.pipeline.encode(chunk, spec)


def _encoded_whole(layout: ChunkLayout, value: np.ndarray, p: ChunkProjection, key: str) -> bytes | None:
    """A complete chunk of ``value`` encoded (None: all fill), for a streamed shard write."""
    return _encode(layout, p, key, None, value)[1]


def _merged(layout: ChunkLayout, p: ChunkProjection, key: str, value: np.ndarray, old: bytes | None) -> bytes | None:
    """The chunk ``old`` (as stored; None: missing) with the projection's part of ``value``
    written into it, encoded (None: all fill, delete it)."""
    return _encode(layout, p, key, old, value)[1]


def _merger(layout: ChunkLayout, p: ChunkProjection, key: str, value: np.ndarray) -> Callable[[bytes | None], bytes | None]:
    """The store-layer ``Update`` of a partially written chunk: the store reads the chunk
    (or the shard holding it) once, calls this, and writes the result once, under its lock
    and generation check, calling it again after a lost race."""
    return functools.partial(_merged, layout, p, key, value)


def _unit_writes(batch: list[tuple[ChunkProjection, str]], layout: ChunkLayout, value: np.ndarray) -> list[tuple[str, Any]]:
    """The one description of a write's chunks, as store items for ``update_many``: complete
    chunks encoded here (None: all fill, delete), partial ones as the store-layer ``Update``
    that merges them into what is stored (one read, one conditional write per unit)."""
    return [
        _encode(layout, p, key, None, value) if p.is_complete else (key, _merger(layout, p, key, value))
        for p, key in batch
    ]


def _write_now(batch: list[tuple[ChunkProjection, str]], layout: ChunkLayout, value: np.ndarray, writes: SupportsSetSync) -> list:
    """The blocking runner's step for one-chunk units: ``_unit_writes`` of a batch, stored on
    this thread."""
    writes.update_many_sync(_unit_writes(batch, layout, value))
    return []


def _encode_into(batch: list[tuple[ChunkProjection, str]], layout: ChunkLayout, value: np.ndarray, out: list) -> None:
    """The blocking runner's encode step for a unit of several chunks: ``_unit_writes`` of a
    batch, collected in ``out`` (the unit is stored once, after all of its chunks)."""
    out.extend(_unit_writes(batch, layout, value))


def writes_now(layout: ChunkLayout) -> bool:
    """Whether ``write_from_now`` can write to ``layout``: a store with synchronous reads and
    writes (files, memory, or a sharding adapter over them)."""
    store = layout.store
    return store.sync_writes is not None and store.sync_reads is not None


def write_from_now(layout: ChunkLayout, projections: Iterable[ChunkProjection], value: np.ndarray) -> bool:
    """``write_from`` without an event loop (see ``writes_now``): the calling thread and the
    codec and I/O pools encode and write the chunks directly. The caller holds the write
    units' locks. Returns False, having done nothing, when the store does not allow it.
    """
    writes = layout.store.sync_writes
    if writes is None or not writes_now(layout):
        return False
    if not layout.one_chunk_units:
        groups = _group(layout, projections)
        try:
            _write_units_now(layout, groups, value, writes)
        finally:
            _forget(layout, (layout.chunk_key(p.coords) for g in groups for p in g))
        return True
    items = [(p, layout.chunk_key(p.coords)) for p in projections]
    try:
        _write_items_now(layout, items, value, writes)
    finally:
        _forget(layout, (key for _, key in items))
    return True


def _write_units_now(
    layout: ChunkLayout, groups: list[list[ChunkProjection]], value: np.ndarray, writes: SupportsSetSync
) -> None:
    """The blocking runner of writes to units of several chunks (shards), as ``write_from``
    runs them on the loop: per unit, ``_unit_writes`` spread over the codec pool (complete
    chunks first, as there), then one ``update_many_sync``, the store's read-modify-write of
    the unit. A unit is stored by an I/O thread while the next one is encoded (one in
    flight, as memory allows); the last one, and a write of one unit, on this thread."""
    config = layout.config
    pending: Future[None] | None = None
    try:
        for n, group in enumerate(groups):
            streamed = streamed_unit(layout, group)
            if streamed is not None:  # a whole large shard: encoded chunk by chunk to its destination
                if pending is not None:
                    done, pending = pending, None
                    done.result()
                stream_unit_now(layout, streamed, functools.partial(_encoded_whole, layout, value))
                continue
            batch = [(p, layout.chunk_key(p.coords)) for p in group]
            batch.sort(key=lambda item: not item[0].is_complete)
            items: list[tuple[str, Any]] = []
            share_now(_encode_into, batch, layout, value, items, config=config, memo=layout.threads_memo)
            if pending is not None:
                done = pending
                pending = None
                done.result()
            if n == len(groups) - 1:
                writes.update_many_sync(items)
            else:
                pending = io_pool(config.io_threads).submit(writes.update_many_sync, items)
    finally:
        if pending is not None:  # (an error meanwhile: the unit in flight lands before it is raised)
            concurrent.futures.wait([pending])


def _forget(layout: ChunkLayout, keys: Iterable[str]) -> None:
    """Drop the chunk cache's entries of chunks just written (their generation changed, so
    they could never be served; this frees their budget at once)."""
    if layout.chunk_cache is not None:
        layout.chunk_cache.discard(keys)


def _write_items_now(
    layout: ChunkLayout, items: list[tuple[ChunkProjection, str]], value: np.ndarray, writes: SupportsSetSync
) -> None:
    native = raw_writer(layout, value)
    if native is not None:
        # ``free``, not ``writes``: the native batches hold no GIL, so one thread per core
        # keeps both cores in the kernel's page-cache writes; eight threads (as the Python
        # path wants, to hide its GIL hand-offs) only contend (measured on 512^3 raw N5:
        # ~1000 MB/s on 2 threads, ~850 on 8); a first block that waits on the disk still
        # gets the I/O threads (``threads.threads_for``)
        share_now(_native_then, items, native, _write_now, layout, value, writes, config=layout.config, free=True)
    else:
        share_now(_write_now, items, layout, value, writes, config=layout.config, writes=True)


#: one lock per write unit, shared by every write through one array handle
UnitLocks = KeyedLocks


async def write_from(
    layout: ChunkLayout, projections: Iterable[ChunkProjection], value: np.ndarray, locks: UnitLocks | None = None
) -> None:
    """Write ``value`` (already broadcast to the selection's shape) into the chunks.

    Complete chunks are encoded directly; partial ones are read, merged and re-encoded by the
    store's read-modify-write (``Store.update_many``); chunks equal to the fill value become
    deletes. An encoder error inside a shard's merge leaves that shard as it was.
    """
    locks = locks or UnitLocks()

    async def write_group(group: list[ChunkProjection]) -> None:
        async with locks.holding(layout.write_unit(p.coords) for p in group):
            await write_unit(group)

    async def write_unit(group: list[ChunkProjection]) -> None:
        streamed = streamed_unit(layout, group)
        if streamed is not None:  # a whole large shard: encoded chunk by chunk to its destination
            await stream_unit(layout, streamed, functools.partial(_encoded_whole, layout, value))
            return
        # ``_unit_writes`` spread over the codec pool (complete chunks first: ``_spread``
        # times the first item, and making an update function costs nothing), then one
        # ``update_many``: the store's read-modify-write of the unit, retried after a lost race
        batch = [(p, layout.chunk_key(p.coords)) for p in group]
        batch.sort(key=lambda item: not item[0].is_complete)
        await layout.store.update_many(await _spread(_unit_writes, batch, layout, value, config=layout.config))

    groups = _group(layout, projections)
    try:
        await _bounded(layout.config.write_groups_in_flight, [lambda g=g: write_group(g) for g in groups])
    finally:
        _forget(layout, (layout.chunk_key(p.coords) for g in groups for p in g))


# -- resize ----------------------------------------------------------------------------------
def _rechunk(
    old: ChunkLayout, new: ChunkLayout, key: str, coords: tuple[int, ...], data: bytes
) -> tuple[str, bytes | None]:
    """One chunk cut or extended by a resize: decoded as stored, re-encoded for ``new``."""
    chunk = _decode(old, key, coords, data)
    spec = new.spec_for(coords)
    fill = new.spec.fill_value
    if new.edge_chunks == "padded":
        if not chunk.flags.writeable:
            chunk = chunk.copy(order="K")
        _reset_outside(new, chunk, coords, new.spec.shape)
    else:  # clipped: the chunk's stored shape changes with the array's
        grown = np.full(spec.shape, fill, dtype=spec.dtype, order=new.order)
        overlap = tuple(slice(0, min(a, b)) for a, b in zip(chunk.shape, spec.shape))
        grown[overlap] = chunk[overlap]
        chunk = grown
    if not new.store_fill_chunks and fill_mask(chunk, fill):
        return key, None
    return key, new.pipeline.encode(chunk, spec)


def _rechunked(old: ChunkLayout, new: ChunkLayout, key: str, coords: tuple[int, ...], data: bytes | None) -> bytes | None:
    """The store-layer ``Update`` of a chunk a resize cuts or extends: ``_rechunk`` of what is
    stored (a missing chunk stays missing), called under the unit's lock and generation check,
    again after a lost race."""
    return None if data is None else _rechunk(old, new, key, coords, data)[1]


def _reshape_plan(old: ChunkLayout, new_shape: tuple[int, ...]) -> tuple[list, list]:
    """(chunks beyond ``new_shape``, chunks whose stored content or shape must change)."""
    grid = old.grid
    old_shape = grid.shape
    candidates: set[tuple[int, ...]] = set()
    for dim, (o, n, c) in enumerate(zip(old_shape, new_shape, grid.chunk_shape)):
        if o == n:
            continue
        region = [slice(0, s) for s in old_shape]
        region[dim] = slice(min(o, n) // c * c, o)  # from the chunk holding the old/new edge
        candidates.update(grid.coords_in_region(region))
    deletes, changes = [], []
    for coords in sorted(candidates):
        starts = [i * c for i, c in zip(coords, grid.chunk_shape)]
        if any(s >= ns for s, ns in zip(starts, new_shape)):
            deletes.append(coords)
        elif old.edge_chunks == "padded":
            if any(s + c > ns and ns < os for s, c, ns, os in zip(starts, grid.chunk_shape, new_shape, old_shape)):
                changes.append(coords)
        elif any(min(c, os - s) != min(c, ns - s) for s, c, ns, os in zip(starts, grid.chunk_shape, new_shape, old_shape)):
            changes.append(coords)
    return deletes, changes


async def reshape_chunks(old: ChunkLayout, new: ChunkLayout, locks: UnitLocks | None = None) -> None:
    """Adapt the stored chunks of ``old`` to the shape of ``new`` (a resize).

    Chunks beyond the new shape are deleted. Padded formats fill-reset the part of the chunks
    a shrink cuts, so that growing again shows the fill value as NumPy would (zarr-python and
    tensorstore leave stale data there). Clipped formats re-encode the edge chunks at their
    new clipped shape, padding with the fill value or cutting. I/O goes to ``old.store``;
    each unit is one read-modify-write of the store (a unit of several chunks is read once,
    its chunks cut or dropped together, written once), as a write's partial chunks are.
    """
    deletes, changes = _reshape_plan(old, new.spec.shape)
    by_unit: dict[tuple[int, ...], tuple[list, list]] = {}
    for coords in deletes:
        by_unit.setdefault(old.write_unit(coords), ([], []))[0].append(coords)
    for coords in changes:
        by_unit.setdefault(old.write_unit(coords), ([], []))[1].append(coords)
    locks = locks or UnitLocks()

    async def unit(dels: list, cuts: list) -> None:
        # one store-layer read-modify-write per unit, as a write's (``Store.update_many``):
        # under the unit's lock across processes (files) or a conditional write (S3), so a
        # writer in another process updating the same shard or chunk meanwhile is neither
        # lost nor overwritten with what this resize read before it
        items: list[tuple[str, Any]] = [(old.chunk_key(c), None) for c in dels]
        items += [(old.chunk_key(c), functools.partial(_rechunked, old, new, old.chunk_key(c), c)) for c in cuts]
        async with locks(old.write_unit((dels or cuts)[0])):
            await old.store.update_many(items)

    await _bounded(old.config.write_groups_in_flight, [lambda d=d, c=c: unit(d, c) for d, c in by_unit.values()])
