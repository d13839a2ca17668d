"""bcolz conformance: every bcolz case of the shared fixtures reads bit-exactly (sha256).

Fixtures are opened read-only in place; tests that write copy the case to ``tmp_path``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from _helpers import fixtures_missing_reason, load_manifest, sha256_le

import shardstore
from shardstore import bcolz

_MANIFEST = load_manifest()


def _cases(kind: str) -> list:
    if _MANIFEST is None:
        return [pytest.param(None, marks=pytest.mark.skip(reason=fixtures_missing_reason()))]
    return [
        pytest.param(c, id=c["id"].removeprefix("bcolz/"))
        for c in _MANIFEST["cases"]
        if c["format"] == "bcolz" and c["params"]["kind"].startswith(kind)
    ]


@pytest.mark.parametrize("case", _cases("carray"))
def test_carray_fixture_sha256(fixtures_dir: Path, case: dict) -> None:
    info = case["arrays"][""]
    ca = bcolz.open(fixtures_dir / case["path"], mode="r")
    assert isinstance(ca, bcolz.CArray)
    data = np.asarray(ca)
    assert list(data.shape) == info["shape"]
    assert data.dtype == np.dtype(info["dtype"])
    assert sha256_le(data) == info["sha256"]
    assert np.array_equal(data, np.load(fixtures_dir / info["expected_npy"]))
    assert ca.chunklen == info["meta_storage"]["chunklen"]
    assert ca.cparams == info["meta_storage"]["cparams"]
    assert ca.attrs.asdict() == case["attrs"]
    # row-wise and sliced reads agree with the whole read
    if len(ca):
        assert np.array_equal(ca[1::3], data[1::3])
        assert np.array_equal(ca[[0, len(ca) - 1]], data[[0, len(ca) - 1]])
        assert np.array_equal(np.concatenate(list(ca.iterblocks(7))), data)


@pytest.mark.parametrize("case", _cases("carray"))
def test_carray_fixture_metadata_roundtrip(fixtures_dir: Path, case: dict) -> None:
    """What we would write for the parsed meta documents is byte-identical to bcolz'."""
    from shardstore.formats.bcolz.metadata import parse_sizes, parse_storage

    root = fixtures_dir / case["path"]
    for name, parse in (("sizes", parse_sizes), ("storage", parse_storage)):
        raw = (root / "meta" / name).read_bytes()
        assert parse(raw).to_bytes() == raw


@pytest.mark.parametrize("case", _cases("ctable"))
def test_ctable_fixture(fixtures_dir: Path, case: dict) -> None:
    t = bcolz.open(fixtures_dir / case["path"], mode="r")
    assert isinstance(t, bcolz.CTable)
    assert t.names == json.loads((fixtures_dir / case["path"] / "__rootdirs__").read_text())["names"]
    assert t.attrs.asdict() == case["attrs"]
    for name, info in case["arrays"].items():
        col = np.asarray(t[name])
        assert sha256_le(col) == info["sha256"], name
    whole = t[:]
    expected = np.load(fixtures_dir / case["structured"]["expected_npy"])
    assert whole.dtype.names == expected.dtype.names
    assert hashlib.sha256(np.ascontiguousarray(whole).tobytes()).hexdigest() == case["structured"]["sha256"]
    assert np.array_equal(t[10:20], expected[10:20])
    assert t[5] == expected[5]
    assert len(t) == len(expected)


def test_fixtures_via_shardstore_open(fixtures_dir: Path) -> None:
    """The format is sniffed from meta/sizes (carray) and __rootdirs__ (ctable)."""
    ca = shardstore.open(fixtures_dir / "bcolz" / "carray_int32_lz4_shuffle_leftover")
    assert isinstance(ca, bcolz.CArray) and ca.format == "bcolz" and ca.read_only
    t = shardstore.open(fixtures_dir / "bcolz" / "ctable_3cols")
    assert isinstance(t, bcolz.CTable) and len(t) == 1000


def test_fixture_copy_append(fixtures_dir: Path, tmp_path: Path) -> None:
    """Appending to a bcolz-written carray rewrites its leftover and keeps the layout."""
    src = fixtures_dir / "bcolz" / "carray_append_mode_a"
    shutil.copytree(src, tmp_path / "c")
    for p in (tmp_path / "c").rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    (tmp_path / "c").chmod(0o755)
    expected = np.load(fixtures_dir / "_expected" / "bcolz" / "carray_append_mode_a.npy")
    ca = bcolz.open(tmp_path / "c", mode="a")
    ca.append(np.arange(300, dtype="u4"))
    ca.flush()  # (as in bcolz: the new leftover and meta/sizes)
    ref = np.concatenate([expected, np.arange(300, dtype="u4")])
    assert np.array_equal(bcolz.open(tmp_path / "c", mode="r")[:], ref)
    n = len(ref)
    files = sorted((tmp_path / "c" / "data").iterdir())
    assert len(files) == -(-n // 128)
