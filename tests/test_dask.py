"""``shardstore.dask`` (issue 19 point 1): ``to_dask`` reads in chunk- or shard-aligned blocks
with deterministic names; ``store`` / ``to_shardstore`` write with one task per destination
write unit (shard, or chunk when unsharded) whatever the Dask chunks; ``da.from_array(a)`` and
``da.store(x, a, lock=False)`` stay exact with misaligned chunks. Most tests use the
synchronous scheduler; the last ones run on a ``dask.distributed`` LocalCluster with worker
processes, on local files and on SeaweedFS (S3)."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import shardstore

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")

from shardstore.dask import store, to_dask, to_shardstore, write_units  # noqa: E402
from shardstore.store.wrappers import RecordingStore  # noqa: E402

if TYPE_CHECKING:
    from _servers import SeaweedFS

pytest_plugins = ["_servers"]
pytestmark = pytest.mark.timeout(300)

HASHED = {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 1, "hash": "murmurhash3_x86_128",
          "minishard_bits": 1, "shard_bits": 2, "minishard_index_encoding": "gzip", "data_encoding": "raw"}


def _data(shape: tuple[int, ...], dtype: str = "uint16") -> np.ndarray:
    return ((np.arange(int(np.prod(shape))).reshape(shape) * 7 + 1) % 65521).astype(dtype)


@pytest.fixture(autouse=True)
def synchronous() -> Iterator[None]:
    with dask.config.set(scheduler="synchronous"):
        yield


# -- destinations of every format: (array, the Dask chunks that cut its write units) ------------
def _zarr3_sharded(root: Any) -> Any:
    return shardstore.zarr3.create(root, shape=(64, 48), dtype="uint16", chunks=(8, 8), shards=(32, 24))


def _zarr3_unsharded(root: Any) -> Any:
    return shardstore.zarr3.create(root, shape=(64, 48), dtype="uint16", chunks=(16, 16))


def _n5(root: Any) -> Any:
    return shardstore.n5.create(root, "ds", shape=(64, 48), dtype="uint16", block_size=(20, 16))


def _precomputed(root: Any) -> Any:
    return shardstore.precomputed.create(root, data_type="uint16", num_channels=2,
                                         scales=[{"size": [24, 20, 6], "chunk_size": [8, 8, 4]}])


def _precomputed_sharded(root: Any) -> Any:
    return shardstore.precomputed.create(root, data_type="uint16",
                                         scales=[{"size": [32, 24, 4], "chunk_size": [8, 8, 4], "sharding": HASHED}])


def _carray(root: Any) -> Any:
    return shardstore.bcolz.carray(np.zeros(5000, dtype="uint16"), rootdir=root, chunklen=1024)


TARGETS: dict[str, Callable[[Any], Any]] = {
    "zarr3-sharded": _zarr3_sharded,
    "zarr3-unsharded": _zarr3_unsharded,
    "n5": _n5,
    "precomputed": _precomputed,
    "precomputed-sharded-by-hash": _precomputed_sharded,
    "bcolz-carray": _carray,
}


def _misaligned(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Dask chunks that match no chunk or shard edge of the targets above."""
    return tuple(max(1, min(n, (7, 11, 5, 1)[d] if len(shape) > 1 else 333)) for d, n in enumerate(shape))


# -- reads -----------------------------------------------------------------------------------
def test_to_dask_blocks_follow_chunks_shards_or_what_is_asked(tmp_path: Path) -> None:
    a = _zarr3_sharded(tmp_path / "z")
    data = _data(a.shape)
    a[...] = data
    assert to_dask(a).chunksize == a.chunks == (8, 8)
    assert to_dask(a, "shards").chunksize == (32, 24)
    assert to_dask(a, (10, 48)).chunks == ((10,) * 6 + (4,), (48,))
    for chunks in (None, "shards", (10, 48)):
        np.testing.assert_array_equal(to_dask(a, chunks).compute(), data)
    np.testing.assert_array_equal(to_dask(a)[3:50:3, ::-5].compute(), data[3:50:3, ::-5])
    u = _zarr3_unsharded(tmp_path / "u")
    assert to_dask(u, "shards").chunksize == to_dask(u).chunksize == (16, 16)  # unsharded: chunks
    p = _precomputed_sharded(tmp_path / "p")  # hash-chosen shards are no box: chunks
    assert to_dask(p, "shards").chunksize == p.chunks == (8, 8, 4, 1)


def test_to_dask_names_come_from_the_record(tmp_path: Path) -> None:
    a = _zarr3_sharded(tmp_path / "z")
    again = shardstore.open(tmp_path / "z", mode="r+")
    assert to_dask(a).name == to_dask(again).name
    assert to_dask(a).name != to_dask(a, "shards").name
    assert to_dask(a).name != to_dask(shardstore.open(tmp_path / "z")).name  # read-only: another node
    other = _zarr3_sharded(tmp_path / "other")
    assert to_dask(a).name != to_dask(other).name
    assert da.from_array(a).name == da.from_array(again).name  # Dask's own tokenize uses the record too


def test_da_from_array_reads_every_format(tmp_path: Path) -> None:
    for kind, make in TARGETS.items():
        a = make(str(tmp_path / kind))
        data = _data(a.shape)
        a[...] = data
        np.testing.assert_array_equal(da.from_array(a, chunks=_misaligned(a.shape)).compute(), data, err_msg=kind)
        np.testing.assert_array_equal(to_dask(a).compute(), data, err_msg=kind)


# -- writes ----------------------------------------------------------------------------------
def _write_tasks(graph: Any) -> list[Any]:
    return [k for k in dict(graph) if str(k).startswith("shardstore-write-")]


@pytest.mark.parametrize("kind", list(TARGETS))
def test_store_writes_each_unit_in_exactly_one_task(kind: str, tmp_path: Path) -> None:
    a = TARGETS[kind](str(tmp_path / kind))
    data = _data(a.shape)
    x = da.from_array(data, chunks=_misaligned(a.shape))
    pending = store(x, a, compute=False)
    units = write_units(a)
    assert len(_write_tasks(pending.dask)) == len(units) > 1
    # the units cover the array once: every element belongs to exactly one unit
    cover = np.zeros(a.shape, dtype=int)
    for regions in units:
        for region in regions:
            cover[region] += 1
    assert (cover == 1).all()
    assert pending.compute() == len(units)
    np.testing.assert_array_equal(a[...], data)


@pytest.mark.parametrize("kind", ["zarr3-sharded", "precomputed-sharded-by-hash"])
def test_store_puts_each_shard_once(kind: str, tmp_path: Path) -> None:
    """Counted at the store: one write per shard key, however the Dask chunks cut them (the
    chunks of a hash-chosen precomputed shard, scattered over the volume, go in one write)."""
    recording = RecordingStore(shardstore.LocalStore(tmp_path / "d"))
    a = TARGETS[kind](recording)
    recording.reset()
    data = _data(a.shape)
    units = len(write_units(a))
    assert units > 1 and store(da.from_array(data, chunks=_misaligned(a.shape)), a) == units
    writes = Counter(r.key for r in recording.requests if r.op == "set" and not r.key.endswith(("info", "zarr.json")))
    assert len(writes) == units and set(writes.values()) == {1}, writes
    np.testing.assert_array_equal(a[...], data)


def test_store_is_deterministic_and_checks_its_target(tmp_path: Path) -> None:
    a = _zarr3_sharded(tmp_path / "z")
    x = da.from_array(_data(a.shape), chunks=(7, 11))
    assert sorted(map(str, store(x, a, compute=False).dask)) == sorted(map(str, store(x, a, compute=False).dask))
    with pytest.raises(ValueError, match="shapes differ"):
        store(x[:10], a)
    with pytest.raises(shardstore.ReadOnlyError):
        store(x, shardstore.open(tmp_path / "z"))


def test_to_shardstore_creates_then_stores(tmp_path: Path) -> None:
    data = _data((50, 40))
    x = da.from_array(data, chunks=(13, 9))
    a = to_shardstore(x, tmp_path / "z", chunks=(5, 5), shards=(25, 20))
    assert (a.chunks, a.shards) == ((5, 5), (25, 20))
    np.testing.assert_array_equal(shardstore.open(tmp_path / "z")[...], data)
    n = to_shardstore(x, tmp_path / "n5", format="n5", block_size=(16, 16))
    np.testing.assert_array_equal(shardstore.open(tmp_path / "n5")[...], data)
    assert n.chunks == (16, 16)
    with pytest.raises(shardstore.ContainsNodeError):
        to_shardstore(x, tmp_path / "z")
    to_shardstore(x[::-1], tmp_path / "z", mode="w")
    np.testing.assert_array_equal(shardstore.open(tmp_path / "z")[...], data[::-1])


def test_da_store_lock_false_is_exact_with_misaligned_chunks(tmp_path: Path) -> None:
    for kind, make in TARGETS.items():
        a = make(str(tmp_path / kind))
        data = _data(a.shape)
        da.store(da.from_array(data, chunks=_misaligned(a.shape)), a, lock=False)
        np.testing.assert_array_equal(a[...], data, err_msg=kind)


# -- dask.distributed: worker processes ------------------------------------------------------
@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    tmp = str(tmp_path_factory.mktemp("dask"))
    with dask.config.set({"temporary-directory": tmp}):
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                           dashboard_address=None, local_directory=tmp)
        with cluster, distributed.Client(cluster, set_as_default=False) as c:
            yield c


def _thread_stacks() -> dict[str, str]:
    """Every thread's stack in this process (run in the workers by ``_on_cluster``)."""
    import sys
    import threading
    import traceback

    names = {t.ident: t.name for t in threading.enumerate()}
    return {f"{names.get(i, '?')} ({i})": "".join(traceback.format_stack(f)) for i, f in sys._current_frames().items()}


#: how long one step of ``_round_trip_on_cluster`` may take (each takes a few seconds)
STEP_SECONDS = 90


def _on_cluster(client: Any, step: str, run: Callable[[], Any]) -> Any:
    """``run()`` (a computation on the cluster), failing after ``STEP_SECONDS`` with every
    worker thread's stack and the tasks running: a step that hangs says where it waits
    (once, a write step outlived the test's 300 s timeout, which shows only this process)."""
    import concurrent.futures

    pool = concurrent.futures.ThreadPoolExecutor(1)
    pending = pool.submit(run)
    try:
        return pending.result(timeout=STEP_SECONDS)
    except concurrent.futures.TimeoutError:
        stacks = client.run(_thread_stacks, wait=True)
        tasks = client.call_stack()
        lines = [f"step {step!r} still runs after {STEP_SECONDS} s; tasks running: {tasks!r}"]
        for worker, threads in stacks.items():
            lines += [f"--- worker {worker}"] + [f"thread {name}:\n{stack}" for name, stack in threads.items()]
        pytest.fail("\n".join(lines))
    finally:
        pool.shutdown(wait=False)


def _round_trip_on_cluster(client: Any, where: str, opts: dict[str, Any] | None) -> None:
    so = {"storage_options": opts} if opts else {}
    data = _data((64, 48))
    x = da.from_array(data, chunks=(12, 20))  # cuts every shard and many inner chunks
    # shardstore.dask.store: one task per shard, in worker processes
    a = shardstore.zarr3.create(f"{where}/planned", shape=data.shape, dtype=data.dtype, chunks=(8, 8),
                                shards=(32, 24), **so)
    assert _on_cluster(client, "store", lambda: store(x, a, scheduler=client)) == 4
    np.testing.assert_array_equal(shardstore.open(f"{where}/planned", **so)[...], data)
    # to_dask / da.from_array reads run in the workers (the array pickles as its URL)
    assert _on_cluster(client, "to_dask", lambda: (to_dask(a) == x).all().compute(scheduler=client))
    total = _on_cluster(client, "from_array", lambda: da.from_array(a, chunks=(10, 10)).sum().compute(scheduler=client))
    assert int(total) == int(data.sum())
    # da.store with misaligned chunks, lock=False: tasks merge into the same shards, exactly
    b = shardstore.zarr3.create(f"{where}/merged", shape=data.shape, dtype=data.dtype, chunks=(8, 8),
                                shards=(32, 24), **so)
    _on_cluster(client, "da.store", lambda: da.store(x, b, lock=False, scheduler=client))
    np.testing.assert_array_equal(shardstore.open(f"{where}/merged", **so)[...], data)

    # to_shardstore on the cluster (the default client is not set: pass it through dask.config)
    def created() -> None:
        with dask.config.set(scheduler=client):
            to_shardstore(x.T, f"{where}/created", chunks=(8, 8), shards=(16, 16), **so)

    _on_cluster(client, "to_shardstore", created)
    np.testing.assert_array_equal(shardstore.open(f"{where}/created", **so)[...], data.T)


def test_a_step_that_hangs_on_the_cluster_fails_with_the_workers_stacks(client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The diagnostic of ``_on_cluster`` itself: a task that waits past the step's limit (for
    an event set once the diagnostic is checked; its limit counted from when it runs)."""
    import sys
    import time

    monkeypatch.setattr(sys.modules[__name__], "STEP_SECONDS", 2)
    release = distributed.Event(f"release-{uuid.uuid4().hex[:8]}", client=client)
    waiting = client.submit(_waiting, release.name, pure=False)
    try:
        deadline = time.monotonic() + 60
        while not any(waiting.key in tasks for tasks in client.call_stack().values()):  # (it runs)
            assert time.monotonic() < deadline, "the waiting task never started"
            time.sleep(0.05)
        with pytest.raises(pytest.fail.Exception, match=r"(?s)step 'wait' still runs after 2 s.*--- worker.*in _waiting"):
            _on_cluster(client, "wait", waiting.result)
    finally:
        release.set()
    waiting.result(timeout=60)  # (the workers are free again for the tests after this one)


def _waiting(name: str) -> None:
    distributed.Event(name).wait(timeout=120)


def test_cluster_local_files(client: Any, tmp_path: Path) -> None:
    _round_trip_on_cluster(client, str(tmp_path), None)


def test_cluster_seaweedfs(client: Any, seaweedfs: SeaweedFS) -> None:
    _round_trip_on_cluster(client, seaweedfs.url(f"dask-{uuid.uuid4().hex[:8]}"), seaweedfs.storage_options())
