"""Every format's entry points, as a newcomer meets them: importable modules, one calling
convention, nothing replaced unless asked, nothing left behind by a failure, and errors that
say what was looked for where and what to do instead."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import shardstore
from shardstore.errors import (
    ContainsNodeError,
    InvalidModeError,
    NodeNotFoundError,
    NodeTypeError,
    ScaleNotFoundError,
    SelectionError,
    ShardStoreError,
    UnsupportedFeatureError,
)

SPEC = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0,
        "minishard_bits": 1, "shard_bits": 1, "minishard_index_encoding": "raw", "data_encoding": "raw"}


# -- 2. importable format modules -------------------------------------------------------------

def _run_fresh(code: str) -> None:
    """Run ``code`` in a fresh interpreter of this environment (it fails the test by failing)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)


def test_format_modules_import_in_a_fresh_interpreter() -> None:
    _run_fresh("import shardstore.precomputed, shardstore.zarr3, shardstore.bcolz\n"
               "from shardstore.n5 import create, open_group\n"
               "from shardstore.precomputed import open_kv, add_scale\n"
               "import shardstore\n"
               "assert shardstore.n5.create is create and shardstore.precomputed.open_kv is open_kv\n"
               "assert shardstore.bcolz.ctable and shardstore.zarr3.create_group\n")


def test_numcodecs_is_imported_only_when_imagecodecs_cannot_do_the_blosc_work() -> None:
    """numcodecs (its registry reads every installed package's entry points: ~60 ms and
    ~5 MiB of RSS) is not loaded by ``import shardstore``, nor by blosc arrays of the
    compressors every c-blosc has (imagecodecs' c-blosc does their work); only to ask
    whether this c-blosc has snappy."""
    _run_fresh("import sys, numpy as np, shardstore\n"
               "from shardstore.codecs.blosc import BloscCodec\n"
               "from shardstore.errors import UnsupportedFeatureError\n"
               "b = shardstore.zarr3.create('memory://', shape=(64,), dtype='u2', chunks=(16,),\n"
               "    codecs=[{'name': 'bytes', 'configuration': {'endian': 'little'}}, {'name': 'blosc', 'configuration':\n"
               "    {'cname': 'lz4', 'clevel': 5, 'shuffle': 'shuffle', 'typesize': 2, 'blocksize': 0}}])\n"
               "b[...] = np.arange(64)\n"
               "assert (b[...] == np.arange(64)).all()\n"
               "assert 'numcodecs' not in sys.modules, 'loaded'\n"
               "try:\n"
               "    BloscCodec('snappy')\n"
               "except UnsupportedFeatureError:\n"
               "    pass\n"
               "assert 'numcodecs' in sys.modules, 'not asked about snappy'\n")


@pytest.mark.parametrize("name", ["zarr3", "n5", "precomputed", "bcolz"])
def test_format_module_exports_the_format_package_api(name: str) -> None:
    short = importlib.import_module(f"shardstore.{name}")
    full = importlib.import_module(f"shardstore.formats.{name}")
    assert short.__all__ == full.__all__
    for attr in full.__all__:
        assert getattr(short, attr) is getattr(full, attr)


# -- 3. nothing is replaced unless asked ------------------------------------------------------

def _zarr3(path: Path, **kw):  # type: ignore[no-untyped-def]
    return shardstore.zarr3.create(path, shape=(4,), dtype="u1", chunks=(2,), **kw)


def _n5(path: Path, **kw):  # type: ignore[no-untyped-def]
    return shardstore.n5.create(path, path="ds", shape=(4,), dtype="u1", block_size=(2,), **kw)


def _precomputed(path: Path, **kw):  # type: ignore[no-untyped-def]
    return shardstore.precomputed.create(path, data_type="uint8", scales=[{"size": [4, 4, 4]}], **kw)


def _kv(path: Path, **kw):  # type: ignore[no-untyped-def]
    mode = kw.pop("mode", "w-")
    kv = shardstore.precomputed.open_kv(path, sharding=SPEC, mode=mode)
    kv[1] = b"x"
    return kv


def _bcolz(path: Path, **kw):  # type: ignore[no-untyped-def]
    return shardstore.create(path, format="bcolz", data=np.arange(4), **kw)


CREATORS = {"zarr3": _zarr3, "n5": _n5, "precomputed": _precomputed, "kv": _kv, "bcolz": _bcolz}


@pytest.mark.parametrize("fmt", sorted(CREATORS))
def test_create_refuses_existing_data_unless_mode_w(fmt: str, tmp_path: Path) -> None:
    create = CREATORS[fmt]
    create(tmp_path / "x")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(ContainsNodeError, match="x"):
        create(tmp_path / "x")
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # untouched
    create(tmp_path / "x", mode="w")  # explicit: replaces


def test_bcolz_carray_and_ctable_follow_bcolz_rule(tmp_path: Path) -> None:
    ca = shardstore.bcolz.carray(np.arange(10), rootdir=tmp_path / "c")
    with pytest.raises(ContainsNodeError):
        shardstore.bcolz.carray(np.zeros(3), rootdir=tmp_path / "c")  # bcolz's default mode "a"
    np.testing.assert_array_equal(ca[:], np.arange(10))
    np.testing.assert_array_equal(shardstore.bcolz.open(tmp_path / "c", mode="r")[:], np.arange(10))
    assert len(shardstore.bcolz.carray(np.zeros(3), rootdir=tmp_path / "c", mode="w")) == 3
    shardstore.bcolz.ctable({"a": np.arange(3)}, rootdir=tmp_path / "t")
    with pytest.raises(ContainsNodeError):
        shardstore.bcolz.ctable({"a": np.arange(5)}, rootdir=tmp_path / "t")
    assert len(shardstore.bcolz.open(tmp_path / "t", mode="r")) == 3


@pytest.mark.parametrize("fmt", ["zarr3", "n5"])
def test_create_group_w_replaces_children(fmt: str, tmp_path: Path) -> None:
    mod = getattr(shardstore, fmt)
    g = mod.create_group(tmp_path / "g", attributes={"old": True}, mode="w")
    (g.create_array if fmt == "zarr3" else g.create_dataset)("old", shape=(2,), dtype="u1")
    assert "old" in list(g)
    with pytest.raises(ContainsNodeError):
        mod.create_group(tmp_path / "g", attributes={"a": 1})  # "w-" (the default) refuses
    g = mod.create_group(tmp_path / "g", attributes={"a": 1}, mode="w")
    assert g.keys() == [] and dict(g.attrs) == {"a": 1}
    assert not (tmp_path / "g" / "old").exists()


# -- 3. failed opens, creates and copies leave nothing behind ---------------------------------

OPENERS = {
    "api": lambda p, mode: shardstore.open(p, mode),
    "zarr3": lambda p, mode: shardstore.zarr3.open(p, mode),
    "zarr3 group": lambda p, mode: shardstore.zarr3.open_group(p, mode),
    "n5": lambda p, mode: shardstore.n5.open(p, mode),
    "n5 group": lambda p, mode: shardstore.n5.open_group(p, mode),
    "precomputed": lambda p, mode: shardstore.precomputed.open(p, mode),
    "bcolz": lambda p, mode: shardstore.bcolz.open(p, mode),
    "kv": lambda p, mode: shardstore.precomputed.open_kv(p, mode=mode),
}


@pytest.mark.parametrize("mode", ["r", "r+", "a"])
@pytest.mark.parametrize("which", sorted(OPENERS))
def test_failed_open_leaves_no_directory(which: str, mode: str, tmp_path: Path) -> None:
    if which in ("zarr3 group", "n5 group") and mode == "a":
        pytest.skip("open_group(mode='a') creates the group, as documented")
    target = tmp_path / "missing" / "deeper"
    with pytest.raises(ShardStoreError) as e:
        OPENERS[which](target, mode)
    assert "missing" in str(e.value) or "info" in str(e.value)
    assert not (tmp_path / "missing").exists()
    if which != "kv":  # kv: no info and no spec is a MetadataError, as before
        assert isinstance(e.value, FileNotFoundError) and isinstance(e.value, NodeNotFoundError)


@pytest.mark.parametrize("bad", [
    lambda p: shardstore.zarr3.create(p / "a" / "b", shape=(4,), dtype="u1", chunks=(2,), shards=(3,)),
    lambda p: shardstore.n5.create(p / "a" / "b", path="ds", shape=(4,), dtype="u1", block_size=(2, 2)),
    lambda p: shardstore.precomputed.create(p / "a" / "b", data_type="uint8", scales=[]),
    lambda p: shardstore.bcolz.carray(np.arange(3), rootdir=p / "a" / "b", chunklen=0),
    lambda p: shardstore.bcolz.ctable({"a": np.arange(3), "b": np.arange(4)}, rootdir=p / "a" / "b"),
], ids=["zarr3", "n5", "precomputed", "carray", "ctable"])
def test_failed_create_leaves_no_directory(bad, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises((ShardStoreError, ValueError)):
        bad(tmp_path)
    assert not (tmp_path / "a").exists()


def test_failure_never_removes_what_was_there(tmp_path: Path) -> None:
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "notes.txt").write_text("mine")
    with pytest.raises(NodeNotFoundError):
        shardstore.open(tmp_path / "keep", "r+")
    assert (tmp_path / "keep" / "notes.txt").read_text() == "mine"


# -- one calling convention -------------------------------------------------------------------

def test_n5_open_second_argument_is_the_mode(tmp_path: Path) -> None:
    shardstore.n5.create(tmp_path / "c.n5", path="ds", shape=(4,), dtype="u1").__setitem__(slice(None), 3)
    ro = shardstore.n5.open(tmp_path / "c.n5", "r", path="ds")
    assert ro.read_only and list(ro[:]) == [3] * 4
    assert isinstance(shardstore.n5.open(tmp_path / "c.n5", "r"), shardstore.n5.Group)  # not a path "r"
    rw = shardstore.n5.open(tmp_path / "c.n5", mode="r+", path="ds")
    rw[0] = 1
    with pytest.warns(DeprecationWarning, match="path='ds'"):  # the older form still works
        assert list(shardstore.n5.open(tmp_path / "c.n5", "ds")[:]) == [1, 3, 3, 3]
    with pytest.raises(InvalidModeError, match="'r', 'r\\+' or 'a'"):
        shardstore.n5.open(tmp_path / "c.n5", mode="w", path="ds")


def test_every_format_opens_path_first_mode_second(tmp_path: Path) -> None:
    _zarr3(tmp_path / "z")
    _n5(tmp_path / "n")
    _precomputed(tmp_path / "p")
    _kv(tmp_path / "k")
    _bcolz(tmp_path / "b")
    for opened in (shardstore.zarr3.open(tmp_path / "z", "r"), shardstore.n5.open(tmp_path / "n", "r", path="ds"),
                   shardstore.precomputed.open(tmp_path / "p", "r"), shardstore.precomputed.open_kv(tmp_path / "k", "r"),
                   shardstore.bcolz.open(tmp_path / "b", "r"), shardstore.open(tmp_path / "p", "r")):
        assert opened.read_only
    with pytest.raises(InvalidModeError, match="'w' or 'w-'"):
        _zarr3(tmp_path / "z", mode="a")


# -- 6. errors a newcomer understands ---------------------------------------------------------

def test_not_found_says_what_and_where(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as e:
        shardstore.open(tmp_path / "nothing-here")
    msg = str(e.value)
    assert "nothing-here" in msg and "zarr.json" in msg and "attributes.json" in msg and "info" in msg
    assert isinstance(e.value, ShardStoreError)


def test_tilde_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    a = shardstore.zarr3.create("~/t.zarr", shape=(3,), dtype="u1")
    a[:] = 5
    assert (tmp_path / "t.zarr" / "zarr.json").exists() and not Path("~").exists()
    assert list(shardstore.open("~/t.zarr")[:]) == [5, 5, 5]
    assert list(shardstore.open(Path("~/t.zarr"))[:]) == [5, 5, 5]


@pytest.mark.parametrize("fmt", ["zarr3", "n5"])
def test_indexing_a_group_points_to_names(fmt: str, tmp_path: Path) -> None:
    g = getattr(shardstore, fmt).create_group(tmp_path / "g")
    g.create_group("raw")
    for sel in (slice(0, 10), 0, Ellipsis, (slice(None), 1)):
        with pytest.raises(NodeTypeError, match=r"is a group.*g\[\"name\"\].*'raw'"):
            g[sel]
    with pytest.raises(TypeError):  # also a TypeError, as NumPy users expect
        shardstore.open(tmp_path / "g")[0:3]


def test_precomputed_scale_and_axis_mistakes(tmp_path: Path) -> None:
    v = shardstore.precomputed.create(tmp_path / "v", data_type="uint8", scales=[
        {"size": [8, 6, 4], "resolution": [4, 4, 40], "voxel_offset": [-4, 0, 2]},
        {"size": [4, 3, 4], "resolution": [8, 8, 40]}])
    for bad in (2, -3, "1_1_1"):
        with pytest.raises(ScaleNotFoundError, match=r"0 '4_4_40' \(size \[8, 6, 4\]\), 1 '8_8_40'") as e:
            shardstore.precomputed.open(tmp_path / "v", scale=bad)
        assert "[x, y, z, channel]" in str(e.value)
    with pytest.raises(ScaleNotFoundError):
        shardstore.open(tmp_path / "v", scale=9)
    assert shardstore.open(tmp_path / "v", scale="8_8_40").shape == (4, 3, 4, 1)
    assert shardstore.open(tmp_path / "v", scale=1).shape == (4, 3, 4, 1)
    with pytest.raises(UnsupportedFeatureError, match="only Neuroglancer precomputed"):
        _zarr3(tmp_path / "z")
        shardstore.open(tmp_path / "z", scale=0)
    for sel in ((0, 0, 0, 0, 0), (8, 0, 0), (0, 0, 0, 1)):
        with pytest.raises(SelectionError, match=r"\[x, y, z, channel\].*voxel_offset \[-4, 0, 2\].*scales: 0 '4_4_40'"):
            v[sel]
        with pytest.raises(IndexError):
            v[sel] = 1
    with pytest.raises(SelectionError, match=r"\[x, y, z, channel\]"):
        v.oindex[[0, 9], :, :]
    assert v.oindex[[0, 7], 0, 0, 0].shape == (2,)


def test_n5_groups_without_attributes_open(tmp_path: Path) -> None:
    shardstore.n5.create(tmp_path / "c.n5", path="a/b/ds", shape=(4,), dtype="u1")
    assert not (tmp_path / "c.n5" / "a" / "attributes.json").exists()  # as n5.create makes it
    for opened in (shardstore.open(tmp_path / "c.n5" / "a"), shardstore.open(tmp_path / "c.n5", path="a"),
                   shardstore.n5.open(tmp_path / "c.n5", path="a/b"), shardstore.n5.open_group(tmp_path / "c.n5", path="a")):
        assert isinstance(opened, shardstore.n5.Group)
    assert shardstore.open(tmp_path / "c.n5" / "a")["b"]["ds"].shape == (4,)


def test_gs_message_says_what_works() -> None:
    with pytest.raises(UnsupportedFeatureError, match=r"no gs://.*https://storage.googleapis.com/bkt/x.*s3://"):
        shardstore.open("gs://bkt/x")


def test_kv_directory_is_recognized(tmp_path: Path) -> None:
    kv = shardstore.precomputed.open_kv(tmp_path / "kv", sharding=SPEC, mode="w")
    kv.update({1: b"a", 2: b"b"})
    opened = shardstore.open(tmp_path / "kv")
    assert opened.read_only and opened[2] == b"b" and len(opened) == 2
    mesh = tmp_path / "mesh"
    mesh.mkdir()
    (mesh / "info").write_text(json.dumps({"@type": "neuroglancer_legacy_mesh", "sharding": SPEC}))
    assert len(shardstore.open(mesh)) == 0


def test_precomputed_open_second_argument_is_the_mode(tmp_path: Path) -> None:
    _precomputed(tmp_path / "p")
    assert shardstore.precomputed.open(tmp_path / "p", "r+").read_only is False
    with pytest.warns(DeprecationWarning, match="scale='1_1_1'"):  # the older open(store, scale)
        assert shardstore.precomputed.open(tmp_path / "p", "1_1_1").shape == (4, 4, 4, 1)
    with pytest.raises(InvalidModeError, match="'r', 'r\\+' or 'a', got 'w'"):
        shardstore.precomputed.open(tmp_path / "p", "w")
