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
import contextlib
import struct
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Hashable, Sequence

from .._sync import codec_pool
from ..errors import CodecError, UnsupportedFeatureError
from ..store.base import MISSING, ByteRange, Parts, RangeBR, Store, joined, slice_range
from ._uint64_format import (
    MinishardIndex,
    ShardingSpec,
    assemble_shard,
    check_index_entry,
    decode_minishard_indexes,
    gzip_compress,
    gzip_decompress,
    parse_uint64_key,
    shard_entries,
    sub_range,
)

__all__ = ["Uint64ShardedStore", "parse_uint64_key", "ShardingSpec"]

#: shard indexes up to this size are read whole (one request serves every minishard)
_WHOLE_INDEX_MAX = 64 * 1024
#: rewrites touching more bytes than this run their CPU work (parse, encode, assemble) in the
#: codec thread pool; smaller ones inline (a thread hop costs more than the work)
_INLINE_WORK = 1 << 20
_PAIR = struct.Struct("<QQ")

#: complete_shard(shard number, keys of the batch in that shard) -> True when the batch holds
#: every key that shard may contain (then the shard is written without being read)
CompleteShard = Callable[[int, frozenset[int]], bool]


class _ShardState:
    """What is known of one shard: where it lives, its index, decoded minishard indexes."""

    __slots__ = ("gen", "kind", "index", "minis", "n_entries")

    def __init__(self, gen: Hashable | None, kind: str) -> None:
        self.gen = gen  # (generation of .shard, generation of .index) when read
        self.kind = kind  # "missing" | "shard" | "pair" (legacy .index + .data)
        # the whole shard index (bytes) or the entries read so far ({minishard: (start, end)})
        self.index: bytes | dict[int, tuple[int, int]] | None = None
        self.minis: dict[int, MinishardIndex] = {}
        self.n_entries = 0


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
        # stem -> state, LRU; bounded by shards and by decoded minishard entries in total
        self._states: OrderedDict[str, _ShardState] = OrderedDict()
        self._cache_entries = cache_entries
        self._cache_shards = cache_shards
        self._cached = 0
        self._shard_locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

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
        self._states.clear()
        self._cached = 0

    def shard_file(self, key: int) -> str:
        """The base key of the shard file that holds ``key``."""
        return self.spec.shard_name(self.spec.locate(key)[0]) + ".shard"

    # -- cache ------------------------------------------------------------------------------
    def _forget(self, stem: str) -> None:
        st = self._states.pop(stem, None)
        if st is not None:
            self._cached -= st.n_entries

    def _remember(self, stem: str, st: _ShardState) -> None:
        self._forget(stem)
        self._states[stem] = st
        self._cached += st.n_entries
        self._trim()

    def _trim(self) -> None:
        with contextlib.suppress(KeyError):  # reads on several threads' loops share the cache
            while len(self._states) > self._cache_shards or (
                self._cached > self._cache_entries and len(self._states) > 1
            ):
                _, old = self._states.popitem(last=False)
                self._cached -= old.n_entries

    def _add_minis(self, stem: str, st: _ShardState, m: int, mi: MinishardIndex) -> None:
        if len(mi) > self._cache_entries:
            return  # larger than the whole cache: use it once, keep nothing
        st.minis[m] = mi
        st.n_entries += len(mi)
        if self._states.get(stem) is st:
            self._cached += len(mi)
            self._trim()
            if self._cached > self._cache_entries:  # this shard alone is over budget
                self._cached -= st.n_entries
                st.minis.clear()
                st.n_entries = 0

    # -- locating keys ----------------------------------------------------------------------
    async def generation(self, key: str) -> Hashable | None:
        return await self.base.generation(self.shard_file(parse_uint64_key(key)))

    async def _state(self, stem: str) -> _ShardState:
        """The shard's state, from the cache while its generation is unchanged."""
        base = self.base
        gen = await base.generation(stem + ".shard")
        if gen is MISSING:
            gen = (MISSING, await base.generation(stem + ".index"))
        else:
            gen = None if gen is None else (gen, None)
        st = self._states.get(stem)
        if st is not None and (gen is None or st.gen == gen):
            with contextlib.suppress(KeyError):
                self._states.move_to_end(stem)
            return st
        if gen is None:
            kind = "unknown"  # the base cannot tell: found out when the index is read
        elif gen[0] is not MISSING:
            kind = "shard"
        elif gen[1] is not MISSING and gen[1] is not None:
            kind = "pair"
        else:
            kind = "missing"
        st = _ShardState(gen, kind)
        self._remember(stem, st)
        return st

    def _keys(self, stem: str, st: _ShardState) -> tuple[str, str, int]:
        """(index key, data key, offset to add to absolute shard positions) of a shard."""
        if st.kind == "pair":
            return stem + ".index", stem + ".data", -self.spec.index_size
        return stem + ".shard", stem + ".shard", 0

    async def _load_index(self, stem: str, st: _ShardState, minishards: set[int], *, whole: bool = False) -> None:
        """Make sure ``st.index`` holds the entries of ``minishards`` (``whole``: all of it)."""
        isz = self.spec.index_size
        whole = whole or isz <= _WHOLE_INDEX_MAX or len(minishards) > 1 and st.kind == "unknown"
        if isinstance(st.index, bytes) or (
            not whole and isinstance(st.index, dict) and minishards.issubset(st.index)
        ):
            return
        wanted = sorted(minishards)
        if whole:
            ranges = [RangeBR(0, isz)]
        else:
            ranges = [RangeBR(16 * m, 16 * m + 16) for m in wanted]
        if st.kind == "unknown":  # no generations: probe the layouts
            st.kind = "shard"
            datas = await self.base.get_many([(stem + ".shard", r) for r in ranges])
            if datas[0] is None:
                st.kind = "pair"
                datas = await self.base.get_many([(stem + ".index", r) for r in ranges])
        else:
            index_key = self._keys(stem, st)[0]
            datas = await self.base.get_many([(index_key, r) for r in ranges])
        if datas[0] is None:
            st.kind = "missing"  # (or deleted since its generation was read)
            return
        name = self._keys(stem, st)[0]
        if whole:
            data = datas[0]
            if len(data) < isz:
                raise CodecError(
                    f"shard {name!r} is truncated: {len(data)} bytes, shorter than its {isz}-byte shard index"
                )
            st.index = bytes(data)
            return
        entries = st.index if isinstance(st.index, dict) else {}
        for m, data in zip(wanted, datas):
            if data is None or len(data) != 16:
                raise CodecError(
                    f"shard {name!r} is truncated: it ends inside its {isz}-byte shard index "
                    f"(entry of minishard {m})"
                )
            entries[m] = _PAIR.unpack(data)
        st.index = entries

    def _entry(self, stem: str, st: _ShardState, m: int) -> tuple[int, int]:
        if isinstance(st.index, bytes):
            start, end = _PAIR.unpack_from(st.index, 16 * m)
        else:
            start, end = st.index[m]  # type: ignore[index]
        if start != end:
            check_index_entry(start, end, self.spec, self._keys(stem, st)[0], m)
        return start, end

    async def _minishards(self, stem: str, st: _ShardState, wanted: set[int]) -> dict[int, MinishardIndex]:
        """The decoded minishard indexes ``wanted`` (empty ones left out); the index is loaded."""
        _, data_key, delta = self._keys(stem, st)
        isz = self.spec.index_size
        found: dict[int, MinishardIndex] = {}
        fetch: list[tuple[int, int, int]] = []
        for m in sorted(wanted):
            mi = st.minis.get(m)
            if mi is not None:
                found[m] = mi
                continue
            start, end = self._entry(stem, st, m)
            if start != end:
                fetch.append((m, isz + start + delta, isz + end + delta))
        if not fetch:
            return found
        datas = await self.base.get_many([(data_key, RangeBR(s, e)) for _, s, e in fetch])
        for (m, s, e), data in zip(fetch, datas):
            if data is None or len(data) != e - s:
                got = "nothing" if data is None else f"{len(data)} bytes"
                raise CodecError(
                    f"shard {data_key!r}: minishard index range of minishard {m} [{s}, {e}) is out of "
                    f"bounds of the shard file (read gave {got})"
                )
        ms = [m for m, _, _ in fetch]
        for m, mi in zip(ms, decode_minishard_indexes(datas, self.spec, data_key, ms)):  # type: ignore[arg-type]
            found[m] = mi
            self._add_minis(stem, st, m, mi)
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
        _, data_key, delta = self._keys(stem, st)
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
        fetch: list[tuple[int, str, RangeBR]] = []
        for pos, hit in enumerate(located):
            if hit is not None:
                _, data_key, start, size = hit
                br = None if byte_ranges is None else byte_ranges[pos]
                fetch.append((pos, data_key, RangeBR(start, start + size) if gz or br is None else sub_range(start, size, br)))
        results: list[bytes | None] = [None] * len(keys)
        if not fetch:
            return results
        if len(fetch) > 1:  # in file order: sequential reads when the shard is not cached
            fetch.sort(key=lambda f: (f[1], f[2].start))
        datas = await self.base.get_many([(k, r) for _, k, r in fetch])
        for (pos, data_key, r), data in zip(fetch, datas):
            if data is None or len(data) != r.end - r.start:
                got = "nothing" if data is None else f"{len(data)} bytes"
                raise CodecError(
                    f"shard {data_key!r}: value of key {keys[pos]} should span bytes [{r.start}, {r.end}) "
                    f"but the file gave {got} (truncated shard or bad minishard index)"
                )
            if gz:
                data = gzip_decompress(data, f"shard {data_key!r}: value of key {keys[pos]}")
                br = None if byte_ranges is None else byte_ranges[pos]
                if br is not None:
                    data = slice_range(data, br)
            results[pos] = data
        return results

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
        async with contextlib.AsyncExitStack() as stack:
            # lock shards in name order: overlapping batches cannot deadlock
            for stem, _, _ in jobs:
                lock = self._shard_locks.get(stem)
                if lock is None:
                    lock = self._shard_locks[stem] = asyncio.Lock()
                await stack.enter_async_context(lock)
            try:
                if len(jobs) == 1:
                    await self._rewrite(*jobs[0])
                else:
                    await asyncio.gather(*(self._rewrite(*job) for job in jobs))
            finally:
                for stem, _, _ in jobs:  # these shards changed (or may have): re-read next time
                    self._forget(stem)

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
        if data is None:
            if old is not None:
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

