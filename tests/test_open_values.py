"""Values held open at one version (``Store.sync_opens``) and the sharded reads built on them.

A reader of a shard takes its index and its data from one open version: on local files the
same descriptor, which a writer's rename cannot change. These tests replace a shard between
the open and the reads and check that the reads still see the old version, whole; and that
warm reads of an open shard ask no generation (the double ``stat`` they replace).
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import numpy as np
import pytest

import shardstore
from shardstore.sharding.uint64 import ShardingSpec, Uint64ShardedStore
from shardstore.store.base import MISSING, RangeBR, Store
from shardstore.store.open_values import read_buffer
from shardstore.store.wrappers import PrefixStore, SyncRecordingStore

KINDS = ["local", "memory"]


def _store(kind: str, tmp_path: Path) -> Store:
    return shardstore.LocalStore(tmp_path / "s") if kind == "local" else shardstore.MemoryStore()


@pytest.mark.parametrize("kind", KINDS)
def test_an_open_value_keeps_its_version_while_the_key_is_replaced(kind: str, tmp_path: Path) -> None:
    store = _store(kind, tmp_path)
    reads = store.sync_reads
    writes = store.sync_writes
    opens = store.sync_opens
    assert reads is not None and writes is not None and opens is not None
    assert opens.open_sync("a/b") is None
    writes.set_sync("a/b", b"old value")
    value = opens.open_sync("a/b")
    assert value is not None
    try:
        assert value.generation == reads.generation_sync("a/b")
        assert value.size == 9
        writes.set_sync("a/b", b"a new, longer value")  # replaced (a rename on files)
        assert reads.generation_sync("a/b") != value.generation
        assert value.read(0, 3) == b"old"
        assert value.read(4, 100) == b"value"  # cut at the end of this version
        assert bytes(value.read_transient(0, 9, 1 << 20)) == b"old value"
    finally:
        value.close()
    writes.set_sync("a/b", None)
    assert opens.open_sync("a/b") is None


def test_directories_are_not_values(tmp_path: Path) -> None:
    store = shardstore.LocalStore(tmp_path)
    (tmp_path / "d").mkdir()
    assert store.open_sync("d") is None


def test_read_transient_reuses_one_buffer_per_thread(tmp_path: Path) -> None:
    store = shardstore.LocalStore(tmp_path)
    store.set_sync("k", bytes(range(256)) * 64)
    value = store.open_sync("k")
    assert value is not None
    try:
        first = value.read_transient(0, 4096, 1 << 20)
        assert isinstance(first, memoryview) and bytes(first) == (bytes(range(256)) * 16)
        second = value.read_transient(256, 512, 1 << 20)
        assert bytes(second) == bytes(range(256))
        assert first.obj is second.obj  # the same buffer: no allocation per chunk
        big = value.read_transient(0, 8192, 4096)  # above max_bytes: a value of its own
        assert isinstance(big, bytes) and big == bytes(range(256)) * 32
        other: list[object] = []
        thread = threading.Thread(target=lambda: other.append(read_buffer(16, 1 << 20)))
        thread.start()
        thread.join()
        assert isinstance(other[0], memoryview) and other[0].obj is not first.obj  # per thread
    finally:
        value.close()


def test_wrappers_forward_opens_but_the_recorder_does_not(tmp_path: Path) -> None:
    local = shardstore.LocalStore(tmp_path)
    local.set_sync("p/k", b"v")
    prefix = PrefixStore(local, "p")
    assert prefix.sync_opens is prefix
    value = prefix.open_sync("k")
    assert value is not None and value.read(0, 1) == b"v"
    value.close()
    # its reads are not requests it could count: adapters over it use the counted reads
    assert SyncRecordingStore(local).sync_opens is None


# -- Zarr v3 shards ---------------------------------------------------------------------------
def _zarr3(store: Store, value: int) -> shardstore.Array:
    a = shardstore.zarr3.create(store, shape=(16, 16), dtype="uint16", chunks=(4, 4), shards=(16, 16),
                                codecs=[{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd"}], mode="w")
    a[...] = np.arange(256, dtype="uint16").reshape(16, 16) * value
    return a


@pytest.mark.parametrize("kind", KINDS)
def test_zarr3_reads_of_an_open_shard_see_one_version(kind: str, tmp_path: Path) -> None:
    store = _store(kind, tmp_path)
    a = _zarr3(store, 1)
    adapter = a.driver.layout.store
    units = adapter.sync_unit_reads
    assert units is not None
    keys = [f"{i}.{j}" for i in range(4) for j in range(4)]
    old = units.get_many_sync(keys)
    opened = units.open_units_sync(keys)
    try:
        # another handle rewrites the shard (with a different layout of its inner chunks)
        b = shardstore.zarr3.open(store, mode="r+")
        b[...] = 0
        b[0:3, 0:3] = 7
        assert [opened.get_sync(k) for k in keys] == old  # all of the version opened
        assert opened.get_sync(keys[1], RangeBR(0, 4)) == old[1][:4]
    finally:
        opened.close()
    assert units.get_many_sync(keys)[0] != old[0]  # a new open sees the new version


@pytest.mark.parametrize("native", [True, False], ids=["native", "generic"])
def test_zarr3_warm_reads_of_local_shards_ask_no_generation(native: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the native shard reader (core/spanread.py) reads from the file the adapter holds open
    # too, the one the index came from
    store = shardstore.LocalStore(tmp_path)
    _zarr3(store, 3)
    a = shardstore.zarr3.open(store, mode="r", config=shardstore.IOConfig(native=native))
    expected = np.arange(256, dtype="uint16").reshape(16, 16) * 3
    np.testing.assert_array_equal(a[...], expected)  # (the index is cached now)
    asked: list[str] = []
    real = store.generation_sync
    monkeypatch.setattr(store, "generation_sync", lambda key: asked.append(key) or real(key))
    np.testing.assert_array_equal(a[...], expected)
    np.testing.assert_array_equal(a[4:8, 4:8], expected[4:8, 4:8])
    assert asked == []  # the generation came from the open file: no stat before and after


def test_zarr3_open_shards_check_entries_against_the_file_size(tmp_path: Path) -> None:
    store = shardstore.LocalStore(tmp_path)
    _zarr3(store, 1)
    path = tmp_path / "c" / "0" / "0"
    data = path.read_bytes()
    a = shardstore.zarr3.open(store, mode="r")
    index_size = a.driver.layout.store.layout.index_size
    # chunk data cut out from the middle: the index (at the end) now points past the data
    path.write_bytes(data[:100] + data[-index_size:])
    os.utime(path, ns=(1, 1))
    with pytest.raises(shardstore.CodecError, match="runs into the shard index or past the end"):
        a[...]


# -- uint64 sharded kv ------------------------------------------------------------------------
SPEC = ShardingSpec.from_json({"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0,
                               "minishard_bits": 2, "shard_bits": 0, "minishard_index_encoding": "gzip",
                               "data_encoding": "raw"})


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
@pytest.mark.parametrize("kind", KINDS)
def test_uint64_reads_of_an_open_shard_see_one_version(kind: str, warm: bool, tmp_path: Path) -> None:
    """Cold, minishard indexes are read by the threads that read the values (``lazy``);
    warm, every value is located when the shard is opened (``found``)."""
    base = _store(kind, tmp_path)
    kv = Uint64ShardedStore(base, SPEC)
    asyncio.run(kv.set_many_ids([(k, b"old %d" % k) for k in range(20)]))
    keys = [str(k) for k in range(25)]
    if warm:
        assert kv.get_many_sync(keys)[:2] == [b"old 0", b"old 1"]  # (indexes cached)
    opened = kv.open_units_sync(keys)
    assert bool(opened.found) == warm and bool(opened.lazy) != warm
    try:
        other = Uint64ShardedStore(base, SPEC)  # another handle replaces the shard
        asyncio.run(other.set_many_ids([(k, b"a longer new value %d" % k) for k in range(20)]))
        assert [opened.get_sync(k) for k in keys] == [b"old %d" % k for k in range(20)] + [None] * 5
        assert bytes(opened.get_transient_sync("3", 1 << 20) or b"") == b"old 3"
        assert opened.get_sync("4", RangeBR(0, 3)) == b"old"
    finally:
        opened.close()
    assert kv.get_sync("3") == b"a longer new value 3"
    ids = kv.sync_ids
    assert ids is not None
    assert ids.get_many_ids([3, 30]) == [b"a longer new value 3", None]


def test_uint64_point_reads_of_local_shards_ask_no_generation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = shardstore.LocalStore(tmp_path)
    asked: list[str] = []
    real = base.generation_sync
    monkeypatch.setattr(base, "generation_sync", lambda key: asked.append(key) or real(key))
    kv = Uint64ShardedStore(base, SPEC)
    asyncio.run(kv.set_many_ids([(k, b"v%d" % k) for k in range(20)]))
    ids = kv.sync_ids
    assert ids is not None
    asked.clear()
    assert ids.get_id(5) == b"v5"
    assert ids.get_many_ids([1, 2, 19]) == [b"v1", b"v2", b"v19"]
    assert ids.locate(7) is not None
    assert asked == []
    # a shard that is not there is told apart from a legacy .index + .data pair by generations
    empty = Uint64ShardedStore(shardstore.LocalStore(tmp_path / "none"), SPEC)
    assert empty.get_sync("5") is None
    assert base.generation_sync("0.index") is MISSING


@pytest.mark.parametrize("kind", KINDS)
def test_uint64_one_key_reads_see_one_version(kind: str, tmp_path: Path) -> None:
    """A one-chunk read takes the short path; it holds the shard open just the same."""
    base = _store(kind, tmp_path)
    kv = Uint64ShardedStore(base, SPEC)
    asyncio.run(kv.set_many_ids([(k, b"old %d" % k) for k in range(20)]))
    present, absent = kv.open_units_sync(["3"]), kv.open_units_sync(["33"])
    try:
        asyncio.run(Uint64ShardedStore(base, SPEC).set_many_ids([(k, b"new %d" % k) for k in range(40)]))
        assert present.get_sync("3") == b"old 3"
        assert bytes(present.get_transient_sync("3", 1 << 20) or b"") == b"old 3"
        assert absent.get_sync("33") is None  # absent from the version opened
    finally:
        present.close()
        absent.close()
    missing = Uint64ShardedStore(_store(kind, tmp_path / "other"), SPEC).open_units_sync(["3"])
    assert missing.get_sync("3") is None  # no shard at all (read through the store)
    missing.close()


def test_held_files_open_each_file_once_for_threads_that_ask_together() -> None:
    """Two pieces of a read asking for the same shard file at once: the second waits for the
    first's open (one version, one open), and ``close`` closes it once."""
    import time

    from shardstore.store.open_values import HeldFiles

    opened: list[str] = []
    closed: list[str] = []

    class Value:
        def close(self) -> None:
            closed.append("v")

    def open_value() -> Value:
        opened.append("v")
        time.sleep(0.2)  # (the other thread asks meanwhile)
        return Value()

    held = HeldFiles()
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(held.open("k", open_value, lambda v: 7))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(opened) == 1 and len(got) == 2 and got[0] is got[1] and got[0][1] == 7  # type: ignore[index]
    assert held.open("missing", lambda: None, lambda v: 7) is None
    held.close()
    assert closed == ["v"]


def test_read_many_of_a_file_gives_each_span_as_read_does(tmp_path: Path) -> None:
    """``FileVersion.read_many`` (``os.pread`` per span) returns what ``read`` returns for
    every span: whole, empty, reversed, ending or starting past the end of the file."""
    from shardstore.store.local import LocalStore

    data = bytes(range(256)) * 40  # 10,240 bytes
    (tmp_path / "f").write_bytes(data)
    value = LocalStore(tmp_path).open_sync("f")
    assert value is not None
    try:
        spans = [(0, 10), (5, 5), (9, 3), (100, 4000), (10_000, 10_300), (10_240, 10_500), (20_000, 20_010), (0, 10_240)]
        assert value.read_many(spans) == [value.read(s, e) for s, e in spans] == [data[s:e] for s, e in spans]
        assert value.read_many(spans[3:4]) == [data[100:4000]]
    finally:
        value.close()


def test_spans_of_a_partly_cached_file_are_all_advised(tmp_path: Path, monkeypatch) -> None:
    """``FileVersion.advise`` asks whether the first, middle and last spans are in the page
    cache: a file whose first span was read before (a value's minishard index lies just
    after it) but whose other spans are cold is advised whole; spans within a page of each
    other share a call; a wholly cached file and a single span are not advised."""
    from shardstore.store import open_values
    from shardstore.store.local import LocalStore

    (tmp_path / "f").write_bytes(bytes(100_000))
    value = LocalStore(tmp_path).open_sync("f")
    assert value is not None
    advised: list[tuple[int, int]] = []
    monkeypatch.setattr(open_values.os, "posix_fadvise", lambda fd, offset, n, advice: advised.append((offset, n)))
    spans = [(0, 10), (100, 200), (20_000, 20_100), (50_000, 50_010), (90_000, 91_000)]
    try:
        monkeypatch.setattr(open_values, "_uncached", lambda fd, offset: offset != 0)  # only the first cached
        value.advise(spans)
        assert advised == [(0, 200), (20_000, 100), (50_000, 10), (90_000, 1000)]
        advised.clear()
        monkeypatch.setattr(open_values, "_uncached", lambda fd, offset: offset == 90_000)  # only the last cold
        value.advise(spans)
        assert len(advised) == 4
        advised.clear()
        monkeypatch.setattr(open_values, "_uncached", lambda fd, offset: False)
        value.advise(spans)
        monkeypatch.setattr(open_values, "_uncached", lambda fd, offset: True)
        value.advise(spans[:1])
        assert advised == []
        assert value.read_many(spans, advise=False) == [bytes(e - s) for s, e in spans] and advised == []
    finally:
        value.close()


def test_chunk_files_are_all_advised_when_the_first_is_cold(tmp_path: Path, monkeypatch) -> None:
    """``advise_files`` asks the page cache about the first file only: cached, nothing is
    advised (one open and a probe); cold, every file is advised whole, one after the other
    (each closed at once: a read of thousands of files holds no thousand descriptors), and a
    file that does not exist (a chunk never written) is skipped."""
    import os

    from shardstore.store import open_values

    paths = [str(tmp_path / name) for name in ("a", "b", "missing", "c")]
    for path in paths[:2] + paths[3:]:
        Path(path).write_bytes(bytes(5000))
    advised: list[tuple[int, int, int]] = []
    monkeypatch.setattr(open_values.os, "posix_fadvise", lambda fd, offset, n, advice: advised.append((offset, n, advice)))
    monkeypatch.setattr(open_values, "_NOWAIT", True)
    monkeypatch.setattr(open_values, "_uncached", lambda fd, offset: False)
    open_values.advise_files(paths)
    assert advised == []
    monkeypatch.setattr(open_values, "_uncached", lambda fd, offset: True)
    before = len(os.listdir("/proc/self/fd"))
    open_values.advise_files(paths)
    assert advised == [(0, 0, os.POSIX_FADV_WILLNEED)] * 3
    assert len(os.listdir("/proc/self/fd")) == before
    advised.clear()
    open_values.advise_files(paths[2:3])  # (nothing there to advise)
    assert advised == []
