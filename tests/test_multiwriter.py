"""Many writers, one unit: writer processes, each with its own handle, update disjoint regions
of the *same* shard / N5 block / uint64 kv shard at the same moment (a barrier releases them
together). With default options no region may be lost and no writer may fail: the store's
read-modify-write (a lock across processes on local files, conditional PUTs with retries on
S3) serializes their merges. The default run uses 4 writers; ``-m slow`` runs 16, as in the
field reports (zarr-python #3514, dask #12583) that lost about 30 % of such writes.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import shardstore
from shardstore.sharding._uint64_format import ShardingSpec
from shardstore.sharding.uint64 import Uint64ShardedStore
from shardstore.store import LocalStore
from shardstore.testing.runners import RUNNERS, on_runner

if TYPE_CHECKING:
    from _servers import SeaweedFS

pytest_plugins = ["_servers"]
pytestmark = pytest.mark.timeout(300)

FORMATS = ["zarr3", "n5", "precomputed", "uint64"]
SIDE = 64  # one unit of SIDE x SIDE elements; regions are 4x4 boxes inside its 8x8 cells
REGIONS_PER_WRITER = 4

KV_SPEC = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0,
           "minishard_bits": 2, "shard_bits": 0, "minishard_index_encoding": "gzip", "data_encoding": "gzip"}
PRECOMPUTED_SHARDING = {**KV_SPEC, "minishard_bits": 3}


def _box(region: int) -> tuple[slice, slice]:
    """Region ``region``'s box: the middle of 8x8 cell ``region`` (of 64), never a whole cell,
    so that every write is a partial one (a read-modify-write of the unit)."""
    y, x = 8 * (region // 8), 8 * (region % 8)
    return slice(y + 2, y + 6), slice(x + 2, x + 6)


# -- the formats: create, write one region, read back ------------------------------------------
def _kv_store(where: str, opts: dict[str, Any] | None) -> Uint64ShardedStore:
    if opts is None:
        base: Any = LocalStore(where)
    else:
        from shardstore.store import store_from_url

        base = store_from_url(where, mode="r+", storage_options=opts)
    return Uint64ShardedStore(base, ShardingSpec.from_json(KV_SPEC))


def create(fmt: str, where: str, opts: dict[str, Any] | None) -> None:
    so = {"storage_options": opts} if opts else {}
    if fmt == "zarr3":
        shardstore.zarr3.create(where, shape=(SIDE, SIDE), dtype="uint16", chunks=(8, 8), shards=(SIDE, SIDE), **so)
    elif fmt == "n5":
        shardstore.n5.create(where, shape=(SIDE, SIDE), dtype="uint16", block_size=(SIDE, SIDE), **so)
    elif fmt == "precomputed":
        scale = {"size": [SIDE, SIDE, 1], "chunk_size": [8, 8, 1], "encoding": "raw", "sharding": PRECOMPUTED_SHARDING}
        shardstore.precomputed.create(where, data_type="uint16", scales=[scale], **so)
    elif fmt != "uint64":
        raise ValueError(fmt)


def open_array(fmt: str, where: str, opts: dict[str, Any] | None, mode: str = "r+") -> Any:
    so = {"storage_options": opts} if opts else {}
    return getattr(shardstore, fmt).open(where, mode=mode, **so)


def write_region(handle: Any, fmt: str, region: int) -> None:
    value = region + 1
    if fmt == "uint64":
        asyncio.run(handle.set(str(region + 1), b"v%d" % value * 3))
        return
    ys, xs = _box(region)
    if fmt == "precomputed":
        handle[xs, ys, 0:1] = value  # precomputed indexes x, y, z
    else:
        handle[ys, xs] = value


def lost_regions(fmt: str, where: str, opts: dict[str, Any] | None, regions: int) -> list[int]:
    if fmt == "uint64":
        store = _kv_store(where, opts)
        got = asyncio.run(store.get_many([(str(r + 1), None) for r in range(regions)]))
        return [r for r, v in enumerate(got) if v != b"v%d" % (r + 1) * 3]
    a = open_array(fmt, where, opts, mode="r")
    data = a[...]
    if fmt == "precomputed":
        assert data.shape == (SIDE, SIDE, 1, 1)  # x, y, z, channel
        data = data[:, :, 0, 0].T  # back to [y, x]
    return [r for r in range(regions) if not (data[_box(r)] == r + 1).all()]


# -- the writer processes -----------------------------------------------------------------------
Job = tuple[str, str, "dict[str, Any] | None"]  # (format, path or URL, storage options)


def _writer(jobs: list[Job], writer: int, n_writers: int, regions: int, barrier: Any) -> None:
    """One writer process; per dataset its own handle, then (all writers released at once)
    its regions, one write each: writer w writes regions w, w + n, w + 2n, ..."""
    for fmt, where, opts in jobs:
        handle = _kv_store(where, opts) if fmt == "uint64" else open_array(fmt, where, opts)
        barrier.wait(timeout=120)
        for j in range(regions):
            write_region(handle, fmt, writer + j * n_writers)


def run_writers(jobs: list[Job], n_writers: int, regions: int) -> list[int | None]:
    """``n_writers`` fresh processes over ``jobs``; their exit codes. They come from a fork
    server that imported shardstore once (a clean process, no threads, as spawn gives, but
    without paying the imports once per writer)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["numpy", "shardstore", "test_multiwriter"])
    barrier = ctx.Barrier(n_writers)
    procs = [ctx.Process(target=_writer, args=(jobs, w, n_writers, regions, barrier)) for w in range(n_writers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=200)
    codes = []
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
        codes.append(p.exitcode)
    return codes


def check_no_loss(jobs: list[Job], n_writers: int, per_writer: int = REGIONS_PER_WRITER) -> None:
    """Every format of ``jobs`` written by ``n_writers`` processes, ``per_writer`` regions
    each: no writer fails, no region is lost."""
    for job in jobs:
        create(*job)
    codes = run_writers(jobs, n_writers, per_writer)
    assert codes == [0] * n_writers, f"writers failed (exit codes {codes})"
    regions = n_writers * per_writer
    lost = {fmt: lost_regions(fmt, where, opts, regions) for fmt, where, opts in jobs}
    assert lost == {fmt: [] for fmt, _, _ in jobs}, f"regions lost (of {regions} each): {lost}"


def _local_jobs(tmp_path: Path) -> list[Job]:
    return [(fmt, str(tmp_path / fmt), None) for fmt in FORMATS]


def _s3_jobs(seaweedfs: SeaweedFS) -> list[Job]:
    run = uuid.uuid4().hex[:8]
    return [(fmt, seaweedfs.url(f"multiwriter-{run}/{fmt}"), seaweedfs.storage_options()) for fmt in FORMATS]


# -- tests --------------------------------------------------------------------------------------
def test_four_writers_lose_nothing_local(tmp_path: Path) -> None:
    check_no_loss(_local_jobs(tmp_path), 4)


def test_four_writers_lose_nothing_s3(seaweedfs: SeaweedFS) -> None:
    check_no_loss(_s3_jobs(seaweedfs), 4, per_writer=2)  # (conflicts cost round trips: fewer)


@pytest.mark.slow
def test_sixteen_writers_lose_nothing_local(tmp_path: Path) -> None:
    check_no_loss(_local_jobs(tmp_path), 16)


@pytest.mark.slow
def test_sixteen_writers_lose_nothing_s3(seaweedfs: SeaweedFS) -> None:
    check_no_loss(_s3_jobs(seaweedfs), 16)


def test_no_lock_files_stay_in_the_tree(tmp_path: Path) -> None:
    """A read-modify-write's lock sidecar goes when the write is done: other tools see the
    same files as without locking."""
    a = shardstore.zarr3.create(str(tmp_path / "z"), shape=(16, 16), dtype="uint8", chunks=(4, 4), shards=(8, 8))
    a[1:3, 1:3] = 5  # partial: a locked read-modify-write of shard c/0/0
    files = sorted(p.relative_to(tmp_path / "z").as_posix() for p in (tmp_path / "z").rglob("*") if p.is_file())
    assert files == ["c/0/0", "zarr.json"]
    a[1:3, 1:3] = 0  # the shard becomes all fill: deleted, its directories pruned
    assert sorted(p.relative_to(tmp_path / "z").as_posix() for p in (tmp_path / "z").rglob("*")) == ["zarr.json"]


def test_stale_lock_file_is_hidden_and_reused(tmp_path: Path) -> None:
    """The sidecar of a writer killed mid-write stays behind: never listed as a key, and the
    next writer locks it as usual."""
    a = shardstore.zarr3.create(str(tmp_path / "z"), shape=(8, 8), dtype="uint8", chunks=(4, 4), shards=(8, 8))
    a[...] = 1
    (tmp_path / "z" / "c" / "0" / ".0.lock").write_bytes(b"")
    store = LocalStore(tmp_path / "z")

    async def keys() -> list[str]:
        return sorted([k async for k in store.list_prefix("")])

    assert asyncio.run(keys()) == ["c/0/0", "zarr.json"]
    a[0:2, 0:2] = 3
    assert a[0, 0] == 3 and a[3, 3] == 1


@pytest.mark.parametrize("runner", RUNNERS)
def test_conflict_that_keeps_recurring_names_the_key(runner: str) -> None:
    """Without retries a lost race on S3-like stores is a ConflictError naming the shard, on
    both core runners (each has its conditional write: ``set_if`` on the event loop, the
    memory store's ``_set_if_now`` on the blocking one)."""
    from shardstore.errors import ConflictError
    from shardstore.store import MemoryStore

    base = MemoryStore()
    a = shardstore.zarr3.create(on_runner(base, runner), shape=(16, 16), dtype="uint8", chunks=(4, 4), shards=(16, 16))
    a[...] = 1
    if runner == "async":
        real = base.set_if

        async def interloper(key: str, value: Any, generation: Any) -> None:
            await real(key, value, None)  # another writer replaced the shard first ...
            await real(key, value, generation)  # ... so this conditional write loses, every time

        base.set_if = interloper  # type: ignore[method-assign]
    else:
        real_now = base._set_if_now

        def interloper_now(key: str, value: Any, generation: Any) -> None:
            real_now(key, value, None)
            real_now(key, value, generation)

        base._set_if_now = interloper_now  # type: ignore[method-assign]
    base.retry_conflicts = 3
    with pytest.raises(ConflictError, match="'c/0/0' was changed by another writer during each of 4 read-modify-write attempts"):
        a[1:3, 1:3] = 7


def test_writer_killed_holding_the_lock_does_not_block_others(tmp_path: Path) -> None:
    """The advisory lock dies with its process: a writer killed inside its read-modify-write
    leaves neither a stale lock nor a torn unit."""
    import signal
    import subprocess
    import sys
    import time

    where = str(tmp_path / "n5")
    a = shardstore.n5.create(where, shape=(8, 8), dtype="uint8", block_size=(8, 8))
    a[...] = 1
    code = (
        "import time, shardstore, shardstore.store.local as L\n"
        "real = L.LocalStore._write\n"
        "def slow(self, key, value):\n"
        "    print('holding', flush=True); time.sleep(60)\n"
        "L.LocalStore._write = slow\n"
        f"shardstore.n5.open({where!r}, mode='r+')[0:2, 0:2] = 9\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"holding"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    started = time.monotonic()
    a[2:4, 2:4] = 3  # takes the same lock: free again
    assert time.monotonic() - started < 10
    expected = np.ones((8, 8), "uint8")
    expected[2:4, 2:4] = 3
    np.testing.assert_array_equal(a[...], expected)
