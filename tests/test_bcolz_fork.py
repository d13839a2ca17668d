"""bcolz: a writing handle inherited across ``fork`` is not the writer in the child.

The parent appends without flushing (it holds the rootdir's writer lease, its rows are in
memory) and forks. The child's copy of the handle is back at the last flush, without the
lease: it never writes the parent's rows (not by a flush, a read, nor at its exit) and never
removes the parent's lock file; its own appends wait for the parent to flush, then follow
the parent's rows, or fail with a ConflictError naming the rootdir."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from _forking import fork_running, wait_for_child

from shardstore import IOConfig
from shardstore import bcolz as sbz
from shardstore.errors import ConflictError
from shardstore.store._filelock import Lease

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform"),
    pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning"),
    pytest.mark.timeout(120),
]

CHUNKLEN = 16
INITIAL = np.arange(10, dtype="i4")
PARENT = np.full(25, -1, "i4")  # completes chunk 0, writes chunk 1, leaves 3 rows pending
CHILD = np.full(4, -2, "i4")


def _carray(tmp_path: Path) -> Path:
    root = tmp_path / "ca"
    sbz.carray(INITIAL, rootdir=root, chunklen=CHUNKLEN)
    return root


def _on_disk(root: Path) -> np.ndarray:
    return sbz.open(root, mode="r")[:]


def _assert_back_at_the_last_flush(ca: sbz.carray, root: Path) -> None:
    """In the child: the handle holds nothing of the parent's, and touched nothing."""
    assert len(ca) == len(INITIAL) and not ca._async.dirty
    np.testing.assert_array_equal(ca[:], INITIAL)  # (a read flushes what is pending: nothing)
    np.testing.assert_array_equal(_on_disk(root), INITIAL)
    assert (root / ".writer.lock").exists()


def test_a_forked_child_appends_after_the_parents_rows_once_the_parent_flushed(tmp_path: Path) -> None:
    root = _carray(tmp_path)
    ca = sbz.open(root, mode="a", config=IOConfig(bcolz_writer_wait=60))
    ca.append(PARENT)
    ready_r, ready_w = os.pipe()

    def child() -> None:
        _assert_back_at_the_last_flush(ca, root)
        os.write(ready_w, b"1")
        ca.append(CHILD)  # waits for the parent's lease
        ca.flush()

    pid = fork_running(child)
    os.close(ready_w)  # (a child that fails first is then an end of file here)
    code = None
    try:
        assert os.read(ready_r, 1) == b"1"
        # the child is appending: it cannot get past the lease this process holds
        np.testing.assert_array_equal(_on_disk(root), INITIAL)
        assert os.waitpid(pid, os.WNOHANG) == (0, 0)
        ca.flush()
        code = wait_for_child(pid, 60)
    finally:
        os.close(ready_r)
        if code is None:
            wait_for_child(pid, 0)  # (kills it)
    assert code == 0
    np.testing.assert_array_equal(_on_disk(root), np.concatenate([INITIAL, PARENT, CHILD]))
    assert not (root / ".writer.lock").exists()  # (the child released its own lease)


def test_a_forked_child_gives_up_and_leaves_the_parents_lease_alone(tmp_path: Path) -> None:
    root = _carray(tmp_path)
    ca = sbz.open(root, mode="a", config=IOConfig(bcolz_writer_wait=0.2))
    ca.append(PARENT)

    def child() -> None:
        _assert_back_at_the_last_flush(ca, root)
        with pytest.raises(ConflictError, match=r"ca.*another handle"):
            ca.append(CHILD)
        ca.close()  # flushes nothing, releases nothing
        assert (root / ".writer.lock").exists()

    assert wait_for_child(fork_running(child), 60) == 0
    np.testing.assert_array_equal(_on_disk(root), INITIAL)
    assert (root / ".writer.lock").exists()
    assert Lease.acquire(str(root / ".writer.lock"), 0) is None  # this process still holds it
    ca.flush()
    np.testing.assert_array_equal(_on_disk(root), np.concatenate([INITIAL, PARENT]))
    assert not (root / ".writer.lock").exists()


_EXIT_NORMALLY = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    from shardstore import bcolz as sbz

    root = sys.argv[1]
    ca = sbz.open(root, mode="a")
    ca.append(np.full(25, -1, "i4"))
    pid = os.fork()
    if pid == 0:
        sys.exit(0)  # the interpreter's whole shutdown: exit hooks, finalizers, the handle open
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(sbz.open(root, mode="r")) == 10, "the child flushed the parent's rows"
    assert os.path.exists(os.path.join(root, ".writer.lock")), "the child removed the parent's lock file"
    ca.flush()
    """
)


def test_a_forked_child_ending_normally_flushes_nothing_of_the_parents(tmp_path: Path) -> None:
    # (a script of its own: the child must run the interpreter's exit, which pytest's cannot)
    root = _carray(tmp_path)
    done = subprocess.run([sys.executable, "-c", _EXIT_NORMALLY, str(root)], capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(_on_disk(root), np.concatenate([INITIAL, PARENT]))
    assert not (root / ".writer.lock").exists()
