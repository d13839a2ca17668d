"""The bcolz user API: creation arguments, modes, iteration, registration in shardstore.open."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import shardstore
from shardstore import bcolz as sbz


def test_create_empty_then_append(tmp_path: Path) -> None:
    ca = sbz.carray(None, rootdir=tmp_path / "c", dtype="i4", expectedlen=10**6)
    assert len(ca) == 0 and (tmp_path / "c" / "data").is_dir() and ca.chunklen == 65536
    ca.append(np.arange(100_000, dtype="i4"))
    assert ca.nchunks == 1 and ca.nleftover == 100_000 - 65536
    ca.append(7)  # a single element
    assert ca[-1] == 7 and len(ca) == 100_001
    ca.trim(100_001)
    assert len(ca) == 0 and (tmp_path / "c" / "data").is_dir()  # bcolz needs data/ to open


def test_dflt_and_properties(tmp_path: Path) -> None:
    ca = sbz.carray(np.arange(5, dtype="f4"), rootdir=tmp_path / "c", chunklen=4, dflt=-1.5, cparams={"cname": "zstd", "clevel": 3})
    ca.resize(10)
    assert ca[5:].tolist() == [-1.5] * 5
    assert ca.cparams == {"clevel": 3, "shuffle": 1, "cname": "zstd", "quantize": 0}
    assert ca.dflt == np.float32(-1.5) and ca.expectedlen == 5
    ca.trim(-2)  # a negative trim grows
    assert len(ca) == 12
    ca.flush()
    assert ca.cbytes > 0 and "chunklen=4" in repr(ca)


def test_iteration(tmp_path: Path) -> None:
    data = np.arange(1000, dtype="i8")
    ca = sbz.carray(data, rootdir=tmp_path / "c", chunklen=128)
    blocks = list(ca.iterblocks())
    assert [len(b) for b in blocks] == [128] * 7 + [104]
    assert np.array_equal(np.concatenate(list(sbz.iterblocks(ca, 300, 10, 950))), data[10:950])
    assert list(ca)[:3] == [0, 1, 2]
    t = sbz.ctable({"a": data, "b": data * 2}, rootdir=tmp_path / "t", chunklen=100)
    assert sum(len(b) for b in t.iterblocks(333)) == 1000
    assert next(iter(t)).tolist() == (0, 0)


def test_indexing(tmp_path: Path) -> None:
    data = np.arange(60, dtype="f8").reshape(20, 3)
    ca = sbz.carray(data, rootdir=tmp_path / "c", chunklen=6)
    assert np.array_equal(ca[[1, 7, 19]], data[[1, 7, 19]])
    mask = np.arange(20) % 3 == 0
    assert np.array_equal(ca[mask], data[mask])
    assert np.array_equal(ca[2:17:5, 1], data[2:17:5, 1])
    ca[mask] = -1
    data[mask] = -1
    assert np.array_equal(ca[:], data)


def test_open_modes(tmp_path: Path) -> None:
    sbz.carray(np.arange(10), rootdir=tmp_path / "c")
    assert len(sbz.open(tmp_path / "c", mode="w")) == 0  # bcolz' "w": open and empty
    assert len(sbz.open(tmp_path / "c")) == 0


def test_ctable_api(tmp_path: Path) -> None:
    ra = np.array([(1, 2.0, b"a"), (3, 4.0, b"b")], dtype=[("x", "i4"), ("y", "f8"), ("z", "S1")])
    t = sbz.ctable(ra, rootdir=tmp_path / "t")
    assert t.names == ["x", "y", "z"] and len(t) == 2 and t.dtype == ra.dtype
    t.append(ra)
    t.append(np.array((5, 6.0, b"c"), dtype=ra.dtype)[()])  # one record
    t.append([[7], [8.0], [b"d"]])
    assert t["x"][:].tolist() == [1, 3, 1, 3, 5, 7]
    assert t[[0, 5]].tolist() == [(1, 2.0, b"a"), (7, 8.0, b"d")]
    t[0] = (9, 9.0, b"q")
    assert t[0].tolist() == (9, 9.0, b"q")
    t.attrs["k"] = 1
    t.resize(8)
    assert t[7].tolist() == (0, 0.0, b"")
    t.delcol(pos=0)
    assert t.names == ["y", "z"] and not (tmp_path / "t" / "x").exists()
    t2 = sbz.open(tmp_path / "t", mode="r")
    assert t2.attrs["k"] == 1 and len(t2) == 8 and t2.names == ["y", "z"]
    with pytest.raises(ValueError):
        t.addcol(np.arange(3), name="bad")
    with pytest.raises(Exception):
        t.addcol(np.arange(8), name="not valid")


def test_registration(tmp_path: Path) -> None:
    ca = shardstore.create(tmp_path / "c", format="bcolz", data=np.arange(10), chunklen=4)
    assert isinstance(ca, sbz.CArray)
    again = shardstore.open(tmp_path / "c", mode="a")
    assert isinstance(again, sbz.CArray) and again[3] == 3
    t = shardstore.create(tmp_path / "t", format="bcolz", columns={"a": np.arange(3)})
    assert isinstance(shardstore.open(tmp_path / "t"), sbz.CTable) and len(t) == 3
    assert "bcolz" in shardstore.__all__
