"""bcolz: one writer per rootdir at a time. A second writing handle (of this or another
process) waits while the first has unflushed appends and then fails with a ConflictError
naming the rootdir; a handle that gets its turn after another writer continues from what is
on disk; appends from many processes never interleave, and readers always see a prefix of
whole appends."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shardstore import bcolz as sbz
from shardstore import IOConfig
from shardstore.errors import ConflictError

pytestmark = pytest.mark.timeout(120)

BLOCK = 37  # rows per append: not a multiple of the chunk length, so leftovers change hands
CHUNKLEN = 16
ROUNDS = 6


def test_second_handle_waits_then_names_the_rootdir(tmp_path: Path) -> None:
    quick = IOConfig(bcolz_writer_wait=0.2)
    root = tmp_path / "ca"
    sbz.carray(np.arange(10, dtype="i4"), rootdir=root, chunklen=CHUNKLEN)
    a = sbz.open(root, mode="a", config=quick)
    b = sbz.open(root, mode="a", config=quick)
    a.append(np.full(5, -1, "i4"))  # pending in memory: a holds the rootdir
    with pytest.raises(ConflictError, match=r"ca.*another handle"):
        b.append(np.full(3, -2, "i4"))
    a.flush()  # a lets go; b continues after a's rows (it re-reads meta/sizes)
    b.append(np.full(3, -2, "i4"))
    b.flush()
    expected = np.concatenate([np.arange(10), np.full(5, -1), np.full(3, -2)]).astype("i4")
    np.testing.assert_array_equal(sbz.open(root, mode="r")[:], expected)
    a.append(np.full(2, -3, "i4"))  # and a, whose view is stale now, continues after b's rows
    a.flush()
    np.testing.assert_array_equal(sbz.open(root, mode="r")[:], np.concatenate([expected, [-3, -3]]))


def _appender(root: str, writer: int, barrier: Any) -> None:
    ca = sbz.open(root, mode="a")
    barrier.wait(timeout=60)
    for r in range(ROUNDS):
        ca.append(np.full(BLOCK, writer * 100 + r, "i4"))
        ca.flush()


def _reader(root: str, stop: Any, out: Any) -> None:
    """Read the whole carray until ``stop``; report how many reads were not whole appends."""
    bad = reads = 0
    while not stop.is_set() or reads == 0:
        rows = sbz.open(root, mode="r")[:]
        reads += 1
        bad += not _whole_blocks(rows)
    out.put((reads, bad))


def _whole_blocks(rows: np.ndarray) -> bool:
    """Whether ``rows`` is the initial rows and then whole ``BLOCK``-row appends, each one
    value, each (writer, round) once and every writer's rounds in order."""
    if len(rows) < 3 or not (rows[:3] == [-7, -7, -7]).all() or (len(rows) - 3) % BLOCK:
        return False
    blocks = rows[3:].reshape(-1, BLOCK)
    if not (blocks == blocks[:, :1]).all():
        return False
    values = blocks[:, 0].tolist()
    by_writer: dict[int, list[int]] = {}
    for v in values:
        by_writer.setdefault(v // 100, []).append(v % 100)
    return all(rounds == list(range(len(rounds))) for rounds in by_writer.values())


def test_appends_from_processes_never_interleave(tmp_path: Path) -> None:
    root = str(tmp_path / "ca")
    sbz.carray(np.full(3, -7, "i4"), rootdir=root, chunklen=CHUNKLEN)
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["numpy", "shardstore"])
    n = 3
    barrier, stop, out = ctx.Barrier(n), ctx.Event(), ctx.Queue()
    reader = ctx.Process(target=_reader, args=(root, stop, out))
    writers = [ctx.Process(target=_appender, args=(root, w, barrier)) for w in range(n)]
    reader.start()
    for p in writers:
        p.start()
    for p in writers:
        p.join(timeout=100)
    stop.set()
    reads, bad = out.get(timeout=60)
    reader.join(timeout=30)
    assert [p.exitcode for p in writers] == [0] * n
    rows = sbz.open(root, mode="r")[:]
    assert len(rows) == 3 + n * ROUNDS * BLOCK
    assert _whole_blocks(rows)
    assert bad == 0, f"{bad} of {reads} concurrent reads saw something else than whole appends"
