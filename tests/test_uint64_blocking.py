"""Blocking (event-loop-free) reads of the sharded uint64 adapter: they agree with the async
path, follow rewrites of the shards, refuse corrupt shards with the same errors, and are
safe from many threads at once."""

from __future__ import annotations

import asyncio
import gzip
import os
import struct
import threading

import numpy as np
import pytest

import shardstore
from shardstore.errors import CodecError
from shardstore.formats.precomputed import kv as kv_module
from shardstore.formats.precomputed.kv import ShardedKV
from shardstore.sharding._uint64_assemble import assemble_shard
from shardstore.sharding._uint64_format import ShardingSpec
from shardstore.sharding.uint64 import Uint64ShardedStore
from shardstore.store import LocalStore, MemoryStore, RecordingStore
from shardstore.store.base import OffsetBR, RangeBR, SuffixBR, slice_range
from shardstore.store.wrappers import PrefixStore


def spec(**kw) -> ShardingSpec:
    d = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "murmurhash3_x86_128", "preshift_bits": 0,
         "minishard_bits": 3, "shard_bits": 2, "minishard_index_encoding": "raw", "data_encoding": "raw"}
    d.update(kw)
    return ShardingSpec.from_json(d)


def run(coro):
    return asyncio.run(coro)


SPECS = {
    "murmur-raw": spec(),
    "identity-gzip": spec(hash="identity", preshift_bits=2, minishard_index_encoding="gzip", data_encoding="gzip"),
    "one-minishard": spec(minishard_bits=0, shard_bits=0, minishard_index_encoding="gzip"),
    "many-minishards": spec(hash="identity", minishard_bits=6, shard_bits=1),
}


def _values(n: int = 300, seed: int = 0) -> dict[int, bytes]:
    rng = np.random.default_rng(seed)
    keys = {0, 2**64 - 1, *(int(k) for k in rng.integers(0, 2**64, n, dtype=np.uint64))}
    return {k: rng.bytes(int(rng.integers(0, 300))) for k in sorted(keys)}


def _base(kind: str, tmp_path):
    if kind == "memory":
        return MemoryStore()
    if kind == "prefix":
        return PrefixStore(LocalStore(tmp_path / "root"), "a/b")
    return LocalStore(tmp_path / "root")


@pytest.mark.parametrize("name", sorted(SPECS))
@pytest.mark.parametrize("kind", ["memory", "local", "prefix"])
def test_sync_reads_agree_with_async_reads(name, kind, tmp_path):
    s = SPECS[name]
    store = Uint64ShardedStore(_base(kind, tmp_path), s)
    values = _values()
    run(store.set_many_ids(list(values.items())))
    assert store.sync_reads is store
    read = store.get_sync
    now = store.sync_ids
    assert now is not None
    absent = [1, 12345, 2**63]
    keys = [*values, *absent]
    expected = run(store.get_many_ids(keys))
    assert expected[: len(values)] == list(values.values())
    assert [read(str(k)) for k in keys] == expected
    assert [now.get_id(k) for k in keys] == expected
    assert [now.locate(k) is not None for k in keys] == [k in values for k in keys]
    assert now.get_many_ids(keys) == expected
    k = next(k for k, v in values.items() if len(v) > 20)
    for br in (RangeBR(3, 17), RangeBR(5, 10**6), OffsetBR(7), SuffixBR(4), SuffixBR(10**6), RangeBR(2, 2)):
        assert read(str(k), br) == run(store.get(str(k), br)) == slice_range(values[k], br), br
        assert read("1", br) is None
    # a fresh adapter (cold cache) reads the same through the blocking path
    cold = Uint64ShardedStore(store.base, s)
    assert [cold.get_sync(str(k)) for k in keys] == expected


def test_missing_shards_and_empty_store(tmp_path):
    store = Uint64ShardedStore(LocalStore(tmp_path / "empty"), spec())
    read = store.get_sync
    assert read("0") is None and read("18446744073709551615") is None
    assert store.sync_ids.locate(5) is None


def test_no_sync_reads_over_a_base_without_them():
    store = Uint64ShardedStore(RecordingStore(MemoryStore()), spec())
    assert store.sync_reads is None and store.sync_ids is None


def test_one_reader_follows_rewrites_by_other_writers(tmp_path):
    """The cached indexes are checked against the shard's generation on every read: a reader
    (and its adapter) made before another writer rewrote the shards reads the new values."""
    s = spec(shard_bits=0, minishard_index_encoding="gzip")
    a = Uint64ShardedStore(LocalStore(tmp_path / "kv"), s)
    b = Uint64ShardedStore(LocalStore(tmp_path / "kv"), s)
    run(a.set_many_ids([(k, b"old%d" % k) for k in range(50)]))
    read = a.get_sync
    assert read("7") == b"old7"  # indexes now cached in a
    # another adapter rewrites the shard: every value moves (longer values before it)
    run(b.set_many_ids([(k, b"new-and-longer-%d" % k) for k in range(0, 50, 2)] + [(3, None)]))
    assert read("7") == b"old7" and read("8") == b"new-and-longer-8" and read("3") is None
    assert read("0") == b"new-and-longer-0"
    # a rewrite behind the store's back (file replaced): noticed too
    path = os.path.join(tmp_path, "kv", "0.shard")
    shard = b"".join(bytes(p) for p in assemble_shard(s, {7: b"replaced"}))
    with open(path + ".tmp", "wb") as f:
        f.write(shard)
    os.replace(path + ".tmp", path)
    assert read("7") == b"replaced" and read("8") is None
    # and a deleted shard reads as missing
    os.unlink(path)
    assert read("7") is None


def _file_events(monkeypatch: pytest.MonkeyPatch, cold: bool) -> list[tuple[str, int]]:
    """``(advise | read, fd)`` of every ``posix_fadvise`` and ``pread`` of the open shard
    files, in order; ``cold``: every span reads as not in the page cache."""
    from shardstore.store import open_values

    events: list[tuple[str, int]] = []
    real_pread = os.pread
    monkeypatch.setattr(open_values.os, "posix_fadvise", lambda fd, offset, length, advice: events.append(("advise", fd)))
    monkeypatch.setattr(open_values.os, "pread",
                        lambda fd, n, offset: (events.append(("read", fd)), real_pread(fd, n, offset))[1])
    monkeypatch.setattr(open_values, "_uncached", lambda fd, offset: cold)
    return events


def _runs(events: list[tuple[str, int]]) -> list[tuple[str, set[int]]]:
    """The events as runs of one kind: ``(kind, the files of the run)``."""
    runs: list[tuple[str, set[int]]] = []
    for kind, fd in events:
        if runs and runs[-1][0] == kind:
            runs[-1][1].add(fd)
        else:
            runs.append((kind, {fd}))
    return runs


def test_a_batch_over_a_cold_disk_asks_for_every_shards_spans_before_reading_any(tmp_path, monkeypatch):
    """A batch reads its shards side by side, step by step (their indexes, then their
    values): each step's spans of every shard file are advised to the kernel before the
    first of them is read, so on a cold disk they are in the disk's queue together (one
    shard after the other, or a thread per shard taking turns at the GIL, ran at 0.7 of
    tensorstore's rate). From the page cache nothing is advised. The values are those of
    the async path."""
    s = spec(shard_bits=3, minishard_index_encoding="gzip")
    base = LocalStore(tmp_path / "kv")
    values = _values(600)
    run(Uint64ShardedStore(base, s).set_many_ids(list(values.items())))
    keys = [*values, 1, 12345]
    expected = [*values.values(), None, None]
    assert run(Uint64ShardedStore(base, s).get_many_ids(keys)) == expected
    events = _file_events(monkeypatch, cold=True)
    assert Uint64ShardedStore(base, s).sync_ids.get_many_ids(keys) == expected
    runs = _runs(events)
    # the shard indexes (one span each: nothing to advise), then the minishard indexes of
    # all 8 files advised and read, then their values advised and read
    assert [kind for kind, _ in runs] == ["read", "advise", "read", "advise", "read"]
    assert all(len(fds) == 8 for _, fds in runs)
    events.clear()
    monkeypatch.setattr("shardstore.store.open_values._uncached", lambda fd, offset: False)
    assert Uint64ShardedStore(base, s).sync_ids.get_many_ids(keys) == expected
    assert events and all(kind == "read" for kind, _ in events)


def test_a_batch_holds_a_bounded_number_of_shard_files_open(tmp_path, monkeypatch):
    """A batch over more shards than ``_SHARDS_IN_STEP`` reads them in groups of at most that
    many open files (a get_many over thousands of shards must not run out of descriptors),
    and closes every one."""
    from shardstore.sharding import _uint64_read
    from shardstore.store import open_values

    s = spec(shard_bits=3)
    base = LocalStore(tmp_path / "kv")
    values = _values(600)
    run(Uint64ShardedStore(base, s).set_many_ids(list(values.items())))
    monkeypatch.setattr(_uint64_read, "_SHARDS_IN_STEP", 3)
    store = Uint64ShardedStore(base, s)
    reads = store.sync_ids
    open_now, peak = [0], [0]
    real_open, real_close = reads._open, open_values.FileVersion.close

    def counted_open(key: str):
        value = real_open(key)
        if value is not None:
            open_now[0] += 1
            peak[0] = max(peak[0], open_now[0])
        return value

    def counted_close(self) -> None:
        open_now[0] -= 1
        real_close(self)

    reads._open = counted_open
    monkeypatch.setattr(open_values.FileVersion, "close", counted_close)
    assert reads.get_many_ids(list(values)) == list(values.values())
    assert peak[0] == 3 and open_now[0] == 0


def test_a_corrupt_shard_in_a_batch_raises_naming_its_file_and_closes_every_file(tmp_path):
    s = spec(shard_bits=3)
    base = LocalStore(tmp_path / "kv")
    values = _values(600)
    run(Uint64ShardedStore(base, s).set_many_ids(list(values.items())))
    victim = sorted(os.listdir(tmp_path / "kv"))[3]
    with open(tmp_path / "kv" / victim, "r+b") as f:
        f.truncate(40)  # shorter than its shard index
    store = Uint64ShardedStore(base, s)
    fds = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    with pytest.raises(CodecError, match=rf"'{victim}'.*shorter than its"):
        store.sync_ids.get_many_ids(list(values))
    if fds is not None:
        assert len(os.listdir("/proc/self/fd")) == fds


def test_writes_through_the_same_adapter_are_seen_by_its_reader():
    store = Uint64ShardedStore(MemoryStore(), spec(shard_bits=0))
    run(store.set_many_ids([(k, b"a" * k) for k in range(1, 30)]))
    read = store.get_sync
    assert read("5") == b"aaaaa"
    run(store.set_many_ids([(1, b"much longer than before"), (5, b"five")]))
    assert read("5") == b"five" and read("1") == b"much longer than before" and read("6") == b"a" * 6


def test_legacy_index_data_pair(tmp_path):
    s = spec(hash="identity", shard_bits=1)
    values = {k: b"v%d" % k for k in range(40)}
    base = LocalStore(tmp_path / "legacy")
    for shard in (0, 1):
        part = {k: v for k, v in values.items() if s.locate(k)[0] == shard}
        data = b"".join(bytes(p) for p in assemble_shard(s, part))
        run(base.set(f"{shard}.index", data[: s.index_size]))
        run(base.set(f"{shard}.data", data[s.index_size :]))
    read = Uint64ShardedStore(base, s).get_sync
    assert [read(str(k)) for k in range(45)] == [values.get(k) for k in range(45)]


# --------------------------------------------------------------------------- bad input

BAD = {"hash": "identity", "minishard_bits": 2, "shard_bits": 0}


def _shard(s: ShardingSpec, values: dict[int, bytes]) -> bytearray:
    return bytearray(b"".join(bytes(p) for p in assemble_shard(s, values)))


def _read(s: ShardingSpec, shard: bytes | bytearray, tmp_path):
    base = LocalStore(tmp_path / "bad")
    run(base.set("0.shard", bytes(shard)))
    return Uint64ShardedStore(base, s).get_sync


def test_corrupt_shards_raise_codec_errors_naming_the_file(tmp_path):
    s = spec(**BAD)
    with pytest.raises(CodecError, match=r"'0\.shard'.*shorter than its 64-byte shard index"):
        _read(s, _shard(s, {1: b"abc"})[:40], tmp_path)("1")
    for entry in [(0, 10**6), (2**63, 2**63 + 24), (50, 10), (2**64 - 10, 2**64 - 1)]:
        shard = _shard(s, {1: b"abc"})
        struct.pack_into("<QQ", shard, 16, *entry)
        with pytest.raises(CodecError, match=r"'0\.shard'.*minishard 1"):
            _read(s, shard, tmp_path)("1")
    for row, value in [(2, 2**62), (1, 2**63), (2, 2**64 - 1), (1, 10**6)]:
        shard = _shard(s, {1: b"abc"})
        start, _ = struct.unpack_from("<QQ", shard, 16)
        struct.pack_into("<Q", shard, 64 + start + 8 * row, value)
        with pytest.raises(CodecError, match=r"'0\.shard'.*(key 1|minishard 1)"):
            _read(s, shard, tmp_path)("1")


def test_corrupt_gzip_index_and_value(tmp_path):
    s = spec(**BAD, minishard_index_encoding="gzip")
    shard = _shard(s, {1: b"abc"})
    start, _ = struct.unpack_from("<QQ", shard, 16)
    shard[64 + start + 12] ^= 0xFF
    with pytest.raises(CodecError, match=r"'0\.shard', minishard 1.*gzip"):
        _read(s, shard, tmp_path)("1")
    bomb = gzip.compress(b"\0" * (50 << 20))  # refused without inflating it
    shard = _shard(s, {1: b"abc"})
    start, _ = struct.unpack_from("<QQ", shard, 16)
    shard = shard[: 64 + start] + bomb
    struct.pack_into("<QQ", shard, 16, start, start + len(bomb))
    with pytest.raises(CodecError, match=r"0\.shard"):
        _read(s, shard, tmp_path)("1")
    s = spec(**BAD, data_encoding="gzip")
    with pytest.raises(CodecError, match=r"'0\.shard'.*key 1"):
        _read(s, _shard(s, {1: b"\x1f\x8b not gzip"}), tmp_path)("1")


def test_a_corrupt_shard_is_not_cached_as_good(tmp_path):
    s = spec(**BAD)
    good = _shard(s, {1: b"abc"})
    bad = bytearray(good)
    struct.pack_into("<QQ", bad, 16, 0, 10**6)
    base = LocalStore(tmp_path / "c")
    run(base.set("0.shard", bytes(bad)))
    read = Uint64ShardedStore(base, s).get_sync
    for _ in range(2):
        with pytest.raises(CodecError):
            read("1")
    run(base.set("0.shard", bytes(good)))
    assert read("1") == b"abc"


# --------------------------------------------------------------------------- threads


def test_concurrent_blocking_reads_with_a_tiny_cache(tmp_path):
    """Eight threads read through one adapter whose cache holds two shards and a few entries,
    so indexes are loaded, evicted and reloaded while other threads use them."""
    s = spec(minishard_bits=4, shard_bits=3, minishard_index_encoding="gzip")
    values = _values(2000, seed=3)
    writer = Uint64ShardedStore(LocalStore(tmp_path / "t"), s)
    run(writer.set_many_ids(list(values.items())))
    store = Uint64ShardedStore(LocalStore(tmp_path / "t"), s, cache_entries=64, cache_shards=2)
    read = store.get_sync
    keys = list(values)
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for i in rng.integers(0, len(keys), 400):
                k = keys[int(i)]
                assert read(str(k)) == values[k]
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    cache = store._cache
    assert len(cache._states) <= 2 and cache._cached == sum(st.n_entries for st in cache._states.values())


# --------------------------------------------------------------------------- mapping and volumes


@pytest.mark.parametrize("kind", ["local", "memory", "single-range"])
def test_sharded_kv_reads_without_the_event_loop(kind, tmp_path, monkeypatch):
    s = SPECS["identity-gzip"]
    store = Uint64ShardedStore(_base(kind, tmp_path), s)
    values = _values(200, seed=5)
    kv = ShardedKV(store)
    kv.update(values)

    def no_loop(*args, **kwargs):
        for a in args:
            if asyncio.iscoroutine(a):
                a.close()
        raise AssertionError("went through the event loop")

    monkeypatch.setattr(kv_module, "sync", no_loop)
    k = next(iter(values))
    assert kv[k] == values[k] and kv.get(12345) is None and k in kv and 12345 not in kv
    with pytest.raises(KeyError):
        kv[12345]
    if kind != "single-range":  # batches too, when the base reads many ranges in one call
        assert kv.get_many([*values, 12345]) == {**values, 12345: None}
    monkeypatch.undo()
    assert kv.get_many([*values, 12345]) == {**values, 12345: None}


@pytest.mark.parametrize("data_encoding", ["raw", "gzip"])
def test_sharded_volume_reads_agree_with_the_async_path(data_encoding, tmp_path, monkeypatch):
    sharding = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "murmurhash3_x86_128", "preshift_bits": 1,
                "minishard_bits": 2, "shard_bits": 2, "minishard_index_encoding": "gzip",
                "data_encoding": data_encoding}
    rng = np.random.default_rng(0)
    data = rng.integers(0, 2**16, (37, 29, 21, 2), dtype=np.uint16)
    a = shardstore.precomputed.create(str(tmp_path / "vol"), data_type="uint16", num_channels=2, scales=[
        {"size": [37, 29, 21], "chunk_size": [8, 8, 4], "voxel_offset": [-3, 5, 0], "sharding": sharding}])
    a[...] = data
    a[3:20, 4:9, 2:19, 1] = 7  # a partial write merges into the shards
    data[3:20, 4:9, 2:19, 1] = 7
    b = shardstore.precomputed.open(str(tmp_path / "vol"))
    assert b.driver.layout.store.sync_reads is not None
    sels = [np.s_[...], np.s_[1:30, 2:28, 3:20, :], np.s_[5, :, 7, 1], np.s_[::3, 5:, :, 0]]
    blocking = [b[sel] for sel in sels]
    monkeypatch.setattr(Uint64ShardedStore, "sync_reads", property(lambda self: None))
    for sel, got in zip(sels, blocking):
        np.testing.assert_array_equal(got, data[sel])
        np.testing.assert_array_equal(b[sel], got)
