"""Buffered appends (bcolz' leftover in memory until flush): what other handles see, every way
pending rows reach the disk, that the files stay readable when a process dies, and ``cbytes``.
Both the blocking-writer path (files, memory) and the event-loop path are run."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from _helpers import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardstore import bcolz as sbz
from shardstore._sync import sync
from shardstore.store.local import LocalStore


class LoopOnlyStore(LocalStore):
    """A local store that declares no synchronous writes: appends take the event-loop path."""

    @property
    def sync_writes(self):  # type: ignore[override]
        return None


def _store(kind: str, root: Path):
    return LoopOnlyStore(root) if kind == "loop" else root


PATHS = ["blocking", "loop"]


def _data(n: int, start: int = 0) -> np.ndarray:
    return (np.arange(start, start + n) * 7 % 1000).astype("i4")


def _sizes(root: Path) -> dict:
    return json.loads((root / "meta" / "sizes").read_text())


@pytest.mark.parametrize("kind", PATHS)
def test_other_handles_see_the_last_flush(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "c"
    sbz.carray(_data(150), rootdir=root, chunklen=100)
    ca = sbz.open(_store(kind, root), mode="a")
    ca.append(_data(275, 150))  # fills chunk 1, writes chunks 2 and 3, keeps 25 rows
    assert len(ca) == 425 and ca._async.dirty
    assert len(sbz.open(root, mode="r")) == 150  # the files still say 150 rows...
    assert np.array_equal(sbz.open(root, mode="r")[:], _data(150))  # ...and read them
    assert sorted(p.name for p in (root / "data").iterdir()) == [f"__{i}.blp" for i in range(4)]
    ca.flush()
    assert not ca._async.dirty and _sizes(root)["shape"] == [425]
    assert np.array_equal(sbz.open(root, mode="r")[:], _data(425))


@pytest.mark.parametrize("kind", PATHS)
def test_reads_and_writes_through_the_handle_flush_first(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "c"
    ca = sbz.carray(None, rootdir=_store(kind, root), dtype="i4", chunklen=64)
    ca.append(_data(100))
    assert np.array_equal(ca[90:100], _data(100)[90:100])  # the pending rows, via a flush
    assert len(sbz.open(root, mode="r")) == 100
    ca.append(_data(30, 100))
    ca[120] = -1
    ref = _data(130)
    ref[120] = -1
    assert np.array_equal(sbz.open(root, mode="r")[:], ref)
    ca.append(_data(10, 130))  # after a write the leftover is read back from disk
    ca.resize(145)
    assert np.array_equal(sbz.open(root, mode="r")[:], np.concatenate([ref, _data(10, 130), [0] * 5]))


@pytest.mark.parametrize("kind", PATHS)
def test_with_close_and_garbage_collection_flush(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "c"
    with sbz.carray(None, rootdir=_store(kind, root), dtype="i4", chunklen=50) as ca:
        ca.append(_data(120))
    assert len(sbz.open(root, mode="r")) == 120
    ca = sbz.open(_store(kind, root), mode="a")
    ca.append(_data(7, 120))
    ca.close()
    assert len(sbz.open(root, mode="r")) == 127
    ca = sbz.open(_store(kind, root), mode="a")
    ca.append(_data(60, 127))
    del ca
    gc.collect()
    assert np.array_equal(sbz.open(root, mode="r")[:], _data(187))


def test_collected_on_the_event_loop_thread(tmp_path: Path) -> None:
    """A handle dropped inside a coroutine is finalized on shardstore's loop thread, where
    sync() cannot run: the flush then runs on a loop of its own."""
    root = tmp_path / "c"
    ca = sbz.carray(None, rootdir=LoopOnlyStore(root), dtype="i4", chunklen=50)
    ca.append(_data(75))
    holder = [ca]
    del ca

    async def drop() -> None:
        holder.clear()
        gc.collect()

    sync(drop())
    assert np.array_equal(sbz.open(root, mode="r")[:], _data(75))


@pytest.mark.parametrize("kind", PATHS)
def test_autoflush_puts_every_append_on_disk(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "c"
    ca = sbz.carray(None, rootdir=_store(kind, root), dtype="i4", chunklen=40)
    ca.autoflush = True
    for i in range(5):
        ca.append(_data(33, 33 * i))
        assert np.array_equal(sbz.open(root, mode="r")[:], _data(33 * (i + 1)))


@pytest.mark.parametrize("kind", PATHS)
def test_cbytes_follows_appends_as_measured(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "c"
    ca = sbz.carray(None, rootdir=_store(kind, root), dtype="i4", chunklen=1000)
    for i in range(7):
        ca.append(_data(1234, 1234 * i))
    ca.flush()
    driver = ca.driver
    assert driver.cbytes_exact and _sizes(root)["cbytes"] == sync(driver.measure_cbytes()) == ca.cbytes
    ca[5:10] = 0  # other writes: measured at the next flush
    assert not driver.cbytes_exact
    ca.flush()
    assert _sizes(root)["cbytes"] == sync(driver.measure_cbytes())


@pytest.mark.parametrize("kind", PATHS)
def test_multidimensional_appends(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "c"
    rows = np.arange(40 * 6, dtype="f8").reshape(40, 2, 3)
    ca = sbz.carray(rows[:3], rootdir=_store(kind, root), chunklen=7)
    ca.append(rows[3:20])
    ca.append(rows[20])  # one row
    ca.append(rows[21:40])
    ca.flush()
    assert np.array_equal(sbz.open(root, mode="r")[:], rows)
    bcolz = pytest.importorskip("bcolz")
    assert np.array_equal(bcolz.open(str(root), mode="r")[:], rows)


def test_ctable_appends_are_buffered_per_column(tmp_path: Path) -> None:
    root = tmp_path / "t"
    cols = {"a": np.arange(10, dtype="i4"), "b": np.arange(10, dtype="f8")}
    with sbz.ctable(cols, rootdir=root, chunklen=8) as t:
        t.append({"a": np.arange(10, 30, dtype="i4"), "b": np.arange(10, 30, dtype="f8")})
        assert len(sbz.open(root, mode="r")) == 10
        assert np.array_equal(t["a"][:], np.arange(30))  # via this handle: flushed first
        t.append({"a": [30], "b": [30.0]})
    back = sbz.open(root, mode="r")
    assert len(back) == 31 and np.array_equal(back["b"][:], np.arange(31))


_CHILD = """
import os, sys
import numpy as np
from shardstore import bcolz as sbz
root, how = sys.argv[1], sys.argv[2]
ca = sbz.carray(np.arange(250, dtype="i4"), rootdir=root, chunklen=100)  # flushed: 250 rows
ca.append(np.arange(250, 1000, dtype="i4"))  # chunk 2 replaces the leftover, 3..9 are new
if how == "kill":
    os._exit(0)  # no finalizers, no flush: as if the process were killed
# how == "exit": the interpreter flushes at exit
"""


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_process_end(tmp_path: Path, how: str) -> None:
    root = tmp_path / "c"
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(_CHILD))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    subprocess.run([sys.executable, str(script), str(root), how], check=True, env=env, timeout=120)
    n = 1000 if how == "exit" else 250  # killed: the content of the last flush, readable
    assert np.array_equal(sbz.open(root, mode="r")[:], np.arange(n, dtype="i4"))
    bcolz = pytest.importorskip("bcolz")
    b = bcolz.open(str(root), mode="a")
    assert np.array_equal(b[:], np.arange(n, dtype="i4"))
    b.append(np.arange(5, dtype="i4"))  # and bcolz extends it
    b.flush()
    assert np.array_equal(sbz.open(root, mode="r")[:], np.concatenate([np.arange(n), np.arange(5)]))


appends = st.lists(st.one_of(st.integers(0, 130), st.just("flush"), st.just("reopen")), max_size=14)


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(n0=st.integers(0, 80), chunklen=st.integers(1, 45), steps=appends, kind=st.sampled_from(PATHS))
def test_append_sequences(tmp_path_factory, n0: int, chunklen: int, steps: list, kind: str) -> None:
    root = tmp_path_factory.mktemp("seq") / "c"
    ref = _data(n0)
    ca = sbz.carray(ref, rootdir=_store(kind, root), chunklen=chunklen)
    flushed = len(ref)
    for step in steps:
        if step == "flush":
            ca.flush()
            flushed = len(ref)
        elif step == "reopen":
            ca.flush()
            ca = sbz.open(_store(kind, root), mode="a")
            flushed = len(ref)
        else:
            ca.append(_data(step, len(ref)))
            ref = _data(len(ref) + step)
        assert len(ca) == len(ref)
        assert np.array_equal(sbz.open(root, mode="r")[:], ref[:flushed])  # always readable
    assert np.array_equal(ca[:], ref)
    assert np.array_equal(sbz.open(root, mode="r")[:], ref)
    files = sorted(p.name for p in (root / "data").iterdir())
    assert files == sorted(f"__{i}.blp" for i in range(-(-len(ref) // chunklen)))


def test_an_appends_chunks_are_shared_by_this_thread_and_one_codec_thread_per_other_core(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The full chunks of one append are taken from one list by the calling thread and the
    codec pool (``core.threads.run_shared``), not queued one task per chunk behind the pool
    while this thread waits (that left the cores idle at every append's end: the whole append
    path ran at 0.53x of a minimal writer of the format, ``bench_bcolz.py``'s format floor);
    a chunk write that fails still raises from ``append``."""
    from shardstore._sync import codec_pool, codec_pool_size

    pool = codec_pool(None)
    submitted: list[object] = []
    real_submit = pool.submit
    monkeypatch.setattr(pool, "submit", lambda fn, *a, **k: submitted.append(fn) or real_submit(fn, *a, **k))
    c = sbz.carray(None, rootdir=tmp_path / "a", dtype="i4", chunklen=1000)
    data = np.arange(20_500, dtype="i4")
    c.append(data)  # 20 full chunks
    c.flush()
    assert 1 <= len(submitted) <= max(1, codec_pool_size() - 1)
    np.testing.assert_array_equal(sbz.open(tmp_path / "a")[:], data)

    writes = type(c.driver.store.sync_writes)
    real_set = writes.set_sync

    def set_sync(self, key, value, atomic=True):  # type: ignore[no-untyped-def]
        if key.endswith("__25.blp"):
            raise OSError("disk full")
        return real_set(self, key, value, atomic)

    monkeypatch.setattr(writes, "set_sync", set_sync)
    with pytest.raises(OSError, match="disk full"):
        c.append(np.arange(10_000, dtype="i4"))
