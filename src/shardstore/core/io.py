"""Chunk reads: with ``core/writes.py``, the only place in shardstore that loops over chunks.

Projections are grouped by write unit (a shard, or a single chunk when unsharded) so that each
group is one ``get_many`` batch (a sharding adapter then fetches each shard's index once), or,
with files and memory, read on the calling thread and the codec pool without an event loop.
Decoding runs in the codec thread pool (the C codecs and numpy copies release the GIL) while
the event loop fetches the next groups.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Iterable, Sequence
from concurrent.futures import Executor
from typing import TYPE_CHECKING

import numpy as np

from .._aio import gather
from .._assign import assign
from .._sync import io_pool
from ..errors import ChunkNotFoundError, CodecError
from ..store.base import MISSING, RangeBR
from ..store.open_values import HeldFiles
from ..store.sync_protocols import SupportsGetManyTagged, SupportsGetSync, SupportsGetTransientSync, UnitReads
from .batches import bounded, decode_chunk, group_by_unit, native_then, spread, whole_chunk
from .chunk_cache import (
    Generations,
    Hit,
    asked_generations,
    bypassed,
    held_at_tag,
    owned,
    take_cached,
    unit_generations,
    unit_generations_async,
    units_to_ask,
)
from .indexing import ChunkProjection
from .layout import ChunkLayout
from .placing import place_chunk, place_hits, streams
from .rawread import advise_files_of, raw_reader
from .spanread import advise_ahead, span_reader, span_units
from .threads import share_now

if TYPE_CHECKING:
    import asyncio
else:
    from .._lazy import asyncio

__all__ = ["Asked", "hits_now", "read_into", "read_into_now"]


# -- reads -----------------------------------------------------------------------------------
def _partly_decoded(layout: ChunkLayout, p: ChunkProjection, key: str, data: bytes) -> np.ndarray | None:
    """``decoded chunk[p.chunk_selection]`` from a partial decode (e.g. only the blosc blocks
    a partial selection needs), to be copied out at once; None: decode the whole chunk."""
    if p.is_complete or not layout.pipeline.decodes_partially:
        return None
    try:
        return layout.pipeline.decode_region(data, layout.spec_for(p.coords), p.chunk_selection)
    except CodecError as e:
        raise type(e)(f"{layout.describe_key(key)}: {e}") from e


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
    if not whole_chunk(p, spec.shape):
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
    stream = streams(out, layout.config)
    cache = layout.chunk_cache if gens else None
    # (a kept chunk that decodes to a view of what was read is read into memory of its own)
    read_kept = reads is not None and cache is not None and layout.pipeline.decodes_to_view(layout.chunk_spec)
    for p, key, data in batch:
        gen = gens.get(key) if cache is not None and gens is not None else None
        if reads is not None:
            if ranged and not p.is_complete and gen is None:
                part = _selected_from(layout, p, key, reads.get_sync)
                if part is not None:
                    assign(out, p.out_selection, part)
                    continue
            if read_kept and gen is not None:
                data = reads.get_sync(key)
            else:  # (decoded and copied out before this thread reads again: its reusable buffer)
                data = reads.get_transient_sync(key, scratch)
        if data is None:
            if strict:
                raise ChunkNotFoundError(f"{layout.describe_key(key)} is missing")
            out[p.out_selection] = layout.spec.fill_value
        elif gen is not None and cache is not None:
            chunk = owned(decode_chunk(layout, key, p.coords, data, "kept"))
            cache.put(key, gen, chunk)
            place_chunk((p, chunk), out, stream)
        elif not (into and p.is_complete and _into(layout, p, key, data, out)):
            part = _partly_decoded(layout, p, key, data)
            if part is not None:
                assign(out, p.out_selection, part)
            else:  # (decoded into this thread's scratch and copied out before it decodes again)
                place_chunk((p, decode_chunk(layout, key, p.coords, data, "transient")), out, stream)
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
    place = None  # the cache's hits, copied out while the threads fetch the rest
    if layout.chunk_cache is not None:
        projections = list(projections)
        asked = _cached_part_now(layout, projections, out, reads.generation_sync)
        if asked is not None:
            projections, gens, place = asked
            if not projections:
                if place is not None:
                    place()
                return True
    unit_reads = None if layout.one_chunk_units else layout.store.sync_unit_reads
    spans = None
    if unit_reads is not None:
        projections = list(projections)
        if len(projections) > 1:  # (one chunk: core/spanread's single reads)
            held = HeldFiles()
            spans = span_reader(layout, out, streams(out, config), gens, held)
    if spans is not None:
        # shard files read, decoded and placed natively (core/spanread.py), the chunks to
        # cache decoded into their entries; the chunks it leaves (missing, damaged) take the
        # generic path, one by one. The native calls hold no GIL, so a second thread pays
        # off as for any GIL-free batch
        units = span_units(layout, projections)
        try:
            if len(units) > 2:  # (fewer: the native call advises its batch's chunks itself)
                advise_ahead(layout, units, held)
            share_now(native_then, units, spans, _scatter, layout, out, strict,
                      _StoreReads(reads, layout.store.transient_reads), gens, config=config, free=True,
                      memo=layout.threads_memo, meanwhile=place)
        finally:
            held.close()
        return True
    if unit_reads is not None:
        # shards: each opened once at one version (its index read once), then the threads
        # read the chunks they decode from it, so reading overlaps decoding; the first
        # shard's threads start before the cache's hits are copied out
        def read_units(group: list[ChunkProjection], meanwhile: Callable[[], None] | None) -> None:
            items = [(p, layout.chunk_key(p.coords), None) for p in group]
            units = unit_reads.open_units_sync([key for _, key, _ in items])
            try:
                share_now(_scatter, items, layout, out, strict, units, gens, config=config, slow=pipeline.slow_decode,
                          gil=pipeline.holds_gil, memo=layout.threads_memo, meanwhile=meanwhile)
            finally:
                units.close()

        groups = group_by_unit(layout, projections)
        if sum(map(len, groups)) <= config.small_read_chunks:  # (as the async runner: one spread)
            groups = [[p for g in groups for p in g]]
        for g in groups:
            read_units(g, place)
            place = None
        return True

    chunks = _StoreReads(reads, layout.store.transient_reads)
    native = raw_reader(layout, out, strict, streams(out, config), gens)
    items = [(p, layout.chunk_key(p.coords), None) for p in projections]
    if items and (len(items) > 2 or place is not None):  # (chunk files asked of a cold disk at once)
        advise_files_of(layout, [item[1] for item in items])
    if native is not None:
        share_now(native_then, items, native, _scatter, layout, out, strict, chunks, gens, config=config, free=True,
                  memo=layout.threads_memo, meanwhile=place)
    else:
        share_now(_scatter, items, layout, out, strict, chunks, gens, config=config, slow=pipeline.slow_decode,
                  gil=pipeline.holds_gil, memo=layout.threads_memo, meanwhile=place)
    return True


#: what the cache's part of a read leaves to fetch: the projections, and the generations to
#: keep their decoded chunks under
Asked = tuple[list[ChunkProjection], Generations]


def _cached_part_now(
    layout: ChunkLayout,
    projections: list[ChunkProjection],
    out: np.ndarray,
    generation: Callable[[str], Hashable | None],
) -> tuple[list[ChunkProjection], Generations, Callable[[], None] | None] | None:
    """The decoded-chunk cache's part of a read from a store with blocking reads, on this
    thread: the units' generations asked with ``generation`` and the chunks held looked up.
    Returns what is left to fetch (``Asked``) and the function that places the hits into
    ``out`` (``place_hits``), to be called once (None: no hits), so that the copies overlap
    the fetch; None, having done nothing, when the read bypasses the cache."""
    if bypassed(layout, projections):
        return None
    keys = [layout.chunk_key(p.coords) for p in projections]
    rest, gens, hits = take_cached(layout, projections, keys, unit_generations(layout, projections, keys, generation))
    return rest, gens, functools.partial(place_hits, hits, out, layout.config) if hits else None


def hits_now(
    layout: ChunkLayout, projections: Iterable[ChunkProjection], out: np.ndarray,
    fetch: Callable[[Asked], None] | None = None,
) -> Asked | None:
    """The decoded-chunk cache's part of a blocking read from a store that fetches only
    through the event loop but tells generations with a blocking request (HTTP, S3:
    ``Store.sync_checks``), done on the calling thread: the units' generations asked on the
    I/O threads (side by side when there are several) while the chunks held are copied into
    ``out`` (``_asked_meanwhile``), the copies of units that changed fetched again.
    Returns what is left to fetch, for ``read_into(..., asked=...)``; None, having done
    nothing, when there is no cache, no such store, or the read bypasses the cache.

    A read the cache serves whole then makes no event loop round trip at all (measured on
    SeaweedFS, all hits: about 1.0 ms per 100^3 read against 1.3 ms through the loop).

    ``fetch(asked)``: what fetches chunks for this read. Given, a read with units the cache
    holds whole *and* others fetches the others' chunks with it while the generations of
    the former are asked (``_asked_meanwhile``): one round trip instead of two."""
    checks = layout.store.sync_checks
    if layout.chunk_cache is None or checks is None:
        return None
    projections = list(projections)
    if bypassed(layout, projections):
        return None
    generation = checks.checked_generation_sync
    threads = io_pool(layout.config.io_threads)
    tagged = layout.store.tagged_reads is not None
    keys = [layout.chunk_key(p.coords) for p in projections]
    units, first = units_to_ask(layout, projections, keys, tagged)
    # (a fetch overlaps the questions only when the store tags its replies and some units are
    # not held whole; else the others' chunks, if any, are fetched after the questions)
    beside = fetch is not None and tagged and first and not all(unit in first for unit in units)
    return _asked_meanwhile(layout, projections, keys, units, first, out, generation, threads, fetch if beside else None)


def _asked_meanwhile(
    layout: ChunkLayout,
    projections: list[ChunkProjection],
    keys: list[str],
    units: Sequence[Hashable],
    first: dict[Hashable, str],
    out: np.ndarray,
    generation: Callable[[str], Hashable | None],
    threads: Executor,
    fetch: Callable[[Asked], None] | None = None,
) -> Asked:
    """``hits_now``'s lookups with the generations of the units to ask (``first``: from
    ``units_to_ask``) asked on ``threads`` (blocking requests: HEADs) while something else
    goes on, instead of before it. Returns what is left to fetch (chunks of units changed since
    they were cached, and those of units not asked).

    With ``fetch`` (a store with tagged reads, a read with units the cache holds whole and
    others): ``fetch`` gets the others' chunks meanwhile (their replies' tags check any of
    their chunks held), then the held units' hits are placed: one round trip instead of two.

    Without: the chunks the cache holds are copied into ``out`` meanwhile, so a read the
    cache serves whole takes the longer of a HEAD and the copies, not both (SeaweedFS, 100^3
    reads of cached 64^3 chunks: ~0.8 ms a HEAD, ~0.3 ms of copies). Nothing is served stale:
    the copies are checked against the answers before the read returns, and the chunks of a
    unit that changed are left to fetch, which writes all of their parts in ``out`` again."""
    ahead: list[Hit] = []
    if fetch is None:
        cache = layout.chunk_cache
        assert cache is not None, "hits_now asks only with a cache"
        held = cache.peek_many(keys)
        ahead = [(p, chunk) for p, unit, chunk in zip(projections, units, held) if chunk is not None and unit in first]
        if not ahead:  # (nothing held, or no unit to ask)
            return _placed(layout, projections, keys, asked_generations(units, first, generation, threads), out)
    asking = {unit: threads.submit(generation, key) for unit, key in first.items()}
    try:
        if fetch is not None:
            fetch(([p for p, unit in zip(projections, units) if unit not in asking], {}))
        else:
            place_hits(ahead, out, layout.config)
        answers = {unit: f.result() for unit, f in asking.items()}
    except BaseException:
        for f in asking.values():
            f.cancel()
        raise
    if fetch is not None:  # (the others' chunks are fetched already)
        pick = [i for i, unit in enumerate(units) if unit in asking]
        projections, keys, units = [projections[i] for i in pick], [keys[i] for i in pick], [units[i] for i in pick]
    rest, gens, hits = take_cached(layout, projections, keys, [answers.get(unit) for unit in units])
    placed = {id(p): chunk for p, chunk in ahead}
    place_hits([(p, chunk) for p, chunk in hits if placed.get(id(p)) is not chunk], out, layout.config)
    return rest, gens


def _placed(
    layout: ChunkLayout, projections: list[ChunkProjection], keys: list[str], generations: list[Hashable | None],
    out: np.ndarray,
) -> Asked:
    """The chunks the cache holds at ``generations`` (per projection) placed into ``out`` now;
    what is left to fetch."""
    rest, gens, hits = take_cached(layout, projections, keys, generations)
    place_hits(hits, out, layout.config)
    return rest, gens


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


#: a unit's chunks as fetched: (projection, key, stored bytes or None when missing)
Fetched = list[tuple[ChunkProjection, str, bytes | None]]


async def _fetch_tagged(
    tagged: SupportsGetManyTagged, group: list[ChunkProjection], keys: list[str], gens: Generations
) -> Fetched:
    """Chunks fetched with the generation of their unit that their own replies carry, put in
    ``gens`` to keep them under: none was asked before (a unit the cache held none or only
    some of these chunks of), or it is at least as new as the one asked."""
    datas, tags = await tagged.get_many_tagged(keys)
    for key, tag in zip(keys, tags):
        if tag is not None and tag != MISSING:
            gens[key] = tag
    return list(zip(group, keys, datas))


async def _fetch(
    layout: ChunkLayout, group: list[ChunkProjection], tagged: SupportsGetManyTagged | None, gens: Generations | None
) -> tuple[Fetched, list[Hit]]:
    """A unit's chunks (or a batch of one-chunk units') fetched for ``read_into``, and the
    hits among them that no generation was asked for. ``tagged``: the store's tagged reads,
    for a read the chunk cache takes part in (``gens``)."""
    keys = [layout.chunk_key(p.coords) for p in group]
    if tagged is None or gens is None:
        return list(zip(group, keys, await layout.store.get_many([(k, None) for k in keys]))), []
    cache = layout.chunk_cache
    held = [] if cache is None or layout.one_chunk_units else [i for i, k in enumerate(keys) if cache.holds(k)]
    if cache is None or not held or len(held) == len(keys):
        return await _fetch_tagged(tagged, group, keys, gens), []
    # a shard the cache holds some of these chunks of was asked nothing: the others' reply
    # tells its generation, and the held ones are hits only at that one
    held_set = set(held)
    todo = [i for i in range(len(keys)) if i not in held_set]
    fetched = await _fetch_tagged(tagged, [group[i] for i in todo], [keys[i] for i in todo], gens)
    hits, stale = held_at_tag(cache, [keys[i] for i in held], gens.get(keys[todo[0]]))
    if stale:
        fetched += await _fetch_tagged(tagged, [group[held[j]] for j in stale], [keys[held[j]] for j in stale], gens)
    return fetched, [(group[held[j]], chunk) for j, chunk in hits]


async def read_into(
    layout: ChunkLayout,
    projections: Iterable[ChunkProjection],
    out: np.ndarray,
    *,
    strict: bool = False,
    asked: Asked | None = None,
) -> None:
    """Fill ``out`` from the chunks the projections name; missing chunks give the fill value.

    With ``strict`` (or a layout whose ``missing_chunks`` is "error") a missing chunk raises
    ``ChunkNotFoundError`` naming it. ``asked``: ``hits_now`` did the cache's part already
    (``projections`` are then ignored for what it left).
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
    tagged = layout.store.tagged_reads
    if asked is not None:
        projections, gens = asked
    elif layout.chunk_cache is not None:
        projections = list(projections)
        if not bypassed(layout, projections):
            # (remote stores: a HEAD per unit, so that a hit is never another writer's old
            # data; with tagged reads only of units all of whose chunks asked for it holds)
            keys = [layout.chunk_key(p.coords) for p in projections]
            generations = await unit_generations_async(
                layout, projections, keys, layout.store.checked_generation, held_only=tagged is not None)
            projections, gens, hits = take_cached(layout, projections, keys, generations)
            place_hits(hits, out, config)  # (natively, without the GIL)
            if not projections:
                return
    groups = group_by_unit(layout, projections)
    if sum(map(len, groups)) <= config.small_read_chunks:
        # a small read (a box across a few shards): fetch everything, then decode it all in
        # one spread, so the work is balanced across threads instead of per shard
        fetched = await gather(_fetch(layout, g, tagged, gens) for g in groups)
        place_hits([hit for _, hits in fetched for hit in hits], out, config)
        await spread(_scatter, [item for found, _ in fetched for item in found], layout, out, strict, None, gens,
                      config=config,
                      light=layout.pipeline.light)
        return

    async def read_group(group: list[ChunkProjection]) -> None:
        found, hits = await _fetch(layout, group, tagged, gens)
        place_hits(hits, out, config)
        await spread(_scatter, found, layout, out, strict, None, gens, config=config,
                      light=layout.pipeline.light)

    # a large read streams shard by shard: bounded memory, fetching overlaps decoding
    await bounded(config.read_groups_in_flight, [lambda g=g: read_group(g) for g in groups])
