"""The core's loop-free write path (``write_from_now``) and the row-view copy (``assign``).

Unsharded formats on files or memory encode and write their chunks on the calling thread and,
for slow chunks, on pool threads, holding the same per-chunk locks as the event-loop path.
Every variant must give exactly what NumPy gives; concurrent partial writes to the same chunks
must all survive; errors must still name the key.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

import shardstore
from shardstore._assign import assign
from shardstore.config import IOConfig
from shardstore.core import batches, writes
from shardstore.errors import StoreError
from shardstore.store.memory import MemoryStore

# thread_item_seconds: every chunk on the calling thread, or spread over the I/O pool
MODES = {"inline": 1e9, "threads": 0.0}


@pytest.fixture(params=sorted(MODES))
def mode(request: pytest.FixtureRequest) -> IOConfig:
    """The config that makes every blocking write run its chunks that way."""
    return IOConfig(thread_item_seconds=MODES[request.param], thread_work_seconds=0.0)


def _no_loop_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the event-loop write path fail, so a test proves the loop-free one ran."""

    async def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("write_from (the event-loop path) was used")

    monkeypatch.setattr("shardstore.core.array.write_from", refuse)


def _arrays(tmp_path: Path, shape: tuple[int, ...], dtype: str, config: IOConfig) -> dict[str, shardstore.Array]:
    chunks = (8, 8, 8)
    return {
        "n5-gzip": shardstore.n5.create(str(tmp_path / "c.n5"), "g", shape=shape, dtype=dtype,
                                        block_size=chunks, compression={"type": "gzip", "level": 1}, config=config),
        "n5-raw": shardstore.n5.create(str(tmp_path / "c.n5"), "r", shape=shape, dtype=dtype,
                                       block_size=chunks, compression={"type": "raw"}, config=config),
        "zarr3": shardstore.create(str(tmp_path / "a.zarr"), shape=shape, dtype=dtype, chunks=chunks, config=config),
        "zarr3-memory": shardstore.create(MemoryStore(), shape=shape, dtype=dtype, chunks=chunks, config=config),
    }


@pytest.mark.parametrize("fmt", ["n5-gzip", "n5-raw", "zarr3", "zarr3-memory"])
def test_writes_match_numpy_in_every_mode(tmp_path: Path, mode: IOConfig, fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    shape = (37, 29, 41)  # edge chunks in every dimension
    a = _arrays(tmp_path, shape, "uint16", mode)[fmt]
    _no_loop_writes(monkeypatch)
    ref = np.zeros(shape, "uint16")
    rng = np.random.default_rng(11)
    for i in range(25):
        lo = [int(rng.integers(0, s)) for s in shape]
        hi = [int(rng.integers(l + 1, s + 1)) for l, s in zip(lo, shape)]
        sel = tuple(slice(l, h) for l, h in zip(lo, hi))
        value = rng.integers(0, 60000, size=[h - l for l, h in zip(lo, hi)]).astype("uint16")
        if i % 5 == 0:
            value = value[..., ::-1]  # a strided source
        a[sel] = value
        ref[sel] = value
    a[::3, 4, ::-2] = 7  # steps, an integer index, a broadcast scalar
    ref[::3, 4, ::-2] = 7
    a[0:8, 0:8, 0:8] = 0  # a whole chunk of fill: deleted, reads as fill
    ref[0:8, 0:8, 0:8] = 0
    np.testing.assert_array_equal(np.asarray(a), ref)


def test_n5_whole_write_is_loop_free_and_readable_by_a_fresh_handle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    vol = np.random.default_rng(2).integers(0, 255, size=(64, 40, 24)).astype("uint8")
    a = shardstore.n5.create(str(tmp_path / "c.n5"), "d", shape=vol.shape, dtype="uint8", block_size=(16, 16, 16))
    _no_loop_writes(monkeypatch)
    a[...] = vol
    np.testing.assert_array_equal(np.asarray(shardstore.n5.open(str(tmp_path / "c.n5"), "d")), vol)


def test_sharded_writes_are_loop_free_over_local_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the sharding adapter declares synchronous writes over local files: the blocking runner
    # encodes each shard's chunks and stores the shard once (whole shards, partial shards
    # through the locked read-modify-write), with no event-loop write path
    a = shardstore.create(str(tmp_path / "s.zarr"), shape=(32, 32), dtype="int32", chunks=(8, 8), shards=(16, 16))
    assert writes.writes_now(a.driver.layout)
    _no_loop_writes(monkeypatch)
    vol = np.arange(32 * 32, dtype="int32").reshape(32, 32)
    a[...] = vol  # four whole shards
    a[3:30, 1:31] = -vol[3:30, 1:31]  # every shard partly
    ref = vol.copy()
    ref[3:30, 1:31] = -vol[3:30, 1:31]
    np.testing.assert_array_equal(shardstore.open(str(tmp_path / "s.zarr"))[...], ref)


def test_sharded_writes_over_a_store_without_sync_writes_take_the_loop(tmp_path: Path) -> None:
    from shardstore.store import LocalStore
    from shardstore.store.wrappers import AsyncOnlyStore

    a = shardstore.zarr3.create(AsyncOnlyStore(LocalStore(tmp_path / "s.zarr")), shape=(32, 32), dtype="int32",
                                chunks=(8, 8), shards=(16, 16))
    assert not writes.write_from_now(a.driver.layout, [], np.zeros((0, 0), "int32"))
    vol = np.arange(32 * 32, dtype="int32").reshape(32, 32)
    a[3:30, 1:31] = vol[3:30, 1:31]
    ref = np.zeros_like(vol)
    ref[3:30, 1:31] = vol[3:30, 1:31]
    np.testing.assert_array_equal(a[...], ref)


@pytest.mark.parametrize("fmt", ["n5-gzip", "zarr3-memory"])
def test_concurrent_partial_writes_to_shared_chunks_all_survive(tmp_path: Path, mode: IOConfig, fmt: str) -> None:
    # each thread sets its own elements, spread over the same few chunks: every write is a
    # read-merge-write of a chunk another thread is changing too; without the per-chunk
    # locks some of them are lost
    shape = (16, 16, 16)
    a = _arrays(tmp_path, shape, "int32", mode)[fmt]
    rng = np.random.default_rng(5)
    last = int(np.prod(shape)) - 1  # (15, 15, 15): written through the event loop below
    cells = rng.permutation(last)[: 8 * 40].reshape(8, 40)
    errors: list[BaseException] = []

    def writer(t: int) -> None:
        try:
            for flat in cells[t]:
                a[np.unravel_index(flat, shape)] = t + 1
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    shardstore._sync.sync(a._async.setitem((15, 15, 15), -5))  # the event-loop path meanwhile
    for th in threads:
        th.join()
    assert not errors
    ref = np.zeros(shape, "int32")
    for t in range(8):
        ref[np.unravel_index(cells[t], shape)] = t + 1
    ref[15, 15, 15] = -5
    np.testing.assert_array_equal(np.asarray(a), ref)


def test_a_failing_file_write_names_the_key_and_keeps_the_old_chunk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = shardstore.n5.create(str(tmp_path / "c.n5"), "d", shape=(16, 16), dtype="uint8", block_size=(8, 8))
    a[...] = 1
    from shardstore.store import _local_files

    def broken(fd: int, value: bytes) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_local_files, "write_all", broken)
    with pytest.raises(StoreError, match=r"d/1/0"):
        a[0:8, 8:16] = 2
    monkeypatch.undo()
    np.testing.assert_array_equal(a[...], np.ones((16, 16), "uint8"))


def test_read_only_arrays_refuse_loop_free_writes(tmp_path: Path) -> None:
    shardstore.n5.create(str(tmp_path / "c.n5"), "d", shape=(8,), dtype="uint8", block_size=(4,))
    r = shardstore.n5.open(str(tmp_path / "c.n5"), "d", mode="r")
    with pytest.raises(shardstore.errors.ReadOnlyError):
        r[0:4] = 1


# -- assign ------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["uint8", ">u2", "<i4", "float64", "S3", "complex64"])
@pytest.mark.parametrize("order", ["C", "F"])
def test_assign_matches_numpy(dtype: str, order: str) -> None:
    rng = np.random.default_rng(1)
    src_all = rng.integers(0, 200, size=(20, 30, 40)).astype(dtype)
    src_all = np.asarray(src_all, order=order)
    for dst_sel, src_sel in [
        ((slice(2, 12), slice(5, 25), slice(0, 40)), (slice(0, 10), slice(0, 20), slice(0, 40))),
        ((slice(0, 8), slice(0, 8), slice(8, 16)), (slice(4, 12), slice(2, 10), slice(1, 9))),
        ((3, slice(0, 30), slice(0, 40)), (7, slice(None), slice(None))),
        ((slice(0, 20, 2), slice(None), slice(1, 31)), (slice(0, 10), slice(None), slice(2, 32))),
        ((1, 2, 3), (4, 5, 6)),
        ((np.array([0, 3, 5]), slice(0, 30), slice(0, 40)), (slice(0, 3), slice(None), slice(None))),
        ((slice(0, 4), np.array([True] * 10 + [False] * 20), slice(0, 40)), (slice(0, 4), slice(0, 10), slice(None))),
    ]:
        out = np.zeros((40, 30, 40), dtype=dtype, order=order)
        ref = out.copy(order="K")
        assign(out, dst_sel, src_all[src_sel])
        ref[dst_sel] = src_all[src_sel]
        np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("shape", [(64, 1), (1, 64), (0, 64), (3, 0), (2, 1, 16)])
def test_assign_odd_shapes(shape: tuple[int, ...]) -> None:
    for order in "CF":
        src = np.arange(int(np.prod(shape)), dtype="uint8").reshape(shape, order=order)
        out = np.zeros((70, 70, 20)[: len(shape)], "uint8", order=order)
        sel = tuple(slice(1, 1 + n) for n in shape)
        ref = out.copy(order="K")
        assign(out, sel, src)
        ref[sel] = src
        np.testing.assert_array_equal(out, ref)


def test_assign_converts_dtypes_and_broadcasts_like_numpy() -> None:
    out = np.zeros((4, 64), ">u2")
    src = np.arange(4 * 64, dtype="<u2").reshape(4, 64)
    assign(out, ..., src)  # byte order differs: NumPy converts
    np.testing.assert_array_equal(out, src)
    assign(out, (slice(None), slice(0, 32)), 9)
    assert (out[:, :32] == 9).all() and out[0, 32] == 32
    f = np.zeros((8, 8), "float32")
    assign(f, ..., np.arange(64, dtype="int64").reshape(8, 8))
    assert f[7, 7] == 63.0


def test_a_sync_write_from_the_loop_thread_raises_instead_of_hanging(tmp_path: Path) -> None:
    a = shardstore.n5.create(str(tmp_path / "c.n5"), "d", shape=(8,), dtype="uint8", block_size=(4,))

    async def inside() -> None:
        a[0:4] = 1  # the locks are granted by this very loop: waiting for them would hang

    with pytest.raises(RuntimeError, match="own event loop"):
        shardstore._sync.sync(inside())
    a[0:4] = 2  # and the handle still works
    np.testing.assert_array_equal(a[...], [2, 2, 2, 2, 0, 0, 0, 0])


def test_bounded_waits_for_running_jobs_before_raising() -> None:
    # the thread work of a running job (a file write) cannot be cancelled: when another job
    # fails, the error waits for it, so nothing of a failed call lands after the caller saw
    # the error; jobs not started yet never start
    import asyncio
    import time

    done: list[str] = []

    async def slow() -> None:
        await asyncio.to_thread(time.sleep, 0.3)
        done.append("slow")

    async def failing() -> None:
        await asyncio.sleep(0.01)
        raise RuntimeError("injected")

    async def never() -> None:
        done.append("never")

    async def go() -> None:
        with pytest.raises(RuntimeError, match="injected"):
            await batches.bounded(2, [slow, failing, never])
        assert done == ["slow"]

    asyncio.run(go())


def test_local_set_many_raises_only_after_every_file_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from shardstore.store.local import LocalStore

    store = LocalStore(tmp_path)
    real_write = LocalStore._write

    def write(self: LocalStore, key: str, value: bytes) -> None:
        if key == "bad":
            raise StoreError("injected failure writing 'bad'")
        time.sleep(0.2)
        real_write(self, key, value)

    store.write_jobs = 4
    monkeypatch.setattr(LocalStore, "_write", write)
    # on shardstore's loop: asyncio.run would wait for the threads at its end anyway
    with pytest.raises(StoreError, match="bad"):
        shardstore._sync.sync(store.set_many([("bad", b"x"), ("a", b"1"), ("b", b"2"), ("c", b"3")]))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "c"]  # all done, no temp files


def test_the_blocking_writer_stores_encoded_chunks_a_megabyte_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unsharded chunks are stored a few at a time, as they are encoded: a thread given a
    quarter of a large write's chunks used to encode them all before storing any (a 512^3
    gzip N5 write held 23 MiB of encoded blocks above its input)."""
    from shardstore.store.local import LocalStore

    inline = IOConfig(thread_item_seconds=1e9)  # every chunk on the calling thread: one batch
    vol = np.random.default_rng(3).integers(0, 255, size=(256, 128, 128)).astype("uint8")
    a = shardstore.n5.create(str(tmp_path / "c.n5"), "d", shape=vol.shape, dtype="uint8", block_size=(32, 64, 64),
                             compression={"type": "gzip", "level": 1}, config=inline)
    calls: list[int] = []
    real = LocalStore.update_many_sync

    def spy(self: LocalStore, items: list) -> None:
        calls.append(len(items))
        real(self, items)

    monkeypatch.setattr(LocalStore, "update_many_sync", spy)
    _no_loop_writes(monkeypatch)
    a[...] = vol
    per_call = (1 << 20) // (32 * 64 * 64)  # 128 KiB blocks: 8 to a megabyte
    assert sum(calls) == 32 and max(calls) == per_call, calls
    np.testing.assert_array_equal(np.asarray(shardstore.n5.open(str(tmp_path / "c.n5"), path="d")), vol)
