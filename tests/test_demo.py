"""``shardstore demo``: every format written, verified and downsampled; what it writes is read
by the reference libraries (tensorstore, bcolz, ome-zarr-models) and re-running replaces it."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

import shardstore
from shardstore.demo import (
    DEMO_FORMATS,
    em_like_pair,
    em_like_volume,
    label_statistics,
    run_demo,
)
from shardstore.demo import _pyramid_levels as pyramid_levels
from shardstore.demo_volume import LABEL_MULTIPLIER
from shardstore.ops.downsample_kernels import MeanState, reduce_level

SIZE = 48
LABEL_MULTIPLIER_INVERSE = np.uint64(pow(int(LABEL_MULTIPLIER), -1, 2**64))


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list]:
    d = tmp_path_factory.mktemp("demo")
    out = io.StringIO()
    results = run_demo(d, size=SIZE, progress=False, out=out)
    return d, out.getvalue(), results


def test_every_format_and_dataset_verified(demo) -> None:
    d, text, results = demo
    assert [(r.format, r.dataset.split(",")[0]) for r in results] == [
        ("zarr3", "image"), ("zarr3", "segmentation"), ("n5", "image"), ("n5", "segmentation"),
        ("precomputed", "image"), ("precomputed", "segmentation"), ("bcolz", "table")]
    assert all(r.ok and r.mismatches == 0 for r in results)
    assert all(r.pyramid.startswith(("mean, 1 levels", "mode, 1 levels")) for r in results if r.format != "bcolz")
    assert text.count("verified: OK") == 7 and "FAILED" not in text
    # the closing table, then the one command that shows it all
    assert "summary (" in text and "write MB/s" in text and "read MB/s" in text
    assert text.rstrip().splitlines()[-1].strip() == f"shardstore view {d}"


def test_readers_see_the_pyramids(demo) -> None:
    ts = pytest.importorskip("tensorstore")
    d, _, _ = demo
    volume, labels = em_like_pair(SIZE)
    mean1 = MeanState.from_base(volume, (0, 0, 0), volume.shape).next((2, 2, 2)).mean()
    mode1 = reduce_level(labels, (2, 2, 2), "mode")

    def read(spec: dict) -> np.ndarray:
        return ts.open(spec, read=True).result().read().result()

    np.testing.assert_array_equal(read({"driver": "zarr3", "kvstore": f"file://{d}/em.ome.zarr/1"}), mean1)
    np.testing.assert_array_equal(read({"driver": "zarr3", "kvstore": f"file://{d}/labels.ome.zarr/1"}), mode1)
    np.testing.assert_array_equal(read({"driver": "n5", "kvstore": f"file://{d}/em.n5/raw/s1"}), mean1.T)
    np.testing.assert_array_equal(read({"driver": "n5", "kvstore": f"file://{d}/em.n5/labels/s0"}), labels.T)
    pc = {"driver": "neuroglancer_precomputed", "kvstore": f"file://{d}/labels.precomputed", "scale_index": 1}
    np.testing.assert_array_equal(read(pc)[..., 0], mode1.T)
    info = shardstore.precomputed.read_info(d / "em.precomputed")
    assert [s["resolution"] for s in info["scales"]] == [[8, 8, 8], [16, 16, 16]]
    assert all("sharding" in s for s in info["scales"])
    n5_group = json.loads((d / "em.n5" / "labels" / "attributes.json").read_text())
    assert n5_group["scales"] == [[1, 1, 1], [2, 2, 2]]


def test_ome_zarr_validates(demo) -> None:
    zarr = pytest.importorskip("zarr")
    models = pytest.importorskip("ome_zarr_models.v05.image")
    d, _, _ = demo
    image = models.Image.from_zarr(zarr.open_group(d / "em.ome.zarr", mode="r"))
    scales = [ds.coordinateTransformations[0].scale for ds in image.ome_attributes.multiscales[0].datasets]
    assert scales == [[8.0, 8.0, 8.0], [16.0, 16.0, 16.0]]


def test_bcolz_table_holds_label_statistics(demo) -> None:
    d, _, _ = demo
    volume, labels = em_like_pair(SIZE)
    stats = label_statistics(volume, labels)
    t = shardstore.open(d / DEMO_FORMATS["bcolz"].dirname)
    for name, values in stats.items():
        np.testing.assert_array_equal(np.asarray(t[name]), values)
    assert int(np.asarray(t["voxels"]).sum()) == SIZE ** 3
    bcolz = pytest.importorskip("bcolz")
    ref = bcolz.open(str(d / DEMO_FORMATS["bcolz"].dirname), mode="r")
    np.testing.assert_array_equal(ref["label"][:], stats["label"])
    np.testing.assert_array_equal(ref["mean_intensity"][:], stats["mean_intensity"])


def test_segmentation_matches_the_volume() -> None:
    volume, labels = em_like_pair(64, seed=3)
    np.testing.assert_array_equal(volume, em_like_volume(64, seed=3))
    assert labels.dtype == np.uint64 and 0.02 < float((labels == 0).mean()) < 0.3
    stats = label_statistics(volume, labels)
    assert volume[labels == 0].mean() < volume[labels != 0].mean() - 30  # unlabelled: the dark membranes
    assert len(stats["label"]) > 8 and (stats["label"][1:] > 2**20).all()  # spread-out uint64 ids
    assert set(np.unique(labels[labels != 0] * LABEL_MULTIPLIER_INVERSE)) <= set(range(1, 33))


def test_rerun_replaces_own_output_and_refuses_foreign(tmp_path: Path) -> None:
    run_demo(tmp_path, size=20, formats=["n5", "bcolz"], progress=False, out=io.StringIO())
    results = run_demo(tmp_path, size=24, seed=1, formats=["n5", "bcolz"], progress=False, out=io.StringIO())
    assert all(r.ok for r in results)
    np.testing.assert_array_equal(shardstore.open(tmp_path / "em.n5/raw/s0")[...], em_like_volume(24, seed=1))
    shardstore.precomputed.create(tmp_path / "labels.precomputed", data_type="uint8", scales=[{"size": [4, 4, 4]}])
    with pytest.raises(shardstore.ContainsNodeError, match="labels.precomputed.*not written by"):
        run_demo(tmp_path, size=20, progress=False, out=io.StringIO())
    assert not (tmp_path / "em.ome.zarr").exists()  # refused before writing anything


def test_pyramid_depth() -> None:
    assert [pyramid_levels(n) for n in (1, 20, 33, 64, 100, 256, 300)] == [0, 1, 1, 1, 2, 3, 4]
