"""Property tests: sequences of appends, writes, resizes and trims, with NumPy as the oracle.

The in-memory runs check shardstore against NumPy; the on-disk runs also check that bcolz
reads the result and that the file layout is bcolz' (one file per chunk, short leftover). Both
run on each of the core's runners (blocking and async).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from _helpers import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardstore import bcolz as sbz
from shardstore.store import LocalStore, MemoryStore
from shardstore.testing import strategies as sst
from shardstore.testing.runners import RUNNERS, Runner, on_runner

DTYPES = ["i4", "f8", "u1", "bool", "S3", "i2"]

ops = sst.bcolz_steps(max_len=200, max_steps=10)


def _values(dtype: np.dtype, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype.kind == "b":
        return rng.random(n) < 0.5
    if dtype.kind == "S":
        return np.array([b"%d" % v for v in rng.integers(0, 999, n)], dtype=dtype)
    return rng.integers(0, 100, n).astype(dtype)


def _run(ca: sbz.CArray, ref: np.ndarray, steps: list, dflt) -> np.ndarray:
    dtype = ref.dtype
    for i, step in enumerate(steps):
        kind = step[0]
        if kind == "append":
            v = _values(dtype, step[1], i)
            ca.append(v)
            ref = np.concatenate([ref, v])
        elif kind == "resize":
            n = step[1]
            ca.resize(n)
            ref = np.concatenate([ref, np.full(max(0, n - len(ref)), dflt, dtype)])[:n]
        elif kind == "trim":
            k = min(step[1], len(ref))
            ca.trim(k)
            ref = ref[: len(ref) - k]
        elif kind == "write":
            sel = slice(step[1], step[2], step[3])
            n = len(range(*sel.indices(len(ref))))
            v = _values(dtype, n, i + 100)
            ca[sel] = v
            ref[sel] = v
        else:
            idx = [j for j in step[1] if j < len(ref)]
            if idx:
                v = _values(dtype, len(idx), i + 200)
                ca[np.array(idx)] = v
                ref[np.array(idx)] = v
                assert np.array_equal(ca[idx], ref[idx])
        assert len(ca) == len(ref)
        if len(ref):
            assert np.array_equal(ca[len(ref) // 3 :: 2], ref[len(ref) // 3 :: 2])
    assert np.array_equal(np.asarray(ca), ref)
    return ref


@pytest.mark.parametrize("runner", RUNNERS)
@settings(max_examples=examples(60))
@given(
    dtype=st.sampled_from(DTYPES),
    n0=st.integers(0, 120),
    chunklen=st.integers(1, 40),
    steps=ops,
)
def test_in_memory_sequences(runner: Runner, dtype: str, n0: int, chunklen: int, steps: list) -> None:
    dt = np.dtype(dtype)
    ref = _values(dt, n0, 99)
    dflt = {"b": True, "S": b"d"}.get(dt.kind, 7)
    ca = sbz.carray(ref, rootdir=on_runner(MemoryStore(), runner), chunklen=chunklen, dflt=dflt)
    _run(ca, ref.copy(), steps, np.asarray(dflt, dtype=dt)[()])


bcolz = pytest.importorskip("bcolz")


@pytest.mark.parametrize("runner", RUNNERS)
@settings(max_examples=examples(25), suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(dtype=st.sampled_from(["i4", "f8", "S3"]), n0=st.integers(0, 100), chunklen=st.integers(1, 30), steps=ops)
def test_on_disk_sequences_read_by_bcolz(runner: Runner, dtype: str, n0: int, chunklen: int, steps: list) -> None:
    dt = np.dtype(dtype)
    with tempfile.TemporaryDirectory(prefix="bcolzprop") as d:
        root = Path(d) / "c"
        ref = _values(dt, n0, 1)
        ca = sbz.carray(ref, rootdir=root if runner == "blocking" else on_runner(LocalStore(root), runner), chunklen=chunklen)
        ref = _run(ca, ref.copy(), steps, np.zeros((), dt)[()])
        b = bcolz.open(str(root), mode="a")
        assert np.array_equal(b[:], ref)
        files = sorted(p.name for p in (root / "data").iterdir())
        assert files == sorted(f"__{i}.blp" for i in range(-(-len(ref) // chunklen)))
        b.append(ref[:5])
        b.flush()
        assert np.array_equal(sbz.open(root, mode="r")[:], np.concatenate([ref, ref[:5]]))
