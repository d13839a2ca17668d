"""ops.scaleout.run_tasks: the same results inline, on worker processes and on a Dask cluster."""

from __future__ import annotations

import math
import operator

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
