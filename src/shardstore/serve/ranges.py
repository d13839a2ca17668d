"""The ``Range`` request header (RFC 9110 section 14): ``bytes=a-b``, ``bytes=a-``, ``bytes=-n``.

Only single ranges are answered with 206; a header this server does not understand (another
unit, several ranges, malformed syntax) is ignored, as RFC 9110 allows, and the whole value is
sent with 200. A syntactically valid range that selects nothing is "unsatisfiable" (416).
"""

from __future__ import annotations

import re

from ..store.base import ByteRange, OffsetBR, RangeBR, SuffixBR, resolve_range

__all__ = ["Unsatisfiable", "content_range", "parse_range", "satisfiable"]

_SINGLE = re.compile(r"^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$", re.IGNORECASE)


class Unsatisfiable(Exception):
    """The range selects no byte of the value (416); ``size`` is the value's length."""

    def __init__(self, size: int) -> None:
        super().__init__(f"range not satisfiable for a {size}-byte value")
        self.size = size


def parse_range(header: str | None) -> ByteRange | None:
    """The byte range a ``Range`` header asks for, or None (no header, or one to ignore)."""
    if not header:
        return None
    m = _SINGLE.match(header)
    if m is None:
        return None
    first, last = m.group(1), m.group(2)
    if first and last:
        start, end = int(first), int(last)
        if end < start:  # "bytes=5-2" is invalid syntax: ignored (RFC 9110 14.1.1)
            return None
        return RangeBR(start, end + 1)
    if first:
        return OffsetBR(int(first))
    if last:
        return SuffixBR(int(last))
    return None  # "bytes=-"


def satisfiable(byte_range: ByteRange, size: int) -> tuple[int, int]:
    """The absolute ``[start, end)`` served for ``byte_range`` of a ``size``-byte value.

    Raises ``Unsatisfiable`` when the range starts at or past the end, or asks for a
    zero-length suffix (RFC 9110 14.1.2: ``-0`` and a first-byte-pos >= size select nothing).
    """
    if isinstance(byte_range, (RangeBR, OffsetBR)) and byte_range.start >= size:
        raise Unsatisfiable(size)
    if isinstance(byte_range, SuffixBR) and (byte_range.n == 0 or size == 0):
        raise Unsatisfiable(size)
    return resolve_range(byte_range, size)


def content_range(start: int, end: int, size: int) -> str:
    """The ``Content-Range`` value of bytes ``[start, end)`` of a ``size``-byte value."""
    return f"bytes {start}-{end - 1}/{size}"
