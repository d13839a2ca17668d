"""Layer 1.5: a Store of uint64 keys over a Store of ``neuroglancer_uint64_sharded_v1`` shards.

Keys of this store are decimal uint64 strings (``"0"`` .. ``"18446744073709551615"``, no
leading zeros); the base store holds the shard files ``<hex>.shard`` (and, read-only, the
legacy ``<hex>.index`` + ``<hex>.data`` pairs, whose concatenation is a ``.shard`` file).

- Reads: per shard, the shard index (the whole index in one request when it is at most 64 KiB,
  else the 16-byte entries wanted), then the minishard indexes wanted, then the values, each
  step one ``base.get_many`` (the base coalesces ranges). Shard indexes and decoded minishard
  indexes are cached (LRU, bounded by entries) and used only while the shard's generation is
  unchanged. A cold point read costs 3 GETs, a warm one 1.
- Writes: ``set_many`` rewrites each touched shard once per batch, merging with what the shard
  holds (read with ``get_versioned``, written with ``set_if``, so a concurrent writer in
  another process makes the write fail with ConflictError instead of losing its keys). A
  per-shard asyncio lock serializes read-merge-write of one shard inside this process. When
  the caller says the batch holds every key a shard can have (``complete_shard``), the shard
  is written without reading it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Hashable, Sequence
from typing import Literal

from .._locks import KeyedLocks
from .._sync import codec_pool
from ..errors import UnsupportedFeatureError
from ..store.base import MISSING, BlockingReader, ByteRange, Parts, RangeBR, Store, inherited_retry_conflicts, joined
from ._uint64_format import (
    SHARDING_TYPE,
    UINT64_MAX,
    MinishardIndex,
    ShardingSpec,
    assemble_shard,
    gzip_compress,
    parse_uint64_key,
    shard_entries,
    sub_range,
)
from ._uint64_read import BlockingReads, ShardCache, ShardState, blocking_reads, shard_generation, value_of

# the spec and key helpers are public here: users of the format (formats/precomputed) need
# not import the private modules that implement it
__all__ = ["SHARDING_TYPE", "UINT64_MAX", "CompleteShard", "ShardingSpec", "Uint64ShardedStore", "parse_uint64_key"]

#: rewrites touching more bytes than this run their CPU work (parse, encode, assemble) in the
#: codec thread pool; smaller ones inline (a thread hop costs more than the work)
_INLINE_WORK = 1 << 20

#: complete_shard(shard number, keys of the batch in that shard) -> True when the batch holds
#: every key that shard may contain (then the shard is written without being read)
CompleteShard = Callable[[int, frozenset[int]], bool]


class _Changes:
    """One shard's part of a write batch."""

    __slots__ = ("values", "minishard", "nbytes")

    def __init__(self) -> None:
        self.values: dict[int, bytes | None] = {}  # None: delete
        self.minishard: dict[int, int] = {}
        self.nbytes = 0

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
    ) -> None:
        super().__init__(read_only=base.read_only)
        self.base = base
        self.spec = spec
        self._complete_shard = complete_shard
        # stem -> what is known of the shard (LRU; bounded by shards and by minishard entries)
        self._cache = ShardCache(spec, cache_entries, cache_shards)
        self._blocking: BlockingReads | None | Literal[False] = False  # made on first use
        self._shard_locks = KeyedLocks()

    @property
    def retry_conflicts(self) -> int:
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

    async def _state(self, stem: str) -> ShardState:
        """The shard's state, from the cache while its generation is unchanged."""
        base = self.base
        shard_gen = await base.generation(stem + ".shard")
        index_gen = await base.generation(stem + ".index") if shard_gen is MISSING else None
        return self._cache.state_for(stem, shard_generation(shard_gen, lambda: index_gen))

    async def _load_index(self, stem: str, st: ShardState, minishards: set[int], *, whole: bool = False) -> None:
        """Make sure ``st.index`` holds the entries of ``minishards`` (``whole``: all of it)."""
        req = self._cache.index_request(st, minishards, whole)
        if req is None:
            return
        whole, wanted, ranges = req
        if st.kind == "unknown":  # no generations: probe the layouts
            st.kind = "shard"
            datas = await self.base.get_many([(stem + ".shard", r) for r in ranges])
            if datas[0] is None:
                st.kind = "pair"
                datas = await self.base.get_many([(stem + ".index", r) for r in ranges])
        else:
            index_key = self._cache.keys(stem, st)[0]
            datas = await self.base.get_many([(index_key, r) for r in ranges])
        self._cache.set_index(stem, st, whole, wanted, datas)

    async def _minishards(self, stem: str, st: ShardState, wanted: set[int]) -> dict[int, MinishardIndex]:
        """The decoded minishard indexes ``wanted`` (empty ones left out); the index is loaded."""
        found, fetch = self._cache.minis_request(stem, st, wanted)
        if fetch:
            data_key = self._cache.keys(stem, st)[1]
            datas = await self.base.get_many([(data_key, RangeBR(s, e)) for _, s, e in fetch])
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
        """Values of uint64 ``keys`` (already validated ints; optional byte range per key)."""
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
        datas = await self.base.get_many([(k, RangeBR(s, e)) for k, s, e, _ in fetch])
        for (data_key, s, e, pos), data in zip(fetch, datas):
            br = None if byte_ranges is None else byte_ranges[pos]
            results[pos] = value_of(keys[pos], data_key, s, e, data, gz, br)
        return results

    # -- blocking reads ---------------------------------------------------------------------
    def blocking_reader(self) -> BlockingReader | None:
        """``read(key, byte_range=None)`` from any thread, when the base reads and versions
        synchronously (files, memory): the shard's generation checked against the cache, the
        indexes fetched with ranged blocking reads when not cached, then the value's range.
        The core then reads, decodes and scatters chunks in worker threads, no event loop."""
        return self.blocking_reads()

    def blocking_reads(self) -> BlockingReads | None:
        """Like ``blocking_reader``, with ``get_id`` and ``locate`` (made once: it keeps no
        state of its own, the shard cache is the adapter's)."""
        if self._blocking is False:
            self._blocking = blocking_reads(self)
        return self._blocking

    def blocking_generation(self) -> Callable[[str], Hashable | None] | None:
        generation = self.base.blocking_generation()
        if generation is None:
            return None
        return lambda key: generation(self.shard_file(parse_uint64_key(key)))

    async def exists(self, key: str) -> bool:
        return (await self._locate([parse_uint64_key(key)]))[0] is not None

    async def exists_id(self, key: int) -> bool:
        """Whether uint64 ``key`` (an already validated int) is stored."""
        return (await self._locate([key]))[0] is not None

    # -- writes -----------------------------------------------------------------------------
    async def _set(self, key: str, value: bytes) -> None:
        await self.set_many([(key, value)])

    async def _delete(self, key: str) -> None:
        await self.set_many([(key, None)])

    async def set_many(self, items: Sequence[tuple[str, bytes | None]]) -> None:
        if items:
            self._check_writable(items[0][0], more=len(items) - 1)
        await self.set_many_ids([(parse_uint64_key(k), v) for k, v in items])

    async def set_many_ids(self, items: Sequence[tuple[int, bytes | None]]) -> None:
        """Write (None: delete) uint64 keys (already validated ints) in one batch."""
        if not items:
            return
        self._check_writable(str(items[0][0]), more=len(items) - 1)
        by_shard: dict[int, _Changes] = {}
        keys = [k for k, _ in items]
        for (k, value), (shard, m) in zip(items, self.spec.locate_many(keys)):
            ch = by_shard.get(shard)
            if ch is None:
                ch = by_shard[shard] = _Changes()
            if value is None:
                ch.values[k] = None
            else:
                if isinstance(value, str) or not hasattr(value, "__len__"):
                    raise TypeError(f"value for key {k} must be bytes-like, got {type(value).__name__}")
                if isinstance(value, Parts):
                    value = joined(value)
                ch.values[k] = value
                ch.nbytes += len(value)
            ch.minishard[k] = m
        jobs = sorted((self.spec.shard_name(s), s, ch) for s, ch in by_shard.items())
        # one lock per shard (taken in name order: overlapping batches cannot deadlock)
        async with self._shard_locks.holding(stem for stem, _, _ in jobs):
            try:
                if len(jobs) == 1:
                    await self._rewrite(*jobs[0])
                else:
                    await asyncio.gather(*(self._rewrite(*job) for job in jobs))
            finally:
                for stem, _, _ in jobs:  # these shards changed (or may have): re-read next time
                    self._cache.forget(stem)

    async def _rewrite(self, stem: str, shard: int, changes: _Changes) -> None:
        key = stem + ".shard"
        complete = self._complete_shard is not None and self._complete_shard(shard, frozenset(changes.values))
        old: bytes | None = None
        gen: Hashable | None = None
        if not complete:
            old, gen = await self.base.get_versioned(key)
            if old is None:
                igen = await self.base.generation(stem + ".index")
                if igen is not MISSING and igen is not None:
                    raise UnsupportedFeatureError(
                        f"shard {stem!r} is stored in the legacy {stem}.index + {stem}.data layout, "
                        "which shardstore reads but does not write"
                    )
        if changes.nbytes + (len(old) if old else 0) <= _INLINE_WORK:
            data = self._merge(key, old, changes)
        else:
            loop = asyncio.get_running_loop()
            data = await loop.run_in_executor(codec_pool(), self._merge, key, old, changes)
        if data is None:  # the shard is left without keys: remove its file
            if complete:  # not read, so it may exist: delete whatever is there
                await self.base.delete(key)
            elif old is not None:
                await self.base.set_if(key, None, gen)
            return
        if complete:
            await self.base.set(key, data)
        else:
            await self.base.set_if(key, data, gen)

    def _merge(self, shard_file: str, old: bytes | None, changes: _Changes) -> bytes | None:
        """The new shard: the old entries, minus deletes, plus (encoded) new values."""
        minishard_of = changes.minishard
        values: dict[int, bytes | memoryview] = {}
        if old is not None:
            values = shard_entries(old, self.spec, shard_file, minishard_of)
        gz = self.spec.data_encoding == "gzip"
        for k, v in changes.values.items():
            if v is None:
                values.pop(k, None)
            else:
                values[k] = gzip_compress(v) if gz else v
        parts = assemble_shard(self.spec, values, minishard_of)
        # one buffer: a single write call (thousands of small parts cost a syscall per few KiB)
        return None if parts is None else b"".join(parts)

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

