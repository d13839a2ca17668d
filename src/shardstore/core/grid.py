"""The regular chunk grid: which chunk covers which part of the array.

Pure arithmetic, no I/O. Coordinates (``coords``) are chunk indices along each dimension;
chunk ``coords`` covers ``[c * n, (c + 1) * n)`` along each dim, clipped to the array shape.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property

from ..errors import MetadataError

__all__ = ["RegularGrid"]


def _int_tuple(values: Sequence[int], what: str, *, minimum: int) -> tuple[int, ...]:
    try:
        items = list(values)
    except TypeError:
        raise MetadataError(f"grid {what} must be a sequence of integers, got {values!r}") from None
    out = []
    for v in items:
        # bools are ints to Python but never a valid extent
        if isinstance(v, bool) or not hasattr(v, "__index__"):
            raise MetadataError(f"grid {what} must contain integers, got {v!r} in {list(items)!r}")
        v = operator.index(v)
        if v < minimum:
            raise MetadataError(f"grid {what} entries must be >= {minimum}, got {v} in {list(items)!r}")
        out.append(v)
    return tuple(out)


#: more elements than any array can have (2**63 bytes over the widest dtypes, 16-byte complex
#: and the like, with room to spare)
_MAX_ELEMENTS = 2**60


def check_element_count(shape: Sequence[int], where: str) -> None:
    """MetadataError naming ``where`` when no array can have ``shape`` (a corrupt header)."""
    if math.prod(s for s in shape if s) > _MAX_ELEMENTS:
        raise MetadataError(f"{where}: shape {list(shape)} holds more than 2**60 elements")


@dataclass(frozen=True)
class RegularGrid:
    """A regular grid of ``chunk_shape`` chunks over an array of ``shape`` (rank 0 allowed)."""

    shape: tuple[int, ...]
    chunk_shape: tuple[int, ...]

    def __post_init__(self) -> None:
        shape = _int_tuple(self.shape, "shape", minimum=0)
        chunk_shape = _int_tuple(self.chunk_shape, "chunk_shape", minimum=1)
        if len(shape) != len(chunk_shape):
            raise MetadataError(
                f"grid chunk_shape {list(chunk_shape)} has rank {len(chunk_shape)} but the array "
                f"shape {list(shape)} has rank {len(shape)}"
            )
        # NumPy cannot hold more than 2**63 - 1 bytes in any array, even an empty selection's
        # output: a shape beyond that (a corrupt header) is an error here, not in a read
        check_element_count(shape, "the array")
        # normalise (lists, numpy integers) so equality and hashing behave
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "chunk_shape", chunk_shape)

    @cached_property
    def grid_shape(self) -> tuple[int, ...]:
        """Chunks per dimension: ``ceil(shape / chunk_shape)`` (0 for an empty dimension)."""
        return tuple(-(-s // n) for s, n in zip(self.shape, self.chunk_shape))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nchunks(self) -> int:
        """Number of chunks in the grid (1 for rank 0, 0 when a dimension is empty)."""
        return math.prod(self.grid_shape)

    def _check_coords(self, coords: Sequence[int]) -> None:
        if len(coords) != len(self.shape) or any(
            not 0 <= c < g for c, g in zip(coords, self.grid_shape)
        ):
            raise IndexError(f"chunk coords {list(coords)} are outside the grid {list(self.grid_shape)}")

    def chunk_region(self, coords: Sequence[int]) -> tuple[slice, ...]:
        """The array region chunk ``coords`` covers, clipped to the array shape."""
        self._check_coords(coords)
        return tuple(
            slice(c * n, min((c + 1) * n, s)) for c, n, s in zip(coords, self.chunk_shape, self.shape)
        )

    def chunk_is_edge(self, coords: Sequence[int]) -> bool:
        """True when chunk ``coords`` extends past the array edge in some dimension."""
        self._check_coords(coords)
        return any((c + 1) * n > s for c, n, s in zip(coords, self.chunk_shape, self.shape))

    def all_coords(self) -> Iterator[tuple[int, ...]]:
        """Every chunk's coords, in C order."""
        return itertools.product(*(range(g) for g in self.grid_shape))

    def coords_in_region(self, region: Sequence[slice]) -> Iterator[tuple[int, ...]]:
        """Coords of the chunks intersecting ``region`` (step-1 slices, one per dim), C order.

        Slice bounds follow Python semantics (None, negative values) and are clipped to the shape.
        """
        if len(region) != len(self.shape):
            raise ValueError(f"region {region!r} has rank {len(region)}, the grid has rank {len(self.shape)}")
        ranges = []
        for sl, s, n in zip(region, self.shape, self.chunk_shape):
            if not isinstance(sl, slice):
                raise TypeError(f"region entries must be slices, got {sl!r}")
            start, stop, step = sl.indices(s)
            if step != 1:
                raise ValueError(f"region slices must have step 1, got {sl!r}")
            if stop <= start:
                return iter(())
            ranges.append(range(start // n, (stop - 1) // n + 1))
        return itertools.product(*ranges)
