"""``dst[...] = src`` for chunk-sized blocks, faster when both keep their rows contiguous.

Scattering a decoded 64^3 uint8 chunk into a large result is 4,096 rows of 64 bytes, and
NumPy runs its inner copy loop once per row: the per-row overhead, not the bytes, is most of
the cost (measured 43 us per chunk). Viewing each row as one opaque ``V<row bytes>`` element
turns the copy into 64 loops of 64 row copies (24 us); the bytes are the same.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["assign"]

#: rows shorter than this gain nothing from the row view
_MIN_ROW_BYTES = 16
#: the ``V<n>`` row dtypes made so far, by row bytes: making one costs as much as a small
#: copy (a tenth of placing a cached chunk's part); a cap, since each distinct length stays
_ROWS: dict[int, np.dtype] = {}
_MAX_ROWS = 4096
_BASIC = (slice, int, np.integer)


def _basic(selection: Any) -> bool:
    """Whether ``selection`` is basic indexing (``out[selection]`` is a view, not a copy)."""
    if not isinstance(selection, tuple):
        selection = (selection,)
    for s in selection:
        if not (s.__class__ is slice or s is Ellipsis or isinstance(s, _BASIC)):
            return False
    return True


def _row(nbytes: int) -> np.dtype:
    row = _ROWS.get(nbytes)
    if row is None:
        row = np.dtype((np.void, nbytes))
        if len(_ROWS) < _MAX_ROWS:
            _ROWS[nbytes] = row
    return row


def assign(out: np.ndarray, selection: Any, src: Any) -> None:
    """``out[selection] = src`` (NumPy broadcasting and casting rules apply as usual)."""
    if isinstance(src, np.ndarray) and src.ndim >= 2 and _basic(selection):
        dst = out[selection]  # a view: basic indexing
        if isinstance(dst, np.ndarray) and dst.shape == src.shape and dst.dtype == src.dtype:
            d, s = dst, src
            if d.strides[0] == d.itemsize and s.strides[0] == s.itemsize:
                d, s = d.T, s.T  # Fortran order (precomputed): rows run along axis 0
            if (
                d.strides[-1] == d.itemsize
                and s.strides[-1] == s.itemsize
                and not d.dtype.hasobject
                and d.shape[-1] * d.itemsize >= _MIN_ROW_BYTES
                and not (d.flags.c_contiguous and s.flags.c_contiguous)  # one memcpy already
            ):
                row = _row(d.shape[-1] * d.itemsize)
                try:
                    d, s = d.view(row), s.view(row)
                except ValueError:  # a layout the row view cannot express: the plain copy
                    pass
                else:
                    d[...] = s
                    return
    out[selection] = src
