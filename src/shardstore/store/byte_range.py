"""Byte ranges of a stored value: ``RangeBR`` ``[start, end)``, ``OffsetBR`` (from an offset to
the end), ``SuffixBR`` (the last n bytes), and the one definition of what each selects
(``resolve_range``, ``slice_range``) that every store backend matches."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ByteRange", "OffsetBR", "RangeBR", "SuffixBR", "range_within", "resolve_range", "slice_range"]


@dataclass(frozen=True, slots=True)
class RangeBR:
    """Bytes ``[start, end)``."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if self.start < 0 or self.end < self.start:
            raise ValueError(f"invalid byte range [{self.start}, {self.end})")


@dataclass(frozen=True, slots=True)
class OffsetBR:
    """Bytes from ``start`` to the end of the value."""

    start: int

    def __post_init__(self) -> None:
        if self.start < 0:
            raise ValueError(f"invalid byte offset {self.start}")


@dataclass(frozen=True, slots=True)
class SuffixBR:
    """The last ``n`` bytes of the value (all of it if shorter)."""

    n: int

    def __post_init__(self) -> None:
        if self.n < 0:
            raise ValueError(f"invalid suffix length {self.n}")


ByteRange = RangeBR | OffsetBR | SuffixBR


def resolve_range(byte_range: ByteRange | None, size: int) -> tuple[int, int]:
    """The absolute, clipped ``[start, end)`` a byte range selects from a value of ``size`` bytes."""
    if byte_range is None:
        return 0, size
    if isinstance(byte_range, RangeBR):
        return min(byte_range.start, size), min(byte_range.end, size)
    if isinstance(byte_range, OffsetBR):
        return min(byte_range.start, size), size
    if isinstance(byte_range, SuffixBR):
        return (max(size - byte_range.n, 0), size) if byte_range.n else (size, size)
    raise TypeError(f"not a byte range: {byte_range!r}")


def slice_range(value: bytes | memoryview, byte_range: ByteRange | None) -> bytes:
    """Apply a byte range to a whole value (the semantics every backend must match)."""
    start, end = resolve_range(byte_range, len(value))
    return bytes(value[start:end])


def range_within(start: int, size: int, byte_range: ByteRange | None) -> RangeBR:
    """``byte_range`` of a value stored at ``[start, start + size)`` of a larger one (an inner
    chunk of a shard, a value of a uint64 shard file), as an absolute range of the larger one."""
    first, end = resolve_range(byte_range, size)
    return RangeBR(start + first, start + end)
