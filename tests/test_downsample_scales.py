"""Precomputed scales derived from the base: ``add_scale`` rounding (issue 18) and the sharding
parameters of each level, both as CloudVolume / igneous compute them."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import shardstore
from shardstore.formats.precomputed.scales import downscaled_members, sharding_for_scale

pc = shardstore.precomputed


def _volume(path: Path) -> None:
    pc.create(path, data_type="uint64", type="segmentation", scales=[{
        "size": [1024, 1024, 200], "resolution": [8, 8, 40], "voxel_offset": [-512, 0, 10],
        "chunk_size": [64, 64, 32], "encoding": "compressed_segmentation"}])


def test_add_scale_derives_offset_and_size_from_resolution(tmp_path: Path) -> None:
    """The docs' example: base offset [-512, 0, 10], new resolution [16, 16, 40]."""
    _volume(tmp_path)
    pc.add_scale(tmp_path, resolution=[16, 16, 40])
    s = pc.read_info(tmp_path)["scales"][1]
    assert s["voxel_offset"] == [-256, 0, 10] and s["size"] == [512, 512, 200]
    assert s["chunk_sizes"] == [[64, 64, 32]] and s["encoding"] == "compressed_segmentation"
    assert s["compressed_segmentation_block_size"] == [8, 8, 8]


def test_add_scale_with_factor_rounds_like_cloudvolume(tmp_path: Path) -> None:
    _volume(tmp_path)
    a = pc.add_scale(tmp_path, factor=[3, 3, 3])
    s = pc.read_info(tmp_path)["scales"][1]
    # floor(-512 / 3) = -171, floor(10 / 3) = 3; ceil(1024 / 3) = 342, ceil(200 / 3) = 67
    assert s["voxel_offset"] == [-171, 0, 3] and s["size"] == [342, 342, 67] and s["resolution"] == [24, 24, 120]
    assert a.shape == (342, 342, 67, 1)
    explicit = pc.add_scale(tmp_path, factor=[2, 2, 1], voxel_offset=[1, 2, 3], key="mine")
    assert explicit.shape == (512, 512, 200, 1)
    assert pc.read_info(tmp_path)["scales"][2]["voxel_offset"] == [1, 2, 3]


def test_add_scale_replace(tmp_path: Path) -> None:
    _volume(tmp_path)
    a = pc.add_scale(tmp_path, factor=[2, 2, 1])
    a[:64, :64, :32] = 5
    assert any((tmp_path / "16_16_40").iterdir())
    with pytest.raises(shardstore.MetadataError, match="unique"):
        pc.add_scale(tmp_path, factor=[2, 2, 1])
    b = pc.add_scale(tmp_path, factor=[2, 2, 1], replace=True, chunk_size=[32, 32, 32])
    assert not b[:64, :64, :32].any()
    assert [s["key"] for s in pc.read_info(tmp_path)["scales"]] == ["8_8_40", "16_16_40"]


def test_scale_members_match_cloudvolume(tmp_path: Path) -> None:
    cloudvolume = pytest.importorskip("cloudvolume")
    warnings.filterwarnings("ignore", module="cloudvolume")
    _volume(tmp_path)
    cv = cloudvolume.CloudVolume(f"file://{tmp_path}")
    for factor in ([2, 2, 1], [2, 2, 2], [4, 4, 2], [3, 3, 1]):
        cv.add_scale(factor)
        want = cv.scales[-1]
        got = downscaled_members(pc.read_info(tmp_path)["scales"][0], factor)
        assert got == {k: want[k] for k in got}, factor


@pytest.mark.parametrize("size,chunk,dtype,target", [
    ((1024, 1024, 512), (64, 64, 64), "uint8", int(3.5e9)),
    ((512, 512, 256), (64, 64, 64), "uint64", int(3.5e9)),
    ((1024, 1024, 512), (64, 64, 64), "uint8", 2**22),
    ((100, 80, 1), (64, 64, 1), "uint8", int(3.5e9)),
    ((65536, 65536, 1000), (128, 128, 16), "uint8", int(3.5e9)),
    ((4096, 4096, 64), (64, 64, 64), "uint16", 2**24),
    ((32, 32, 16), (64, 64, 64), "uint32", int(3.5e9)),
])
def test_sharding_parameters_match_cloudvolume(size, chunk, dtype, target) -> None:
    sharding = pytest.importorskip("cloudvolume.datasource.precomputed.sharding")
    want = sharding.compute_shard_params_for_image(size, chunk, "raw", dtype, uncompressed_shard_bytesize=target)
    assert sharding_for_scale(size, chunk, dtype, uncompressed_shard_bytes=target) == want.to_dict()


def test_sharding_parameters_are_valid_for_the_scale(tmp_path: Path) -> None:
    spec = sharding_for_scale((300, 200, 100), (64, 64, 64), "uint8", uncompressed_shard_bytes=2**20)
    a = pc.create(tmp_path, data_type="uint8", scales=[{"size": [300, 200, 100], "chunk_size": [64, 64, 64],
                                                       "sharding": spec}])
    x = np.random.default_rng(0).integers(0, 255, (300, 200, 100, 1), dtype=np.uint8)
    a[...] = x
    np.testing.assert_array_equal(pc.open(tmp_path)[...], x)
    assert spec["data_encoding"] == "gzip" and sharding_for_scale((64,) * 3, (64,) * 3, "uint8", "jpeg")["data_encoding"] == "raw"


def test_remove_scales(tmp_path: Path) -> None:
    _volume(tmp_path)
    pc.add_scale(tmp_path, factor=[2, 2, 1])[:8, :8, :8] = 3
    pc.add_scale(tmp_path, factor=[4, 4, 1])
    assert pc.remove_scales(tmp_path) == ["16_16_40", "32_32_40"]
    assert [s["key"] for s in pc.read_info(tmp_path)["scales"]] == ["8_8_40"]
    assert not (tmp_path / "16_16_40").exists()
    assert pc.remove_scales(tmp_path) == []
    with pytest.raises(ValueError, match="at least 1"):
        pc.remove_scales(tmp_path, keep=0)


def test_downsample_replaces_an_earlier_pyramid(tmp_path: Path) -> None:
    from shardstore.ops import downsample

    pc.create(tmp_path, data_type="uint8", scales=[{"size": [40, 30, 20], "resolution": [8, 8, 40]}])
    downsample(tmp_path, (2, 2, 1), levels=2)
    downsample(tmp_path, (2, 2, 2), levels=1)
    assert [s["key"] for s in pc.read_info(tmp_path)["scales"]] == ["8_8_40", "16_16_80"]
    assert not (tmp_path / "16_16_40").exists()
