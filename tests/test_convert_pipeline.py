"""``convert`` in one process reads the next box while it writes the current one (within the
memory budget), and local worker processes share the CPUs instead of each taking all of them."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import shardstore
import shardstore.ops.convert as conv
from shardstore.config import IOConfig
from shardstore.ops import scaleout
from shardstore.ops.convert_plan import MEMORY_FACTOR, Endpoint
from shardstore.ops.convert_task import read_box

SHAPE = (64, 64, 64)  # uint16: 512 KiB, four 32^3-shard boxes along axis 0 at the budget below
SHARDS = (16, 64, 64)  # 128 KiB a box
BOX_BYTES = 16 * 64 * 64 * 2
#: what the planner sets aside for the threads' chunk buffers (16^3 uint16 chunks)
THREADS_RESERVE = conv.chunk_buffers_reserved(IOConfig()) * 16**3 * 2


def _source(tmp_path: Path) -> tuple[Path, np.ndarray]:
    data = np.random.default_rng(5).integers(0, 500, size=SHAPE, dtype=np.uint16)
    src = tmp_path / "src.zarr"
    shardstore.zarr3.create(src, shape=SHAPE, dtype="uint16", chunks=(16, 16, 16))[...] = data
    return src, data


def test_the_next_box_is_read_while_the_current_one_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src, data = _source(tmp_path)
    reads_started: list[int] = []
    started = [threading.Event() for _ in range(8)]
    overlapped: list[bool] = []

    def recording_read(arrays: Any, item: tuple[Any, ...]) -> Any:
        reads_started.append(item[2])
        started[item[2]].set()
        return read_box(arrays, item)

    original_copy = conv.copy_box

    def waiting_copy(arrays: Any, item: tuple[Any, ...], data: Any = None) -> Any:
        assert data is not None, "the runner hands over the box it read ahead"
        if item[2] + 1 < 4:  # the next box's read starts while this box is still being written
            overlapped.append(started[item[2] + 1].wait(timeout=30))
        return original_copy(arrays, item, data)

    monkeypatch.setattr(conv, "read_box", recording_read)
    monkeypatch.setattr(conv, "copy_box", waiting_copy)
    budget = (MEMORY_FACTOR + conv.READ_AHEAD_FACTOR) * BOX_BYTES + THREADS_RESERVE
    r = shardstore.convert(src, tmp_path / "out.zarr", shards=SHARDS, compression="zstd:1", max_memory=budget)
    monkeypatch.undo()
    assert r.tasks == 4 and reads_started == [0, 1, 2, 3]
    assert overlapped == [True, True, True]
    np.testing.assert_array_equal(shardstore.open(tmp_path / "out.zarr")[...], data)


def test_no_read_ahead_when_the_budget_holds_one_box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """At a budget that fits one box's write but not a second box beside it, tasks run one
    after the other: the runner reads nothing ahead (each task reads its own box)."""
    src, data = _source(tmp_path)
    ahead: list[int] = []
    monkeypatch.setattr(conv, "read_box", lambda arrays, item: ahead.append(item[2]) or read_box(arrays, item))
    budget = (MEMORY_FACTOR + conv.READ_AHEAD_FACTOR) * BOX_BYTES + THREADS_RESERVE - 1
    r = shardstore.convert(src, tmp_path / "out.zarr", shards=SHARDS, compression="zstd:1", max_memory=budget)
    assert r.tasks == 4 and ahead == []
    np.testing.assert_array_equal(shardstore.open(tmp_path / "out.zarr")[...], data)


def test_a_failing_read_ahead_stops_the_conversion(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src, _ = _source(tmp_path)

    def failing_read(arrays: Any, item: tuple[Any, ...]) -> Any:
        if item[2] == 2:
            raise shardstore.CodecError("corrupt chunk (injected)")
        return read_box(arrays, item)

    monkeypatch.setattr(conv, "read_box", failing_read)
    budget = (MEMORY_FACTOR + conv.READ_AHEAD_FACTOR) * BOX_BYTES + THREADS_RESERVE
    with pytest.raises(shardstore.CodecError, match="injected"):
        shardstore.convert(src, tmp_path / "out.zarr", shards=SHARDS, compression="zstd:1", max_memory=budget)
    # the boxes before the failure are recorded, so a rerun resumes after them
    monkeypatch.undo()
    r = shardstore.convert(src, tmp_path / "out.zarr", shards=SHARDS, compression="zstd:1", max_memory=budget)
    assert r.tasks_resumed == 2


@pytest.mark.parametrize(("cpus", "workers", "threads"), [(4, 1, 4), (4, 2, 2), (4, 3, 1), (2, 2, 1), (2, 8, 1), (1, 1, 1)])
def test_each_local_worker_gets_its_share_of_the_cpus(monkeypatch: pytest.MonkeyPatch, cpus: int, workers: int,
                                                      threads: int) -> None:
    monkeypatch.setattr(scaleout.os, "sched_getaffinity", lambda pid: set(range(cpus)), raising=False)
    monkeypatch.delenv("SHARDSTORE_CODEC_THREADS", raising=False)
    assert scaleout.available_cpus() == cpus
    assert scaleout.threads_per_worker(workers) == threads
    assert conv._process_config(workers).codec_threads == threads


def test_the_codec_threads_variable_still_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHARDSTORE_CODEC_THREADS", "3")
    assert conv._process_config(2).codec_threads == 3


def test_worker_endpoints_open_the_arrays_with_their_share(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The jobs a conversion hands to worker processes carry the workers' configuration, and an
    endpoint opens its array with it."""
    src, _ = _source(tmp_path)
    monkeypatch.setattr(scaleout.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.delenv("SHARDSTORE_CODEC_THREADS", raising=False)
    seen: list[Any] = []
    original = conv._jobs

    def recording_jobs(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        seen.extend(out[0])
        return out

    monkeypatch.setattr(conv, "_jobs", recording_jobs)
    monkeypatch.setattr(conv, "run_tasks", lambda fn, items, **kw: [fn(item) for item in items])  # no processes
    shardstore.convert(src, tmp_path / "out.zarr", shards=SHARDS, workers=2)
    job = seen[0]
    assert job.src.config.codec_threads == 2 and job.dst.config.codec_threads == 2
    assert Endpoint(str(src), config=job.src.config).open("r").config.codec_threads == 2
