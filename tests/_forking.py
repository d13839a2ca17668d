"""Helpers of the tests that fork: run a function in a forked child, wait for it."""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable


def wait_for_child(pid: int, seconds: float) -> int | None:
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


def fork_running(body: Callable[[], object]) -> int:
    """Fork; the child runs ``body`` and leaves with ``os._exit``: 0 when it returned, 1 (its
    traceback on stderr) when it raised. The parent gets the child's pid."""
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        body()
        code = 0
    except BaseException:  # noqa: BLE001 - reported through the exit code
        traceback.print_exc()
    finally:
        os._exit(code)  # (never back into pytest: the parent runs the rest)
