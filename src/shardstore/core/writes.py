"""Chunk writes and resizes: with ``core/io.py``, the only place in shardstore that loops over chunks.

Projections are grouped by write unit (a shard, or a batch of single-chunk units) so that each
group is one ``set_many`` / ``update_many`` batch: a sharding adapter then rewrites each shard
once, under one lock and one generation check. Encoding runs in the codec thread pool; a write
that covers whole shards streams each one (``core/streaming.py``).
"""

from __future__ import annotations

import concurrent.futures
import functools
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any

import numpy as np

from .._assign import assign
from .._locks import KeyedLocks
from .._sync import io_pool
from ..store.sync_protocols import SupportsSetSync
from .batches import bounded, decode_chunk, group_by_unit, native_then, spread, whole_chunk
from .indexing import ChunkProjection
from .layout import ChunkLayout, fill_mask
from .rawwrite import raw_writer
from .streaming import stream_unit, stream_unit_now, streamed_unit
from .threads import share_now

__all__ = ["UnitLocks", "reshape_chunks", "write_from", "write_from_now", "writes_now"]


# -- writes ----------------------------------------------------------------------------------
def _reset_outside(layout: ChunkLayout, chunk: np.ndarray, coords: tuple[int, ...], shape: tuple[int, ...]) -> None:
    """Set the part of a padded edge chunk beyond ``shape`` to the fill value."""
    for dim, (c, n, s) in enumerate(zip(coords, layout.grid.chunk_shape, shape)):
        inside = s - c * n
        if inside < chunk.shape[dim]:
            index = [slice(None)] * chunk.ndim
            index[dim] = slice(max(inside, 0), None)
            chunk[tuple(index)] = layout.spec.fill_value


def _encode(
    layout: ChunkLayout, p: ChunkProjection, key: str, old: bytes | None, value: np.ndarray
) -> tuple[str, bytes | None]:
    spec = layout.spec_for(p.coords)
    fill = layout.spec.fill_value
    if p.is_complete and whole_chunk(p, spec.shape):
        chunk = value[p.out_selection]  # a view: the pipeline lays it out (one copy, not two)
    else:
        # merged in the stored memory order (``layout.order``), so that encoding it is no transpose
        if p.is_complete or old is None:
            chunk = np.full(spec.shape, fill, dtype=spec.dtype, order=layout.order)
        else:
            chunk = decode_chunk(layout, key, p.coords, old)
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


#: decoded bytes of chunks a thread of the blocking writer encodes before storing them
_STORE_BYTES = 1 << 20


def _write_now(batch: list[tuple[ChunkProjection, str]], layout: ChunkLayout, value: np.ndarray, writes: SupportsSetSync) -> list:
    """The blocking runner's step for one-chunk units: ``_unit_writes`` of a batch, stored on
    this thread ``_STORE_BYTES`` of chunks at a time. A batch is up to a quarter of a write's
    chunks (``Feed``): encoding all of them before storing any held them all (a 512^3 gzip
    N5 write, 64^3 blocks: 23 MiB above its input, 4 now); one chunk per store call was
    slower (more GIL hand-offs between the encodes and the writes)."""
    step = max(1, _STORE_BYTES // max(layout.chunk_spec.nbytes, 1))
    for i in range(0, len(batch), step):
        writes.update_many_sync(_unit_writes(batch[i : i + step], layout, value))
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
        groups = group_by_unit(layout, projections)
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
        share_now(native_then, items, native, _write_now, layout, value, writes, config=layout.config, free=True)
    else:
        share_now(_write_now, items, layout, value, writes, config=layout.config, writes=True,
                  slow=layout.pipeline.slow_decode)


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
        # ``_unit_writes`` spread over the codec pool (complete chunks first: ``spread``
        # times the first item, and making an update function costs nothing), then one
        # ``update_many``: the store's read-modify-write of the unit, retried after a lost race
        batch = [(p, layout.chunk_key(p.coords)) for p in group]
        batch.sort(key=lambda item: not item[0].is_complete)
        await layout.store.update_many(await spread(_unit_writes, batch, layout, value, config=layout.config))

    groups = group_by_unit(layout, projections)
    try:
        await bounded(layout.config.write_groups_in_flight, [lambda g=g: write_group(g) for g in groups])
    finally:
        _forget(layout, (layout.chunk_key(p.coords) for g in groups for p in g))


# -- resize ----------------------------------------------------------------------------------
def _rechunk(
    old: ChunkLayout, new: ChunkLayout, key: str, coords: tuple[int, ...], data: bytes
) -> tuple[str, bytes | None]:
    """One chunk cut or extended by a resize: decoded as stored, re-encoded for ``new``."""
    chunk = decode_chunk(old, key, coords, data)
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
        async with locks.holding([old.write_unit((dels or cuts)[0])]):
            await old.store.update_many(items)

    await bounded(old.config.write_groups_in_flight, [lambda d=d, c=c: unit(d, c) for d, c in by_unit.values()])
