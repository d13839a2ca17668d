"""Synchronous reads of ``neuroglancer_uint64_sharded_v1`` shards, and ``value_of``.

``SyncReads`` reads from any thread, without an event loop: of a shard file held open
(``Store.sync_opens``), else through the base store's ``SupportsGetSync``. It fetches what
the shared ``_uint64_cache.ShardCache`` asks for, as the adapter's async reads
(``uint64.py``) do, so both paths validate, decode and report corrupt shards identically.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Generator, Hashable, Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar

from ..errors import CodecError, ConflictError
from ..store.base import ByteRange, RangeBR, slice_range
from ..store.byte_range import range_within
from ._uint64_cache import ShardCache, ShardState, shard_generation
from ._uint64_format import gzip_decompress, parse_uint64_key, value_spans

if TYPE_CHECKING:
    from ..store.open_values import HeldFiles
    from ..store.sync_protocols import OpenValue, SupportsGetSync, SupportsOpenSync
    from .uint64 import Uint64ShardedStore

__all__ = ["OpenUnits", "SyncReads", "value_of"]

T = TypeVar("T")
_REPLACED = object()

# The generations a ``SyncReads._consistent`` read in progress on this thread has seen, as
# (reader, seen). One module-level slot rather than a ``threading.local`` per reader: a
# reader dies in a reference cycle, and CPython 3.11 deadlocks, holding the GIL, when the
# garbage collector frees a ``threading.local`` inside ``sys._current_frames()`` (gh-106883,
# dask/distributed#8616; 3.12 collects only between bytecodes), which a Dask worker's
# profiler calls every 10 ms: the whole worker froze.
_reading = threading.local()

Located = tuple[str, int, int]  # (data key, absolute start, stored size)


def value_of(
    key: int, data_key: str, start: int, end: int, data: bytes | None, gz: bool, br: ByteRange | None
) -> bytes:
    """A stored value as read from ``[start, end)`` of ``data_key``: length checked, gunzipped
    and then cut to ``br`` (a raw value's range was cut by the read itself)."""
    if data is None or len(data) != end - start:
        got = "nothing" if data is None else f"{len(data)} bytes"
        raise CodecError(
            f"shard {data_key!r}: value of key {key} should span bytes [{start}, {end}) "
            f"but the file gave {got} (truncated shard or bad minishard index)"
        )
    if gz:
        data = gzip_decompress(data, f"shard {data_key!r}: value of key {key}")
        if br is not None:
            data = slice_range(data, br)
    return data


class _StoreIO:
    """A read's I/O through the base store's ``SupportsGetSync``: nothing pins a version, so
    ``SyncReads._consistent`` compares generations around the read."""

    __slots__ = ("_get_ranges", "gen", "state")

    def __init__(self, reads: SyncReads, base: SupportsGetSync) -> None:
        self.state = reads._state_seen
        self._get_ranges = base.get_ranges_sync
        self.gen = None  # (index reads carry no generation: checked around the whole read)

    def read_spans(self, key: str, spans: list[tuple[int, int]]) -> list[bytes | None]:
        return self._get_ranges(key, [RangeBR(s, e) for s, e in spans])


class _OpenIO:
    """A read's I/O of one shard file held open (``OpenValue``): every index and value comes
    from that one version, so nothing needs checking afterwards."""

    __slots__ = ("gen", "st", "value")

    def __init__(self, cache: ShardCache, stem: str, value: OpenValue) -> None:
        self.value = value
        self.gen = value.generation
        self.st = cache.state_for(stem, (value.generation, None))

    def state(self, stem: str) -> ShardState:
        return self.st

    def read_spans(self, key: str, spans: list[tuple[int, int]]) -> list[bytes | None]:
        return self.value.read_many(spans)  # type: ignore[return-value]


_IO = _StoreIO | _OpenIO
#: a value found in a shard: (position in the request, start, end in the data key)
_Span = tuple[int, int, int]
#: the reads of one shard's batch as a generator: it yields ``(key, spans)`` to read and is
#: sent their bytes; it returns what it found (see ``SyncReads._span_steps``)
Steps = Generator[tuple[str, list[tuple[int, int]]], Sequence[bytes | None], T]
#: how many shard files a batch holds open at once (its reads in step, ``_in_step``)
_SHARDS_IN_STEP = 64


def _run(io: _IO, steps: Steps[T]) -> T:
    """``steps`` run with ``io``'s reads, one after the other."""
    try:
        key, spans = next(steps)
        while True:
            key, spans = steps.send(io.read_spans(key, spans))
    except StopIteration as done:
        return done.value


def _in_step(runs: list[tuple[OpenValue, Steps[None]]]) -> None:
    """The steps of several shards held open, run side by side on this thread: every run's
    next spans are advised to the kernel, for all the files together, before any is read, so
    on a cold disk a step's reads of every shard (their indexes, then their values) overlap
    in the disk's queue. This is one thread without Python threads around it: a cold batch of
    16 shards read on 8 I/O threads spent twice the CPU and as much time, the threads taking
    turns at the GIL between their reads."""
    pending: list[tuple[OpenValue, Steps[None], list[tuple[int, int]]]] = []
    for value, steps in runs:
        try:
            pending.append((value, steps, next(steps)[1]))
        except StopIteration:
            pass
    while pending:
        for value, _, spans in pending:
            value.advise(spans)
        later = []
        for value, steps, spans in pending:
            try:
                later.append((value, steps, steps.send(value.read_many(spans, advise=False))[1]))
            except StopIteration:
                pass
        pending = later


class SyncReads:
    """Reads of a ``Uint64ShardedStore`` from any thread, without an event loop, as on the
    async path: a shard's cached indexes are used while its generation is unchanged. Over a
    base that holds values open (``Store.sync_opens``: files, memory) each shard file is
    opened once per read and its generation, indexes and values all come from that open
    version; otherwise (and for legacy ``.index`` + ``.data`` pairs) through the base's
    ``SupportsGetSync``, the generations compared around the read (``_consistent``). A batch
    reads each shard's values with one multi-range read of it."""

    def __init__(self, store: Uint64ShardedStore, base: SupportsGetSync, opens: SupportsOpenSync | None) -> None:
        self._cache: ShardCache = store._cache
        self._spec = store.spec
        self._attempts = store.read_attempts
        self._generation = base.generation_sync
        self._open = None if opens is None else opens.open_sync
        self._store_io = _StoreIO(self, base)

    def _state(self, stem: str, shard_gen: Hashable | None) -> ShardState:
        gen = self._generation
        return self._cache.state_for(stem, shard_generation(shard_gen, lambda: gen(stem + ".index")))

    def _opened(self, stem: str) -> OpenValue | None:
        """The stem's ``.shard`` file held open, or None (no ``sync_opens``, or no such file:
        missing, or a legacy pair; those are read through the store)."""
        return None if self._open is None else self._open(stem + ".shard")

    def _consistent(self, read: Callable[[], T]) -> T:
        """``read()``, redone until the shards it read (with the generations noted by
        ``_state_seen``) were not replaced while it ran: then every
        index and value came from one version of its shard (a replaced file never returns to
        a generation). A CodecError from a shard replaced meanwhile is retried, not raised."""
        gen = self._generation
        outer = getattr(_reading, "slot", None)  # (a read of another reader, on this thread)
        for _ in range(self._attempts):
            seen: dict[str, Hashable | None] = {}
            _reading.slot = (self, seen)
            value: object
            try:
                value = read()
            except CodecError:
                if all(gen(stem + ".shard") == g for stem, g in seen.items()):
                    raise
                value = _REPLACED
            finally:
                _reading.slot = outer
            changed = [stem for stem, g in seen.items() if gen(stem + ".shard") != g]
            if value is not _REPLACED and not changed:
                return value  # type: ignore[return-value]
            for stem in changed or seen:
                self._cache.forget(stem)
        raise ConflictError(f"shards {sorted(seen)[:4]} kept being replaced while they were read")

    def _state_seen(self, stem: str) -> ShardState:
        """``_state`` noting the generation it saw for ``_consistent``."""
        g = self._generation(stem + ".shard")
        # threads that read outside ``_consistent`` (a write's merge) never set the slot
        slot = getattr(_reading, "slot", None)
        if slot is not None and slot[0] is self:
            slot[1].setdefault(stem, g)
        return self._state(stem, g)

    def _index_steps(self, st: ShardState, gen: Hashable | None, stem: str, minishards: set[int]) -> Steps[None]:
        """``ShardCache.index_steps`` as read steps (the ranges as spans)."""
        index = self._cache.index_steps(stem, st, minishards)
        try:
            name, ranges = next(index)
            while True:
                datas = yield name, [(r.start, r.end) for r in ranges]
                name, ranges = index.send((datas, gen))
        except StopIteration:
            return

    def _load_index(self, io: _IO, stem: str, st: ShardState, minishards: set[int]) -> None:
        _run(io, self._index_steps(st, io.gen, stem, minishards))

    def locate(self, key: int) -> Located | None:
        """``(data key, start, size)`` of a stored key, or None when it is absent."""
        stem = self._spec.shard_name(self._spec.locate(key)[0])
        value = self._opened(stem)
        if value is None:
            return self._locate_in(self._store_io, stem, key)
        try:
            return self._locate_in(_OpenIO(self._cache, stem, value), stem, key)
        finally:
            value.close()

    def _locate_in(self, io: _IO, stem: str, key: int) -> Located | None:
        m = self._spec.locate(key)[1]
        st = io.state(stem)
        mi = st.minis.get(m)
        if mi is None:  # (indexes to read: the batch's steps, for one key)
            located = _run(io, self._span_steps(st, io.gen, stem, [(0, key, m)]))
            if located is None or not located[1]:
                return None
            data_key, ((_, start, end),) = located
            return data_key, start, end - start
        hit = mi.lookup(key)
        if hit is None:
            return None
        _, data_key, delta = self._cache.keys(stem, st)
        return data_key, hit[0] + delta, hit[1]

    def get_id(self, key: int, byte_range: ByteRange | None = None) -> bytes | None:
        """The value of uint64 ``key`` (an already validated int), or None."""
        stem = self._spec.shard_name(self._spec.locate(key)[0])
        value = self._opened(stem)
        if value is None:
            return self._consistent(lambda: self._get_id(self._store_io, stem, key, byte_range))
        try:
            return self._get_id(_OpenIO(self._cache, stem, value), stem, key, byte_range)
        finally:
            value.close()

    def _get_id(self, io: _IO, stem: str, key: int, byte_range: ByteRange | None) -> bytes | None:
        hit = self._locate_in(io, stem, key)
        if hit is None:
            return None
        data_key, start, size = hit
        gz = self._spec.data_encoding == "gzip"
        r = RangeBR(start, start + size) if gz or byte_range is None else range_within(start, size, byte_range)
        return value_of(key, data_key, r.start, r.end, io.read_spans(data_key, [(r.start, r.end)])[0], gz, byte_range)

    def _by_shard(self, keys: Sequence[int]) -> dict[int, list[tuple[int, int, int]]]:
        """``(position, key, minishard)`` of each key, by shard number."""
        by_shard: dict[int, list[tuple[int, int, int]]] = {}
        for pos, (k, (shard, m)) in enumerate(zip(keys, self._spec.locate_many(keys))):
            reqs = by_shard.get(shard)
            if reqs is None:
                reqs = by_shard[shard] = []
            reqs.append((pos, k, m))
        return by_shard

    def _span_steps(
        self, st: ShardState, gen: Hashable | None, stem: str, reqs: list[tuple[int, int, int]]
    ) -> Steps[tuple[str, list[_Span]] | None]:
        """Where the values of ``reqs`` (as ``_by_shard`` gives them) lie in the shard: the
        index entries and minishard indexes it lacks read through the steps (of the version
        ``gen``, when the reads are of one open version), then its data key and ``(position,
        start, end)`` per value found, in file order; None: no shard."""
        cache = self._cache
        if st.kind == "missing":
            return None
        wanted = {m for _, _, m in reqs}
        if not wanted.issubset(st.minis):
            yield from self._index_steps(st, gen, stem, wanted)
            if st.kind == "missing":
                return None
        found, fetch = cache.minis_request(stem, st, wanted)
        _, data_key, delta = cache.keys(stem, st)
        if fetch:
            datas = yield data_key, [(s, e) for _, s, e in fetch]
            cache.minis_loaded(stem, st, fetch, datas, found)
        spans = value_spans(found, reqs, delta)
        return data_key, spans

    def _spans(self, io: _IO, stem: str, reqs: list[tuple[int, int, int]]) -> tuple[str, list[_Span]] | None:
        """``_span_steps`` read with ``io``."""
        return _run(io, self._span_steps(io.state(stem), io.gen, stem, reqs))

    def _value_steps(
        self, st: ShardState, gen: Hashable | None, stem: str, reqs: list[tuple[int, int, int]],
        keys: Sequence[int], out: list[bytes | None],
    ) -> Steps[None]:
        """The values of one shard's ``reqs`` into ``out``: ``_span_steps``, then one
        multi-range read of the values."""
        located = yield from self._span_steps(st, gen, stem, reqs)
        if located is None or not located[1]:
            return
        data_key, spans = located
        gz = self._spec.data_encoding == "gzip"
        datas = yield data_key, [(s, e) for _, s, e in spans]
        for (pos, s, e), data in zip(spans, datas):
            out[pos] = value_of(keys[pos], data_key, s, e, data, gz, None)

    def get_many_ids(self, keys: Sequence[int]) -> list[bytes | None]:
        """Values of many keys: per shard the indexes it lacks, then its values in file
        order, each step one multi-range read of the shard. Shards held open are read side
        by side, up to ``_SHARDS_IN_STEP`` at a time (``_in_step``); the others (legacy
        pairs, stores that cannot hold a value open) one after the other through the store,
        their generations compared around the read."""
        out: list[bytes | None] = [None] * len(keys)
        through_store: list[tuple[str, list[tuple[int, int, int]]]] = []
        shards = list(self._by_shard(keys).items())
        for at in range(0, len(shards), _SHARDS_IN_STEP):
            runs: list[tuple[OpenValue, Steps[None]]] = []
            try:
                for shard, reqs in shards[at : at + _SHARDS_IN_STEP]:
                    stem = self._spec.shard_name(shard)
                    value = self._opened(stem)
                    if value is None:
                        through_store.append((stem, reqs))
                        continue
                    io = _OpenIO(self._cache, stem, value)
                    runs.append((value, self._value_steps(io.st, io.gen, stem, reqs, keys, out)))
                _in_step(runs)
            finally:
                for value, _ in runs:
                    value.close()
        if through_store:
            self._store_values(through_store, keys, out)
        return out

    def _store_values(
        self, shards: list[tuple[str, list[tuple[int, int, int]]]], keys: Sequence[int], out: list[bytes | None]
    ) -> None:
        """``_value_steps`` of ``shards`` through the base store, one after the other, redone
        until no shard was replaced meanwhile (``_consistent``)."""

        def read() -> None:
            for stem, reqs in shards:
                _run(self._store_io, self._value_steps(self._state_seen(stem), None, stem, reqs, keys, out))

        self._consistent(read)

    def open_spans(self, keys: Sequence[int], held: HeldFiles | None = None) -> Iterator[tuple[OpenValue, list[_Span]]]:
        """Where the values of ``keys`` lie, without reading them (for native readers): per
        shard this store can hold open, that open version of it and ``(position in keys,
        start, end)`` of each stored value, in file order, located with the indexes of that
        very version; the caller reads the spans from it before asking for the next shard
        (each is closed then, or kept open in ``held`` for the rest of the read). Shards that
        cannot be held open are left out."""
        for shard, reqs in self._by_shard(keys).items():
            stem = self._spec.shard_name(shard)
            if held is None:
                value = self._opened(stem)
            else:
                got = held.open(stem, functools.partial(self._opened, stem), lambda value: None)
                value = None if got is None else got[0]
            if value is None:
                continue
            try:
                located = self._spans(_OpenIO(self._cache, stem, value), stem, reqs)
                if located is not None and located[1]:
                    yield value, located[1]
            finally:
                if held is None:
                    value.close()

    def open_units(self, keys: Sequence[str]) -> OpenUnits:
        """``UnitReads`` of the values of ``keys`` (decimal keys, validated here): each shard
        opened once and its indexes loaded now, its values read later by whichever thread
        asks (positioned reads of the open file). Shards without a ``.shard`` file to hold
        open are read now, through the store."""
        ids = [parse_uint64_key(k) for k in keys]
        units = OpenUnits(self, keys, ids)
        if len(ids) == 1:  # (a one-chunk read: the batch planning costs more than it saves)
            stem = self._spec.shard_name(self._spec.locate(ids[0])[0])
            value = self._opened(stem)
            if value is not None:
                units.values.append(value)
                try:
                    hit = self._locate_in(_OpenIO(self._cache, stem, value), stem, ids[0])
                except BaseException:
                    units.close()
                    raise
                if hit is not None:
                    units.found[keys[0]] = (value, hit[0], hit[1], hit[1] + hit[2], ids[0])
                return units
        try:
            through_store: list[tuple[str, list[tuple[int, int, int]]]] = []
            for shard, reqs in self._by_shard(ids).items():
                stem = self._spec.shard_name(shard)
                value = self._opened(stem)
                if value is None:
                    through_store.append((stem, reqs))
                    continue
                units.values.append(value)
                io = _OpenIO(self._cache, stem, value)
                if {m for _, _, m in reqs}.issubset(io.st.minis):  # all cached: locate them now
                    located = self._spans(io, stem, reqs)
                    if located is not None:
                        for pos, s, e in located[1]:
                            units.found[keys[pos]] = (value, located[0], s, e, ids[pos])
                else:
                    # the shard index now (one read); each minishard index is read by the
                    # thread that first reads one of its values, so that on a cold disk those
                    # scattered small reads run in parallel as the values' reads do
                    self._load_index(io, stem, io.st, {m for _, _, m in reqs})
                    for pos, k, _ in reqs:
                        units.lazy[keys[pos]] = (io, stem, k)
            if through_store:
                out: list[bytes | None] = [None] * len(ids)
                self._store_values(through_store, ids, out)
                for _, reqs in through_store:
                    for pos, _, _ in reqs:
                        units.read[keys[pos]] = out[pos]
        except BaseException:
            units.close()
            raise
        return units


class OpenUnits:
    """The values of keys in shards held open (``UnitReads``; see ``SyncReads.open_units``)."""

    def __init__(self, reads: SyncReads, keys: Sequence[str], ids: Sequence[int]) -> None:
        self._reads = reads
        self._gz = reads._spec.data_encoding == "gzip"
        self._opened = set(keys)
        self.values: list[OpenValue] = []  # the open shard files
        #: key -> (open shard, data key, start, end, uint64 key)
        self.found: dict[str, tuple[OpenValue, str, int, int, int]] = {}
        self.read: dict[str, bytes | None] = {}  # values already read (shards read through the store)
        #: key -> (its open shard's I/O, shard stem, uint64 key): located when first read
        self.lazy: dict[str, tuple[_OpenIO, str, int]] = {}

    def _hit(self, key: str) -> tuple[OpenValue, str, int, int, int] | None:
        hit = self.found.get(key)
        if hit is not None:
            return hit
        lazy = self.lazy.get(key)
        if lazy is None:
            return None
        io, stem, k = lazy
        at = self._reads._locate_in(io, stem, k)
        if at is None:
            return None
        return io.value, at[0], at[1], at[1] + at[2], k

    def get_sync(self, key: str, byte_range: ByteRange | None = None) -> bytes | None:
        hit = self._hit(key)
        if hit is None:
            if key in self.read:
                data = self.read[key]
                return data if data is None or byte_range is None else slice_range(data, byte_range)
            if key in self._opened:
                return None  # (absent from its shard)
            return self._reads.get_id(parse_uint64_key(key), byte_range)
        shard, data_key, start, end, k = hit
        if self._gz or byte_range is None:
            r = RangeBR(start, end)
        else:
            r = range_within(start, end - start, byte_range)
        return value_of(k, data_key, r.start, r.end, shard.read(r.start, r.end), self._gz, byte_range)

    def get_transient_sync(self, key: str, max_bytes: int) -> bytes | memoryview | None:
        hit = self._hit(key)
        if hit is None:
            return self.get_sync(key)
        shard, data_key, start, end, k = hit
        return value_of(k, data_key, start, end, shard.read_transient(start, end, max_bytes), self._gz, None)

    def close(self) -> None:
        for value in self.values:
            value.close()
