"""Synchronous reads of Zarr v3 shards through the base store's ``SupportsGetSync``, for
bases that cannot hold a shard open (another adapter, for nested sharding).

Nothing pins a version of the shard, so a read compares its generation before and after (a
replaced file never returns to a generation) and is redone when the shard was replaced
meanwhile, as the async ``get_many`` reads: a cold shard wanted whole in one read, else its
index (cached while the shard's generation holds) and one multi-range read of its chunks.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

from ..codecs.sharding_indexed import EMPTY
from ..errors import CodecError, ConflictError
from ..store.base import ByteRange, RangeBR
from ..store.byte_range import range_within
from ._zarr3_index import NOT_FOUND, checked_chunk
from ._zarr3_layout import parse_inner_key

if TYPE_CHECKING:
    from ..store.sync_protocols import SupportsGetSync
    from .zarr3 import ZarrShardingStore

__all__ = ["CheckedReads"]

_EMPTY = int(EMPTY)


class CheckedReads:
    """The adapter's blocking reads over a base that reads synchronously but opens nothing."""

    def __init__(self, store: ZarrShardingStore, base: SupportsGetSync) -> None:
        self._store = store
        self._base = base

    def get(self, requests: Sequence[tuple[str, ByteRange | None]]) -> list[bytes | None]:
        """Inner chunks (or ranges of them) by shard, each shard's from one version of it."""
        store, base = self._store, self._base
        layout, rank = store.layout, store._rank
        by_shard: dict[tuple[int, ...], list[tuple[int, int, ByteRange | None]]] = {}
        for pos, (key, br) in enumerate(requests):
            shard, i = layout.locate(parse_inner_key(key, rank))
            by_shard.setdefault(shard, []).append((pos, i, br))
        out: list[bytes | None] = [None] * len(requests)
        for shard, reqs in by_shard.items():
            shard_key = layout.shard_key(shard)
            if (
                shard_key not in store._indexes
                and all(br is None for _, _, br in reqs)
                and {i for _, i, _ in reqs} >= set(layout.valid_in_shard(shard))
            ):
                self._whole_shard(shard_key, reqs, out)
                continue
            for _ in range(store.read_attempts):
                gen = base.generation_sync(shard_key)
                try:
                    datas = self._read_shard(shard_key, gen, reqs)
                except CodecError:
                    if base.generation_sync(shard_key) == gen:
                        raise  # a truly broken shard, not one replaced while we read it
                else:
                    # "absent" needs no check: it is what the index said at some moment
                    if datas is None or base.generation_sync(shard_key) == gen:
                        for (pos, _, _), data in zip(reqs, datas or ()):
                            out[pos] = data
                        break
                store._indexes.forget(shard_key)
            else:
                raise ConflictError(f"shard {shard_key!r} kept being replaced while it was read ({store.read_attempts} attempts)")
        return out

    def _whole_shard(self, shard_key: str, reqs: list[tuple[int, int, ByteRange | None]], out: list[bytes | None]) -> None:
        """Every inner chunk of a cold shard: one read of the whole shard (one version)."""
        base, indexes = self._base, self._store._indexes
        gen = base.generation_sync(shard_key)
        whole = base.get_sync(shard_key)
        if whole is None:
            indexes.put(shard_key, NOT_FOUND, gen)
            return
        index = indexes.decode(shard_key, indexes.index_bytes(whole), whole)
        if base.generation_sync(shard_key) == gen:  # (else cache nothing: it was replaced meanwhile)
            indexes.put(shard_key, index, gen)
        for pos, i, _ in reqs:
            off, n = index[i]
            if not (off == _EMPTY and n == _EMPTY):
                out[pos] = whole[off : off + n]

    def _read_shard(
        self, shard_key: str, gen: Hashable | None, reqs: list[tuple[int, int, ByteRange | None]]
    ) -> list[bytes | None] | None:
        """The requested inner chunks (or ranges) of one shard at ``gen``, in order (None: the
        shard is missing)."""
        store, base, indexes = self._store, self._base, self._store._indexes
        index = indexes.cached(shard_key, gen)
        if index is NOT_FOUND:
            index = indexes.keep(shard_key, base.get_sync(shard_key, indexes.read_range()), gen)
        if index is None:
            return None
        fetch: list[tuple[int, int, RangeBR]] = []  # (request number, inner chunk, range)
        end = -1  # where the last whole chunk read ends
        for k, (_, i, br) in enumerate(reqs):
            off, n = index[i]  # type: ignore[index]
            if not (off == _EMPTY and n == _EMPTY):
                r = range_within(off, n, br)
                fetch.append((k, i, r))
                if br is None:
                    end = max(end, r.end)
        out: list[bytes | None] = [None] * len(reqs)
        if not fetch:
            return out
        ranges = [r for _, _, r in fetch]
        # with the index at the end a ranged read cannot see an entry that runs into the index
        # (the shard size is unknown): reading the index's length past the last whole chunk
        # proves that the bytes after it exist, i.e. that every chunk ends before the index
        guard = store._end_guard if end >= 0 else 0
        datas = base.get_ranges_sync(shard_key, [*ranges, RangeBR(end, end + guard)] if guard else ranges)
        name = store._shard_name(shard_key)
        if guard and (datas[-1] is None or len(datas[-1]) != guard):
            raise CodecError(
                f"shard {name!r}: an inner chunk ending at byte {end} runs into the shard index or past the "
                "end of the shard (truncated shard or bad index entry)"
            )
        for (k, i, r), data in zip(fetch, datas):
            out[k] = checked_chunk(data, r, name, i)
        return out
