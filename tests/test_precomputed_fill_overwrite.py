"""Writing the fill value over stored chunks of a sharded precomputed volume removes them.

Regression test of issue 17 point 0: when a write covered every chunk a shard can hold (the
adapter then skips reading the shard) and all of those chunks were fill, the shard file was
left in place, so the old data came back on the next read. Run over every small shard /
minishard geometry (8 grids x 27 bit splits x 2 hashes = 432), so each way chunks can share
or own a shard is covered.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

import shardstore
from shardstore.store.memory import MemoryStore

pc = shardstore.precomputed

#: (volume size, chunk size): grids of 1 to 12 chunks, with and without clipped edge chunks
GRIDS = [
    ((1, 1, 1), (1, 1, 1)), ((3, 1, 1), (1, 1, 1)), ((4, 1, 1), (1, 1, 1)), ((2, 3, 1), (1, 1, 1)),
    ((2, 2, 2), (1, 1, 1)), ((5, 3, 1), (2, 2, 1)), ((3, 2, 2), (2, 1, 2)), ((3, 3, 3), (2, 2, 2)),
]
BITS = list(itertools.product(range(3), repeat=3))  # (preshift, minishard, shard) bits 0..2


def _sharding(hash_: str, preshift: int, minishard: int, shard: int) -> dict[str, Any]:
    encoding = "gzip" if (preshift + minishard + shard) % 2 else "raw"  # both kinds, half each
    return {
        "@type": "neuroglancer_uint64_sharded_v1", "hash": hash_, "preshift_bits": preshift,
        "minishard_bits": minishard, "shard_bits": shard,
        "minishard_index_encoding": encoding, "data_encoding": encoding,
    }


def _chunk_boxes(size: tuple[int, ...], chunk: tuple[int, ...]) -> list[tuple[slice, ...]]:
    starts = itertools.product(*(range(0, s, c) for s, c in zip(size, chunk)))
    return [tuple(slice(o, min(o + c, s)) for o, c, s in zip(origin, chunk, size)) for origin in starts]


def _shard_files(data: dict[str, bytes]) -> list[str]:
    return sorted(k for k in data if k.endswith(".shard"))


def test_issue_example_fill_over_the_only_chunk_of_a_shard() -> None:
    a = pc.create(MemoryStore(), data_type="uint32", scales=[
        {"size": [3, 1, 1], "chunk_size": [1, 1, 1], "sharding": _sharding("identity", 0, 0, 2)}])
    a[0:1] = 5
    a[0:1] = 0
    np.testing.assert_array_equal(a[...].ravel(), [0, 0, 0])


@pytest.mark.parametrize("hash_", ["identity", "murmurhash3_x86_128"])
@pytest.mark.parametrize("size,chunk", GRIDS, ids=[f"{g[0]}-{g[1]}" for g in GRIDS])
def test_fill_overwrite_every_small_geometry(hash_: str, size: tuple[int, ...], chunk: tuple[int, ...]) -> None:
    boxes = _chunk_boxes(size, chunk)
    failures = []
    for bits in BITS:
        data: dict[str, bytes] = {}  # the memory store's own dict, to see which files exist
        a = pc.create(MemoryStore(data), data_type="uint32", scales=[
            {"size": list(size), "chunk_size": list(chunk), "sharding": _sharding(hash_, *bits)}])
        model = np.zeros(a.shape, dtype=np.uint32)
        # fill each chunk with data, then write the fill value over the chunks one by one:
        # each step must read back exactly (this is where a lone chunk's shard survived)
        for i, box in enumerate(boxes):
            a[box] = model[box] = i + 1
        for box in boxes:
            a[box] = model[box] = 0
            if not np.array_equal(a[...], model):
                failures.append((bits, "chunk", box))
                break
        # data back in, then one write of fill over everything: no shard file may remain
        a[...] = model[...] = 7
        a[...] = model[...] = 0
        if not np.array_equal(a[...], model) or _shard_files(data):
            failures.append((bits, "whole", _shard_files(data)))
    bad = sorted({bits for bits, _, _ in failures})
    assert not bad, f"{len(bad)} of {len(BITS)} geometries keep old data: {failures[:5]}"
