"""``neuroglancer_uint64_sharded_v1`` shard files laid out from their values: all at once
(``assemble_shard``) or as the values arrive in (minishard, key) order (``ShardBuilder``, for
streamed writes), byte-identical either way. Pure functions, no I/O; the spec, hashing and the
reading side are in ``_uint64_format.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ._uint64_format import ShardingSpec, gzip_compress

__all__ = ["ShardBuilder", "assemble_shard"]


def assemble_shard(
    spec: ShardingSpec, values: Mapping[int, bytes | memoryview], minishard_of: Mapping[int, int] | None = None
) -> list[bytes | memoryview] | None:
    """A whole shard file (as parts to concatenate) holding ``values`` (already data-encoded).

    Layout as tensorstore writes it: the shard index, then for each minishard in order its
    values sorted by key followed by its minishard index. None when there is nothing to store.
    This is ``ShardBuilder`` fed all at once, so a streamed shard is byte-identical.
    """
    if not values:
        return None
    if minishard_of is None:
        minishard_of = {k: m for k, (_, m) in zip(values, spec.locate_many(list(values)))}
    # ``ShardBuilder``'s layout with the per-key steps done by NumPy (a bulk load of many small
    # values spent most of its time in the builder's per-key bookkeeping): the same bytes
    n = len(values)
    listed = list(values)
    keys = np.fromiter(listed, dtype=np.uint64, count=n)
    minis = np.fromiter((minishard_of[k] for k in listed), dtype=np.int64, count=n)
    order = np.lexsort((keys, minis))  # by minishard, then key
    datas = [values[k] for k in map(listed.__getitem__, order.tolist())]
    # (values are bytes or 1-D byte views of a shard: len is the byte count)
    sizes = np.fromiter(map(len, datas), dtype=np.uint64, count=n)
    sorted_keys, sorted_minis = keys[order], minis[order]
    ends = np.concatenate(([0], np.cumsum(sizes, dtype=np.uint64)))
    bounds = [0, *(np.flatnonzero(sorted_minis[1:] != sorted_minis[:-1]) + 1).tolist(), n]
    index = np.zeros((spec.num_minishards, 2), dtype="<u8")
    parts: list[bytes | memoryview] = [b""]  # slot 0: the shard index, filled in at the end
    pos = 0  # offset after the shard index
    for a, b in zip(bounds[:-1], bounds[1:]):
        encoded = _minishard_index(spec, sorted_keys[a:b], pos, sizes[a:b])
        parts.extend(datas[a:b])
        pos += int(ends[b] - ends[a])
        index[int(sorted_minis[a])] = (pos, pos + len(encoded))
        pos += len(encoded)
        parts.append(encoded)
    parts[0] = index.tobytes()
    return parts


def _minishard_index(spec: ShardingSpec, keys: np.ndarray, start: int, sizes: Sequence[int] | np.ndarray) -> bytes:
    """The encoded index of one minishard whose values (``keys`` ascending, of ``sizes``)
    follow one another from offset ``start`` (after the shard index): key deltas, offset
    deltas (only the first is not 0), sizes."""
    table = np.zeros((3, len(keys)), dtype="<u8")
    table[0] = np.diff(keys, prepend=np.uint64(0))
    table[1, 0] = start
    table[2] = sizes
    encoded = table.tobytes()
    return gzip_compress(encoded) if spec.minishard_index_encoding == "gzip" else encoded


class ShardBuilder:
    """One shard file laid out as its (data-encoded) values arrive in (minishard, key)
    order: what a streamed shard write needs to know without holding the values.

    The values follow ``head_size`` bytes reserved for the shard index; each minishard's
    index is written right after its values (when the next minishard starts, or as the tail);
    ``finish`` gives the shard index for the reserved head.
    """

    def __init__(self, spec: ShardingSpec) -> None:
        self._spec = spec
        self._index = np.zeros((spec.num_minishards, 2), dtype="<u8")
        #: bytes reserved before the first value: the shard index
        self.head_size = spec.index_size
        self._pos = 0  # offset after the shard index
        self._minishard = -1
        self._last_key = -1
        self._keys: list[int] = []  # the open minishard's keys, sizes and first offset
        self._sizes: list[int] = []
        self._start = 0
        self._closed_any = False  # whether some minishard holds a value

    def add(self, key: int, minishard: int, data: bytes | memoryview | None) -> list[bytes | memoryview]:
        """Place ``key``'s value (None: absent); returns the bytes to write next (the previous
        minishard's index when this key opens a new minishard, then the value)."""
        if (minishard, key) <= (self._minishard, self._last_key):
            raise ValueError(f"values must arrive in (minishard, key) order: {key} in minishard {minishard}")
        out: list[bytes | memoryview] = []
        if minishard != self._minishard:
            out.extend(self._close_minishard())
            self._minishard = minishard
            self._start = self._pos
        self._last_key = key
        if data is None:
            return out
        n = memoryview(data).nbytes
        self._keys.append(key)
        self._sizes.append(n)
        self._pos += n
        out.append(data)
        return out

    def place(self, position: tuple[int, int], data: bytes | memoryview | None) -> list[bytes | memoryview]:
        """``add`` with the key and its minishard as one position."""
        return self.add(position[0], position[1], data)

    def _close_minishard(self) -> list[bytes | memoryview]:
        if not self._keys:
            return []
        encoded = _minishard_index(self._spec, np.asarray(self._keys, dtype=np.uint64), self._start, self._sizes)
        self._index[self._minishard] = (self._pos, self._pos + len(encoded))
        self._pos += len(encoded)
        self._keys, self._sizes = [], []
        self._closed_any = True
        return [encoded]

    def finish(self) -> tuple[bytes, bytes] | None:
        """(head, tail): the shard index for the reserved head and the last minishard's index
        as the tail; None when no value was added (the shard is not stored)."""
        tail = self._close_minishard()
        if not self._closed_any:
            return None
        return self._index.tobytes(), tail[0] if tail else b""
