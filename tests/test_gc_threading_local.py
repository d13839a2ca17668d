"""No array handle leaves a ``threading.local`` for the garbage collector to free.

CPython 3.11 deadlocks, holding the GIL, when a collection that runs inside
``sys._current_frames()`` frees a ``threading.local`` (gh-106883, never fixed in 3.11;
``local_clear`` takes the interpreter lock that ``_current_frames`` already holds; 3.12
collects only between bytecodes). A Dask worker's profiler
calls ``sys._current_frames()`` every 10 ms, so a per-reader ``threading.local`` that died in
a reference cycle froze a worker mid-task (``tests/test_downsample_workers.py``'s Dask test
hung about once in 40 runs). Handles die in cycles routinely; what they hold must not be
freed in that window, whatever the Python version: here, no ``threading.local`` at all."""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from test_downsample import _ome_group, _precomputed, segmentation

import shardstore


@pytest.fixture
def cyclic_garbage() -> Iterator[Callable[[], list[object]]]:
    """A function that collects and returns what became unreachable since the fixture began."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # unreachable objects go to gc.garbage instead of being freed

    def collect() -> list[object]:
        gc.collect()
        return list(gc.garbage)

    try:
        yield collect
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def _locals(objects: list[object]) -> list[object]:
    return [o for o in objects if isinstance(o, threading.local)]


def test_precomputed_sharded_handles_die_without_a_threading_local(tmp_path: Path, cyclic_garbage) -> None:
    x = segmentation((40, 36, 18))
    gc.enable()
    _precomputed(tmp_path / "seg", x, "segmentation", sharded=True)
    gc.collect()
    gc.disable()
    gc.garbage.clear()
    for _ in range(3):
        a = shardstore.precomputed.open(tmp_path / "seg", mode="r+")
        np.testing.assert_array_equal(a[..., 0], x)  # the blocking (SyncReads) path
        a[:16, :16, :8, 0] = x[:16, :16, :8]  # a shard's read-modify-write
        del a
    garbage = cyclic_garbage()
    assert any(type(o).__name__ == "SyncReads" for o in garbage), "the handles no longer die in a cycle: test nothing"
    assert _locals(garbage) == []


def test_zarr3_and_n5_handles_die_without_a_threading_local(tmp_path: Path, cyclic_garbage) -> None:
    x = segmentation((21, 40, 36))
    gc.enable()
    _ome_group(tmp_path / "z.zarr", x)
    n5 = shardstore.n5.create(tmp_path, "vol/s0", shape=x.shape, dtype="uint64", block_size=(8, 16, 16))
    n5[...] = x
    del n5
    gc.collect()
    gc.disable()
    gc.garbage.clear()
    for _ in range(3):
        for a in (shardstore.open(tmp_path / "z.zarr" / "0", mode="r+"), shardstore.open(tmp_path / "vol" / "s0", mode="r+")):
            np.testing.assert_array_equal(a[...], x)
            a[:8, :16, :16] = x[:8, :16, :16]
        del a
    assert _locals(cyclic_garbage()) == []
