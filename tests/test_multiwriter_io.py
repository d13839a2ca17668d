"""The one read-modify-write, counted with ``RecordingStore``: a partial write of a unit (a
Zarr v3 shard, an N5 block, a sharded precomputed chunk's shard, a uint64 kv shard) reads the
unit once and writes it once; concurrent reads of a cold shard fetch its index once; a read
never applies one version's index to another version's bytes. The write counts hold on both
core runners (the blocking one through ``SyncRecordingStore``)."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import shardstore
from shardstore.sharding._uint64_format import ShardingSpec
from shardstore.sharding.uint64 import Uint64ShardedStore
from shardstore.store import LocalStore, MemoryStore, RangeBR, SuffixBR
from shardstore.store.wrappers import RecordingStore, SyncRecordingStore
from shardstore.testing.runners import RUNNERS

pytest_plugins = ["_servers"]
pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=["memory", "local"])
def base(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    return MemoryStore() if request.param == "memory" else LocalStore(tmp_path / "store")


@pytest.fixture(params=RUNNERS)
def recorder(request: pytest.FixtureRequest) -> type[RecordingStore]:
    """The recorder for each core runner: the blocking runner needs a store that declares
    the synchronous protocol (``SyncRecordingStore`` records it), the async one a store
    that declares none (``RecordingStore``)."""
    return SyncRecordingStore if request.param == "blocking" else RecordingStore


def ops(rec: RecordingStore) -> Counter[str]:
    return Counter(r.op for r in rec.requests)


def describe(rec: RecordingStore) -> str:
    return "\n".join(f"  {r.op} {r.key} {r.byte_range}" for r in rec.requests) or "  (none)"


def test_partial_zarr3_shard_write_is_one_get_one_put(base: Any, recorder: type[RecordingStore]) -> None:
    shardstore.zarr3.create(base, shape=(16, 16), dtype="uint16", chunks=(4, 4), shards=(16, 16))[...] = 1
    rec = recorder(base)
    a = shardstore.zarr3.open(rec, mode="r+")
    rec.reset()
    a[3:5, 3:5] = 9  # four inner chunks, each partially: one merge of the one shard
    assert ops(rec) == Counter({"get": 1, "set": 1}), describe(rec)
    assert [r.key for r in rec.requests] == ["c/0/0", "c/0/0"]
    expected = np.ones((16, 16), "uint16")
    expected[3:5, 3:5] = 9
    np.testing.assert_array_equal(a[...], expected)


def test_partial_write_over_two_shards_is_one_get_one_put_each(base: Any, recorder: type[RecordingStore]) -> None:
    shardstore.zarr3.create(base, shape=(16, 16), dtype="uint16", chunks=(4, 4), shards=(8, 16))[...] = 1
    rec = recorder(base)
    a = shardstore.zarr3.open(rec, mode="r+")
    rec.reset()
    a[6:10, 1:15] = 4
    assert Counter((r.op, r.key) for r in rec.requests) == Counter(
        {("get", "c/0/0"): 1, ("set", "c/0/0"): 1, ("get", "c/1/0"): 1, ("set", "c/1/0"): 1}
    ), describe(rec)


def test_nested_sharding_partial_write_is_one_get_one_put(base: Any, recorder: type[RecordingStore]) -> None:
    codecs = [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [4, 4], "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}}]
    a = shardstore.zarr3.create(base, shape=(16, 16), dtype="uint8", chunks=(8, 8), shards=(16, 16), codecs=codecs)
    a[...] = 2
    rec = recorder(base)
    a = shardstore.zarr3.open(rec, mode="r+")
    rec.reset()
    a[1:3, 9:11] = 7
    assert ops(rec) == Counter({"get": 1, "set": 1}), describe(rec)
    assert a[1, 9] == 7 and a[0, 0] == 2 and a[3, 11] == 2


def test_partial_n5_block_write_is_one_get_one_put(base: Any, recorder: type[RecordingStore]) -> None:
    shardstore.n5.create(base, shape=(8, 8), dtype="uint16", block_size=(8, 8))[...] = 3
    rec = recorder(base)
    a = shardstore.n5.open(rec, mode="r+")
    rec.reset()
    a[2:4, 2:4] = 8
    assert ops(rec) == Counter({"get": 1, "set": 1}), describe(rec)
    assert a[2, 2] == 8 and a[0, 0] == 3


def test_partial_sharded_precomputed_write_is_one_get_one_put(base: Any, recorder: type[RecordingStore]) -> None:
    sharding = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0,
                "minishard_bits": 1, "shard_bits": 0, "minishard_index_encoding": "gzip", "data_encoding": "gzip"}
    scale = {"size": [16, 16, 4], "chunk_size": [8, 8, 4], "encoding": "raw", "sharding": sharding}
    shardstore.precomputed.create(base, data_type="uint16", scales=[scale])[...] = 5
    rec = recorder(base)
    a = shardstore.precomputed.open(rec, mode="r+")
    rec.reset()
    a[1:3, 1:3, 0:2] = 6  # part of one chunk of the one shard
    assert ops(rec) == Counter({"get": 1, "set": 1}), describe(rec)
    got = np.asarray(a[...])
    assert (got[1:3, 1:3, 0:2] == 6).all() and (got == 6).sum() == 8


def test_kv_shard_write_is_one_get_one_put(base: Any, recorder: type[RecordingStore]) -> None:
    spec = ShardingSpec.from_json({"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0,
                                   "minishard_bits": 2, "shard_bits": 0, "minishard_index_encoding": "raw",
                                   "data_encoding": "gzip"})
    asyncio.run(Uint64ShardedStore(base, spec).set_many([(str(k), b"old%d" % k) for k in range(10)]))
    rec = recorder(base)
    kv = Uint64ShardedStore(rec, spec)

    async def go() -> list[bytes | None]:
        await kv.update_many([("3", lambda old: old + b"+"), ("20", b"new")])
        return await kv.get_many([(str(k), None) for k in (2, 3, 20)])

    got = asyncio.run(go())
    assert [r.op for r in rec.requests[:2]] == ["get", "set"], describe(rec)
    assert got == [b"old2", b"old3+", b"new"]


class SlowStore(MemoryStore):
    """Versioned reads (shard indexes) take a while, so that concurrent reads overlap."""

    async def get_versioned(self, key: str, byte_range: Any = None) -> Any:
        await asyncio.sleep(0.02)
        return await super().get_versioned(key, byte_range)


def test_concurrent_cold_reads_fetch_the_index_once() -> None:
    base = SlowStore()
    shardstore.zarr3.create(base, shape=(16, 16), dtype="uint16", chunks=(4, 4), shards=(16, 16))[...] = 1
    rec = RecordingStore(base)
    a = shardstore.zarr3.open(rec, mode="r")
    store = a._async.driver.layout.store  # the sharding adapter over ``rec``
    rec.reset()

    async def go() -> list[Any]:
        return await asyncio.gather(*(store.get_many([(f"{i}.0", None)]) for i in range(4)))

    datas = asyncio.run(go())
    assert all(d[0] is not None for d in datas)
    index_gets = [r for r in rec.requests if isinstance(r.byte_range, SuffixBR)]
    assert len(index_gets) == 1, describe(rec)


def test_reader_never_mixes_versions_of_a_shard() -> None:
    """A shard replaced between a read's index fetch and its data fetch: the read notices
    (another generation) and reads the new index, instead of cutting the new bytes with
    the old offsets."""
    base = MemoryStore()
    a = shardstore.zarr3.create(base, shape=(64, 64), dtype="uint8", chunks=(32, 32), shards=(64, 64),
                                codecs=[{"name": "gzip", "configuration": {"level": 1}}])
    a[...] = 1  # compresses well: the replacement's chunks (random) have other sizes
    b = shardstore.zarr3.open(base, mode="r+")  # another writer
    reader = shardstore.zarr3.open(RecordingStore(base), mode="r")
    store = reader._async.driver.layout.store
    real = store.base.get_versioned
    replaced = []

    async def then_replace(key: str, br: Any = None) -> Any:
        got = await real(key, br)
        if not replaced:  # once: right after the index was read, a new shard lands
            replaced.append(key)
            await b._async.setitem((slice(0, 32), slice(0, 64)), np.random.default_rng(1).integers(0, 255, (32, 64)))
        return got

    store.base.get_versioned = then_replace

    keys = [("0.1", None), ("1.1", None)]
    datas = asyncio.run(store.get_many(keys))
    assert replaced == ["c/0/0"]
    fresh = shardstore.zarr3.open(base, mode="r")._async.driver.layout.store
    assert datas == asyncio.run(fresh.get_many(keys))  # the new version's inner chunks, whole


@pytest.fixture(params=["memory", "local", "prefix-local", "s3"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "memory":
        return MemoryStore()
    if request.param == "local":
        return LocalStore(tmp_path / "s")
    if request.param == "prefix-local":
        from shardstore.store.wrappers import PrefixStore

        return PrefixStore(LocalStore(tmp_path / "s"), "a/b")
    import uuid

    from shardstore.store import store_from_url

    server = request.getfixturevalue("seaweedfs")
    return store_from_url(server.url(f"update-{uuid.uuid4().hex[:8]}"), mode="r+", storage_options=server.storage_options())


def test_update_many_merges_every_concurrent_update(any_store: Any) -> None:
    """``update_many`` from many tasks at once: every update function sees the value the one
    before it wrote (no lost update), None deletes, a missing key reads as None."""

    def bump(old: bytes | None) -> bytes:
        return b"%d" % (int(old or b"0") + 1)

    async def go() -> list[bytes | None]:
        await asyncio.gather(*(any_store.update_many([("n", bump), (f"k{i}", b"v")]) for i in range(20)))
        await any_store.update_many([("k3", lambda old: None), ("gone", lambda old: None)])
        return await any_store.get_many([("n", None), ("k2", None), ("k3", None), ("gone", None)])

    assert asyncio.run(go()) == [b"20", b"v", None, None]


def test_concurrent_cold_kv_reads_fetch_the_shard_index_once() -> None:
    spec = ShardingSpec.from_json({"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0,
                                   "minishard_bits": 2, "shard_bits": 0, "minishard_index_encoding": "raw",
                                   "data_encoding": "raw"})
    base = SlowStore()
    asyncio.run(Uint64ShardedStore(base, spec).set_many([(str(k), b"v%d" % k) for k in range(16)]))
    rec = RecordingStore(base)
    kv = Uint64ShardedStore(rec, spec)

    async def go() -> list[list[bytes | None]]:
        return list(await asyncio.gather(*(kv.get_many([(str(k), None)]) for k in range(8))))

    assert asyncio.run(go()) == [[b"v%d" % k] for k in range(8)]
    index_reads = [r for r in rec.requests if r.byte_range == RangeBR(0, 64)]  # 4 minishards x 16 bytes
    assert len(index_reads) == 1, describe(rec)
