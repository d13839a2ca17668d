"""Property tests for Zarr v3 arrays with NumPy as the oracle.

Random arrays (rank 1..3, dims 0..20, random chunk and optional shard shapes, every core dtype,
random codec chains, index at start or end, random fill values) go through random sequences of
writes (basic selections with steps incl. negative, Ellipsis, ints; orthogonal int/bool arrays
through ``a.oindex``), reads, resizes and reopens. After every step the array must equal a NumPy
model: bitwise for every dtype, except that any NaN equals any NaN.

Runs over ``MemoryStore`` (most examples) and a few examples over ``LocalStore`` / plain paths,
each on both of the core's runners (blocking and async, ``shardstore.testing.runners``).
The strategies are ``shardstore.testing.strategies``; the default run is derandomized, the slow
run (``-m slow``) draws ten times as many fresh examples (Hypothesis profiles, tests/conftest.py).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from _helpers import examples
from hypothesis import event, given, note, settings
from hypothesis import strategies as st

import shardstore
from shardstore.testing import strategies as sst
from shardstore.testing.runners import RUNNERS, Runner, on_runner

pytestmark = pytest.mark.timeout(300)

# the profile (tests/conftest.py) sets derandomize, database, deadline and health checks
# (per runner: each example budget runs once on each of the two runners)
MEMORY_SETTINGS = settings(max_examples=examples(120))
LOCAL_SETTINGS = settings(max_examples=examples(15))

MAX_OPS = 7


# == comparison =============================================================================
def _float_view(a: np.ndarray) -> np.ndarray:
    """Floats as themselves; complex as (..., 2) floats."""
    a = np.ascontiguousarray(a)
    if a.dtype.kind == "c":
        return a.view(np.dtype(f"f{a.dtype.itemsize // 2}")).reshape(a.shape + (2,))
    return a


def assert_same(actual: Any, expected: Any, what: str = "") -> None:
    """Equal shape and dtype; bitwise-equal values, where any NaN equals any NaN."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    if expected.dtype.kind in "fc":
        a, e = _float_view(actual), _float_view(expected)
        uint = np.dtype(f"u{a.dtype.itemsize}")
        same = (a.view(uint) == e.view(uint)) | (np.isnan(a) & np.isnan(e))
        if not same.all():
            bad = np.argwhere(~same)[:5]
            raise AssertionError(
                f"{what}: {int((~same).sum())} values differ, e.g. at {bad.tolist()}: "
                f"got {a[tuple(bad[0])]!r} expected {e[tuple(bad[0])]!r}"
            )
    else:
        if not np.array_equal(actual, expected):
            bad = np.argwhere(actual != expected)[:5]
            raise AssertionError(f"{what}: values differ at {bad.tolist()}")


# == strategies (the shared ones: shardstore.testing.strategies) =============================
@dataclass
class ArraySpec:
    shape: tuple[int, ...]
    dtype: np.dtype
    chunks: tuple[int, ...]
    shards: tuple[int, ...] | None
    codecs: list[dict[str, Any]]
    index_location: str
    fill_value: Any

    def create_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = dict(
            shape=self.shape,
            dtype=self.dtype.name,
            chunks=self.chunks,
            shards=self.shards,
            codecs=self.codecs,
            fill_value=self.fill_value,
        )
        if self.shards is not None:
            kw["index_location"] = self.index_location
        return kw


@st.composite
def array_specs(draw: st.DrawFn) -> ArraySpec:
    shape = draw(sst.shapes(1, 3, 0, 20))
    rank = len(shape)
    # keep the number of chunks small enough for a fast test, even after growing to 20
    chunks = draw(sst.chunk_shapes(rank, min_side=rank, max_side=10))
    dtype = draw(sst.dtypes())
    return ArraySpec(
        shape=shape,
        dtype=dtype,
        chunks=chunks,
        shards=draw(sst.shard_shapes(chunks)),
        codecs=draw(sst.zarr3_codec_chains(dtype, rank)),
        index_location=draw(st.sampled_from(["end", "start"])),
        fill_value=draw(sst.fill_values(dtype)),
    )


def random_values(
    rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...], fill: Any, mode: str
) -> np.ndarray:
    """Random data of ``dtype``; ``mode`` 'fill' gives all fill, 'mixed' half fill."""
    if dtype.kind == "b":
        out = rng.integers(0, 2, shape).astype(bool)
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        if rng.random() < 0.5:
            out = rng.integers(int(info.min), int(info.max), shape, endpoint=True, dtype=dtype)
        else:  # small values: repeats, and equality with the fill value happens
            out = rng.integers(max(int(info.min), -3), 4, shape).astype(dtype)
    else:
        fdt = np.dtype(f"f{dtype.itemsize // 2}") if dtype.kind == "c" else dtype
        specials = np.array([np.nan, np.inf, -np.inf, 0.0, 1.0], dtype=fdt)

        def part() -> np.ndarray:
            x = np.array(rng.standard_normal(shape) * 100, dtype=fdt)
            mask = rng.random(shape) < 0.15
            x[mask] = rng.choice(specials, size=int(mask.sum()))
            return x + fdt.type(0)  # -0.0 + 0.0 == +0.0: no negative zeros

        if dtype.kind == "f":
            out = part()
        else:  # not x + 1j*y: 1j * nan puts a NaN in the real part too
            out = np.empty(shape, dtype=dtype)
            out.real, out.imag = part(), part()
    out = np.asarray(out, dtype=dtype)
    if mode == "fill":
        out = np.full(shape, fill, dtype=dtype)
    elif mode == "mixed":
        out[rng.random(shape) < 0.5] = np.asarray(fill, dtype=dtype)
    return out


def ortho_model_index(
    shape: tuple[int, ...], sel: tuple[Any, ...]
) -> tuple[tuple[Any, ...], list[int], tuple[int, ...]]:
    """(np.ix_ index, dims dropped by ints, output shape) for an orthogonal selection."""
    idx, dropped = [], []
    for d, (n, s) in enumerate(zip(shape, sel)):
        if isinstance(s, (int, np.integer)):
            idx.append(np.array([s % n], dtype=np.intp))
            dropped.append(d)
        elif isinstance(s, slice):
            idx.append(np.arange(n, dtype=np.intp)[s])
        elif s.dtype == bool:
            idx.append(np.flatnonzero(s).astype(np.intp))
        else:
            idx.append((s % n if n else s).astype(np.intp))
    full = tuple(len(i) for i in idx)
    out = tuple(k for d, k in enumerate(full) if d not in dropped)
    return np.ix_(*idx), dropped, out


# == the scenario ===========================================================================
class Scenario:
    """One array plus its NumPy model; each method does one step and checks the result."""

    def __init__(self, data: st.DataObject, target: Any, spec: ArraySpec) -> None:
        self.data = data
        self.target = target
        self.spec = spec
        self.array = shardstore.zarr3.create(target, **spec.create_kwargs())
        self.model = np.full(spec.shape, spec.fill_value, dtype=spec.dtype)
        self.check("after create")

    def draw(self, strategy: st.SearchStrategy, label: str) -> Any:
        return self.data.draw(strategy, label=label)

    def check(self, what: str) -> None:
        a = self.array
        assert tuple(a.shape) == self.model.shape, f"{what}: shape {a.shape} != {self.model.shape}"
        assert_same(a[...], self.model, f"{what}: a[...]")

    def values_for(self, shape: tuple[int, ...]) -> Any:
        seed = self.draw(st.integers(0, 2**32 - 1), "seed")
        mode = self.draw(st.sampled_from(["random", "random", "fill", "mixed", "scalar"]), "values")
        rng = np.random.default_rng(seed)
        if mode == "scalar":
            return random_values(rng, self.spec.dtype, (), self.spec.fill_value, "random")[()]
        return random_values(rng, self.spec.dtype, shape, self.spec.fill_value, mode)

    # -- steps --------------------------------------------------------------------------------
    def write_basic(self) -> None:
        sel = self.draw(sst.basic_selections(self.model.shape), "write sel")
        target_shape = np.shape(self.model[sel])
        value = self.values_for(target_shape)
        self.array[sel] = value
        self.model[sel] = value
        self.check(f"after a[{sel!r}] = ...")

    def write_ortho(self) -> None:
        sel = self.draw(sst.orthogonal_selections(self.model.shape, unique=True), "write oindex")
        ix, dropped, out_shape = ortho_model_index(self.model.shape, sel)
        value = self.values_for(out_shape)
        self.array.oindex[sel] = value
        full = tuple(len(np.ravel(i)) for i in ix)
        self.model[ix] = np.broadcast_to(np.asarray(value, dtype=self.model.dtype).reshape(
            full if np.ndim(value) else ()), full)
        self.check(f"after a.oindex[{sel!r}] = ...")

    def read_basic(self) -> None:
        sel = self.draw(sst.basic_selections(self.model.shape), "read sel")
        assert_same(self.array[sel], self.model[sel], f"a[{sel!r}]")

    def read_ortho(self) -> None:
        sel = self.draw(sst.orthogonal_selections(self.model.shape, unique=False), "read oindex")
        ix, dropped, out_shape = ortho_model_index(self.model.shape, sel)
        assert_same(self.array.oindex[sel], self.model[ix].reshape(out_shape), f"a.oindex[{sel!r}]")

    def resize(self) -> None:
        rank = self.model.ndim
        new_shape = tuple(self.draw(st.lists(st.integers(0, 20), min_size=rank, max_size=rank), "resize"))
        self.array.resize(new_shape)
        new = np.full(new_shape, self.spec.fill_value, dtype=self.spec.dtype)
        overlap = tuple(slice(0, min(a, b)) for a, b in zip(self.model.shape, new_shape))
        new[overlap] = self.model[overlap]
        self.model = new
        self.check(f"after resize to {new_shape}")

    def reopen(self, mode: str = "r+") -> None:
        self.array = shardstore.zarr3.open(self.target, mode=mode)
        a, spec = self.array, self.spec
        assert a.dtype == spec.dtype
        assert tuple(a.chunks) == spec.chunks
        assert (None if a.shards is None else tuple(a.shards)) == spec.shards
        fill = np.asarray(spec.fill_value, dtype=spec.dtype)
        assert_same(np.asarray(a.fill_value, dtype=spec.dtype), fill, "fill_value")
        self.check(f"after reopen (mode={mode})")

    def run(self, n_ops: int) -> None:
        steps = {
            "write_basic": self.write_basic,
            "write_ortho": self.write_ortho,
            "read_basic": self.read_basic,
            "read_ortho": self.read_ortho,
            "resize": self.resize,
            "reopen": self.reopen,
        }
        weights = ["write_basic"] * 3 + ["write_ortho"] * 2 + ["read_basic"] * 2 + ["read_ortho", "resize", "reopen"]
        for _ in range(n_ops):
            op = self.draw(st.sampled_from(weights), "op")
            event(f"op {op}")
            steps[op]()
        self.reopen("r")
        assert_same(np.asarray(self.array), self.model, "np.asarray(a) after reopen")


def _run(data: st.DataObject, target: Any) -> None:
    spec = data.draw(array_specs(), label="spec")
    note(f"create kwargs: {spec.create_kwargs()}")
    event("sharded" if spec.shards else "unsharded")
    event(f"dtype {spec.dtype.name}")
    Scenario(data, target, spec).run(data.draw(st.integers(1, MAX_OPS), label="n_ops"))


@pytest.mark.parametrize("runner", RUNNERS)
@MEMORY_SETTINGS
@given(data=st.data())
def test_memory_store_matches_numpy(runner: Runner, data: st.DataObject) -> None:
    _run(data, on_runner(shardstore.MemoryStore(), runner))


@pytest.mark.parametrize("runner", RUNNERS)
@LOCAL_SETTINGS
@given(data=st.data(), as_path=st.booleans())
def test_local_store_matches_numpy(runner: Runner, data: st.DataObject, as_path: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="shardstore-prop-") as d:
        root = os.path.join(d, "arr")
        if runner == "blocking" and as_path:
            _run(data, root)
        else:
            _run(data, on_runner(shardstore.LocalStore(root), runner))


# == pinned examples of the properties above ==================================================
@pytest.mark.parametrize("shards", [None, (4,)])
def test_shrink_then_grow_reads_fill(shards: tuple[int, ...] | None) -> None:
    """Data cut off by a shrink must not come back when the array grows again."""
    a = shardstore.zarr3.create(
        shardstore.MemoryStore(), shape=(10,), dtype="int32", chunks=(4,), shards=shards, fill_value=-1
    )
    a[...] = np.arange(10, dtype=np.int32)
    a.resize((5,))
    a.resize((10,))
    expected = np.array([0, 1, 2, 3, 4, -1, -1, -1, -1, -1], dtype=np.int32)
    assert_same(a[...], expected, "after shrink + grow")


@pytest.mark.parametrize("shards", [None, (8, 8)])
def test_negative_zero_is_not_the_fill_value(shards: tuple[int, ...] | None) -> None:
    """A chunk of -0.0 is not 'equal to the fill value' 0.0 bitwise: it must read back as -0.0."""
    a = shardstore.zarr3.create(
        shardstore.MemoryStore(), shape=(8, 8), dtype="float32", chunks=(4, 4), shards=shards, fill_value=0.0
    )
    a[:4, :4] = np.full((4, 4), -0.0, dtype=np.float32)
    assert np.signbit(a[:4, :4]).all()


@pytest.mark.parametrize("endian", ["little", "big"])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "complex64"])
def test_nan_payloads_round_trip(endian: str, dtype: str) -> None:
    np_dtype = np.dtype(dtype)
    fdt = np.dtype(f"u{np_dtype.itemsize // (2 if np_dtype.kind == 'c' else 1)}")
    bits = {  # quiet NaN with payload, negative quiet NaN, signalling NaN
        2: [0x7E01, 0xFE00, 0x7C01],
        4: [0x7FC00001, 0xFFC00000, 0x7F800001],
        8: [0x7FF8000000000001, 0xFFF8000000000000, 0x7FF0000000000001],
    }[fdt.itemsize]
    raw = np.array(bits * 4, dtype=fdt)[: 4 * (2 if np_dtype.kind == "c" else 1)]
    values = raw.view(np_dtype)
    a = shardstore.zarr3.create(
        shardstore.MemoryStore(), shape=values.shape, dtype=dtype, chunks=(2,), fill_value=0,
        codecs=[{"name": "bytes", "configuration": {"endian": endian}}],
    )
    a[...] = values
    got = np.ascontiguousarray(a[...])
    assert got.view(fdt).tolist() == raw.tolist()


def test_uint64_extremes_and_big_endian() -> None:
    big = np.uint64(2**64 - 1)
    a = shardstore.zarr3.create(
        shardstore.MemoryStore(), shape=(5,), dtype="uint64", chunks=(2,), shards=(4,), fill_value=int(big),
        codecs=[{"name": "bytes", "configuration": {"endian": "big"}}],
    )
    assert_same(a[...], np.full(5, big, dtype=np.uint64), "fill")
    a[1:3] = np.array([2**63, 1], dtype=np.uint64)
    assert_same(a[...], np.array([big, 2**63, 1, big, big], dtype=np.uint64), "data")
