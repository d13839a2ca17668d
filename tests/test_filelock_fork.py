"""A process forked while another thread of its parent holds a unit's lock (a
read-modify-write in flight) does not inherit that lock: the child's own write of the unit
waits for the parent's to end, then runs. Before, the child waited forever on the thread lock
it had inherited locked, and its copy of the lock file kept the ``flock`` held for everyone.

A ``Lease`` (a writer's claim on a dataset) stays the parent's: a forked child neither holds
it nor releases it, and its copy of the lock file does not outlive the parent's hold."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest
from _forking import fork_running, wait_for_child

from shardstore import _sync
from shardstore.store._filelock import Lease, lock_path, locked

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform"),
    # (Python 3.12+ warns about forking a process with threads: that is the case tested)
    pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning"),
]


def _held_by_a_thread(lock: Any) -> tuple[threading.Thread, threading.Event]:
    """A thread holding ``lock`` (a context manager) until the returned event is set."""
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with lock:
            held.set()
            release.wait(10)

    t = threading.Thread(target=holder)
    t.start()
    held.wait(10)
    return t, release


def test_a_child_forked_during_a_locked_write_locks_the_unit_itself(tmp_path) -> None:
    unit = str(tmp_path / "shard")
    t, release = _held_by_a_thread(locked(unit))  # a read-modify-write in flight
    pid = os.fork()
    if pid == 0:  # the child: lock the unit itself, once the parent has let go
        code = 1
        try:
            with locked(unit):
                code = 0
        finally:
            os._exit(code)
    time.sleep(0.3)  # the child is waiting for the parent's flock now
    release.set()
    t.join()
    assert wait_for_child(pid, 20) == 0, "the forked child hung on a lock it inherited"
    with locked(unit):  # and the parent still can
        pass


def test_a_child_forked_while_another_thread_holds_the_loop_lock_can_use_the_loop() -> None:
    t, release = _held_by_a_thread(_sync._lock)  # as a thread making the event loop or a pool
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            async def one() -> int:
                return 1

            code = 0 if _sync.sync(one()) == 1 else 1
        finally:
            os._exit(code)
    release.set()
    t.join()
    assert wait_for_child(pid, 20) == 0, "the forked child hung on the inherited loop lock"


def test_a_forked_child_neither_holds_nor_releases_the_parents_lease(tmp_path) -> None:
    path = lock_path(str(tmp_path / "writer"))
    lease = Lease.acquire(path, 0)
    assert lease is not None

    def child() -> None:
        assert not lease.held
        lease.release()  # must not unlink the parent's lock file, nor unlock it
        assert os.path.exists(path)
        # the child closed its copy of the descriptor: the parent's flock is still there
        assert Lease.acquire(path, 0) is None

    assert wait_for_child(fork_running(child), 20) == 0
    assert lease.held and os.path.exists(path)
    assert Lease.acquire(path, 0) is None  # (another open file of this process: excluded too)
    lease.release()
    assert not os.path.exists(path)
    again = Lease.acquire(path, 0)
    assert again is not None
    again.release()


def test_a_lease_ends_with_its_holder_not_with_the_holders_forked_children(tmp_path) -> None:
    """A holder that dies without releasing lets the next writer in, even while a child it
    forked lives on: the child's copy of the lock file does not keep the flock held."""
    path = lock_path(str(tmp_path / "writer"))
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()

    def holder() -> None:
        held = Lease.acquire(path, 0)
        assert held is not None

        def grandchild() -> None:
            os.write(ready_w, b"1")
            os.read(go_r, 1)  # (lives until the test lets it go, or closes the pipe)

        fork_running(grandchild)
        os._exit(0)  # dies holding the lease: the kernel drops its flock, not the file

    try:
        holder_pid = fork_running(holder)
        assert os.read(ready_r, 1) == b"1"  # the grandchild runs, forked while the lease was held
        assert wait_for_child(holder_pid, 20) == 0
        assert os.path.exists(path)
        lease = Lease.acquire(path, 0)
        assert lease is not None, "a forked child kept the dead holder's lease held"
        lease.release()
    finally:
        os.write(go_w, b"1")
        for fd in (ready_r, ready_w, go_r, go_w):
            os.close(fd)
