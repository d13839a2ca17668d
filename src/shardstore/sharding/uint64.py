"""Layer 1.5: a Store of uint64 keys over a Store of ``neuroglancer_uint64_sharded_v1`` shards.

Keys of this store are decimal uint64 strings (``"0"`` .. ``"18446744073709551615"``, no
leading zeros); the base store holds the shard files ``<hex>.shard`` (and, read-only, the
legacy ``<hex>.index`` + ``<hex>.data`` pairs, whose concatenation is a ``.shard`` file).

- Reads: per shard, the shard index (the whole index in one request when it is at most 64 KiB,
  else the 16-byte entries wanted), then the minishard indexes wanted, then the values, each
  step one ``base.get_many`` (the base coalesces ranges). Shard indexes and decoded minishard
  indexes are cached (LRU, bounded by entries) and used only while the shard's generation is
  unchanged. A cold point read costs 3 GETs, a warm one 1.
- Writes: ``set_many`` / ``update_many`` rewrite each touched shard once per batch, as one
  ``Update`` of the base store: its single read-modify-write (one read of the shard, one
  conditional write, under the base's lock across processes, re-read and retried after a lost
  race) merges every key of the batch, values given as ``Update`` functions of the stored
  value included (the core's partial chunks). So concurrent writers in other handles,
  processes or machines never lose each other's keys. When the caller says the batch holds
  every key a shard can have (``complete_shard``), the shard is written without reading it;
  the core streams a large one (``stream_unit_sync`` / ``stream_unit``), its values laid out
  by a ``ShardBuilder`` as they are encoded, the shard index written last at the start.
- Reads take a shard's indexes and values from one version of it: the synchronous reads
  (``SyncReads``) open the shard file once and read everything from that open version
  (``Store.sync_opens``: files, memory); otherwise the shard's generation is compared again
  after the values are read, or the values are read with ``If-Match`` on the ETag the index
  was read at (S3), and a shard replaced in between is read again.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import threading
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Hashable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar, cast

import numpy as np

from .._sync import codec_pool_size, io_pool
from ..config import IOConfig
from ..errors import CodecError, ConflictError, UnsupportedFeatureError
from ..store.base import (
    MISSING,
    ByteRange,
    Parts,
    RangeBR,
    Store,
    Update,
    inherited_retry_conflicts,
    joined,
)
from ._uint64_format import (
    SHARDING_TYPE,
    UINT64_MAX,
    MinishardIndex,
    ShardBuilder,
    ShardingSpec,
    assemble_shard,
    gzip_compress,
    gzip_decompress,
    parse_uint64_key,
    shard_entries,
    sub_range,
)
from ._uint64_read import (
    ShardCache,
    ShardReplaced,
    ShardState,
    SyncReads,
    shard_generation,
    value_of,
)
from ._unit_streams import stream_shard, stream_shard_sync

if TYPE_CHECKING:
    from ..store.streamed import Buffer, SupportsUnitStreams
    from ..store.sync_protocols import (
        SpanReader,
        SupportsFileSpans,
        SupportsGetManySync,
        SupportsGetSync,
        SupportsSetSync,
        UnitReads,
    )

# the spec and key helpers are public here: users of the format (formats/precomputed) need
# not import the private modules that implement it
__all__ = [
    "SHARDING_TYPE",
    "UINT64_MAX",
    "CompleteShard",
    "ShardingSpec",
    "Uint64ShardedStore",
    "gzip_decompress",
    "parse_uint64_key",
    "shard_entries",
]

T = TypeVar("T")


#: complete_shard(shard number, keys of the batch in that shard) -> True when the batch holds
#: every key that shard may contain (then the shard is written without being read)
CompleteShard = Callable[[int, frozenset[int]], bool]


#: batches of at least this many keys, all plain bytes, are grouped by shard with NumPy
_VECTOR_GROUPING = 256


class _Changes:
    """One shard's part of a write batch."""

    __slots__ = ("minishard", "only_values", "values")

    def __init__(self) -> None:
        self.values: dict[int, bytes | Update | None] = {}  # None: delete
        self.minishard: dict[int, int] = {}
        #: no deletes or ``Update`` functions: the merge takes ``values`` as they are
        self.only_values = True

    def __lt__(self, other: object) -> bool:  # jobs sort by shard name; never compared
        return False


class Uint64ShardedStore(Store):
    """uint64 keys (decimal strings) of a ``neuroglancer_uint64_sharded_v1`` map, as a Store."""

    def __init__(
        self,
        base: Store,
        spec: ShardingSpec,
        *,
        complete_shard: CompleteShard | None = None,
        cache_entries: int = 1 << 21,
        cache_shards: int = 1024,
        config: IOConfig | None = None,
    ) -> None:
        super().__init__(read_only=base.read_only)
        self.base = base
        self.spec = spec
        config = config or IOConfig()
        #: a read whose shards keep being replaced between their indexes and values is redone
        #: this often (``IOConfig.read_attempts``)
        self.read_attempts = config.read_attempts
        #: the shards of one synchronous write batch are rewritten by up to this many threads
        #: (one per core: a shard's merge is CPU work, its write a page-cache copy)
        self._write_threads = codec_pool_size(config.codec_threads)
        self._io_threads = config.io_threads
        self._complete_shard = complete_shard
        # stem -> what is known of the shard (LRU; bounded by shards and by minishard entries)
        self._cache = ShardCache(spec, cache_entries, cache_shards, whole_index_max=config.whole_index_max)
        base_reads = base.sync_reads
        #: reads by uint64 key from any thread (``get_id``, ``get_many_ids``, ``locate``), when
        #: the base reads synchronously; it shares this adapter's shard cache
        self.sync_ids: SyncReads | None = None if base_reads is None else SyncReads(self, base_reads, base.sync_opens)
        self._index_loads: dict[str, asyncio.Future] = {}  # stem -> index fetch in flight

    @property
    def retry_conflicts(self) -> int:  # type: ignore[override]
        """How often the core redoes a shard read-merge-write that lost a race (the setting of
        the base store chain, e.g. ``S3Store(retry_conflicts=3)``)."""
        return inherited_retry_conflicts(self.base)

    @property
    def runs_on_any_loop(self) -> bool:  # type: ignore[override]
        return self.base.runs_on_any_loop

    def __repr__(self) -> str:
        s = self.spec
        return (
            f"Uint64ShardedStore({self.base!r}, hash={s.hash!r}, preshift_bits={s.preshift_bits}, "
            f"minishard_bits={s.minishard_bits}, shard_bits={s.shard_bits})"
        )

    def invalidate(self) -> None:
        """Forget every cached index (e.g. after another process rewrote shards)."""
        self._cache.clear()

    def shard_file(self, key: int) -> str:
        """The base key of the shard file that holds ``key``."""
        return self.spec.shard_name(self.spec.locate(key)[0]) + ".shard"

    # -- locating keys ----------------------------------------------------------------------
    async def generation(self, key: str) -> Hashable | None:
        return await self.base.generation(self.shard_file(parse_uint64_key(key)))

    async def checked_generation(self, key: str) -> Hashable | None:
        return await self.base.checked_generation(self.shard_file(parse_uint64_key(key)))

    async def _state(self, stem: str) -> ShardState:
        """The shard's state, from the cache while its generation is unchanged."""
        base = self.base
        shard_gen = await base.generation(stem + ".shard")
        index_gen = await base.generation(stem + ".index") if shard_gen is MISSING else None
        return self._cache.state_for(stem, shard_generation(shard_gen, lambda: index_gen))

    async def _load_index(self, stem: str, st: ShardState, minishards: set[int], *, whole: bool = False) -> None:
        """Make sure ``st.index`` holds the entries of ``minishards`` (``whole``: all of it);
        concurrent reads of a cold shard wait for one fetch of its index."""
        loop = asyncio.get_running_loop()
        while self._cache.index_request(st, minishards, whole) is not None:
            pending = self._index_loads.get(stem)
            if pending is None or pending.get_loop() is not loop:
                break
            with contextlib.suppress(Exception):  # (a failed load: we try ourselves, and raise)
                await asyncio.shield(pending)
        else:
            return
        fut: asyncio.Future = loop.create_future()
        self._index_loads[stem] = fut
        try:
            await self._fetch_index(stem, st, minishards, whole)
        finally:
            if self._index_loads.get(stem) is fut:
                del self._index_loads[stem]
            fut.set_result(None)

    async def _fetch_index(self, stem: str, st: ShardState, minishards: set[int], whole: bool) -> None:
        """``ShardCache.index_steps`` run on the event loop: a shard's index ranges come from
        one version of it (``_read_index``), the legacy ``.index`` file's plainly."""
        steps = self._cache.index_steps(stem, st, minishards, whole)
        try:
            key, ranges = next(steps)
            while True:
                if key.endswith(".shard"):
                    key, ranges = steps.send(await self._read_index(key, ranges))
                else:
                    key, ranges = steps.send((await self.base.get_many([(key, r) for r in ranges]), None))
        except StopIteration:
            return

    async def _read_index(self, key: str, ranges: list[RangeBR]) -> tuple[list[bytes | None], Hashable | None]:
        """Index ranges of one version of a shard, and its generation."""
        first, gen = await self.base.get_versioned(key, ranges[0])
        if len(ranges) == 1 or first is None:
            return [first] * len(ranges) if first is None else [first], gen
        rest = await self.base.get_ranges_at(key, ranges[1:], gen)
        if rest is None:
            raise ShardReplaced([key.rpartition(".")[0]])
        return [first, *rest], gen

    def _read_gen(self, st: ShardState) -> Hashable | None:
        return st.read_gen if st.kind == "shard" else None  # (legacy pairs: two files, read-only)

    async def _minishards(self, stem: str, st: ShardState, wanted: set[int]) -> dict[int, MinishardIndex]:
        """The decoded minishard indexes ``wanted`` (empty ones left out); the index is loaded."""
        found, fetch = self._cache.minis_request(stem, st, wanted)
        if fetch:
            data_key = self._cache.keys(stem, st)[1]
            datas = await self.base.get_ranges_at(data_key, [RangeBR(s, e) for _, s, e in fetch], self._read_gen(st))
            if datas is None:
                raise ShardReplaced([stem])
            self._cache.minis_loaded(stem, st, fetch, datas, found)
        return found

    async def _locate_shard(self, stem: str, reqs: list[tuple[int, int, int]]) -> list[tuple[int, str, int, int] | None]:
        """``(pos, key, minishard)`` requests -> ``(pos, data key, start, size)`` of those present."""
        st = await self._state(stem)
        if st.kind == "missing":
            return [None] * len(reqs)
        wanted = {m for _, _, m in reqs}
        await self._load_index(stem, st, wanted)
        if st.kind == "missing":
            return [None] * len(reqs)
        _, data_key, delta = self._cache.keys(stem, st)
        found = await self._minishards(stem, st, wanted)
        out: list[tuple[int, str, int, int] | None] = []
        if len(reqs) == 1:
            pos, key, m = reqs[0]
            mi = found.get(m)
            hit = None if mi is None else mi.lookup(key)
            return [None if hit is None else (pos, data_key, hit[0] + delta, hit[1])]
        by_m: dict[int, list[tuple[int, int]]] = {}
        for pos, key, m in reqs:
            if m in found:
                by_m.setdefault(m, []).append((pos, key))
        for m, group in by_m.items():
            hits = found[m].lookup_many([key for _, key in group])
            for (pos, _), hit in zip(group, hits):
                if hit is not None:
                    out.append((pos, data_key, hit[0] + delta, hit[1]))
        return out

    async def _locate(self, keys: Sequence[int]) -> list[tuple[int, str, int, int] | None]:
        by_shard: dict[int, list[tuple[int, int, int]]] = {}
        for pos, (k, (shard, m)) in enumerate(zip(keys, self.spec.locate_many(keys))):
            reqs = by_shard.get(shard)
            if reqs is None:
                reqs = by_shard[shard] = []
            reqs.append((pos, k, m))
        by_stem = {self.spec.shard_name(shard): reqs for shard, reqs in by_shard.items()}
        if len(by_stem) == 1:
            parts = [await self._locate_shard(*next(iter(by_stem.items())))]
        else:
            parts = await asyncio.gather(*(self._locate_shard(s, r) for s, r in by_stem.items()))
        out: list[tuple[int, str, int, int] | None] = [None] * len(keys)
        for located in parts:
            for hit in located:
                if hit is not None:
                    out[hit[0]] = hit
        return out

    # -- reads ------------------------------------------------------------------------------
    async def _get(self, key: str, byte_range: ByteRange | None) -> bytes | None:
        return (await self.get_many([(key, byte_range)]))[0]

    async def get_many(self, requests: Sequence[tuple[str, ByteRange | None]]) -> list[bytes | None]:
        return await self.get_many_ids([parse_uint64_key(k) for k, _ in requests], [br for _, br in requests])

    async def get_many_ids(
        self, keys: Sequence[int], byte_ranges: Sequence[ByteRange | None] | None = None
    ) -> list[bytes | None]:
        """Values of uint64 ``keys`` (already validated ints; optional byte range per key),
        each from one version of its shard (see the module docstring)."""
        return await self._consistent(lambda: self._get_many_once(keys, byte_ranges), keys)

    async def _consistent(self, read: Callable[[], Awaitable[T]], keys: Sequence[int]) -> T:
        """``await read()``, redone (indexes read again) while a shard it reads is replaced
        between its index and its values."""
        for _ in range(self.read_attempts):
            try:
                return await read()
            except ShardReplaced as e:
                for stem in e.stems:
                    self._cache.forget(stem)
        raise ConflictError(f"the shards of keys {list(keys)[:4]} kept being replaced while they were read")

    async def _get_many_once(
        self, keys: Sequence[int], byte_ranges: Sequence[ByteRange | None] | None
    ) -> list[bytes | None]:
        located = await self._locate(keys)
        gz = self.spec.data_encoding == "gzip"
        # (data key, start, end, position), sorted: file order, sequential reads
        fetch: list[tuple[str, int, int, int]] = []
        for pos, hit in enumerate(located):
            if hit is not None:
                _, data_key, start, size = hit
                br = None if byte_ranges is None else byte_ranges[pos]
                if gz or br is None:
                    fetch.append((data_key, start, start + size, pos))
                else:
                    r = sub_range(start, size, br)
                    fetch.append((data_key, r.start, r.end, pos))
        results: list[bytes | None] = [None] * len(keys)
        if not fetch:
            return results
        fetch.sort()
        # per data file, the values of the version its indexes were read at
        by_key: dict[str, list[tuple[int, int, int]]] = {}
        for data_key, s, e, pos in fetch:
            by_key.setdefault(data_key, []).append((s, e, pos))
        stale: list[str] = []

        async def read_file(data_key: str, spans: list[tuple[int, int, int]]) -> None:
            stem = data_key.rpartition(".")[0]
            st = self._cache.peek(stem)
            gen = None if st is None else self._read_gen(st)
            datas = await self.base.get_ranges_at(data_key, [RangeBR(s, e) for s, e, _ in spans], gen)
            if datas is None:
                stale.append(stem)
                return
            for (s, e, pos), data in zip(spans, datas):
                br = None if byte_ranges is None else byte_ranges[pos]
                results[pos] = value_of(keys[pos], data_key, s, e, data, gz, br)

        await asyncio.gather(*(read_file(k, spans) for k, spans in by_key.items()))
        if stale:
            raise ShardReplaced(stale)
        return results

    # -- synchronous reads (declared when the base reads synchronously: files, memory) ------
    @property
    def sync_reads(self) -> SupportsGetSync | None:
        return None if self.sync_ids is None else self

    def get_sync(self, key: str, byte_range: ByteRange | None = None) -> bytes | None:
        """A value from any thread: the shard's generation checked against the cache, the
        indexes fetched with ranged reads when not cached, then the value's range."""
        ids = self.sync_ids
        assert ids is not None, "called only when sync_reads is declared"
        return ids.get_id(parse_uint64_key(key), byte_range)

    def get_ranges_sync(self, key: str, ranges: Sequence[ByteRange | None]) -> list[bytes | None]:
        return [self.get_sync(key, br) for br in ranges]

    @property
    def sync_unit_reads(self) -> SupportsGetManySync | None:
        return None if self.sync_ids is None else self

    def get_many_sync(self, keys: Sequence[str]) -> list[bytes | None]:
        """Values by shard, as ``get_many`` reads them: each shard's missing indexes, then its
        values with one multi-range read of the shard file."""
        ids = self.sync_ids
        assert ids is not None, "called only when sync_reads is declared"
        if len(keys) == 1:  # (the batch planning costs more than it saves for one value)
            return [ids.get_id(parse_uint64_key(keys[0]))]
        return ids.get_many_ids([parse_uint64_key(k) for k in keys])

    def open_units_sync(self, keys: Sequence[str]) -> UnitReads:
        ids = self.sync_ids
        assert ids is not None, "called only when sync_reads is declared"
        return ids.open_units(keys)

    # -- native reads of shard files (declared when the base is plain local files) -----------
    @property
    def file_spans(self) -> SupportsFileSpans | None:
        plain_files = self.base.file_paths is not None and self.base.sync_opens is not None
        return self if self.sync_ids is not None and plain_files else None

    @property
    def value_encoding(self) -> str | None:
        """How each stored value is encoded on top of the codec's bytes: "gzip" with
        ``data_encoding`` gzip (see ``SupportsFileSpans``)."""
        return "gzip" if self.spec.data_encoding == "gzip" else None

    def read_spans_sync(self, keys: Sequence[str], read: SpanReader) -> np.ndarray:
        """See ``SupportsFileSpans``: per shard file held open, the spans located with its
        (cached) indexes at that version and read from that same open file."""
        ids = self.sync_ids
        assert ids is not None, "called only when file_spans is declared"
        done = np.zeros(len(keys), dtype=bool)
        try:
            for value, located in ids.open_spans([parse_uint64_key(k) for k in keys]):
                fd = value.fileno()
                if fd < 0:
                    continue
                spans = np.array(located, dtype=np.int64)  # (position, start, end)
                which = spans[:, 0].astype(np.intp)
                done[which[read(fd, which, spans[:, 1], spans[:, 2] - spans[:, 1], 0)]] = True
        except CodecError:
            pass  # a damaged index: the generic path raises for the keys not read, naming the shard
        return done

    def generation_sync(self, key: str) -> Hashable | None:
        base = self.base.sync_reads
        assert base is not None, "called only when sync_reads is declared"
        return base.generation_sync(self.shard_file(parse_uint64_key(key)))

    async def exists(self, key: str) -> bool:
        return await self.exists_id(parse_uint64_key(key))

    async def exists_id(self, key: int) -> bool:
        """Whether uint64 ``key`` (an already validated int) is stored."""
        return (await self._consistent(lambda: self._locate([key]), [key]))[0] is not None

    # -- writes -----------------------------------------------------------------------------
    async def _set(self, key: str, value: bytes) -> None:
        await self.set_many([(key, value)])

    async def _delete(self, key: str) -> None:
        await self.set_many([(key, None)])

    async def set_many(self, items: Sequence[tuple[str, bytes | None]]) -> None:
        await self.update_many(items)

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
        by_shard = self._grouped_values(items)
        if by_shard is None:
            by_shard = self._grouped(items)
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
                writes.append((key, self._merge(key, changes, None)))  # no read needed
            else:
                merged.append(stem)
                writes.append((key, functools.partial(self._merge, key, changes)))
        return writes, stems, merged

    def _grouped_values(self, items: Sequence[tuple[int, bytes | Parts | Update | None]]) -> dict[int, _Changes] | None:
        """``_grouped`` for a large batch of plain ``bytes`` values (a bulk load), the keys
        sorted by shard with NumPy instead of a Python step per key; None for other batches."""
        if len(items) < _VECTOR_GROUPING or not all(type(v) is bytes for _, v in items):
            return None
        keys = [k for k, _ in items]
        located = self.spec.locate_arrays(keys)
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
        by_shard: dict[int, _Changes] = {}
        for a, b in zip(starts[:-1], starts[1:]):
            ch = by_shard[int(sorted_shards[a])] = _Changes()
            ch.values = dict(zip(ks[a:b], vs[a:b]))
            ch.minishard = dict(zip(ks[a:b], ms[a:b]))
        return by_shard

    def _grouped(self, items: Sequence[tuple[int, bytes | Parts | Update | None]]) -> dict[int, _Changes]:
        """The batch's changes by shard number, values checked (``Parts`` joined)."""
        by_shard: dict[int, _Changes] = {}
        keys = [k for k, _ in items]
        for (k, value), (shard, m) in zip(items, self.spec.locate_many(keys)):
            ch = by_shard.get(shard)
            if ch is None:
                ch = by_shard[shard] = _Changes()
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

    def _merge(self, shard_file: str, changes: _Changes, old: bytes | None) -> bytes | None:
        """The shard ``old`` (None: missing) with the batch merged in: the old entries, minus
        deletes, plus new values (encoded), ``Update`` functions applied to the stored values
        (None: no key is left, delete the shard)."""
        minishard_of = dict(changes.minishard)
        values: dict[int, bytes | memoryview] = {}
        if old is not None:
            values = shard_entries(old, self.spec, shard_file, minishard_of)
        gz = self.spec.data_encoding == "gzip"
        if changes.only_values:  # (a bulk write: no per-key work beyond the encoding)
            new = cast("dict[int, bytes]", changes.values)
            values.update({k: gzip_compress(v) for k, v in new.items()} if gz else new)
            return self._assembled(values, minishard_of)
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
        return self._assembled(values, minishard_of)

    def _assembled(self, values: dict[int, bytes | memoryview], minishard_of: dict[int, int]) -> bytes | None:
        parts = assemble_shard(self.spec, values, minishard_of)
        # one buffer: thousands of small parts cost more to hand to the kernel one by one
        # (even through writev) than one copy of the shard
        return None if parts is None else b"".join(parts)

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

    # -- listing ----------------------------------------------------------------------------
    async def _shard_stems(self) -> list[str]:
        names, _ = await self.base.list_dir("")
        stems = set()
        for name in names:
            stem, dot, ext = name.partition(".")
            if dot and ext in ("shard", "index") and self.spec.parse_shard_name(stem) is not None:
                stems.add(stem)
        return sorted(stems)

    async def _list_prefix(self, prefix: str) -> AsyncIterator[str]:
        everything = range(self.spec.num_minishards)
        for stem in await self._shard_stems():
            st = await self._state(stem)
            if st.kind == "missing":
                continue
            await self._load_index(stem, st, set(), whole=True)
            if st.kind == "missing":
                continue
            found = await self._minishards(stem, st, set(everything))
            for m in sorted(found):
                for k in found[m].keys.tolist():
                    s = str(k)
                    if s.startswith(prefix):
                        yield s

    async def delete_prefix(self, prefix: str) -> None:
        self._check_writable(prefix)
        keys = [k async for k in self.list_prefix(prefix)]
        await self.set_many([(k, None) for k in keys])

