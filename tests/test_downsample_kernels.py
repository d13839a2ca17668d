"""Downsampling kernels against a plain NumPy reference (one output voxel at a time), against
tensorstore's downsample driver (mean, min, max, stride at every level) and against tinybrain,
igneous' kernel (mode over 2x2x2, ties included)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from shardstore.ops.downsample_kernels import (
    MeanState,
    downsample_shape,
    mode_of_blocks,
    reduce_level,
)

ts = pytest.importorskip("tensorstore")

SHAPES = [(8, 8, 8), (9, 7, 5), (17, 4, 3), (1, 6, 5)]
FACTORS = [(2, 2, 2), (2, 2, 1), (3, 2, 1), (1, 1, 4)]


def _block(x: np.ndarray, idx: tuple[int, ...], scale: tuple[int, ...]) -> np.ndarray:
    return x[tuple(slice(i * s, (i + 1) * s) for i, s in zip(idx, scale))]


def ref_mean(x: np.ndarray, scale: tuple[int, ...]) -> np.ndarray:
    """Mean of each whole base block (in-bounds voxels only), rounded half to even."""
    out = np.empty(downsample_shape(x.shape, scale), dtype=x.dtype)
    for idx in np.ndindex(out.shape):
        block = _block(x, idx, scale)
        if x.dtype.kind == "f":
            out[idx] = block.astype(np.float64).sum() / block.size
        else:
            out[idx] = np.rint(int(block.astype(np.int64).sum()) / block.size)  # exact for these sizes
    return out


def ref_mode(x: np.ndarray, factor: tuple[int, ...], scan: str) -> np.ndarray:
    """Majority label of each block; ties to the label met first scanning the block in
    ``scan`` order ("F": axis 0 fastest, i.e. x fastest for [x, y, z] arrays)."""
    out = np.empty(downsample_shape(x.shape, factor), dtype=x.dtype)
    for idx in np.ndindex(out.shape):
        values = list(_block(x, idx, factor).ravel(order=scan))
        counts = Counter(values)
        best = max(counts.values())
        out[idx] = next(v for v in values if counts[v] == best)
    return out


def ref_reduce(x: np.ndarray, factor: tuple[int, ...], fn) -> np.ndarray:
    out = np.empty(downsample_shape(x.shape, factor), dtype=x.dtype)
    for idx in np.ndindex(out.shape):
        out[idx] = fn(_block(x, idx, factor))
    return out


def _pyramid_mean(x: np.ndarray, factor: tuple[int, ...], levels: int) -> list[np.ndarray]:
    state = MeanState.from_base(x, (0,) * x.ndim, x.shape)
    out = []
    for _ in range(levels):
        state = state.next(factor)
        out.append(state.mean())
    return out


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("factor", FACTORS)
@pytest.mark.parametrize("dtype", ["uint8", "int16", "uint64", "float32"])
def test_mean_equals_reference_at_every_level(shape, factor, dtype) -> None:
    rng = np.random.default_rng(1)
    if dtype == "float32":  # multiples of 1/8: every sum is exact, so the reference is too
        x = (rng.integers(-800, 800, shape) / 8).astype(np.float32)
    elif dtype == "int16":
        x = rng.integers(-3000, 3000, shape).astype(np.int16)
    else:
        x = rng.integers(0, 256, shape).astype(dtype)
    levels = _pyramid_mean(x, factor, 3)
    scale = (1,) * 3
    for got in levels:
        scale = tuple(s * f for s, f in zip(scale, factor))
        want = ref_mean(x, scale)
        assert got.dtype == x.dtype
        np.testing.assert_array_equal(got, want)


def test_mean_rounds_half_to_even_like_tensorstore() -> None:
    x = np.array([1, 2, 2, 3, 5, 6, 250, 251, 3, 3, 3, 4], dtype=np.uint8)
    got = _pyramid_mean(x, (2,), 1)[0]
    np.testing.assert_array_equal(got, [2, 2, 6, 250, 3, 4])  # 1.5->2, 2.5->2, 5.5->6, 250.5->250, 3, 3.5->4
    neg = np.array([-1, -2, -3, -2], dtype=np.int8)
    np.testing.assert_array_equal(_pyramid_mean(neg, (2,), 1)[0], [-2, -2])  # -1.5->-2, -2.5->-2
    for x in (np.arange(40, dtype=np.uint8) * 7 % 255, neg):
        want = ts.downsample(ts.array(x), [2], "mean").read().result()
        np.testing.assert_array_equal(_pyramid_mean(x, (2,), 1)[0], want)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("factor", [(2, 2, 2), (2, 2, 1), (3, 1, 2)])
def test_every_level_equals_tensorstore(shape, factor) -> None:
    """tensorstore downsamples the base by factor^k directly; the one-pass cascade must agree
    exactly (mean through exact sums, min / max / stride by construction)."""
    x = np.random.default_rng(2).integers(0, 256, shape).astype(np.uint16)
    means = _pyramid_mean(x, factor, 3)
    cur = {m: x for m in ("min", "max", "stride")}
    for k in range(3):
        total = [f ** (k + 1) for f in factor]
        np.testing.assert_array_equal(means[k], ts.downsample(ts.array(x), total, "mean").read().result())
        for m, level in list(cur.items()):
            cur[m] = reduce_level(level, factor, m)
            np.testing.assert_array_equal(cur[m], ts.downsample(ts.array(x), total, m).read().result(), err_msg=m)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("factor", FACTORS)
def test_min_max_stride_equal_reference(shape, factor) -> None:
    x = np.random.default_rng(3).normal(size=shape).astype(np.float32)
    np.testing.assert_array_equal(reduce_level(x, factor, "min"), ref_reduce(x, factor, np.min))
    np.testing.assert_array_equal(reduce_level(x, factor, "max"), ref_reduce(x, factor, np.max))
    np.testing.assert_array_equal(reduce_level(x, factor, "stride"), ref_reduce(x, factor, lambda b: b.flat[0]))


@pytest.mark.parametrize("shape", SHAPES + [(16, 16, 16)])
@pytest.mark.parametrize("factor", FACTORS + [(4, 4, 4)])
@pytest.mark.parametrize("scan", ["F", "C"])
def test_mode_equals_reference_ties_included(shape, factor, scan) -> None:
    # 3 labels in a 2x2x2 block make ties common; huge uint64 labels check no narrowing
    labels = np.array([7, 2**63 + 5, 3], dtype=np.uint64)
    x = labels[np.random.default_rng(4).integers(0, 3, shape)]
    got = reduce_level(x, factor, "mode", scan=scan)
    np.testing.assert_array_equal(got, ref_mode(x, factor, scan))
    # two levels cascade: level 2 is the mode of level 1
    np.testing.assert_array_equal(reduce_level(got, factor, "mode", scan=scan), ref_mode(ref_mode(x, factor, scan), factor, scan))


def test_mode_of_blocks_rules() -> None:
    rows = np.array([
        [5, 5, 5, 5],     # uniform
        [1, 2, 2, 1],     # 2-2 tie: first met wins
        [2, 1, 1, 2],
        [9, 8, 7, 6],     # all different: the first
        [3, 4, 4, 4],     # clear majority
    ], dtype=np.uint64)
    np.testing.assert_array_equal(mode_of_blocks(rows), [5, 1, 2, 9, 4])


def test_mode_2x2x2_equals_tinybrain_igneous_default() -> None:
    tinybrain = pytest.importorskip("tinybrain")
    rng = np.random.default_rng(5)
    for shape in [(16, 16, 16), (9, 7, 5), (10, 3, 7)]:
        for n_labels in (2, 3, 8, 1000):
            x = np.asfortranarray(rng.integers(0, n_labels, shape).astype(np.uint64))
            want = tinybrain.downsample_segmentation(x, (2, 2, 2))[0]
            np.testing.assert_array_equal(reduce_level(x, (2, 2, 2), "mode", scan="F"), want)


def test_partial_edge_blocks_use_only_in_bounds_voxels() -> None:
    x = np.array([10, 20, 30, 40, 200], dtype=np.uint8)
    assert _pyramid_mean(x, (2,), 1)[0].tolist() == [15, 35, 200]  # not (200 + 0) / 2
    assert reduce_level(x, (2,), "min").tolist() == [10, 30, 200]
    assert downsample_shape((5, 4, 1), (2, 2, 2)) == (3, 2, 1)


def test_unknown_method_and_dtype() -> None:
    with pytest.raises(ValueError, match="unknown downsampling method"):
        reduce_level(np.zeros((4,)), (2,), "median")
    with pytest.raises(ValueError, match="numeric"):
        MeanState.from_base(np.zeros(4, dtype="S2"), (0,), (4,))


def test_large_block_factors_stay_vectorized() -> None:
    """4x4x4 mode over a uniform-heavy segmentation (the fast path) and mixed blocks."""
    x = np.repeat(np.arange(8, dtype=np.uint64), 8 * 32 * 32).reshape(64, 32, 32)
    x[::3, ::5, ::7] = 99
    got = reduce_level(x, (4, 4, 4), "mode")
    np.testing.assert_array_equal(got, ref_mode(x, (4, 4, 4), "C"))
    assert got[0, 0, 0] == 0 and got[-1, -1, -1] == 7
