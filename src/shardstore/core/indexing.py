"""Selections -> per-chunk projections. Pure NumPy arithmetic, no I/O.

An indexer turns what the user passed (``selection``) into one :class:`ChunkProjection` per
chunk the selection touches. For every projection, with plain NumPy::

    out[p.out_selection] = chunk[p.chunk_selection]      # read (chunk: full chunk_shape array)
    chunk[p.chunk_selection] = value[p.out_selection]    # write (value: shape == indexer.shape)

Each dimension is projected on its own (a list of per-chunk entries); projections are the
Cartesian product of those lists, so the work per chunk is O(rank), never O(array size).

Basic selections (ints, slices with any step, Ellipsis) project to ints and slices only.
Orthogonal selections (``oindex``: also 1-D integer / boolean arrays per dimension) may put
index arrays in a projection. NumPy places a single advanced index in place, but several
(or one separated from integer indices by a slice) would be broadcast pointwise and moved to
the front; so in that case both sides become an ``np.ix_``-style open mesh over the kept
dimensions, with integer dims left as scalars (every entry is then advanced, and the result
has exactly the kept dims, in order).

Duplicated indices in an orthogonal selection: reads repeat the element, as NumPy does. For
writes the last occurrence wins, as in NumPy: duplicates land in the same chunk, and their
original order is kept within it (stable sort), so NumPy's own assignment applies them in order.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .grid import RegularGrid

__all__ = ["ChunkProjection", "Indexer", "basic_indexer", "orthogonal_indexer"]

ChunkIndex = int | slice | np.ndarray
#: a chunk dimension's part of a box the native kernels copy: (start, step, count, out_start)
BoxPiece = tuple[int, int, int, int]
#: one chunk along one dimension: (coord, chunk index, output index or None if dropped,
#: covers every in-bounds element of the chunk along this dimension, its ``BoxPiece`` or None
#: when the kernels cannot take it: an index array, an output written backwards)
_DimEntry = tuple[int, ChunkIndex, slice | np.ndarray | None, bool, BoxPiece | None]


# (not frozen: a frozen dataclass's __init__ sets each field through object.__setattr__, which
# tripled the cost of making the dozens of projections of every read; treat it as read-only)
@dataclass(slots=True)
class ChunkProjection:
    """How one chunk contributes to a selection."""

    coords: tuple[int, ...]  # chunk grid coordinates
    chunk_selection: tuple  # indexes a full chunk array of shape grid.chunk_shape
    out_selection: tuple  # indexes the output array (shape == indexer.shape)
    is_complete: bool  # covers every in-bounds element of the chunk: no need to read it first
    #: the selection as the native kernels' box, one ``BoxPiece`` per chunk dimension, made
    #: once per dimension by the indexer (``rawread.plan_boxes``); None: work it out per chunk
    box: tuple[BoxPiece, ...] | None = field(default=None, compare=False)
    #: with ``box``: for each chunk dimension the output dimension it fills, -1 for a dropped
    #: one (one tuple shared by the projections of a selection)
    box_dims: tuple[int, ...] | None = field(default=None, compare=False)


class Indexer:
    """A selection resolved against a grid; iterate it for the chunk projections."""

    shape: tuple[int, ...]  # the output shape
    drop_axes: tuple[int, ...]  # array dims removed by integer indexing

    def __iter__(self) -> Iterator[ChunkProjection]:
        raise NotImplementedError


class _ProductIndexer(Indexer):
    """Projections as the product of independent per-dimension chunk entries."""

    def __init__(
        self,
        grid: RegularGrid,
        dims: list[list[_DimEntry]],
        shape: tuple[int, ...],
        drop_axes: tuple[int, ...],
        has_arrays: bool,
    ) -> None:
        self.grid = grid
        self.shape = shape
        self.drop_axes = drop_axes
        self._dims = dims
        self._kept = None if not drop_axes else tuple(i for i in range(len(dims)) if i not in drop_axes)
        self._has_arrays = has_arrays
        self._box_dims = _box_dims(dims, drop_axes)

    @property
    def nprojections(self) -> int:
        """How many projections iteration yields."""
        n = 1
        for entries in self._dims:
            n *= len(entries)
        return n

    def __iter__(self) -> Iterator[ChunkProjection]:
        if not self._dims:  # rank 0: the one chunk, wholly selected
            yield ChunkProjection((), (), (), True)
            return
        kept = self._kept
        box_dims = self._box_dims
        for combo in itertools.product(*self._dims):
            coords, csel, osel, complete, box = zip(*combo)
            if kept is not None:
                osel = tuple(osel[i] for i in kept)
            if self._has_arrays:
                csel, osel = self._fix_advanced(csel, osel)
            yield ChunkProjection(coords, csel, osel, all(complete), box if box_dims is not None else None, box_dims)

    def _fix_advanced(self, csel: tuple, osel: tuple) -> tuple[tuple, tuple]:
        """Turn both sides into open meshes when NumPy would otherwise index pointwise."""
        arrays = [i for i, x in enumerate(csel) if isinstance(x, np.ndarray)]
        if len(arrays) > 1:
            csel = _open_mesh(csel, self.grid.chunk_shape)
        elif arrays:
            advanced = [i for i, x in enumerate(csel) if not isinstance(x, slice)]
            if advanced[-1] - advanced[0] != len(advanced) - 1:  # ints apart from the array
                csel = _open_mesh(csel, self.grid.chunk_shape)
        if sum(isinstance(x, np.ndarray) for x in osel) > 1:
            osel = _open_mesh(osel, self.shape)
        return csel, osel


def _box_dims(dims: list[list[_DimEntry]], drop_axes: tuple[int, ...]) -> tuple[int, ...] | None:
    """The output dimension each chunk dimension fills (-1: dropped) when every entry has its
    ``BoxPiece``, for ``ChunkProjection.box_dims``; else None."""
    if not all(e[4] is not None for entries in dims for e in entries):
        return None
    out: list[int] = []
    n = 0
    for d in range(len(dims)):
        if d in drop_axes:
            out.append(-1)
        else:
            out.append(n)
            n += 1
    return tuple(out)


def _open_mesh(sel: tuple, sizes: tuple[int, ...]) -> tuple:
    """``np.ix_`` over the non-integer entries (slices become aranges); ints stay scalars."""
    k = sum(1 for x in sel if isinstance(x, (slice, np.ndarray)))
    out: list[Any] = []
    j = 0
    for x, n in zip(sel, sizes):
        if isinstance(x, slice):
            a = np.arange(*x.indices(n))
        elif isinstance(x, np.ndarray):
            a = x
        else:
            out.append(x)
            continue
        shape = [1] * k
        shape[j] = a.size
        out.append(a.reshape(shape))
        j += 1
    return tuple(out)


# -- selection parsing ---------------------------------------------------------------------
_VALID = "only integers, slices (`:`) and ellipsis (`...`) are valid indices"


def _expand(selection: Any, ndim: int) -> tuple:
    """Wrap, expand the Ellipsis and pad with full slices to one item per dimension."""
    if not isinstance(selection, tuple):
        selection = (selection,)
    ellipses = [i for i, s in enumerate(selection) if s is Ellipsis]
    if len(ellipses) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    nreal = len(selection) - len(ellipses)
    if nreal > ndim:
        raise IndexError(f"too many indices for array: array is {ndim}-dimensional, but {nreal} were indexed")
    fill = (slice(None),) * (ndim - nreal)
    if ellipses:
        i = ellipses[0]
        return selection[:i] + fill + selection[i + 1 :]
    return selection + fill


def _as_int(item: Any) -> int | None:
    """The integer an index item stands for, or None if it is not an integer index."""
    if isinstance(item, (bool, np.bool_)):
        raise IndexError(f"boolean scalar index {item!r} is not supported; {_VALID}")
    if isinstance(item, (int, np.integer)):
        return int(item)
    if isinstance(item, np.ndarray):
        if item.ndim == 0 and item.dtype.kind in "iu":
            return int(item)
        return None
    if hasattr(type(item), "__index__"):
        return operator.index(item)
    return None


def _check_item_type(item: Any, orthogonal: bool) -> None:
    if item is None:
        raise IndexError("np.newaxis / None is not supported in a selection")
    if orthogonal:
        raise IndexError(
            f"unsupported index {item!r} of type {type(item).__name__}; only integers, slices, "
            "ellipsis and 1-D integer or boolean arrays are valid orthogonal indices"
        )
    if isinstance(item, (list, tuple, np.ndarray)):
        raise IndexError(
            f"array index {item!r} is not a basic selection; use .oindex for integer or boolean arrays"
        )
    raise IndexError(f"unsupported index {item!r} of type {type(item).__name__}; {_VALID}")


def _normalize_int(i: int, n: int, dim: int) -> int:
    if not -n <= i < n:
        raise IndexError(f"index {i} is out of bounds for axis {dim} with size {n}")
    return i + n if i < 0 else i


def _as_index_array(item: Any, n: int, dim: int) -> np.ndarray:
    """A 1-D integer / boolean index as sorted-or-not, in-bounds, non-negative intp indices."""
    if isinstance(item, (list, tuple)) and len(item) == 0:
        return np.empty(0, dtype=np.intp)
    try:
        a = np.asarray(item)
    except (ValueError, TypeError) as e:
        raise IndexError(f"index for axis {dim} is not a 1-D integer or boolean array: {e}") from None
    if a.ndim != 1:
        raise IndexError(f"orthogonal index for axis {dim} must be 1-D, got a {a.ndim}-D array")
    if a.dtype == np.bool_:
        if a.size != n:
            raise IndexError(f"boolean index for axis {dim} has length {a.size}, but the axis has size {n}")
        return np.flatnonzero(a)
    if a.dtype.kind not in "iu":
        raise IndexError(f"arrays used as indices must be of integer or boolean type, got {a.dtype} for axis {dim}")
    if a.size:
        lo, hi = a.min(), a.max()
        if hi >= n or lo < -n:
            bad = hi if hi >= n else lo
            raise IndexError(f"index {bad} is out of bounds for axis {dim} with size {n}")
    a = a.astype(np.intp, copy=False)
    if a.size and lo < 0:
        a = np.where(a < 0, a + n, a)
    return a


# -- per-dimension projections -------------------------------------------------------------
def _int_entries(i: int, n: int, c: int) -> list[_DimEntry]:
    coord, local = divmod(i, c)
    return [(coord, local, None, min(c, n - coord * c) == 1, (local, 1, 1, 0))]


def _reversed_out(length: int, k0: int, k1: int) -> slice:
    """Output slice of ascending positions [k0, k1) of a selection read backwards."""
    stop = length - 1 - k1
    return slice(length - 1 - k0, stop if stop >= 0 else None, -1)


def _slice_entries(sl: slice, n: int, c: int) -> tuple[int, list[_DimEntry]]:
    """(selection length, per-chunk entries) of a slice; negative steps read the chunks in
    ascending order and write the output backwards, so chunk selections keep step > 0."""
    start, stop, step = sl.indices(n)
    length = len(range(start, stop, step))
    if length == 0:
        return 0, []
    reverse = step < 0
    if reverse:  # the same elements, ascending
        start, step = start + (length - 1) * step, -step
    last = start + (length - 1) * step
    entries: list[_DimEntry] = []
    if step >= c:  # at most one element per chunk: walk the elements, not the (sparser) chunks
        for k in range(length):
            coord, local = divmod(start + k * step, c)
            out = _reversed_out(length, k, k + 1) if reverse else slice(k, k + 1)
            piece = None if reverse else (local, 1, 1, k)
            entries.append((coord, slice(local, local + 1, 1), out, min(c, n - coord * c) == 1, piece))
        return length, entries
    # step < c: every chunk between the first and last element holds at least one element
    for coord in range(start // c, last // c + 1):
        cs = coord * c
        ce = min(cs + c, n)
        k0 = max(0, -(-(cs - start) // step))
        k1 = min(length, -(-(ce - start) // step))
        if k1 <= k0:
            continue
        lo = start + k0 * step - cs
        hi = start + (k1 - 1) * step - cs + 1
        count = k1 - k0
        chunk_step = step if count > 1 else 1
        chunk_sel = slice(lo, hi, chunk_step)
        out = _reversed_out(length, k0, k1) if reverse else slice(k0, k1)
        piece = None if reverse else (lo, chunk_step, count, k0)  # (the kernels write forwards only)
        entries.append((coord, chunk_sel, out, count == ce - cs, piece))
    return length, entries


def _maybe_slice(a: np.ndarray) -> slice | np.ndarray:
    """An increasing, evenly spaced index array as the equivalent (faster) slice."""
    if a.size == 1:
        v = int(a[0])
        return slice(v, v + 1, 1)
    d = int(a[1] - a[0])
    if d > 0 and (a.size == 2 or bool((np.diff(a) == d).all())):
        return slice(int(a[0]), int(a[-1]) + 1, d)
    return a


def _array_entries(idx: np.ndarray, n: int, c: int) -> list[_DimEntry]:
    """Per-chunk entries of an index array (any order, duplicates allowed)."""
    m = idx.size
    if m == 0:
        return []
    ids = idx // c
    if m == 1 or bool((ids[1:] >= ids[:-1]).all()):
        order = None
        sorted_ids = ids
    else:
        order = np.argsort(ids, kind="stable")  # stable: duplicates keep their order (last wins)
        sorted_ids = ids[order]
    bounds = (np.flatnonzero(sorted_ids[1:] != sorted_ids[:-1]) + 1).tolist()
    entries: list[_DimEntry] = []
    for s, e in zip([0, *bounds], [*bounds, m]):
        coord = int(sorted_ids[s])
        if order is None:
            out: slice | np.ndarray = slice(s, e)
            local = idx[s:e] - coord * c
        else:
            pos = order[s:e]
            out = _maybe_slice(pos)
            local = idx[pos] - coord * c
        extent = min(c, n - coord * c)
        complete = e - s >= extent and np.unique(local).size == extent
        lsel = _maybe_slice(local)
        piece = None  # (the kernels take slices only, written forwards)
        if type(lsel) is slice and type(out) is slice and out.step in (None, 1):
            piece = (lsel.start, lsel.step, out.stop - out.start, out.start)
        entries.append((coord, lsel, out, complete, piece))
    return entries


# -- public constructors -------------------------------------------------------------------
def _build(selection: Any, grid: RegularGrid, orthogonal: bool) -> Indexer:
    items = _expand(selection, len(grid.shape))
    dims: list[list[_DimEntry]] = []
    shape: list[int] = []
    drop: list[int] = []
    has_arrays = False
    # a selection empty in one dimension touches no chunk: don't enumerate the chunks of the
    # others (a corrupt shape like [2**40, 0] would otherwise list 2**40 / chunk entries)
    # (a plain loop and one range slice per dimension: this runs on every read)
    empty = False
    for item, n in zip(items, grid.shape):
        if type(item) is slice and not range(n)[item]:
            empty = True
            break
    for dim, (item, n, c) in enumerate(zip(items, grid.shape, grid.chunk_shape)):
        if isinstance(item, slice):
            length, entries = _slice_entries(item, n, c) if not empty else (len(range(n)[item]), [])
            shape.append(length)
            dims.append(entries)
            continue
        i = _as_int(item)
        if i is not None:
            dims.append(_int_entries(_normalize_int(i, n, dim), n, c))
            drop.append(dim)
            continue
        if not orthogonal or not isinstance(item, (list, tuple, np.ndarray)):
            _check_item_type(item, orthogonal)
        idx = _as_index_array(item, n, dim)
        entries = _array_entries(idx, n, c)
        has_arrays = has_arrays or any(isinstance(e[1], np.ndarray) or isinstance(e[2], np.ndarray) for e in entries)
        shape.append(idx.size)
        dims.append(entries)
    return _ProductIndexer(grid, dims, tuple(shape), tuple(drop), has_arrays)


def basic_indexer(selection: Any, grid: RegularGrid) -> Indexer:
    """Indexer for NumPy basic indexing: ints (negative ok), slices with any step, Ellipsis.

    A tuple shorter than the rank selects whole trailing dims. Projections hold only ints and
    slices. Raises IndexError for out-of-bounds ints, too many indices and unsupported items
    (None / np.newaxis, floats, arrays); ValueError for a zero slice step (as NumPy).
    """
    return _build(selection, grid, orthogonal=False)


def orthogonal_indexer(selection: Any, grid: RegularGrid) -> Indexer:
    """Indexer for orthogonal (outer) indexing, like zarr's ``oindex``.

    Per dimension: an int (dropped from the output), a slice, a 1-D integer array (any order,
    duplicates and negative values allowed) or a 1-D boolean array as long as the dimension.
    The result equals NumPy applied one axis at a time. With duplicates, writes keep the last
    value (as NumPy). Errors as :func:`basic_indexer`, plus IndexError for multi-dimensional,
    non-integer or wrong-length boolean arrays.
    """
    return _build(selection, grid, orthogonal=True)
