"""Build a multiscale pyramid in one pass over the base level, in bounded memory.

The base is read once, in blocks. Each block's extent is a multiple of the total factor of
the levels computed from it, so every level's voxels come out whole; the levels are computed
from the block in memory and written at once (``streamed`` levels). Coarse levels are small:
the first one whose whole array (or, for ``mean``, whose exact sums) fits in a quarter of the
memory budget is kept in memory (``buffered``) and written at the end, and the levels above it
are computed from it then. So the block only needs to cover whole voxels of the first
buffered level, and the coarsest levels are written as whole chunks and shards.

Memory: ``max_memory`` bounds the data this function holds (a block, the intermediate levels,
the kernels' temporaries, the buffered level). The estimate per base voxel of a block is
``4.5 * itemsize + 8`` bytes (``bytes_per_voxel``), checked by the tests against the measured
peak RSS. The Python process, NumPy and shardstore themselves come on top.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..core.array import Array
from ..errors import ShardStoreError
from .downsample_formats import PyramidTarget, open_target
from .downsample_kernels import (
    METHODS,
    MeanState,
    downsample_shape,
    reduce_level,
    sum_dtype,
)
from .scaleout import check_scheduler, run_tasks

__all__ = ["DEFAULT_MAX_MEMORY", "DownsampleResult", "PyramidPlan", "downsample", "parse_size", "plan_pyramid"]

DEFAULT_MAX_MEMORY = 1 << 30
#: working bytes per base voxel of a block: the block and the next one (read meanwhile), the
#: kernels' copies (mode: the first level and the gathered mixed blocks; mean: the sums of the
#: first level), the previous block's levels (written meanwhile) and the chunks in flight
def bytes_per_voxel(itemsize: int) -> int:
    return 4 * itemsize + itemsize // 2 + 8


def parse_size(text: str | int) -> int:
    """``"512M"``, ``"2G"``, ``"1.5GiB"``, ``"1000000"`` -> bytes (K/M/G/T are powers of 1024)."""
    if isinstance(text, int):
        return text
    s = str(text).strip().upper().removesuffix("IB").removesuffix("B")
    scale = 1
    for i, unit in enumerate("KMGT", start=1):
        if s.endswith(unit):
            s, scale = s[:-1], 1024 ** i
            break
    try:
        value = float(s)
    except ValueError:
        raise ValueError(f"not a size: {text!r} (examples: 512M, 2G, 1000000)") from None
    if value <= 0:
        raise ValueError(f"a size must be positive, got {text!r}")
    return int(value * scale)


@dataclass(frozen=True)
class PyramidPlan:
    """Levels, block and buffering decided before any I/O."""

    base_shape: tuple[int, ...]
    factors: tuple[tuple[int, ...], ...]  # per level, relative to the level below
    shapes: tuple[tuple[int, ...], ...]  # per level (level 1 first)
    streamed: int  # levels 1..streamed are written block by block
    block: tuple[int, ...]  # base voxels per block
    estimated_bytes: int

    @property
    def cumulative(self) -> tuple[tuple[int, ...], ...]:
        out, acc = [], (1,) * len(self.base_shape)
        for f in self.factors:
            acc = tuple(a * b for a, b in zip(acc, f))
            out.append(acc)
        return tuple(out)

    @property
    def levels(self) -> int:
        return len(self.factors)

    def footprints(self) -> list[tuple[int, ...] | None]:
        """Per level: the extent one block writes of it (streamed levels), else None."""
        return [tuple(b // f for b, f in zip(self.block, cum)) if k < self.streamed else None
                for k, cum in enumerate(self.cumulative)]


def _level_shapes(shape: tuple[int, ...], factor: tuple[int, ...], levels: int | None, until: int | None) -> list[tuple[int, ...]]:
    shapes: list[tuple[int, ...]] = []
    current = shape
    axes = [i for i, f in enumerate(factor) if f > 1]
    while True:
        if levels is not None and len(shapes) >= levels:
            break
        if all(current[i] == 1 for i in axes):
            break
        if levels is None and all(current[i] <= (until or 1) for i in axes):
            break
        current = downsample_shape(current, factor)
        shapes.append(current)
    return shapes


def _lcm(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    return tuple(math.lcm(int(x), int(y)) for x, y in zip(a, b))


def plan_pyramid(
    shape: Sequence[int],
    itemsize: int,
    factor: Sequence[int],
    *,
    levels: int | None = None,
    until: int | None = None,
    unit: Sequence[int] | None = None,
    unit_chunk: Sequence[int] | None = None,
    method: str = "mean",
    max_memory: int = DEFAULT_MAX_MEMORY,
    scan: str = "C",
) -> PyramidPlan:
    """Decide the levels (``levels`` of them, or until every downsampled axis is at most
    ``until``), which are streamed, and the block shape (aligned to ``unit``, the base's shard
    or chunk, and to whole ``unit_chunk`` chunks of the streamed levels, when the memory
    allows)."""
    shape = tuple(int(s) for s in shape)
    factor = tuple(int(f) for f in factor)
    if len(factor) != len(shape) or any(f < 1 for f in factor) or all(f == 1 for f in factor):
        raise ValueError(f"a downsampling factor needs one positive entry per axis and some entry > 1, got {list(factor)}")
    if levels is not None and levels < 1:
        raise ValueError(f"--levels must be at least 1, got {levels}")
    shapes = _level_shapes(shape, factor, levels, until)
    if not shapes:
        raise ValueError(f"nothing to do: the array {list(shape)} is already at most {until} along the downsampled axes")
    n = len(shapes)
    cumulative = [tuple(f ** (k + 1) for f in factor) for k in range(n)]
    per_voxel = bytes_per_voxel(itemsize)
    kept = 8 if method == "mean" else itemsize  # a buffered level holds sums (mean) or values

    # the first level small enough to keep whole (a quarter of the budget) is buffered
    streamed = n
    for k in range(n):
        if math.prod(shapes[k]) * kept * 2 <= max_memory // 4:  # x2: its values are written from a copy
            streamed = k
            break
    buffered_bytes = math.prod(shapes[streamed]) * kept * 2 if streamed < n else 0
    align = cumulative[streamed] if streamed < n else cumulative[-1]
    budget = max_memory - buffered_bytes

    def fits(block: Sequence[int]) -> bool:
        return math.prod(block) * per_voxel <= budget

    # blocks cover whole voxels of every level computed from them; prefer blocks that are
    # whole base shards and whose footprint in each streamed level is whole chunks of it
    candidates = []
    if unit is not None:
        whole = _lcm(align, unit)
        for k in range(streamed):
            whole = _lcm(whole, [c * f for c, f in zip(unit_chunk or unit, cumulative[k])])
        candidates += [whole, _lcm(align, unit)]
    step = next((c for c in candidates if fits(c)), align)
    if not fits(step):
        raise ShardStoreError(
            f"a block of {list(step)} voxels (one voxel of level {min(streamed + 1, n)}) needs "
            f"{math.prod(step) * per_voxel:,} bytes, more than --max-memory {max_memory:,}; "
            "allow more memory or build fewer levels in this pass")
    block = list(step)
    grew = True
    # double the axes in turn, the fastest in memory first (``scan`` "C": the last; "F", as
    # precomputed's [x, y, z]: the first, which is also the order of the Morton code that
    # lays out precomputed shards, so a footprint holds whole shards)
    order = list(range(len(shape))) if scan == "F" else list(reversed(range(len(shape))))
    while grew:
        grew = False
        for axis in order:
            if block[axis] >= shape[axis]:
                continue
            trial = list(block)
            trial[axis] = block[axis] * 2
            if fits(trial):
                block = trial
                grew = True
    block = [min(b, -(-s // st) * st) for b, s, st in zip(block, shape, step)]
    estimate = math.prod(block) * per_voxel + buffered_bytes
    return PyramidPlan(shape, (factor,) * n, tuple(shapes), streamed, tuple(block), estimate)


def _regions(shape: Sequence[int], block: Sequence[int]) -> Iterator[tuple[int, ...]]:
    ranges = [range(0, s, b) for s, b in zip(shape, block)]
    grid = np.stack(np.meshgrid(*ranges, indexing="ij"), -1).reshape(-1, len(shape))
    for row in grid:
        yield tuple(int(v) for v in row)


def _level_region(start: Sequence[int], stop: Sequence[int], cum: Sequence[int]) -> tuple[slice, ...]:
    return tuple(slice(a // f, -(-b // f)) for a, b, f in zip(start, stop, cum))


@dataclass
class DownsampleResult:
    """What ``downsample`` built."""

    location: str
    format: str
    method: str
    plan: PyramidPlan
    levels: list[Array]
    seconds: float
    blocks: int


def default_method(target: PyramidTarget) -> str:
    """``mode`` for segmentations (a precomputed ``segmentation``, or 32/64-bit integer labels),
    ``mean`` otherwise."""
    info = target.extra.get("info")
    if info is not None:
        return "mode" if info.get("type") == "segmentation" else "mean"
    dtype = target.base.dtype
    return "mode" if dtype.kind in "ui" and dtype.itemsize >= 4 else "mean"


Kept = list[tuple[tuple[slice, ...], np.ndarray]]


def _compute_blocks(base: Array, arrays: Sequence[Array], plan: PyramidPlan, method: str, scan: str,
                    starts: Sequence[tuple[int, ...]], keep: Callable[[tuple[slice, ...], np.ndarray], None],
                    on_block: Callable[[], None] | None = None) -> None:
    """Read the blocks at ``starts``, write their streamed levels to ``arrays`` and hand the
    buffered level's piece of each to ``keep(region, values)``."""
    cum = plan.cumulative
    n, s = plan.levels, plan.streamed

    def read(start: tuple[int, ...]) -> np.ndarray:
        return base[tuple(slice(a, min(a + b, sh)) for a, b, sh in zip(start, plan.block, base.shape))]

    def write(pieces: list[tuple[Array, tuple[slice, ...], np.ndarray]]) -> None:
        for array, region, values in pieces:
            array[region] = values

    with ThreadPoolExecutor(1, thread_name_prefix="downsample-read") as reader, \
            ThreadPoolExecutor(1, thread_name_prefix="downsample-write") as writer:
        # the next block is read, and the last block's levels are written, while this block is
        # computed (NumPy releases the GIL; the budget counts both)
        pending = reader.submit(read, starts[0])
        written = None
        for i, start in enumerate(starts):
            stop = tuple(min(a + b, sh) for a, b, sh in zip(start, plan.block, base.shape))
            x = pending.result()
            if i + 1 < len(starts):
                pending = reader.submit(read, starts[i + 1])
            pieces: list[tuple[Array, tuple[slice, ...], np.ndarray]] = []
            state: Any = MeanState.from_base(x, start, base.shape) if method == "mean" else x
            for k in range(min(s + 1, n)):
                region = _level_region(start, stop, cum[k])
                if method == "mean":
                    state = state.next(plan.factors[k])
                    values = state.mean() if k < s else state.sums
                else:
                    state = reduce_level(state, plan.factors[k], method, scan=scan)
                    values = state
                if k < s:
                    pieces.append((arrays[k], region, values))
                else:
                    keep(region, values)
            del x, state
            if written is not None:
                written.result()  # one block's levels in flight at most
            written = writer.submit(write, pieces)
            if on_block is not None:
                on_block()
        if written is not None:
            written.result()


@dataclass(frozen=True)
class BlockTask:
    """A run of blocks for another process or machine: plain data (locations, the plan), so
    it pickles; the worker opens the arrays itself."""

    location: str
    storage: dict[str, Any]
    plan: PyramidPlan
    method: str
    starts: tuple[tuple[int, ...], ...]


def run_block_task(task: BlockTask) -> Kept:
    """Compute and write a task's blocks; return its pieces of the buffered level (small: the
    whole level fits in a quarter of the budget) for the final pass."""
    target = open_target(task.location, **task.storage)
    arrays = target.open_levels(min(task.plan.streamed, task.plan.levels))
    kept: Kept = []
    _compute_blocks(target.base, arrays, task.plan, task.method, target.scan, task.starts,
                    lambda region, values: kept.append((region, values)))
    return kept


def _split_tasks(starts: list[tuple[int, ...]], workers: int, scheduler: str | None) -> list[tuple[tuple[int, ...], ...]]:
    """Runs of consecutive blocks: about four per local worker (a short tail when the last
    ones finish; the read / compute / write overlap inside a run still works), one block each
    on a Dask cluster (whose size is not known here)."""
    per_task = 1 if scheduler is not None else max(1, len(starts) // (4 * workers))
    return [tuple(starts[i:i + per_task]) for i in range(0, len(starts), per_task)]


def downsample(
    location: str | Path,
    factor: Sequence[int] = (2, 2, 2),
    *,
    levels: int | None = None,
    until: int | None = None,
    method: str | None = None,
    max_memory: int | str = DEFAULT_MAX_MEMORY,
    progress: bool = False,
    storage_options: dict[str, Any] | None = None,
    workers: int = 1,
    scheduler: str | None = None,
) -> DownsampleResult:
    """Build the pyramid of the array at ``location`` (see the module docstring).

    ``factor`` is per level, in x, y, z order (``(2, 2, 1)``: keep z). ``levels`` levels are
    built, or (default) levels until every downsampled axis is at most ``until`` (default: the
    base's chunk edge). ``method``: mean, mode, min, max, stride (default: mode for
    segmentations, mean for images). Existing levels of the pyramid are replaced.

    ``workers`` > 1 runs the blocks on that many local processes, ``scheduler`` (a
    dask.distributed address) on a Dask cluster; each process gets ``max_memory / workers``
    (with ``scheduler``: each task gets ``max_memory / workers``). The coarse, buffered levels
    are written by this process at the end, as without workers; the values do not depend on
    ``workers``.
    """
    from tqdm import tqdm

    if method is not None and method not in METHODS:
        raise ValueError(f"unknown --method {method!r}; choose one of {', '.join(METHODS)}")
    if workers < 1:
        raise ShardStoreError(f"--workers must be at least 1, got {workers}")
    t0 = time.perf_counter()
    if scheduler is not None:
        check_scheduler(scheduler)  # before the old levels are replaced
    storage = {"storage_options": storage_options} if storage_options else {}
    target = open_target(location, **storage)
    base = target.base
    method = method or default_method(target)
    axis_factor = target.axis_factor(factor)
    if until is None and levels is None:
        until = max(base.chunks[a] for a in target.spatial_axes)
    plan = plan_pyramid(base.shape, base.dtype.itemsize, axis_factor, levels=levels, until=until,
                        unit=base.shards or base.chunks, unit_chunk=base.chunks, method=method, scan=target.scan,
                        max_memory=parse_size(max_memory) // workers)
    cum = plan.cumulative
    arrays = target.create_levels(cum, plan.footprints())

    n = plan.levels
    s = plan.streamed
    keep: np.ndarray | None = None
    if s < n:
        keep = np.zeros(plan.shapes[s], dtype=sum_dtype(base.dtype) if method == "mean" else base.dtype)

    def put(region: tuple[slice, ...], values: np.ndarray) -> None:
        assert keep is not None
        keep[region] = values

    starts = list(_regions(base.shape, plan.block))
    count = len(starts)
    with tqdm(total=count, desc="downsampling", unit="block", disable=not progress, leave=False) as bar:
        if workers == 1 and scheduler is None:
            _compute_blocks(base, arrays, plan, method, target.scan, starts, put, on_block=lambda: bar.update(1))
        else:
            tasks = [BlockTask(str(location), storage, plan, method, run)
                     for run in _split_tasks(starts, workers, scheduler)]

            def done(task: BlockTask, kept: Kept) -> None:
                for region, values in kept:
                    put(region, values)
                kept.clear()  # the level is in ``keep`` now; run_tasks holds the (empty) lists
                bar.update(len(task.starts))

            run_tasks(run_block_task, tasks, workers=workers, scheduler=scheduler, on_done=done)
    if keep is not None:
        state: Any = MeanState(keep, (0,) * base.ndim, cum[s], base.shape, base.dtype) if method == "mean" else keep
        for k in range(s, n):
            if k > s:
                state = state.next(plan.factors[k]) if method == "mean" else reduce_level(
                    state, plan.factors[k], method, scan=target.scan)
            arrays[k][...] = state.mean() if method == "mean" else state  # whole shards, once each
    return DownsampleResult(str(location), base.format, method, plan, arrays, time.perf_counter() - t0, count)
