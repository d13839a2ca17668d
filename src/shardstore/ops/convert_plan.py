"""The shard-order plan of a conversion: which destination boxes each task writes.

A task owns whole destination write units (shards; chunks when unsharded), so tasks never
write the same stored unit and can run on any process. Where the memory budget allows, a
task's box is also a whole number of source chunks (per axis the least common multiple of the
destination unit and the source chunk), so each source chunk is read and decoded once. Boxes
then grow in whole units up to the task budget, fewer and larger tasks costing less overhead.

Sharded precomputed destinations group chunks into shards by a (Morton-ordered) hash, not by a
box grid: each shard's chunks form a box for the shardings ``convert`` writes (identity hash,
whole Morton levels); a sharding where they do not runs in one task of plain blocks, whose
writes the core merges into each shard by read-modify-write.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config import IOConfig
from ..core.array import Array

__all__ = ["Box", "Endpoint", "Job", "Plan", "plan_boxes", "chunks_in_box", "DEFAULT_TASK_BYTES"]

#: a box in destination array coordinates: (start, stop) per axis
Box = tuple[tuple[int, int], ...]
#: a task holds about this multiple of its box's uncompressed bytes (the read block, a
#: transposed copy, encoded output, the core's chunks in flight)
MEMORY_FACTOR = 4
#: tasks larger than this gain nothing and make progress coarse
DEFAULT_TASK_BYTES = 256 << 20


@dataclass(frozen=True)
class Endpoint:
    """How a task (re)opens an array: a URL or path (or, in this process only, a Store)."""

    url: Any
    path: str = ""
    storage_options: tuple[tuple[str, Any], ...] = ()
    #: the I/O configuration of the process that opens it (None: the defaults)
    config: IOConfig | None = None

    def open(self, mode: str) -> Array:
        from ..api import open as open_node

        return open_node(self.url, mode=mode, path=self.path or None,
                         storage_options=dict(self.storage_options) or None, config=self.config)


@dataclass(frozen=True)
class Job:
    """One array to convert: source, destination, and the destination-to-source axis map."""

    src: Endpoint
    dst: Endpoint
    axis_map: tuple[int | None, ...]
    verbatim: str | None  # None, "all" (every chunk's bytes), "interior" (chunks not on an edge)


@dataclass
class Plan:
    boxes: list[Box]
    block: tuple[int, ...]  # the regular box shape (empty when boxes follow shards)
    oversize: bool  # one write unit is larger than the task budget
    parallel: bool  # False: boxes share write units, run them in one process


def _grid(shape: Sequence[int], block: Sequence[int]) -> Iterator[Box]:
    ranges = [range(0, max(n, 1), b) for n, b in zip(shape, block)]
    for starts in itertools.product(*ranges):
        yield tuple((s, min(s + b, n)) for s, b, n in zip(starts, block, shape))


def _grow(unit: list[int], shape: Sequence[int], itemsize: int, limit: int) -> list[int]:
    """``unit`` grown in whole units, last axis first, while the box stays within ``limit``."""
    block = list(unit)
    for axis in reversed(range(len(block))):
        while block[axis] < shape[axis]:
            bigger = block[axis] * 2
            if math.prod(block[:axis] + [bigger] + block[axis + 1:]) * itemsize > limit:
                return block
            block[axis] = bigger
    return block


def plan_boxes(dst: Array, src_chunks: Sequence[int], task_bytes: int, *, min_tasks: int = 1,
               block: Sequence[int] | None = None) -> Plan:
    """The boxes of ``dst`` to write, each a whole number of write units.

    ``src_chunks`` is the source's chunk shape in destination axes; ``task_bytes`` the
    uncompressed bytes one task may hold; ``block`` a box shape to reuse (a resumed plan).
    """
    shape = dst.shape
    itemsize = dst.dtype.itemsize
    shard_boxes = _precomputed_shard_boxes(dst)
    if shard_boxes is not None:
        if shard_boxes:
            big = max(math.prod(b - a for a, b in box) for box in shard_boxes) * itemsize > task_bytes
            return Plan(shard_boxes, (), big, True)
        unit = list(dst.chunks)
        parallel = False
    else:
        unit = list(dst.shards or dst.chunks)
        parallel = True
    if block is not None:
        blk = list(block)
    else:
        aligned = [math.lcm(u, max(1, s)) for u, s in zip(unit, src_chunks)]
        aligned = [min(a, -(-n // u) * u) for a, u, n in zip(aligned, unit, shape)]
        start = aligned if math.prod(aligned) * itemsize <= task_bytes else unit
        blk = _grow(start, shape, itemsize, task_bytes)
        while min_tasks > 1 and _count(shape, blk) < min_tasks and any(b > u for b, u in zip(blk, start)):
            axis = max(range(len(blk)), key=lambda i: blk[i] // start[i])
            blk[axis] = max(start[axis], blk[axis] // 2 // start[axis] * start[axis])
    oversize = math.prod(unit) * itemsize > task_bytes
    return Plan(list(_grid(shape, blk)), tuple(blk), oversize, parallel)


def _count(shape: Sequence[int], block: Sequence[int]) -> int:
    return math.prod(-(-max(n, 1) // b) for n, b in zip(shape, block))


def _precomputed_shard_boxes(dst: Array) -> list[Box] | None:
    """Sharded precomputed: each shard's bounding box, when every shard fills its box; ``[]``
    when they do not; None for every other kind of destination."""
    layout = dst.driver.layout
    if layout.write_unit_of is None:
        return None
    grid_shape = tuple(-(-n // c) for n, c in zip(dst.shape, dst.chunks))
    groups: dict[Any, list[tuple[int, ...]]] = {}
    for coords in itertools.product(*(range(g) for g in grid_shape)):
        groups.setdefault(layout.write_unit(coords), []).append(coords)
    boxes: list[Box] = []
    for members in groups.values():
        arr = np.array(members)
        lo, hi = arr.min(axis=0), arr.max(axis=0) + 1
        if math.prod(int(h - low) for low, h in zip(lo, hi)) != len(members):
            return []
        boxes.append(tuple((int(low) * c, min(int(h) * c, n)) for low, h, c, n in zip(lo, hi, dst.chunks, dst.shape)))
    return sorted(boxes)


def chunks_in_box(box: Box, chunks: Sequence[int]) -> list[tuple[int, ...]]:
    """Grid coordinates of the chunks a box covers."""
    return list(itertools.product(*(range(a // c, -(-b // c)) for (a, b), c in zip(box, chunks))))
