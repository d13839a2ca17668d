"""The ``shardstore`` command line: demo, info, ls, verify, copy; exit codes and messages.

Commands run in-process through ``main(argv)`` (fast) and once through a subprocess, the way a
user runs them. Everything works on small arrays in ``tmp_path``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import shardstore
from shardstore.cli import main
from shardstore.demo import DEMO_FORMATS, em_like_volume

REPO = Path(__file__).resolve().parent.parent
DEMO_ARRAY = DEMO_FORMATS["zarr3"].dirname


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 64^3 demo, written once through main() for the read-only tests below."""
    d = tmp_path_factory.mktemp("demo")
    assert main(["demo", str(d), "--size", "64", "--no-progress"]) == 0
    return d


@pytest.fixture()
def demo_copy(demo_dir: Path, tmp_path: Path) -> Path:
    """A private copy of the demo array, free to damage."""
    dst = tmp_path / "arr.zarr"
    shutil.copytree(demo_dir / DEMO_ARRAY, dst)
    return dst


# --------------------------------------------------------------------------- demo

def test_em_like_volume_is_deterministic_and_em_like() -> None:
    a = em_like_volume(48, seed=3)
    assert a.shape == (48, 48, 48) and a.dtype == np.uint8
    assert np.array_equal(a, em_like_volume(48, seed=3))
    assert not np.array_equal(a, em_like_volume(48, seed=4))
    assert 15 < float(a.std()) < 80 and 100 < float(a.mean()) < 180
    # smooth plus grain: neighbours are far more alike than random pairs of voxels
    flat = a.ravel().astype(np.int16)
    neighbours = np.abs(np.diff(a.astype(np.int16), axis=2)).mean()
    random_pairs = np.abs(flat - np.random.default_rng(0).permutation(flat)).mean()
    assert 1 < neighbours < 0.5 * random_pairs
    assert em_like_volume((5, 6, 7)).shape == (5, 6, 7)
    with pytest.raises(ValueError):
        em_like_volume((4, 4))


def test_demo_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "demo", tmp_path, "--size", "64", "--no-progress")
    assert code == 0, out
    assert "verified: OK" in out
    for word in ("shape", "(64, 64, 64)", "uint8", "chunks", "shards", "size on disk",
                 "compression", "MB/s", "shardstore.open("):
        assert word in out
    a = shardstore.open(tmp_path / DEMO_ARRAY)
    assert a.shards == (64, 64, 64) and a.chunks == (64, 64, 64)
    np.testing.assert_array_equal(a[...], em_like_volume(64, seed=0))
    # running it again replaces its own output
    code, out, _ = run(capsys, "demo", tmp_path, "--size", "40", "--seed", "2", "--no-progress")
    assert code == 0 and "verified: OK" in out
    np.testing.assert_array_equal(shardstore.open(tmp_path / DEMO_ARRAY)[...], em_like_volume(40, seed=2))


def test_demo_subprocess(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "shardstore", "demo", str(tmp_path / "d"), "--size", "64"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verified: OK" in proc.stdout
    assert f"shardstore.open('{tmp_path / 'd' / DEMO_ARRAY}')" in proc.stdout


def test_demo_refuses_to_replace_foreign_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shardstore.zarr3.create(tmp_path / DEMO_ARRAY, shape=(4,), dtype="uint8", chunks=(2,))
    code, _, err = run(capsys, "demo", tmp_path, "--size", "16", "--no-progress")
    assert code == 2
    assert "not written by `shardstore demo`" in err and "Traceback" not in err
    assert shardstore.open(tmp_path / DEMO_ARRAY).shape == (4,)


def test_demo_small_sizes_get_sensible_shards(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "demo", tmp_path, "--size", "100", "--no-progress")
    assert code == 0 and "verified: OK" in out
    a = shardstore.open(tmp_path / DEMO_ARRAY)
    assert a.chunks == (64, 64, 64) and a.shards == (128, 128, 128)


def test_console_script_is_declared() -> None:
    text = (REPO / "pyproject.toml").read_text()
    assert 'shardstore = "shardstore.cli:main"' in text


# --------------------------------------------------------------------------- info / ls

def test_info(demo_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "info", demo_dir / DEMO_ARRAY)
    assert code == 0
    for word in ("Zarr v3 array", "(64, 64, 64)", "uint8", "fill value", "sharding_indexed", "zstd",
                 '["z", "y", "x"]', "shardstore_demo", "1 of 1 shard files", "codecs JSON"):
        assert word in out, word


def test_info_json(demo_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "info", "--json", demo_dir / DEMO_ARRAY)
    assert code == 0
    info = json.loads(out)
    assert info["shape"] == [64, 64, 64] and info["shards"] == [64, 64, 64]
    assert info["codecs"][0]["name"] == "sharding_indexed"
    assert info["stored"]["files"] == 1 and info["stored"]["bytes"] > 1000
    assert info["dimension_names"] == ["z", "y", "x"]
    assert info["node"] == "array" and info["label"] == "Zarr v3 array" and info["format"] == "zarr3"


def test_ls_array_group_and_directory(demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "ls", demo_dir / DEMO_ARRAY)
    assert code == 0 and "(64, 64, 64) uint8" in out
    code, out, _ = run(capsys, "ls", demo_dir)
    assert code == 0 and DEMO_ARRAY.split("/")[0] in out  # the demo's OME-Zarr group

    g = shardstore.zarr3.create_group(tmp_path / "g", attributes={"a": 1})
    g.create_group("sub").create_array("deep", shape=(3, 4), dtype="float32", chunks=(2, 2))
    g.create_array("top", shape=(10,), dtype="int16", chunks=(5,), shards=(10,))
    code, out, _ = run(capsys, "ls", tmp_path / "g")
    assert code == 0
    assert re.search(r"^\s+sub/  \[Zarr v3 group\]$", out, re.M)
    assert re.search(r"^\s{4}deep  \[Zarr v3 array\] \(3, 4\) float32", out, re.M)
    assert re.search(r"^\s+top  \[Zarr v3 array\] \(10,\) int16 chunks \(5,\) shards \(10,\)", out, re.M)
    code, out, _ = run(capsys, "info", tmp_path / "g")
    assert code == 0 and "Zarr v3 group" in out and '["sub", "top"]' in out


# --------------------------------------------------------------------------- verify

def test_verify_ok(demo_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "verify", "--no-progress", demo_dir / DEMO_ARRAY)
    assert code == 0 and "verify: OK" in out


def _index_entries(shard: bytes, n_chunks: int) -> list[tuple[int, int]]:
    """(offset, nbytes) per inner chunk from an end-located index (bytes + crc32c)."""
    raw = shard[-(16 * n_chunks + 4):-4]
    return [struct.unpack_from("<QQ", raw, 16 * i) for i in range(n_chunks)]


@pytest.mark.parametrize("damage", ["index", "truncate", "chunk"])
def test_verify_reports_corruption_with_key(demo_copy: Path, damage: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    shard_file = demo_copy / "c" / "0" / "0" / "0"
    data = bytearray(shard_file.read_bytes())
    if damage == "index":
        data[-8] ^= 0xFF  # inside the index entries: crc32c mismatch
    elif damage == "truncate":
        del data[len(data) // 2:]
    else:  # ruin the zstd frame header of the one inner chunk, index intact
        offset, nbytes = _index_entries(bytes(data), 1)[0]
        assert nbytes > 8
        data[offset:offset + 4] = b"\0\0\0\0"
    shard_file.write_bytes(bytes(data))
    code, out, err = run(capsys, "verify", "--no-progress", demo_copy)
    assert code == 1
    assert "c/0/0/0" in err and "problem" in err
    assert "Traceback" not in err and "verify: OK" not in out
    if damage == "chunk":
        assert "inner chunk [0, 0, 0]" in err


def test_verify_unsharded_names_each_bad_chunk(demo_dir: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    dst = tmp_path / "chunked.zarr"
    assert run(capsys, "copy", demo_dir / DEMO_ARRAY, dst, "--chunks", "16", "--shards", "none",
               "--no-progress")[0] == 0
    for key in ("c/1/2/3", "c/3/0/0"):
        path = dst / key
        path.write_bytes(path.read_bytes()[:10])
    code, out, err = run(capsys, "verify", "--no-progress", dst)
    assert code == 1
    assert "'c/1/2/3'" in err and "'c/3/0/0'" in err and "2 problem(s)" in err
    assert "[16:32, 32:48, 48:64]" in err  # the region of the bad chunk
    assert "'c/0/0/0'" not in err


def test_verify_unreadable_metadata_exits_2(demo_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (demo_copy / "zarr.json").write_text('{"zarr_format": 3, "node_type": "array"')
    code, _, err = run(capsys, "verify", demo_copy)
    assert code == 2
    assert err.startswith("shardstore: error:") and "zarr.json" in err
    assert len(err.strip().splitlines()) == 1


# --------------------------------------------------------------------------- errors

def test_errors_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "info", tmp_path / "missing")
    assert code == 2 and out == ""
    assert err.startswith("shardstore: error:") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_debug_shows_the_exception(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--debug", "info", tmp_path / "missing"], ["info", tmp_path / "missing", "--debug"]):
        code, out, err = run(capsys, *argv)
        assert code == 2 and out == ""  # the README's exit code for an error, --debug included
        assert "Traceback" in err and "NodeNotFoundError" in err and "missing" in err


def test_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main([])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    assert "demo" in capsys.readouterr().out


# --------------------------------------------------------------------------- copy

def test_copy_reshards_and_recompresses(demo_dir: Path, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    src = demo_dir / DEMO_ARRAY
    dst = tmp_path / "resharded.zarr"
    code, out, _ = run(capsys, "copy", src, dst, "--chunks", "16", "--shards", "32,32,32",
                       "--codecs", '[{"name": "gzip", "configuration": {"level": 1}}]', "--no-progress")
    assert code == 0, out
    a, b = shardstore.open(src), shardstore.open(dst)
    assert b.chunks == (16, 16, 16) and b.shards == (32, 32, 32)
    assert b.dimension_names == a.dimension_names and dict(b.attrs) == dict(a.attrs)
    inner = b.metadata["codecs"][0]["configuration"]["codecs"]
    assert [c["name"] for c in inner] == ["bytes", "gzip"]
    np.testing.assert_array_equal(b[...], a[...])
    assert len(list((dst / "c").rglob("*"))) >= 8  # 8 shard files plus directories

    # unshard it; defaults keep the chunks and the codecs of the source
    flat = tmp_path / "flat.zarr"
    code, _, _ = run(capsys, "copy", dst, flat, "--shards", "none", "--no-progress")
    assert code == 0
    c = shardstore.open(flat)
    assert c.shards is None and c.chunks == (16, 16, 16)
    assert [x["name"] for x in c.metadata["codecs"]] == ["bytes", "gzip"]
    np.testing.assert_array_equal(c[...], a[...])


def test_copy_refuses_existing_destination(demo_dir: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    src = demo_dir / DEMO_ARRAY
    dst = tmp_path / "d.zarr"
    assert run(capsys, "copy", src, dst, "--no-progress")[0] == 0
    code, _, err = run(capsys, "copy", src, dst, "--no-progress")
    assert code == 2 and "--overwrite" in err
    code, _, _ = run(capsys, "copy", src, dst, "--shards", "none", "--overwrite", "--no-progress")
    assert code == 0 and shardstore.open(dst).shards is None
    code, _, err = run(capsys, "copy", src, src / "inside", "--no-progress")
    assert code == 2 and "overlaps" in err
    code, _, err = run(capsys, "copy", src, tmp_path / "x", "--chunks", "1,2", "--no-progress")
    assert code == 2 and "--chunks" in err


# --------------------------------------------------------------------------- README and CI

def _readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    setup = text.split("```", 2)[1]  # the first code block holds the two set-up commands
    return [line for line in setup.splitlines()[1:] if line.strip() and not line.startswith("#")]


def test_readme_has_two_setup_commands_and_ci_runs_the_test_command() -> None:
    commands = _readme_commands()
    assert len(commands) == 2, commands
    assert "shardstore demo" in commands[0]
    test_command = commands[1].rsplit("&&", 1)[1].strip()
    assert test_command.startswith("python -m pytest"), test_command
    ci = (REPO / ".ci" / "run").read_text()
    ci_lines = [line.strip() for line in ci.splitlines()]
    assert test_command in ci_lines, f"{test_command!r} is not a line of .ci/run"
    assert shlex.split(commands[1])  # valid shell quoting
    assert os.access(REPO / ".ci" / "run", os.R_OK)


def test_global_options_before_or_after_the_subcommand(capsys, tmp_path):
    """``--no-progress`` and ``--debug`` are accepted on either side of the subcommand, by every
    subcommand (``info`` and ``ls`` included)."""
    d = tmp_path / "demo"
    assert run(capsys, "--no-progress", "demo", d, "--size", "16")[0] == 0
    target = d / DEMO_ARRAY
    for argv in (["--no-progress", "info", target], ["info", target, "--no-progress"],
                 ["ls", target, "--no-progress"], ["--debug", "--no-progress", "verify", target]):
        code, out, err = run(capsys, *argv)
        assert code == 0, (argv, err)
        assert out


# --------------------------------------------------------------------------- every format

@pytest.fixture(scope="module")
def formats_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One small dataset of each format, with some chunks written and some not."""
    d = tmp_path_factory.mktemp("formats")
    z = shardstore.zarr3.create(d / "z.zarr", shape=(8, 8), dtype="u1", chunks=(4, 4))
    z[:4, :] = 1  # 2 of 4 chunks
    n = shardstore.n5.create(d / "c.n5", path="em/raw", shape=(8, 8), dtype="u2", block_size=(4, 4),
                             compression={"type": "zstd", "level": 2})
    n[:4, :4] = 2  # 1 of 4 blocks
    sharding = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0,
                "minishard_bits": 1, "shard_bits": 1, "minishard_index_encoding": "gzip", "data_encoding": "gzip"}
    v = shardstore.precomputed.create(d / "vol", data_type="uint32", type="segmentation", scales=[
        {"size": [16, 16, 8], "resolution": [4, 4, 40], "voxel_offset": [-8, 0, 3], "chunk_size": [8, 8, 8],
         "sharding": sharding},
        {"size": [8, 8, 8], "resolution": [8, 8, 40], "voxel_offset": [-4, 0, 3], "chunk_size": [8, 8, 8],
         "encoding": "compressed_segmentation", "compressed_segmentation_block_size": [4, 4, 4]}])
    v[:8, :8, :, 0] = 5
    shardstore.precomputed.open(d / "vol", "r+", scale=1)[...] = 3
    shardstore.bcolz.ctable({"id": np.arange(100), "px": np.linspace(0, 1, 100)}, rootdir=d / "t.bcolz",
                            chunklen=64, cparams={"clevel": 3, "cname": "zstd"})
    kv = shardstore.precomputed.open_kv(d / "kv", sharding=sharding, mode="w")
    kv.update({i: bytes([i]) for i in range(1, 21)})
    return d


def test_info_n5_shows_compression_and_block_size(formats_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "info", formats_dir / "c.n5/em/raw")
    assert code == 0
    assert "N5 dataset" in out and "zarr3" not in out and "codecs" not in out
    assert re.search(r"compression\s+\{\"type\": \"zstd\", \"level\": 2", out)
    assert re.search(r"blockSize\s+\[4, 4\]", out) and "1 of 4 block files" in out
    code, out, _ = run(capsys, "info", formats_dir / "c.n5")
    assert code == 0 and "N5 container" in out and '["em"]' in out
    code, out, _ = run(capsys, "info", formats_dir / "c.n5/em")  # a group without attributes.json
    assert code == 0 and "N5 group" in out and '["raw"]' in out


def test_info_precomputed_lists_every_scale(formats_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "info", formats_dir / "vol")
    assert code == 0 and "precomputed volume" in out and "shards      none" not in out
    assert re.search(r"^\s+0\s+4_4_40\s+\[16, 16, 8\]\s+\[4, 4, 40\]\s+\[-8, 0, 3\]\s+\[8, 8, 8\]\s+raw\s+shard_bits 1",
                     out, re.M)
    assert re.search(r"^\s+1\s+8_8_40\s+\[8, 8, 8\]\s+\[8, 8, 40\]\s+\[-4, 0, 3\]\s+\[8, 8, 8\]\s+"
                     r"compressed_segmentation\s+-$", out, re.M)
    assert "scale       0 '4_4_40' of 2" in out and "1 of 2 shard files" in out
    for scale in ("1", "8_8_40"):
        code, out, _ = run(capsys, "info", formats_dir / "vol", "--scale", scale)
        assert code == 0 and "(8, 8, 8, 1)" in out and "1 of 1 chunk files" in out
    code, out, _ = run(capsys, "info", "--json", formats_dir / "vol", "--scale", "1")
    info = json.loads(out)
    assert info["shape"] == [8, 8, 8, 1] and [s["key"] for s in info["scales"]] == ["4_4_40", "8_8_40"]
    assert info["stored"] == {"kind": "chunk", "files": 1, "grid_cells": 1, "bytes": info["stored"]["bytes"]}
    code, _, err = run(capsys, "info", formats_dir / "vol", "--scale", "7")
    assert code == 2 and "no scale 7" in err and "'8_8_40'" in err and len(err.strip().splitlines()) == 1


def test_info_bcolz_ctable_and_kv(formats_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "info", formats_dir / "t.bcolz")
    assert code == 0 and "bcolz ctable" in out and re.search(r"rows\s+100", out)
    assert re.search(r"^\s+id\s+int64\s+64\s+\{\"clevel\": 3, .*\"cname\": \"zstd\"", out, re.M)
    assert re.search(r"^\s+px\s+float64\s+64", out, re.M)
    assert "4 of 4 chunk files" in out  # 2 per column; meta/, __attrs__, __rootdirs__ not counted
    code, out, _ = run(capsys, "info", formats_dir / "t.bcolz/px")
    assert code == 0 and "bcolz carray" in out and '"cname": "zstd"' in out and re.search(r"chunklen\s+64", out)
    code, out, _ = run(capsys, "info", "--json", formats_dir / "kv")
    info = json.loads(out)
    assert info["node"] == "kv store" and info["label"].startswith("uint64 kv store") and info["keys"] == 20
    assert info["sharding"]["shard_bits"] == 1 and info["stored"]["files"] == 2  # not `info`


def test_info_counts_only_data_files(formats_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "info", "--json", formats_dir / "z.zarr")
    assert code == 0 and json.loads(out)["stored"]["files"] == 2  # zarr.json is not a chunk
    assert json.loads(out)["stored"]["grid_cells"] == 4


def test_ls_labels_every_format(formats_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "ls", formats_dir)
    assert code == 0
    for name, label in (("c.n5/", "N5 container"), ("kv", "uint64 kv store"), ("t.bcolz", "bcolz ctable"),
                        ("vol", "precomputed volume"), ("z.zarr", "Zarr v3 array")):
        assert re.search(rf"^  {re.escape(name)}  \[{label}", out, re.M), name
    assert "4_4_40, 8_8_40" in out and "100 rows, columns id, px" in out and "20 keys" in out
    code, out, _ = run(capsys, "ls", formats_dir / "c.n5")
    assert code == 0 and re.search(r"^  em/  \[N5 group\]$", out, re.M)
    assert re.search(r"^    raw  \[N5 dataset\] \(8, 8\) uint16", out, re.M)
    code, out, _ = run(capsys, "ls", formats_dir / "t.bcolz")
    assert code == 0 and re.search(r"^  id  \[bcolz carray\] \(100,\) int64 chunks \(64,\)", out, re.M)


def test_ctable_and_kv_do_not_crash_the_commands(formats_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for target in ("t.bcolz", "kv", "c.n5", "vol"):
        for command in ("info", "ls", "verify"):
            code, out, err = run(capsys, command, "--no-progress", formats_dir / target)
            assert code == 0 and "Traceback" not in err, (command, target, err)
    code, out, _ = run(capsys, "verify", "--no-progress", formats_dir / "t.bcolz")
    assert "2 array(s)" in out  # both columns decoded


def test_failed_copy_leaves_nothing(formats_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a ctable converts to a Zarr group (one array per column), but only to Zarr v3
    code, _, err = run(capsys, "copy", formats_dir / "t.bcolz", tmp_path / "out.n5")
    assert code == 2 and "bcolz" in err and not (tmp_path / "out.n5").exists()
    code, _, err = run(capsys, "copy", formats_dir / "z.zarr", tmp_path / "out2.zarr", "--shards", "3")
    assert code == 2 and not (tmp_path / "out2.zarr").exists()
    code, _, _ = run(capsys, "copy", "--no-progress", formats_dir / "t.bcolz/px", tmp_path / "px.zarr")
    assert code == 0 and np.array_equal(shardstore.open(tmp_path / "px.zarr")[:], np.linspace(0, 1, 100))


def test_copy_failing_midway_removes_the_destination(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = shardstore.zarr3.create(tmp_path / "src.zarr", shape=(64, 8), dtype="u1", chunks=(8, 8))
    src[...] = 1
    (tmp_path / "src.zarr" / "c" / "5" / "0").write_bytes(b"not zstd at all")  # the 6th of 8 chunks
    # (gzip: same codecs would copy the chunk bytes verbatim, without decoding them)
    code, _, err = run(capsys, "copy", "--no-progress", tmp_path / "src.zarr", tmp_path / "dst.zarr", "--chunks", "8",
                       "--compression", "gzip")
    assert code == 2 and "c/5/0" in err
    assert not (tmp_path / "dst.zarr").exists()  # the array created before the read failed is gone too


def test_verify_a_plain_directory_checks_every_dataset_in_it(capsys, tmp_path):
    """``verify DIR`` on a directory holding datasets (as the demo leaves) verifies each of them,
    as ``ls`` and ``view`` take such a directory; damage in one of them is found and exits 1."""
    z = shardstore.zarr3.create(tmp_path / "a.zarr", shape=(8, 8), dtype="uint8", chunks=(4, 4), mode="w")
    z[...] = 3
    n = shardstore.n5.create(tmp_path / "b.n5", path="ds", shape=(8, 8), dtype="uint16", block_size=(4, 4), mode="w")
    n[...] = 5
    (tmp_path / "notes").mkdir()  # a directory that holds no dataset is passed over
    code, out, err = run(capsys, "verify", tmp_path, "--no-progress")
    assert code == 0, err
    assert "a.zarr" in out and "b.n5/ds" in out and "verify: OK, 2 array(s)" in out
    chunk = tmp_path / "a.zarr" / "c" / "0" / "0"
    chunk.write_bytes(chunk.read_bytes()[:-3])
    code, out, err = run(capsys, "verify", tmp_path, "--no-progress")
    assert code == 1
    assert "a.zarr" in err and "c/0/0" in err
    code, _, err = run(capsys, "verify", tmp_path / "notes", "--no-progress")
    assert code == 2 and "nothing shardstore can open" in err
