"""A resize and writes in another process, on one shard: nothing is lost.

A shrink that cuts edge chunks of a padded format rewrites them (the part beyond the new shape
reset to the fill value). It does so through the store's read-modify-write of each unit, as a
partial write does: under the unit's lock across processes. Before, it read the chunks without
the lock and stored what it had computed from them later, so a writer in another process that
updated one of those chunks in between lost its update (the resize wrote the older chunk back).

One process keeps shrinking a Zarr v3 array by two rows and growing it back (each shrink
rewrites the edge chunk row of the one shard); another, with its own handle, writes single
elements into the part of those edge chunks that every shape keeps. Every element written
must be there at the end, and neither process may fail.
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import shardstore

pytestmark = pytest.mark.timeout(180)

SIDE = 64  # one shard of SIDE x SIDE, inner chunks of 8 x 8
ROW = 57  # written by the writer: inside the edge chunk row (56..63), below every shape's edge
SHAPES = ((SIDE - 2, SIDE), (SIDE - 4, SIDE))  # the resizer alternates: each shrink cuts row 7


def _resizer(path: str, started: Any, done: Any, cycles: Any) -> None:
    a = shardstore.zarr3.open(path, mode="r+")
    started.wait(timeout=60)
    n = 0
    while not done.is_set() or n < 4:
        for shape in SHAPES:
            a.resize(shape)
        n += 1
    cycles.value = n


def _writer(path: str, started: Any, done: Any) -> None:
    a = shardstore.zarr3.open(path, mode="r+")
    started.wait(timeout=60)
    try:
        for x in range(SIDE):
            a[ROW, x] = x + 2  # one element: a partial write (read-modify-write) of one inner chunk
    finally:
        done.set()


def test_resize_and_writes_from_another_process_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "a.zarr")
    a = shardstore.zarr3.create(path, shape=(SIDE, SIDE), dtype="uint16", chunks=(8, 8), shards=(SIDE, SIDE))
    a[...] = 1
    ctx = multiprocessing.get_context("forkserver")
    started, done, cycles = ctx.Event(), ctx.Event(), ctx.Value("i", 0)
    procs = [
        ctx.Process(target=_resizer, args=(path, started, done, cycles)),
        ctx.Process(target=_writer, args=(path, started, done)),
    ]
    for p in procs:
        p.start()
    started.set()
    for p in procs:
        p.join(timeout=150)
    assert [p.exitcode for p in procs] == [0, 0], "a process failed (see its traceback above)"
    assert cycles.value >= 4
    a = shardstore.zarr3.open(path, mode="r")
    assert a.shape == SHAPES[-1]
    got = a[ROW, :]
    lost = np.flatnonzero(got != np.arange(SIDE) + 2).tolist()
    assert lost == [], f"writes to row {ROW} lost by a concurrent resize at columns {lost}"
    # the cut rows read as the fill value after growing again, as NumPy would (the resize
    # still did its work while the writer wrote)
    a = shardstore.zarr3.open(path, mode="r+")
    a.resize((SIDE, SIDE))
    np.testing.assert_array_equal(a[SHAPES[-1][0]:, :], 0)
