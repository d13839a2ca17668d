"""Interop both ways with bcolz itself (the ``bcolz-zipline`` package): real files, no mocks.

bcolz writes (every cparams combination, leftover or not, after appends and resizes) ->
shardstore reads exactly; shardstore writes or appends -> bcolz reads exactly and can append.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from shardstore import bcolz as sbz
from shardstore.codecs.blosc import available_compressors

bcolz = pytest.importorskip("bcolz")

CNAMES = [c for c in ("blosclz", "lz4", "lz4hc", "zlib", "zstd") if c in available_compressors() and c in bcolz.blosc_compressor_list()]


def _data(n: int, dtype: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.random(n) < 0.3
    if dt.kind == "S":
        return np.array([b"s%d" % (i % 97) for i in range(n)], dtype=dt)
    if dt.kind == "U":
        return np.array(["u%d" % (i % 89) for i in range(n)], dtype=dt)
    if dt.kind == "M":
        return (np.arange(n) * 86400 * 10**9 + 10**18).astype("M8[ns]")
    if dt.kind == "f":
        return (np.sin(np.arange(n) / 50.0) * 1000).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(max(info.min, -1000), min(info.max, 1000), n, endpoint=True).astype(dt)


def _bcolz_cparams(c: dict) -> "bcolz.cparams":
    return bcolz.cparams(clevel=c["clevel"], shuffle=c["shuffle"], cname=c["cname"])


CPARAMS = [
    {"clevel": clevel, "shuffle": shuffle, "cname": cname}
    for cname, shuffle, clevel in itertools.product(CNAMES, (0, 1, 2), (0, 5, 9))
]


@pytest.mark.parametrize("cparams", CPARAMS, ids=lambda c: f"{c['cname']}-s{c['shuffle']}-c{c['clevel']}")
def test_bcolz_writes_every_cparams(tmp_path: Path, cparams: dict) -> None:
    data = _data(1000, "i4")
    bcolz.carray(data, rootdir=str(tmp_path / "c"), chunklen=128, cparams=_bcolz_cparams(cparams), mode="w").flush()
    ca = sbz.open(tmp_path / "c", mode="r")
    assert ca.cparams == {**cparams, "quantize": 0}
    assert np.array_equal(ca[:], data)
    assert np.array_equal(ca[100:900:7], data[100:900:7])


@pytest.mark.parametrize("cparams", CPARAMS[::4], ids=lambda c: f"{c['cname']}-s{c['shuffle']}-c{c['clevel']}")
def test_shardstore_writes_every_cparams(tmp_path: Path, cparams: dict) -> None:
    data = _data(1000, "f8")
    sbz.carray(data, rootdir=tmp_path / "c", chunklen=128, cparams=cparams)
    b = bcolz.open(str(tmp_path / "c"), mode="r")
    assert b.cparams.cname == cparams["cname"] and b.cparams.clevel == cparams["clevel"]
    assert np.array_equal(b[:], data)


@pytest.mark.parametrize("dtype", ["bool", "i1", "u2", "i8", "u8", "f4", "f8", "S7", "U4", "M8[ns]"])
@pytest.mark.parametrize("n", [0, 37, 256, 1000])
def test_dtypes_both_ways(tmp_path: Path, dtype: str, n: int) -> None:
    data = _data(n, dtype)
    bcolz.carray(data, rootdir=str(tmp_path / "b"), chunklen=64, mode="w").flush()
    assert np.array_equal(sbz.open(tmp_path / "b", mode="r")[:], data)
    sbz.carray(data, rootdir=tmp_path / "s", chunklen=64)
    b = bcolz.open(str(tmp_path / "s"), mode="a")
    assert b.dtype == data.dtype and np.array_equal(b[:], data)
    # bcolz appends to what shardstore wrote; shardstore reads the result
    more = _data(100, dtype, seed=1)
    b.append(more)
    b.flush()
    assert np.array_equal(sbz.open(tmp_path / "s", mode="r")[:], np.concatenate([data, more]))


def test_shardstore_file_layout_matches_bcolz(tmp_path: Path) -> None:
    """Same files, same metadata (cbytes aside), same decoded chunks as bcolz writes."""
    data = _data(1000, "i4")
    bcolz.carray(data, rootdir=str(tmp_path / "b"), chunklen=300, mode="w").flush()
    sbz.carray(data, rootdir=tmp_path / "s", chunklen=300)
    for name in ("__attrs__", "meta/storage"):
        assert (tmp_path / "s" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    files_b = sorted(p.name for p in (tmp_path / "b" / "data").iterdir())
    files_s = sorted(p.name for p in (tmp_path / "s" / "data").iterdir())
    assert files_s == files_b == ["__0.blp", "__1.blp", "__2.blp", "__3.blp"]
    import json

    sizes_b = json.loads((tmp_path / "b" / "meta" / "sizes").read_text())
    sizes_s = json.loads((tmp_path / "s" / "meta" / "sizes").read_text())
    assert sizes_s["shape"] == sizes_b["shape"] and sizes_s["nbytes"] == sizes_b["nbytes"]
    assert sizes_s["cbytes"] > 0
    leftover = (tmp_path / "s" / "data" / "__3.blp").read_bytes()
    assert int.from_bytes(leftover[20:24], "little") == 100 * 4  # the leftover file holds 100 rows


def test_default_chunklen_matches_bcolz(tmp_path: Path) -> None:
    for n, dtype, shape in [(10, "f8", ()), (10**6, "i4", ()), (5000, "S7", ()), (1000, "f8", (3, 4))]:
        data = np.zeros((n, *shape), dtype=dtype)
        b = bcolz.carray(data, rootdir=str(tmp_path / "b"), mode="w")
        s = sbz.carray(data, rootdir=tmp_path / "s", mode="w")  # as bcolz: "a" refuses an existing rootdir
        assert s.chunklen == b.chunklen, (n, dtype, shape)
        e = sbz.carray(None, dtype=dtype, expectedlen=n * 7, rootdir=tmp_path / "e", mode="w")
        assert e.chunklen == bcolz.carray(np.zeros(0, dtype), expectedlen=n * 7).chunklen


def test_appends_and_resizes_both_ways(tmp_path: Path) -> None:
    root = str(tmp_path / "c")
    ref = _data(150, "f4")
    b = bcolz.carray(ref, rootdir=root, chunklen=64, dflt=-1.5, mode="w")
    b.flush()
    rng = np.random.default_rng(5)
    for step in range(12):
        who = "bcolz" if step % 2 else "shardstore"
        op = step % 3
        if who == "bcolz":
            b = bcolz.open(root, mode="a")
        else:
            b = sbz.open(root, mode="a")
        if op == 0:
            more = _data(int(rng.integers(1, 200)), "f4", seed=step)
            b.append(more)
            ref = np.concatenate([ref, more])
        elif op == 1:
            n = int(rng.integers(0, len(ref) + 100))
            b.resize(n)
            ref = np.concatenate([ref, np.full(max(0, n - len(ref)), -1.5, "f4")])[:n]
        else:
            k = int(rng.integers(0, len(ref) + 1))
            b[k // 2 : k] = 7.0 if who == "bcolz" else 9.0
            ref[k // 2 : k] = 7.0 if who == "bcolz" else 9.0
        b.flush()
        assert np.array_equal(bcolz.open(root, mode="r")[:], ref), (step, who, op)
        assert np.array_equal(sbz.open(root, mode="r")[:], ref), (step, who, op)


def test_multidimensional_both_ways(tmp_path: Path) -> None:
    data = np.arange(25 * 3 * 4, dtype="f8").reshape(25, 3, 4)
    sbz.carray(data, rootdir=tmp_path / "s", chunklen=6)
    b = bcolz.open(str(tmp_path / "s"), mode="a")
    assert b.shape == (25, 3, 4) and np.array_equal(b[:], data)
    b.append(data[:5])
    b.flush()
    ca = sbz.open(tmp_path / "s", mode="a")
    assert np.array_equal(ca[:], np.concatenate([data, data[:5]]))
    ca.append(data[0])  # a single row
    ca.resize(40)
    ref = np.concatenate([data, data[:5], data[:1], np.zeros((9, 3, 4))])
    assert np.array_equal(bcolz.open(str(tmp_path / "s"), mode="r")[:], ref)


def test_attrs_both_ways(tmp_path: Path) -> None:
    ca = sbz.carray(np.arange(10), rootdir=tmp_path / "c")
    ca.attrs["unit"] = "m"
    ca.attrs.update(scale=2.5, tags=["a", "b"])
    b = bcolz.open(str(tmp_path / "c"), mode="a")
    assert b.attrs.getall() == {"unit": "m", "scale": 2.5, "tags": ["a", "b"]}
    b.attrs["by"] = "bcolz"
    assert sbz.open(tmp_path / "c", mode="r").attrs["by"] == "bcolz"


def test_ctable_both_ways(tmp_path: Path) -> None:
    n = 1000
    ra = np.empty(n, dtype=[("id", "i8"), ("value", "f8"), ("tag", "S5")])
    ra["id"] = np.arange(n)
    ra["value"] = np.sin(np.arange(n))
    ra["tag"] = [b"t%d" % (i % 13) for i in range(n)]
    # bcolz -> shardstore
    bt = bcolz.ctable(ra, rootdir=str(tmp_path / "b"), chunklen=256, mode="w")
    bt.attrs["title"] = "x"
    bt.flush()
    t = sbz.open(tmp_path / "b", mode="a")
    assert t.names == ["id", "value", "tag"] and t.attrs["title"] == "x"
    assert np.array_equal(t[:], ra) and np.array_equal(t[10:20], ra[10:20])
    t.append(ra[:10])
    t.flush()
    assert np.array_equal(bcolz.open(str(tmp_path / "b"), mode="r")[:], np.concatenate([ra, ra[:10]]))
    # shardstore -> bcolz, and bcolz appends
    t = sbz.ctable(ra, rootdir=tmp_path / "s", chunklen=256)
    assert (tmp_path / "s" / "__rootdirs__").read_bytes() == b'{"names": ["id", "value", "tag"]}\n'
    t.addcol(np.arange(n, dtype="i2"), name="extra", pos=1)
    t.delcol("value")
    bt = bcolz.open(str(tmp_path / "s"), mode="a")
    assert bt.names == ["id", "extra", "tag"]
    assert np.array_equal(bt["extra"][:], np.arange(n, dtype="i2"))
    bt.append((1, 2, b"z"))
    bt.flush()
    t = sbz.open(tmp_path / "s", mode="r")
    assert len(t) == n + 1 and t[n].tolist() == (1, 2, b"z")


def test_ctable_from_dict_matches_bcolz_layout(tmp_path: Path) -> None:
    cols = {"a": np.arange(300, dtype="i4"), "b": np.linspace(0, 1, 300)}
    t = sbz.ctable(cols, rootdir=tmp_path / "s")
    assert t.dtype == np.dtype([("a", "i4"), ("b", "f8")]) and len(t) == 300
    bt = bcolz.open(str(tmp_path / "s"), mode="r")
    assert np.array_equal(bt["a"][:], cols["a"]) and np.array_equal(bt["b"][:], cols["b"])
    assert bt["a"].chunklen == bcolz.carray(cols["a"]).chunklen
