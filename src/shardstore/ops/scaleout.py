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

On Dask a stuck run fails instead of waiting forever: when no task has finished for
``IOConfig.task_stall_seconds`` (``SHARDSTORE_TASK_STALL_SECONDS``, default an hour; 0 waits
forever) the tasks are cancelled and ``ShardStoreError`` names the pending ones, the workers
running them and their call stacks. A Dask task is one block or box, bounded by the memory
budget, so an hour without any finishing means a lost or hung worker, not a slow one. Local
workers are not watched: their tasks are long runs of blocks, and a worker that dies already
fails the run (``BrokenProcessPool``).
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from ..config import IOConfig
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
    stall_seconds: float | None = None,
) -> list[R]:
    """``[fn(item) for item in items]``, run here, on ``workers`` processes, or on a Dask scheduler.

    ``on_done(item, result)`` is called in this process as each task finishes (in completion
    order; progress bars and resume manifests hang off it). The results come back in the order
    of ``items``. The first failing task's error is raised and tasks not started yet are
    cancelled; on local processes it is raised after the tasks still running have stopped, on
    Dask the tasks already running on workers finish there, their results dropped.

    ``stall_seconds`` (Dask only; None: ``IOConfig.from_env().task_stall_seconds``; 0: no
    limit): ``ShardStoreError`` when no task has finished for that long (see the module doc).
    """
    if workers < 1:
        raise ShardStoreError(f"workers must be at least 1, not {workers}")
    if scheduler is not None:
        if stall_seconds is None:
            stall_seconds = IOConfig.from_env().task_stall_seconds
        return _on_dask(fn, items, scheduler, on_done, stall_seconds)
    if workers == 1 or len(items) <= 1:
        results = []
        for item in items:
            r = fn(item)
            if on_done is not None:
                on_done(item, r)
            results.append(r)
        return results
    import multiprocessing  # (here: 0.7 MiB that a process which never scales out does not need)

    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=min(workers, len(items)), mp_context=ctx) as pool:
        return _collect(pool.submit, fn, items, on_done, cf.as_completed)


def _collect(submit: Callable[..., Any], fn: Callable, items: Sequence, on_done: Callable | None,
             as_completed: Callable[[dict[Any, int]], Iterable[Any]]) -> list:
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


def _on_dask(fn: Callable, items: Sequence, scheduler: str, on_done: Callable | None, stall_seconds: float) -> list:
    with _connect(scheduler) as client:
        # pure=False: two equal items are still two tasks (each writes its own units)
        return _collect(lambda f, item: client.submit(f, item, pure=False), fn, items, on_done,
                        lambda futures: _watched(client, futures, items, stall_seconds))


def _watched(client: Any, futures: dict[Any, int], items: Sequence, stall_seconds: float) -> Iterator[Any]:
    """``distributed.as_completed(futures)``, raising ShardStoreError once no task has finished
    for ``stall_seconds`` (0: never)."""
    from distributed import as_completed

    done = as_completed(list(futures))
    last = time.monotonic()  # (reset after the caller's on_done: its time is not the tasks')
    while not done.is_empty():
        if done.has_ready():
            yield next(done)
            last = time.monotonic()
        elif stall_seconds and time.monotonic() - last >= stall_seconds:
            raise ShardStoreError(_stalled(client, futures, items, stall_seconds))
        else:
            with done.thread_condition:  # notified as each task finishes
                done.thread_condition.wait(0.1)


def _stalled(client: Any, futures: dict[Any, int], items: Sequence, stall_seconds: float, shown: int = 4) -> str:
    """What a stalled run was waiting for: the pending tasks, their items, the workers running
    them and the innermost frames of their call stacks (as far as the scheduler answers)."""
    pending = [f for f in futures if not f.done()]
    keys = [f.key for f in pending[:shown]]
    processing = _within(30.0, client.processing) or {}
    worker_of = {key: worker for worker, ks in processing.items() for key in ks}
    stacks: dict[Any, list[str]] = {}
    for per_key in (_within(30.0, lambda: client.call_stack(keys=keys)) or {}).values():
        stacks.update(per_key)
    lines = [f"no Dask task finished in {stall_seconds:g} s: {len(pending)} of {len(futures)} task(s) pending "
             "(raise IOConfig.task_stall_seconds / SHARDSTORE_TASK_STALL_SECONDS if tasks are this slow; 0 waits "
             "forever)"]
    for fut in pending[:shown]:
        worker = worker_of.get(fut.key)
        where = f"running on {worker}" if worker else f"{fut.status}, on no worker"
        lines.append(f"- task {fut.key!r}, {where}: {repr(items[futures[fut]])[:200]}")
        lines += ["    " + " | ".join(p.strip() for p in frame.strip().splitlines()) for frame in stacks.get(fut.key, [])[-3:]]
    if len(pending) > shown:
        lines.append(f"- and {len(pending) - shown} more")
    return "\n".join(lines)


def _within(seconds: float, call: Callable[[], Any]) -> Any:
    """``call()``, or None when it fails or has not answered in ``seconds`` (a sick cluster
    must not turn the report of a hang into another hang: the thread is left behind)."""
    box: list[Any] = []

    def run() -> None:
        try:
            box.append(call())
        except Exception:  # the report does without it
            pass

    thread = threading.Thread(target=run, name="shardstore-dask-report", daemon=True)
    thread.start()
    thread.join(seconds)
    return box[0] if box else None
