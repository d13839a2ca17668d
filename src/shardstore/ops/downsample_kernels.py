"""Downsampling kernels: one pyramid level from the one below it, vectorized in NumPy.

Every kernel maps an N-d array ``x`` and integer factors ``f`` (one per axis) to an array of
shape ``ceil(x.shape / f)``. Output voxel ``i`` summarizes the input block
``[i * f, (i + 1) * f)`` clipped to the input: partial blocks at the upper edges use only the
voxels that exist (as tensorstore's downsample driver and tinybrain, igneous' kernel, do; no
padding value takes part).

- ``mean``: the arithmetic mean. It is computed from exact block *sums* carried from level to
  level (``MeanState``), not from the rounded means of the level below, so level ``k`` is the
  mean of its whole base block. Integer types round to nearest, ties to even, as tensorstore
  does (tinybrain truncates, which darkens each level by half a grey value on average).
- ``mode``: the most frequent value (labels); among equally frequent values the one met first
  when the block is scanned in ``scan`` order (x fastest), which is exactly tinybrain's 2x2x2
  ``mode_pooling`` rule, igneous' default for segmentations. Levels cascade (each level's mode is
  taken over the level below), as igneous does.
- ``min`` / ``max``: exact over the base block whether cascaded or not.
- ``stride``: the block's first voxel (cascading gives base voxel ``i * f^k``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["METHODS", "MeanState", "downsample_shape", "mode_of_blocks", "reduce_level", "sum_dtype"]

METHODS = ("mean", "mode", "min", "max", "stride")


def downsample_shape(shape: Sequence[int], factor: Sequence[int]) -> tuple[int, ...]:
    """``ceil(shape / factor)``: Neuroglancer's and igneous' size of a downsampled level."""
    return tuple(-(-int(s) // int(f)) for s, f in zip(shape, factor))


def _piecewise(
    x: np.ndarray, factor: Sequence[int], out_dtype: np.dtype,
    reduce: Callable[[np.ndarray, tuple[int, ...]], np.ndarray],
) -> np.ndarray:
    """Apply ``reduce(sub, sub_factor) -> array of shape sub.shape / sub_factor`` to the
    interior (whole blocks) and to each edge piece (the partial last block of an axis, reduced
    with that axis' factor set to its in-bounds extent)."""
    out_shape = downsample_shape(x.shape, factor)
    if all(s % f == 0 for s, f in zip(x.shape, factor)):  # whole blocks only: no edge pieces
        return reduce(x, tuple(factor))
    out = np.empty(out_shape, dtype=out_dtype)
    pieces = []
    for s, f in zip(x.shape, factor):
        full = (s // f) * f
        axis = [(slice(0, full), slice(0, s // f), f)] if full else []
        if s > full:
            axis.append((slice(full, s), slice(s // f, s // f + 1), s - full))
        pieces.append(axis)
    for combo in itertools.product(*pieces):
        src = tuple(c[0] for c in combo)
        dst = tuple(c[1] for c in combo)
        sub_factor = tuple(c[2] for c in combo)
        out[dst] = reduce(x[src], sub_factor)
    return out


def mode_of_blocks(rows: np.ndarray, *, uniform_checked: bool = False) -> np.ndarray:
    """The mode of each row of ``rows`` (n_blocks, n); ties go to the value that comes first
    in the row. Uniform rows (most of a segmentation) cost ``n - 1`` comparisons; the others
    count every value's matches pairwise (``n (n - 1) / 2`` vectorized comparisons)."""
    n = rows.shape[1]
    first = rows[:, 0]
    if n == 1:
        return first.copy()
    if uniform_checked:  # the caller left only rows that are not uniform
        return _count_mode(rows)
    uniform = np.ones(rows.shape[0], dtype=bool)
    for j in range(1, n):
        uniform &= rows[:, j] == first
    out = first.copy()
    mixed = np.flatnonzero(~uniform)
    if mixed.size:
        out[mixed] = _count_mode(rows[mixed])
    return out


def _count_mode(sub: np.ndarray) -> np.ndarray:
    n = sub.shape[1]
    counts = np.ones((n, sub.shape[0]), dtype=np.uint16 if n < 65535 else np.uint32)
    for i in range(n):
        for j in range(i + 1, n):
            eq = sub[:, i] == sub[:, j]
            counts[i] += eq
            counts[j] += eq
    winner = np.argmax(counts, axis=0)  # argmax returns the first of equal maxima
    return sub[np.arange(sub.shape[0]), winner]


def _offsets(factor: tuple[int, ...], scan: str) -> list[tuple[int, ...]]:
    """The positions inside a block in ``scan`` order ("F": axis 0 fastest)."""
    ranges = [range(f) for f in factor]
    if scan == "F":
        return [o[::-1] for o in itertools.product(*ranges[::-1])]
    return list(itertools.product(*ranges))


def _reduce_mode(scan: str) -> Callable[[np.ndarray, tuple[int, ...]], np.ndarray]:
    def reduce(sub: np.ndarray, f: tuple[int, ...]) -> np.ndarray:
        if sub.flags.f_contiguous and not sub.flags.c_contiguous:  # [x, y, z] reads: no copy
            return _reduce_mode("C" if scan == "F" else "F")(sub.T, f[::-1]).T
        sub = np.ascontiguousarray(sub)
        offsets = _offsets(f, scan)
        # one strided view per position in the block (no copy of the block) finds the
        # uniform blocks; only the others are gathered into rows and counted
        views = [sub[tuple(slice(o, None, k) for o, k in zip(off, f))] for off in offsets]
        first = views[0]
        uniform = np.ones(first.shape, dtype=bool)
        for v in views[1:]:
            uniform &= v == first
        out = np.array(first, copy=True)
        mixed = np.nonzero(~uniform)
        if mixed[0].size:
            flat = sub.reshape(-1)
            origin = np.ravel_multi_index(tuple(m * k for m, k in zip(mixed, f)), sub.shape)
            rows = np.empty((origin.size, len(offsets)), dtype=sub.dtype)
            for j, off in enumerate(offsets):
                np.take(flat, origin + int(np.ravel_multi_index(off, sub.shape)), out=rows[:, j])
            out[mixed] = mode_of_blocks(rows, uniform_checked=True)
        return out
    return reduce


def _reduce_ufunc(ufunc: np.ufunc, dtype: np.dtype | None = None) -> Callable[[np.ndarray, tuple[int, ...]], np.ndarray]:
    def reduce(sub: np.ndarray, f: tuple[int, ...]) -> np.ndarray:
        if sub.flags.f_contiguous and not sub.flags.c_contiguous:  # [x, y, z] reads: no copy
            return reduce(sub.T, f[::-1]).T
        split: list[int] = []
        for s, k in zip(sub.shape, f):
            split += [s // k, k]
        return ufunc.reduce(sub.reshape(split), axis=tuple(range(1, 2 * sub.ndim, 2)), dtype=dtype)
    return reduce


def reduce_level(x: np.ndarray, factor: Sequence[int], method: str, *, scan: str = "C") -> np.ndarray:
    """One level of ``mode`` / ``min`` / ``max`` / ``stride`` (``mean`` goes through
    ``MeanState``, which keeps exact sums across levels)."""
    factor = tuple(int(f) for f in factor)
    if all(f == 1 for f in factor):
        return x
    if method == "stride":
        return np.ascontiguousarray(x[tuple(slice(None, None, f) for f in factor)])
    if method == "mode":
        return _piecewise(x, factor, x.dtype, _reduce_mode(scan))
    if method in ("min", "max"):
        return _piecewise(x, factor, x.dtype, _reduce_ufunc(np.minimum if method == "min" else np.maximum))
    raise ValueError(f"unknown downsampling method {method!r}; choose one of {', '.join(METHODS)}")


def _sum_blocks(acc_dtype: np.dtype) -> Callable[[np.ndarray, tuple[int, ...]], np.ndarray]:
    """Block sums as sums of strided slices, one axis at a time (outermost first, where the
    slices are contiguous planes): much faster than a multi-axis ``add.reduce`` with a cast."""
    def reduce(sub: np.ndarray, f: tuple[int, ...]) -> np.ndarray:
        if sub.flags.f_contiguous and not sub.flags.c_contiguous:  # [x, y, z] reads: no copy
            return reduce(sub.T, f[::-1]).T
        acc = sub
        for axis, k in enumerate(f):
            if k == 1:
                continue
            parts = [acc[(slice(None),) * axis + (slice(o, None, k),)] for o in range(k)]
            out = np.add(parts[0], parts[1], dtype=acc_dtype)
            for part in parts[2:]:
                np.add(out, part, out=out)
            acc = out
        return acc if acc is not sub else sub.astype(acc_dtype)
    return reduce


def _first_sum_dtype(dtype: np.dtype, block: int) -> np.dtype:
    """A narrow exact accumulator for the first level of small integers (uint8 blocks of up
    to 257 voxels sum in uint16), else ``sum_dtype``."""
    if dtype.kind in "ui" and dtype.itemsize <= 2:
        wider = np.dtype(f"{dtype.kind}{dtype.itemsize * 2}")
        if block * (np.iinfo(dtype).max - min(np.iinfo(dtype).min, 0)) <= np.iinfo(wider).max:
            return wider
    return sum_dtype(dtype)


def sum_dtype(dtype: np.dtype) -> np.dtype:
    if dtype.kind == "f":
        return np.dtype(np.float64)
    if dtype.kind == "u" and dtype.itemsize == 8:
        return np.dtype(np.uint64)  # exact while the sums of a block stay below 2^64
    if dtype.kind in "iub":
        return np.dtype(np.int64)
    raise ValueError(f"mean downsampling needs a numeric dtype, got {dtype}")


def _counts(size: int, block: int, origin_block: int, n: int) -> np.ndarray:
    """Per-axis in-bounds voxel counts of ``n`` output voxels whose base blocks have edge
    ``block``, starting at output index ``origin_block``, over a base axis of ``size``."""
    starts = (origin_block + np.arange(n, dtype=np.int64)) * block
    return np.minimum(starts + block, size) - starts


@dataclass
class MeanState:
    """Exact block sums of one level, for computing the next level's sums and any level's
    rounded mean.

    ``sums`` covers output voxels starting at ``origin`` (in this level's indices); the counts
    are not stored: along each axis they follow from the base ``size`` and the level's total
    factor ``scale`` (``count = prod over axes of in-bounds extent``).
    """

    sums: np.ndarray
    origin: tuple[int, ...]
    scale: tuple[int, ...]
    base_shape: tuple[int, ...]
    dtype: np.dtype

    @classmethod
    def from_base(cls, x: np.ndarray, origin: Sequence[int], base_shape: Sequence[int]) -> MeanState:
        """The base level itself (its "sums" are its values; no widened copy is made)."""
        sum_dtype(x.dtype)  # refuses non-numeric types early
        return cls(x, tuple(origin), (1,) * x.ndim, tuple(base_shape), x.dtype)

    def next(self, factor: Sequence[int]) -> MeanState:
        """The next level's sums (accumulated in a wide type: int64, uint64 or float64)."""
        first = all(s == 1 for s in self.scale)
        wide = _first_sum_dtype(self.dtype, math.prod(factor)) if first else sum_dtype(self.dtype)
        sums = _piecewise(self.sums, factor, wide, _sum_blocks(wide))
        origin = tuple(o // f for o, f in zip(self.origin, factor))
        scale = tuple(s * f for s, f in zip(self.scale, factor))
        return MeanState(sums, origin, scale, self.base_shape, self.dtype)

    def mean(self) -> np.ndarray:
        """The level's values: sums / counts, rounded half to even for integer types."""
        if all(s == 1 for s in self.scale):
            return self.sums
        count: np.ndarray | int = 1
        for axis, (size, block, o, n) in enumerate(zip(self.base_shape, self.scale, self.origin, self.sums.shape)):
            c = _counts(size, block, o, n)
            if (c == block).all():  # no partial block along this axis
                count = count * block
                continue
            shape = [1] * self.sums.ndim
            shape[axis] = n
            count = count * c.reshape(shape)
        if self.dtype.kind == "f":
            return (self.sums / count).astype(self.dtype)
        if self.sums.dtype.itemsize < 8 or (self.sums.size and int(np.abs(self.sums).max()) < 2**52):
            # exact: the quotient of integers below 2^52 is correctly rounded, so ties stay
            # exact halves and rint rounds them to even
            return np.rint(self.sums / count).astype(self.dtype)
        count_arr = np.asarray(count, dtype=self.sums.dtype)
        q = self.sums // count_arr
        r = self.sums - q * count_arr
        twice = r * 2
        q += (twice > count_arr) | ((twice == count_arr) & (q % 2 == 1))
        if self.dtype.kind == "b":
            return q.astype(bool)
        return q.astype(self.dtype)
