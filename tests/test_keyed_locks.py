"""The per-unit write locks (``shardstore._locks.KeyedLocks``): taken alike by coroutines on
any event loop and by blocking writes on any thread, without an event loop for the latter."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from shardstore._locks import KeyedLocks

pytestmark = pytest.mark.timeout(60)


def _held(locks: KeyedLocks, key: object) -> bool:
    lock = locks._locks.get(key)
    return lock is not None and lock.held


def test_a_thread_waits_for_a_coroutine_and_a_coroutine_for_a_thread() -> None:
    locks = KeyedLocks()
    order: list[str] = []

    async def main() -> None:
        async with locks.holding(["a", "b"]):
            t = threading.Thread(target=lambda: (locks.hold_now(["b"])(), order.append("thread")))
            t.start()
            await asyncio.sleep(0.05)
            order.append("coroutine")  # the thread still waits for "b"
        await asyncio.to_thread(t.join)
        release = locks.hold_now(["a"])
        waiter = asyncio.create_task(_take(locks, "a", order))
        await asyncio.sleep(0.05)
        assert not waiter.done()  # the coroutine waits for the thread's "a"
        order.append("released")
        release()
        await waiter

    asyncio.run(main())
    assert order == ["coroutine", "thread", "released", "task"]
    assert not _held(locks, "a") and not _held(locks, "b")


async def _take(locks: KeyedLocks, key: str, order: list[str]) -> None:
    async with locks.holding([key]):
        order.append("task")


def test_waiters_get_the_lock_in_the_order_they_came() -> None:
    locks = KeyedLocks()
    got: list[int] = []
    release = locks.hold_now(["k"])

    def wait(i: int) -> None:
        locks.hold_now(["k"])()
        got.append(i)

    threads = []
    for i in range(4):
        threads.append(threading.Thread(target=wait, args=(i,)))
        threads[-1].start()
        while len(locks._locks["k"].waiters) < i + 1:
            time.sleep(0.001)
    release()
    for t in threads:
        t.join()
    assert got == [0, 1, 2, 3]


@pytest.mark.parametrize("when", ["waiting", "granted"])
def test_a_cancelled_waiter_never_keeps_the_lock(when: str) -> None:
    """A coroutine cancelled while it waits, or after the lock was handed to it but before
    it ran again, leaves the lock free for the next one."""
    locks = KeyedLocks()

    async def main() -> None:
        release = locks.hold_now(["k"])
        task = asyncio.create_task(_take(locks, "k", []))
        await asyncio.sleep(0.01)
        if when == "granted":
            release()  # hands it to the task; the grant runs on this loop later
            task.cancel()
        else:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            release()
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.sleep(0.01)
        assert not _held(locks, "k")
        async with locks.holding(["k"]):
            pass

    asyncio.run(main())


def test_a_blocking_create_and_write_of_local_files_start_no_event_loop_thread(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A blocking create takes its metadata on the calling thread's loop and a blocking write
    its unit locks on the calling thread: a script that creates and writes local arrays never
    starts shardstore's loop thread (1-2 ms of a small write, the first one's more)."""
    script = textwrap.dedent(f"""
        import threading
        import numpy as np
        import shardstore
        import shardstore._sync as s
        root = {str(tmp_path)!r}
        a = shardstore.n5.create(root + "/a.n5", "d", shape=(64, 64), dtype="uint8", block_size=(16, 16))
        a[...] = 7
        z = shardstore.zarr3.create(root + "/z.zarr", shape=(64, 64), dtype="uint8", chunks=(8, 8), shards=(32, 32))
        z[3:40, 5:9] = 1
        assert int(a[...].sum()) == 7 * 64 * 64 and int(z[...].sum()) == 37 * 4
        print(s._thread is None, sorted({{t.name.split("_")[0] for t in threading.enumerate()}}))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("True"), out.stdout
