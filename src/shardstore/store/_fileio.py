"""Positioned reads of a file descriptor that return every byte asked for (short reads of
large requests are continued), with the ``lseek`` + ``read`` fallback where ``pread`` is missing."""

from __future__ import annotations

import os
from collections.abc import Callable

__all__ = ["pread"]


def pread(fd: int, n: int, offset: int) -> bytes:
    """Read ``n`` bytes at ``offset`` (fewer only at end of file)."""
    if n <= 0:
        return b""
    if not hasattr(os, "pread"):  # Windows
        os.lseek(fd, offset, os.SEEK_SET)
        return _read_loop(lambda k, _off: os.read(fd, k), n, offset)
    return _read_loop(lambda k, off: os.pread(fd, k, off), n, offset)


def _read_loop(read: Callable[[int, int], bytes], n: int, offset: int) -> bytes:
    first = read(n, offset)
    if len(first) == n or not first:
        return first
    chunks = [first]  # short read: large request or a file that shrank meanwhile
    got = len(first)
    while got < n:
        chunk = read(n - got, offset + got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)
