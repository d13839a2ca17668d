"""dask.distributed with worker processes storing into one sharded array, ``lock=False``, with
dask chunks that are *not* shard-aligned: several tasks write parts of the same shard at the
same moment from different processes, and the result must be exact (dask #12583 and
zarr-python #3514 report lost writes in exactly this setup)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import shardstore

if TYPE_CHECKING:
    from _servers import SeaweedFS

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

pytest_plugins = ["_servers"]
pytestmark = pytest.mark.timeout(300)


class Target:
    """What ``da.store`` writes into: the array at ``where``, opened in each task (a
    shardstore array is a handle on local state and is not sent between processes)."""

    def __init__(self, fmt: str, where: str, opts: dict[str, Any] | None) -> None:
        self.fmt, self.where, self.opts = fmt, where, opts

    def __setitem__(self, selection: Any, value: np.ndarray) -> None:
        so = {"storage_options": self.opts} if self.opts else {}
        getattr(shardstore, self.fmt).open(self.where, mode="r+", **so)[selection] = value


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Any:
    import dask

    tmp = str(tmp_path_factory.mktemp("dask"))
    with dask.config.set({"temporary-directory": tmp}):
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                           dashboard_address=None, local_directory=tmp)
        with cluster, distributed.Client(cluster) as c:
            yield c


def _store_and_check(client: Any, fmt: str, where: str, opts: dict[str, Any] | None, shape: tuple[int, ...],
                     dask_chunks: tuple[int, ...]) -> None:
    data = (np.arange(np.prod(shape), dtype="uint32").reshape(shape) * 7 + 1) % 65521
    x = da.from_array(data, chunks=dask_chunks)
    da.store(x, Target(fmt, where, opts), lock=False, scheduler=client)
    so = {"storage_options": opts} if opts else {}
    got = getattr(shardstore, fmt).open(where, mode="r", **so)[...]
    np.testing.assert_array_equal(got, data)


def test_dask_store_unaligned_into_zarr3_shards_local(client: Any, tmp_path: Path) -> None:
    where = str(tmp_path / "z")
    # shards of 32x32 (16 inner chunks of 8x8); dask chunks of 12x20 cut every shard and
    # many inner chunks, so tasks in both worker processes merge into the same shards
    shardstore.zarr3.create(where, shape=(64, 64), dtype="uint32", chunks=(8, 8), shards=(32, 32))
    _store_and_check(client, "zarr3", where, None, (64, 64), (12, 20))


@pytest.mark.slow  # (the zarr3 case covers the default run)
def test_dask_store_unaligned_into_n5_blocks_local(client: Any, tmp_path: Path) -> None:
    where = str(tmp_path / "n5")
    shardstore.n5.create(where, shape=(64, 64), dtype="uint32", block_size=(32, 32))
    _store_and_check(client, "n5", where, None, (64, 64), (12, 20))


@pytest.mark.slow  # (a second server on top of the cluster: the default run keeps the local ones)
def test_dask_store_unaligned_into_zarr3_shards_s3(client: Any, seaweedfs: SeaweedFS) -> None:
    where, opts = seaweedfs.url(f"dask-{uuid.uuid4().hex[:8]}/z"), seaweedfs.storage_options()
    shardstore.zarr3.create(where, shape=(64, 64), dtype="uint32", chunks=(8, 8), shards=(32, 32), storage_options=opts)
    _store_and_check(client, "zarr3", where, opts, (64, 64), (12, 20))
