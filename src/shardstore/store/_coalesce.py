"""Merge nearby byte ranges of one value into few requests (the one implementation)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["coalesce_ranges", "DEFAULT_MAX_GAP", "DEFAULT_MAX_REQUEST"]

#: ranges closer than this are fetched together; a few KiB of waste beats a round trip
DEFAULT_MAX_GAP = 64 * 1024
#: but one merged request does not grow beyond this
DEFAULT_MAX_REQUEST = 64 * 1024 * 1024


def coalesce_ranges(
    ranges: Sequence[tuple[int, int]],
    max_gap: int = DEFAULT_MAX_GAP,
    max_request: int = DEFAULT_MAX_REQUEST,
) -> list[tuple[int, int, list[int]]]:
    """Group ``[start, end)`` ranges into merged requests.

    Returns ``(start, end, members)`` per merged request, where ``members`` are indices into
    ``ranges``; overlapping and duplicate ranges share one request.
    """
    order = sorted(range(len(ranges)), key=lambda i: ranges[i])
    groups: list[tuple[int, int, list[int]]] = []
    for i in order:
        start, end = ranges[i]
        if groups:
            g_start, g_end, members = groups[-1]
            if start - g_end <= max_gap and max(end, g_end) - g_start <= max_request:
                members.append(i)
                groups[-1] = (g_start, max(end, g_end), members)
                continue
        groups.append((start, end, [i]))
    return groups
