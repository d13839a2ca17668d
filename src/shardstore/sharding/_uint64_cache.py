"""The index cache of ``neuroglancer_uint64_sharded_v1`` shards, shared by both read paths.

``ShardCache`` holds what is known of each shard (the generation it was read at, its shard
index, decoded minishard indexes; LRU bounded by shards and by minishard entries) and turns
bytes read from the base store into those. It does no I/O: the adapter's async reads
(``uint64.py``) and ``_uint64_read.SyncReads`` fetch what it asks for, so both paths
validate, decode and report corrupt shards identically. A lock makes it safe to share
between threads.
"""

from __future__ import annotations

import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Generator, Hashable, Iterable, Sequence

from ..errors import CodecError
from ..store.base import MISSING, RangeBR
from ._uint64_format import MinishardIndex, ShardingSpec, check_index_entry, decode_minishard_indexes

__all__ = ["IndexRead", "ShardCache", "ShardReplaced", "ShardState", "shard_generation"]

_PAIR = struct.Struct("<QQ")


class ShardReplaced(Exception):
    """Raised inside a read when a shard was replaced since its index was read."""

    def __init__(self, stems: list[str]) -> None:
        super().__init__(stems)
        self.stems = stems


#: a read the index loading asks for: (key, byte ranges of it)
IndexRead = tuple[str, list[RangeBR]]


class ShardState:
    """What is known of one shard: where it lives, its index, decoded minishard indexes."""

    __slots__ = ("gen", "index", "kind", "minis", "n_entries", "read_gen")

    def __init__(self, gen: Hashable | None, kind: str) -> None:
        self.gen = gen  # (generation of .shard, generation of .index) when read
        # the base's generation of the .shard file its index bytes were read at (an ETag on
        # S3): minishard indexes and values are read at it (``Store.get_ranges_at``)
        self.read_gen: Hashable | None = None
        self.kind = kind  # "missing" | "shard" | "pair" (legacy .index + .data) | "unknown"
        # the whole shard index (bytes) or the entries read so far ({minishard: (start, end)})
        self.index: bytes | dict[int, tuple[int, int]] | None = None
        self.minis: dict[int, MinishardIndex] = {}
        self.n_entries = 0


def shard_generation(shard_gen: Hashable | None, index_gen: Callable[[], Hashable | None]) -> Hashable | None:
    """The token a shard's cache entry is validated with: ``(gen of .shard, gen of .index)``
    (the legacy ``.index`` is asked only when ``.shard`` is missing), None if unknown."""
    if shard_gen is MISSING:
        return (MISSING, index_gen())
    return None if shard_gen is None else (shard_gen, None)


class ShardCache:
    """Shard states by shard stem, LRU, bounded by shards and by decoded minishard entries."""

    def __init__(self, spec: ShardingSpec, cache_entries: int, cache_shards: int, *, whole_index_max: int = 64 * 1024) -> None:
        self.spec = spec
        #: shard indexes up to this size are read whole (one request serves every minishard)
        self.whole_index_max = whole_index_max
        self._states: OrderedDict[str, ShardState] = OrderedDict()
        self._entries = cache_entries
        self._shards = cache_shards
        self._cached = 0
        # cache bookkeeping only (never held across I/O): event loops of several threads and
        # the worker threads of blocking reads share this cache
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._states.clear()
            self._cached = 0

    def peek(self, stem: str) -> ShardState | None:
        """The cached state of a shard, if any (no generation check)."""
        with self._lock:
            return self._states.get(stem)

    def forget(self, stem: str) -> None:
        with self._lock:
            self._pop(stem)

    def _pop(self, stem: str) -> None:
        st = self._states.pop(stem, None)
        if st is not None:
            self._cached -= st.n_entries

    def _trim(self) -> None:
        while len(self._states) > self._shards or (self._cached > self._entries and len(self._states) > 1):
            _, old = self._states.popitem(last=False)
            self._cached -= old.n_entries

    def state_for(self, stem: str, gen: Hashable | None) -> ShardState:
        """The cached state while the shard's generation is ``gen`` (or the base cannot tell:
        None), else a new one (kind from the generations) that replaces it."""
        with self._lock:
            st = self._states.get(stem)
            if st is not None and (gen is None or st.gen == gen):
                self._states.move_to_end(stem)
                return st
            if gen is None:
                kind = "unknown"  # the base cannot tell: found out when the index is read
            elif gen[0] is not MISSING:  # type: ignore[index]
                kind = "shard"
            elif gen[1] is not MISSING and gen[1] is not None:  # type: ignore[index]
                kind = "pair"
            else:
                kind = "missing"
            st = ShardState(gen, kind)
            self._pop(stem)
            self._states[stem] = st
            self._trim()
            return st

    def keys(self, stem: str, st: ShardState) -> tuple[str, str, int]:
        """(index key, data key, offset to add to absolute shard positions) of a shard."""
        if st.kind == "pair":
            return stem + ".index", stem + ".data", -self.spec.index_size
        return stem + ".shard", stem + ".shard", 0

    # -- the shard index --------------------------------------------------------------------
    def index_request(
        self, st: ShardState, minishards: set[int], whole: bool = False
    ) -> tuple[bool, list[int], list[RangeBR]] | None:
        """``(whole, minishards, ranges)`` to read for the index entries of ``minishards``
        (``whole``: all of it), or None when they are loaded already."""
        isz = self.spec.index_size
        whole = whole or isz <= self.whole_index_max or len(minishards) > 1 and st.kind == "unknown"
        index = st.index
        if isinstance(index, bytes) or (not whole and isinstance(index, dict) and minishards.issubset(index)):
            return None
        wanted = sorted(minishards)
        if whole:
            return True, wanted, [RangeBR(0, isz)]
        return False, wanted, [RangeBR(16 * m, 16 * m + 16) for m in wanted]

    def set_index(self, stem: str, st: ShardState, whole: bool, wanted: list[int], datas: Sequence[bytes | None]) -> None:
        """Store index bytes read per ``index_request`` (a first None: the shard is gone)."""
        if datas[0] is None:
            st.kind = "missing"  # (or deleted since its generation was read)
            return
        isz = self.spec.index_size
        name = self.keys(stem, st)[0]
        if whole:
            data = datas[0]
            if len(data) < isz:
                raise CodecError(
                    f"shard {name!r} is truncated: {len(data)} bytes, shorter than its {isz}-byte shard index"
                )
            st.index = bytes(data)
            return
        entries = dict(st.index) if isinstance(st.index, dict) else {}
        for m, pair in zip(wanted, datas):
            if pair is None or len(pair) != 16:
                raise CodecError(
                    f"shard {name!r} is truncated: it ends inside its {isz}-byte shard index "
                    f"(entry of minishard {m})"
                )
            entries[m] = _PAIR.unpack(pair)
        st.index = entries

    def index_steps(
        self, stem: str, st: ShardState, minishards: set[int], whole: bool = False
    ) -> Generator[IndexRead, tuple[Sequence[bytes | None], Hashable | None], None]:
        """Loading the index entries of ``minishards`` (``whole``: all of it), described once
        for both read paths: yields ``(key, ranges)`` to read, and the runner sends back the
        bytes with the generation they were read at (None when its reads carry none: the
        blocking path checks generations around the whole read instead). Probes the legacy
        ``.index`` layout when the base cannot tell which exists; raises ``ShardReplaced``
        when parts of the index come from two versions of the shard."""
        req = self.index_request(st, minishards, whole)
        if req is None:
            return
        whole, wanted, ranges = req
        if st.kind == "unknown":  # no generations: probe the layouts
            st.kind = "shard"
            datas, gen = yield stem + ".shard", ranges
            if datas[0] is None:
                st.kind = "pair"
                datas, gen = yield stem + ".index", ranges
        else:
            datas, gen = yield self.keys(stem, st)[0], ranges
        if st.kind == "shard" and datas[0] is not None and gen is not None:
            if st.read_gen is not None and gen != st.read_gen:
                raise ShardReplaced([stem])  # parts of the index from two versions
            st.read_gen = gen
        self.set_index(stem, st, whole, wanted, datas)

    def entry(self, stem: str, st: ShardState, m: int) -> tuple[int, int]:
        """The checked ``(start, end)`` index entry of minishard ``m`` (the index is loaded)."""
        if isinstance(st.index, bytes):
            start, end = _PAIR.unpack_from(st.index, 16 * m)
        else:
            start, end = st.index[m]  # type: ignore[index]
        if start != end:
            check_index_entry(start, end, self.spec, self.keys(stem, st)[0], m)
        return start, end

    # -- minishard indexes ------------------------------------------------------------------
    def minis_request(
        self, stem: str, st: ShardState, wanted: set[int]
    ) -> tuple[dict[int, MinishardIndex], list[tuple[int, int, int]]]:
        """(the decoded minishard indexes of ``wanted`` at hand, ``(m, start, end)`` ranges of
        the data key still to read); empty minishards are in neither."""
        _, _, delta = self.keys(stem, st)
        isz = self.spec.index_size
        found: dict[int, MinishardIndex] = {}
        fetch: list[tuple[int, int, int]] = []
        minis = st.minis
        for m in sorted(wanted):
            mi = minis.get(m)
            if mi is not None:
                found[m] = mi
                continue
            start, end = self.entry(stem, st, m)
            if start != end:
                fetch.append((m, isz + start + delta, isz + end + delta))
        return found, fetch

    def minis_loaded(
        self, stem: str, st: ShardState, fetch: list[tuple[int, int, int]], datas: Sequence[bytes | None],
        found: dict[int, MinishardIndex],
    ) -> None:
        """Decode minishard indexes read per ``minis_request`` into ``found`` and the cache."""
        data_key = self.keys(stem, st)[1]
        for (m, s, e), data in zip(fetch, datas):
            if data is None or len(data) != e - s:
                got = "nothing" if data is None else f"{len(data)} bytes"
                raise CodecError(
                    f"shard {data_key!r}: minishard index range of minishard {m} [{s}, {e}) is out of "
                    f"bounds of the shard file (read gave {got})"
                )
        ms = [m for m, _, _ in fetch]
        decoded = decode_minishard_indexes(datas, self.spec, data_key, ms)  # type: ignore[arg-type]
        found.update(zip(ms, decoded))
        with self._lock:
            self._add_minis(stem, st, zip(ms, decoded))

    def _add_minis(self, stem: str, st: ShardState, minis: Iterable[tuple[int, MinishardIndex]]) -> None:
        added = 0
        for m, mi in minis:
            n = len(mi.keys)
            if n > self._entries or m in st.minis:
                continue  # larger than the whole cache (use it once, keep nothing), or a racing read
            st.minis[m] = mi
            added += n
        st.n_entries += added
        if added and self._states.get(stem) is st:
            self._cached += added
            self._trim()
            if self._cached > self._entries:  # this shard alone is over budget
                self._cached -= st.n_entries
                st.minis = {}
                st.n_entries = 0
