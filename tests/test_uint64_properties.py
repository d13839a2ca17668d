"""Property test: the sharded uint64 store against a dict, over sequences of batched updates and deletes."""

from __future__ import annotations

import asyncio

from _helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from shardstore.sharding.uint64 import ShardingSpec, Uint64ShardedStore
from shardstore.store import MemoryStore, RangeBR
from shardstore.testing import strategies as sst

value_st = st.one_of(st.none(), st.binary(max_size=40))
batch_st = st.lists(st.tuples(sst.uint64_keys(), value_st), min_size=1, max_size=12)
spec_st = sst.uint64_sharding_specs(max_bits=3).map(ShardingSpec.from_json)


@settings(max_examples=examples(60))
@given(spec=spec_st, batches=st.lists(batch_st, min_size=1, max_size=6))
def test_matches_dict_oracle(spec, batches):
    async def go() -> None:
        data: dict[str, bytes] = {}
        store = Uint64ShardedStore(MemoryStore(data), spec)
        # a second handle on the same data: its caches must notice every rewrite
        reader = Uint64ShardedStore(MemoryStore(data), spec)
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
                assert await s.get_many([(str(k), None) for k in ks]) == [oracle.get(k) for k in ks]
                assert sorted([int(k) async for k in s.list_prefix("")]) == sorted(oracle)
            got = await reader.get_many([(str(k), RangeBR(1, 5)) for k in ks])
            assert got == [None if k not in oracle else oracle[k][1:5] for k in ks]
        if not oracle:
            assert data == {}  # shards left empty are deleted

    asyncio.run(go())
