"""The decoded-chunk cache: an LRU of decoded chunks under a byte budget, per array.

Random boxes that overlap (a viewer panning, a training sampler) decode the same chunks
again and again; TensorStore users set a ``cache_pool`` for this. Here one ``ChunkCache``
belongs to one array handle (``ChunkLayout.chunk_cache``) and is shared by every thread
reading through it.

Never stale: an entry is the chunk as decoded at one *generation* of its write unit (the
token ``Store.generation`` gives for the chunk key: a shard's or the chunk file's ``stat``,
the memory store's write counter). A read asks the unit's generation once per unit *before*
fetching anything and uses an entry only at that same generation, so another handle's or
process's write is seen by the next read. Data fetched after that question is stored under
it: if a writer slipped in between, the entry holds newer data under an older token, which
no later read matches (generations never repeat). Stores that cannot give a generation
cheaply are asked with ``Store.checked_generation``: HTTP and S3 answer with a HEAD per unit
and read call (the async runner asks its units concurrently; a blocking read copies the held
chunks out while its HEADs are in flight and fetches again those of units found changed,
``io._asked_meanwhile``), so a hit costs one small request instead of a ranged GET and a
decode; stores that cannot tell at all are not cached.
Stores with tagged reads (``Store.tagged_reads``: HTTP, S3, and Zarr and precomputed shards
over them) are asked only about units all of whose chunks a read wants the cache holds: the
others' chunks are fetched at once and kept under the generation their own replies carry (a
GET's ETag, or the one a shard's index came with, to which its chunk reads are pinned by
``If-Match``), and that generation checks the held chunks of their unit (``held_at_tag``): a
read that is not all hits costs no HEAD before its GETs.

Reads of more chunk bytes than the budget holds (a whole-volume read of a large volume)
bypass the cache entirely: they would only evict themselves, along with what smaller reads
keep, and pay for lookups. A whole read that fits is cached like any other (as tensorstore's
``cache_pool`` does), so reading a small volume again costs copies, not decodes.

Default budget 0 (off, as tensorstore's ``cache_pool``): it holds memory per handle (a Dask
job opens many), and chunks it keeps are decoded whole where a partial-decode codec (blosc)
would decode only what a small read wants. Its lookups are cheap (one ``stat`` per unit and
read call: about 2 % on 256 unaligned 100^3 reads of a sharded zstd array when every lookup
misses, against 4x-17x more reads/s when boxes overlap), so the budget is the user's choice:
``Array.chunk_cache_bytes`` (``IOConfig.chunk_cache_bytes``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Literal

import numpy as np

from .._aio import gather
from ..store.base import MISSING

if TYPE_CHECKING:
    from .indexing import ChunkProjection
    from .layout import ChunkLayout

__all__ = [
    "ChunkCache", "Generations", "Hit", "asked_generations", "buffers_to_keep", "bypassed", "held_at_tag", "keep_filled", "owned",
    "take_cached", "unit_generations", "unit_generations_async", "units_to_ask",
]

#: chunk key -> the generation of its unit the read asked before fetching (cacheable misses)
Generations = dict[str, Hashable]


class ChunkCache:
    """A thread-safe LRU of read-only decoded chunks keyed by (chunk key, unit generation),
    holding at most ``max_bytes`` of memory (0: holds nothing).

    Entries may be views of one larger block (a decoded chunk transposed, or several put
    from one allocation); a block counts in full for as long as any entry views it, so the
    budget bounds the memory really held."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"chunk cache budget must be >= 0 bytes, got {max_bytes}")
        self.max_bytes = int(max_bytes)
        self._entries: OrderedDict[str, tuple[Hashable, np.ndarray, int]] = OrderedDict()
        self._blocks: dict[int, list[int]] = {}  # id of an entry's memory -> [its bytes, entries on it]
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        """Bytes of memory held now."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str, generation: Hashable) -> np.ndarray | None:
        """The chunk decoded at ``generation``, or None; an entry of another generation is
        dropped (its unit was rewritten)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry[0] != generation:
                self._drop(key)
                return None
            self._entries.move_to_end(key)
            return entry[1]

    def get_many(self, keys: Sequence[str], generations: Sequence[Hashable]) -> list[np.ndarray | None]:
        """``get`` for each key at its generation, under one hold of the lock (a read's hits)."""
        entries = self._entries
        found: list[np.ndarray | None] = []
        with self._lock:
            for key, generation in zip(keys, generations):
                entry = entries.get(key)
                if entry is not None and entry[0] != generation:
                    self._drop(key)
                    entry = None
                if entry is not None:
                    entries.move_to_end(key)
                    found.append(entry[1])
                else:
                    found.append(None)
        return found

    def peek_many(self, keys: Sequence[str]) -> list[np.ndarray | None]:
        """Each key's chunk as held now, at whatever generation (not checked, the LRU order
        left as it is): what a read may copy out before its units' generations are known."""
        entries = self._entries
        with self._lock:
            return [None if (entry := entries.get(key)) is None else entry[1] for key in keys]

    def holds(self, key: str) -> bool:
        """Whether an entry for ``key`` is kept, at whatever generation."""
        return key in self._entries

    def put(self, key: str, generation: Hashable, chunk: np.ndarray) -> None:
        """Keep ``chunk`` (made read-only, not copied: the caller hands it over) as ``key`` at
        ``generation``, evicting the least recently used entries to stay within budget."""
        block = _memory_of(chunk)
        if block.nbytes > self.max_bytes:
            return
        chunk.flags.writeable = False
        bid = id(block)  # (stable: the entry keeps the block alive)
        with self._lock:
            if key in self._entries:
                self._drop(key)
            while self._entries and self._bytes + self._cost(bid, block) > self.max_bytes:
                self._drop(next(iter(self._entries)))
            self._bytes += self._cost(bid, block)
            self._blocks.setdefault(bid, [block.nbytes, 0])[1] += 1
            self._entries[key] = (generation, chunk, bid)

    def discard(self, keys: Iterable[str]) -> None:
        """Forget ``keys`` (chunks this handle just wrote: their entries can never match)."""
        with self._lock:
            for key in keys:
                if key in self._entries:
                    self._drop(key)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._blocks.clear()
            self._bytes = 0

    def _cost(self, bid: int, block: np.ndarray) -> int:
        return 0 if bid in self._blocks else block.nbytes

    def _drop(self, key: str) -> None:
        bid = self._entries.pop(key)[2]
        counted = self._blocks[bid]
        counted[1] -= 1
        if not counted[1]:
            del self._blocks[bid]
            self._bytes -= counted[0]


def _memory_of(chunk: np.ndarray) -> np.ndarray:
    """The array owning the memory ``chunk`` views (``chunk`` itself when it owns it)."""
    root = chunk
    while isinstance(root.base, np.ndarray):
        root = root.base
    return root


def owned(chunk: np.ndarray) -> np.ndarray:
    """``chunk`` itself when it holds its own memory (or views all of an array that does, or
    all of a ``bytes`` object: immutable, read for it), else a copy: an entry must not keep
    alive a larger buffer (a whole shard's bytes) or one that is reused."""
    root = _memory_of(chunk)
    base: object = root.base  # (typed as an array; a view of a bytes object has that as its base)
    if root.nbytes == chunk.nbytes and (base is None or (isinstance(base, bytes) and len(base) == root.nbytes)):
        return chunk
    return chunk.copy(order="K")  # (its memory order: hits are copied out in that order, not transposed)


def bypassed(layout: ChunkLayout, projections: Sequence[ChunkProjection]) -> bool:
    """Whether a read skips the cache: no cache, or more chunk bytes than the budget holds
    (it would only evict itself)."""
    cache = layout.chunk_cache
    if cache is None or not projections:
        return True
    return len(projections) * layout.chunk_spec.nbytes > cache.max_bytes


#: a chunk the cache holds, with the projection that takes a part of it
Hit = tuple["ChunkProjection", np.ndarray]


def take_cached(
    layout: ChunkLayout,
    projections: Sequence[ChunkProjection],
    keys: Sequence[str],
    generations: Sequence[Hashable | None],
) -> tuple[list[ChunkProjection], Generations, list[Hit]]:
    """Look the chunks up in the cache at their unit's current generation.

    ``keys``: per projection, its chunk key; ``generations``: per projection, its unit's
    generation asked now (None or ``MISSING``: not cached). Returns the projections still to
    fetch; for the cacheable ones among them, the generation to store their decoded chunk
    under; and the hits, for ``place_hits``.
    """
    cache = layout.chunk_cache
    if cache is None:
        return list(projections), {}, []
    rest: list[ChunkProjection] = []
    gens: Generations = {}
    hits: list[Hit] = []
    # MISSING: a unit not there has no chunks to keep, and one found anyway lives elsewhere
    # (legacy uint64 ``.index``/``.data`` pairs) under no token of its own
    asked = [i for i, gen in enumerate(generations) if gen is not None and gen != MISSING]
    chunks = cache.get_many([keys[i] for i in asked], [generations[i] for i in asked])
    found: list[np.ndarray | None] = [None] * len(projections)
    for i, chunk in zip(asked, chunks):
        found[i] = chunk
        if chunk is None:
            gens[keys[i]] = generations[i]
    for p, chunk in zip(projections, found):
        if chunk is None:
            rest.append(p)
        else:
            hits.append((p, chunk))
    return rest, gens, hits


def buffers_to_keep(
    layout: ChunkLayout, keys: Sequence[str], gens: Generations | None, dtype: np.dtype, fortran: bool
) -> list[np.ndarray | None]:
    """For each chunk of a native read (``_rawio.read_boxes`` / ``read_spans``) that it keeps
    (a generation in ``gens``), a new buffer of the whole chunk for the kernel to decode it
    into (``keep``), copying its box from there; None for the others. Decoding straight into
    the entry saves the copy from the kernel's scratch, and lets a partly read chunk go
    native too. One allocation per chunk: a block for many gets huge pages from NumPy, and
    faulting those in can stall on the kernel's compaction."""
    cache = layout.chunk_cache
    if cache is None or not gens:
        return [None] * len(keys)
    shape = tuple(layout.grid.chunk_shape)
    order: Literal["C", "F"] = "F" if fortran else "C"  # (precomputed's chunks: Fortran, as its decoded ones)
    return [np.empty(shape, dtype=dtype, order=order) if gens.get(key) is not None else None for key in keys]


def keep_filled(
    layout: ChunkLayout, keys: Sequence[str], buffers: Sequence[np.ndarray | None], done: Iterable[bool],
    gens: Generations | None,
) -> None:
    """Keep the buffers ``buffers_to_keep`` gave that the kernel filled (``done``) in the
    cache, at the generation asked before the fetch."""
    cache = layout.chunk_cache
    if cache is None or not gens:
        return
    for key, chunk, ok in zip(keys, buffers, done):
        if ok and chunk is not None and (gen := gens.get(key)) is not None:
            cache.put(key, gen, chunk)


def units_to_ask(
    layout: ChunkLayout, projections: Sequence[ChunkProjection], keys: Sequence[str], held_only: bool
) -> tuple[Sequence[Hashable], dict[Hashable, str]]:
    """Per projection its write unit; per unit to ask, the key to ask it with (its first
    chunk's, ``keys`` giving each projection's). ``held_only`` (a store with tagged reads):
    only units all of whose chunks asked for the cache holds. The others have chunks to
    fetch: the tag their reply carries tells the unit's generation, and checks the held ones
    too (``held_at_tag``)."""
    # (a chunk that is its own unit is named by its key: no unit coordinates per chunk)
    units: Sequence[Hashable] = keys if layout.one_chunk_units else [layout.write_unit(p.coords) for p in projections]
    first: dict[Hashable, str] = {}
    cache = layout.chunk_cache
    if held_only and cache is not None:
        unheld = {unit for unit, key in zip(units, keys) if not cache.holds(key)}
    else:
        unheld = set()
    for unit, key in zip(units, keys):
        if unit not in first and unit not in unheld:
            first[unit] = key
    return units, first


def held_at_tag(
    cache: ChunkCache, keys: Sequence[str], tag: Hashable | None
) -> tuple[list[tuple[int, np.ndarray]], list[int]]:
    """Of the chunks ``keys`` of one unit, those the cache holds at ``tag`` (the generation
    that the reply of another of its chunks carried: the unit as it was then), with their
    positions, and the positions of the others, to fetch."""
    held: list[tuple[int, np.ndarray]] = []
    rest: list[int] = []
    for i, key in enumerate(keys):
        chunk = None if tag is None or tag == MISSING else cache.get(key, tag)
        if chunk is None:
            rest.append(i)
        else:
            held.append((i, chunk))
    return held, rest


def unit_generations(
    layout: ChunkLayout,
    projections: Sequence[ChunkProjection],
    keys: Sequence[str],
    generation: Callable[[str], Hashable | None],
) -> list[Hashable | None]:
    """Per projection (whose chunk key ``keys`` gives), ``generation(chunk key)`` asked once
    per write unit, on this thread (a store's cheap blocking generations: a ``stat``)."""
    units, first = units_to_ask(layout, projections, keys, False)
    return asked_generations(units, first, generation)


def asked_generations(
    units: Sequence[Hashable], first: dict[Hashable, str], generation: Callable[[str], Hashable | None],
    threads: Executor | None = None,
) -> list[Hashable | None]:
    """Per unit of ``units`` (each projection's), the generation ``units_to_ask`` said to ask
    it with (None for units not asked); with ``threads``, the units of a read that has
    several are asked side by side there (blocking requests: HEADs)."""
    ask = first.values()
    asked = threads.map(generation, ask) if threads is not None and len(ask) > 1 else map(generation, ask)
    answers = dict(zip(first, asked))
    return [answers.get(unit) for unit in units]


async def unit_generations_async(
    layout: ChunkLayout,
    projections: Sequence[ChunkProjection],
    keys: Sequence[str],
    generation: Callable[[str], Awaitable[Hashable | None]],
    held_only: bool = False,
) -> list[Hashable | None]:
    """``unit_generations`` for the async runner (the units asked concurrently)."""
    units, first = units_to_ask(layout, projections, keys, held_only)
    answers = dict(zip(first, await gather(generation(k) for k in first.values())))
    return [answers.get(unit) for unit in units]
