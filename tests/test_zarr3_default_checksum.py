"""New Zarr v3 arrays carry a per-chunk checksum by default (zstd's content checksum): damage
inside a chunk is an error, never silently wrong data, and the reference libraries read the
arrays as before."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import shardstore
from shardstore.cli import main
from shardstore.errors import ChecksumError


def _volume() -> np.ndarray:
    rng = np.random.default_rng(7)
    smooth = np.add.outer(np.add.outer(np.arange(32), np.arange(32)), np.arange(32)).astype(np.uint8)
    return smooth + rng.integers(0, 8, smooth.shape, dtype=np.uint8)


@pytest.fixture()
def default_array(tmp_path: Path) -> tuple[Path, np.ndarray]:
    vol = _volume()
    a = shardstore.zarr3.create(tmp_path / "a.zarr", shape=vol.shape, dtype=vol.dtype, chunks=(16,) * 3,
                                shards=(32,) * 3)
    a[...] = vol
    return tmp_path / "a.zarr", vol


def test_default_inner_codecs_are_checksummed(default_array: tuple[Path, np.ndarray]) -> None:
    path, _ = default_array
    inner = shardstore.open(path).metadata["codecs"][0]["configuration"]["codecs"]
    assert inner == [{"name": "bytes", "configuration": {"endian": "little"}},
                     {"name": "zstd", "configuration": {"level": 3, "checksum": True}}]
    unsharded = shardstore.zarr3.create(path.parent / "u.zarr", shape=(4,), dtype="u1")
    assert unsharded.metadata["codecs"][-1] == {"name": "zstd", "configuration": {"level": 3, "checksum": True}}


def _damage_middle_of_first_chunk(shard: Path) -> None:
    raw = bytearray(shard.read_bytes())
    # the shard starts with inner chunk (0, 0, 0); flip a byte in the middle of its payload
    # (not its frame header, not its checksum), where an unchecked frame decodes to wrong data
    import zstandard

    first = zstandard.get_frame_parameters(bytes(raw))
    assert first.has_checksum
    raw[200] ^= 0x55
    shard.write_bytes(bytes(raw))


def test_damage_inside_a_chunk_is_detected(default_array: tuple[Path, np.ndarray],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    path, vol = default_array
    _damage_middle_of_first_chunk(path / "c" / "0" / "0" / "0")
    with pytest.raises(ChecksumError, match=r"inner chunk \[0, 0, 0\] in shard 'c/0/0/0'"):
        shardstore.open(path)[:16, :16, :16]
    np.testing.assert_array_equal(shardstore.open(path)[16:, 16:, 16:], vol[16:, 16:, 16:])  # the rest reads
    assert main(["verify", "--no-progress", str(path)]) == 1
    out, err = capsys.readouterr()
    assert "ChecksumError" in out + err and "c/0/0/0" in out + err


def test_reference_libraries_read_the_default_codecs(default_array: tuple[Path, np.ndarray]) -> None:
    tensorstore = pytest.importorskip("tensorstore")
    zarr = pytest.importorskip("zarr")
    path, vol = default_array
    t = tensorstore.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}).result()
    np.testing.assert_array_equal(t.read().result(), vol)
    np.testing.assert_array_equal(zarr.open_array(str(path), mode="r")[...], vol)
