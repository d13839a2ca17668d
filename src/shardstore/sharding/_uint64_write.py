"""The write side of ``uint64.Uint64ShardedStore``: a batch of uint64 keys becomes one
rewrite per touched shard.

A batch is grouped by shard (``grouped``; a large bulk batch with NumPy, ``grouped_values``),
and each shard is written as one item of the base store: the new shard itself when the batch
holds every key it can have (``CompleteShard``: nothing to read), else the ``Update`` that
merges the batch into the stored shard (``merged_shard``), run by the base's locked
read-modify-write. A whole shard may also be streamed to the base as its values are encoded
(``stream_unit_sync`` / ``stream_unit``, laid out by a ``ShardBuilder``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import threading
from collections.abc import AsyncIterable, Callable, Hashable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, cast

import numpy as np

from .._sync import io_pool
from ..errors import ConflictError, UnsupportedFeatureError
from ..store.base import MISSING, Parts, Store, Update, joined
from ._batched import BatchedWrites
from ._uint64_assemble import ShardBuilder, assemble_shard
from ._uint64_format import ShardingSpec, gzip_compress, gzip_decompress, parse_uint64_key, shard_entries
from ._unit_streams import stream_shard, stream_shard_sync

if TYPE_CHECKING:
    from ..store.streamed import Buffer, SupportsUnitStreams
    from ..store.sync_protocols import SupportsSetSync
    from ._uint64_cache import ShardCache

__all__ = ["CompleteShard", "ShardChanges", "Uint64Writes", "grouped", "grouped_values", "merged_shard"]

#: complete_shard(shard number, keys of the batch in that shard) -> True when the batch holds
#: every key that shard may contain (then the shard is written without being read)
CompleteShard = Callable[[int, frozenset[int]], bool]


#: batches of at least this many keys, all plain bytes, are grouped by shard with NumPy
_VECTOR_GROUPING = 256


class ShardChanges:
    """One shard's part of a write batch."""

    __slots__ = ("minishard", "only_values", "values")

    def __init__(self) -> None:
        self.values: dict[int, bytes | Update | None] = {}  # None: delete
        self.minishard: dict[int, int] = {}
        #: no deletes or ``Update`` functions: the merge takes ``values`` as they are
        self.only_values = True

    def __lt__(self, other: object) -> bool:  # jobs sort by shard name; never compared
        return False


def grouped_values(spec: ShardingSpec, items: Sequence[tuple[int, bytes | Parts | Update | None]]) -> dict[int, ShardChanges] | None:
    """``grouped`` for a large batch of plain ``bytes`` values (a bulk load), the keys
    sorted by shard with NumPy instead of a Python step per key; None for other batches."""
    if len(items) < _VECTOR_GROUPING or not all(type(v) is bytes for _, v in items):
        return None
    keys = [k for k, _ in items]
    located = spec.locate_arrays(keys)
    if located is None:
        return None
    shards, minis = located
    order = np.argsort(shards, kind="stable")  # (stable: of a key given twice, the last wins)
    sorted_shards = shards[order]
    starts = [0, *(np.flatnonzero(sorted_shards[1:] != sorted_shards[:-1]) + 1).tolist(), len(keys)]
    at = order.tolist()
    ks = [keys[i] for i in at]
    vs = [items[i][1] for i in at]
    ms = minis[order].tolist()
    by_shard: dict[int, ShardChanges] = {}
    for a, b in zip(starts[:-1], starts[1:]):
        ch = by_shard[int(sorted_shards[a])] = ShardChanges()
        ch.values = dict(zip(ks[a:b], vs[a:b]))
        ch.minishard = dict(zip(ks[a:b], ms[a:b]))
    return by_shard


def grouped(spec: ShardingSpec, items: Sequence[tuple[int, bytes | Parts | Update | None]]) -> dict[int, ShardChanges]:
    """The batch's changes by shard number, values checked (``Parts`` joined)."""
    by_shard: dict[int, ShardChanges] = {}
    keys = [k for k, _ in items]
    for (k, value), (shard, m) in zip(items, spec.locate_many(keys)):
        ch = by_shard.get(shard)
        if ch is None:
            ch = by_shard[shard] = ShardChanges()
        if type(value) is not bytes:  # (bytes, by far the most common, checked first)
            if value is None or callable(value):
                ch.only_values = False
            elif isinstance(value, str) or not hasattr(value, "__len__"):
                raise TypeError(f"value for key {k} must be bytes-like, got {type(value).__name__}")
            elif isinstance(value, Parts):
                value = joined(value)
        ch.values[k] = value
        ch.minishard[k] = m
    return by_shard


def merged_shard(spec: ShardingSpec, shard_file: str, changes: ShardChanges, old: bytes | None) -> bytes | None:
    """The shard ``old`` (None: missing) with the batch merged in: the old entries, minus
    deletes, plus new values (encoded), ``Update`` functions applied to the stored values
    (None: no key is left, delete the shard)."""
    minishard_of = dict(changes.minishard)
    values: dict[int, bytes | memoryview] = {}
    if old is not None:
        values = shard_entries(old, spec, shard_file, minishard_of)
    gz = spec.data_encoding == "gzip"
    if changes.only_values:  # (a bulk write: no per-key work beyond the encoding)
        new = cast("dict[int, bytes]", changes.values)
        values.update({k: gzip_compress(v) for k, v in new.items()} if gz else new)
        return _assembled(spec, values, minishard_of)
    for k, v in changes.values.items():
        value: bytes | Parts | None
        if callable(v):
            stored = values.get(k)
            if stored is not None and gz:
                stored = gzip_decompress(stored, f"shard {shard_file!r}: value of key {k}")
            value = v(None if stored is None else bytes(stored))
        else:
            value = v
        if value is None:
            values.pop(k, None)
        else:
            value = joined(value)
            values[k] = gzip_compress(value) if gz else value
    return _assembled(spec, values, minishard_of)


def _assembled(spec: ShardingSpec, values: dict[int, bytes | memoryview], minishard_of: dict[int, int]) -> bytes | None:
    parts = assemble_shard(spec, values, minishard_of)
    # one buffer: thousands of small parts cost more to hand to the kernel one by one
    # (even through writev) than one copy of the shard
    return None if parts is None else b"".join(parts)


class Uint64Writes(BatchedWrites):
    """The writes of ``Uint64ShardedStore`` (its base class: the adapter sets the attributes
    annotated here)."""

    base: Store
    spec: ShardingSpec
    _cache: ShardCache
    _complete_shard: CompleteShard | None
    _write_threads: int
    _io_threads: int

    # -- writes -----------------------------------------------------------------------------
    async def update_many(self, items: Sequence[tuple[str, bytes | Parts | Update | None]]) -> None:
        if items:
            self._check_writable(items[0][0], more=len(items) - 1)
        await self.set_many_ids([(parse_uint64_key(k), v) for k, v in items])

    async def set_many_ids(self, items: Sequence[tuple[int, bytes | Parts | Update | None]]) -> None:
        """Write (None: delete; an ``Update``: read-modify-write the stored value) uint64 keys
        (already validated ints) in one batch: one read-modify-write per shard."""
        if not items:
            return
        writes, stems, merged = self._shard_writes(items)
        for stem in merged:
            await self._refuse_legacy(stem)
        with self._rewriting(stems):
            await self.base.update_many(writes)

    # -- synchronous writes (declared when the base reads and writes synchronously: files,
    # memory): the core's blocking runner and ``ShardedKV`` write shards from the calling
    # thread through the base's ``update_many_sync`` (the same locked read-modify-write)
    @property
    def sync_writes(self) -> SupportsSetSync | None:
        base = self.base
        return None if self.read_only or base.sync_writes is None or base.sync_reads is None else self

    def set_sync(self, key: str, value: bytes | Parts | None, atomic: bool = True) -> None:
        self.update_many_sync([(key, value)])  # (a shard is always replaced atomically)

    def update_many_sync(self, items: Sequence[tuple[str, bytes | Parts | Update | None]]) -> None:
        if items:
            self._check_writable(items[0][0], more=len(items) - 1)
        self.set_many_ids_sync([(parse_uint64_key(k), v) for k, v in items])

    def set_many_ids_sync(self, items: Sequence[tuple[int, bytes | Parts | Update | None]]) -> None:
        """``set_many_ids`` on this thread (the store must declare ``sync_writes``)."""
        base, reads = self.base.sync_writes, self.base.sync_reads
        assert base is not None and reads is not None, "called only when sync_writes is declared"
        if not items:
            return
        writes, stems, merged = self._shard_writes(items)
        for stem in merged:
            self._check_legacy(stem, reads.generation_sync(stem + ".index"), reads.generation_sync(stem + ".shard"))
        with self._rewriting(stems):
            jobs = min(len(writes), self._write_threads)
            if jobs < 2 or threading.current_thread().name.startswith("shardstore-"):
                base.update_many_sync(writes)  # (one shard, or already on a pool thread: no nesting)
                return
            # several shards (a bulk update): spread over threads, as the async path's
            # ``base.update_many`` runs each shard's read-modify-write in its own thread
            size = -(-len(writes) // jobs)
            batches = [writes[i : i + size] for i in range(0, len(writes), size)]
            pool = io_pool(self._io_threads)
            futures = [pool.submit(base.update_many_sync, b) for b in batches[1:]]
            try:
                base.update_many_sync(batches[0])
            finally:
                concurrent.futures.wait(futures)  # every shard lands before an error is raised
            for f in futures:
                f.result()

    def _shard_writes(
        self, items: Sequence[tuple[int, bytes | Parts | Update | None]]
    ) -> tuple[list[tuple[str, bytes | Parts | Update | None]], list[str], list[str]]:
        """The base store's items of a write batch, one per touched shard (the new shard when
        the batch holds all of it, else the ``Update`` merging the batch into it), the stems
        of those shards, and the stems of the shards that are merged (read first)."""
        self._check_writable(str(items[0][0]), more=len(items) - 1)
        by_shard = grouped_values(self.spec, items)
        if by_shard is None:
            by_shard = grouped(self.spec, items)
        writes: list[tuple[str, bytes | Parts | Update | None]] = []
        stems, merged = [], []
        for shard, changes in sorted(by_shard.items()):
            stem = self.spec.shard_name(shard)
            stems.append(stem)
            key = stem + ".shard"
            complete = (
                self._complete_shard is not None
                and not any(callable(v) for v in changes.values.values())
                and self._complete_shard(shard, frozenset(changes.values))
            )
            if complete:
                writes.append((key, merged_shard(self.spec, key, changes, None)))  # no read needed
            else:
                merged.append(stem)
                writes.append((key, functools.partial(merged_shard, self.spec, key, changes)))
        return writes, stems, merged

    @contextlib.contextmanager
    def _rewriting(self, stems: list[str]) -> Iterator[None]:
        """Around the base's write of these shards (either runner): a conflict names the
        shard, and what is cached of them is dropped (they changed, or may have)."""
        try:
            yield
        except ConflictError as e:
            raise ConflictError(f"shard {e}") from e  # (the message starts with the shard's key)
        finally:
            for stem in stems:
                self._cache.forget(stem)

    async def _refuse_legacy(self, stem: str) -> None:
        """Refuse to write a shard stored as a legacy ``.index`` + ``.data`` pair (a new
        ``.shard`` would hide its keys)."""
        igen = await self.base.generation(stem + ".index")
        if igen is not MISSING and igen is not None:
            self._check_legacy(stem, igen, await self.base.generation(stem + ".shard"))

    @staticmethod
    def _check_legacy(stem: str, index_gen: Hashable | None, shard_gen: Hashable | None) -> None:
        """Raise when the generations of ``stem.index`` and ``stem.shard`` say the shard is a
        legacy pair (an index file, no ``.shard``)."""
        if index_gen is not MISSING and index_gen is not None and shard_gen is MISSING:
            raise UnsupportedFeatureError(
                f"shard {stem!r} is stored in the legacy {stem}.index + {stem}.data layout, "
                "which shardstore reads but does not write"
            )

    # -- streamed whole-shard writes (``store.streamed``): values go to the base as they are
    # encoded, laid out by a ``ShardBuilder``, the shard index written last at the start ---
    @property
    def unit_streams(self) -> SupportsUnitStreams | None:
        return None if self.read_only or self._complete_shard is None else self

    @property
    def streams_sync(self) -> bool:
        return self.base.sync_writes is not None

    def stream_order(self, keys: Sequence[str]) -> list[str] | None:
        ids = [parse_uint64_key(k) for k in keys]
        located = self.spec.locate_many(ids)
        shards = {shard for shard, _ in located}
        if len(shards) != 1 or len(set(ids)) != len(ids) or self._complete_shard is None:
            return None
        (shard,) = shards
        if not self._complete_shard(shard, frozenset(ids)):
            return None  # (not every key of the shard: the stored ones must be merged)
        return [k for _, _, k in sorted(zip((m for _, m in located), ids, keys))]

    def stream_value(self, data: bytes) -> bytes:
        return gzip_compress(data) if self.spec.data_encoding == "gzip" else data

    def _stream_target(self, keys: Sequence[str]) -> tuple[str, ShardBuilder, list[tuple[int, int]]]:
        if keys:
            self._check_writable(keys[0], more=len(keys) - 1)
        ids = [parse_uint64_key(k) for k in keys]
        located = self.spec.locate_many(ids)
        stem = self.spec.shard_name(located[0][0])
        return stem, ShardBuilder(self.spec), [(k, m) for k, (_, m) in zip(ids, located)]

    def stream_unit_sync(self, keys: Sequence[str], values: Iterable[Buffer | None]) -> None:
        stem, builder, order = self._stream_target(keys)
        try:
            stream_shard_sync(self.base, stem + ".shard", builder.head_size, builder.place, builder.finish, order, values)
        finally:
            self._cache.forget(stem)

    async def stream_unit(self, keys: Sequence[str], values: AsyncIterable[Buffer | None]) -> None:
        stem, builder, order = self._stream_target(keys)
        try:
            await stream_shard(self.base, stem + ".shard", builder.head_size, builder.place, builder.finish, order, values)
        finally:
            self._cache.forget(stem)
