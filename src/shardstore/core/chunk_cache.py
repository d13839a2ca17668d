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
and read call (the async runner asks its units concurrently), so a hit costs one small
request instead of a ranged GET and a decode; stores that cannot tell at all are not cached.

Reads bigger than the budget (a whole-volume read, or more chunks than fit) bypass the
cache entirely, so they neither evict what smaller reads keep nor pay for lookups.

Default budget 0 (off, as tensorstore's ``cache_pool``): it holds memory per handle (a Dask
job opens many), and chunks it keeps are decoded whole where a partial-decode codec (blosc)
would decode only what a small read wants. Its lookups are cheap (one ``stat`` per unit and
read call: about 2 % on 256 unaligned 100^3 reads of a sharded zstd array when every lookup
misses, against 4x-17x more reads/s when boxes overlap), so the budget is the user's choice:
``Array.chunk_cache_bytes`` (``IOConfig.chunk_cache_bytes``).
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from .._assign import assign
from ..store.base import MISSING

if TYPE_CHECKING:
    from .indexing import ChunkProjection
    from .layout import ChunkLayout

__all__ = ["ChunkCache", "Generations", "bypassed", "owned", "take_cached", "unit_generations", "unit_generations_async"]

#: chunk key -> the generation of its unit the read asked before fetching (cacheable misses)
Generations = dict[str, Hashable]


class ChunkCache:
    """A thread-safe LRU of read-only decoded chunks keyed by (chunk key, unit generation),
    holding at most ``max_bytes`` of array data (0: holds nothing)."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"chunk cache budget must be >= 0 bytes, got {max_bytes}")
        self.max_bytes = int(max_bytes)
        self._entries: OrderedDict[str, tuple[Hashable, np.ndarray]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        """Bytes of array data held now."""
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

    def put(self, key: str, generation: Hashable, chunk: np.ndarray) -> None:
        """Keep ``chunk`` (made read-only, not copied: the caller hands it over) as ``key`` at
        ``generation``, evicting the least recently used entries to stay within budget."""
        size = chunk.nbytes
        if size > self.max_bytes:
            return
        chunk.flags.writeable = False
        with self._lock:
            if key in self._entries:
                self._drop(key)
            while self._entries and self._bytes + size > self.max_bytes:
                self._drop(next(iter(self._entries)))
            self._entries[key] = (generation, chunk)
            self._bytes += size

    def discard(self, keys: Iterable[str]) -> None:
        """Forget ``keys`` (chunks this handle just wrote: their entries can never match)."""
        with self._lock:
            for key in keys:
                if key in self._entries:
                    self._drop(key)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def _drop(self, key: str) -> None:
        self._bytes -= self._entries.pop(key)[1].nbytes


def owned(chunk: np.ndarray) -> np.ndarray:
    """``chunk`` itself when it holds its own memory (or views all of an array that does),
    else a copy: an entry must not keep alive a larger buffer (a whole shard's bytes)."""
    root = chunk
    while isinstance(root.base, np.ndarray):
        root = root.base
    if root.base is None and root.nbytes == chunk.nbytes:
        return chunk
    return chunk.copy()


def bypassed(layout: ChunkLayout, projections: Sequence[ChunkProjection]) -> bool:
    """Whether a read skips the cache: no cache, a read of every chunk, or more chunk bytes
    than the budget holds (it would only evict itself)."""
    cache = layout.chunk_cache
    if cache is None or not projections:
        return True
    n = len(projections)
    return n >= layout.grid.nchunks or n * layout.chunk_spec.nbytes > cache.max_bytes


def take_cached(
    layout: ChunkLayout,
    projections: Sequence[ChunkProjection],
    out: np.ndarray,
    generations: Sequence[Hashable | None],
) -> tuple[list[ChunkProjection], Generations]:
    """Place the chunks the cache holds at their unit's current generation into ``out``.

    ``generations``: per projection, its unit's generation asked now (None or ``MISSING``:
    not cached). Returns the projections still to fetch and, for the cacheable ones among them,
    the generation to store their decoded chunk under.
    """
    cache = layout.chunk_cache
    if cache is None:
        return list(projections), {}
    rest: list[ChunkProjection] = []
    gens: Generations = {}
    for p, gen in zip(projections, generations):
        if gen is None or gen == MISSING:
            # MISSING: a unit not there has no chunks to keep, and one found anyway lives
            # elsewhere (legacy uint64 ``.index``/``.data`` pairs) under no token of its own
            rest.append(p)
            continue
        key = layout.chunk_key(p.coords)
        chunk = cache.get(key, gen)
        if chunk is None:
            rest.append(p)
            gens[key] = gen
        else:
            assign(out, p.out_selection, chunk[p.chunk_selection])
    return rest, gens


def unit_generations(
    layout: ChunkLayout, projections: Sequence[ChunkProjection], generation: Callable[[str], Hashable | None]
) -> list[Hashable | None]:
    """Per projection, ``generation(chunk key)`` asked once per write unit."""
    seen: dict[tuple[int, ...], Hashable | None] = {}
    result = []
    for p in projections:
        unit = layout.write_unit(p.coords)
        if unit not in seen:
            seen[unit] = generation(layout.chunk_key(p.coords))
        result.append(seen[unit])
    return result


async def unit_generations_async(
    layout: ChunkLayout,
    projections: Sequence[ChunkProjection],
    generation: Callable[[str], Awaitable[Hashable | None]],
) -> list[Hashable | None]:
    """``unit_generations`` for the async runner (the units asked concurrently)."""
    first: dict[tuple[int, ...], str] = {}
    for p in projections:
        first.setdefault(layout.write_unit(p.coords), layout.chunk_key(p.coords))
    answers = dict(zip(first, await asyncio.gather(*(generation(k) for k in first.values()))))
    return [answers[layout.write_unit(p.coords)] for p in projections]
