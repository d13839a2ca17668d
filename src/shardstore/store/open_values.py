"""Values held open at one version (``sync_protocols.OpenValue``), and values read ahead.

``FileVersion`` is an open file: the generation comes from ``fstat`` of the descriptor and
every read is a ``pread`` of it (``read_transient`` into this thread's reusable buffer), so the index and the data of a shard read through it come
from the same file even while writers replace it (they rename a new file over the name; the
open one stays as it was). ``BytesVersion`` is the same for a value already in memory.
``PrefetchedReads`` serves ``UnitReads`` from values read beforehand (adapters over stores
that cannot hold a value open). ``HeldFiles`` holds a read's open files for all its pieces.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from ._fileio import pread, read_buffer
from .base import ByteRange, slice_range

__all__ = ["ADVISE_MAX_BYTES", "BytesVersion", "FileVersion", "HeldFiles", "PrefetchedReads", "advise_files", "advise_spans", "read_buffer"]

#: whether this system can tell a page-cache miss without waiting and advise the kernel
_NOWAIT = hasattr(os, "RWF_NOWAIT") and hasattr(os, "posix_fadvise")
#: spans closer than this are advised in one call (the kernel reads whole pages anyway)
_PAGE = 4096
#: a read's chunks are advised ahead (``core/spanread.advise_ahead``, ``core/rawread.advise_files_of``)
#: only up to this many bytes of one file, or of all its chunk files: the kernel caches the
#: pages it reads on advice as single pages, which later reads from the page cache copy ~1.4x
#: slower than the large folios of its own sequential readahead (a 12 MB shard read whole:
#: 4.2 against 3.0 ms); larger reads are long runs that readahead serves well
ADVISE_MAX_BYTES = 8 << 20


def _uncached(fd: int, offset: int) -> bool:
    """Whether the byte at ``offset`` of ``fd`` would be read from the disk (Linux's
    ``RWF_NOWAIT`` tells without waiting); False where that cannot be told (no advice then)."""
    if not _NOWAIT:
        return False
    try:
        os.preadv(fd, [bytearray(1)], offset, os.RWF_NOWAIT)
    except BlockingIOError:
        return True
    except OSError:  # (a file system without it: EOPNOTSUPP)
        return False
    return False


def advise_spans(fd: int, spans: Sequence[tuple[int, int]]) -> None:
    """When some of ``spans`` (``(start, end)`` of the open file ``fd``, ascending) are not
    in the page cache, ask the kernel for all of them at once (``POSIX_FADV_WILLNEED``), so
    that on a cold disk their reads overlap instead of waiting one after the other (18
    scattered 190 KB chunks of a shard: 8-12 ms read one after the other, 6 ms advised first).
    Whether they are cached is asked of the first, middle and last span: one span read earlier
    (the minishard index just after a value) must not leave the rest of a cold file
    unadvised. Spans one page apart share a call. Cached spans are not advised: the advice
    costs about as much as such a read."""
    n = len(spans)
    if n < 2 or not any(_uncached(fd, spans[i][0]) for i in {0, n // 2, n - 1}):
        return
    lo, hi = spans[0]
    for start, end in spans[1:]:
        if lo <= start <= hi + _PAGE:
            hi = max(hi, end)
            continue
        if hi > lo:
            os.posix_fadvise(fd, lo, hi - lo, os.POSIX_FADV_WILLNEED)
        lo, hi = start, end
    if hi > lo:
        os.posix_fadvise(fd, lo, hi - lo, os.POSIX_FADV_WILLNEED)


def advise_files(paths: Sequence[str]) -> None:
    """When the first of ``paths`` (files a read is about to read whole: one chunk each) is
    not in the page cache, ask the kernel for all of them at once (``POSIX_FADV_WILLNEED``),
    as ``advise_spans`` for the spans of one file; files that do not exist are skipped. When
    it is cached, nothing more is asked: one open and a probe."""
    if not _NOWAIT:
        return
    cold = False
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            if not cold and not (cold := _uncached(fd, 0)):
                return
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        finally:
            os.close(fd)


class FileVersion:
    """An open file, read with ``pread`` from any thread (``OpenValue``)."""

    __slots__ = ("_fd", "generation", "size")

    def __init__(self, fd: int, generation: Hashable, size: int) -> None:
        self._fd = fd
        self.generation = generation
        self.size = size

    def read(self, start: int, end: int) -> bytes:
        end = min(end, self.size)
        return pread(self._fd, end - start, start) if end > start else b""

    def advise(self, spans: Sequence[tuple[int, int]]) -> None:
        """``advise_spans`` of this file."""
        advise_spans(self._fd, spans)

    def read_many(self, spans: Sequence[tuple[int, int]], *, advise: bool = True) -> list[bytes]:
        """``read`` of each ``(start, end)``, after ``advise`` of them all (``advise=False``:
        the caller advised them, with the spans of other files)."""
        fd, size = self._fd, self.size
        if advise:
            self.advise(spans)
        if not hasattr(os, "pread"):  # (Windows)
            return [self.read(start, end) for start, end in spans]
        # ``os.pread`` directly: a uint64 get_many reads ~1.5 small spans per key, and the
        # three Python calls around each pread were a fifth of a warm batch's time
        out = []
        for start, end in spans:
            n = min(end, size) - start
            if n <= 0:
                out.append(b"")
                continue
            data = os.pread(fd, n, start)
            out.append(data if len(data) == n else self.read(start, end))  # (a short read: continued)
        return out

    def read_transient(self, start: int, end: int, max_bytes: int) -> bytes | memoryview:
        end = min(end, self.size)
        buf = read_buffer(end - start, max_bytes) if end > start else None
        if buf is None or not hasattr(os, "preadv"):  # (Windows has no preadv)
            return self.read(start, end)
        got = 0
        while got < len(buf):  # (a short read of a large request is continued)
            n = os.preadv(self._fd, [buf[got:]], start + got)
            if n == 0:  # the file ends early (it cannot shrink while open: truncated under us)
                return buf[:got]
            got += n
        return buf

    def read_cached(self) -> bytes | None:
        """The whole value if all of it is in the page cache (read without waiting on the
        disk); None when some is not, or where that cannot be told."""
        if not _NOWAIT:
            return None
        buf = bytearray(self.size)
        try:
            if self.size and os.preadv(self._fd, [buf], 0, os.RWF_NOWAIT) != self.size:
                return None
        except OSError:  # BlockingIOError: not cached; EOPNOTSUPP: cannot tell
            return None
        return bytes(buf)

    def fileno(self) -> int:
        return self._fd

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


class BytesVersion:
    """A value in memory (``OpenValue``)."""

    __slots__ = ("_value", "generation", "size")

    def __init__(self, value: bytes, generation: Hashable) -> None:
        self._value = value
        self.generation = generation
        self.size = len(value)

    def read(self, start: int, end: int) -> bytes:
        return self._value[start:end]

    def advise(self, spans: Sequence[tuple[int, int]]) -> None:
        pass  # (in memory already)

    def read_many(self, spans: Sequence[tuple[int, int]], *, advise: bool = True) -> list[bytes]:
        return [self._value[start:end] for start, end in spans]

    def read_transient(self, start: int, end: int, max_bytes: int) -> bytes | memoryview:
        return memoryview(self._value)[start:end]  # (no copy at all)

    def fileno(self) -> int:
        return -1

    def close(self) -> None:
        self._value = b""


class PrefetchedReads:
    """``UnitReads`` over values already read (key -> value, None or absent: missing)."""

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, bytes | None]) -> None:
        self._values = values

    def get_sync(self, key: str, byte_range: ByteRange | None = None) -> bytes | None:
        value = self._values.get(key)
        if value is None or byte_range is None:
            return value
        return slice_range(value, byte_range)

    def get_transient_sync(self, key: str, max_bytes: int) -> bytes | memoryview | None:
        return self._values.get(key)

    def close(self) -> None:
        pass


class HeldFiles:
    """Files a read holds open across its calls of ``read_spans_sync`` (on several threads):
    each shard file is opened, and its index looked up, once per read instead of once per
    call, and all the read's pieces of a shard come from one version of it. ``close``
    closes them all."""

    def __init__(self) -> None:
        self._files: dict[str, tuple[Any, Any]] = {}  # file key -> (OpenValue, what the opener derived)
        # (pieces on two threads that need the same file: the second waits for the first's
        # open instead of opening a version of its own)
        self._opening = threading.Lock()

    def open(self, key: str, open_value: Callable[[], Any], derive: Callable[[Any], Any]) -> tuple[Any, Any] | None:
        """``(value, derive(value))`` of the file ``key``: held already, or ``open_value()``
        (an ``OpenValue``, None: no such file) held from now on."""
        got = self._files.get(key)
        if got is None:
            with self._opening:
                got = self._files.get(key)
                if got is None:
                    value = open_value()
                    if value is None:
                        return None
                    try:
                        got = (value, derive(value))
                    except BaseException:
                        value.close()
                        raise
                    self._files[key] = got
        return got

    def close(self) -> None:
        files, self._files = self._files, {}
        for value, _ in files.values():
            value.close()
