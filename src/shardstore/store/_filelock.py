"""Advisory locks across processes for the read-modify-write of one local file.

A read-modify-write of a unit (a shard, a block) holds an exclusive ``flock`` on a hidden
sidecar ``.{name}.lock`` beside the unit's file; every writer of that unit in any process
(through ``LocalStore.update_many``) takes it, so their merges run one after another and none
is lost. The lock is on the sidecar, not on the unit's file, because writes replace that file
(temp file + rename): a lock on its old inode would not exclude a writer that opened the new
one.

- The kernel drops the lock when its holder dies, so a crashed writer never blocks others.
- A unit deleted because it became all fill takes its sidecar with it, under the lock. A
  waiter that then gets the lock of the unlinked sidecar notices (its inode is no longer the
  one at the path) and locks the new sidecar instead; so deleting lock files is safe.
- On NFS, Linux emulates ``flock`` with POSIX byte-range locks (NLM): that works where the
  lock daemon does; where it does not, ``flock`` fails or locks only per client, and
  concurrent writers from several machines can then lose updates. Use S3 there.
- Windows has no ``fcntl``: the lock is then only a lock within this process.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Iterator

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["lock_path", "is_lock_name", "locked"]

#: sidecar names end so; listings skip hidden names ending so
LOCK_SUFFIX = ".lock"


def lock_path(path: str) -> str:
    """The sidecar lock file of the unit stored at ``path``."""
    parent, name = os.path.split(path)
    return os.path.join(parent, f".{name}{LOCK_SUFFIX}")


def is_lock_name(name: str) -> bool:
    return name.startswith(".") and name.endswith(LOCK_SUFFIX)


# threads of this process wait on a threading lock first: flock would exclude them as well
# (each open file description is its own lock owner), but a process-local lock costs nothing
_local: weakref.WeakValueDictionary[str, threading.Lock] = weakref.WeakValueDictionary()
_local_guard = threading.Lock()


def _thread_lock(path: str) -> threading.Lock:
    with _local_guard:
        lock = _local.get(path)
        if lock is None:
            lock = _local[path] = threading.Lock()
        return lock


def _open_lock(path: str) -> int:
    for attempt in range(8):
        try:
            # O_RDWR: NFS emulates flock with POSIX write locks, which need a writable file
            return os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
        except FileNotFoundError:  # the unit's directory does not exist (yet, or any more)
            if attempt == 7:
                raise
            os.makedirs(os.path.dirname(path), exist_ok=True)
    raise AssertionError("unreachable")


@contextlib.contextmanager
def locked(path: str) -> Iterator[str]:
    """Hold the exclusive lock of the unit stored at ``path`` (blocking until it is free).

    Yields the sidecar's path: a caller that deletes the unit unlinks it too, while holding
    the lock.
    """
    sidecar = lock_path(path)
    with _thread_lock(sidecar):
        if fcntl is None:
            yield sidecar
            return
        while True:
            fd = _open_lock(sidecar)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    now = os.stat(sidecar)
                except FileNotFoundError:
                    now = None
                mine = os.fstat(fd)
                if now is None or (now.st_ino, now.st_dev) != (mine.st_ino, mine.st_dev):
                    continue  # deleted (with its unit) while we waited: lock the current one
                yield sidecar
                return
            finally:
                os.close(fd)  # (releases the flock)
