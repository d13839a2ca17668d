"""The blocking operations of ``LocalStore`` on the file of one key, by path.

Reads give byte ranges of a file, a value with the generation of the very file it came from,
or the file held open at one version (``FileVersion``). Writes are atomic: the value goes to
a temp file beside its target that then replaces it with ``os.replace``, so a reader or a
crash sees the old value or the new one, never a part. These raise ``OSError``: the store
words it as a ``StoreError`` naming the key.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Hashable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from .._sync import io_pool
from ._fileio import pread
from ._filelock import open_making_dirs
from ._tempfiles import temp_path
from .base import MISSING, ByteRange, Parts, RangeBR, SuffixBR, resolve_range
from .open_values import FileVersion
from .streamed import checked_ends

if TYPE_CHECKING:
    from .streamed import Streamed

__all__ = [
    "describe",
    "open_version",
    "read_parts",
    "read_versioned",
    "span",
    "write_all",
    "write_in_place",
    "write_replacing",
    "write_streamed",
]


def describe(e: OSError) -> str:
    """How a message words ``e`` (its text without the errno and path)."""
    return e.strerror or str(e)


def span(parts: Sequence[ByteRange | None]) -> int:
    """Bytes the ranges ask for (callers pass only ranges of known size: RangeBR, SuffixBR)."""
    return sum(br.end - br.start if isinstance(br, RangeBR) else br.n for br in parts if isinstance(br, (RangeBR, SuffixBR)))


# -- reads -----------------------------------------------------------------------------------
def read_parts(path: str, parts: Sequence[ByteRange | None]) -> list[bytes | None]:
    """Byte ranges of one file; ``None`` for each when it is missing (or not a file)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return [None] * len(parts)
    except PermissionError:
        if os.path.isdir(path):  # Windows refuses to open directories
            return [None] * len(parts)
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # a directory (or device) is not a key
            return [None] * len(parts)
        out: list[bytes | None] = []
        for br in parts:
            start, end = resolve_range(br, st.st_size)
            out.append(pread(fd, end - start, start))
        return out
    finally:
        os.close(fd)


def read_versioned(path: str, byte_range: ByteRange | None) -> tuple[bytes | None, Hashable]:
    """A value (or range) and the generation of the very file it came from (one open file:
    a concurrent rename cannot make them disagree)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None, MISSING
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, MISSING
        start, end = resolve_range(byte_range, st.st_size)
        return pread(fd, end - start, start), (st.st_ino, st.st_mtime_ns, st.st_size)
    finally:
        os.close(fd)


def open_version(path: str) -> FileVersion | None:
    """The file held open: its generation from ``fstat`` of the descriptor (the token of
    ``LocalStore.generation_sync``), its reads ``pread`` of it (``OpenValue``)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    except PermissionError:
        if os.path.isdir(path):  # Windows refuses to open directories
            return None
        raise
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(st.st_mode):  # a directory (or device) is not a key
        os.close(fd)
        return None
    return FileVersion(fd, (st.st_ino, st.st_mtime_ns, st.st_size), st.st_size)


#: ``read_if_cached``: the file must be read the usual way (on a worker thread)
NOT_INLINE = object()


def read_if_cached(path: str, max_bytes: int) -> bytes | None | object:
    """The whole file if it has at most ``max_bytes`` and all of them are in the page cache
    (read without waiting on the disk, for a caller on an event loop); None when it is
    missing or not a file; ``NOT_INLINE`` for anything else (larger, partly on the disk, a
    system that cannot tell, an error: the worker thread's read reports it)."""
    try:
        version = open_version(path)
    except OSError:
        return NOT_INLINE
    if version is None:
        return None
    try:
        got = version.read_cached() if version.size <= max_bytes else None
    finally:
        version.close()
    return NOT_INLINE if got is None else got


# -- writes ----------------------------------------------------------------------------------
def write_all(fd: int, value: bytes | Parts) -> None:
    """Write all of ``value`` (bytes-like, or ``Parts`` written in order without joining)."""
    for part in value if isinstance(value, Parts) else (value,):
        view = memoryview(part).cast("B")
        while view.nbytes:
            view = view[os.write(fd, view) :]


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    """Write all of ``data`` at ``offset`` (the file position is left alone)."""
    view = memoryview(data).cast("B")
    while view.nbytes:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


class _TempFile:
    """An open temp file of ``_replacing``; ``keep = False``: discard it instead."""

    __slots__ = ("fd", "keep")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.keep = True


@contextlib.contextmanager
def _replacing(path: str) -> Iterator[_TempFile]:
    """A temp file beside ``path`` that is renamed over it when the block ends (closed first),
    or removed when the block raises or sets ``keep = False``: a reader or a crash sees the
    old value or the new one, never a part."""
    tmp = temp_path(path)
    t = _TempFile(_open_creating(tmp, os.O_EXCL))
    try:
        try:
            yield t
            large = t.keep and os.fstat(t.fd).st_size >= FREE_LATER_BYTES
        finally:
            os.close(t.fd)
        if not t.keep:
            os.unlink(tmp)
        elif large:
            _replace_freeing_later(tmp, path)
        else:
            os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


#: a write of at least this many bytes frees the file it replaces off the writer's path
FREE_LATER_BYTES = 4 << 20


def _replace_freeing_later(tmp: str, path: str) -> None:
    """``os.replace(tmp, path)``, the old file's blocks and cached pages freed by an I/O
    thread afterwards: the rename that drops the last link of a large file frees it right
    there (a 16 MiB shard rewritten: 4.5 ms for a clean old file, 11-13 ms for one still
    being written back, of a ~30 ms rewrite). A second link under a temp name (never
    listed as a key; one a killed process leaves behind, ``shardstore repair`` removes)
    keeps the old file for the thread to unlink. Still atomic: ``path`` always names a whole
    file, the old or the new one."""
    old = temp_path(path)
    try:
        os.link(path, old)
    except OSError:  # no old file, or no hard links here: nothing to free later
        os.replace(tmp, path)
        return
    try:
        os.replace(tmp, path)
    finally:
        io_pool().submit(_unlink_quietly, old)


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _open_creating(path: str, flag: int) -> int:
    """``os.open(path)`` for writing, created with ``flag`` (``O_EXCL`` / ``O_TRUNC``); the
    directory is made only when missing (a ``makedirs`` per write costs three system calls and
    takes the parent directory's lock), again if a concurrent delete prunes it meanwhile."""
    return open_making_dirs(path, os.O_WRONLY | flag | getattr(os, "O_BINARY", 0))


def write_replacing(path: str, value: bytes | Parts) -> None:
    """Write ``value`` to a temp file beside ``path``, then rename it into place."""
    with _replacing(path) as tmp:
        write_all(tmp.fd, value)


def write_in_place(path: str, value: bytes) -> None:
    """Write ``value`` straight into the file: no temp file and rename, but not atomic."""
    fd = _open_creating(path, os.O_TRUNC)
    try:
        write_all(fd, value)
    finally:
        os.close(fd)


def write_streamed(key: str, path: str, value: Streamed) -> bool:
    """Stream ``value`` into a temp file beside ``path`` (the head's bytes left as a hole,
    written at offset 0 once known), then rename it into place, as ``write_replacing`` does;
    False when there is nothing to store (no file is left: the caller removes the key)."""
    if not isinstance(value.body, Iterable):
        raise TypeError(f"streamed value of {key!r}: a local file takes a synchronous body")
    with _replacing(path) as tmp:
        if value.head_size:
            os.lseek(tmp.fd, value.head_size, os.SEEK_SET)
        for part in value.body:
            write_all(tmp.fd, part)
        ends = checked_ends(key, value)
        if ends is not None:
            _pwrite_all(tmp.fd, ends[0], 0)
            write_all(tmp.fd, ends[1])
        tmp.keep = ends is not None
    return tmp.keep
