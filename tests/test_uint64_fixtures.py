"""Every uint64_sharded fixture (written by tensorstore) reads to its recorded sha256."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from shardstore.formats.precomputed.kv import open_kv

CASES = ["ts_kv_identity_gzipindex", "ts_kv_murmur_rawindex_gzipdata", "ts_kv_single_shard_sparse"]


def _case(manifest: dict, name: str) -> dict:
    (case,) = [c for c in manifest["cases"] if c["id"] == f"uint64_sharded/{name}"]
    return case


@pytest.fixture(params=CASES)
def case(request, manifest, fixtures_dir):
    c = _case(manifest, request.param)
    return c, fixtures_dir / c["path"]


def _check(kv, expected: dict) -> None:
    keys = [int(k) for k in expected]
    got = kv.get_many(keys)
    for k, (sha, n) in expected.items():
        v = got[int(k)]
        assert v is not None and len(v) == n and hashlib.sha256(v).hexdigest() == sha, k


def test_fixture_reads_to_sha256(case):
    c, path = case
    spec = json.loads((path / "sharding.json").read_text())
    assert spec == c["params"]["sharding"]
    expected = c["expected_values"]["values"]
    assert len(expected) == c["expected_values"]["count"]
    kv = open_kv(path, sharding=spec)
    assert kv.read_only
    _check(kv, expected)
    assert sorted(kv.keys()) == sorted(int(k) for k in expected)
    # point reads, one at a time, on a fresh handle (cold) and again (warm)
    kv2 = open_kv(path, sharding=spec)
    for k in list(expected)[:40]:
        assert hashlib.sha256(kv2[int(k)]).hexdigest() == expected[k][0]
        assert int(k) in kv2
    assert 123456789012345 not in kv2 and kv2.get(123456789012345) is None


def test_fixture_legacy_pair_layout(case, tmp_path):
    """The same shards split into the legacy <hex>.index + <hex>.data pairs read the same."""
    c, path = case
    spec = json.loads((path / "sharding.json").read_text())
    isz = 16 << spec["minishard_bits"]
    for f in path.glob("*.shard"):
        data = f.read_bytes()
        (tmp_path / (f.stem + ".index")).write_bytes(data[:isz])
        (tmp_path / (f.stem + ".data")).write_bytes(data[isz:])
    kv = open_kv(tmp_path, sharding=spec)
    _check(kv, c["expected_values"]["values"])
    assert sorted(kv.keys()) == sorted(int(k) for k in c["expected_values"]["values"])


def test_fixture_partial_update_keeps_every_key(case, tmp_path):
    c, path = case
    work = tmp_path / "copy"
    shutil.copytree(path, work)
    spec = json.loads((work / "sharding.json").read_text())
    kv = open_kv(work, sharding=spec, mode="r+")
    expected = dict(c["expected_values"]["values"])
    new = {7: b"seven", 2**64 - 2: b"", 99999: b"x" * 3000}
    kv.update(new)
    some = int(next(iter(expected)))
    del kv[some]
    expected.pop(str(some))
    _check(kv, expected)
    assert kv.get_many(list(new)) == new
    assert some not in kv
    assert sorted(kv.keys()) == sorted([*(int(k) for k in expected), *new])
