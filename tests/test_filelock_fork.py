"""A process forked while another thread of its parent holds a unit's lock (a
read-modify-write in flight) does not inherit that lock: the child's own write of the unit
waits for the parent's to end, then runs. Before, the child waited forever on the thread lock
it had inherited locked, and its copy of the lock file kept the ``flock`` held for everyone."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest

from shardstore import _sync
from shardstore.store._filelock import locked

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform"),
    # (Python 3.12+ warns about forking a process with threads: that is the case tested)
    pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning"),
]


def _wait_for_child(pid: int, seconds: float) -> int | None:
    """The child's exit code, or None (after killing it) when it has not exited in time."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return None


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
    assert _wait_for_child(pid, 20) == 0, "the forked child hung on a lock it inherited"
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
    assert _wait_for_child(pid, 20) == 0, "the forked child hung on the inherited loop lock"
