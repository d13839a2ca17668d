"""The Zarr sharding store adapter: the shared Store battery plus shard-layout specifics."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from shardstore.codecs.base import ChunkSpec
from shardstore.codecs.registry import codec_from_config
from shardstore.codecs.sharding_indexed import EMPTY, ShardingCodec
from shardstore.errors import ChecksumError, CodecError, InvalidKeyError
from shardstore.sharding.zarr3 import ShardLayout, ZarrShardingStore, inner_key
from shardstore.store import LocalStore, MemoryStore, RecordingStore
from shardstore.testing import StoreTests


def make_layout(location: str = "end", crc: bool = True, shape=(10, 9), shard=(4, 6), inner=(2, 3)) -> ShardLayout:
    index_codecs = [{"name": "bytes", "configuration": {"endian": "little"}}] + ([{"name": "crc32c"}] if crc else [])
    codec = codec_from_config({
        "name": "sharding_indexed",
        "configuration": {
            "chunk_shape": list(inner),
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
            "index_codecs": index_codecs,
            "index_location": location,
        },
    })
    spec = ChunkSpec(shard, np.dtype("uint8"), np.uint8(0))
    assert isinstance(codec, ShardingCodec)
    return ShardLayout(
        codec=codec.bind(spec),
        shard_spec=spec,
        inner_grid_shape=tuple(-(-s // i) for s, i in zip(shape, inner)),
        shard_key=lambda c: "s/" + "/".join(map(str, c)),
    )


class TestShardingOverMemory(StoreTests):
    @pytest.fixture
    def store(self):
        return ZarrShardingStore(MemoryStore(), make_layout())

    def sample_keys(self):
        return ["0.0", "0.1", "1.0", "4.2", "3.1"]


class TestShardingOverLocalIndexAtStart(StoreTests):
    @pytest.fixture
    def store(self, tmp_path):
        return ZarrShardingStore(LocalStore(tmp_path / "root"), make_layout("start", crc=False))

    def sample_keys(self):
        return ["0.0", "2.2", "1.0", "4.2"]


class TestNestedSharding(StoreTests):
    """An adapter over an adapter, as nested sharding_indexed uses it."""

    @pytest.fixture
    def store(self):
        outer = ZarrShardingStore(MemoryStore(), make_layout(shape=(16, 18), shard=(8, 12), inner=(4, 6)))
        inner_layout = make_layout("start", shape=(16, 18), shard=(4, 6), inner=(2, 3))
        inner_layout = ShardLayout(inner_layout.codec, inner_layout.shard_spec, inner_layout.inner_grid_shape, inner_key)
        return ZarrShardingStore(outer, inner_layout)

    def sample_keys(self):
        return ["0.0", "0.1", "3.5", "7.4", "2.2"]


def run(coro):
    return asyncio.run(coro)


def test_index_layout_matches_spec():
    """Index at the end: 16 bytes per inner chunk + crc32c; offsets are absolute."""
    base = MemoryStore()
    store = ZarrShardingStore(base, make_layout())
    run(store.set_many([("0.0", b"abc"), ("1.1", b"defgh")]))
    shard = base._data["s/0/0"]
    n = 2 * 2
    assert len(shard) == 3 + 5 + 16 * n + 4
    index = np.frombuffer(shard[-(16 * n + 4) : -4], dtype="<u8").reshape(n, 2)
    assert index[0].tolist() == [0, 3]
    assert index[3].tolist() == [3, 5]
    assert (index[1] == EMPTY).all() and (index[2] == EMPTY).all()


def test_index_at_start_offsets_are_absolute():
    base = MemoryStore()
    store = ZarrShardingStore(base, make_layout("start", crc=False))
    run(store.set_many([("0.1", b"xyz")]))
    shard = base._data["s/0/0"]
    index = np.frombuffer(shard[: 16 * 4], dtype="<u8").reshape(4, 2)
    assert index[1].tolist() == [64, 3]
    assert shard[64:67] == b"xyz"


def test_corrupt_index_crc_names_the_shard():
    base = MemoryStore()
    store = ZarrShardingStore(base, make_layout())
    run(store.set("0.0", b"abc"))
    data = bytearray(base._data["s/0/0"])
    data[-10] ^= 0xFF
    base._data["s/0/0"] = bytes(data)
    store.invalidate()
    with pytest.raises(ChecksumError, match="s/0/0"):
        run(store.get("0.0"))


def test_truncated_shard_and_bad_entry():
    base = MemoryStore()
    store = ZarrShardingStore(base, make_layout())
    run(store.set("0.0", b"abcdef"))
    good = base._data["s/0/0"]
    base._data["s/0/0"] = good[:10]
    store.invalidate()
    with pytest.raises(CodecError, match="truncated.*s/0/0|s/0/0.*truncated"):
        run(store.get("0.0"))
    # an entry pointing past the end of the shard (with a valid crc32c over the bad index)
    layout = store.layout
    index = np.full((4, 2), EMPTY, dtype=np.uint64)
    index[0] = (1000, 6)
    base._data["s/0/0"] = good[:6] + layout.codec.encode_index(index, layout.shard_spec)
    for read in (lambda: store.get("0.0"), lambda: store.get_many([(k, None) for k in ["0.0", "0.1", "1.0", "1.1"]])):
        store.invalidate()
        with pytest.raises(CodecError, match="s/0/0"):
            run(read())


def test_whole_shard_read_is_one_request_and_partial_is_two():
    base = RecordingStore(MemoryStore())
    store = ZarrShardingStore(base, make_layout())
    keys = [inner_key((i, j)) for i in range(2) for j in range(2)]
    run(store.set_many([(k, k.encode()) for k in keys]))
    assert base.count("get") == 0, "a batch holding every inner chunk must not read the shard"
    assert base.count("set") == 1
    base.reset()
    store.invalidate()
    assert run(store.get_many([(k, None) for k in keys])) == [k.encode() for k in keys]
    assert base.count("get") == 1
    base.reset()
    store.invalidate()
    assert run(store.get("1.1")) == b"1.1"
    assert base.count("get") == 2
    base.reset()
    assert run(store.get("0.1")) == b"0.1"
    assert base.count("get") == 1, "the index is cached"


def test_partial_batch_merges_and_empty_shard_is_deleted():
    base = RecordingStore(MemoryStore())
    store = ZarrShardingStore(base, make_layout())
    run(store.set_many([("0.0", b"a"), ("0.1", b"b")]))
    run(store.set("1.0", b"c"))
    assert run(store.get_many([("0.0", None), ("0.1", None), ("1.0", None)])) == [b"a", b"b", b"c"]
    run(store.set_many([("0.0", None), ("0.1", None), ("1.0", None)]))
    assert "s/0/0" not in base.base._data
    assert base.count("delete") == 1


def test_edge_shard_complete_batch_needs_no_read():
    """The last shard along axis 0 holds only one row of inner chunks inside the array."""
    base = RecordingStore(MemoryStore())
    layout = make_layout()  # inner grid (5, 3), 2x2 inner chunks per shard
    store = ZarrShardingStore(base, layout)
    assert layout.valid_in_shard((2, 1)) == [0]
    run(store.set("4.2", b"edge"))
    assert base.count("get") == 0
    assert run(store.get("4.2")) == b"edge"


def test_keys_outside_the_grid_are_refused():
    store = ZarrShardingStore(MemoryStore(), make_layout())
    for key in ["5.0", "0.3", "0", "a.b", "0.0.0"]:
        with pytest.raises(InvalidKeyError):
            run(store.get(key))


def test_sharding_codec_config_round_trips_exactly():
    for config in [
        {"name": "sharding_indexed", "configuration": {"chunk_shape": [2, 3], "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}], "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]}},
        {"name": "sharding_indexed", "configuration": {"chunk_shape": [4], "codecs": [{"name": "bytes"}], "index_codecs": [{"name": "bytes", "configuration": {"endian": "big"}}], "index_location": "start"}},
    ]:
        assert codec_from_config(config).to_config() == config
    codec = codec_from_config(config)
    with pytest.raises(Exception, match="divide"):
        codec.validate(ChunkSpec((6,), np.dtype("uint8"), 0))


def test_tagged_reads_are_declared_over_a_base_whose_replies_carry_versions():
    """A shard's generation is the tag of the reply its index came in: declared over HTTP and
    S3 (``versions_in_replies``), not over a store that asks it apart (memory, files), nor by
    an adapter nested in another (whose shard's generation the outer one asks apart)."""

    class Replying(MemoryStore):
        versions_in_replies = True

    assert ZarrShardingStore(MemoryStore(), make_layout()).tagged_reads is None
    outer = ZarrShardingStore(Replying(), make_layout(shape=(16, 18), shard=(8, 12), inner=(4, 6)))
    assert outer.tagged_reads is outer
    inner_layout = make_layout("start", shape=(16, 18), shard=(4, 6), inner=(2, 3))
    inner_layout = ShardLayout(inner_layout.codec, inner_layout.shard_spec, inner_layout.inner_grid_shape, inner_key)
    assert ZarrShardingStore(outer, inner_layout).tagged_reads is None
