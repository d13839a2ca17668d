"""Layer 1 stores: the shared battery for every backend and wrapper, plus their own behaviour."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

import shardstore
from shardstore.config import IOConfig
from shardstore.errors import InvalidKeyError, ReadOnlyError, StoreError, UnsupportedFeatureError
from shardstore.store import (
    AsyncOnlyStore,
    ByteRange,
    LocalStore,
    MemoryStore,
    OffsetBR,
    PrefixStore,
    RangeBR,
    ReadOnlyStore,
    RecordingStore,
    Store,
    SuffixBR,
    store_from_url,
)
from shardstore.store import _local_files as local_files
from shardstore.store import _local_tree as local_tree
from shardstore.store import _tempfiles as tempfiles
from shardstore.store import local as local_module
from shardstore.testing import StoreTests, async_test

run = asyncio.run


# -- the battery, once per store -------------------------------------------------------------
class TestMemoryStore(StoreTests):
    @pytest.fixture
    def store(self) -> Store:
        return MemoryStore()

    def make_read_only(self, store: Store) -> Store:
        assert isinstance(store, MemoryStore)
        return MemoryStore(store._data, read_only=True)


class TestLocalStore(StoreTests):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Store:
        return LocalStore(tmp_path / "root")

    def make_read_only(self, store: Store) -> Store:
        assert isinstance(store, LocalStore)
        return LocalStore(store.root, read_only=True)


class TestPrefixStoreOverMemory(StoreTests):
    @pytest.fixture
    def store(self) -> Store:
        base = MemoryStore()
        run(base.set("outside", b"not mine"))  # keys outside the prefix stay invisible
        return PrefixStore(base, "group/arr")


class TestPrefixStoreOverLocal(StoreTests):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Store:
        return PrefixStore(LocalStore(tmp_path), "x")


class TestRecordingStore(StoreTests):
    @pytest.fixture
    def store(self) -> Store:
        return RecordingStore(MemoryStore())


class TestRecordingStoreOverLocal(StoreTests):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Store:
        return RecordingStore(LocalStore(tmp_path))


# -- LocalStore ------------------------------------------------------------------------------
def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_local_layout_and_repr(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "r")
    assert store.root == tmp_path / "r" and store.root.is_dir()
    assert repr(store) == f"LocalStore({str(tmp_path / 'r')!r})"
    run(store.set("c/0/1", b"abc"))
    assert (tmp_path / "r" / "c" / "0" / "1").read_bytes() == b"abc"
    assert "read_only=True" in repr(LocalStore(tmp_path / "r", read_only=True))


def test_local_set_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalStore(tmp_path)
    run(store.set("a/b", b"old value"))

    def failing_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(local_module.os, "replace", failing_replace)
    with pytest.raises(StoreError, match="'a/b'") as info:
        run(store.set("a/b", b"new value"))
    assert isinstance(info.value.__cause__, OSError)
    monkeypatch.undo()
    assert run(store.get("a/b")) == b"old value"
    assert _files(tmp_path) == ["a/b"]  # no temp file left behind


def test_local_failed_write_midway_leaves_old_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalStore(tmp_path)
    run(store.set("k", b"old"))

    def exploding(fd: int, value: bytes) -> None:
        os.write(fd, bytes(value)[:2])  # part of the value lands, then the disk fails
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(local_files, "write_all", exploding)
    with pytest.raises(StoreError, match="'k'"):
        run(store.set("k", b"new value"))
    monkeypatch.undo()
    assert run(store.get("k")) == b"old"
    assert _files(tmp_path) == ["k"]
    # a failure on a new key leaves nothing at all
    monkeypatch.setattr(local_files, "write_all", exploding)
    with pytest.raises(StoreError):
        run(store.set("new/key", b"value"))
    monkeypatch.undo()
    assert run(store.get("new/key")) is None
    assert _files(tmp_path) == ["k"]


class _HeldPool:
    """An executor that holds what is submitted until ``run_all``."""

    def __init__(self) -> None:
        self.jobs: list[tuple] = []

    def submit(self, fn, *args):  # type: ignore[no-untyped-def]
        self.jobs.append((fn, args))

    def run_all(self) -> None:
        for fn, args in self.jobs:
            fn(*args)
        self.jobs.clear()


def test_a_large_value_replaced_is_freed_later_by_an_io_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Replacing a large file frees the old one off the writer's path (the rename that drops
    its last link would free it right there): a second link under a temp name, unlinked by
    an I/O thread. The key names the new value at once; the old file is never listed, and
    is gone once the thread ran. Small values are replaced plainly; a failed rename keeps
    the old value."""
    pool = _HeldPool()
    monkeypatch.setattr(local_files, "io_pool", lambda: pool)
    store = LocalStore(tmp_path)
    big = local_files.FREE_LATER_BYTES
    store.set_sync("s/0", b"a" * big)
    assert not pool.jobs  # (no old file)
    store.set_sync("s/0", b"b" * big)
    assert len(pool.jobs) == 1 and tempfiles.is_temp_name(os.path.basename(pool.jobs[0][1][0]))
    assert store.get_sync("s/0") == b"b" * big and sorted(os.listdir(tmp_path / "s"))[1:] == ["0"]
    assert run(store.list_dir("s/")) == (["0"], [])  # the old file is not a key
    pool.run_all()
    assert os.listdir(tmp_path / "s") == ["0"]
    store.set_sync("s/1", b"x")
    store.set_sync("s/1", b"y")  # small: replaced right there
    assert not pool.jobs and store.get_sync("s/1") == b"y"

    def failing_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(local_files.os, "replace", failing_replace)
    with pytest.raises(StoreError, match="'s/0'"):
        store.set_sync("s/0", b"c" * big)
    monkeypatch.setattr(local_files.os, "replace", os.rename)
    pool.run_all()
    assert store.get_sync("s/0") == b"b" * big and sorted(os.listdir(tmp_path / "s")) == ["0", "1"]


def test_local_temp_files_are_not_keys(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    run(store.set("d/real", b"1"))
    (tmp_path / "d" / f".real.{'0' * 32}.tmp").write_bytes(b"partial")
    (tmp_path / ".zattrs").write_bytes(b"{}")  # a dot file that is a real key
    assert sorted(_list(store, "")) == [".zattrs", "d/real"]


def _list(store: Store, prefix: str) -> list[str]:
    async def go() -> list[str]:
        return [k async for k in store.list_prefix(prefix)]

    return run(go())


def test_local_directory_is_not_a_key(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    run(store.set("c/0", b"x"))
    assert run(store.get("c")) is None
    assert run(store.get("c", RangeBR(0, 1))) is None
    assert run(store.exists("c")) is False
    assert run(store.get_many([("c", None), ("c/0", None)])) == [None, b"x"]
    run(store.delete("c"))  # deleting a directory "key" is a no-op
    assert run(store.get("c/0")) == b"x"
    # a key under a file reads as missing; writing there is an error naming the key
    assert run(store.get("c/0/1")) is None
    with pytest.raises(StoreError, match="'c/0/1'"):
        run(store.set("c/0/1", b"y"))
    with pytest.raises(StoreError, match="'c'"):
        run(store.set("c", b"y"))  # a directory is in the way
    assert _files(tmp_path) == ["c/0"]


def test_local_delete_prunes_empty_directories(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "root")
    run(store.set_many([("a/b/c/d", b"1"), ("a/x", b"2")]))
    run(store.delete("a/b/c/d"))
    assert sorted(p.name for p in (tmp_path / "root").rglob("*")) == ["a", "x"]
    run(store.delete("a/x"))
    assert list((tmp_path / "root").iterdir()) == []
    assert (tmp_path / "root").is_dir()  # the root itself stays
    run(store.set_many([("p/q/r", b"1"), ("p/s", b"2"), ("pq", b"3")]))
    run(store.delete_prefix("p/"))
    assert _files(tmp_path / "root") == ["pq"]
    assert not (tmp_path / "root" / "p").exists()
    run(store.delete_prefix("p"))  # a partial name: matching keys only
    assert _files(tmp_path / "root") == []


def test_local_root_modes(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        LocalStore(tmp_path / "missing", create=False)
    ro = LocalStore(tmp_path / "missing", read_only=True)  # never creates anything
    assert not (tmp_path / "missing").exists()
    assert run(ro.get("a")) is None and _list(ro, "") == []
    with pytest.raises(ReadOnlyError, match="'a'"):
        run(ro.set("a", b"x"))
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(StoreError, match="not a directory"):
        LocalStore(tmp_path / "file")


def test_local_os_errors_become_store_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalStore(tmp_path)
    run(store.set("k", b"v"))

    def denied(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(local_module.os, "open", denied)
    with pytest.raises(StoreError, match="'k'") as info:
        run(store.get("k"))
    assert isinstance(info.value.__cause__, PermissionError)


def test_local_get_many_reads_each_file_in_one_thread_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalStore(tmp_path)
    value = bytes(range(256)) * 100
    run(store.set_many([("a", value), ("b", value)]))
    calls = []
    real = store._read_parts

    def counting(key, parts):  # type: ignore[no-untyped-def]
        calls.append((key, len(parts)))
        return real(key, parts)

    monkeypatch.setattr(store, "_read_parts", counting)
    reqs = [("a", RangeBR(i * 100, i * 100 + 50)) for i in range(20)] + [("b", SuffixBR(10)), ("b", None)]
    got = run(store.get_many(reqs))
    assert got[:20] == [value[i * 100 : i * 100 + 50] for i in range(20)]
    assert got[20:] == [value[-10:], value]
    assert sorted(calls) == [("a", 20), ("b", 1)]


def test_local_small_values_and_missing_keys_take_no_thread_hop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A create or open reads and writes a few metadata documents: up to
    ``IOConfig.local_inline_value_bytes`` they are read (from the page cache) and written on
    the event loop (a thread hop each way costs more than the file), larger values and values
    on the disk on a worker thread."""
    hops: list[str] = []
    real = asyncio.to_thread

    async def counting(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        hops.append(getattr(fn, "func", fn).__name__)
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(local_module.asyncio, "to_thread", counting)
    store = LocalStore(tmp_path)
    store.use_config(IOConfig(local_inline_value_bytes=1000))
    run(store.set("g/attributes.json", b"{}"))
    assert run(store.get("g/attributes.json")) == b"{}"
    assert run(store.get("g/missing.json")) is None and run(store.get("g")) is None  # (a directory)
    run(store.delete_prefix("nothing/here/"))
    assert run(store.exists("g/attributes.json")) and not run(store.exists("g/missing.json"))
    assert hops == []
    run(store.set("g/big", b"x" * 1001))
    assert run(store.get("g/big")) == b"x" * 1001
    run(store.delete_prefix("g/"))
    assert hops == ["_write", "_read_parts", "remove_dirs"] and run(store.get("g/attributes.json")) is None
    hops.clear()
    run(store.set("g/attributes.json", b"{}"))

    def not_cached(*args):  # type: ignore[no-untyped-def]
        raise BlockingIOError(11, "would block")

    with monkeypatch.context() as m:  # a small value on the disk is read by a worker thread
        m.setattr(local_files.os, "preadv", not_cached)
        assert run(store.get("g/attributes.json")) == b"{}" and hops == ["_read_parts"]
    hops.clear()
    shardstore.n5.create(str(tmp_path / "c.n5"), "data", shape=(4,), dtype="u1", block_size=(2,), mode="w")
    shardstore.zarr3.create(str(tmp_path / "c.zarr"), shape=(4,), dtype="u1", chunks=(2,), mode="w")
    assert hops == []


def test_local_list_prefix_starts_deep(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    run(store.set_many([("c/0/0", b""), ("c/0/1", b""), ("c/01/0", b""), ("c/1/0", b""), ("d", b"")]))
    assert sorted(_list(store, "c/0/")) == ["c/0/0", "c/0/1"]
    assert sorted(_list(store, "c/0")) == ["c/0/0", "c/0/1", "c/01/0"]
    assert _list(store, "c/2/") == [] and _list(store, "d/") == [] and _list(store, "d/x") == []


def test_local_list_prefix_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_tree, "_LIST_BATCH", 3)
    store = LocalStore(tmp_path)
    keys = [f"{i}/{j}" for i in range(4) for j in range(5)]
    run(store.set_many([(k, b"") for k in keys]))
    assert sorted(_list(store, "")) == sorted(keys)


# -- wrappers --------------------------------------------------------------------------------
def test_prefix_store_maps_keys() -> None:
    base = MemoryStore()
    store = PrefixStore(base, "g/arr/")
    assert store.prefix == "g/arr"
    run(store.set("c/0", b"x"))
    assert run(base.get("g/arr/c/0")) == b"x"
    assert _list(store, "") == ["c/0"]
    with pytest.raises(InvalidKeyError):
        PrefixStore(base, "../up")
    assert PrefixStore(ReadOnlyStore(base), "g").read_only is True


def test_read_only_store_forwards_reads() -> None:
    base = MemoryStore({"a": b"abc"})
    ro = ReadOnlyStore(base)
    assert run(ro.get("a", OffsetBR(1))) == b"bc"
    assert _list(ro, "") == ["a"]
    with pytest.raises(ReadOnlyError, match="'a'"):
        run(ro.set("a", b"x"))
    with pytest.raises(ReadOnlyError, match="'b'"):
        run(ro.delete("b"))
    assert base._data == {"a": b"abc"}
    assert RecordingStore(MemoryStore(read_only=True)).read_only is True


def test_recording_store_counts_coalesced_requests() -> None:
    rec = RecordingStore(MemoryStore())
    run(rec.set("shard", bytes(1 << 20)))
    assert rec.requests == [("set", "shard", None)]
    rec.reset()
    assert rec.requests == []
    # two adjacent ranges of one key: one request
    run(rec.get_many([("shard", RangeBR(0, 100)), ("shard", RangeBR(100, 200))]))
    assert rec.requests == [("get", "shard", RangeBR(0, 200))]
    rec.reset()
    # far apart (beyond the merge gap): two requests
    gap = rec.coalesce_max_gap
    assert gap is not None
    run(rec.get_many([("shard", RangeBR(0, 100)), ("shard", RangeBR(100 + gap + 1, 200 + gap + 1))]))
    assert rec.count("get") == 2
    rec.reset()
    # duplicates and a missing key
    got = run(rec.get_many([("shard", SuffixBR(4)), ("shard", SuffixBR(4)), ("nope", RangeBR(0, 1))]))
    assert got == [bytes(4), bytes(4), None]
    assert sorted(rec.requests, key=repr) == [("get", "nope", RangeBR(0, 1)), ("get", "shard", SuffixBR(4))]
    rec.reset()
    # set_many: one request per item; listing: one "list"
    run(rec.set_many([("a/1", b"x"), ("a/2", b"y"), ("shard", None)]))
    assert rec.count("set") == 2 and rec.count("delete") == 1 and rec.count(key_prefix="a/") == 2
    assert sorted(_list(rec, "a/")) == ["a/1", "a/2"]
    assert rec.count("list") == 1
    rec.reset()
    assert run(rec.exists("a/1")) is True and rec.count("get") == 1


def test_recording_store_max_concurrency() -> None:
    in_flight = peak = 0

    class Slow(MemoryStore):
        async def _get(self, key, byte_range):  # type: ignore[no-untyped-def]
            nonlocal in_flight, peak
            in_flight += 1
            peak = max(peak, in_flight)
            await asyncio.sleep(0.001)
            in_flight -= 1
            return await super()._get(key, byte_range)

    rec = RecordingStore(Slow({f"k{i}": b"v" for i in range(50)}))
    rec.max_concurrency = 4
    assert run(rec.get_many([(f"k{i}", None) for i in range(50)])) == [b"v"] * 50
    assert peak == 4 and rec.count("get") == 50


# -- registry --------------------------------------------------------------------------------
def test_registry(tmp_path: Path) -> None:
    s = store_from_url(tmp_path / "a", mode="w")
    assert isinstance(s, LocalStore) and not s.read_only and s.root == tmp_path / "a"
    s = store_from_url(str(tmp_path / "a"))
    assert isinstance(s, LocalStore) and s.read_only
    s = store_from_url(f"file://{tmp_path}/a", mode="r+")
    assert isinstance(s, LocalStore) and s.root == tmp_path / "a" and not s.read_only
    s = store_from_url(f"file://{tmp_path}/with%20space", mode="w-")
    assert s.root == tmp_path / "with space"
    m1, m2 = store_from_url("memory://", mode="w"), store_from_url("memory://", mode="w")
    assert isinstance(m1, MemoryStore) and m1 is not m2
    assert store_from_url(m1) is m1
    with pytest.raises(UnsupportedFeatureError, match="no gs://.*storage.googleapis.com/bucket/x"):
        store_from_url("gs://bucket/x")
    with pytest.raises(UnsupportedFeatureError, match="unknown URL scheme"):
        store_from_url("ftp://x/y")
    with pytest.raises(ValueError, match="invalid mode"):
        store_from_url(tmp_path, mode="rw")
    with pytest.raises(ValueError, match="storage options"):
        store_from_url(tmp_path, storage_options={"anon": True})


# -- key validation --------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["../x", "/abs", "a\\b", "a\x00b", "a//b", "a/./b"])
def test_invalid_key_message_names_the_key(bad: str) -> None:
    with pytest.raises(InvalidKeyError) as info:
        run(MemoryStore().get(bad))
    assert repr(bad) in str(info.value)
    assert isinstance(info.value, StoreError) and isinstance(info.value, ValueError)


def test_invalid_prefixes() -> None:
    store = MemoryStore({"a/b": b"", ".x": b""})
    for bad in ["/", "/a", "../", "a//", "a\\", "a\x00"]:
        with pytest.raises(InvalidKeyError, match="prefix"):
            _list(store, bad)
    assert _list(store, ".") == [".x"]  # a partial name may start with a dot


@async_test
async def test_set_refuses_non_bytes() -> None:
    with pytest.raises(TypeError, match="'k'"):
        await MemoryStore().set("k", "text")  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["memory", "local", "prefix-local", "readonly-memory"])
def test_sync_reads_agree_with_get(kind: str, tmp_path: Path) -> None:
    base = MemoryStore() if "memory" in kind else LocalStore(tmp_path)
    run(base.set("p/a/b", b"xyz"))
    store = {
        "memory": base,
        "local": base,
        "prefix-local": PrefixStore(base, "p"),
        "readonly-memory": ReadOnlyStore(base),
    }[kind]
    key = "a/b" if kind == "prefix-local" else "p/a/b"
    reads = store.sync_reads
    assert reads is not None
    read = reads.get_sync
    assert read(key) == run(store.get(key)) == b"xyz"
    assert read(key + "x") is None
    for br in (RangeBR(1, 3), OffsetBR(2), SuffixBR(2)):
        assert read(key, br) == run(store.get(key, br))
    assert read(key + "x", RangeBR(0, 1)) is None


def test_declared_sync_support_of_wrappers(tmp_path: Path) -> None:
    # request-counting tests rely on every read going through the async path
    local = LocalStore(tmp_path)
    for store in (RecordingStore(local), AsyncOnlyStore(local)):
        assert store.sync_reads is None and store.sync_writes is None
    assert RecordingStore(local).file_paths is None
    assert local.sync_reads is local and local.sync_writes is local and local.file_paths is local
    prefix = PrefixStore(local, "p")
    assert prefix.sync_reads is prefix and prefix.sync_writes is prefix
    assert prefix.file_path("a/b") == local.file_path("p/a/b")
    read_only = ReadOnlyStore(local)
    assert read_only.sync_reads is read_only and read_only.sync_writes is None
    assert LocalStore(tmp_path, read_only=True).sync_writes is None
    assert MemoryStore(read_only=True).sync_writes is None


def test_local_temp_names_are_unique_across_threads() -> None:
    # first use races included: every thread starts at once on a fresh state
    tempfiles._temp_state = None
    names: list[list[str]] = [[] for _ in range(8)]
    start = threading.Barrier(8)

    def make(out: list[str]) -> None:
        start.wait()
        out.extend(f".k.{tempfiles._temp_suffix()}.tmp" for _ in range(2000))

    threads = [threading.Thread(target=make, args=(out,)) for out in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    flat = [n for out in names for n in out]
    assert len(set(flat)) == len(flat) == 16000
    assert all(local_module.is_temp_name(n) for n in flat)


@pytest.mark.parametrize("files", [5, 300])
def test_local_delete_prefix_removes_large_trees_without_following_symlinks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: int) -> None:
    """Trees of ``parallel_unlink_files`` files or more are unlinked by several threads: every
    file and directory goes, a symlinked directory is removed as a link, its target stays."""
    store = LocalStore(tmp_path / "root")
    run(store.set_many([(f"ds/{i % 7}/{i % 3}/{i}", b"x" * 10) for i in range(files)]))
    run(store.set("keep/a", b"1"))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_bytes(b"precious")
    os.symlink(outside, tmp_path / "root" / "ds" / "0" / "link")
    threads_used: set[str] = set()
    batches: list[int] = []
    real = local_tree.unlink_all

    def spy(paths):
        threads_used.add(threading.current_thread().name)
        batches.append(len(paths))
        return real(paths)

    monkeypatch.setattr(local_tree, "unlink_all", spy)
    run(store.delete_prefix("ds/"))
    assert not (tmp_path / "root" / "ds").exists()
    assert (outside / "f").read_bytes() == b"precious"
    assert run(store.get("keep/a")) == b"1"
    # split into batches handed to the I/O pool (which pool thread runs which batch depends on
    # the machine's load: one thread may take them all, so count batches, not threads)
    assert (len(batches) > 1) == (files >= store.parallel_unlink_files)


def test_local_remove_tree_raises_after_every_batch_finished(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalStore(tmp_path / "root")
    run(store.set_many([(f"ds/{i}", b"x") for i in range(200)]))
    real = local_tree.unlink_all
    done: list[int] = []

    def failing(paths):
        if any(p.endswith("/ds/0") for p in paths):
            raise PermissionError("no")
        real(paths)
        done.append(len(paths))

    monkeypatch.setattr(local_tree, "unlink_all", failing)
    with pytest.raises(StoreError, match="ds/"):
        run(store.delete_prefix("ds/"))
    assert sum(done) == 200 - 50  # the three other batches of 50 all ran


@pytest.mark.parametrize("start", [0, 7])
@pytest.mark.parametrize("size", [0, 1, 10])
@pytest.mark.parametrize("byte_range", [None, RangeBR(0, 0), RangeBR(2, 5), RangeBR(3, 40), OffsetBR(0), OffsetBR(4),
                                        OffsetBR(30), SuffixBR(0), SuffixBR(3), SuffixBR(30)])
def test_a_range_within_a_larger_value_selects_what_the_range_selects_of_the_value(
    start: int, size: int, byte_range: ByteRange | None
) -> None:
    """``range_within`` (inner chunks of shards, values of uint64 shard files) agrees with
    ``slice_range``, the one definition of what a byte range selects."""
    from shardstore.store.byte_range import range_within, slice_range

    outer = bytes(range(64))
    inner = outer[start : start + size]
    r = range_within(start, size, byte_range)
    assert outer[r.start : r.end] == slice_range(inner, byte_range)
