"""What every format's entry points share: mode checks and "a failed call leaves nothing behind".

The calling convention of every format (``shardstore.<format>.open`` / ``create``): the store
(path, URL or Store) first, options as keywords, and one meaning per mode:

- ``"r"`` read-only, must exist; ``"r+"`` read/write, must exist; ``"a"`` read/write (create
  when missing, where the entry point can create);
- ``"w-"`` create, refuse anything already there (the default of every ``create``);
  ``"w"`` create, replacing what is there (and, for a group, its children).

Opening a local directory for writing creates it (``LocalStore`` makes its root); when the
call then fails (nothing to open, a create refused or invalid) the directories it made are
removed again, so that a mistake leaves no empty directories behind.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import InvalidModeError

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["CREATE_MODES", "OPEN_MODES", "check_mode", "cleans_up", "leave_nothing_behind", "local_path"]

F = TypeVar("F", bound=Callable[..., Any])

OPEN_MODES = ("r", "r+", "a")
CREATE_MODES = ("w", "w-")

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def check_mode(mode: Any, allowed: tuple[str, ...], what: str) -> str:
    """``mode`` if ``what`` (e.g. "n5.open()") takes it, else an InvalidModeError saying which do."""
    if not isinstance(mode, str) or mode not in allowed:
        hint = "; use create() to create" if set(allowed) <= set(OPEN_MODES) else ""
        hint = "; use open() to open" if set(allowed) <= set(CREATE_MODES) else hint
        names = [repr(m) for m in allowed]
        listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
        raise InvalidModeError(f"{what} takes mode {listed}, got {mode!r}{hint}")
    return mode


def local_path(store_like: Any) -> Path | None:
    """The local directory a path or ``file://`` URL names (``~`` expanded), else None."""
    local = _local_dir(store_like)
    if local is None:
        return None
    from pathlib import Path  # (here: every create passes through this module, few need a Path)

    return Path(local)


def _local_dir(store_like: Any) -> str | None:
    """``local_path`` as a string: os.path, not pathlib, on the path of every create
    (pathlib and the urllib modules it imports are 0.8 MiB of a process that needs no Path)."""
    if isinstance(store_like, os.PathLike):
        return os.path.expanduser(os.fspath(store_like))
    if not isinstance(store_like, str):
        return None
    m = _SCHEME.match(store_like)
    if m is None:
        return os.path.expanduser(store_like)
    if m.group(1).lower() == "file":
        return os.path.expanduser(store_like[len("file://"):])
    return None


def _first_missing(path: str) -> str | None:
    """The highest ancestor of the absolute ``path`` (or itself) that does not exist yet."""
    missing = None
    while not os.path.exists(path):
        missing = path
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return missing


def _holds_files(path: str) -> bool:
    return any(files for _, _, files in os.walk(path))


@contextlib.contextmanager
def leave_nothing_behind(store_like: Any) -> Iterator[None]:
    """If the body fails, remove the directories it created under a local ``store_like``
    (only when they hold no file: data written by someone else is never touched)."""
    local = _local_dir(store_like)
    created = _first_missing(os.path.abspath(local)) if local is not None else None
    try:
        yield
    except BaseException:
        if created is not None and os.path.isdir(created) and not _holds_files(created):
            import shutil  # (only on this failure path)

            shutil.rmtree(created, ignore_errors=True)
        raise


def cleans_up(func: F) -> F:
    """Decorator for entry points whose first argument is the store: ``leave_nothing_behind``."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with leave_nothing_behind(args[0] if args else None):
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
