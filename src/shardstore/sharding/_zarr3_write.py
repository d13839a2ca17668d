"""How a ``zarr3.ZarrShardingStore`` write of inner chunks becomes one write per shard.

A batch is grouped by shard (``shard_writes``). A shard whose every inner chunk inside the
array gets a plain value is assembled at once, nothing read; any other becomes the
``Update`` of the base store that merges the batch into the stored shard (``merged_shard``),
which the base's read-modify-write runs on the shard as it reads it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..codecs.sharding_indexed import EMPTY
from ..store.base import Parts, Update, joined
from ._zarr3_layout import parse_inner_key

if TYPE_CHECKING:
    from ._zarr3_index import ShardIndexes
    from ._zarr3_layout import ShardLayout

__all__ = ["covers_shard", "merged_shard", "shard_writes"]

_EMPTY = int(EMPTY)

#: an item of a write batch: a value, None (delete) or an ``Update`` of the stored value
Value = bytes | Parts | Update | None


def shard_writes(layout: ShardLayout, rank: int, indexes: ShardIndexes, items: Sequence[tuple[str, Value]]) -> list[tuple[str, Value]]:
    """The base store's items of a write of inner chunks, one per touched shard: the new
    shard as a value when the batch replaces every inner chunk with plain values (no read
    needed), else the ``Update`` that merges the batch into the stored shard."""
    by_shard: dict[tuple[int, ...], dict[int, Value]] = {}
    for key, value in items:
        shard, i = layout.locate(parse_inner_key(key, rank))
        by_shard.setdefault(shard, {})[i] = value if value is None or callable(value) else joined(value)
    writes: list[tuple[str, Value]] = []
    for shard, new in sorted(by_shard.items()):
        shard_key = layout.shard_key(shard)
        if covers_shard(layout, shard, new) and not any(callable(v) for v in new.values()):
            writes.append((shard_key, merged_shard(layout, indexes, shard_key, new, None)))  # no read needed
        else:
            writes.append((shard_key, functools.partial(merged_shard, layout, indexes, shard_key, new)))
    return writes


def covers_shard(layout: ShardLayout, shard: tuple[int, ...], new: dict[int, Value]) -> bool:
    """Whether ``new`` holds every inner chunk of ``shard`` that lies inside the array."""
    return set(new) >= set(layout.valid_in_shard(shard))


def merged_shard(layout: ShardLayout, indexes: ShardIndexes, shard_key: str, new: dict[int, Value], old: bytes | None) -> Parts | None:
    """The shard ``old`` (None: missing) with the inner chunks ``new`` merged in: the
    ``Update`` of one shard (None: no inner chunk is left, delete the shard)."""
    chunks: dict[int, bytes | memoryview] = {}
    if old is not None:
        index = indexes.decode(shard_key, indexes.index_bytes(old), old)
        # views, not copies: the kept inner chunks go to the new shard's parts as they
        # are (a partial write of a shard copied all of it once more here)
        view = memoryview(old)
        for i, (off, n) in enumerate(index):
            if (off == _EMPTY and n == _EMPTY) or (i in new and not callable(new[i])):
                continue  # empty, or replaced whole by this write
            chunks[i] = view[off : off + n]
    for i, v in new.items():
        if callable(v):
            stored = chunks.get(i)
            value = v(None if stored is None else bytes(stored))  # (an Update is given bytes)
        else:
            value = v
        if value is None:
            chunks.pop(i, None)
        else:
            chunks[i] = joined(value)
    parts = layout.codec.assemble(chunks, layout.shard_spec)
    return None if parts is None else Parts(parts)
