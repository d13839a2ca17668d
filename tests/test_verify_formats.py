"""``shardstore verify`` on every format: what it checked, and that it finds damage.

Per array the report says "checked against checksums (<what>)" or "decoded, content not
checksummed" (issue 18, point 5): a damaged byte in a checksummed array is always found; in
an array without checksums only damage that breaks decoding can be, and the report says so.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _integrity_data import DATASETS, damage, data_keys, read

from shardstore.cli import main
from shardstore.ops.integrity import scan


def _verify(path: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["verify", "--no-progress", path])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_verify_ok_says_what_was_checked(tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    ds = DATASETS[name]
    url = str(tmp_path / name)
    content = ds.make(url, None)
    code, out, err = _verify(url, capsys)
    assert code == 0, err
    assert "verify: OK" in out
    node_lines = [line for line in out.splitlines() if line.startswith("  ") and "unit(s)" in line]
    assert len(node_lines) == len(content)  # one line per array / key-value store
    for line in node_lines:
        if ds.checks is None:
            assert "decoded, content not checksummed" in line
        else:
            assert "checked against checksums" in line and ds.checks in line
    report = scan(url)
    assert sorted(n.name for n in report.nodes) == sorted(content)
    assert all(n.units > 0 for n in report.nodes)


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_verify_finds_a_truncated_unit(tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    url = str(tmp_path / name)
    DATASETS[name].make(url, None)
    keys = data_keys(url)
    key = keys[len(keys) // 2]
    damage(url, key, "truncate")
    code, _out, err = _verify(url, capsys)
    assert code == 1
    assert "problem(s) found" in err
    # the key named is the damaged file's (for a shard, the shard or one inner chunk of it)
    leaf = key.rsplit("/", 1)[-1]
    assert leaf in err or key in err or str(tmp_path) in err, err


@pytest.mark.parametrize("name", sorted(n for n, d in DATASETS.items() if d.checks))
def test_checksums_catch_a_flipped_byte(tmp_path: Path, name: str) -> None:
    url = str(tmp_path / name)
    DATASETS[name].make(url, None)
    keys = data_keys(url)
    for key in keys[:3]:
        damage(url, key, "flip")
    report = scan(url)
    assert report.problems, f"a flipped byte in {keys[:3]} went unnoticed"


def test_unchecked_damage_is_reported_as_unchecked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 18's case: zstd without a checksum, a byte damaged inside an incompressible
    chunk (a raw zstd block): the data is wrong, decoding succeeds, and verify says only that
    the content was decoded, not that it is intact."""
    url = str(tmp_path / "plain.zarr")
    before = DATASETS["zarr3-sharded-zstd"].make(url, None)[""]
    damage(url, data_keys(url)[0], "flip")
    after = read(url)[""]
    assert not np.array_equal(before, after)  # silently wrong
    code, out, _ = _verify(url, capsys)
    assert code == 0
    assert "decoded, content not checksummed" in out and "1 of 1 only decoded" in out


def test_ctable_and_kv_do_not_crash_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("bcolz-ctable", "kv"):
        url = str(tmp_path / name)
        DATASETS[name].make(url, None)
        code, out, err = _verify(url, capsys)
        assert code == 0, err
        assert ("(bcolz)" if name == "bcolz-ctable" else "(uint64 kv)") in out
