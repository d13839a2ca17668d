"""C-ordered copies of Fortran-ordered chunks, for the codecs that store C order (Zarr v3
``bytes``, N5 blocks).

A chunk cut out of a Fortran-ordered input has its first axis fastest in memory; the stored
layout wants the last axis fastest, so every element moves. NumPy's one-pass copy between the
two layouts walks one side with a stride of a row or a plane per element, a power of two for
usual chunk shapes, which maps consecutive steps to the same cache set. The route here is
the one ``precomputed_raw.xyzc_to_fortran`` takes the other way round: reverse the outer
axes by copies of whole rows (which also gathers a box of a larger array), then one
tall-to-wide 2-D transpose into the destination, converting the byte order on the way. Two
passes, each sequential on at least one side: about twice the throughput of the single
transposing copy for 64^3 chunks of 1- and 2-byte elements.
"""

from __future__ import annotations

import numpy as np

__all__ = ["copy_to_c_order", "first_axis_fastest", "rows_laid_out"]


def first_axis_fastest(a: np.ndarray) -> bool:
    """Whether ``a``'s axes lie in memory in Fortran order (strides growing from the first
    axis to the last, axes of length 1 ignored) without ``a`` being C-contiguous: a
    Fortran-ordered array or a box cut out of one, not a broadcast one."""
    if a.ndim < 2 or a.flags.c_contiguous:
        return False
    steps = [abs(s) for n, s in zip(a.shape, a.strides) if n > 1]
    # (a zero stride is a broadcast axis, not a memory order)
    return len(steps) > 1 and 0 < steps[0] and all(lo < hi for lo, hi in zip(steps, steps[1:]))


def copy_to_c_order(a: np.ndarray, out: np.ndarray) -> None:
    """``out[...] = a`` for a ``first_axis_fastest`` array ``a`` and a C-contiguous ``out``
    of the same shape (any dtype ``a`` casts to safely: the byte order is converted in the
    last pass)."""
    rows = _outer_reversed(a, None)
    out.reshape(rows.shape[-1], -1)[...] = rows.reshape(-1, rows.shape[-1]).T


def rows_laid_out(a: np.ndarray, buf: np.ndarray) -> np.ndarray:
    """The first pass of ``copy_to_c_order`` for a ``first_axis_fastest`` array ``a``, into
    ``buf`` (C-contiguous, ``a.size`` elements of ``a.dtype``): a view of ``a``'s values of
    ``a``'s shape whose copy in C order is the last pass, a transpose within ``buf``. For a
    consumer that copies anyway (the native raw N5 writer gathers each block into its file
    buffer): one pass and one buffer fewer."""
    rows = _outer_reversed(a, buf)
    return rows.transpose(rows.ndim - 1, *range(rows.ndim - 1))


def _outer_reversed(a: np.ndarray, buf: np.ndarray | None) -> np.ndarray:
    """``a.T`` with its outer axes reversed, copied by whole rows (of ``a.shape[0]`` elements,
    the last axis of ``a.T`` and its fastest), into ``buf`` or a new array."""
    b = a.T  # axes reversed, the last one fastest: the C-ordered copy of ``a`` is ``b.T``
    outer = b.ndim - 1
    src = b.transpose(*range(outer - 1, -1, -1), outer)
    if buf is None:
        return np.ascontiguousarray(src)
    rows = buf.reshape(src.shape)
    np.copyto(rows, src)
    return rows
