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
  by a ``ShardBuilder`` as they are encoded, the shard index written last at the start
  (the write side lives in ``_uint64_write``).
- Reads take a shard's indexes and values from one version of it: the synchronous reads
  (``SyncReads``) open the shard file once and read everything from that open version
  (``Store.sync_opens``: files, memory); otherwise the shard's generation is compared again
  after the values are read, or the values are read with ``If-Match`` on the ETag the index
  was read at (S3), and a shard replaced in between is read again. Over such a base
  (``versions_in_replies``) reads also come tagged with that generation (``tagged_reads``),
  so the decoded-chunk cache keeps what it fetched without asking the shard's generation first.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Sequence
from typing import TYPE_CHECKING, TypeVar

from .._aio import gather, inline_now
from .._sync import codec_pool_size
from ..config import IOConfig
from ..errors import CodecError, ConflictError
from ..store.base import (
    MISSING,
    ByteRange,
    RangeBR,
    Store,
)
from ..store.byte_range import range_within
from ..store.read_modify_write import inherited_retry_conflicts
from ..store.unit_checks import UnitChecks
from ._uint64_cache import ShardCache, ShardReplaced, ShardState, shard_generation
from ._uint64_format import (
    SHARDING_TYPE,
    UINT64_MAX,
    MinishardIndex,
    ShardingSpec,
    gzip_decompress,
    parse_uint64_key,
    shard_entries,
    value_spans,
)
from ._uint64_read import SyncReads, value_of
from ._uint64_write import CompleteShard, Uint64Writes

if TYPE_CHECKING:
    import asyncio

    from ..store.sync_protocols import (
        HeldFiles,
        SpanReader,
        SupportsFileSpans,
        SupportsGetManySync,
        SupportsGetManyTagged,
        SupportsGetSync,
        UnitReads,
    )
else:
    from .._lazy import asyncio

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


class Uint64ShardedStore(UnitChecks, Uint64Writes):
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
        #: thresholds and pool sizes of this store's blocking reads (``SyncReads``)
        self.config = config = config or IOConfig()
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

    @property
    def reads_inline(self) -> bool:  # type: ignore[override]
        return self.base.reads_inline

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

    def unit_generation(self, key: str, ask: Callable[[str], Hashable | None]) -> Hashable | None:
        return ask(self.shard_file(parse_uint64_key(key)))

    async def _state(self, stem: str) -> ShardState:
        """The shard's state, from the cache while its generation is unchanged."""
        base = self.base
        shard_gen = await base.generation(stem + ".shard")
        index_gen = await base.generation(stem + ".index") if shard_gen is MISSING else None
        return self._cache.state_for(stem, shard_generation(shard_gen, lambda: index_gen))

    async def _load_index(self, stem: str, st: ShardState, minishards: set[int], *, whole: bool = False) -> None:
        """Make sure ``st.index`` holds the entries of ``minishards`` (``whole``: all of it);
        concurrent reads of a cold shard wait for one fetch of its index (under
        ``_aio.run_inline``, a blocking read on its own, it fetches it itself)."""
        if inline_now():
            if self._cache.index_request(st, minishards, whole) is not None:
                await self._fetch_index(stem, st, minishards, whole)
            return
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

    async def _locate_shard(
        self, stem: str, reqs: list[tuple[int, int, int]]
    ) -> tuple[list[tuple[int, str, int, int] | None], Hashable | None]:
        """``(pos, key, minishard)`` requests -> ``(pos, data key, start, size)`` of those
        present, and the shard's generation those spans hold at (``MISSING``: no shard;
        None: the base gave none, or a legacy pair): its values are to be read at it."""
        st = await self._state(stem)
        if st.kind == "missing":
            return [None] * len(reqs), MISSING
        wanted = {m for _, _, m in reqs}
        await self._load_index(stem, st, wanted)
        if st.kind == "missing":
            return [None] * len(reqs), MISSING
        _, data_key, delta = self._cache.keys(stem, st)
        found = await self._minishards(stem, st, wanted)  # (read at the index's generation)
        spans = value_spans(found, reqs, delta)
        return [(pos, data_key, start, end - start) for pos, start, end in spans], self._read_gen(st)

    async def _locate(
        self, keys: Sequence[int]
    ) -> tuple[list[tuple[int, str, int, int] | None], list[Hashable | None]]:
        """``_locate_shard`` for ``keys`` of any shards: per key, its span (None: absent) and
        its shard's generation."""
        by_shard: dict[int, list[tuple[int, int, int]]] = {}
        for pos, (k, (shard, m)) in enumerate(zip(keys, self.spec.locate_many(keys))):
            reqs = by_shard.get(shard)
            if reqs is None:
                reqs = by_shard[shard] = []
            reqs.append((pos, k, m))
        by_stem = {self.spec.shard_name(shard): reqs for shard, reqs in by_shard.items()}
        parts = await gather(self._locate_shard(s, r) for s, r in by_stem.items())
        out: list[tuple[int, str, int, int] | None] = [None] * len(keys)
        gens: list[Hashable | None] = [None] * len(keys)
        for reqs, (located, gen) in zip(by_stem.values(), parts):
            for pos, _, _ in reqs:
                gens[pos] = gen
            for hit in located:
                if hit is not None:
                    out[hit[0]] = hit
        return out, gens

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
        return (await self._consistent(lambda: self._get_many_once(keys, byte_ranges), keys))[0]

    @property
    def tagged_reads(self) -> SupportsGetManyTagged | None:
        # (a shard's generation is the base's tag of the reply its index came in, to which its
        # minishard index and value reads are pinned: only a base whose versioned reads take
        # it from the reply can give it)
        return self if self.base.versions_in_replies else None

    async def get_many_tagged(self, keys: Sequence[str]) -> tuple[list[bytes | None], list[Hashable | None]]:
        """Values, each with the generation of its shard that its index was read at (the
        reads of its minishard index and value are pinned to it: ``get_ranges_at``); None
        where the base gave none, or for a legacy ``.index`` + ``.data`` pair (two files)."""
        ids = [parse_uint64_key(k) for k in keys]
        return await self._consistent(lambda: self._get_many_once(ids, None), ids)

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
    ) -> tuple[list[bytes | None], list[Hashable | None]]:
        """(values, per key the generation of its shard it was read at: the one its shard's
        index came with, to which every later read of the shard was pinned)."""
        located, gens = await self._locate(keys)
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
                    r = range_within(start, size, br)
                    fetch.append((data_key, r.start, r.end, pos))
        results: list[bytes | None] = [None] * len(keys)
        if not fetch:
            return results, gens
        fetch.sort()
        # per data file, the values of the version its indexes were read at
        by_key: dict[str, list[tuple[int, int, int]]] = {}
        for data_key, s, e, pos in fetch:
            by_key.setdefault(data_key, []).append((s, e, pos))
        stale: list[str] = []

        async def read_file(data_key: str, spans: list[tuple[int, int, int]]) -> None:
            # (the generation the spans were located at, not the cache's state now: another
            # read may have found the shard replaced and loaded its new index meanwhile)
            datas = await self.base.get_ranges_at(data_key, [RangeBR(s, e) for s, e, _ in spans], gens[spans[0][2]])
            if datas is None:
                stale.append(data_key.rpartition(".")[0])
                return
            for (s, e, pos), data in zip(spans, datas):
                br = None if byte_ranges is None else byte_ranges[pos]
                results[pos] = value_of(keys[pos], data_key, s, e, data, gz, br)

        await gather(read_file(k, spans) for k, spans in by_key.items())
        if stale:
            raise ShardReplaced(stale)
        return results, gens

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

    def read_spans_sync(self, keys: Sequence[str], read: SpanReader, held: HeldFiles | None = None) -> list[bool]:
        """See ``SupportsFileSpans``: per shard file held open (for the whole read with
        ``held``), the spans located with its (cached) indexes at that version and read from
        that same open file."""
        ids = self.sync_ids
        assert ids is not None, "called only when file_spans is declared"
        done = [False] * len(keys)
        try:
            for value, located in ids.open_spans([parse_uint64_key(k) for k in keys], held):
                fd = value.fileno()
                if fd < 0:
                    continue
                # (position, start, end); spans past 2**63 are the generic path's to refuse
                spans = [(pos, start, end - start) for pos, start, end in located if (start | (end - start)) >> 63 == 0]
                if spans:
                    which, offsets, lengths = (list(column) for column in zip(*spans))
                    for pos, ok in zip(which, read(fd, which, offsets, lengths, 0)):
                        done[pos] = ok
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
        return (await self._consistent(lambda: self._locate([key]), [key]))[0][0] is not None

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

