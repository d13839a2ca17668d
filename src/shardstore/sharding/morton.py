"""Compressed Morton codes: the chunk ids of sharded Neuroglancer precomputed volumes.

Bit ``i`` of every dimension is interleaved in x, y, z order, but a dimension contributes bit
``i`` only while ``2**i < grid_shape[d]``: dimensions that need fewer bits drop out, so no output
bit is wasted (``shared/specs/precomputed.md`` section 5.1).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["compressed_morton", "compressed_morton_bits"]


def compressed_morton_bits(grid_shape: Sequence[int]) -> int:
    """How many bits the codes of a grid of this shape use."""
    return sum(max(int(g) - 1, 0).bit_length() for g in grid_shape)


def compressed_morton(coords: Sequence[int], grid_shape: Sequence[int]) -> int:
    """The compressed Morton code of chunk ``coords`` in a grid of ``grid_shape`` chunks.

    >>> compressed_morton((3, 5, 1), (5, 9, 3))
    143
    """
    if len(coords) != len(grid_shape):
        raise ValueError(f"chunk coordinates {list(coords)} do not match the grid rank {len(grid_shape)}")
    for c, g in zip(coords, grid_shape):
        if not 0 <= c < g:
            raise ValueError(f"chunk coordinates {list(coords)} are outside the grid {list(grid_shape)}")
    # bits per dimension: how many bit positions i have 2**i < g
    nbits = [max(int(g) - 1, 0).bit_length() for g in grid_shape]
    code = 0
    j = 0
    for i in range(max(nbits, default=0)):
        for c, n in zip(coords, nbits):
            if i < n:
                code |= ((int(c) >> i) & 1) << j
                j += 1
    return code
