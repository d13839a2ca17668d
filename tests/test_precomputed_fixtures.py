"""Every precomputed case of the shared fixtures reads back with its recorded sha256."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import shardstore
from _helpers import find_fixtures_dir


def _cases() -> list[tuple[str, str, str]]:
    root = find_fixtures_dir()
    if root is None:
        return []
    manifest = json.loads((root / "MANIFEST.json").read_text())
    return [
        (c["id"], c["path"], key)
        for c in manifest["cases"]
        if c["format"] == "precomputed"
        for key in c["arrays"]
    ]


def _sha256(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes()).hexdigest()


def _case(manifest: dict, case_id: str) -> dict:
    return next(c for c in manifest["cases"] if c["id"] == case_id)


@pytest.mark.parametrize(("case_id", "path", "key"), _cases(), ids=[f"{c}:{k}" for c, _, k in _cases()])
def test_fixture_matches_sha256(fixtures_dir: Path, manifest: dict, case_id: str, path: str, key: str) -> None:
    expected = _case(manifest, case_id)["arrays"][key]
    a = shardstore.precomputed.open(fixtures_dir / path, scale=key)
    data = np.asarray(a)
    assert list(a.shape) == expected["shape"]
    assert data.dtype == np.dtype(expected["dtype"])
    assert _sha256(data) == expected["sha256"]
    # by index too, and the .npy agrees
    b = shardstore.precomputed.open(fixtures_dir / path, scale=expected["scale_index"])
    np.testing.assert_array_equal(b[...], np.load(fixtures_dir / expected["expected_npy"]))


@pytest.mark.parametrize(("case_id", "path", "key"), _cases()[:4], ids=[c for c, _, _ in _cases()[:4]])
def test_fixture_sniffed_by_shardstore_open(fixtures_dir: Path, case_id: str, path: str, key: str) -> None:
    a = shardstore.open(fixtures_dir / path)
    assert a.shape == tuple(shardstore.precomputed.open(fixtures_dir / path).shape)


def test_region_reads_match_expected(fixtures_dir: Path, manifest: dict) -> None:
    """Reads of sub-regions (crossing chunks, steps, negative offsets) equal NumPy slicing."""
    for case_id in ("precomputed/ts_raw_uint8_multiscale_unsharded", "precomputed/ts_cseg_uint64_sharded_murmur"):
        case = _case(manifest, case_id)
        for key, expected in case["arrays"].items():
            full = np.load(fixtures_dir / expected["expected_npy"])
            a = shardstore.precomputed.open(fixtures_dir / case["path"], scale=key)
            for sel in [
                (slice(3, 30), slice(1, 17), slice(2, 9)),
                (slice(None, None, 3), 4, slice(None), 0),
                (Ellipsis, slice(-5, None), 0),
                (-1, -1, -1),
            ]:
                np.testing.assert_array_equal(a[sel], full[sel])


def test_fixture_copy_partial_write_keeps_the_rest(fixtures_dir: Path, manifest: dict, tmp_path: Path) -> None:
    """A partial write into a tensorstore-written sharded volume changes only its region."""
    case = _case(manifest, "precomputed/ts_cseg_uint64_sharded_murmur")
    dst = tmp_path / "vol"
    shutil.copytree(fixtures_dir / case["path"], dst)
    expected = case["arrays"]["4_4_40"]
    full = np.load(fixtures_dir / expected["expected_npy"])
    a = shardstore.precomputed.open(dst, scale="4_4_40", mode="r+")
    region = (slice(5, 21), slice(10, 30), slice(3, 11))
    a[region] = 2**64 - 3
    full[region] = 2**64 - 3
    np.testing.assert_array_equal(a[...], full)
    import tensorstore as ts

    t = ts.open({"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file", "path": str(dst)}, "scale_index": 0}).result()
    np.testing.assert_array_equal(np.asarray(t.read().result()), full)
