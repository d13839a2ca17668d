"""Property test: the sharded uint64 store against a dict, over sequences of batched updates and
deletes, read through its blocking path (synchronous protocol) and its async path."""

from __future__ import annotations

import asyncio

import pytest
from _helpers import examples
from hypothesis import given, settings
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
