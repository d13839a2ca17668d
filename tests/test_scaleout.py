"""ops.scaleout.run_tasks: the same results inline, on worker processes and on a Dask cluster."""

from __future__ import annotations

import math
import operator
import time

import pytest

from shardstore.errors import ShardStoreError
from shardstore.ops.scaleout import run_tasks


@pytest.mark.parametrize("workers", [1, 2])
def test_results_in_item_order_and_every_item_reported(workers):
    done = []
    items = list(range(7))
    assert run_tasks(operator.neg, items, workers=workers, on_done=lambda i, r: done.append((i, r))) == [-i for i in items]
    assert sorted(done) == [(i, -i) for i in items]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_failing_task_raises_its_error(workers):
    with pytest.raises(ValueError, match="math domain error"):
        run_tasks(math.sqrt, [4.0, -1.0, 9.0], workers=workers)


def test_workers_must_be_positive():
    with pytest.raises(ShardStoreError, match="at least 1"):
        run_tasks(operator.neg, [1], workers=0)


def test_on_a_dask_scheduler():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None) as cluster:
        assert run_tasks(operator.neg, [1, 2, 3], scheduler=cluster.scheduler_address) == [-1, -2, -3]


def test_a_stalled_dask_run_fails_naming_the_pending_task_and_its_worker():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        # one task finishes at once, the other never does within the limit
        with pytest.raises(ShardStoreError) as e:
            run_tasks(time.sleep, [0.0, 10.0], scheduler=cluster.scheduler_address, stall_seconds=2)
        message = str(e.value)
        assert message.startswith("no Dask task finished in 2 s: 1 of 2 task(s) pending")
        assert "running on tcp://127.0.0.1:" in message and ": 10.0" in message
        assert "SHARDSTORE_TASK_STALL_SECONDS" in message


def test_the_stall_limit_comes_from_the_environment(monkeypatch):
    distributed = pytest.importorskip("distributed")
    monkeypatch.setenv("SHARDSTORE_TASK_STALL_SECONDS", "1.5")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        with pytest.raises(ShardStoreError, match="no Dask task finished in 1.5 s"):
            run_tasks(time.sleep, [10.0], scheduler=cluster.scheduler_address)
        monkeypatch.setenv("SHARDSTORE_TASK_STALL_SECONDS", "0")  # no limit (the sleep holds one thread)
        assert run_tasks(time.sleep, [2.0, 0.0], scheduler=cluster.scheduler_address) == [None, None]
