"""Names of the temp files of atomic local writes (write a temp file, then ``os.replace`` it):
how they are made unique and how they are told apart from keys."""

from __future__ import annotations

import itertools
import os
import re
import threading
from collections.abc import Iterator

from ._filelock import is_lock_name

__all__ = ["is_temp_name", "temp_path"]

# temporary files of in-flight writes: ".{name}.{32 hex}.tmp", never listed as keys
_TEMP_RE = re.compile(r"^\..*\.[0-9a-f]{32}\.tmp$", re.DOTALL)


_temp_state: tuple[int, Iterator[int], str] | None = None  # pid, counter, random prefix
_temp_lock = threading.Lock()


def _temp_suffix() -> str:
    """32 hex digits unique among this machine's writers: a random per-process prefix and a
    counter (``uuid4`` per write costs a system call; a forked child picks a new prefix)."""
    global _temp_state
    state = _temp_state
    if state is None or state[0] != os.getpid():
        with _temp_lock:
            if _temp_state is None or _temp_state[0] != os.getpid():
                _temp_state = (os.getpid(), itertools.count(), os.urandom(8).hex())
            state = _temp_state
    return f"{state[2]}{next(state[1]) & (1 << 64) - 1:016x}"


def temp_path(path: str) -> str:
    """A fresh temp file path beside ``path`` for an atomic write of it (write it, then
    ``os.replace`` it onto ``path``). Public for writers that bypass ``LocalStore`` but must
    leave the same traces (the native writer, ``core/rawwrite.py``): a temp file of this name
    is never listed as a key."""
    parent, name = os.path.split(path)
    # the name is shortened so that a long key still gives a legal temp file name
    return os.path.join(parent, f".{name[:64]}.{_temp_suffix()}.tmp")


def is_temp_name(name: str) -> bool:
    """Whether a file name is shardstore's own and never a key: a ``temp_path`` name (an
    in-flight write, or one a killed writer left behind) or a lock sidecar of a unit whose
    holder died (``shardstore repair`` removes stale ones)."""
    if name.startswith(".") and name.endswith(".tmp"):
        return _TEMP_RE.match(name) is not None
    return is_lock_name(name)
