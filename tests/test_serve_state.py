"""The pure parts of serve / view: dataset discovery and description, the Neuroglancer state
and link, Range header parsing, URL path -> key."""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

import numpy as np
import pytest

import shardstore
from shardstore.errors import InvalidKeyError
from shardstore.serve import (
    Dataset,
    LocalSource,
    contrast_range,
    find_datasets,
    neuroglancer_link,
    neuroglancer_state,
)
from shardstore.serve.keys import key_from_path
from shardstore.serve.ranges import Unsatisfiable, parse_range, satisfiable
from shardstore.store.base import OffsetBR, RangeBR, SuffixBR

URL = "http://127.0.0.1:8000/"


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tree") / "root"
    z = shardstore.zarr3.create(root / "em.zarr", shape=(4, 6, 8), dtype="uint16", chunks=(2, 2, 2),
                                shards=(4, 6, 8), dimension_names=["z", "y", "x"], mode="w")
    z[...] = 1
    shardstore.zarr3.create(root / "labels.zarr", shape=(4, 6, 8), dtype="uint64", chunks=(2, 2, 2), mode="w")
    g = shardstore.zarr3.create_group(root / "grp", mode="w")
    g.create_array("a", shape=(5, 5), dtype="float32", chunks=(5, 5))
    g.create_group("sub").create_array("b", shape=(3, 3), dtype="int8", chunks=(3, 3))
    # OME-Zarr 0.5: a multiscale group is one dataset (Neuroglancer shows the pyramid)
    axes = [{"name": "z", "type": "space", "unit": "micrometer"}, {"name": "y", "type": "space", "unit": "micrometer"},
            {"name": "x", "type": "space", "unit": "micrometer"}]
    ome = {"ome": {"version": "0.5", "multiscales": [{"axes": axes, "datasets": [
        {"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [0.5, 0.25, 0.25]}]},
        {"path": "1", "coordinateTransformations": [{"type": "scale", "scale": [0.5, 0.5, 0.5]}]}]}]}}
    m = shardstore.zarr3.create_group(root / "ome.zarr", attributes=ome, mode="w")
    m.create_array("0", shape=(8, 16, 16), dtype="uint8", chunks=(8, 8, 8))
    m.create_array("1", shape=(8, 8, 8), dtype="uint8", chunks=(8, 8, 8))
    n = shardstore.n5.create(root / "vol.n5", "raw", shape=(10, 20, 30), dtype="uint8", block_size=(5, 5, 5),
                             mode="w", attributes={"resolution": [4, 5, 40], "units": ["nm", "nm", "nm"]})
    assert n.shape == (10, 20, 30)
    # an n5-viewer style multiscale group (s0, s1 with downsamplingFactors)
    shardstore.n5.create_group(root / "ms.n5", attributes={"scales": [[1, 1, 1], [2, 2, 1]],
                                                            "pixelResolution": {"dimensions": [8, 8, 30], "unit": "nm"}},
                               mode="w")
    shardstore.n5.create(root / "ms.n5", "s0", shape=(4, 16, 16), dtype="uint16", block_size=(4, 8, 8), mode="w",
                         attributes={"downsamplingFactors": [1, 1, 1]})
    shardstore.n5.create(root / "ms.n5", "s1", shape=(4, 8, 8), dtype="uint16", block_size=(4, 8, 8), mode="w",
                         attributes={"downsamplingFactors": [2, 2, 1]})
    shardstore.precomputed.create(root / "img", data_type="uint8", scales=[
        {"size": [10, 12, 14], "resolution": [4, 4, 40]}, {"size": [5, 6, 14], "resolution": [8, 8, 40]}], mode="w")
    shardstore.precomputed.create(root / "seg", data_type="uint32", type="segmentation", scales=[
        {"size": [10, 12, 14], "resolution": [6, 6, 30]}], mode="w")
    shardstore.bcolz.create(root / "table.bcolz", data=np.arange(10), mode="w")
    deep = root / "a" / "b" / "c" / "d" / "e"
    shardstore.zarr3.create(deep / "too-deep.zarr", shape=(2,), dtype="uint8", chunks=(2,), mode="w")
    shardstore.zarr3.create(root / ".hidden" / "x.zarr", shape=(2,), dtype="uint8", chunks=(2,), mode="w")
    outside = root.parent / "outside"
    shardstore.zarr3.create(outside / "out.zarr", shape=(2,), dtype="uint8", chunks=(2,), mode="w")
    (root / "link-out").symlink_to(outside)
    return root


@pytest.fixture(scope="module")
def found(tree: Path) -> dict[str, Dataset]:
    return {d.path: d for d in find_datasets(LocalSource(tree))}


def test_find_datasets_walks_groups_and_stops_at_datasets(found: dict[str, Dataset]) -> None:
    assert sorted(found) == ["em.zarr", "grp/a", "grp/sub/b", "img", "labels.zarr", "ms.n5", "ome.zarr", "seg",
                             "table.bcolz", "vol.n5/raw"]


def test_depth_limit_hidden_dirs_and_outside_links_are_not_walked(tree: Path) -> None:
    paths = {d.path for d in find_datasets(LocalSource(tree), max_depth=6)}
    assert "a/b/c/d/e/too-deep.zarr" in paths  # found when deep enough...
    assert not any(p.startswith((".hidden", "link-out")) for p in paths)
    assert "a/b/c/d/e/too-deep.zarr" not in {d.path for d in find_datasets(LocalSource(tree), max_depth=4)}


def test_root_dataset_is_named_after_the_directory(tree: Path) -> None:
    (d,) = find_datasets(LocalSource(tree / "em.zarr"))
    assert (d.path, d.name, d.source(URL)) == ("", "em.zarr", f"zarr3://{URL}")


def test_descriptions(found: dict[str, Dataset]) -> None:
    em = found["em.zarr"]
    assert (em.format, em.dtype, em.layer_type, em.dims, em.shape, em.voxel_size, em.units) == (
        "zarr3", "uint16", "image", ("x", "y", "z"), (8, 6, 4), (1.0, 1.0, 1.0), ("", "", ""))
    labels = found["labels.zarr"]  # unnamed axes: Neuroglancer's "dim_i", fastest first
    assert (labels.layer_type, labels.dims, labels.shape) == ("segmentation", ("dim_2", "dim_1", "dim_0"), (8, 6, 4))
    ome = found["ome.zarr"]
    assert (ome.levels, ome.dims, ome.voxel_size, ome.units, ome.shape) == (
        2, ("x", "y", "z"), (0.25, 0.25, 0.5), ("micrometer",) * 3, (16, 16, 8))
    n5 = found["vol.n5/raw"]  # N5 order is x, y, z: the reverse of the C-order shape
    assert (n5.format, n5.name, n5.dims, n5.shape, n5.voxel_size, n5.units) == (
        "n5", "raw", ("x", "y", "z"), (30, 20, 10), (4.0, 5.0, 40.0), ("nm",) * 3)
    ms = found["ms.n5"]
    assert (ms.levels, ms.dtype, ms.shape, ms.voxel_size) == (2, "uint16", (16, 16, 4), (8.0, 8.0, 30.0))
    img, seg = found["img"], found["seg"]
    assert (img.layer_type, img.levels, img.voxel_size, img.units) == ("image", 2, (4.0, 4.0, 40.0), ("nm",) * 3)
    assert (seg.layer_type, seg.dtype) == ("segmentation", "uint32")
    assert (found["table.bcolz"].viewable, found["table.bcolz"].source(URL)) == (False, None)


def test_source_strings(found: dict[str, Dataset]) -> None:
    assert found["em.zarr"].source(URL) == "zarr3://http://127.0.0.1:8000/em.zarr/"
    assert found["vol.n5/raw"].source(URL) == "n5://http://127.0.0.1:8000/vol.n5/raw/"
    assert found["img"].source(URL) == "precomputed://http://127.0.0.1:8000/img/"


# -- the state ---------------------------------------------------------------------------------
def test_state_has_one_layer_per_viewable_dataset(found: dict[str, Dataset]) -> None:
    state = neuroglancer_state(list(found.values()), URL)
    layers = {ly["name"]: ly for ly in state["layers"]}
    assert set(layers) == {"em.zarr", "a", "b", "img", "labels.zarr", "ms.n5", "ome.zarr", "seg", "raw"}
    assert layers["seg"]["type"] == layers["labels.zarr"]["type"] == "segmentation"
    assert "shader" not in layers["seg"]
    assert layers["img"]["source"] == "precomputed://http://127.0.0.1:8000/img/"
    ranges = {name: ly["shaderControls"]["normalized"]["range"] for name, ly in layers.items() if ly["type"] == "image"}
    assert ranges == {"em.zarr": [0, 65535], "a": [0, 1], "b": [-128, 127], "img": [0, 255], "ms.n5": [0, 65535],
                      "ome.zarr": [0, 255], "raw": [0, 255]}
    assert all("invlerp normalized" in ly["shader"] for ly in layers.values() if ly["type"] == "image")


def test_state_dimensions_carry_the_voxel_size(found: dict[str, Dataset]) -> None:
    state = neuroglancer_state([found["img"]], URL)
    assert state["dimensions"] == {"x": [4e-9, "m"], "y": [4e-9, "m"], "z": [4e-8, "m"]}
    assert state["crossSectionScale"] == pytest.approx(12 / 800)  # the larger of x, y in 800 px
    state = neuroglancer_state([found["ome.zarr"]], URL)
    assert state["dimensions"] == {"x": [pytest.approx(2.5e-7), "m"], "y": [pytest.approx(2.5e-7), "m"],
                                   "z": [pytest.approx(5e-7), "m"]}
    state = neuroglancer_state([found["em.zarr"]], URL)  # no unit in the metadata: unitless
    assert state["dimensions"] == {"x": [1.0, ""], "y": [1.0, ""], "z": [1.0, ""]}
    assert list(state["dimensions"]) == ["x", "y", "z"]  # x-like first: the xy panel shows x, y


def test_state_zoom_fits_the_largest_dataset_in_global_units(found: dict[str, Dataset]) -> None:
    # img: 10 x 12 voxels of 4 nm; seg: 10 x 12 of 6 nm; the global x, y are img's 4 nm
    state = neuroglancer_state([found["img"], found["seg"]], URL, viewport=100)
    assert state["crossSectionScale"] == pytest.approx(12 * 6 / 4 / 100)


def test_layer_names_are_unique_and_urls_may_differ() -> None:
    d = Dataset("a/x.zarr", "zarr3", "uint8", "image", ("x",), (1.0,), ("",), (4,))
    e = Dataset("b/x.zarr", "zarr3", "uint8", "image", ("x",), (1.0,), ("",), (4,))
    state = neuroglancer_state([d, e], ["http://h:1/", "http://h:2/"])
    assert [(ly["name"], ly["source"]) for ly in state["layers"]] == [
        ("x.zarr", "zarr3://http://h:1/a/x.zarr/"), ("x.zarr (2)", "zarr3://http://h:2/b/x.zarr/")]
    with pytest.raises(ValueError, match="2 datasets"):
        neuroglancer_state([d, e], ["http://h:1/"])


def test_extra_members_win() -> None:
    d = Dataset("v", "precomputed", "uint8", "image", ("x", "y", "z"), (1.0,) * 3, ("nm",) * 3, (4, 4, 4))
    state = neuroglancer_state([d], URL, layout="4panel", extra={"crossSectionScale": 3, "position": [1, 2, 3]})
    assert (state["layout"], state["crossSectionScale"], state["position"]) == ("4panel", 3, [1, 2, 3])


@pytest.mark.parametrize("dtype, expected", [("uint8", [0, 255]), ("uint16", [0, 65535]), ("int16", [-32768, 32767]),
                                             ("float32", [0, 1]), ("float64", [0, 1])])
def test_contrast_range(dtype: str, expected: list[float]) -> None:
    assert contrast_range(dtype) == expected


def test_link_round_trips_the_state(found: dict[str, Dataset]) -> None:
    state = neuroglancer_state(list(found.values()), URL)
    link = neuroglancer_link(state, "http://127.0.0.1:8000/v/ng/")
    parts = urlsplit(link)
    assert link.startswith("http://127.0.0.1:8000/v/ng/#!")
    assert "#" not in parts.fragment and " " not in link and "\n" not in link
    assert json.loads(unquote(parts.fragment[1:])) == json.loads(json.dumps(state))


# -- Range headers and URL paths ---------------------------------------------------------------
@pytest.mark.parametrize("header, expected", [
    ("bytes=0-9", RangeBR(0, 10)), ("bytes=5-", OffsetBR(5)), ("bytes=-7", SuffixBR(7)),
    ("BYTES = 3 - 4", RangeBR(3, 5)), (None, None), ("", None), ("bytes=9-3", None), ("bytes=0-1,4-5", None),
    ("bits=0-1", None), ("bytes=-", None), ("bytes=x-1", None),
])
def test_parse_range(header: str | None, expected: object) -> None:
    assert parse_range(header) == expected


def test_satisfiable() -> None:
    assert satisfiable(RangeBR(5, 100), 10) == (5, 10)
    assert satisfiable(SuffixBR(100), 10) == (0, 10)
    for br in (RangeBR(10, 11), OffsetBR(10), SuffixBR(0)):
        with pytest.raises(Unsatisfiable):
            satisfiable(br, 10)
    with pytest.raises(Unsatisfiable):
        satisfiable(SuffixBR(3), 0)


@pytest.mark.parametrize("path, key", [("/a/b", "a/b"), ("/a%20b/c", "a b/c"), ("/a//b/", "a/b"),
                                       ("/a/b?x=1", "a/b"), ("/v/ng/main.js", "v/ng/main.js")])
def test_key_from_path(path: str, key: str) -> None:
    assert key_from_path(path) == key


@pytest.mark.parametrize("path", ["/", "/..", "/a/../b", "/%2e%2e/x", "/a%2Fb", "/a%5Cb", "/%00", "/a/./b",
                                  "/%ff%fe"])
def test_key_from_path_refuses(path: str) -> None:
    with pytest.raises((InvalidKeyError, UnicodeDecodeError)) as e:
        key_from_path(path)
    if isinstance(e.value, InvalidKeyError):
        assert repr(path) in str(e.value)


def test_key_from_path_below_a_mount() -> None:
    assert key_from_path("/v/ng/index.html", "/v/ng/") == "index.html"
    with pytest.raises(InvalidKeyError, match="not below"):
        key_from_path("/other", "/v/ng/")


def test_local_source_resolve_refuses_links_out(tree: Path) -> None:
    src = LocalSource(tree)
    assert src.resolve("em.zarr/zarr.json") == os.path.realpath(tree / "em.zarr" / "zarr.json")
    assert src.resolve("link-out/out.zarr/zarr.json") is None
