"""The core's loop-free read path (``read_into_now``): files and memory are read, decoded and
scattered on the calling thread and, for slow chunks, on pool threads; every variant must give
exactly what NumPy gives, and errors must still name the chunk."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

import shardstore
from shardstore.config import IOConfig
from shardstore.core import batches as core_batches
from shardstore.core import io as core_io
from shardstore.core import threads
from shardstore.errors import ChunkNotFoundError, CodecError, ShardStoreError

# (thread_item_seconds, waiting_item_seconds): inline only, codec pool, I/O pool
MODES = {"inline": (1e9, 1e9), "codec-pool": (0.0, 1e9), "io-pool": (0.0, 0.0)}
DEFAULTS = IOConfig()


@pytest.fixture(params=sorted(MODES))
def mode(request: pytest.FixtureRequest) -> IOConfig:
    """The config that makes every blocking read run its chunks that way."""
    thread, waiting = MODES[request.param]
    return IOConfig(thread_item_seconds=thread, thread_work_seconds=0.0, waiting_item_seconds=waiting)


def _volume(shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(3).integers(0, 1000, size=shape).astype("uint16")


def _arrays(tmp_path: Path, vol: np.ndarray, config: IOConfig = DEFAULTS) -> dict[str, shardstore.Array]:
    z = shardstore.create(str(tmp_path / "a.zarr"), shape=vol.shape, dtype=vol.dtype, chunks=(8, 8, 8),
                          codecs=[{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 1}}],
                          config=config)
    n5 = shardstore.n5.create(str(tmp_path / "c.n5"), "d", shape=vol.shape, dtype=vol.dtype,
                              block_size=(8, 8, 8), compression={"type": "gzip", "level": 1}, config=config)
    for a in (z, n5):
        a[...] = vol
    return {"zarr3": z, "n5": n5}


@pytest.mark.parametrize("fmt", ["zarr3", "n5"])
def test_reads_match_numpy_in_every_mode(tmp_path: Path, mode: IOConfig, fmt: str) -> None:
    vol = _volume((37, 29, 41))  # clipped / padded edge chunks in every dimension
    a = _arrays(tmp_path, vol, mode)[fmt]
    rng = np.random.default_rng(7)
    for _ in range(20):
        lo = [int(rng.integers(0, s)) for s in vol.shape]
        hi = [int(rng.integers(l + 1, s + 1)) for l, s in zip(lo, vol.shape)]
        sel = tuple(slice(l, h) for l, h in zip(lo, hi))
        np.testing.assert_array_equal(a[sel], vol[sel])
    np.testing.assert_array_equal(np.asarray(a), vol)
    np.testing.assert_array_equal(a[::3, 5, ::-2], vol[::3, 5, ::-2])
    np.testing.assert_array_equal(a.oindex[[0, 9, 36], :, [1, 40]], vol[[0, 9, 36]][:, :, [1, 40]])


def test_corrupt_chunk_names_its_key_in_every_mode(tmp_path: Path, mode: IOConfig) -> None:
    vol = _volume((32, 32, 32))
    a = _arrays(tmp_path, vol, mode)["n5"]
    (tmp_path / "c.n5" / "d" / "2" / "1" / "3").write_bytes(b"\x00\x00\x00\x03" + b"garbage" * 20)
    with pytest.raises(CodecError, match="2/1/3"):
        np.asarray(a)
    # the other chunks are unharmed and a read that avoids the bad one works
    np.testing.assert_array_equal(a[:8], vol[:8])


def test_missing_chunks_read_as_fill_or_raise_when_strict(tmp_path: Path, mode: IOConfig) -> None:
    vol = _volume((32, 32, 32))
    a = _arrays(tmp_path, vol, mode)["zarr3"]
    a[8:16, 8:16, 8:16] = 0  # an all-fill chunk is deleted
    expected = vol.copy()
    expected[8:16, 8:16, 8:16] = 0
    np.testing.assert_array_equal(np.asarray(a), expected)
    with pytest.raises(ChunkNotFoundError, match="1.1.1|1/1/1"):
        a.read(strict=True)


def test_local_reads_do_not_use_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    vol = _volume((24, 24, 24))
    arrays = _arrays(tmp_path, vol)

    async def no_loop(*args: object, **kwargs: object) -> None:
        raise AssertionError("the async read path was used for a local store")

    monkeypatch.setattr("shardstore.core.array.read_into", no_loop)
    for a in arrays.values():
        np.testing.assert_array_equal(a[1:20, 3:9, :], vol[1:20, 3:9, :])
        np.testing.assert_array_equal(np.asarray(a), vol)


def test_errors_from_pool_threads_are_shardstore_errors(tmp_path: Path) -> None:
    vol = _volume((32, 32, 32))
    a = _arrays(tmp_path, vol, IOConfig(thread_item_seconds=0.0))["zarr3"]
    for key in ("c/3/3/3", "c/0/2/1"):
        (tmp_path / "a.zarr" / key).write_bytes(b"not zstd")
    with pytest.raises(ShardStoreError):
        np.asarray(a)


@pytest.mark.parametrize("encoding", ["raw", "compressed_segmentation"])
@pytest.mark.parametrize("sharded", [False, True])
def test_precomputed_reads_are_fortran_ordered(tmp_path: Path, encoding: str, sharded: bool) -> None:
    """Precomputed chunks are stored x fastest: reads return Fortran-ordered [x, y, z, c]
    arrays (ChunkLayout.order), with the same values as a C-ordered read would have."""
    vol = np.random.default_rng(4).integers(0, 50, size=(40, 30, 20, 1)).astype("uint32")
    scale: dict = {"size": [40, 30, 20], "resolution": [1, 1, 1], "voxel_offset": [0, 0, 0],
                   "chunk_size": [16, 16, 8], "encoding": encoding}
    if encoding == "compressed_segmentation":
        scale["compressed_segmentation_block_size"] = [8, 8, 8]
    if sharded:
        scale["sharding"] = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity",
                             "preshift_bits": 0, "minishard_bits": 1, "shard_bits": 1,
                             "minishard_index_encoding": "raw", "data_encoding": "raw"}
    a = shardstore.precomputed.create(str(tmp_path / "v"), data_type="uint32", type="segmentation",
                                      scales=[scale])
    a[...] = vol
    for sel in [(slice(None),) * 4, (slice(3, 37), slice(5, 29), slice(1, 19), 0)]:
        got = a[sel]
        assert got.flags.f_contiguous
        np.testing.assert_array_equal(got, vol[sel])
    np.testing.assert_array_equal(np.asarray(a), vol)


def test_async_reads_of_local_arrays_take_the_same_path(tmp_path: Path) -> None:
    """``AsyncArray.read`` (used from async code) runs the loop-free reader in a thread."""
    import asyncio

    from shardstore.core.indexing import basic_indexer

    vol = _volume((24, 24, 24))
    for a in _arrays(tmp_path, vol).values():
        sel = (slice(2, 23), slice(None), slice(5, 6))
        got = asyncio.run(a._async.read(basic_indexer(sel, a.driver.layout.grid)))
        np.testing.assert_array_equal(got, vol[sel])


class _FakeClock:
    """``time`` for ``threads``: the items below advance it by what they would cost, so the
    decision share_now makes from timing its first item does not depend on the machine's
    load (wall-clock timing of real work made this test fail under load)."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0

    def perf_counter(self) -> float:
        return self.wall

    def thread_time(self) -> float:
        return self.cpu


def _spy_on_run_shared(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ``how`` of every ``run_shared`` call from now on (the calls still run)."""
    chosen: list[str] = []
    real_run_shared = threads.run_shared

    def spy(fn, items, args, how, memo, kinds, config, meanwhile=None):  # type: ignore[no-untyped-def]
        chosen.append(how)
        real_run_shared(fn, items, args, how, memo, kinds, config, meanwhile)

    monkeypatch.setattr(threads, "run_shared", spy)
    return chosen


@pytest.mark.parametrize(
    "n, work, slow, expect",
    [
        (10, "cpu", False, "inline"),  # ~3 ms in all: threads would cost more in GIL hand-offs
        (60, "cpu", False, "codec"),  # ~18 ms: the codec pool helps
        (3, "cpu", True, "inline"),  # a slow decoder, ~1 ms in all: a hand-off costs more
        (10, "cpu", True, "codec"),  # a slow decoder, ~3 ms (a gzip read of ~8 blocks)
        (10, "disk", False, "io"),  # a cold disk: reads in flight overlap even for a few items
        # off the CPU with no block read from storage: waiting for a core or the GIL (a
        # convert's encoders on both cores), not for the disk: no I/O threads for warm data
        (10, "core", False, "codec"),
        (10, "core?", False, "io"),  # ... unless the system does not count blocks read
    ],
)
def test_share_now_threads_only_when_it_pays(n: int, work: str, slow: bool, expect: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _FakeClock()
    blocks = [0]
    monkeypatch.setattr(threads, "time", clock)
    monkeypatch.setattr(threads, "_RUSAGE_THREAD", None if work == "core?" else 1)
    monkeypatch.setattr(threads, "_blocks_read", lambda: None if work == "core?" else blocks[0])
    chosen = _spy_on_run_shared(monkeypatch)
    here = threading.current_thread()
    done: list[int] = []
    lock = threading.Lock()

    def fn(batch: list) -> None:
        for item in batch:
            if threading.current_thread() is here:  # the thread share_now times
                clock.wall += 300e-6 if work == "cpu" else 2e-3
                clock.cpu += 300e-6 if work == "cpu" else 20e-6
                blocks[0] += 64 if work == "disk" else 0
            with lock:
                done.append(item)

    threads.share_now(fn, list(range(n)), config=DEFAULTS, slow=slow)
    assert sorted(done) == list(range(n))  # every item ran exactly once, whoever ran it
    assert (chosen or ["inline"]) == [expect]


@pytest.mark.parametrize("last, n, expect, free", [
    ("io", 2, [], False),
    ("io", 3, ["io"], False),  # a cold disk last time (where the system counts blocks read: Linux)
    ("codec", 3, ["codec"], False),
    ("codec", 2, [], False),  # two decodes: timed first, here inline
    ("codec", 2, ["codec"], True),  # two GIL-free batches (a small read's piece per thread)
    (None, 2, [], False),
    (None, 3, [], False),  # a handle's first read of GIL-holding items: one item timed alone first
    # ... of GIL-free items (native reads): the codec threads at once, the first batch timed
    # beside them (a cold first read's later chunks wait for no single chunk's read and decode)
    (None, 3, ["codec"], True),
    (None, 2, ["codec"], True),  # (two GIL-free batches: a small read's piece per thread)
])
def test_share_now_starts_as_the_last_call_chose(last: str | None, n: int, expect: list[str], free: bool,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "time", _FakeClock())  # (every item takes no time: inline)
    monkeypatch.setattr(threads, "_RUSAGE_THREAD", 1)  # (as on Linux, whatever runs the test)
    chosen = _spy_on_run_shared(monkeypatch)
    done: list[int] = []

    def fn(batch: list) -> None:
        done.extend(batch)

    memo: dict = {} if last is None else {fn: last}
    threads.share_now(fn, list(range(n)), config=DEFAULTS, memo=memo, free=free)
    assert sorted(done) == list(range(n)) and chosen == expect
    if not expect:  # (shared, the helper may take every item before this thread times one)
        assert memo[fn] == "inline"  # what this call's timing saw, for the next one


@pytest.mark.parametrize("last, n, slow", [
    ("io", 1, False), ("io", 2, False), ("io", 5, False), ("codec", 1, False), ("codec", 2, False),
    ("codec", 5, False),
    (None, 1, True),  # a handle's first single slow decode (zstd, gzip) beside the hits
])
def test_meanwhile_runs_beside_the_threads_the_last_call_chose(last: str | None, n: int, slow: bool,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A read's other work (the cache's hits copied out) runs on the calling thread while
    the threads the last call chose work on its items, even on a single item after a
    disk wait or after items worth a thread: ``meanwhile`` waits here for an item done by
    another thread, which would time out if the items waited for it."""
    monkeypatch.setattr(threads, "_RUSAGE_THREAD", 1)
    elsewhere = threading.Event()
    done: list[int] = []
    here = threading.get_ident()

    def fn(batch: list) -> None:
        done.extend(batch)
        if threading.get_ident() != here:
            elsewhere.set()

    def meanwhile() -> None:
        assert elsewhere.wait(10), "no item ran beside meanwhile"

    memo: dict = {} if last is None else {fn: last}
    threads.share_now(fn, list(range(n)), config=DEFAULTS, memo=memo, meanwhile=meanwhile, slow=slow)
    assert sorted(done) == list(range(n))


@pytest.mark.parametrize("n, expect", [(2, "codec"), (3, "codec")])
def test_a_call_too_small_to_share_remembers_what_its_items_are_worth(
    n: int, expect: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two slow decodes (1 ms each) run on this thread, the second after the first was timed:
    nothing is left to share. What the call leaves for the next one is what a call with
    more items like them would do (the codec threads at once), not "inline": remembered
    as "inline", the next read of three such chunks beside the cache's hits decoded its
    first one alone before any thread helped."""
    clock = _FakeClock()
    monkeypatch.setattr(threads, "time", clock)
    monkeypatch.setattr(threads, "_RUSAGE_THREAD", 1)
    monkeypatch.setattr(threads, "_blocks_read", lambda: 0)
    here = threading.current_thread()
    done: list[int] = []
    lock = threading.Lock()

    def fn(batch: list) -> None:
        for item in batch:
            if threading.current_thread() is here:
                clock.wall += 1e-3
                clock.cpu += 1e-3
            with lock:
                done.append(item)

    memo: dict = {}
    threads.share_now(fn, list(range(n)), config=DEFAULTS, memo=memo, slow=True)
    assert sorted(done) == list(range(n))
    assert memo[fn] == expect


def test_a_cached_sharded_read_decodes_its_one_miss_beside_the_hits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read of sharded zstd chunks with one chunk to fetch and others the cache holds:
    that chunk is read and decoded on a codec thread while this thread copies the hits out
    (the hits' copies wait here until it has started elsewhere); with nothing held, the
    one chunk is read here."""
    vol = np.arange(16 * 16 * 16, dtype=np.uint16).reshape(16, 16, 16)
    a = shardstore.create(str(tmp_path / "s.zarr"), shape=vol.shape, dtype=vol.dtype, chunks=(8, 8, 8),
                          shards=(16, 16, 16), codecs=[{"name": "bytes", "configuration": {"endian": "little"}},
                                                       {"name": "zstd", "configuration": {"level": 1}}],
                          config=IOConfig(chunk_cache_bytes=1 << 20))
    a[...] = vol
    a = shardstore.open(str(tmp_path / "s.zarr"), config=IOConfig(chunk_cache_bytes=1 << 20))
    here = threading.get_ident()
    scattered: list[int] = []
    real_scatter, real_place = core_io._scatter, core_io.place_hits
    elsewhere = threading.Event()

    def scatter(batch, *args):  # type: ignore[no-untyped-def]
        scattered.append(threading.get_ident())
        if threading.get_ident() != here:
            elsewhere.set()
        return real_scatter(batch, *args)

    def place_hits(hits, out, config):  # type: ignore[no-untyped-def]
        assert elsewhere.wait(10), "the miss did not start beside the hits"
        return real_place(hits, out, config)

    monkeypatch.setattr(core_io, "_scatter", scatter)
    monkeypatch.setattr(core_io, "place_hits", place_hits)
    np.testing.assert_array_equal(a[0:8, 0:8, 0:8], vol[0:8, 0:8, 0:8])  # one chunk, none held
    assert scattered == [here]
    scattered.clear()
    np.testing.assert_array_equal(a[0:8, 0:8, 0:16], vol[0:8, 0:8, 0:16])  # one held, one to fetch
    assert len(scattered) == 1 and scattered[0] != here


@pytest.mark.parametrize("memo", [None, {}, {"fn": "inline"}])
def test_meanwhile_runs_first_when_no_thread_starts_at_once(memo: dict | None) -> None:
    order: list[tuple[str, int]] = []

    def fn(batch: list) -> None:
        order.extend(("item", threading.get_ident()) for _ in batch)

    if memo is not None and "fn" in memo:
        memo = {fn: memo["fn"]}
    threads.share_now(fn, [0], config=DEFAULTS, memo=memo, meanwhile=lambda: order.append(("meanwhile", threading.get_ident())))
    assert order == [("meanwhile", threading.get_ident()), ("item", threading.get_ident())]


def test_an_error_in_meanwhile_leaves_once_the_item_beside_it_is_done() -> None:
    """Both write into one output: the item read beside a failing ``meanwhile`` is done (or
    never started) before the error reaches the caller, and the error is meanwhile's."""
    started, release = threading.Event(), threading.Event()
    finished: list[int] = []

    def fn(batch: list) -> None:
        started.set()
        release.wait(10)
        finished.extend(batch)

    def meanwhile() -> None:
        assert started.wait(10)
        threading.Timer(0.05, release.set).start()
        raise ValueError("meanwhile failed")

    with pytest.raises(ValueError, match="meanwhile failed"):
        threads.share_now(fn, [7], config=DEFAULTS, memo={fn: "io"}, meanwhile=meanwhile)
    assert finished == [7]


def test_a_cached_read_copies_its_hits_while_the_io_thread_reads_its_one_miss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read with one chunk to fetch and chunks the cache holds, after a read that waited
    on the disk: the fetch goes to an I/O thread while this thread copies the hits out. A
    read with nothing held runs its one chunk here (no thread hop for nothing beside it)."""
    vol = np.arange(16 * 16 * 16, dtype=np.uint16).reshape(16, 16, 16)
    a = _arrays(tmp_path, vol, IOConfig(chunk_cache_bytes=1 << 20))["n5"]
    layout = a._async._layout()
    submitted: list[int] = []
    real_pool = threads.io_pool

    def io_pool(n: int | None = None):  # type: ignore[no-untyped-def]
        submitted.append(1)
        return real_pool(n)

    monkeypatch.setattr(threads, "io_pool", io_pool)

    def last_waited() -> None:  # (as after a cold read: whichever work function reads)
        for fn in (core_batches.native_then, core_io._scatter):
            layout.threads_memo[fn] = "io"

    last_waited()
    np.testing.assert_array_equal(a[0:8, 0:8, 0:8], vol[0:8, 0:8, 0:8])  # one chunk, none held
    assert submitted == []
    last_waited()
    np.testing.assert_array_equal(a[0:8, 0:8, 0:16], vol[0:8, 0:8, 0:16])  # one held, one to fetch
    assert submitted == [1]


def test_without_counts_of_blocks_read_a_cold_disk_is_timed_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the system does not count a thread's blocks read from storage, the I/O threads
    never start before an item was timed alone: among 7 others on 2 cores, the timed batch
    would look like waiting on a disk when the data is warm, and warm reads kept the threads
    (a convert's peak RSS then outgrew its budget: their malloc arenas)."""
    monkeypatch.setattr(threads, "time", _FakeClock())
    monkeypatch.setattr(threads, "_RUSAGE_THREAD", None)
    chosen = _spy_on_run_shared(monkeypatch)
    fn = lambda batch: None  # noqa: E731
    memo: dict = {fn: "io"}
    threads.share_now(fn, list(range(5)), config=DEFAULTS, memo=memo)
    assert chosen == [] and memo[fn] == "inline"


@pytest.mark.parametrize("blocks_per_item, expect", [(64, "io"), (0, "codec")])
def test_io_threads_started_at_once_stay_only_for_reads_from_storage(
    blocks_per_item: int, expect: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The I/O threads the last call chose start at once, and the batch this thread times
    meanwhile decides the next call: it waited on the disk only if its reads fetched blocks
    from storage. Off the CPU with none fetched (waiting for a core beside the other I/O
    threads), its items were CPU work: the next call starts the codec threads instead of
    keeping 8 threads for warm data."""
    clock = _FakeClock()
    blocks = [0]
    monkeypatch.setattr(threads, "time", clock)
    monkeypatch.setattr(threads, "_RUSAGE_THREAD", 1)
    monkeypatch.setattr(threads, "_blocks_read", lambda: blocks[0])
    chosen = _spy_on_run_shared(monkeypatch)
    here = threading.current_thread()
    timed = threading.Event()  # (the helpers wait for it: else they may take every item first)

    def fn(batch: list) -> None:
        if threading.current_thread() is not here:
            timed.wait(10)
            return
        clock.wall += 2e-3 * len(batch)  # each item: 2 ms, of which 20 us on the CPU
        clock.cpu += 20e-6 * len(batch)
        blocks[0] += blocks_per_item * len(batch)
        timed.set()

    memo: dict = {fn: "io"}
    threads.share_now(fn, list(range(40)), config=DEFAULTS, memo=memo)
    assert chosen == ["io"] and memo.get(fn) == expect


@pytest.mark.parametrize(
    "took, n_rest, slow, expect",
    [
        (0.6e-3, 7, True, "codec"),  # a 64^3 gzip read: 8 blocks of ~0.6 ms (1.6x faster on two threads)
        (0.25e-3, 7, True, "codec"),  # zstd blocks of ~0.25 ms: 1.4x
        (0.25e-3, 16, False, "inline"),  # chunks of syscalls and copies (Zarr v3 blosc): 0.9x on two
        (0.3e-3, 40, False, "codec"),  # ... unless there are many
        (0.3e-3, 2, True, "inline"),  # 0.6 ms left: not worth waking a thread
        (0.1e-3, 200, True, "inline"),  # memcpy-sized items: the hand-offs cost more than the copies
        (3e-3, 1, True, "inline"),  # one item left: nothing to share
    ],
)
def test_threads_for_cpu_items(took: float, n_rest: int, slow: bool, expect: str) -> None:
    assert threads.threads_for(DEFAULTS, took, 0.0, n_rest, writes=False, free=False, slow=slow) == expect


@pytest.mark.parametrize(
    "took, waited, expect",
    [
        (1.0e-3, 0.0, "codec"),  # a blosc chunk encoded and written into the page cache
        (1.44e-3, 0.57e-3, "codec"),  # ... with a journal wait (seen on this VM): still CPU-bound
        (5e-3, 4e-3, "io"),  # a slow file system: more writes in flight overlap its waits
    ],
)
def test_writes_get_the_io_threads_only_when_mostly_waiting(took: float, waited: float, expect: str) -> None:
    """An encoder on each of 8 I/O threads on 2 cores wrote N5 slower than one per core and
    kept a malloc arena of ~1 MiB each: writes get them only when waiting dominates."""
    assert threads.threads_for(DEFAULTS, took, waited, 511, writes=True, free=False) == expect
    assert threads.threads_for(DEFAULTS, took, waited, 511, writes=False, free=False) == (
        "io" if waited > DEFAULTS.waiting_item_seconds else "codec")


def _precomputed(path: Path, encoding: str, size: int = 8):
    """A one-scale precomputed volume of ``size``^3 in 8^3 chunks (uint64 for
    compressed_segmentation, uint8 otherwise)."""
    scale = {"key": "s0", "size": [size] * 3, "resolution": [1, 1, 1], "voxel_offset": [0, 0, 0],
             "chunk_sizes": [[8, 8, 8]], "encoding": encoding}
    dtype = "uint64" if encoding == "compressed_segmentation" else "uint8"
    if encoding == "compressed_segmentation":
        scale["compressed_segmentation_block_size"] = [8, 8, 8]
    return shardstore.precomputed.create(str(path), data_type=dtype, scales=[scale])


def test_precomputed_jpeg_is_a_slow_decoder_and_raw_is_not(tmp_path: Path) -> None:
    for encoding, slow in (("jpeg", True), ("raw", False), ("compressed_segmentation", False)):
        a = _precomputed(tmp_path / encoding, encoding)
        assert a.driver.layout.pipeline.slow_decode is slow, encoding


def test_decoders_that_hold_the_gil_keep_warm_reads_on_one_thread() -> None:
    """compressed_segmentation's decode holds the GIL: however much work a warm read has, it
    stays inline; a cold one (items waiting on the disk) still gets the I/O threads."""
    for took, n_rest in ((0.5e-3, 16), (0.5e-3, 4000), (20e-3, 100)):
        assert threads.threads_for(DEFAULTS, took, 0.0, n_rest, writes=False, free=False, gil=True) == "inline"
        assert threads.threads_for(DEFAULTS, took, 0.0, n_rest, writes=False, free=False, gil=False) == "codec"
    assert threads.threads_for(DEFAULTS, 2e-3, 1.5e-3, 16, writes=False, free=False, gil=True) == "io"


def test_precomputed_compressed_segmentation_holds_the_gil_and_its_reads_stay_inline(tmp_path: Path, monkeypatch) -> None:
    for encoding, gil in (("jpeg", False), ("raw", False), ("compressed_segmentation", True)):
        a = _precomputed(tmp_path / encoding, encoding)
        assert a.driver.layout.pipeline.holds_gil is gil, encoding
    # a read of 64 chunks, each made to look slow (as real 64^3 chunks are): no pool threads
    a = _precomputed(tmp_path / "big", "compressed_segmentation", size=32)
    data = np.random.default_rng(3).integers(0, 5, size=a.shape, dtype=np.uint64)
    a[...] = data
    kinds_seen = []
    real_for = threads.threads_for

    def spy(config, took, waited, n_rest, *kinds):
        kinds_seen.append(kinds)
        return real_for(config, 0.5e-3, 0.0, n_rest, *kinds)  # a warm 0.5 ms chunk

    monkeypatch.setattr(threads, "threads_for", spy)
    shared = []
    monkeypatch.setattr(threads, "run_shared", lambda *args: shared.append(args))
    np.testing.assert_array_equal(a[...], data)
    assert kinds_seen and all(k[-1] is True for k in kinds_seen) and not shared


@pytest.mark.parametrize(
    "compression, slow",
    [
        ({"type": "gzip", "level": 1}, True),
        ({"type": "zstd", "level": 1}, True),
        ({"type": "bzip2", "blockSize": 9}, True),
        ({"type": "xz", "preset": 1}, True),
        ({"type": "raw"}, False),
        ({"type": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0}, False),
        ({"type": "lz4", "blockSize": 65536}, False),
    ],
)
def test_slow_decoders_are_known_to_the_core(tmp_path: Path, compression: dict, slow: bool) -> None:
    """N5 (the codec inside the block codec) and Zarr v3 (inner chunks of a shard) alike."""
    a = shardstore.n5.create(str(tmp_path / "c.n5"), "d", shape=(8, 8), dtype="uint8", block_size=(4, 4), compression=compression)
    assert a.driver.layout.pipeline.slow_decode is slow
    if compression["type"] in ("gzip", "zstd"):
        z = shardstore.zarr3.create(
            str(tmp_path / "z.zarr"), shape=(8, 8), dtype="uint8", chunks=(4, 4), shards=(8, 8),
            codecs=[{"name": "bytes"}, {"name": compression["type"], "configuration": {"level": 1}}],
        )
        assert z.driver.layout.pipeline.slow_decode
    blosc = {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 1, "blocksize": 0}}
    b = shardstore.zarr3.create(
        str(tmp_path / "b.zarr"), shape=(8, 8), dtype="uint8", chunks=(4, 4), shards=(8, 8), codecs=[{"name": "bytes"}, blosc]
    )
    assert not b.driver.layout.pipeline.slow_decode


def test_feed_hands_out_shrinking_batches_each_item_once() -> None:
    """Large batches first, single items at the end (a slowed thread holds the others up by
    one item at most); every item exactly once; nothing more after a failure."""
    from shardstore.core.threads import Feed

    takes = DEFAULTS.feed_takes
    items = list(range(500))
    feed = Feed(items, 2, takes, print, ())
    batches = []
    while batch := feed.take():
        batches.append(batch)
    assert [x for b in batches for x in b] == items
    sizes = [len(b) for b in batches]
    assert sizes[0] == 500 // (takes * 2)
    assert sizes == sorted(sizes, reverse=True) and sizes[-takes * 2 :] == [1] * takes * 2
    assert len(Feed(items, 2, 1, print, ()).take()) == 500 // 2  # fewer takes: larger first batches

    def boom(batch: list) -> None:
        raise ValueError("decode failed")

    failing = Feed(items, 2, takes, boom, ())
    with pytest.raises(ValueError):
        failing.drain()
    assert failing.take() == []


def test_shared_call_keeps_no_reference_to_its_work() -> None:
    """Once ``run_shared`` returns, nothing of the call's work is referenced any more (the
    output array, here): helpers cancelled before they started stay queued in their pool
    until a thread takes them, and freeing outputs late, out of order, made glibc hand
    their memory back to the kernel after every read (page faults on each fresh output)."""
    import gc
    import weakref

    from shardstore._sync import codec_pool
    from shardstore.core.threads import run_shared

    config = IOConfig(codec_threads=3)  # a pool of its own, all of whose threads are kept busy
    pool = codec_pool(config.codec_threads)
    release = threading.Event()
    busy = [pool.submit(release.wait) for _ in range(3)]
    out = np.zeros(1000, np.uint8)
    ref = weakref.ref(out)

    def fill(batch: list, target: np.ndarray) -> None:
        for i in batch:
            target[i] = 1

    try:
        # the helpers cannot start: this thread does everything, and they stay queued
        run_shared(fill, list(range(1000)), (out,), "codec", None, (False, True, False, False), config)
        assert out.all()
        del out
        gc.collect()
        assert ref() is None
    finally:
        release.set()
        for f in busy:
            f.result()


def test_spread_shares_one_list_so_a_late_thread_holds_up_nothing() -> None:
    """The async runner's ``spread`` hands its threads shares of one list (``Feed``), as the
    blocking runner does: a pool thread that starts late takes what is left, not a fixed
    half the calling thread then waits for (a whole S3 shard's decode ran a third longer so).
    The results keep the order of the items."""
    import asyncio
    import time

    from shardstore._sync import codec_pool
    from shardstore.core.batches import spread

    config = IOConfig(codec_threads=5)  # a pool of its own, kept busy until the items are done
    pool = codec_pool(config.codec_threads)
    release = threading.Event()
    busy = [pool.submit(release.wait) for _ in range(5)]
    ran_on: list[str] = []

    def work(batch: list[int]) -> list[int]:
        for _ in batch:
            time.sleep(0.001)  # (slower than inline_item_seconds: the items go to threads)
            ran_on.append(threading.current_thread().name)
        return [i * 10 for i in batch]

    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        # the pool frees up only once every item is done, whichever thread did it
        loop.call_later(0, lambda: threading.Thread(target=lambda: (time.sleep(0.2), release.set())).start())
        return await spread(work, list(range(40)), config=config)

    try:
        assert asyncio.run(main()) == [i * 10 for i in range(40)]
        assert ran_on == [threading.current_thread().name] * 40
    finally:
        release.set()
        for f in busy:
            f.result()
