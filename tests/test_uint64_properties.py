"""Property test: the sharded uint64 store against a dict, over sequences of batched updates and deletes."""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardstore.sharding._uint64_format import ShardingSpec
from shardstore.sharding.uint64 import Uint64ShardedStore
from shardstore.store import MemoryStore, RangeBR

# small key space (collisions, shared minishards) plus the extremes
keys_st = st.one_of(st.integers(0, 40), st.sampled_from([2**64 - 1, 2**63, 2**32 + 1]), st.integers(0, 2**64 - 1))
value_st = st.one_of(st.none(), st.binary(max_size=40))
batch_st = st.lists(st.tuples(keys_st, value_st), min_size=1, max_size=12)
spec_st = st.builds(
    lambda h, pre, mb, sb, ie, de: ShardingSpec.from_json({
        "@type": "neuroglancer_uint64_sharded_v1", "hash": h, "preshift_bits": pre, "minishard_bits": mb,
        "shard_bits": sb, "minishard_index_encoding": ie, "data_encoding": de,
    }),
    st.sampled_from(["identity", "murmurhash3_x86_128"]), st.integers(0, 3), st.integers(0, 3),
    st.integers(0, 3), st.sampled_from(["raw", "gzip"]), st.sampled_from(["raw", "gzip"]),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
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
