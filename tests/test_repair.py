"""Leftovers are harmless and removable (issue 22, point 2).

- Temp files of killed writes are never listed as keys nor read, in any format.
- ``shardstore repair`` removes the stale ones (untouched for ``--grace`` seconds and held
  open by no live process), never fresh or held ones; ``--dry-run`` changes nothing.
- It lists units that fail to decode with their key; ``--drop-corrupt`` removes them so that
  they read as the fill value (bcolz: rewritten as dflt rows), locally and on S3.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from _integrity_data import DATASETS, SHARDING, damage, data_keys, read

import shardstore
from shardstore._sync import sync
from shardstore.cli import main
from shardstore.errors import ShardStoreError
from shardstore.ops.integrity import find_temp_files, repair, scan
from shardstore.sharding._uint64_format import ShardingSpec, decode_minishard_index
from shardstore.store.local import LocalStore, temp_path

if TYPE_CHECKING:
    from _servers import SeaweedFS

pytest_plugins = ["_servers"]

OLD = time.time() - 3600  # an hour ago: older than the default grace period


def _plant_temps(root: Path, age_to: float | None = OLD) -> list[Path]:
    """A temp file beside every file (data and metadata) below ``root``, as a killed writer
    leaves them: garbage content under the store's own temp naming."""
    planted = []
    for directory, _, files in os.walk(root):
        for f in files:
            tmp = Path(temp_path(os.path.join(directory, f)))
            tmp.write_bytes(b"\x00garbage of a killed write" * 7)
            if age_to is not None:
                os.utime(tmp, (age_to, age_to))
            planted.append(tmp)
    return planted


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(np.array_equal(a, b))


# -- temp files are never keys --------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(DATASETS))
def test_temp_files_are_never_listed_or_read(tmp_path: Path, name: str) -> None:
    url = str(tmp_path / name)
    content = DATASETS[name].make(url, None)
    keys = data_keys(url)
    planted = _plant_temps(Path(url))
    assert planted
    store = LocalStore(url, read_only=True)

    async def listed() -> list[str]:
        return [k async for k in store.list_prefix("")]

    assert not any(k.endswith(".tmp") for k in sync(listed()))
    assert data_keys(url) == keys
    assert _same(read(url), content)  # the garbage was not read
    report = scan(url)
    assert report.problems == []
    assert sorted(t.path for t in report.temps) == sorted(map(str, planted))


def test_group_listing_ignores_temp_files(tmp_path: Path) -> None:
    url = str(tmp_path / "g")
    DATASETS["zarr3-group"].make(url, None)
    before = sorted(shardstore.open(url).keys())
    (Path(url) / ".raw.0123456789abcdef0123456789abcdef.tmp").mkdir()  # even a directory of that name
    Path(temp_path(str(Path(url) / "labels"))).write_bytes(b"{}")
    assert sorted(shardstore.open(url).keys()) == before


def test_n5_group_listing_ignores_temp_files(tmp_path: Path) -> None:
    url = str(tmp_path / "c.n5")
    DATASETS["n5-gzip"].make(url, None)
    before = sorted(shardstore.open(url).keys())
    Path(temp_path(str(Path(url) / "attributes.json"))).write_bytes(b'{"n5": "4.0.0"}')
    (Path(url) / ".arr.0123456789abcdef0123456789abcdef.tmp").mkdir()
    Path(temp_path(str(Path(url) / ".arr.0123456789abcdef0123456789abcdef.tmp" / "attributes.json"))).write_bytes(b"{}")
    assert sorted(shardstore.open(url).keys()) == before == ["arr"]


# -- which temp files repair removes --------------------------------------------------------------
def test_repair_removes_only_stale_unheld_temp_files(tmp_path: Path) -> None:
    url = str(tmp_path / "a.n5")
    DATASETS["n5-gzip"].make(url, None)
    stale = _plant_temps(Path(url))
    fresh = Path(temp_path(str(Path(url) / "arr" / "0" / "0")))
    fresh.write_bytes(b"a write in progress")
    held = Path(temp_path(str(Path(url) / "arr" / "1" / "0")))
    held.write_bytes(b"a slow writer")
    os.utime(held, (OLD, OLD))
    # a live process holds ``held`` open (as a writer holds its temp file until the rename)
    holder = subprocess.Popen([sys.executable, "-c", ("import sys, time; f = open(sys.argv[1], 'ab'); "
                               "print('open', flush=True); time.sleep(600)"), str(held)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"open\n"
        dry = repair(url, dry_run=True)
        assert not any(t.removed for t in dry.temps) and all(p.exists() for p in stale)
        report = repair(url)  # default grace: 10 minutes
        by_path = {t.path: t for t in report.temps}
        assert all(by_path[str(p)].removed and not p.exists() for p in stale)
        assert fresh.exists() and not by_path[str(fresh)].removed
        if sys.platform.startswith("linux"):
            assert by_path[str(held)].held and held.exists()
        again = repair(url, grace=0)  # the fresh one too now; the held one still stays on Linux
        assert not fresh.exists()
        assert held.exists() == sys.platform.startswith("linux")
        assert {t.path for t in again.temps if not t.removed} <= {str(held)}
    finally:
        holder.kill()
        holder.wait()
    assert {t.path for t in find_temp_files(Path(url))} <= {str(held)}
    repair(url, grace=0)
    assert find_temp_files(Path(url)) == []
    assert scan(url).problems == []


def test_repair_cli_temp_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = str(tmp_path / "z")
    DATASETS["zarr3-crc32c"].make(url, None)
    planted = _plant_temps(Path(url))
    assert main(["repair", "--no-progress", "--dry-run", url]) == 0
    out = capsys.readouterr().out
    assert f"would remove {len(planted)} temp file(s)" in out and all(p.exists() for p in planted)
    assert main(["repair", url, "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert f"removed {len(planted)} temp file(s)" in out and not any(p.exists() for p in planted)
    assert main(["repair", url, "--grace", "-1"]) == 2


# -- orphan ctable columns -------------------------------------------------------------------------
def _orphan_table(url: str, opts: dict[str, Any] | None = None) -> None:
    """A ctable whose column "b" was being added when the writer was killed: the column's
    files are complete, ``__rootdirs__`` does not list it yet."""
    shardstore.bcolz.create(url, storage_options=opts, columns=[np.arange(10)], names=["a"], mode="w").flush()
    shardstore.bcolz.create(url, path="b", storage_options=opts, data=np.arange(10) * 2, mode="w").flush()


def test_orphan_column_of_a_killed_addcol(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = str(tmp_path / "t.bcolz")
    _orphan_table(url)
    t = shardstore.bcolz.open(url, mode="r+")
    assert t.names == ["a"]
    with pytest.raises(ShardStoreError, match="'b' already exists"):  # the retry of the job fails
        t.addcol(np.arange(10) * 3, name="b")
    assert main(["verify", "--no-progress", url]) == 0
    assert "1 ctable column director(ies) not in __rootdirs__" in capsys.readouterr().out
    assert main(["repair", "--no-progress", url]) == 0  # default grace: just written, kept
    assert "kept orphan ctable column b/" in capsys.readouterr().out
    assert main(["repair", "--no-progress", "--dry-run", "--grace", "0", url]) == 0
    assert "would remove orphan ctable column b/" in capsys.readouterr().out
    assert (Path(url) / "b").is_dir()
    assert main(["repair", "--no-progress", "--grace", "0", url]) == 0
    assert "removed orphan ctable column b/" in capsys.readouterr().out
    assert not (Path(url) / "b").exists()
    t = shardstore.bcolz.open(url, mode="r+")
    t.addcol(np.arange(10) * 3, name="b")  # the retry works now
    assert np.array_equal(shardstore.bcolz.open(url)["b"][:], np.arange(10) * 3)
    assert scan(url).orphans == []


# -- units that fail to decode --------------------------------------------------------------------
def _check_dropped(before: dict[str, Any], after: dict[str, Any], fill: Any) -> None:
    """Every value is what it was or the fill value; something became the fill value."""
    changed = False
    for name, old in before.items():
        new = after[name]
        if isinstance(old, dict):  # kv: dropped keys are gone, the rest unchanged
            assert set(new) <= set(old) and all(new[k] == old[k] for k in new)
            changed |= len(new) < len(old)
        else:
            assert new.shape == old.shape
            assert ((new == old) | (new == fill)).all()
            changed |= bool((new != old).any())
    assert changed


def _drop_flow(url: str, name: str, capsys: pytest.CaptureFixture[str], opts: dict[str, Any] | None = None) -> None:
    ds = DATASETS[name]
    before = ds.make(url, opts)
    keys = data_keys(url, opts)
    key = keys[len(keys) // 2]
    damage(url, key, "truncate", opts)
    damaged = data_keys(url, opts)

    assert main(["repair", "--no-progress", url]) == 1  # lists, does not drop
    err = capsys.readouterr().err
    assert err.count(": ") >= 1
    assert main(["repair", "--no-progress", "--dry-run", "--drop-corrupt", url]) == 1
    capsys.readouterr()
    assert data_keys(url, opts) == damaged  # nothing changed

    assert main(["repair", "--no-progress", "--drop-corrupt", url]) == 0
    out = capsys.readouterr().out
    assert "dropped" in out
    assert main(["verify", "--no-progress", url]) == 0
    capsys.readouterr()
    _check_dropped(before, read(url, opts), ds.fill)


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_drop_corrupt_local(tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    _drop_flow(str(tmp_path / name), name, capsys)


def test_drop_corrupt_inner_chunk_keeps_the_rest_of_its_shard(tmp_path: Path) -> None:
    url = str(tmp_path / "s.zarr")
    before = DATASETS["zarr3-sharded-zstd-checksum"].make(url, None)[""]
    damage(url, "c/1/0", "flip")  # inside one inner chunk; the shard index is intact
    report = repair(url, drop_corrupt=True)
    (problem,) = report.problems
    assert problem.action == "delete" and problem.dropped and problem.coords is not None
    after = read(url)[""]
    r, c = problem.coords
    box = (slice(r * 10, r * 10 + 10), slice(c * 10, c * 10 + 10))
    assert (after[box] == 0).all()
    after[box] = before[box]
    assert np.array_equal(after, before)  # the shard's three other chunks survive


def test_drop_corrupt_shard_index_drops_the_shard(tmp_path: Path) -> None:
    url = str(tmp_path / "s.zarr")
    before = DATASETS["zarr3-sharded-zstd-checksum"].make(url, None)[""]
    shard = Path(url) / "c" / "0" / "1"
    raw = bytearray(shard.read_bytes())
    raw[-6] ^= 0xFF  # the index (at the end, crc32c-protected)
    shard.write_bytes(bytes(raw))
    report = repair(url, drop_corrupt=True)
    (problem,) = report.problems
    assert problem.action == "delete-unit" and problem.key == "c/0/1"
    after = read(url)[""]
    assert (after[:20, 20:40] == 0).all()
    after[:20, 20:40] = before[:20, 20:40]
    assert np.array_equal(after, before)
    assert not shard.exists()


def _first_value(shard: bytes, spec: ShardingSpec) -> tuple[int, int]:
    """(offset, size) of the first value of a uint64 shard file, from its indexes."""
    index = np.frombuffer(shard[: spec.index_size], dtype="<u8").reshape(-1, 2)
    m = next(i for i in range(len(index)) if index[i, 0] != index[i, 1])
    lo, hi = (int(v) + spec.index_size for v in index[m])
    _, start, size = next(iter(decode_minishard_index(shard[lo:hi], spec, "shard", m).items()))
    return int(start), int(size)


@pytest.mark.parametrize("name", ["kv", "precomputed-sharded"])
def test_drop_corrupt_value_keeps_the_rest_of_its_shard(tmp_path: Path, name: str) -> None:
    """A damaged gzip value (the shard's indexes intact) drops that key / chunk only."""
    url = str(tmp_path / name)
    before = DATASETS[name].make(url, None)
    shard = min(Path(url).rglob("*.shard"))
    raw = bytearray(shard.read_bytes())
    spec = json.loads((shard.parent / "info").read_text()) if name == "kv" else SHARDING
    start, size = _first_value(bytes(raw), ShardingSpec.from_json(spec))
    assert size > 30
    raw[start + 20] ^= 0xFF  # inside the deflate stream (gzip's header bytes have no checksum)
    shard.write_bytes(bytes(raw))
    report = repair(url, drop_corrupt=True)
    (problem,) = report.problems
    assert problem.action == "delete" and problem.dropped, problem
    assert shard.exists()  # rewritten, not removed
    after = read(url)
    _check_dropped(before, after, 0)
    if name == "kv":
        assert len(after[""]) == len(before[""]) - 1
    else:  # exactly one 8^3 chunk became fill
        changed = after["1_1_1"] != before["1_1_1"]
        assert changed.sum() == 8 * 8 * 8
    assert scan(url).problems == []


def test_kv_legacy_index_data_pairs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Shards stored as ``.index`` + ``.data`` (the data file is the shard without its index)
    are verified and, when their index is damaged, dropped as a pair."""
    url = str(tmp_path / "kv")
    before = DATASETS["kv"].make(url, None)[""]
    spec = ShardingSpec.from_json(json.loads((Path(url) / "info").read_text()))
    for shard in sorted(Path(url).glob("*.shard")):
        raw = shard.read_bytes()
        shard.with_suffix(".index").write_bytes(raw[: spec.index_size])
        shard.with_suffix(".data").write_bytes(raw[spec.index_size :])
        shard.unlink()
    assert read(url)[""] == before
    report = scan(url)
    assert report.problems == [] and report.nodes[0].units == len(before)
    first = min(Path(url).glob("*.index"))
    first.write_bytes(first.read_bytes()[:-3])  # a truncated index
    assert main(["repair", "--no-progress", "--drop-corrupt", url]) == 0
    assert f"shard file '{first.name}'" in capsys.readouterr().err
    assert not first.exists() and not first.with_suffix(".data").exists()
    _check_dropped({"": before}, read(url), 0)


def test_kv_keys_in_the_wrong_shard_are_reported_not_dropped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Swapped shard files (or a sharding spec that does not match them) are not damage that
    dropping would repair: verify reports them, repair --drop-corrupt leaves them."""
    url = str(tmp_path / "kv")
    DATASETS["kv"].make(url, None)
    a, b = sorted(Path(url).glob("*.shard"))[:2]
    raw_a, raw_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(raw_b)
    b.write_bytes(raw_a)
    assert main(["verify", "--no-progress", url]) == 1
    assert "belongs in shard" in capsys.readouterr().err
    assert main(["repair", "--no-progress", "--drop-corrupt", url]) == 1
    capsys.readouterr()
    assert a.read_bytes() == raw_b and b.read_bytes() == raw_a


def test_drop_corrupt_bcolz_rewrites_dflt_rows(tmp_path: Path) -> None:
    url = str(tmp_path / "c.bcolz")
    before = DATASETS["bcolz-carray"].make(url, None)[""]
    damage(url, "data/__2.blp", "truncate")
    report = repair(url, drop_corrupt=True)
    (problem,) = report.problems
    assert problem.action == "fill" and problem.key == "data/__2.blp"
    after = read(url)[""]
    assert (after[2048:3072] == 0).all()
    after[2048:3072] = before[2048:3072]
    assert np.array_equal(after, before)


# -- S3 -------------------------------------------------------------------------------------------
S3_DATASETS = ["zarr3-sharded-zstd-checksum", "n5-gzip", "precomputed-sharded", "kv", "bcolz-carray", "bcolz-ctable"]


@pytest.fixture
def s3_env(seaweedfs: SeaweedFS, monkeypatch: pytest.MonkeyPatch) -> SeaweedFS:
    """The CLI reads S3 settings from the environment."""
    for k, v in {**seaweedfs.env(), "AWS_ENDPOINT_URL": seaweedfs.endpoint}.items():
        monkeypatch.setenv(k, v)
    return seaweedfs


@pytest.mark.parametrize("name", S3_DATASETS)
def test_drop_corrupt_s3(s3_env: SeaweedFS, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    url = s3_env.url(f"repair-{name}-{os.urandom(4).hex()}")
    _drop_flow(url, name, capsys, s3_env.storage_options())


def test_orphan_column_on_s3(s3_env: SeaweedFS, capsys: pytest.CaptureFixture[str]) -> None:
    url = s3_env.url(f"orphan-{os.urandom(4).hex()}")
    _orphan_table(url, s3_env.storage_options())
    assert main(["repair", "--no-progress", url]) == 0
    assert "kept orphan ctable column b/ (remote: only with --grace 0)" in capsys.readouterr().out
    assert main(["repair", "--no-progress", "--grace", "0", url]) == 0
    assert "removed orphan ctable column b/" in capsys.readouterr().out
    assert scan(url, storage_options=s3_env.storage_options()).orphans == []


def test_verify_and_repair_s3_report_no_temp_files(s3_env: SeaweedFS, capsys: pytest.CaptureFixture[str]) -> None:
    url = s3_env.url(f"repair-clean-{os.urandom(4).hex()}")
    DATASETS["kv"].make(url, s3_env.storage_options())
    assert main(["verify", "--no-progress", url]) == 0
    assert "checked against checksums" in capsys.readouterr().out
    assert main(["repair", "--no-progress", url]) == 0
    assert "remote writes leave no temporary objects" in capsys.readouterr().out
