"""What one conversion task does, in whichever process runs it: copy (or compare) one box.

Tasks carry endpoints (URLs, paths, options), never open arrays: a worker process opens the
arrays itself, once per task. In this process the arrays opened by ``convert`` are reused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.array import Array
from ..errors import ShardStoreError
from .convert_plan import Box, Job, chunks_in_box
from .verbatim import is_interior, src_coords

__all__ = ["Arrays", "SourceData", "TaskStats", "copy_box", "compare_box", "read_as_dst", "read_box"]


@dataclass
class TaskStats:
    chunks_verbatim: int = 0
    chunks_reencoded: int = 0
    bytes_in: int = 0  # uncompressed bytes read from the source
    bytes_verbatim: int = 0  # stored bytes copied as they are


class Arrays:
    """The open arrays of the jobs, opened lazily; pickles as the endpoints alone."""

    def __init__(self, jobs: list[Job], opened: dict[tuple[int, str], Array] | None = None) -> None:
        self.jobs = jobs
        self._open = dict(opened or {})

    def __getstate__(self) -> dict[str, Any]:
        return {"jobs": self.jobs, "_open": {}}

    def get(self, job: int, side: str) -> Array:
        a = self._open.get((job, side))
        if a is None:
            j = self.jobs[job]
            a = self._open[(job, side)] = j.src.open("r") if side == "src" else j.dst.open("r+")
        return a


def read_as_dst(src: Array, box: Box, axis_map: tuple[int | None, ...]) -> np.ndarray:
    """``src`` read over the destination box ``box``, in destination axis order."""
    region: list[slice] = [slice(0, 1)] * src.ndim
    for (a, b), m in zip(box, axis_map):
        if m is not None:
            region[m] = slice(a, b)
    block = np.asarray(src[tuple(region)])
    kept = [m for m in axis_map if m is not None]
    dropped = tuple(i for i in range(src.ndim) if i not in kept)
    if dropped:
        block = block.reshape([n for i, n in enumerate(block.shape) if i not in dropped])
    order = sorted(kept)
    block = block.transpose([order.index(m) for m in kept])  # a view: the encoder lays it out
    for axis, m in enumerate(axis_map):
        if m is None:
            block = np.expand_dims(block, axis)
    return block


@dataclass
class SourceData:
    """What one task read from the source, ready to be written: the whole box (``block``), or
    stored chunk bytes copied as they are plus the edge chunks to re-encode (``edges``)."""

    block: np.ndarray | None = None
    chunk_bytes: list[tuple[tuple[int, ...], bytes | None]] = field(default_factory=list)
    edges: list[tuple[tuple[int, ...], np.ndarray]] = field(default_factory=list)


def read_box(arrays: Arrays, item: tuple[Any, ...]) -> SourceData:
    """The read half of ``copy_box``: everything box ``item[1]`` of job ``item[0]`` needs from
    the source. Separate so that a runner can read the next box while this one is encoded."""
    job_index, box = item[0], item[1]
    job = arrays.jobs[job_index]
    src, dst = arrays.get(job_index, "src"), arrays.get(job_index, "dst")
    if job.verbatim is None:
        return SourceData(block=read_as_dst(src, box, job.axis_map))
    coords = chunks_in_box(box, dst.chunks)
    direct = [c for c in coords if job.verbatim == "all" or is_interior(dst, c)]
    found = src.read_chunks_bytes([src_coords(c, job.axis_map, src.ndim) for c in direct])
    data = SourceData(chunk_bytes=list(zip(direct, found)))
    for c in coords:
        if job.verbatim == "all" or is_interior(dst, c):
            continue
        cbox = tuple((i * n, min((i + 1) * n, s)) for i, n, s in zip(c, dst.chunks, dst.shape))
        data.edges.append((c, read_as_dst(src, cbox, job.axis_map)))
    return data


def copy_box(arrays: Arrays, item: tuple[Any, ...], data: SourceData | None = None) -> TaskStats:
    """Write destination box ``item[1]`` of job ``item[0]``: chunk bytes where they can be
    copied verbatim, else read, reorder and write (the core encodes each shard once).
    ``data``: the box's source data when a runner read it ahead (``read_box``)."""
    job_index, box = item[0], item[1]
    dst = arrays.get(job_index, "dst")
    if data is None:
        data = read_box(arrays, item)
    stats = TaskStats()
    if data.block is not None:
        stats.bytes_in = data.block.nbytes
        stats.chunks_reencoded = len(chunks_in_box(box, dst.chunks))
        dst[tuple(slice(a, b) for a, b in box)] = data.block
        return stats
    found = [d for _, d in data.chunk_bytes]
    items = list(data.chunk_bytes)
    stats.chunks_verbatim = sum(d is not None for d in found)
    stats.bytes_verbatim = sum(len(d) for d in found if d is not None)
    stats.bytes_in = len(found) * int(np.prod(dst.chunks)) * dst.dtype.itemsize
    for c, block in data.edges:
        stats.bytes_in += block.nbytes
        items.append((c, dst.encode_chunk(c, block)))
        stats.chunks_reencoded += 1
    dst.write_chunks_bytes(items)
    return stats


def compare_box(arrays: Arrays, item: tuple[Any, ...]) -> int:
    """Elements of box ``item[1]`` where source and destination differ (NaN equals NaN)."""
    job_index, box = item[0], item[1]
    job = arrays.jobs[job_index]
    src, dst = arrays.get(job_index, "src"), arrays.get(job_index, "dst")
    a = read_as_dst(src, box, job.axis_map)
    b = np.asarray(dst[tuple(slice(lo, hi) for lo, hi in box)])
    if a.shape != b.shape:
        raise ShardStoreError(f"verify: shapes differ over {box}: {a.shape} vs {b.shape}")
    if a.dtype.kind in "fc":
        same = (a == b) | (np.isnan(a) & np.isnan(b))
    else:
        same = a == b
    return int(same.size - np.count_nonzero(same))
