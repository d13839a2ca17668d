"""The decoded-chunk cache (``core/chunk_cache.py``): the LRU itself, and the core's use of it
on both runners: overlapping reads make no fetch and no decode for cached chunks, another
writer's update is never served stale, reads bigger than the budget bypass it, the budget holds."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import shardstore
from shardstore.core import io, rawread
from shardstore.core.chunk_cache import ChunkCache, owned
from shardstore.store.base import ByteRange
from shardstore.store.open_values import BytesVersion
from shardstore.testing.runners import RUNNERS, Runner, on_runner

if TYPE_CHECKING:
    from _servers import SeaweedFS

pytest_plugins = ["_servers"]

MIB = 1 << 20
METADATA = ("zarr.json", "attributes.json", "info")


# -- the LRU ----------------------------------------------------------------------------------
def _chunk(n: int, value: int = 0) -> np.ndarray:
    return np.full(n, value, dtype="uint8")


def test_lru_evicts_least_recently_used_first() -> None:
    cache = ChunkCache(300)
    for key in "abc":
        cache.put(key, 1, _chunk(100))
    assert cache.get("a", 1) is not None  # "a" is now the most recent
    cache.put("d", 1, _chunk(100))
    assert cache.get("b", 1) is None
    assert [k for k in "acd" if cache.get(k, 1) is None] == []
    assert cache.nbytes == 300 and len(cache) == 3


def test_budget_is_never_exceeded_and_oversized_chunks_are_not_kept() -> None:
    cache = ChunkCache(250)
    cache.put("big", 1, _chunk(251))
    assert len(cache) == 0 and cache.nbytes == 0
    for i in range(20):
        cache.put(str(i), 1, _chunk(60 + i))
        assert cache.nbytes <= 250
    assert cache.nbytes == sum(c.nbytes for k in map(str, range(20)) if (c := cache.get(k, 1)) is not None)
    with pytest.raises(ValueError):
        ChunkCache(-1)


def test_an_entry_serves_only_its_generation() -> None:
    cache = ChunkCache(1000)
    cache.put("k", ("v", 1), _chunk(10, 1))
    assert cache.get("k", ("v", 2)) is None  # the unit was rewritten: the entry goes
    assert len(cache) == 0 and cache.nbytes == 0
    cache.put("k", 2, _chunk(10, 2))
    cache.put("k", 3, _chunk(10, 3))  # replaces, does not add
    assert cache.nbytes == 10
    got = cache.get("k", 3)
    assert got is not None and got[0] == 3
    cache.discard(["k", "missing"])
    assert cache.get("k", 3) is None and cache.nbytes == 0


def test_results_are_read_only() -> None:
    cache = ChunkCache(100)
    cache.put("k", 0, _chunk(10))
    got = cache.get("k", 0)
    assert got is not None
    with pytest.raises(ValueError):
        got[0] = 1


def test_threads_share_one_cache_within_budget() -> None:
    cache = ChunkCache(64 * 100)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(2000):
                key = str(int(rng.integers(0, 200)))
                got = cache.get(key, 7)
                if got is None:
                    cache.put(key, 7, _chunk(100, int(key) % 256))
                elif got[0] != int(key) % 256:
                    raise AssertionError(f"entry {key} holds another chunk")
                assert cache.nbytes <= cache.max_bytes
        except BaseException as e:  # reported on the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert cache.nbytes == 100 * len(cache) <= cache.max_bytes


# -- the core's reads -------------------------------------------------------------------------
class CountingStore(shardstore.MemoryStore):
    """A memory store counting the data requests of both runners (metadata not counted)."""

    def __init__(self) -> None:
        super().__init__()
        self.fetches = 0

    def _count(self, keys: Sequence[str]) -> None:
        self.fetches += sum(1 for k in keys if not k.endswith(METADATA))

    async def _get(self, key: str, byte_range: ByteRange | None) -> bytes | None:
        self._count([key])
        return await super()._get(key, byte_range)

    async def get_many(self, requests: Sequence[tuple[str, ByteRange | None]]) -> list[bytes | None]:
        self._count([k for k, _ in requests])
        return await super().get_many(requests)

    def get_sync(self, key: str, byte_range: ByteRange | None = None) -> bytes | None:
        self._count([key])
        return super().get_sync(key, byte_range)

    def get_ranges_sync(self, key: str, ranges: Sequence[ByteRange | None]) -> list[bytes | None]:
        self._count([key])
        return super().get_ranges_sync(key, ranges)

    def open_sync(self, key: str) -> BytesVersion | None:  # (a shard held open for a read)
        self._count([key])
        return super().open_sync(key)


VOL_SHAPE = (64, 64, 64)
UINT64_SHARDING = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 3,
                   "minishard_bits": 1, "shard_bits": 1, "minishard_index_encoding": "gzip",
                   "data_encoding": "gzip"}


def _make(fmt: str, store: shardstore.Store) -> tuple[Callable[[], shardstore.Array], Callable[[], shardstore.Array]]:
    """(create the array, open it again read-write) in ``store``; chunks of 16^3."""
    if fmt == "zarr3-sharded":
        codecs = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 1}}]
        return (lambda: shardstore.create(store, shape=VOL_SHAPE, dtype="uint16", chunks=(16, 16, 16),
                                          shards=(32, 32, 32), codecs=codecs),
                lambda: shardstore.open(store, mode="r+"))
    if fmt == "n5":
        return (lambda: shardstore.n5.create(store, "d", shape=VOL_SHAPE, dtype="uint16", block_size=(16, 16, 16),
                                             compression={"type": "gzip", "level": 1}),
                lambda: shardstore.n5.open(store, path="d", mode="r+"))
    sharding = UINT64_SHARDING if fmt == "precomputed-sharded" else None
    return (lambda: shardstore.precomputed.create(store, data_type="uint16", scales=[
                {"size": list(VOL_SHAPE), "chunk_size": [16, 16, 16], "sharding": sharding}]),
            lambda: shardstore.precomputed.open(store, mode="r+"))


def _vol(value: int | None = None) -> np.ndarray:
    if value is not None:
        return np.full(VOL_SHAPE, value, dtype="uint16")
    return np.random.default_rng(5).integers(1, 1000, VOL_SHAPE).astype("uint16")


def _view(a: shardstore.Array, vol: np.ndarray) -> np.ndarray:
    """``vol`` as ``a`` sees it (precomputed arrays have a channel axis)."""
    return vol[..., None] if a.ndim == 4 else vol


def _box(a: shardstore.Array, lo: int, hi: int) -> tuple[slice, ...]:
    return (slice(lo, hi),) * 3 + ((slice(None),) if a.ndim == 4 else ())


FORMATS = ["zarr3-sharded", "n5", "precomputed", "precomputed-sharded"]
#: the formats of FORMATS whose local files the native readers read (``core/rawread.py``, ``core/spanread.py``)
NATIVE_READS = {"zarr3-sharded", "n5"}


@pytest.fixture
def count_decodes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    real = io.decode_chunk

    def counted(*args: object, **kwargs: object) -> np.ndarray:
        calls[0] += 1
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(io, "decode_chunk", counted)
    return calls


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_an_overlapping_read_fetches_and_decodes_nothing_cached(fmt: str, runner: Runner, count_decodes: list[int]) -> None:
    counting = CountingStore()
    create, _ = _make(fmt, on_runner(counting, runner))
    a = create()
    vol = _view(a, _vol())
    a[...] = vol
    a.chunk_cache_bytes = 16 * MIB
    first = _box(a, 5, 40)  # chunks 0..2 per axis
    np.testing.assert_array_equal(a[first], vol[first])
    assert counting.fetches > 0 and count_decodes[0] == 27
    counting.fetches = count_decodes[0] = 0
    inside = _box(a, 10, 47)  # the same 27 chunks
    np.testing.assert_array_equal(a[inside], vol[inside])
    assert (counting.fetches, count_decodes[0]) == (0, 0)
    wider = (slice(10, 40), slice(10, 50), slice(10, 50), *_box(a, 0, 0)[3:])  # 48 chunks: 27 cached
    np.testing.assert_array_equal(a[wider], vol[wider])
    assert count_decodes[0] == 21 and counting.fetches > 0


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_another_handles_write_is_seen_by_the_next_read(fmt: str, runner: Runner) -> None:
    store = on_runner(shardstore.MemoryStore(), runner)
    create, reopen = _make(fmt, store)
    a = create()
    vol = _view(a, _vol())
    a[...] = vol
    a.chunk_cache_bytes = 16 * MIB
    box = _box(a, 3, 45)
    np.testing.assert_array_equal(a[box], vol[box])
    other = reopen()
    part = _box(other, 20, 30)
    other[part] = 7
    vol[part] = 7
    np.testing.assert_array_equal(a[box], vol[box])
    # and a write through the same handle drops its entries at once
    before = len(a._async.chunk_cache or ())
    a[_box(a, 0, 16)] = 9
    vol[_box(a, 0, 16)] = 9
    assert len(a._async.chunk_cache or ()) == before - 1
    np.testing.assert_array_equal(a[box], vol[box])


@pytest.mark.parametrize("fmt", FORMATS)
def test_files_rewritten_by_another_process_are_not_served_stale(fmt: str, tmp_path: Path) -> None:
    store = shardstore.LocalStore(str(tmp_path / "v"))
    create, reopen = _make(fmt, store)
    a = create()
    vol = _view(a, _vol())
    a[...] = vol
    a.chunk_cache_bytes = 16 * MIB
    box = _box(a, 3, 45)
    np.testing.assert_array_equal(a[box], vol[box])
    opener = {"zarr3-sharded": "shardstore.open(s, mode='r+')", "n5": "shardstore.n5.open(s, path='d', mode='r+')"}
    open_it = opener.get(fmt, "shardstore.precomputed.open(s, mode='r+')")
    code = (f"import shardstore; s = shardstore.LocalStore({str(tmp_path / 'v')!r}); "
            f"a = {open_it}; a[(slice(20, 30),) * 3] = 7")
    subprocess.run([sys.executable, "-c", code], check=True, env={"PYTHONPATH": str(Path(io.__file__).parents[2])})
    vol[_box(a, 20, 30)] = 7
    np.testing.assert_array_equal(a[box], vol[box])


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_whole_read_that_fits_is_cached_and_oversized_reads_bypass(runner: Runner, count_decodes: list[int]) -> None:
    create, _ = _make("zarr3-sharded", on_runner(shardstore.MemoryStore(), runner))
    a = create()
    vol = _vol()
    a[...] = vol
    a.chunk_cache_bytes = 16 * MIB
    np.testing.assert_array_equal(np.asarray(a), vol)
    cache = a._async.chunk_cache
    assert cache is not None and len(cache) == 64 and count_decodes[0] == 64
    np.testing.assert_array_equal(np.asarray(a), vol)  # a second whole read: copies only
    assert count_decodes[0] == 64
    a.chunk_cache_bytes = 8 * 8192  # room for 8 chunks of 16^3 uint16
    cache = a._async.chunk_cache
    assert cache is not None
    np.testing.assert_array_equal(a[0:20, 0:20, 0:20], vol[0:20, 0:20, 0:20])  # 8 chunks: kept
    assert len(cache) == 8
    kept = {key: id(entry[1]) for key, entry in cache._entries.items()}
    np.testing.assert_array_equal(np.asarray(a), vol)  # 64 chunks > 8
    np.testing.assert_array_equal(a[0:40, 0:40, 0:40], vol[0:40, 0:40, 0:40])  # 27 chunks > 8
    assert {key: id(entry[1]) for key, entry in cache._entries.items()} == kept  # neither filled nor evicted by the oversized reads
    assert cache.nbytes <= cache.max_bytes


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_cold_read_of_local_files_keeps_the_chunks_the_native_readers_decode(fmt: str, tmp_path: Path,
                                                                                count_decodes: list[int]) -> None:
    """Where the native readers apply, every chunk of a cold read comes through them, the
    partly read ones too: each is decoded whole into its cache entry (no Python decode)."""
    store = shardstore.LocalStore(str(tmp_path / "v"))
    create, reopen = _make(fmt, store)
    a = create()
    vol = _view(a, _vol())
    a[...] = vol
    b = reopen()
    b.chunk_cache_bytes = 16 * MIB
    box = _box(b, 8, 40)  # 16:32 whole along each axis (1 chunk), 8:16 and 32:40 partly (26)
    np.testing.assert_array_equal(b[box], vol[box])
    cache = b._async.chunk_cache
    assert cache is not None and len(cache) == 27
    if rawread.available() and b.config.native and fmt in NATIVE_READS:
        assert count_decodes[0] == 0
    for _, chunk, _ in cache._entries.values():
        assert not chunk.flags.writeable
    decoded = count_decodes[0]
    np.testing.assert_array_equal(np.asarray(b), vol)  # the rest is fetched; the 27 come from the cache
    assert len(cache) == 64
    np.testing.assert_array_equal(b[_box(b, 3, 61)], vol[_box(b, 3, 61)])  # all hits
    np.testing.assert_array_equal(np.asarray(b), vol)
    assert count_decodes[0] - decoded <= 64 - 27
    a[_box(a, 16, 32)] = 3  # another handle's write: never served stale
    vol[_box(a, 16, 32)] = 3
    np.testing.assert_array_equal(np.asarray(b), vol)


@pytest.mark.parametrize("runner", RUNNERS)
def test_budget_holds_over_random_reads(runner: Runner) -> None:
    create, _ = _make("n5", on_runner(shardstore.MemoryStore(), runner))
    a = create()
    vol = _vol()
    a[...] = vol
    a.chunk_cache_bytes = 20 * 8192
    cache = a._async.chunk_cache
    assert cache is not None
    rng = np.random.default_rng(1)
    for _ in range(30):
        lo = rng.integers(0, 48, 3)
        sel = tuple(slice(int(x), int(x) + 17) for x in lo)
        np.testing.assert_array_equal(a[sel], vol[sel])
        assert cache.nbytes <= cache.max_bytes
    assert len(cache) > 0


def test_the_cache_is_off_by_default_and_survives_a_resize() -> None:
    store = shardstore.MemoryStore()
    a = shardstore.create(store, shape=(40, 40), dtype="int32", chunks=(16, 16))
    assert a.chunk_cache_bytes == 0
    a[...] = np.arange(1600).reshape(40, 40)
    a.chunk_cache_bytes = MIB
    assert a.chunk_cache_bytes == MIB
    np.testing.assert_array_equal(a[:20, :20], np.arange(1600).reshape(40, 40)[:20, :20])
    a.resize((20, 20))
    a.resize((40, 40))
    want = np.zeros((40, 40), "int32")
    want[:20, :20] = np.arange(1600).reshape(40, 40)[:20, :20]
    np.testing.assert_array_equal(a[:36, :36], want[:36, :36])
    a.chunk_cache_bytes = 0
    assert a._async.chunk_cache is None


def test_a_sharded_read_asks_each_shards_generation_once(monkeypatch: pytest.MonkeyPatch) -> None:
    store = shardstore.MemoryStore()
    create, _ = _make("zarr3-sharded", store)
    a = create()
    a[...] = _vol()
    a.chunk_cache_bytes = 16 * MIB
    adapter = a.driver.layout.store
    asked: list[str] = []
    real: Callable[[str], Hashable] = adapter.generation_sync  # type: ignore[attr-defined]

    def counted(key: str) -> Hashable:
        asked.append(key)
        return real(key)

    monkeypatch.setattr(adapter, "generation_sync", counted)
    a[5:40, 5:40, 5:40]  # 27 chunks in 8 shards
    assert len(asked) == 8


class NoGenerations(shardstore.MemoryStore):
    """A store that cannot tell a generation cheaply (as HTTP and S3 answer)."""

    def generation_sync(self, key: str) -> Hashable:
        return None

    async def generation(self, key: str) -> Hashable | None:
        return None


@pytest.mark.parametrize("runner", RUNNERS)
def test_stores_without_generations_are_not_cached(runner: Runner) -> None:
    store = on_runner(NoGenerations(), runner)
    create, _ = _make("zarr3-sharded", store)
    a = create()
    vol = _vol()
    a[...] = vol
    a.chunk_cache_bytes = 16 * MIB
    np.testing.assert_array_equal(a[5:40, 5:40, 5:40], vol[5:40, 5:40, 5:40])
    np.testing.assert_array_equal(a[10:45, 5:40, 5:40], vol[10:45, 5:40, 5:40])
    assert len(a._async.chunk_cache or ()) == 0


@pytest.mark.timeout(180)
def test_s3_hits_are_checked_against_the_shards_etag(seaweedfs: SeaweedFS) -> None:
    url, opts = seaweedfs.url(f"cache-{uuid.uuid4().hex[:10]}"), seaweedfs.storage_options()
    codecs = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 1}}]
    a = shardstore.create(url, storage_options=opts, shape=VOL_SHAPE, dtype="uint16", chunks=(16, 16, 16),
                          shards=(32, 32, 32), codecs=codecs)
    vol = _vol()
    a[...] = vol
    reader = shardstore.open(url, storage_options=opts)
    reader.chunk_cache_bytes = 16 * MIB
    box = np.s_[3:45, 3:45, 3:45]
    np.testing.assert_array_equal(reader[box], vol[box])
    cache = reader._async.chunk_cache
    assert cache is not None and len(cache) == 27
    a[20:30, 20:30, 20:30] = 7  # another handle rewrites one shard
    vol[20:30, 20:30, 20:30] = 7
    np.testing.assert_array_equal(reader[box], vol[box])


def _cached_s3_reader(seaweedfs: SeaweedFS) -> tuple[Any, np.ndarray, Any, tuple[slice, ...]]:
    """A sharded S3 array of ``_vol()`` (its writer), a reader with a chunk cache, and a box of
    27 chunks in 8 shards that the reader has read once (its chunks cached)."""
    url, opts = seaweedfs.url(f"cache-{uuid.uuid4().hex[:10]}"), seaweedfs.storage_options()
    a = shardstore.create(url, storage_options=opts, shape=VOL_SHAPE, dtype="uint16", chunks=(16, 16, 16),
                          shards=(32, 32, 32))
    vol = _vol()
    a[...] = vol
    reader = shardstore.open(url, storage_options=opts, config=shardstore.IOConfig(chunk_cache_bytes=16 * MIB))
    box = np.s_[3:45, 3:45, 3:45]
    np.testing.assert_array_equal(reader[box], vol[box])
    return a, vol, reader, box


def test_s3_hits_are_checked_and_placed_without_the_event_loop(
    seaweedfs: SeaweedFS, monkeypatch: pytest.MonkeyPatch, count_decodes: list[int]
) -> None:
    """A blocking read asks the shards' ETags with obstore's blocking HEAD (one per shard, the
    shards side by side) and places the hits on the calling thread: a read the cache serves
    whole never reaches the event loop; the rest of a partly cached one is fetched there."""
    from shardstore.core import array as array_module
    from shardstore.store.s3 import S3Store

    _, vol, reader, box = _cached_s3_reader(seaweedfs)
    heads: list[str] = []
    real_head = S3Store.checked_generation_sync
    monkeypatch.setattr(S3Store, "checked_generation_sync", lambda self, key: heads.append(key) or real_head(self, key))
    real_sync = array_module.sync
    loop_reads = [0]

    def counted_sync(*args: object, **kwargs: object) -> object:
        loop_reads[0] += 1
        return real_sync(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(array_module, "sync", counted_sync)
    count_decodes[0] = 0
    np.testing.assert_array_equal(reader[box], vol[box])
    assert (len(heads), len(set(heads)), loop_reads[0], count_decodes[0]) == (8, 8, 0, 0)
    wider = np.s_[3:45, 3:45, 3:60]  # 36 chunks, 9 not cached
    np.testing.assert_array_equal(reader[wider], vol[wider])
    assert (loop_reads[0], count_decodes[0]) == (1, 9)


@pytest.mark.timeout(180)
def test_s3_hits_are_copied_while_their_shards_etags_are_asked(seaweedfs: SeaweedFS,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A read the cache holds whole copies the chunks it holds while the HEADs that check
    them are in flight (each HEAD below waits for the copies to start: after them, it would
    wait out its second), and a chunk of a shard rewritten meanwhile is fetched again over
    its copy: the read returns the new values."""
    from shardstore.store.s3 import S3Store

    a, vol, reader, box = _cached_s3_reader(seaweedfs)
    copying = threading.Event()
    waited: list[bool] = []
    real_head, real_place = S3Store.checked_generation_sync, io.place_hits

    def head(self: S3Store, key: str) -> object:
        waited.append(copying.wait(1.0))
        return real_head(self, key)

    def place(hits: list, *args: object) -> None:
        if hits:
            copying.set()
        real_place(hits, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(S3Store, "checked_generation_sync", head)
    monkeypatch.setattr(io, "place_hits", place)
    np.testing.assert_array_equal(reader[box], vol[box])
    assert len(waited) == 8 and all(waited)
    a[20:30, 20:30, 20:30] = 9  # another handle rewrites the shard (0, 0, 0)
    vol[20:30, 20:30, 20:30] = 9
    copying.clear()
    waited.clear()
    np.testing.assert_array_equal(reader[box], vol[box])
    assert len(waited) == 8 and all(waited)


#: precomputed shards that are 32^3 cubes of 16^3 chunks, as the Zarr v3 ones of the test below
#: (identity hash of the compressed Morton code: its top 3 bits, the chunk's 2x2x2 block)
CUBE_SHARDING = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 3,
                 "minishard_bits": 0, "shard_bits": 3, "minishard_index_encoding": "raw", "data_encoding": "raw"}


@pytest.mark.parametrize("fmt", ["zarr3", "n5", "precomputed-sharded"])
@pytest.mark.parametrize("runner", ["sync", "async"])
def test_s3_chunks_the_cache_holds_nothing_of_are_fetched_without_a_head(
    seaweedfs: SeaweedFS, monkeypatch: pytest.MonkeyPatch, count_decodes: list[int], fmt: str, runner: str
) -> None:
    """With tagged reads (``Store.tagged_reads``: the ETag of each GET, or of the reply a shard
    index came in) the cache asks no HEAD for units it holds nothing of and keeps their chunks
    under their replies' tags: a first read costs only its GETs, the same read again only its
    HEADs (no decode), and another handle's rewrite is still seen."""
    from shardstore.store.s3 import S3Store

    url, opts = seaweedfs.url(f"tags-{uuid.uuid4().hex[:10]}"), seaweedfs.storage_options()
    vol = _vol()
    path = None
    if fmt == "zarr3":
        a = shardstore.zarr3.create(url, storage_options=opts, shape=VOL_SHAPE, dtype="uint16", chunks=(16, 16, 16),
                                    shards=(32, 32, 32))
        units = 8
    elif fmt == "precomputed-sharded":
        a = shardstore.precomputed.create(url, storage_options=opts, data_type="uint16", scales=[
            {"size": list(VOL_SHAPE), "chunk_size": [16, 16, 16], "sharding": CUBE_SHARDING}])
        units = 8
    else:
        path = "d"
        a = shardstore.n5.create(url, "d", storage_options=opts, shape=VOL_SHAPE, dtype="uint16", block_size=(16, 16, 16),
                                 compression={"type": "gzip", "level": 1})
        units = 27
    a[...] = _view(a, vol)
    reader = shardstore.open(url, path=path, storage_options=opts, config=shardstore.IOConfig(chunk_cache_bytes=16 * MIB))
    assert reader.driver.layout.store.tagged_reads is not None
    heads: list[str] = []
    real_sync, real_async = S3Store.checked_generation_sync, S3Store.checked_generation

    async def counted_async(self: S3Store, key: str) -> Hashable | None:
        heads.append(key)
        return await real_async(self, key)

    monkeypatch.setattr(S3Store, "checked_generation_sync", lambda self, key: heads.append(key) or real_sync(self, key))
    monkeypatch.setattr(S3Store, "checked_generation", counted_async)
    def read(sel: tuple[slice, ...]) -> np.ndarray:
        got = reader[sel] if runner == "sync" else asyncio.run(reader._async.getitem(sel))
        return got[..., 0] if reader.ndim == 4 else got

    box = np.s_[3:45, 3:45, 3:45]  # 27 chunks
    count_decodes[0] = 0
    np.testing.assert_array_equal(read(box), vol[box])
    assert (len(heads), count_decodes[0], len(reader._async.chunk_cache)) == (0, 27, 27)
    np.testing.assert_array_equal(read(box), vol[box])
    assert (len(heads), count_decodes[0]) == (units, 27)
    # another handle rewrites chunks the cache holds, in shards (z 32-63) whose other chunks a
    # wider read then fetches: those units are asked nothing, and their replies' tags refuse
    # the held chunks' old versions
    a[20:30, 20:30, 40:46] = 7  # (precomputed: every channel)
    vol[20:30, 20:30, 40:46] = 7
    del heads[:]
    count_decodes[0] = 0
    wider = np.s_[3:45, 3:45, 3:60]  # 36 chunks, 9 not held, 1 held rewritten
    np.testing.assert_array_equal(read(wider), vol[wider])
    # shards (zarr3, precomputed): the 4 at z 0-31 hold every chunk asked (asked), the 4 at
    # z 32-63 not, and the rewritten one's 4 held chunks are all of its old version; N5: one
    # HEAD per held chunk file (27), the 9 others fetched at once, and the rewritten file's chunk
    assert (len(heads), count_decodes[0]) == ((27, 9 + 1) if fmt == "n5" else (4, 9 + 4))
    a[20:30, 20:30, 20:30] = 5  # a rewrite of units every chunk of which is held
    vol[20:30, 20:30, 20:30] = 5
    np.testing.assert_array_equal(read(box), vol[box])


def test_the_budget_comes_from_the_config_given_at_open(tmp_path) -> None:
    import shardstore
    from shardstore import IOConfig

    a = shardstore.zarr3.create(tmp_path / "a.zarr", shape=(64, 64), dtype="u1", chunks=(16, 16), mode="w")
    assert a.chunk_cache_bytes == 0 and a._async.chunk_cache is None  # off by default
    b = shardstore.zarr3.open(tmp_path / "a.zarr", mode="r", config=IOConfig(chunk_cache_bytes=1 << 20))
    assert b.chunk_cache_bytes == 1 << 20 and b._async.chunk_cache is not None
    import pickle

    assert pickle.loads(pickle.dumps(b)).chunk_cache_bytes == 1 << 20  # travels with the record


def test_an_entry_keeps_the_bytes_object_it_views_whole_but_copies_out_of_others() -> None:
    """``owned``: a chunk viewing all of a ``bytes`` object (immutable, read for this chunk)
    is kept as it is; one viewing a part of a larger one (a shard's bytes), or a reusable
    buffer, is copied."""
    whole = np.frombuffer(bytes(range(24)), dtype="uint8").reshape((2, 3, 4), order="F")
    assert owned(whole) is whole
    part = np.frombuffer(bytes(range(32)), dtype="uint8")[4:28].reshape((2, 3, 4))
    for chunk in (part, np.frombuffer(bytearray(24), dtype="uint8"), np.frombuffer(memoryview(bytes(24)), "uint8")):
        kept = owned(chunk)
        assert kept is not chunk and kept.base is None
        np.testing.assert_array_equal(kept, chunk)


def test_entries_keep_the_memory_order_of_the_decoded_chunk() -> None:
    """A precomputed chunk decodes to Fortran order; kept in C order, every hit would be a
    transposing copy (measured: 12x slower aligned reads than without the cache)."""
    chunk = np.frombuffer(bytearray(range(24)), dtype="uint8").reshape((2, 3, 4), order="F")
    kept = owned(chunk)  # (a view of a reusable buffer: copied)
    assert kept.flags.f_contiguous and kept.base is None
    np.testing.assert_array_equal(kept, chunk)
    a = shardstore.precomputed.create(shardstore.MemoryStore(), data_type="uint8", scales=[
        {"size": [32, 32, 32], "chunk_size": [16, 16, 16], "encoding": "raw"}])
    vol = np.arange(32**3, dtype="uint8").reshape(32, 32, 32, 1)
    a[...] = vol
    a.chunk_cache_bytes = MIB
    np.testing.assert_array_equal(a[4:20, 4:20, 4:20], vol[4:20, 4:20, 4:20])
    cache = a._async.chunk_cache
    assert cache is not None and len(cache) == 8
    assert all(entry[1].flags.f_contiguous for entry in cache._entries.values())
