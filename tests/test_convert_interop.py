"""What ``convert`` writes, the reference implementations read bit-exactly (issue 19 point 7):
tensorstore (zarr3, n5, neuroglancer_precomputed), zarr-python (Zarr v3), z5py (N5),
CloudVolume (precomputed); OME output validates with ome-zarr-models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _convert_sources import OFFSET_XYZ, RESOLUTION_XYZ, as_precomputed, make_source
from _helpers import assert_bitexact

import shardstore

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _ts(driver: str, path: Path) -> Any:
    ts = pytest.importorskip("tensorstore")
    return ts.open({"driver": driver, "kvstore": {"driver": "file", "path": str(path)}}, read=True).result()


@pytest.mark.parametrize("kind,options", [
    ("precomputed-sharded", {"shards": (32, 32, 32)}),
    ("n5", {"shards": "none", "compression": "gzip"}),
    ("precomputed-2ch", {"compression": "none"}),
    ("zarr3-sharded", {"shards": (32, 32, 64)}),
])
def test_zarr3_output_reads_in_tensorstore_and_zarr_python(kind: str, options: dict, tmp_path: Path) -> None:
    zarr = pytest.importorskip("zarr")
    src, canon = make_source(kind, tmp_path)
    dst = tmp_path / "out.zarr"
    shardstore.convert(src, dst, **options)
    assert_bitexact(_ts("zarr3", dst).read().result(), canon, "tensorstore zarr3")
    z = zarr.open_array(str(dst), mode="r")
    assert_bitexact(z[...], canon, "zarr-python")
    assert list(z.metadata.dimension_names) == (["c"] if canon.ndim == 4 else []) + ["z", "y", "x"]


@pytest.mark.parametrize("kind", ["precomputed", "zarr3-sharded", "zarr3-2ch"])
def test_n5_output_reads_in_tensorstore_and_z5py(kind: str, tmp_path: Path) -> None:
    z5py = pytest.importorskip("z5py")
    src, canon = make_source(kind, tmp_path)
    dst = tmp_path / "out.n5"
    shardstore.convert(src, dst)
    # tensorstore indexes N5 arrays in N5 order (x first): reversed
    assert_bitexact(np.asarray(_ts("n5", dst).read().result()).T, canon, "tensorstore n5")
    # z5py opens datasets inside a container: put the converted root dataset into one
    container = tmp_path / "container.n5"
    container.mkdir()
    (container / "attributes.json").write_text('{"n5": "4.0.0"}')
    dst.rename(container / "ds")
    assert_bitexact(z5py.File(str(container), mode="r")["ds"][...], canon, "z5py")


@pytest.mark.parametrize("kind,options", [
    ("zarr3-sharded", {"shards": (32, 32, 32)}),
    ("zarr3", {}),
    ("n5", {"encoding": "raw"}),
    ("zarr3-2ch", {}),
    ("precomputed-seg", {}),
])
def test_precomputed_output_reads_in_tensorstore_and_cloudvolume(kind: str, options: dict, tmp_path: Path) -> None:
    cloudvolume = pytest.importorskip("cloudvolume")
    src, canon = make_source(kind, tmp_path)
    dst = tmp_path / "out.precomputed"
    shardstore.convert(src, dst, to="precomputed", **options)
    expected = as_precomputed(canon)
    t = _ts("neuroglancer_precomputed", dst)
    assert_bitexact(t.read().result(), expected, "tensorstore neuroglancer_precomputed")
    cv = cloudvolume.CloudVolume(f"file://{dst}", progress=False, fill_missing=True)
    lo = cv.voxel_offset
    hi = lo + cv.volume_size
    assert_bitexact(np.asarray(cv[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]]), expected, "CloudVolume")
    if kind == "n5":  # resolution from the N5 attributes, offset none
        assert list(cv.resolution) == RESOLUTION_XYZ


def test_precomputed_round_trip_keeps_offset_for_cloudvolume(tmp_path: Path) -> None:
    cloudvolume = pytest.importorskip("cloudvolume")
    src, canon = make_source("precomputed-sharded", tmp_path)
    shardstore.convert(src, tmp_path / "mid.zarr", ome=True)
    shardstore.convert(tmp_path / "mid.zarr" / "0", tmp_path / "back", to="precomputed", shards=(32, 32, 32))
    cv = cloudvolume.CloudVolume(f"file://{tmp_path / 'back'}", progress=False)
    assert list(cv.voxel_offset) == OFFSET_XYZ and list(cv.resolution) == RESOLUTION_XYZ
    lo, hi = cv.voxel_offset, cv.voxel_offset + cv.volume_size
    assert_bitexact(np.asarray(cv[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]]), as_precomputed(canon), "CloudVolume")


@pytest.mark.parametrize("kind", ["precomputed-2ch", "n5", "zarr3-sharded"])
def test_ome_output_validates_with_ome_zarr_models(kind: str, tmp_path: Path) -> None:
    zarr = pytest.importorskip("zarr")
    models = pytest.importorskip("ome_zarr_models.v05.image")
    src, canon = make_source(kind, tmp_path)
    shardstore.convert(src, tmp_path / "img.zarr", ome=True)
    model = models.Image.from_zarr(zarr.open_group(str(tmp_path / "img.zarr"), mode="r"))
    ms = model.ome_attributes.multiscales[0]
    assert [d.path for d in ms.datasets] == ["0"]
    assert [a.name for a in ms.axes] == (["c"] if canon.ndim == 4 else []) + ["z", "y", "x"]
    assert_bitexact(_ts("zarr3", tmp_path / "img.zarr" / "0").read().result(), canon, "tensorstore OME level 0")
