"""Advisory locks across processes for the read-modify-write of one local file.

A read-modify-write of a unit (a shard, a block) holds an exclusive ``flock`` on a hidden
sidecar ``.{name}.lock`` beside the unit's file; every writer of that unit in any process
(through ``LocalStore.update_many``) takes it, so their merges run one after another and none
is lost. The lock is on the sidecar, not on the unit's file, because writes replace that file
(temp file + rename): a lock on its old inode would not exclude a writer that opened the new
one.

- The holder unlinks the sidecar before it lets go, so no lock files stay in the tree (other
  tools list the same directories). A waiter that then gets the lock of the unlinked file
  notices (its inode is no longer the one at the path) and locks the current one instead.
- The kernel drops the lock when its holder dies, so a crashed writer never blocks others;
  its sidecar stays behind, hidden from listings, and is reused by the next writer.
- On NFS, Linux emulates ``flock`` with POSIX byte-range locks (NLM): that works where the
  lock daemon does; where it does not, ``flock`` fails or locks only per client, and
  concurrent writers from several machines can then lose updates. Use S3 there.
- Windows has no ``fcntl``: the lock is then only a lock within this process.
- A process forked while another of its threads holds (or waits for) a unit's lock does not
  inherit it: the child starts with fresh thread locks and closes its copies of those lock
  files. Otherwise the child would wait forever on a thread lock no thread of it will
  release, and its copy of the descriptor would keep the ``flock`` held for every process
  until the child exits (a lock belongs to the open file, which the child shares).
- A ``Lease`` belongs to the process that took it, not to its forked children: a child
  closes its copies of the parent's lease files at once, and its ``Lease`` objects are
  neither ``held`` nor release anything (releasing would unlink the lock file the parent
  still holds, letting a third writer in). Closing a copy leaves the parent's ``flock`` as
  it was: the lock is released only when every descriptor of the open file is closed (or
  unlocked explicitly, which the child never does). Kept open, the child's copy would hold
  the lease past the parent's death.
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

__all__ = ["Lease", "is_lock_name", "lock_path", "locked"]

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
#: descriptors of the lock files ``locked`` (or ``Lease.acquire``) has open, and the threads
#: that opened them
_open_fds: dict[int, int] = {}
#: the leases this process holds, by descriptor
_leases: dict[int, Lease] = {}


def _after_fork_in_child() -> None:
    global _local, _local_guard
    _local = weakref.WeakValueDictionary()
    _local_guard = threading.Lock()
    for fd, lease in list(_leases.items()):  # the parent's, whichever thread took them
        lease._fd = None
        _open_fds.pop(fd, None)
        with contextlib.suppress(OSError):
            os.close(fd)
    _leases.clear()
    me = threading.get_ident()  # (the forking thread goes on in the child, with its locks)
    for fd, owner in list(_open_fds.items()):
        if owner != me:
            _open_fds.pop(fd, None)
            with contextlib.suppress(OSError):
                os.close(fd)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _thread_lock(path: str) -> threading.Lock:
    with _local_guard:
        lock = _local.get(path)
        if lock is None:
            lock = _local[path] = threading.Lock()
        return lock


def open_making_dirs(path: str, flags: int) -> int:
    """``os.open(path, flags | O_CREAT)``, making the directory when it is missing, and again
    when another thread or process prunes the empty parents meanwhile (``LocalStore`` removes
    a directory once its last key is gone)."""
    for attempt in range(8):
        try:
            return os.open(path, flags | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
        except FileNotFoundError:
            if attempt == 7:
                raise
            # a parent pruned mid-way, or made by another thread and pruned again before
            # makedirs could see it (then it raises FileExistsError even with exist_ok): retry
            with contextlib.suppress(FileNotFoundError, FileExistsError):
                os.makedirs(os.path.dirname(path), exist_ok=True)
    raise AssertionError("unreachable")


def _open_lock(path: str) -> int:
    # O_RDWR: NFS emulates flock with POSIX write locks, which need a writable file
    return open_making_dirs(path, os.O_RDWR)


def _current(fd: int, path: str) -> bool:
    """Whether the locked file ``fd`` is still the one at ``path`` (not unlinked by its
    previous holder while we waited)."""
    try:
        now = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (now.st_ino, now.st_dev) == (mine.st_ino, mine.st_dev)


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


@contextlib.contextmanager
def locked(path: str) -> Iterator[None]:
    """Hold the exclusive lock of the unit stored at ``path`` (blocking until it is free)."""
    sidecar = lock_path(path)
    with _thread_lock(sidecar):
        if fcntl is None:
            yield
            return
        while True:
            fd = _open_lock(sidecar)
            _open_fds[fd] = threading.get_ident()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                if not _current(fd, sidecar):
                    continue  # unlinked by the previous holder while we waited: lock the new one
                try:
                    yield
                finally:
                    _unlink_quietly(sidecar)  # (still holding it: see the module doc)
                return
            finally:
                _open_fds.pop(fd, None)
                os.close(fd)  # (releases the flock)


class Lease:
    """An exclusive ``flock`` on ``path`` held until ``release`` (or the process's end): a
    writer's claim on a whole dataset (bcolz: one writing handle per rootdir at a time). A
    forked child does not inherit it (see the module doc)."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd
        _leases[fd] = self

    @classmethod
    def acquire(cls, path: str, timeout: float) -> Lease | None:
        """The lease, waiting up to ``timeout`` seconds for the holder to release it; None
        when it is still held by then (by another handle of this process or another process)."""
        import time

        deadline = time.monotonic() + timeout
        delay = 0.001
        while True:
            fd = _open_lock(path)
            # (a child forked by another thread meanwhile closes its copy, as for ``locked``)
            _open_fds[fd] = threading.get_ident()
            try:
                if fcntl is not None:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    if not _current(fd, path):
                        os.close(fd)  # unlinked by its previous holder: take the current one
                        continue
                return cls(path, fd)
            except BlockingIOError:
                os.close(fd)
            except BaseException:
                os.close(fd)
                raise
            finally:
                _open_fds.pop(fd, None)
            if time.monotonic() >= deadline:
                return None
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            _leases.pop(fd, None)
            _unlink_quietly(self.path)  # (still holding it: see the module doc)
            os.close(fd)  # (releases the flock)

    @property
    def held(self) -> bool:
        return self._fd is not None
