"""Layer 1.5: a Store of inner chunks over a Store of ``sharding_indexed`` shards.

Keys of this store name inner chunks by their coordinates in the array's inner-chunk grid
(``"3.0.12"``, see ``inner_key``). The adapter maps each to its shard key and index entry:

- reads fetch the shard index once (suffix or prefix range; cached in an LRU), then the byte
  ranges of the wanted inner chunks, which the base store coalesces; a request for every inner
  chunk of a shard fetches the shard whole in one request;
- reads take the index and the data from one version of the shard: the data ranges are read
  with ``get_ranges_at`` the generation the index was read at (``If-Match`` on S3), and a
  shard replaced in between is read again, index first; the blocking runner reads both from
  the shard held open once (``Store.sync_opens``: one open file, see ``_zarr3_open``), its
  threads each reading the inner chunks they decode;
- ``update_many`` / ``set_many`` write each touched shard once per batch: a batch of plain
  values for every inner chunk of the shard that lies inside the array writes without
  reading; otherwise the shard becomes one ``Update`` of the base store, whose single
  read-modify-write (one read of the shard, one conditional write, under the base's lock,
  retried on conflict) merges every inner chunk of the batch, including the core's partial
  chunks, given as ``Update`` functions of the inner chunk's bytes. A shard left with no inner
  chunks is deleted. The new shard replaces the old one atomically, so a failure leaves the
  old shard readable. Whole-shard writes are one plain write (last writer wins); a large one
  is streamed (``stream_unit_sync`` / ``stream_unit``): the core hands the inner chunks over
  as they are encoded and a ``ShardBuilder`` lays them out, the index written last.
- over a base with synchronous writes (files, memory, another adapter over them) the same
  shard writes run from any thread (``update_many_sync``, through the base's
  ``update_many_sync``): the core's blocking runner writes shards without the event loop.

Nested sharding is this adapter over another one: the base keys are then inner-chunk keys of
the outer adapter, and byte ranges requested from it are relative to that inner chunk.

Its parts: the index cache ``_zarr3_index``, the blocking reads ``_zarr3_open`` (shards held
open) and ``_zarr3_checked`` (generations compared), the write assembly ``_zarr3_write``.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections.abc import AsyncIterable, AsyncIterator, Callable, Hashable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from .._aio import gather
from ..codecs.sharding_indexed import EMPTY, ShardBuilder
from ..config import IOConfig
from ..errors import CodecError, ConflictError, ShardStoreError, UnsupportedFeatureError
from ..store.base import (
    ByteRange,
    Parts,
    RangeBR,
    Store,
    Update,
    validate_key,
)
from ..store.byte_range import range_within
from ..store.open_values import HeldFiles, PrefetchedReads
from ..store.read_modify_write import inherited_retry_conflicts
from ..store.unit_checks import UnitChecks
from ._batched import BatchedWrites
from ._unit_streams import stream_shard, stream_shard_sync
from ._zarr3_checked import CheckedReads
from ._zarr3_index import ShardIndexes, checked_chunk
from ._zarr3_layout import ShardLayout, inner_key, parse_inner_key
from ._zarr3_open import OpenShards
from ._zarr3_write import covers_shard, shard_writes

if TYPE_CHECKING:
    from ..store.streamed import Buffer, SupportsUnitStreams
    from ..store.sync_protocols import (
        OpenValue,
        SpanReader,
        SupportsFileSpans,
        SupportsGetManySync,
        SupportsGetManyTagged,
        SupportsGetSync,
        SupportsSetSync,
        UnitReads,
    )

__all__ = ["ShardLayout", "ZarrShardingStore", "inner_key", "parse_inner_key"]


_EMPTY = int(EMPTY)


class ZarrShardingStore(UnitChecks, BatchedWrites):
    """Inner chunks of ``sharding_indexed`` shards, as a Store."""

    def __init__(
        self, base: Store, layout: ShardLayout, *, index_cache_size: int = 4096, config: IOConfig | None = None
    ) -> None:
        super().__init__(read_only=base.read_only)
        self.base = base
        self.layout = layout
        #: a read whose shard keeps being replaced between its index and its data is retried
        #: this often (``IOConfig.read_attempts``)
        self.read_attempts = (config or IOConfig()).read_attempts
        self._rank = len(layout.inner_grid_shape)
        # decoded shard indexes, each used while its shard's generation is unchanged (named
        # in messages as _shard_name names them: through the base, not this adapter, so
        # that the cache holds no reference back to it)
        self._indexes = ShardIndexes(base, layout, index_cache_size, functools.partial(_shard_name_over, base))
        self._base_reads = base.sync_reads
        self._base_opens = base.sync_opens
        self._base_writes = base.sync_writes
        # with the index at the end, a ranged read cannot see an entry that runs into the
        # index (the shard size is unknown): reading the index's length past a whole chunk
        # proves that the bytes after it exist, i.e. that it ends before the index
        self._end_guard = layout.index_size if layout.codec.index_location == "end" else 0

    @property
    def runs_on_any_loop(self) -> bool:  # type: ignore[override]
        return self.base.runs_on_any_loop

    @property
    def reads_inline(self) -> bool:  # type: ignore[override]
        return self.base.reads_inline

    def __repr__(self) -> str:
        return f"ZarrShardingStore({self.base!r}, chunks_per_shard={list(self.layout.chunks_per_shard)})"

    def _shard_name(self, shard_key: str) -> str:
        """How messages name a shard: nested, an inner shard is named with the outer shard's
        key (the file or object to look at) before its own."""
        return _shard_name_over(self.base, shard_key)

    @property
    def retry_conflicts(self) -> int:  # type: ignore[override]
        """How often a shard read-modify-write that lost a race is redone: the setting of the
        base store chain (which does the read-modify-write), e.g. ``S3Store(retry_conflicts=3)``."""
        return inherited_retry_conflicts(self.base)

    async def generation(self, key: str) -> Hashable | None:
        shard, _ = self.layout.locate(parse_inner_key(validate_key(key), self._rank))
        return await self.base.generation(self.layout.shard_key(shard))

    async def checked_generation(self, key: str) -> Hashable | None:
        shard, _ = self.layout.locate(parse_inner_key(validate_key(key), self._rank))
        return await self.base.checked_generation(self.layout.shard_key(shard))

    def unit_generation(self, key: str, ask: Callable[[str], Hashable | None]) -> Hashable | None:
        shard, _ = self.layout.locate(parse_inner_key(key, self._rank))
        return ask(self.layout.shard_key(shard))

    def invalidate(self) -> None:
        """Forget cached indexes (e.g. after another process changed the shards)."""
        self._indexes.clear()

    # -- reads ------------------------------------------------------------------------------
    async def _get(self, key: str, byte_range: ByteRange | None) -> bytes | None:
        return (await self.get_many([(key, byte_range)]))[0]

    async def get_many(self, requests: Sequence[tuple[str, ByteRange | None]]) -> list[bytes | None]:
        return (await self._get_many(requests))[0]

    @property
    def tagged_reads(self) -> SupportsGetManyTagged | None:
        # (the generation of a shard is the base's tag of the reply its index came in: only
        # a base whose versioned reads take it from the reply can give it; not a nested
        # adapter, whose shard's generation would be asked apart)
        return self if self.base.versions_in_replies else None

    async def get_many_tagged(self, keys: Sequence[str]) -> tuple[list[bytes | None], list[Hashable | None]]:
        """Inner chunks, each with the generation of its shard that its index was read at:
        the chunk reads are pinned to it (``get_ranges_at``)."""
        return await self._get_many([(key, None) for key in keys])

    async def _get_many(
        self, requests: Sequence[tuple[str, ByteRange | None]]
    ) -> tuple[list[bytes | None], list[Hashable | None]]:
        """(``get_many``'s values, per request the generation of its shard they were read at)."""
        by_shard: dict[tuple[int, ...], list[tuple[int, int, ByteRange | None]]] = {}
        for pos, (key, br) in enumerate(requests):
            shard, i = self.layout.locate(parse_inner_key(key, self._rank))
            by_shard.setdefault(shard, []).append((pos, i, br))
        results: list[bytes | None] = [None] * len(requests)
        shard_gens = await gather(self._read_shard(s, reqs, results) for s, reqs in by_shard.items())
        gens: list[Hashable | None] = [None] * len(requests)
        for reqs, gen in zip(by_shard.values(), shard_gens):
            for pos, _, _ in reqs:
                gens[pos] = gen
        return results, gens

    async def _read_shard(
        self,
        shard: tuple[int, ...],
        reqs: list[tuple[int, int, ByteRange | None]],
        results: list[bytes | None],
    ) -> Hashable | None:
        """Fill ``results`` with the shard's chunks; the shard's generation they were read at."""
        shard_key = self.layout.shard_key(shard)
        wanted = {i for _, i, _ in reqs}
        if shard_key not in self._indexes and wanted >= set(self.layout.valid_in_shard(shard)):
            # every inner chunk wanted and the index is cold: one request for the whole shard
            whole, index, gen = await self._indexes.read_whole(shard_key)
            if whole is None or index is None:
                return gen
            for pos, i, br in reqs:
                off, n = index[i]
                if off == _EMPTY and n == _EMPTY:
                    continue
                r = range_within(off, n, br)
                results[pos] = whole[r.start : r.end]
            return gen
        for _ in range(self.read_attempts):
            index, gen = await self._indexes.at(shard_key)
            if index is None:
                return gen
            fetch: list[tuple[int, int, RangeBR]] = []
            for pos, i, br in reqs:
                off, n = index[i]
                if off == _EMPTY and n == _EMPTY:
                    continue
                fetch.append((pos, i, range_within(off, n, br)))
            if not fetch:
                return gen
            # the data of the version the index was read at (never another one's bytes)
            datas = await self.base.get_ranges_at(shard_key, [r for _, _, r in fetch], gen)
            if datas is None:  # replaced meanwhile: read its new index, then the data again
                self._indexes.forget(shard_key)
                continue
            for (pos, i, r), data in zip(fetch, datas):
                results[pos] = checked_chunk(data, r, self._shard_name(shard_key), i)
            return gen
        raise ConflictError(f"shard {shard_key!r} kept being replaced while it was read ({self.read_attempts} attempts)")

    async def exists(self, key: str) -> bool:
        return (await self.get(key, RangeBR(0, 0))) is not None

    # -- synchronous reads (declared when the base reads synchronously: files, memory, or
    # another adapter over them): the core then reads, decodes and scatters inner chunks in
    # its worker threads, with no event-loop round trips
    @property
    def sync_reads(self) -> SupportsGetSync | None:
        return None if self._base_reads is None else self

    def get_sync(self, key: str, byte_range: ByteRange | None = None) -> bytes | None:
        return self._get_now([(key, byte_range)])[0]

    def get_ranges_sync(self, key: str, ranges: Sequence[ByteRange | None]) -> list[bytes | None]:
        return self._get_now([(key, br) for br in ranges])

    @property
    def sync_unit_reads(self) -> SupportsGetManySync | None:
        return None if self._base_reads is None else self

    def get_many_sync(self, keys: Sequence[str]) -> list[bytes | None]:
        return self._get_now([(key, None) for key in keys])

    def open_units_sync(self, keys: Sequence[str]) -> UnitReads:
        opens = self._base_opens
        if opens is None:  # (a base that cannot hold a shard open: read the values now)
            return PrefetchedReads(dict(zip(keys, self.get_many_sync(keys))))
        shards = OpenShards(self, opens)
        try:
            for key in keys:
                shards.add(key)
        except BaseException:
            shards.close()
            raise
        return shards

    def _inner_coords(self, key: str) -> tuple[int, ...]:
        return parse_inner_key(key, self._rank)

    def _get_now(self, requests: Sequence[tuple[str, ByteRange | None]]) -> list[bytes | None]:
        """Inner chunks (or ranges of them) by shard. Over a base that holds values open
        (files, memory): each shard opened once, index and data read from that version.
        Otherwise as the async ``get_many`` reads them: a cold shard wanted whole in one read,
        else its index (cached while the shard's generation holds) and one multi-range read;
        redone when the shard was replaced meanwhile (the generation is compared before and
        after: a replaced file never returns to a generation)."""
        if self._base_opens is not None:
            units = self.open_units_sync([key for key, _ in requests])
            try:
                return [units.get_sync(key, br) for key, br in requests]
            finally:
                units.close()
        base = self._base_reads
        assert base is not None, "called only when sync_reads is declared"
        return CheckedReads(self, base).get(requests)

    # -- native reads of shard files (declared when the base is plain local files) -----------
    @property
    def file_spans(self) -> SupportsFileSpans | None:
        plain_files = self.base.file_paths is not None and self._base_opens is not None
        return self if self._base_reads is not None and plain_files else None

    #: the spans hold the inner codecs' bytes as they are (``SupportsFileSpans``)
    value_encoding: str | None = None

    def read_spans_sync(self, keys: Sequence[str], read: SpanReader, held: HeldFiles | None = None) -> list[bool]:
        """See ``SupportsFileSpans``: per shard, the file held open once (for the whole read
        with ``held``); its index (cached while the open file's generation holds) gives every
        wanted chunk's span, and ``read`` reads them from that same open file: one version
        of the shard, nothing to compare afterwards (as ``OpenShards``)."""
        layout, rank = self.layout, self._rank
        done = [False] * len(keys)
        by_shard: dict[tuple[int, ...], tuple[list[int], list[int]]] = {}
        for pos, key in enumerate(keys):
            shard, i = layout.locate(parse_inner_key(key, rank))
            wanted = by_shard.setdefault(shard, ([], []))
            wanted[0].append(pos)
            wanted[1].append(i)
        files = HeldFiles() if held is None else held
        try:
            for shard, (positions, inner) in by_shard.items():
                opened = self._held_shard(layout.shard_key(shard), files)
                if opened is None:
                    continue  # (missing or damaged: the generic path fills or raises, naming the shard)
                fd, index = opened
                which, offsets, lengths = [], [], []
                for pos, i in zip(positions, inner):
                    offset, nbytes = index[i]
                    # (absent chunks, 2**64 - 1 twice, are the generic path's to fill; spans past
                    # 2**63 its to refuse, naming the shard)
                    if (offset | nbytes) >> 63 == 0:
                        which.append(pos)
                        offsets.append(offset)
                        lengths.append(nbytes)
                if which:
                    # with the index at the end, chunk data must end before it (the generic
                    # path raises for an entry that runs into it, so it must not decode here)
                    for pos, ok in zip(which, read(fd, which, offsets, lengths, self._end_guard)):
                        done[pos] = ok
        finally:
            if held is None:
                files.close()
        return done

    def _held_shard(self, shard_key: str, held: HeldFiles) -> tuple[int, list[list[int]]] | None:
        """The shard file held open in ``held`` and its index: (descriptor, index), or None
        for a missing shard or a damaged index."""
        opens = self._base_opens
        assert opens is not None, "called only when file_spans is declared"

        def index_of(value: OpenValue) -> list[list[int]] | None:
            try:
                return self._indexes.open_index(shard_key, value) if value.fileno() >= 0 else None
            except CodecError:
                return None

        got = held.open(shard_key, lambda: opens.open_sync(shard_key), index_of)
        return None if got is None or got[1] is None else (got[0].fileno(), got[1])

    def generation_sync(self, key: str) -> Hashable | None:
        base = self._base_reads
        assert base is not None, "called only when sync_reads is declared"
        layout = self.layout
        return base.generation_sync(layout.shard_key(layout.locate(parse_inner_key(key, self._rank))[0]))

    # -- writes -----------------------------------------------------------------------------
    async def update_many(self, items: Sequence[tuple[str, bytes | Parts | Update | None]]) -> None:
        """Write inner chunks (values, None: delete, or ``Update`` functions of the inner
        chunk's stored bytes): each touched shard is written once, see the module docstring."""
        writes = self._shard_writes(items)
        with self._rewriting(writes):
            await self.base.update_many(writes)

    # -- synchronous writes (declared when the base writes synchronously: files, memory, or
    # another adapter over them): the core's blocking runner then writes shards from its own
    # thread, through the base's ``update_many_sync`` (the same locked read-modify-write)
    @property
    def sync_writes(self) -> SupportsSetSync | None:
        return None if self._base_writes is None or self.read_only else self

    def set_sync(self, key: str, value: bytes | Parts | None, atomic: bool = True) -> None:
        self.update_many_sync([(key, value)])  # (a shard is always replaced atomically)

    def update_many_sync(self, items: Sequence[tuple[str, bytes | Parts | Update | None]]) -> None:
        """``update_many`` on this thread: the same shard writes, run by the base's
        ``update_many_sync`` instead of its ``update_many``."""
        base = self._base_writes
        assert base is not None, "called only when sync_writes is declared"
        writes = self._shard_writes(items)
        with self._rewriting(writes):
            base.update_many_sync(writes)

    def _shard_writes(self, items: Sequence[tuple[str, bytes | Parts | Update | None]]) -> list[tuple[str, bytes | Parts | Update | None]]:
        """The base store's items of a write of inner chunks, one per touched shard: the new
        shard as a value when the batch replaces every inner chunk with plain values (no read
        needed), else the ``Update`` that merges the batch into the stored shard."""
        if items:
            self._check_writable(items[0][0], more=len(items) - 1)
        return shard_writes(self.layout, self._rank, self._indexes, items)

    @contextlib.contextmanager
    def _rewriting(self, writes: list[tuple[str, bytes | Parts | Update | None]]) -> Iterator[None]:
        """Around the base's write of ``writes`` (either runner): a conflict names the shard,
        and the indexes of these shards are dropped (they changed, or may have)."""
        try:
            yield
        except ConflictError as e:
            raise ConflictError(f"shard {e}") from e  # (the message starts with the shard's key)
        finally:
            for shard_key, _ in writes:
                self._indexes.forget(shard_key)

    # -- streamed whole-shard writes (``store.streamed``): the chunks go to the base as they
    # are encoded, laid out by a ``ShardBuilder``, the index written last -------------------
    @property
    def unit_streams(self) -> SupportsUnitStreams | None:
        return None if self.read_only else self

    @property
    def streams_sync(self) -> bool:
        return self.base.sync_writes is not None

    def stream_order(self, keys: Sequence[str]) -> list[str] | None:
        located = [self.layout.locate(parse_inner_key(k, self._rank)) for k in keys]
        shards = {shard for shard, _ in located}
        if len(shards) != 1 or len({i for _, i in located}) != len(keys):
            return None
        (shard,) = shards
        if not covers_shard(self.layout, shard, {i: None for _, i in located}):
            return None
        return [k for _, k in sorted(zip((i for _, i in located), keys))]

    def stream_value(self, data: bytes) -> bytes:
        return data

    def _stream_target(self, keys: Sequence[str]) -> tuple[str, ShardBuilder, list[int]]:
        if keys:
            self._check_writable(keys[0], more=len(keys) - 1)
        located = [self.layout.locate(parse_inner_key(k, self._rank)) for k in keys]
        shard_key = self.layout.shard_key(located[0][0])
        return shard_key, ShardBuilder(self.layout.codec, self.layout.shard_spec), [i for _, i in located]

    def stream_unit_sync(self, keys: Sequence[str], values: Iterable[Buffer | None]) -> None:
        shard_key, builder, order = self._stream_target(keys)
        try:
            stream_shard_sync(self.base, shard_key, builder.head_size, builder.add, builder.finish, order, values)
        finally:
            self._indexes.forget(shard_key)

    async def stream_unit(self, keys: Sequence[str], values: AsyncIterable[Buffer | None]) -> None:
        shard_key, builder, order = self._stream_target(keys)
        try:
            await stream_shard(self.base, shard_key, builder.head_size, builder.add, builder.finish, order, values)
        finally:
            self._indexes.forget(shard_key)

    # -- listing ----------------------------------------------------------------------------
    async def _list_prefix(self, prefix: str) -> AsyncIterator[str]:
        # keys are coordinates, so listing walks the shard grid and reads each index
        cps = self.layout.chunks_per_shard
        for shard in itertools.product(*map(range, self.layout.shard_grid_shape)):
            index = await self._indexes.get(self.layout.shard_key(shard))
            if index is None:
                continue
            for i, (off, n) in enumerate(index):
                if off == _EMPTY and n == _EMPTY:
                    continue
                local = np.unravel_index(i, cps) if cps else ()
                coords = tuple(int(s * n + c) for s, n, c in zip(shard, cps, local))
                if all(c < g for c, g in zip(coords, self.layout.inner_grid_shape)):
                    key = inner_key(coords)
                    if key.startswith(prefix):
                        yield key

    async def delete_prefix(self, prefix: str) -> None:
        if prefix:
            raise UnsupportedFeatureError("a sharding adapter deletes inner chunks by key, not by prefix")
        await super().delete_prefix(prefix)


def _shard_name_over(base: Store, shard_key: str) -> str:
    """``ZarrShardingStore._shard_name`` of an adapter over ``base``."""
    if not isinstance(base, ZarrShardingStore):
        return shard_key
    try:
        outer = base.layout.shard_key(base.layout.locate(parse_inner_key(shard_key, base._rank))[0])
    except (ValueError, ShardStoreError):
        return shard_key
    return f"{base._shard_name(outer)} (inner shard {shard_key})"
