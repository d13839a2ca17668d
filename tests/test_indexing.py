"""Property tests of the grid and the indexers, with NumPy as the oracle.

A random array is cut into full-size (padded) chunk arrays; a selection is read by scattering
``chunk[p.chunk_selection]`` into ``out[p.out_selection]`` for every projection, and written by
the reverse; both must equal what NumPy does on the whole array.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from _helpers import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardstore.core.grid import RegularGrid
from shardstore.core.indexing import ChunkProjection, basic_indexer, orthogonal_indexer
from shardstore.errors import MetadataError

SETTINGS = settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
PAD = -7  # value of the padding beyond the array edge in chunk arrays; must never be read


# -- strategies ------------------------------------------------------------------------------
@st.composite
def grids(draw: st.DrawFn) -> RegularGrid:
    rank = draw(st.integers(0, 4))
    top = {0: 0, 1: 12, 2: 9, 3: 6, 4: 4}[rank]
    shape = tuple(draw(st.lists(st.integers(0, top), min_size=rank, max_size=rank)))
    chunks = tuple(draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank)))
    return RegularGrid(shape, chunks)


def _int_item(n: int) -> st.SearchStrategy:
    ints = st.integers(-n, n - 1)
    return st.one_of(ints, ints.map(np.int64), ints.map(np.int32))


def _slice_item(n: int) -> st.SearchStrategy:
    bound = st.one_of(st.none(), st.integers(-n - 3, n + 3))
    step = st.one_of(st.none(), st.sampled_from([1, 2, 3, 5, -1, -2, -3, -5]))
    return st.builds(slice, bound, bound, step)


def _array_item(n: int) -> st.SearchStrategy:
    options = [st.just(np.zeros(0, dtype=np.int64)), st.lists(st.booleans(), min_size=n, max_size=n).map(lambda v: np.array(v, dtype=bool))]
    if n:
        values = st.lists(st.integers(-n, n - 1), min_size=0, max_size=7)
        options += [values.map(lambda v: np.array(v, dtype=np.int64)), values.filter(bool)]  # ndarray, list
    return st.one_of(options)


@st.composite
def _arrange(draw: st.DrawFn, items: list) -> object:
    """Shorten / insert an Ellipsis / unwrap a 1-tuple, as a user might write the selection."""
    rank = len(items)
    if draw(st.booleans()):
        start = draw(st.integers(0, rank))
        stop = draw(st.integers(start, rank))
        sel = tuple(items[:start]) + (Ellipsis,) + tuple(items[stop:])
    else:
        sel = tuple(items[: draw(st.integers(0, rank))])
    if len(sel) == 1 and draw(st.booleans()):
        return sel[0]
    return sel


@st.composite
def basic_cases(draw: st.DrawFn) -> tuple[RegularGrid, object]:
    grid = draw(grids())
    items = [draw(st.one_of(_slice_item(n), _int_item(n)) if n else _slice_item(n)) for n in grid.shape]
    return grid, draw(_arrange(items))


@st.composite
def orthogonal_cases(draw: st.DrawFn) -> tuple[RegularGrid, object]:
    grid = draw(grids())
    items = []
    for n in grid.shape:
        kinds = [_slice_item(n), _array_item(n)] + ([_int_item(n)] if n else [])
        items.append(draw(st.one_of(kinds)))
    return grid, draw(_arrange(items))


# -- oracle helpers --------------------------------------------------------------------------
def _expand(sel: object, rank: int) -> list:
    sel = sel if isinstance(sel, tuple) else (sel,)
    pos = [i for i, s in enumerate(sel) if s is Ellipsis]
    if pos:
        i = pos[0]
        sel = sel[:i] + (slice(None),) * (rank - len(sel) + 1) + sel[i + 1 :]
    return list(sel) + [slice(None)] * (rank - len(sel))


def _is_int(x: object) -> bool:
    return isinstance(x, (int, np.integer))


def _oindex_read(a: np.ndarray, sel: object) -> np.ndarray:
    """NumPy applied one axis at a time."""
    res, ax = a, 0
    for item in _expand(sel, a.ndim):
        if _is_int(item):
            res = np.take(res, item, axis=ax)
        else:
            if isinstance(item, list):
                item = np.array(item, dtype=np.int64)
            res = res[(slice(None),) * ax + (item,)]
            ax += 1
    return res


def _oindex_write(a: np.ndarray, sel: object, value: np.ndarray) -> None:
    arrays, kept_shape = [], []
    for item, n in zip(_expand(sel, a.ndim), a.shape):
        if _is_int(item):
            arrays.append(np.array([item % n]))
            kept_shape.append(1)
            continue
        if isinstance(item, slice):
            idx = np.arange(*item.indices(n))
        else:
            idx = np.asarray(item, dtype=bool if np.asarray(item).dtype == bool else np.int64)
            idx = np.flatnonzero(idx) if idx.dtype == bool else idx % max(n, 1)
        arrays.append(idx)
        kept_shape.append(idx.size)
    a[np.ix_(*arrays)] = value.reshape(kept_shape)


def _chunked(a: np.ndarray, grid: RegularGrid) -> dict[tuple[int, ...], np.ndarray]:
    chunks = {}
    for coords in grid.all_coords():
        chunk = np.full(grid.chunk_shape, PAD, dtype=a.dtype)
        region = grid.chunk_region(coords)
        chunk[tuple(slice(0, r.stop - r.start) for r in region)] = a[region]
        chunks[coords] = chunk
    return chunks


def _unchunk(chunks: dict, grid: RegularGrid, dtype: np.dtype) -> np.ndarray:
    a = np.empty(grid.shape, dtype=dtype)
    for coords in grid.all_coords():
        region = grid.chunk_region(coords)
        a[region] = chunks[coords][tuple(slice(0, r.stop - r.start) for r in region)]
    return a


def _inside_mask(grid: RegularGrid, coords: tuple[int, ...]) -> np.ndarray:
    mask = np.zeros(grid.chunk_shape, dtype=bool)
    mask[tuple(slice(0, r.stop - r.start) for r in grid.chunk_region(coords))] = True
    return mask


def _check_projections(grid: RegularGrid, ix, basic: bool) -> list[ChunkProjection]:
    """Structural checks; returns the projections."""
    projections = list(ix)
    coords = [p.coords for p in projections]
    assert len(set(coords)) == len(coords), "a chunk was projected twice"
    kept_rank = len(grid.shape) - len(ix.drop_axes)
    assert len(ix.shape) == kept_rank
    if math.prod(ix.shape) == 0:
        assert projections == []
    for p in projections:
        assert len(p.coords) == len(grid.shape)
        assert all(0 <= c < g for c, g in zip(p.coords, grid.grid_shape))
        assert len(p.chunk_selection) == len(grid.shape)
        if basic:
            for s in p.chunk_selection + p.out_selection:
                assert isinstance(s, (int, slice)), f"basic projection holds {type(s)}"
        # the projection touches only in-bounds elements; is_complete means it touches all
        touched = np.zeros(grid.chunk_shape, dtype=bool)
        touched[p.chunk_selection] = True
        inside = _inside_mask(grid, p.coords)
        assert not (touched & ~inside).any(), "chunk selection reaches into the padding"
        assert touched.any()
        assert p.is_complete == bool(touched[inside].all())
        _check_box(grid, ix, p, basic)
    return projections


def _indices(sel, n: int) -> list[int]:
    return [sel] if isinstance(sel, (int, np.integer)) else np.arange(n)[sel].tolist()


def _check_box(grid: RegularGrid, ix, p: ChunkProjection, basic: bool) -> None:
    """The box the indexer made for the native kernels (``p.box``: (start, step, count,
    out_start) per chunk dimension) selects what the projection selects, on both sides; of a
    basic selection only outputs written backwards and rank 0 (no kernel) go without one (an
    orthogonal one's come when no dimension has an index array left)."""
    forwards = all(not isinstance(o, np.ndarray) and (not isinstance(o, slice) or o.step in (None, 1))
                   for o in p.out_selection)
    plain = all(isinstance(s, (int, slice)) for s in p.chunk_selection)
    if p.box is None:
        assert not (basic and forwards and plain and grid.shape), f"no box for {p}"
        return
    assert len(p.box) == len(p.box_dims) == len(grid.shape)
    kept = [d for d in range(len(grid.shape)) if d not in ix.drop_axes]
    assert list(p.box_dims) == [kept.index(d) if d in kept else -1 for d in range(len(grid.shape))]
    for d, (start, step, count, out_start) in enumerate(p.box):
        assert step >= 1 and count >= 1
        assert _indices(p.chunk_selection[d], grid.chunk_shape[d]) == [start + k * step for k in range(count)]
        o = p.box_dims[d]
        if o < 0:
            assert out_start == 0 and count == 1
        else:
            assert _indices(p.out_selection[o], ix.shape[o]) == list(range(out_start, out_start + count))


def _read(projections, chunks, shape, dtype) -> np.ndarray:
    out = np.zeros(shape, dtype=dtype)
    count = np.zeros(shape, dtype=np.int64)
    for p in projections:
        out[p.out_selection] = chunks[p.coords][p.chunk_selection]
        count[p.out_selection] += 1
    assert (count == 1).all(), "output elements not covered exactly once"
    return out


def _write(projections, chunks, value) -> None:
    for p in projections:
        chunks[p.coords][p.chunk_selection] = value[p.out_selection]


def _roundtrip(grid: RegularGrid, sel: object, ix, basic: bool) -> None:
    a = np.arange(1, math.prod(grid.shape) + 1, dtype=np.int64).reshape(grid.shape)
    projections = _check_projections(grid, ix, basic)
    chunks = _chunked(a, grid)
    expected = a[sel] if basic else _oindex_read(a, sel)
    assert ix.shape == expected.shape
    np.testing.assert_array_equal(_read(projections, chunks, ix.shape, a.dtype), expected)

    value = -np.arange(1, math.prod(ix.shape) + 1, dtype=np.int64).reshape(ix.shape) * 10
    want = a.copy()
    if basic:
        want[sel] = value
    else:
        _oindex_write(want, sel, value)
    _write(projections, chunks, value)
    np.testing.assert_array_equal(_unchunk(chunks, grid, a.dtype), want)
    for coords, chunk in chunks.items():
        assert (chunk[~_inside_mask(grid, coords)] == PAD).all(), "write reached the padding"


# -- properties ------------------------------------------------------------------------------
@SETTINGS
@given(basic_cases())
def test_basic_matches_numpy(case):
    grid, sel = case
    _roundtrip(grid, sel, basic_indexer(sel, grid), basic=True)


@SETTINGS
@given(orthogonal_cases())
def test_orthogonal_matches_numpy(case):
    grid, sel = case
    _roundtrip(grid, sel, orthogonal_indexer(sel, grid), basic=False)


@SETTINGS
@given(basic_cases())
def test_orthogonal_equals_basic_on_basic_selections(case):
    grid, sel = case
    b, o = basic_indexer(sel, grid), orthogonal_indexer(sel, grid)
    assert (b.shape, b.drop_axes) == (o.shape, o.drop_axes)
    assert [(p.coords, p.is_complete) for p in b] == [(p.coords, p.is_complete) for p in o]


@settings(max_examples=examples(100), deadline=None)
@given(grids(), st.data())
def test_coords_in_region(grid, data):
    region = tuple(
        slice(data.draw(st.integers(-n - 2, n + 2) | st.none()), data.draw(st.integers(-n - 2, n + 2) | st.none()))
        for n in grid.shape
    )
    mask = np.zeros(grid.shape, dtype=bool)
    mask[region] = True
    want = [c for c in grid.all_coords() if mask[grid.chunk_region(c)].any()]
    assert list(grid.coords_in_region(region)) == want


# -- grid ------------------------------------------------------------------------------------
def test_grid_basics():
    g = RegularGrid((10, 7, 0), (3, 7, 2))
    assert g.grid_shape == (4, 1, 0) and g.nchunks == 0
    assert list(g.all_coords()) == []
    g = RegularGrid([10, np.int64(7)], (3, 7))
    assert g.shape == (10, 7) and type(g.shape[1]) is int
    assert g.grid_shape == (4, 1) and g.nchunks == 4
    assert g.chunk_region((3, 0)) == (slice(9, 10), slice(0, 7))
    assert g.chunk_is_edge((3, 0)) and not g.chunk_is_edge((2, 0))
    assert list(g.all_coords()) == [(0, 0), (1, 0), (2, 0), (3, 0)]
    assert g == RegularGrid((10, 7), (3, 7)) and hash(g) == hash(RegularGrid((10, 7), (3, 7)))
    g0 = RegularGrid((), ())
    assert g0.grid_shape == () and g0.nchunks == 1 and list(g0.all_coords()) == [()]
    assert g0.chunk_region(()) == () and not g0.chunk_is_edge(())
    with pytest.raises(IndexError, match="outside the grid"):
        g.chunk_region((4, 0))


@pytest.mark.parametrize(
    "shape, chunks, match",
    [
        ((10,), (0,), "chunk_shape entries must be >= 1"),
        ((-1,), (2,), "shape entries must be >= 0"),
        ((10, 10), (2,), "rank"),
        ((10.0,), (2,), "integers"),
        ((True,), (2,), "integers"),
        (10, (2,), "sequence"),
    ],
)
def test_grid_validation(shape, chunks, match):
    with pytest.raises(MetadataError, match=match):
        RegularGrid(shape, chunks)


# -- specific cases --------------------------------------------------------------------------
def test_rank0():
    g = RegularGrid((), ())
    for sel in ((), Ellipsis):
        for make in (basic_indexer, orthogonal_indexer):
            ix = make(sel, g)
            assert ix.shape == () and ix.drop_axes == ()
            assert list(ix) == [ChunkProjection((), (), (), True)]
    with pytest.raises(IndexError, match="too many indices"):
        basic_indexer(0, g)


def test_zero_size():
    g = RegularGrid((4, 0, 3), (2, 2, 2))
    ix = basic_indexer((slice(None), slice(None), 1), g)
    assert ix.shape == (4, 0) and list(ix) == []
    ix = basic_indexer(slice(3, 1), RegularGrid((4,), (2,)))
    assert ix.shape == (0,) and list(ix) == []
    ix = orthogonal_indexer(([], 1), RegularGrid((4, 4), (2, 2)))
    assert ix.shape == (0,) and list(ix) == []
    with pytest.raises(IndexError, match="out of bounds"):
        basic_indexer((0, 0), g)


def test_complete_flags():
    g = RegularGrid((10,), (4,))
    assert [p.is_complete for p in basic_indexer(slice(None), g)] == [True, True, True]  # edge chunk too
    assert [p.is_complete for p in basic_indexer(slice(1, None), g)] == [False, True, True]
    assert [p.is_complete for p in basic_indexer(slice(None, None, -1), g)] == [True, True, True]
    assert [p.is_complete for p in basic_indexer(slice(None, None, 2), g)] == [False, False, False]
    assert [p.is_complete for p in basic_indexer(8, g)] == [False]
    g = RegularGrid((9,), (4,))  # edge chunk holds one element
    assert [p.is_complete for p in basic_indexer(8, g)] == [True]
    assert [p.is_complete for p in basic_indexer(slice(None, None, 4), g)] == [False, False, True]
    assert [p.is_complete for p in orthogonal_indexer([3, 2, 1, 0, 0, 8], g)] == [True, True]
    assert [p.is_complete for p in orthogonal_indexer(np.arange(9) != 4, g)] == [True, False, True]


def test_whole_chunk_selections_are_full_slices():
    """A complete interior chunk read with :, ::-1 or a sorted index array selects slice(0, n, 1)."""
    g = RegularGrid((8, 8), (4, 4))
    for ix in (basic_indexer(..., g), basic_indexer((slice(None, None, -1), ...), g), orthogonal_indexer((np.arange(8), slice(None)), g)):
        for p in ix:
            assert all(isinstance(s, slice) and s.indices(4) == (0, 4, 1) for s in p.chunk_selection)


def test_orthogonal_projection_shapes():
    g = RegularGrid((6, 6, 6), (3, 3, 3))
    # one array: stays 1-D (no mesh); int dims apart from the array force a mesh
    cases = (
        ([4, 0, 5], slice(None), 1),
        (slice(None), [4, 0, 1], 1),
        (1, slice(0, 5), [5, 3, 4, 3]),  # int and array apart: NumPy would move the array dim first
        (0, [2, 0, 1, 0], slice(None, None, -2)),
        ([5, 1, 2], [0, 4, 3, 3], slice(None)),
        ([5, 1, 2], 2, np.array([1, 0, 1, 1, 1, 1], dtype=bool)),
    )
    for sel in cases:
        _roundtrip(g, sel, orthogonal_indexer(sel, g), basic=False)
    ix = orthogonal_indexer(([4, 0, 5], slice(None), slice(None)), g)
    assert all(x.ndim == 1 for p in ix for x in p.chunk_selection + p.out_selection if isinstance(x, np.ndarray))


def test_duplicates_last_write_wins():
    g = RegularGrid((5, 4), (2, 3))
    a = np.zeros((5, 4), dtype=np.int64)
    chunks = _chunked(a, g)
    sel = ([3, 1, 3, 0, 1], [2, 2, -1])
    value = np.arange(15).reshape(5, 3)
    _write(list(orthogonal_indexer(sel, g)), chunks, value)
    want = a.copy()
    want[np.ix_([3, 1, 3, 0, 1], [2, 2, 3])] = value
    np.testing.assert_array_equal(_unchunk(chunks, g, a.dtype), want)
    assert want[3, 2] == value[2, 1]  # the last occurrence of each index


def test_basic_speed():
    g = RegularGrid((512, 512, 512), (64, 64, 64))
    best = min(_timed(lambda: list(basic_indexer(slice(None), g))) for _ in range(3))
    assert best < 0.05  # typically ~2 ms; generous for a loaded machine
    assert len(list(basic_indexer(slice(None), g))) == 512


@pytest.mark.timeout(30)  # work proportional to the 10**18 elements would never finish
def test_no_work_proportional_to_array_size():
    # 10**18 elements: near the 2**60 that metadata may declare (core/grid.py)
    g = RegularGrid((10**9, 10**9), (1, 10**6))
    ix = basic_indexer((slice(None, None, 10**8), slice(-3, None)), g)
    assert ix.shape == (10, 3) and len(list(ix)) == 10
    ix = basic_indexer((slice(None, None, -(10**8)), slice(5 * 10**8, 5 * 10**8 + 3 * 10**6, 7)), g)
    assert len(list(ix)) == 10 * 3
    ix = orthogonal_indexer(([10**9 - 1, 0], [-1]), g)
    assert ix.shape == (2, 1) and len(list(ix)) == 2


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


# -- errors ----------------------------------------------------------------------------------
G2 = RegularGrid((5, 4), (2, 3))


@pytest.mark.parametrize(
    "sel, match",
    [
        ((5, 0), "index 5 is out of bounds for axis 0 with size 5"),
        ((0, -5), "index -5 is out of bounds for axis 1 with size 4"),
        ((0, 0, 0), "too many indices"),
        ((..., 0, ...), "single ellipsis"),
        ((None, 0), "newaxis"),
        (1.0, "only integers"),
        ("a", "only integers"),
        (True, "boolean scalar"),
        ([1, 2], "use .oindex"),
        (np.array([1]), "use .oindex"),
    ],
)
def test_basic_errors(sel, match):
    with pytest.raises(IndexError, match=match):
        basic_indexer(sel, G2)


@pytest.mark.parametrize(
    "sel, match",
    [
        (([5], slice(None)), "index 5 is out of bounds for axis 0"),
        ((slice(None), [0, -5]), "index -5 is out of bounds for axis 1"),
        (np.ones(4, dtype=bool), "boolean index for axis 0 has length 4"),
        ((slice(None), [True, False]), "boolean index for axis 1 has length 2"),
        ([[0, 1], [1, 2]], "must be 1-D"),
        ([[0, 1], [1]], "not a 1-D"),
        (np.array([0.5]), "integer or boolean type"),
        (np.ones((5, 4), dtype=bool), "must be 1-D"),
        ((0, 0, 0), "too many indices"),
        ((None,), "newaxis"),
        (1.5, "unsupported index"),
        ({1, 2}, "unsupported index"),
    ],
)
def test_orthogonal_errors(sel, match):
    with pytest.raises(IndexError, match=match):
        orthogonal_indexer(sel, G2)


def test_zero_step():
    for make in (basic_indexer, orthogonal_indexer):
        with pytest.raises(ValueError, match="zero"):
            make(slice(None, None, 0), G2)


def test_region_errors():
    with pytest.raises(ValueError, match="step 1"):
        list(G2.coords_in_region((slice(None, None, 2), slice(None))))
    with pytest.raises(ValueError, match="rank"):
        list(G2.coords_in_region((slice(None),)))


def test_unsigned_and_numpy_scalar_indices():
    a = np.arange(20).reshape(5, 4)
    chunks = _chunked(a, G2)
    sel = (np.array([4, 0], dtype=np.uint64), np.uint8(3))
    ix = orthogonal_indexer(sel, G2)
    np.testing.assert_array_equal(_read(list(ix), chunks, ix.shape, a.dtype), a[[4, 0], 3])
    ix = basic_indexer((np.array(2), slice(np.int64(1), None)), G2)
    np.testing.assert_array_equal(_read(list(ix), chunks, ix.shape, a.dtype), a[2, 1:])
    with pytest.raises(IndexError, match="out of bounds"):
        orthogonal_indexer(np.array([2**63], dtype=np.uint64), G2)
