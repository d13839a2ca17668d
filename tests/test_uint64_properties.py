"""Property test: the sharded uint64 store against a dict, over sequences of batched updates and
deletes, read through its blocking path (synchronous protocol) and its async path."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from _helpers import examples
from hypothesis import example, given, settings
from hypothesis import strategies as st

from shardstore.sharding.uint64 import ShardingSpec, Uint64ShardedStore
from shardstore.store import MemoryStore, RangeBR
from shardstore.testing import strategies as sst
from shardstore.testing.runners import RUNNERS, on_runner

value_st = st.one_of(st.none(), st.binary(max_size=40))
batch_st = st.lists(st.tuples(sst.uint64_keys(), value_st), min_size=1, max_size=12)
spec_st = sst.uint64_sharding_specs(max_bits=3).map(ShardingSpec.from_json)


def _read(s: Uint64ShardedStore, requests: list[tuple[str, RangeBR | None]]) -> list[bytes | None]:
    """Synchronous reads by the adapter's blocking path (``get_sync``, ``sync_ids``)."""
    assert s.sync_reads is s and s.sync_ids is not None
    whole = s.sync_ids.get_many_ids([int(k) for k, br in requests if br is None])
    got = iter(whole)
    return [next(got) if br is None else s.get_sync(k, br) for k, br in requests]


@pytest.mark.parametrize("runner", RUNNERS)
@settings(max_examples=examples(60))
@given(spec=spec_st, batches=st.lists(batch_st, min_size=1, max_size=6))
def test_matches_dict_oracle(runner, spec, batches):
    async def get_many(s: Uint64ShardedStore, requests: list[tuple[str, RangeBR | None]]) -> list[bytes | None]:
        return _read(s, requests) if runner == "blocking" else await s.get_many(requests)

    async def go() -> None:
        data: dict[str, bytes] = {}
        store = Uint64ShardedStore(on_runner(MemoryStore(data), runner), spec)
        # a second handle on the same data: its caches must notice every rewrite
        reader = Uint64ShardedStore(on_runner(MemoryStore(data), runner), spec)
        oracle: dict[int, bytes] = {}
        seen: set[int] = set()
        for batch in batches:
            await store.set_many([(str(k), v) for k, v in batch])
            for k, v in batch:
                seen.add(k)
                if v is None:
                    oracle.pop(k, None)
                else:
                    oracle[k] = v
            ks = sorted(seen)
            for s in (store, reader):
                assert await get_many(s, [(str(k), None) for k in ks]) == [oracle.get(k) for k in ks]
                assert sorted([int(k) async for k in s.list_prefix("")]) == sorted(oracle)
            got = await get_many(reader, [(str(k), RangeBR(1, 5)) for k in ks])
            assert got == [None if k not in oracle else oracle[k][1:5] for k in ks]
        if not oracle:
            assert data == {}  # shards left empty are deleted

    asyncio.run(go())


@st.composite
def _minishards_and_requests(draw):
    import numpy as np

    from shardstore.sharding._uint64_format import MinishardIndex

    found = {}
    for m in draw(st.sets(st.integers(0, 7), max_size=6)):
        keys = sorted(draw(st.sets(st.integers(0, 2**64 - 1), max_size=8)))
        sizes = [draw(st.integers(0, 50)) for _ in keys]
        starts = [1000 + 100 * i for i in range(len(keys))]
        found[m] = MinishardIndex(np.array(keys, dtype=np.uint64), np.array(starts, dtype=np.uint64),
                                  np.array(sizes, dtype=np.uint64))
    stored = [(int(k), m) for m, mi in found.items() for k in mi.keys.tolist()]
    reqs = []
    for pos in range(draw(st.integers(0, 12))):
        if stored and draw(st.booleans()):
            key, m = draw(st.sampled_from(stored))
            if draw(st.booleans()):
                m = draw(st.integers(0, 9))  # (asked of another minishard: not found there)
        else:
            key, m = draw(st.integers(0, 2**64 - 1)), draw(st.integers(0, 9))
        reqs.append((pos, key, m))
    return found, reqs, draw(st.sampled_from([0, -1000, 7]))


@settings(max_examples=examples(100))
@given(case=_minishards_and_requests())
def test_value_spans_finds_what_a_lookup_per_key_finds(case):
    """``value_spans`` (one vectorized bisection over all the minishards) locates exactly
    what ``MinishardIndex.lookup`` of each key in its own minishard locates, in file order."""
    from shardstore.sharding._uint64_format import value_spans

    found, reqs, delta = case
    want = []
    for pos, key, m in reqs:
        hit = found[m].lookup(key) if m in found else None
        if hit is not None:
            want.append((pos, hit[0] + delta, hit[0] + hit[1] + delta))
    got = value_spans(found, reqs, delta)
    assert sorted(got) == sorted(want)
    assert [s for _, s, _ in got] == sorted(s for _, s, _ in got)


def _minishard_index_model(words: list[int], index_size: int) -> tuple[list[int], list[int], list[int]] | str:
    """The spec's reading of a ``[3, n]`` minishard index in exact integers, or the error's words."""
    n = len(words) // 3
    keys = [sum(words[: i + 1]) for i in range(n)]
    if any(k >= 2**64 for k in keys):
        return "overflow uint64"
    offsets, sizes = words[n : 2 * n], words[2 * n :]
    if sum(offsets) >= 2**62 or sum(sizes) >= 2**62:
        return "beyond any possible shard size"
    starts = [sum(offsets[: i + 1]) + sum(sizes[:i]) + index_size for i in range(n)]
    return keys, starts, sizes


_word = st.one_of(st.integers(0, 300), st.integers(2**61, 2**64 - 1))


@settings(max_examples=examples(200))
@given(words=st.integers(1, 14).flatmap(lambda n: st.lists(_word, min_size=3 * n, max_size=3 * n)))
@example(words=[2**64 - 1, 1, 0, 0, 0, 0])  # keys summing to exactly 2**64
@example(words=[5, 2**62, 0])  # an offset of exactly 2**62
@example(words=[*range(1, 10), *[2**59] * 9, *range(9)])  # 9 entries (NumPy): offsets summing past 2**62
def test_minishard_indexes_decode_to_the_specs_sums_on_both_paths(words):
    """Small indexes (summed with Python ints) and larger ones (NumPy) decode to the exact sums
    of the spec, and refuse the same overflowing ones with the same error."""
    import struct

    from shardstore.errors import CodecError
    from shardstore.sharding._uint64_format import decode_minishard_index

    spec = ShardingSpec.from_json({"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0,
                                   "minishard_bits": 2, "shard_bits": 0, "minishard_index_encoding": "raw"})
    n = len(words) // 3
    want = _minishard_index_model(words, spec.index_size)
    raw = struct.pack(f"<{3 * n}Q", *words)
    if isinstance(want, str):
        with pytest.raises(CodecError, match=want):
            decode_minishard_index(raw, spec, "s.shard", 1)
        return
    got = decode_minishard_index(raw, spec, "s.shard", 1)
    assert (got.keys.tolist(), got.starts.tolist(), got.sizes.tolist()) == want
    assert got.keys.dtype == got.starts.dtype == got.sizes.dtype == np.uint64
