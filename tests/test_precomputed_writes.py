"""Precomputed writes: partial writes merge (sharded and not), whole shards are written
without reading, request counts (RecordingStore), and NumPy-oracle property tests."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
from _helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import shardstore
from shardstore.store.memory import MemoryStore
from shardstore.store.wrappers import RecordingStore
from shardstore.testing import strategies as sst

pc = shardstore.precomputed


def sharding(hash_: str = "identity", preshift: int = 0, minishard: int = 1, shard: int = 3, gz: bool = False) -> dict[str, Any]:
    return {
        "@type": "neuroglancer_uint64_sharded_v1", "hash": hash_, "preshift_bits": preshift,
        "minishard_bits": minishard, "shard_bits": shard,
        "minishard_index_encoding": "gzip" if gz else "raw", "data_encoding": "gzip" if gz else "raw",
    }


def _volume(store: Any, size=(40, 36, 20), chunk=(8, 8, 4), sharded: dict | None = None, **kw: Any) -> Any:
    scale = {"size": list(size), "chunk_size": list(chunk), "voxel_offset": [-3, 4, 1], **kw}
    if sharded is not None:
        scale["sharding"] = sharded
    return pc.create(store, data_type=kw.pop("data_type", "uint16"), scales=[scale])


def _ops(rec: RecordingStore) -> Counter[str]:
    return Counter(r.op for r in rec.requests)


@pytest.mark.parametrize("spec", [sharding(), sharding("murmurhash3_x86_128", 1, 2, 2, gz=True)], ids=["identity", "murmur"])
def test_whole_volume_write_writes_each_shard_once_without_reading(spec: dict) -> None:
    rec = RecordingStore(MemoryStore())
    a = _volume(rec, sharded=spec)
    rec.reset()
    data = np.random.default_rng(0).integers(1, 1000, a.shape, dtype=np.uint16)
    a[...] = data
    ops = _ops(rec)
    shards = {r.key for r in rec.requests if r.op == "set"}
    assert ops["get"] == 0, rec.requests
    assert ops["set"] == len(shards)  # each shard written once
    np.testing.assert_array_equal(a[...], data)


def test_whole_volume_write_of_identity_8_shards_is_8_puts() -> None:
    rec = RecordingStore(MemoryStore())
    # 4x4x4 grid = 64 chunks, 6 morton bits: shard = bits 3..5 -> 8 shards of 8 chunks
    a = _volume(rec, size=(32, 32, 32), chunk=(8, 8, 8), sharded=sharding(minishard=3, shard=3))
    rec.reset()
    a[...] = 7
    assert _ops(rec) == Counter({"set": 8})
    assert sorted(r.key for r in rec.requests) == [f"1_1_1/{i}.shard" for i in range(8)]


def test_partial_write_merges_into_shard_and_keeps_everything_else() -> None:
    rec = RecordingStore(MemoryStore())
    a = _volume(rec, sharded=sharding(minishard=1, shard=2))
    rng = np.random.default_rng(1)
    oracle = rng.integers(1, 60000, a.shape, dtype=np.uint16)
    a[...] = oracle
    rec.reset()
    region = (slice(9, 14), slice(3, 5), slice(2, 3))  # inside one chunk: one shard touched
    a[region] = 42
    oracle[region] = 42
    # one shard touched: the old chunk is read (shard index, minishard index, value; the
    # adapter forgot the indexes when it wrote the shard), then the shard is read-merge-written
    ops = _ops(rec)
    assert ops["set"] == 1 and ops["get"] <= 4, rec.requests
    assert len({r.key for r in rec.requests}) == 1
    np.testing.assert_array_equal(a[...], oracle)
    # another handle (cold caches) sees the same
    np.testing.assert_array_equal(pc.open(rec.base)[...], oracle)


def test_partial_write_across_shards_rewrites_each_touched_shard_once() -> None:
    rec = RecordingStore(MemoryStore())
    a = _volume(rec, sharded=sharding("murmurhash3_x86_128", 0, 1, 2))
    oracle = np.arange(np.prod(a.shape), dtype=np.uint16).reshape(a.shape)
    a[...] = oracle
    rec.reset()
    region = (slice(5, 30), slice(7, 29), slice(3, 18))
    a[region] = 1
    oracle[region] = 1
    sets = Counter(r.key for r in rec.requests if r.op == "set")
    assert sets and all(n == 1 for n in sets.values())
    np.testing.assert_array_equal(a[...], oracle)


def test_unsharded_partial_write_touches_only_its_chunks() -> None:
    rec = RecordingStore(MemoryStore())
    a = _volume(rec)
    a[...] = 3
    rec.reset()
    a[1:9, 0:8, 0:4] = 5  # straddles two chunks along x (8 + offset grid starts at 0)
    ops = _ops(rec)
    assert ops == Counter({"get": 2, "set": 2})
    rec.reset()
    a[8:16, 0:8, 0:4] = 6  # exactly one chunk: no read
    assert _ops(rec) == Counter({"set": 1})


def test_sharded_cold_read_of_one_chunk_is_at_most_three_gets() -> None:
    base = MemoryStore()
    a = _volume(base, sharded=sharding(minishard=2, shard=1))
    a[...] = 9
    rec = RecordingStore(base)
    b = pc.open(rec)
    rec.reset()
    assert (b[0:8, 0:8, 0:4] == 9).all()
    assert _ops(rec)["get"] <= 3


# -- property tests ------------------------------------------------------------------------
@st.composite
def volumes(draw: st.DrawFn) -> dict[str, Any]:
    size = tuple(draw(st.integers(1, 14)) for _ in range(3))
    chunk = tuple(draw(st.integers(1, 6)) for _ in range(3))
    nc = draw(st.sampled_from([1, 1, 2]))
    encoding = draw(st.sampled_from(["raw", "raw", "compressed_segmentation"]))
    spec = draw(st.none() | sst.uint64_sharding_specs(max_bits=3))
    return dict(size=size, chunk=chunk, nc=nc, encoding=encoding, sharding=spec,
                offset=tuple(draw(st.integers(-5, 5)) for _ in range(3)))


@settings(max_examples=examples(40))
@given(vol=volumes(), data=st.data())
def test_property_writes_and_reads_match_numpy(vol: dict[str, Any], data: st.DataObject) -> None:
    store = MemoryStore()
    scale = {"size": list(vol["size"]), "chunk_size": list(vol["chunk"]), "voxel_offset": list(vol["offset"]),
             "encoding": vol["encoding"]}
    if vol["encoding"] == "compressed_segmentation":
        scale["compressed_segmentation_block_size"] = [2, 3, 2]
    if vol["sharding"]:
        scale["sharding"] = vol["sharding"]
    a = pc.create(store, data_type="uint32", num_channels=vol["nc"], scales=[scale])
    oracle = np.zeros(a.shape, dtype=np.uint32)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    for _ in range(data.draw(st.integers(1, 4))):
        box = data.draw(sst.boxes(a.shape))
        # few distinct labels (compressed_segmentation's case), zero included (holes)
        value = rng.integers(0, 4, tuple(s.stop - s.start for s in box), dtype=np.uint32) * 1_000_003
        a[box] = value
        oracle[box] = value
        np.testing.assert_array_equal(a[...], oracle)  # nothing outside the box changed
    reopened = pc.open(store)
    for _ in range(3):
        sel = tuple(slice(s.start, s.stop, data.draw(st.integers(1, 3))) for s in data.draw(sst.boxes(a.shape)))
        np.testing.assert_array_equal(reopened[sel], oracle[sel])
