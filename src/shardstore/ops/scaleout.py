"""Run independent tasks on this process, on local worker processes, or on a Dask cluster.

Long operations (``convert``, ``downsample``) split their work into tasks that each own whole
destination units (shards, or blocks of whole shards), so tasks never write the same stored
unit and can run anywhere. This module only runs them: ``workers=1`` runs them here, in order;
``workers=N`` on N local processes (spawned, not forked: the parent holds threads and an event
loop that a fork would copy half-way); ``scheduler=ADDRESS`` on an existing dask.distributed
scheduler, which is how one operation uses many machines. Dask is imported only then.

Each of N local workers gets ``cpus // N`` codec threads (``threads_per_worker``): a process
defaults to one codec thread per CPU, and N processes each starting that many would put N
threads on every core, which costs switches and memory and gains nothing.

Tasks and their arguments travel by pickle, so ``fn`` must be a module-level function (or a
``functools.partial`` of one) and items plain data such as paths, URLs and box tuples.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..errors import ShardStoreError

__all__ = ["available_cpus", "check_scheduler", "run_tasks", "threads_per_worker"]

T = TypeVar("T")
R = TypeVar("R")


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, e.g. under ``taskset``), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def threads_per_worker(workers: int) -> int:
    """Codec threads for each of ``workers`` local processes: an equal share of the CPUs."""
    return max(1, available_cpus() // max(1, workers))


def run_tasks(
    fn: Callable[[T], R],
    items: Sequence[T],
    *,
    workers: int = 1,
    scheduler: str | None = None,
    on_done: Callable[[T, R], None] | None = None,
) -> list[R]:
    """``[fn(item) for item in items]``, run here, on ``workers`` processes, or on a Dask scheduler.

    ``on_done(item, result)`` is called in this process as each task finishes (in completion
    order; progress bars and resume manifests hang off it). The results come back in the order
    of ``items``. The first failing task's error is raised and tasks not started yet are
    cancelled; on local processes it is raised after the tasks still running have stopped, on
    Dask the tasks already running on workers finish there, their results dropped.
    """
    if workers < 1:
        raise ShardStoreError(f"workers must be at least 1, not {workers}")
    if scheduler is not None:
        return _on_dask(fn, items, scheduler, on_done)
    if workers == 1 or len(items) <= 1:
        results = []
        for item in items:
            r = fn(item)
            if on_done is not None:
                on_done(item, r)
            results.append(r)
        return results
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=min(workers, len(items)), mp_context=ctx) as pool:
        return _collect(pool.submit, fn, items, on_done, cf.as_completed)


def _collect(submit: Callable[..., Any], fn: Callable, items: Sequence, on_done: Callable | None, as_completed: Callable) -> list:
    futures = {submit(fn, item): i for i, item in enumerate(items)}
    results: list[Any] = [None] * len(items)
    try:
        for fut in as_completed(futures):
            i = futures[fut]
            results[i] = fut.result()
            if on_done is not None:
                on_done(items[i], results[i])
    except BaseException:
        for fut in futures:
            fut.cancel()
        raise
    return results


def _client_class() -> Any:
    try:
        from distributed import Client
    except ImportError as e:  # pragma: no cover - distributed is a test/optional dependency
        raise ShardStoreError("--scheduler needs dask.distributed: pip install 'dask[distributed]'") from e
    return Client


def _connect(scheduler: str) -> Any:
    try:
        return _client_class()(scheduler)
    except (OSError, TimeoutError) as e:  # refused, unknown host, timed out
        raise ShardStoreError(f"cannot reach the Dask scheduler at {scheduler!r}: {e}") from e


def check_scheduler(scheduler: str) -> None:
    """Raise ShardStoreError now if ``scheduler`` cannot be reached (or dask.distributed is
    missing), so that an operation fails before it changes anything."""
    with _connect(scheduler):
        pass


def _on_dask(fn: Callable, items: Sequence, scheduler: str, on_done: Callable | None) -> list:
    from distributed import as_completed

    with _connect(scheduler) as client:
        # pure=False: two equal items are still two tasks (each writes its own units)
        return _collect(lambda f, item: client.submit(f, item, pure=False), fn, items, on_done, as_completed)
