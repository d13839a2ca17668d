"""N5 conformance: every ``format == "n5"`` case of the shared fixtures reads bit-exactly.

The manifest's ``sha256`` indexes arrays in N5 ``dimensions`` order; shardstore shows the NumPy
C-order view (reversed axes), which the manifest records as ``expected_reversed_axes``. Cases
are opened read-only in place; writes happen on copies in ``tmp_path``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from _helpers import assert_bitexact, fixtures_missing_reason, load_manifest, sha256_le

import shardstore
from shardstore import n5

_MANIFEST = load_manifest()


def _params() -> list:
    if _MANIFEST is None:
        return [pytest.param(None, None, None, marks=pytest.mark.skip(reason=fixtures_missing_reason()))]
    out = []
    for case in _MANIFEST["cases"]:
        if case["format"] == "n5":
            for array_path, info in case["arrays"].items():
                out.append(pytest.param(case, array_path, info, id=f"{case['id'][3:]}::{array_path}"))
    return out


@pytest.mark.parametrize("case,array_path,info", _params())
def test_fixture_reads_to_recorded_sha256(fixtures_dir: Path, case, array_path, info) -> None:
    a = n5.open(fixtures_dir / case["path"], array_path)
    rev = info["expected_reversed_axes"]
    assert a.shape == tuple(rev["shape"])
    assert a.dtype == np.dtype(rev["dtype"]).newbyteorder("=")
    data = np.asarray(a)
    assert sha256_le(data) == rev["sha256"]
    # the N5-order view of the same data matches the primary hash and the .npy
    assert sha256_le(data.transpose()) == info["sha256"]
    assert_bitexact(data.transpose(), np.load(fixtures_dir / info["expected_npy"]), case["id"])
    # user attributes are the document minus the N5 metadata keys
    reserved = {"dimensions", "blockSize", "dataType", "compression"}
    assert a.attrs.asdict() == {k: v for k, v in info["attributes"].items() if k not in reserved}


@pytest.mark.parametrize("case,array_path,info", _params())
def test_fixture_partial_reads(fixtures_dir: Path, case, array_path, info) -> None:
    a = n5.open(fixtures_dir / case["path"], array_path)
    full = np.load(fixtures_dir / info["expected_npy"]).transpose()
    sels = [tuple(slice(1, None, 2) for _ in full.shape), tuple(slice(s // 3, s - 1) for s in full.shape),
            tuple(s - 1 for s in full.shape)]
    for sel in sels:
        assert_bitexact(a[sel], full[sel], f"{case['id']} {sel}")


@pytest.mark.parametrize("case,array_path,info", _params())
def test_fixture_opens_through_shardstore_open(fixtures_dir: Path, case, array_path, info) -> None:
    a = shardstore.open(str(fixtures_dir / case["path"] / array_path))
    assert a.format == "n5"
    assert sha256_le(np.asarray(a)) == info["expected_reversed_axes"]["sha256"]


def test_group_hierarchy_fixture(fixtures_dir: Path) -> None:
    root = n5.open_group(fixtures_dir / "n5/z5_group_hierarchy")
    assert root.keys() == ["a", "vol"]
    assert root.attrs.asdict() == {"project": "shardstore"}  # "n5" (the version) is hidden
    a = root["a"]
    assert isinstance(a, n5.Group) and a.attrs["level"] == 1
    assert a.keys() == ["b"]
    img = a["b"]["img"]
    assert isinstance(img, n5.N5Array) and img.attrs["resolution"] == [4, 4]
    assert dict(root.arrays()).keys() == {"vol"}
    assert root["vol"].attrs.asdict() == {"unit": "nm"}
    assert "a/b/img" in root and "nope" not in root
    assert "img (5, 6) uint8" in root.tree()


def test_fixture_copy_rewrite_keeps_attributes(fixtures_dir: Path, tmp_path: Path) -> None:
    """Writing into a z5py dataset keeps its user attributes and the other members as written."""
    src = fixtures_dir / "n5/z5_group_hierarchy"
    dst = tmp_path / "c.n5"
    shutil.copytree(src, dst)
    before = json.loads((dst / "a/b/img/attributes.json").read_text())
    a = n5.open(dst, "a/b/img", mode="r+")
    expected = np.asarray(a).copy()
    a[1:3, 2:5] = 77
    expected[1:3, 2:5] = 77
    assert_bitexact(np.asarray(n5.open(dst, "a/b/img")), expected)
    assert json.loads((dst / "a/b/img/attributes.json").read_text()) == before
    a.attrs["note"] = "x"
    after = json.loads((dst / "a/b/img/attributes.json").read_text())
    assert after == {**before, "note": "x"}
