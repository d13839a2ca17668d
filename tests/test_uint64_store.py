"""The sharded uint64 store adapter: the Store battery, layout facts, request counts, bad input."""

from __future__ import annotations

import asyncio
import gzip
import struct

import numpy as np
import pytest

from shardstore.errors import CodecError, ConflictError, InvalidKeyError, MetadataError, UnsupportedFeatureError
from shardstore.formats.precomputed.kv import open_kv
from shardstore.sharding._uint64_assemble import assemble_shard
from shardstore.sharding._uint64_format import ShardingSpec
from shardstore.sharding.morton import compressed_morton, compressed_morton_bits
from shardstore.sharding.uint64 import Uint64ShardedStore, parse_uint64_key
from shardstore.store import LocalStore, MemoryStore, RecordingStore
from shardstore.testing import StoreTests

SAMPLE_KEYS = ["0", "1", "17", "1234567", "18446744073709551615", "170"]


def spec(**kw) -> ShardingSpec:
    d = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "murmurhash3_x86_128", "preshift_bits": 0,
         "minishard_bits": 2, "shard_bits": 1, "minishard_index_encoding": "raw", "data_encoding": "raw"}
    d.update(kw)
    return ShardingSpec.from_json(d)


def run(coro):
    return asyncio.run(coro)


class TestUint64OverMemory(StoreTests):
    @pytest.fixture
    def store(self):
        return Uint64ShardedStore(MemoryStore(), spec())

    def sample_keys(self):
        return SAMPLE_KEYS


class TestUint64OverLocalGzip(StoreTests):
    """gzip minishard indexes and gzip values, identity hash with a preshift, over files."""

    @pytest.fixture
    def store(self, tmp_path):
        s = spec(hash="identity", preshift_bits=1, minishard_bits=3, shard_bits=2,
                 minishard_index_encoding="gzip", data_encoding="gzip")
        return Uint64ShardedStore(LocalStore(tmp_path / "root"), s)

    def make_read_only(self, store):
        return Uint64ShardedStore(LocalStore(store.base.root, read_only=True), store.spec)

    def sample_keys(self):
        return SAMPLE_KEYS


class TestUint64OneShardNoMinishards(StoreTests):
    """shard_bits 0 and minishard_bits 0: everything in one minishard of ``0.shard``."""

    @pytest.fixture
    def store(self):
        return Uint64ShardedStore(MemoryStore(), spec(minishard_bits=0, shard_bits=0))

    def sample_keys(self):
        return SAMPLE_KEYS


# --------------------------------------------------------------------------- spec facts


def test_murmurhash_reference_values():
    s = spec(minishard_bits=0, shard_bits=0)
    assert [s.hash_key(k) for k in (0, 1, 2)] == [0x4772B084E028AE41, 0xE8BD67D616D4CE9A, 0xD62F9CD21B013F5A]


def test_locate_worked_examples():
    assert spec(preshift_bits=1, minishard_bits=3, shard_bits=2).locate(143) == (0, 7)
    assert spec(hash="identity", preshift_bits=2, minishard_bits=4, shard_bits=3).locate(143) == (2, 3)
    assert spec(preshift_bits=64, hash="identity", minishard_bits=3, shard_bits=3).locate(2**64 - 1) == (0, 0)


def test_shard_names():
    assert spec(shard_bits=5).shard_name(3) == "03"
    assert spec(shard_bits=4).shard_name(11) == "b"
    assert spec(shard_bits=0).shard_name(0) == "0"
    assert spec(shard_bits=9).shard_name(0x1AB) == "1ab"
    s = spec(shard_bits=5)
    assert s.parse_shard_name("03") == 3
    assert s.parse_shard_name("3") is None and s.parse_shard_name("20") is None and s.parse_shard_name("0A") is None


def test_compressed_morton():
    grid = (5, 9, 3)
    assert compressed_morton((3, 5, 1), grid) == 143
    assert [compressed_morton(c, grid) for c in [(1, 0, 0), (0, 1, 0), (0, 0, 1), (4, 8, 2)]] == [1, 2, 4, 352]
    assert compressed_morton((0, 0, 0), (1, 1, 1)) == 0
    assert compressed_morton((1, 0, 2), (2, 1, 4)) == 0b101  # y has no bits: x0, z0, z1
    assert compressed_morton_bits(grid) == 9
    codes = {compressed_morton((x, y, z), grid) for x in range(5) for y in range(9) for z in range(3)}
    assert len(codes) == 5 * 9 * 3 and max(codes) < 2**9
    with pytest.raises(ValueError):
        compressed_morton((5, 0, 0), grid)


@pytest.mark.parametrize("bad", [
    {"hash": "md5"}, {"minishard_bits": 65}, {"shard_bits": -1}, {"preshift_bits": "1"},
    {"data_encoding": "zstd"}, {"@type": "neuroglancer_uint64_sharded_v2"}, {"extra": 1}, {"shard_bits": True},
])
def test_bad_spec_is_metadata_error(bad):
    with pytest.raises(MetadataError):
        spec(**bad)


def test_spec_json_roundtrip():
    s = spec(minishard_index_encoding="gzip")
    assert ShardingSpec.from_json(s.to_json()) == s


@pytest.mark.parametrize("bad", ["-1", "01", "1.0", "18446744073709551616", "abc", "", " 1", "٣"])
def test_bad_keys(bad):
    with pytest.raises(InvalidKeyError):
        parse_uint64_key(bad)


def test_shard_layout_matches_spec():
    """Shard index relative to its end; minishard index delta-coded; values sorted by key."""
    s = spec(hash="identity", minishard_bits=1, shard_bits=0)
    base = MemoryStore()
    store = Uint64ShardedStore(base, s)
    run(store.set_many([("4", b"dddd"), ("2", b"bb"), ("3", b"ccc"), ("8", b"")]))
    assert sorted(base._data) == ["0.shard"]
    data = base._data["0.shard"]
    index = np.frombuffer(data[:32], "<u8").reshape(2, 2)
    # minishard 0: keys 2, 4, 8 (even), values first, then the index
    assert bytes(data[32:38]) == b"bbdddd"
    s0, e0 = index[0]
    mi = np.frombuffer(data[32 + s0 : 32 + e0], "<u8").reshape(3, -1)
    assert mi[0].tolist() == [2, 2, 4] and mi[2].tolist() == [2, 4, 0] and mi[1].tolist() == [0, 0, 0]
    s1, e1 = index[1]
    assert bytes(data[32 + e0 : 32 + e0 + 3]) == b"ccc"
    mi1 = np.frombuffer(data[32 + s1 : 32 + e1], "<u8").reshape(3, -1)
    assert mi1.tolist() == [[3], [e0], [3]]  # start relative to the shard index end


# --------------------------------------------------------------------------- writes


def test_partial_batches_merge_and_never_drop_keys():
    base = MemoryStore()
    store = Uint64ShardedStore(base, spec(shard_bits=0))
    run(store.set_many([(str(k), b"a%d" % k) for k in range(100)]))
    run(store.set_many([("5", b"new"), ("7", None), ("1000", b"x")]))
    got = run(store.get_many([(str(k), None) for k in [*range(100), 1000]]))
    expected = [b"a%d" % k for k in range(100)] + [b"x"]
    expected[5], expected[7] = b"new", None
    assert got == expected
    run(store.set_many([(str(k), None) for k in [*range(100), 1000]]))
    assert base._data == {}  # a shard left empty is deleted


def test_one_rewrite_per_shard_per_batch():
    rec = RecordingStore(MemoryStore())
    s = spec(shard_bits=2)
    store = Uint64ShardedStore(rec, s)
    keys = list(range(500))
    run(store.set_many([(str(k), b"v") for k in keys]))
    shards = {s.shard_name(s.locate(k)[0]) + ".shard" for k in keys}
    assert rec.count("set") == len(shards) == 4
    assert rec.count("get") == 4  # one versioned read per shard (all missing here)
    rec.reset()
    run(store.set_many([(str(k), b"w") for k in range(0, 500, 7)]))
    assert rec.count("set") == 4 and rec.count("get") == 4


def test_complete_shard_writes_without_reading():
    rec = RecordingStore(MemoryStore())
    s = spec(hash="identity", minishard_bits=2, shard_bits=2)  # keys 0..15: 4 shards of 4 keys
    store = Uint64ShardedStore(rec, s, complete_shard=lambda shard, keys: keys == {shard * 4 + i for i in range(4)})
    run(store.set_many([(str(k), b"%d" % k) for k in range(16)]))
    assert rec.count("get") == 0 and rec.count("set") == 4
    rec.reset()
    run(store.set_many([("1", b"x")]))  # partial: read, merge
    assert rec.count("get") == 1 and rec.count("set") == 1
    assert run(store.get_many([(str(k), None) for k in range(4)])) == [b"0", b"x", b"2", b"3"]


def test_conflict_when_another_writer_changed_the_shard():
    base = MemoryStore()
    s = spec(shard_bits=0)
    a = Uint64ShardedStore(base, s)
    b = Uint64ShardedStore(base, s)
    run(a.set("1", b"one"))

    async def racing():
        real = base.get_versioned

        async def slow_versioned(key, br=None):
            got = await real(key, br)
            del base.get_versioned  # once
            await b.set("2", b"two")  # another writer (another process: its own lock) wins
            return got

        base.get_versioned = slow_versioned  # type: ignore[method-assign]
        await a.set("3", b"three")

    # by default the lost read-modify-write is redone on top of the other writer's shard
    run(racing())
    assert run(a.get_many([("1", None), ("2", None), ("3", None)])) == [b"one", b"two", b"three"]
    # without retries the loser raises ConflictError naming the shard, and writes nothing
    base.retry_conflicts = 0
    run(a.set("1", b"one"))
    with pytest.raises(ConflictError, match="0.shard"):
        run(racing())
    assert run(a.get_many([("1", None), ("2", None), ("3", None)])) == [b"one", b"two", b"three"]


def test_concurrent_batches_same_shard_keep_everything():
    store = Uint64ShardedStore(MemoryStore(), spec(shard_bits=0))

    async def go():
        await asyncio.gather(*(store.set_many([(str(k), b"%d" % k)]) for k in range(50)))
        return await store.get_many([(str(k), None) for k in range(50)])

    assert run(go()) == [b"%d" % k for k in range(50)]


def test_legacy_pair_layout_is_read_not_written():
    s = spec(minishard_bits=3, shard_bits=1, minishard_index_encoding="gzip", data_encoding="gzip")
    values = {k: bytes([k % 256]) * (k % 37) for k in range(300)}
    data: dict[str, bytes] = {}
    run(Uint64ShardedStore(MemoryStore(data), s).set_many([(str(k), v) for k, v in values.items()]))
    legacy: dict[str, bytes] = {}
    for name, shard in data.items():
        stem = name[: -len(".shard")]
        legacy[stem + ".index"] = shard[: s.index_size]
        legacy[stem + ".data"] = shard[s.index_size :]
    store = Uint64ShardedStore(MemoryStore(legacy), s)
    assert run(store.get_many([(str(k), None) for k in values])) == list(values.values())
    assert sorted(int(k) for k in run(_list(store))) == sorted(values)
    assert run(store.get("5", _range(1, 3))) == values[5][1:3]
    with pytest.raises(UnsupportedFeatureError, match="legacy"):
        run(store.set("1", b"x"))


async def _list(store):
    return [k async for k in store.list_prefix("")]


def _range(a, b):
    from shardstore.store import RangeBR

    return RangeBR(a, b)


# --------------------------------------------------------------------------- tagged reads


class _Replying(MemoryStore):
    """A memory store whose versioned reads count as tags of their replies (as HTTP's and S3's
    ETags do): the adapter over it declares tagged reads."""

    versions_in_replies = True


def test_tagged_reads_give_each_value_the_generation_of_its_shard() -> None:
    """``get_many_tagged`` (the decoded-chunk cache's reads that need no HEAD first): each
    value with its shard's generation, as ``checked_generation`` tells it (``MISSING`` for a
    shard not there, the shard's for a key absent from it); a rewritten shard's values come
    with its new one. Declared only over a base whose replies carry versions."""
    from shardstore.store.base import MISSING

    assert Uint64ShardedStore(MemoryStore(), spec()).tagged_reads is None
    s = Uint64ShardedStore(_Replying(), spec(shard_bits=2))
    assert s.tagged_reads is s
    stored = [str(k * 7919) for k in range(6)]
    run(s.set_many([(k, b"v" + k.encode()) for k in stored]))
    absent = [str(k * 7919) for k in range(6, 60)]
    keys = stored + absent
    values, tags = run(s.get_many_tagged(keys))
    assert values == [b"v" + k.encode() for k in stored] + [None] * len(absent)
    assert tags == [run(s.checked_generation(k)) for k in keys]
    assert MISSING in tags and len({t for t in tags if t is not MISSING}) > 1  # (shards missing and present)
    run(s.set(stored[0], b"new"))
    again, new_tags = run(s.get_many_tagged(keys))
    assert again[0] == b"new" and again[1:] == values[1:]
    assert new_tags == [run(s.checked_generation(k)) for k in keys]
    shard = s.shard_file(int(stored[0]))
    changed = [t != u for t, u in zip(tags, new_tags)]
    assert changed == [s.shard_file(int(k)) == shard for k in keys]


def test_values_are_read_at_the_generation_their_spans_were_located_at(monkeypatch: pytest.MonkeyPatch) -> None:
    """A read that located its values in one version of a shard, while another read of the
    same adapter loaded the index of a newer one, reads them at the version it located them
    in (then, as that is gone, again from the new index): never the old spans' bytes out of
    the new version (the values moved there)."""
    base = _Replying()
    s = Uint64ShardedStore(base, spec(shard_bits=0))
    run(s.set_many([("1", b"a" * 10), ("2", b"b" * 10)]))
    real = Uint64ShardedStore._minishards
    raced: list[bool] = []

    async def racing(self: Uint64ShardedStore, stem: str, st, wanted: set[int]):
        found = await real(self, stem, st, wanted)
        if not raced:
            raced.append(True)
            # another handle rewrites the shard (the values move), and another read through
            # this adapter loads its new index before the first one reads its values
            await Uint64ShardedStore(base, self.spec).set_many([("1", b"x" * 30), ("2", b"y" * 30)])
            (shard, m), = self.spec.locate_many([1])
            await self._locate_shard(stem, [(0, 1, m)])
        return found

    monkeypatch.setattr(Uint64ShardedStore, "_minishards", racing)
    assert run(s.get_many([("1", None), ("2", None)])) == [b"x" * 30, b"y" * 30]
    assert raced == [True]


# --------------------------------------------------------------------------- request counts


@pytest.mark.parametrize("index_encoding", ["raw", "gzip"])
def test_point_read_request_counts(index_encoding):
    s = spec(minishard_bits=6, shard_bits=4, minishard_index_encoding=index_encoding)
    data: dict[str, bytes] = {}
    run(Uint64ShardedStore(MemoryStore(data), s).set_many([(str(k * 7919), b"x" * (k % 50)) for k in range(3000)]))
    rec = RecordingStore(MemoryStore(data))
    store = Uint64ShardedStore(rec, s)
    assert run(store.get(str(7919 * 5))) == b"x" * 5
    assert rec.count("get") == 3  # shard index, minishard index, value
    rec.reset()
    assert run(store.get(str(7919 * 5))) == b"x" * 5
    assert rec.count("get") == 1  # warm: the value only
    rec.reset()
    # another key of an already-seen minishard: 1; a new minishard of a seen shard: 2
    assert run(store.get("123456789")) is None and rec.count("get") <= 2
    rec.reset()
    # a batch of keys spread over every shard: per shard at most index + minishards + values
    keys = [str(k * 7919) for k in range(0, 3000, 3)]
    store.invalidate()
    got = run(store.get_many([(k, None) for k in keys]))
    assert got == [b"x" * (int(k) // 7919 % 50) for k in keys]
    assert rec.count("get") <= 3 * 16


def test_point_read_request_counts_local(tmp_path):
    s = spec(minishard_bits=6, shard_bits=4, minishard_index_encoding="gzip")
    run(Uint64ShardedStore(LocalStore(tmp_path), s).set_many([(str(k), b"v%d" % k) for k in range(2000)]))
    rec = RecordingStore(LocalStore(tmp_path, read_only=True))
    store = Uint64ShardedStore(rec, s)
    assert run(store.get("777")) == b"v777" and rec.count("get") == 3
    rec.reset()
    assert run(store.get("777")) == b"v777" and rec.count("get") == 1
    # another process rewrites the shard: the cache notices the new generation
    run(Uint64ShardedStore(LocalStore(tmp_path), s).set("777", b"changed"))
    rec.reset()
    assert run(store.get("777")) == b"changed" and rec.count("get") == 3


def test_large_shard_index_read_by_entries():
    """minishard_bits 14: a 256 KiB shard index is not read whole for a point read."""
    s = spec(minishard_bits=14, shard_bits=0)
    data: dict[str, bytes] = {}
    run(Uint64ShardedStore(MemoryStore(data), s).set_many([(str(k), b"%d" % k) for k in range(100)]))
    rec = RecordingStore(MemoryStore(data))
    store = Uint64ShardedStore(rec, s)
    assert run(store.get("42")) == b"42"
    assert [r.byte_range.end - r.byte_range.start for r in rec.requests][0] == 16
    assert sorted(int(k) for k in run(_list(store))) == list(range(100))


# --------------------------------------------------------------------------- bad input


def _shard(s: ShardingSpec, values: dict[int, bytes]) -> bytearray:
    return bytearray(b"".join(bytes(p) for p in assemble_shard(s, values)))


def _corrupt_store(s: ShardingSpec, shard: bytes | bytearray) -> Uint64ShardedStore:
    return Uint64ShardedStore(MemoryStore({s.shard_name(0) + ".shard": bytes(shard)}), s)


BAD_SPEC = dict(hash="identity", minishard_bits=2, shard_bits=0)


def test_shard_shorter_than_its_index():
    s = spec(**BAD_SPEC)
    store = _corrupt_store(s, _shard(s, {1: b"abc"})[:40])
    with pytest.raises(CodecError, match=r"'0\.shard'.*shorter than its 64-byte shard index"):
        run(store.get("1"))
    with pytest.raises(CodecError, match=r"0\.shard"):
        run(store.set("2", b"x"))  # a merge refuses it too: never silently dropped


@pytest.mark.parametrize("entry", [(0, 10**6), (2**63, 2**63 + 24), (50, 10), (2**64 - 10, 2**64 - 1)])
def test_minishard_index_range_out_of_bounds(entry):
    s = spec(**BAD_SPEC)
    shard = _shard(s, {1: b"abc"})
    struct.pack_into("<QQ", shard, 16, *entry)
    store = _corrupt_store(s, shard)
    with pytest.raises(CodecError, match=r"'0\.shard'.*minishard 1"):
        run(store.get("1"))
    with pytest.raises(CodecError, match=r"0\.shard"):
        run(store.set("2", b"x"))


def test_corrupt_gzip_minishard_index():
    s = spec(**BAD_SPEC, minishard_index_encoding="gzip")
    shard = _shard(s, {1: b"abc"})
    start, end = struct.unpack_from("<QQ", shard, 16)
    shard[64 + start + 12] ^= 0xFF
    with pytest.raises(CodecError, match=r"'0\.shard', minishard 1.*gzip"):
        run(_corrupt_store(s, shard).get("1"))
    # a gzip bomb in the index is refused without inflating it
    bomb = gzip.compress(b"\0" * (50 << 20))
    shard2 = _shard(s, {1: b"abc"})
    start, end = struct.unpack_from("<QQ", shard2, 16)
    shard2 = shard2[: 64 + start] + bomb
    struct.pack_into("<QQ", shard2, 16, start, start + len(bomb))
    with pytest.raises(CodecError, match=r"0\.shard"):
        run(_corrupt_store(s, shard2).get("1"))


def test_minishard_index_not_multiple_of_24():
    s = spec(**BAD_SPEC)
    shard = _shard(s, {1: b"abc"})
    start, end = struct.unpack_from("<QQ", shard, 16)
    struct.pack_into("<QQ", shard, 16, start, end - 1)
    with pytest.raises(CodecError, match=r"'0\.shard', minishard 1.*multiple of 24"):
        run(_corrupt_store(s, shard).get("1"))


@pytest.mark.parametrize("row,value", [(2, 2**62), (1, 2**63), (2, 2**64 - 1), (1, 10**6)])
def test_hostile_value_sizes_and_offsets(row, value):
    s = spec(**BAD_SPEC)
    shard = _shard(s, {1: b"abc"})
    start, end = struct.unpack_from("<QQ", shard, 16)
    struct.pack_into("<Q", shard, 64 + start + 8 * row, value)
    store = _corrupt_store(s, shard)
    with pytest.raises(CodecError, match=r"'0\.shard'.*(key 1|minishard 1)"):
        run(store.get("1"))
    with pytest.raises(CodecError, match=r"'0\.shard'.*(key 1|minishard 1)"):
        run(store.set("2", b"x"))


def test_corrupt_gzip_value():
    s = spec(**BAD_SPEC, data_encoding="gzip")
    shard = _shard(s, {1: b"\x1f\x8b not gzip"})
    with pytest.raises(CodecError, match=r"'0\.shard': value of key 1"):
        run(_corrupt_store(s, shard).get("1"))


def test_open_kv_bad_info(tmp_path):
    (tmp_path / "info").write_text("{not json")
    with pytest.raises(MetadataError, match="info"):
        open_kv(tmp_path)
    (tmp_path / "info").write_text('{"@type": "neuroglancer_multiscale_volume", "scales": []}')
    with pytest.raises(MetadataError, match="volume"):
        open_kv(tmp_path)
    (tmp_path / "info").write_text('{"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity"}')
    with pytest.raises(MetadataError, match="preshift_bits"):
        open_kv(tmp_path)
    with pytest.raises(MetadataError, match="no sharding spec"):
        open_kv(tmp_path / "nothing")


def test_vectorized_murmurhash_matches_mmh3():
    import mmh3

    from shardstore.sharding._uint64_format import murmurhash3_x86_128_low64

    rng = np.random.default_rng(0)
    keys = np.concatenate([rng.integers(0, 2**64, 5000, dtype=np.uint64, endpoint=False),
                           np.array([0, 1, 2, 2**32 - 1, 2**32, 2**64 - 1], dtype=np.uint64)])
    ref = [mmh3.hash128(struct.pack("<Q", k), 0, False, False) & (2**64 - 1) for k in keys.tolist()]
    assert murmurhash3_x86_128_low64(keys).tolist() == ref
    for h in ("identity", "murmurhash3_x86_128"):
        for pre, mb, sb in [(0, 6, 4), (3, 0, 0), (63, 2, 5), (0, 30, 34), (1, 64, 0), (64, 3, 3)]:
            s = spec(hash=h, preshift_bits=pre, minishard_bits=mb, shard_bits=sb)
            ks = keys.tolist()[:300]
            assert s.locate_many(ks) == [s.locate(k) for k in ks]


@pytest.mark.parametrize("row,value", [(0, 2**64 - 1), (2, 2**63), (1, 2**63)])
@pytest.mark.parametrize("encoding", ["raw", "gzip"])
def test_batch_decode_names_the_bad_minishard(row, value, encoding):
    """Many minishards decoded together: a hostile one is still named."""
    s = spec(hash="identity", minishard_bits=3, shard_bits=0, minishard_index_encoding="raw")
    values = {k: b"v%d" % k for k in range(64)}
    shard = _shard(s, values)
    start, end = struct.unpack_from("<QQ", shard, 16 * 5)
    struct.pack_into("<Q", shard, 128 + start + 8 * 8 * row + 8, value)  # second entry of minishard 5
    if encoding == "gzip":  # re-encode every minishard index with gzip
        s = spec(hash="identity", minishard_bits=3, shard_bits=0, minishard_index_encoding="gzip")
        index = np.frombuffer(bytes(shard[:128]), "<u8").reshape(8, 2)
        body = bytearray(shard[128:])  # values stay where they are; gzipped indexes appended
        new_index = np.zeros((8, 2), "<u8")
        for m in range(8):
            a, b = (int(x) for x in index[m])
            blob = gzip.compress(bytes(shard[128 + a : 128 + b]))
            new_index[m] = (len(body), len(body) + len(blob))
            body += blob
        shard = bytearray(new_index.tobytes()) + body
    store = _corrupt_store(s, shard)
    with pytest.raises(CodecError, match=r"'0\.shard', minishard 5"):
        run(store.get_many([(str(k), None) for k in range(64)]))
    # the same shard with minishard 5's index intact reads fine through the batch decoder
    if row == 0:
        ok = _corrupt_store(s, _shard(s, values)) if encoding == "raw" else None
        if ok is not None:
            assert run(ok.get_many([(str(k), None) for k in range(64)])) == list(values.values())


@pytest.mark.parametrize("index_encoding", ["raw", "gzip"])
@pytest.mark.parametrize("minishard_bits", [0, 1, 3, 6])
@pytest.mark.parametrize("n", [1, 2, 5, 300])
def test_a_shard_assembled_at_once_is_the_streamed_one_byte_for_byte(index_encoding: str, minishard_bits: int, n: int) -> None:
    """``assemble_shard`` (NumPy over the whole batch) lays a shard out as ``ShardBuilder``
    (the streamed write, value by value) does: keys from 0 to 2^64-1, empty values included."""
    from shardstore.sharding._uint64_assemble import ShardBuilder

    rng = np.random.default_rng(n * 10 + minishard_bits)
    spec = ShardingSpec(0, "murmurhash3_x86_128", minishard_bits, 2, index_encoding, "raw")
    keys = [0, 2**64 - 1, *rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True).tolist()][:n]
    values = {k: rng.integers(0, 256, int(rng.integers(0, 50)), dtype=np.uint8).tobytes() for k in keys}
    minishard_of = {k: m for k, (_, m) in zip(values, spec.locate_many(list(values)))}
    builder = ShardBuilder(spec)
    streamed: list[bytes | memoryview] = []
    for k in sorted(values, key=lambda k: (minishard_of[k], k)):
        streamed.extend(builder.add(k, minishard_of[k], values[k]))
    ends = builder.finish()
    assert ends is not None
    whole = assemble_shard(spec, values)
    assert whole is not None
    assert b"".join(bytes(p) for p in whole) == ends[0] + b"".join(bytes(p) for p in streamed) + ends[1]
