"""Precomputed volumes: create / open / add_scale, the info file, chunk names, sniffing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import shardstore
from shardstore.errors import ContainsNodeError, MetadataError, UnsupportedFeatureError
from shardstore.formats.precomputed.metadata import default_key, parse_info

pc = shardstore.precomputed


def _files(root: Path, key: str) -> list[str]:
    d = root / key
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def test_create_writes_tensorstore_style_info(tmp_path: Path) -> None:
    a = pc.create(tmp_path, data_type="uint16", num_channels=2,
                  scales=[{"size": [10, 9, 8], "resolution": [4, 4, 40], "chunk_size": [4, 4, 4]}])
    info = json.loads((tmp_path / "info").read_text())
    assert info["@type"] == "neuroglancer_multiscale_volume"
    assert info["type"] == "image" and info["data_type"] == "uint16" and info["num_channels"] == 2
    (scale,) = info["scales"]
    assert scale["key"] == "4_4_40"
    assert scale["chunk_sizes"] == [[4, 4, 4]] and scale["voxel_offset"] == [0, 0, 0]
    assert scale["encoding"] == "raw" and "sharding" not in scale
    assert a.shape == (10, 9, 8, 2) and a.dtype == np.uint16
    assert _files(tmp_path, "4_4_40") == []


def test_chunk_names_absolute_clipped_and_negative(tmp_path: Path) -> None:
    a = pc.create(tmp_path, data_type="uint8",
                  scales=[{"size": [10, 5, 3], "voxel_offset": [-5, 3, -2], "chunk_size": [8, 4, 2]}])
    a[...] = 1
    assert _files(tmp_path, "1_1_1") == sorted([
        "-5-3_3-7_-2-0", "-5-3_3-7_0-1", "-5-3_7-8_-2-0", "-5-3_7-8_0-1",
        "3-5_3-7_-2-0", "3-5_3-7_0-1", "3-5_7-8_-2-0", "3-5_7-8_0-1",
    ])
    # edge chunks are stored at their clipped size (raw: exactly the voxels)
    assert (tmp_path / "1_1_1" / "3-5_7-8_0-1").stat().st_size == 2 * 1 * 1
    assert (tmp_path / "1_1_1" / "-5-3_3-7_-2-0").stat().st_size == 8 * 4 * 2


def test_raw_layout_is_fortran_with_channel_slowest(tmp_path: Path) -> None:
    a = pc.create(tmp_path, data_type="uint16", num_channels=2, scales=[{"size": [3, 2, 2]}])
    data = np.arange(24, dtype=np.uint16).reshape(3, 2, 2, 2)
    a[...] = data
    raw = (tmp_path / "1_1_1" / "0-3_0-2_0-2").read_bytes()
    assert raw == data.astype("<u2").tobytes(order="F")


def test_missing_chunks_read_zero_and_zero_chunks_are_not_stored(tmp_path: Path) -> None:
    a = pc.create(tmp_path, data_type="float32", scales=[{"size": [8, 8, 8], "chunk_size": [4, 4, 4]}])
    assert not np.asarray(a).any()
    a[0:4, 0:4, 0:4] = 0
    a[4:, 4:, 4:] = 2.5
    assert _files(tmp_path, "1_1_1") == ["4-8_4-8_4-8"]
    a[4:, 4:, 4:] = 0
    assert _files(tmp_path, "1_1_1") == []


def test_multiple_scales_and_open_by_key_or_index(tmp_path: Path) -> None:
    pc.create(tmp_path, data_type="uint8", scales=[
        {"size": [20, 20, 10], "resolution": [4, 4, 40]},
        {"size": [10, 10, 10], "resolution": [8, 8, 40], "voxel_offset": [1, 2, 3], "chunk_size": [5, 5, 5]},
    ])
    s1 = pc.open(tmp_path, scale="8_8_40", mode="r+")
    s1[...] = 3
    assert pc.open(tmp_path, scale=1)[0, 0, 0, 0] == 3
    assert pc.open(tmp_path, scale=-1).shape == (10, 10, 10, 1)
    assert not pc.open(tmp_path, scale=0)[...].any()
    with pytest.raises(KeyError, match="16_16_80"):
        pc.open(tmp_path, scale="16_16_80")
    with pytest.raises(IndexError):
        pc.open(tmp_path, scale=2)


def test_add_scale(tmp_path: Path) -> None:
    pc.create(tmp_path, data_type="uint32", type="segmentation",
              scales=[{"size": [16, 16, 16], "resolution": [4, 4, 40], "encoding": "compressed_segmentation"}])
    b = pc.add_scale(tmp_path, {"size": [8, 8, 8], "resolution": [8, 8, 80]}, encoding="compressed_segmentation",
                     compressed_segmentation_block_size=[4, 4, 4])
    b[...] = np.arange(512, dtype=np.uint32).reshape(8, 8, 8, 1)
    info = pc.read_info(tmp_path)
    assert [s["key"] for s in info["scales"]] == ["4_4_40", "8_8_80"]
    assert info["scales"][1]["compressed_segmentation_block_size"] == [4, 4, 4]
    np.testing.assert_array_equal(pc.open(tmp_path, "8_8_80")[..., 0], np.arange(512).reshape(8, 8, 8))
    with pytest.raises(MetadataError, match="unique"):
        pc.add_scale(tmp_path, size=[4, 4, 4], resolution=[8, 8, 80])


def test_modes(tmp_path: Path) -> None:
    pc.create(tmp_path, data_type="uint8", scales=[{"size": [4, 4, 4]}])
    with pytest.raises(ContainsNodeError):
        pc.create(tmp_path, data_type="uint8", scales=[{"size": [4, 4, 4]}])
    a = pc.create(tmp_path, data_type="uint8", scales=[{"size": [4, 4, 4]}], mode="w")
    a[...] = 1
    ro = pc.open(tmp_path)
    with pytest.raises(shardstore.ReadOnlyError):
        ro[0, 0, 0] = 2
    with pytest.raises(UnsupportedFeatureError):
        pc.open(tmp_path, mode="r+").resize((5, 5, 5, 1))


def test_shardstore_open_and_create_route_to_precomputed(tmp_path: Path) -> None:
    a = shardstore.create(tmp_path, format="precomputed", data_type="uint8", scales=[{"size": [6, 5, 4]}])
    a[1:3] = 9
    b = shardstore.open(tmp_path)
    assert b.shape == (6, 5, 4, 1)
    assert int(np.asarray(b).sum()) == 9 * 2 * 5 * 4


def test_attributes_are_the_unmodelled_info_members(tmp_path: Path) -> None:
    a = pc.create(tmp_path, data_type="uint64", type="segmentation", scales=[{"size": [4, 4, 4]}],
                  attributes={"mesh": "mesh", "segment_properties": "props"})
    assert dict(a.attrs) == {"mesh": "mesh", "segment_properties": "props"}
    a.attrs["skeletons"] = "skel"
    info = json.loads((tmp_path / "info").read_text())
    assert info["skeletons"] == "skel" and info["mesh"] == "mesh" and info["type"] == "segmentation"


def test_info_roundtrip_keeps_unknown_members_and_spelling() -> None:
    doc = {
        "type": "image", "data_type": "UINT8", "num_channels": 1, "extra": {"a": 1},
        "scales": [{"key": "k", "size": [1, 2, 3], "resolution": [4, 4, 40], "chunk_sizes": [[1, 2, 3], [1, 1, 1]],
                    "encoding": "raw", "hidden": True, "sharding": None}],
    }
    info = parse_info(doc)
    assert info.data_type == "uint8" and info.scales[0].voxel_offset == (0, 0, 0)
    out = info.to_dict()
    assert out["extra"] == {"a": 1} and out["scales"][0]["hidden"] is True
    assert out["scales"][0]["resolution"] == [4, 4, 40]
    assert "sharding" not in out["scales"][0]
    assert default_key([4.0, 4.0, 40.0]) == "4_4_40" and default_key([0.5, 1, 2]) == "0.5_1_2"


def test_scale_key_with_parent_directory(tmp_path: Path) -> None:
    """A key may reach a sibling directory, as long as it stays inside the store."""
    pc.create(tmp_path, path="vol", data_type="uint8", scales=[{"size": [4, 4, 4], "key": "../shared_scale"}])
    a = pc.open(tmp_path, path="vol", mode="r+")
    a[...] = 5
    assert (tmp_path / "shared_scale" / "0-4_0-4_0-4").exists()
    with pytest.raises(MetadataError, match="outside the store"):
        pc.create(tmp_path / "vol2", data_type="uint8", scales=[{"size": [4, 4, 4], "key": "../x"}])


def test_memory_store_and_subpath() -> None:
    store = shardstore.MemoryStore()
    a = pc.create(store, path="a/b", data_type="int16", scales=[{"size": [5, 5, 5], "voxel_offset": [-1, -1, -1]}])
    a[...] = -7
    assert pc.open(store, path="a/b")[0, 0, 0, 0] == -7
    assert shardstore.open(store, path="a/b").shape == (5, 5, 5, 1)
