"""``downsample``: whole pyramids for precomputed, Zarr v3 (OME-Zarr 0.5) and N5, every level
equal to a NumPy reference and read by tensorstore (every level), CloudVolume (precomputed
mips); OME-Zarr metadata validated by ome-zarr-models; the CLI; bounded memory."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import shardstore
from shardstore.cli import main
from shardstore.ops import downsample, plan_pyramid
from shardstore.ops.downsample_kernels import MeanState, reduce_level

ts = pytest.importorskip("tensorstore")

SHARDING = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 3,
            "minishard_bits": 2, "shard_bits": 1, "minishard_index_encoding": "gzip", "data_encoding": "gzip"}


def image(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, shape).astype(np.uint8)


def segmentation(shape: tuple[int, ...], seed: int = 1) -> np.ndarray:
    """Blocky labels with noisy borders: mostly uniform 2x2x2 blocks, some ties."""
    rng = np.random.default_rng(seed)
    coarse = rng.integers(1, 2**40, [s // 5 + 1 for s in shape]).astype(np.uint64)
    idx = np.ix_(*[np.minimum((np.arange(s) + rng.integers(0, 2, s)) // 5, c - 1) for s, c in zip(shape, coarse.shape)])
    return coarse[idx]


def reference(x: np.ndarray, factor: tuple[int, ...], levels: int, method: str, scan: str = "C") -> list[np.ndarray]:
    out = []
    if method == "mean":
        state = MeanState.from_base(x, (0,) * x.ndim, x.shape)
        for _ in range(levels):
            state = state.next(factor)
            out.append(state.mean())
        return out
    cur = x
    for _ in range(levels):
        cur = reduce_level(cur, factor, method, scan=scan)
        out.append(cur)
    return out


def ts_read(spec: dict) -> np.ndarray:
    return ts.open(spec, read=True).result().read().result()


# --------------------------------------------------------------------------- precomputed

def _precomputed(path: Path, x: np.ndarray, kind: str, sharded: bool) -> None:
    scale = {"size": list(x.shape[:3]), "resolution": [4, 4, 40], "voxel_offset": [8, -16, 4],
             "chunk_size": [16, 16, 8]}
    if sharded:
        scale["sharding"] = SHARDING
    if kind == "segmentation":
        scale["encoding"] = "compressed_segmentation"
    a = shardstore.precomputed.create(path, data_type=x.dtype, type=kind, scales=[scale])
    a[...] = x[..., None]


@pytest.mark.parametrize("kind,sharded", [("image", True), ("segmentation", True), ("image", False)])
def test_precomputed_pyramid_read_by_tensorstore_and_cloudvolume(tmp_path: Path, kind: str, sharded: bool) -> None:
    shape = (70, 45, 20)  # x, y, z; odd sizes
    x = image(shape) if kind == "image" else segmentation(shape)
    _precomputed(tmp_path, x, kind, sharded)
    r = downsample(tmp_path, (2, 2, 1), levels=3, max_memory="200K")
    assert r.method == ("mean" if kind == "image" else "mode") and r.blocks > 1 and r.plan.streamed >= 1
    info = shardstore.precomputed.read_info(tmp_path)
    assert [s["resolution"] for s in info["scales"]] == [[4, 4, 40], [8, 8, 40], [16, 16, 40], [32, 32, 40]]
    assert [s["size"] for s in info["scales"]] == [[70, 45, 20], [35, 23, 20], [18, 12, 20], [9, 6, 20]]
    assert [s["voxel_offset"] for s in info["scales"]] == [[8, -16, 4], [4, -8, 4], [2, -4, 4], [1, -2, 4]]
    assert all(("sharding" in s) == sharded for s in info["scales"])
    refs = reference(x, (2, 2, 1), 3, r.method, scan="F")
    cloudvolume = pytest.importorskip("cloudvolume")
    warnings.filterwarnings("ignore", module="cloudvolume")
    for k, want in enumerate(refs, start=1):
        np.testing.assert_array_equal(shardstore.precomputed.open(tmp_path, k)[..., 0], want)
        got = ts_read({"driver": "neuroglancer_precomputed", "kvstore": f"file://{tmp_path}", "scale_index": k})
        np.testing.assert_array_equal(got[..., 0], want)
        cv = cloudvolume.CloudVolume(f"file://{tmp_path}", mip=k, progress=False)
        np.testing.assert_array_equal(np.asarray(cv[:, :, :])[..., 0], want)


def test_precomputed_sharding_per_level_as_igneous(tmp_path: Path) -> None:
    sharding = pytest.importorskip("cloudvolume.datasource.precomputed.sharding")
    x = image((96, 96, 48))
    _precomputed(tmp_path, x, "image", True)
    downsample(tmp_path, (2, 2, 2), levels=2)
    for s in shardstore.precomputed.read_info(tmp_path)["scales"][1:]:
        want = sharding.compute_shard_params_for_image(s["size"], s["chunk_sizes"][0], "raw", "uint8")
        assert s["sharding"] == want.to_dict()


# --------------------------------------------------------------------------- Zarr v3 / OME-Zarr

def _ome_group(path: Path, x: np.ndarray, shards: bool = True) -> None:
    shardstore.zarr3.create_group(path, mode="w")
    a = shardstore.zarr3.create(path / "0", shape=x.shape, dtype=x.dtype, chunks=(8, 16, 16),
                                shards=(16, 32, 32) if shards else None, dimension_names=["z", "y", "x"])
    a[...] = x


@pytest.mark.parametrize("method", ["mean", "mode", "max", "stride"])
def test_ome_zarr_pyramid(tmp_path: Path, method: str) -> None:
    x = (image if method != "mode" else segmentation)((21, 70, 45))  # z, y, x
    _ome_group(tmp_path / "img.zarr", x)
    r = downsample(tmp_path / "img.zarr", (2, 2, 1), levels=2, method=method, max_memory="256K")
    assert r.blocks > 1
    refs = reference(x, (1, 2, 2), 2, method)  # x, y halved: C-order axes (z, y, x)
    for k, want in enumerate(refs, start=1):
        got = ts_read({"driver": "zarr3", "kvstore": f"file://{tmp_path}/img.zarr/{k}"})
        np.testing.assert_array_equal(got, want)
        level = shardstore.open(tmp_path / "img.zarr" / str(k))
        assert level.shards is not None and level.dimension_names == ("z", "y", "x")
    ome = json.loads((tmp_path / "img.zarr" / "zarr.json").read_text())["attributes"]["ome"]
    assert ome["version"] == "0.5"
    ms = ome["multiscales"][0]
    assert [a["name"] for a in ms["axes"]] == ["z", "y", "x"] and all(a["type"] == "space" for a in ms["axes"])
    assert [d["path"] for d in ms["datasets"]] == ["0", "1", "2"]
    assert ms["datasets"][2]["coordinateTransformations"] == [
        {"type": "scale", "scale": [1.0, 4.0, 4.0]}, {"type": "translation", "translation": [0.0, 1.5, 1.5]}]


def test_ome_zarr_validates_with_ome_zarr_models(tmp_path: Path) -> None:
    zarr = pytest.importorskip("zarr")
    models = pytest.importorskip("ome_zarr_models.v05.image")
    _ome_group(tmp_path / "img.zarr", image((20, 64, 48)))
    downsample(tmp_path / "img.zarr", (2, 2, 2))  # default: until every axis fits one chunk
    model = models.Image.from_zarr(zarr.open_group(tmp_path / "img.zarr", mode="r"))
    ms = model.ome_attributes.multiscales[0]
    assert [d.path for d in ms.datasets] == ["0", "1", "2"]
    assert [a.unit for a in ms.axes] == ["nanometer"] * 3


def test_zarr_pyramid_keeps_existing_resolution_and_units(tmp_path: Path) -> None:
    x = image((16, 32, 32))
    _ome_group(tmp_path / "g", x, shards=False)
    g = shardstore.zarr3.open_group(tmp_path / "g", mode="r+")
    g.attrs["ome"] = {"version": "0.5", "multiscales": [{"axes": [
        {"name": "z", "type": "space", "unit": "micrometer"}, {"name": "y", "type": "space", "unit": "micrometer"},
        {"name": "x", "type": "space", "unit": "micrometer"}],
        "datasets": [{"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [0.5, 0.1, 0.1]}]}]}]}
    main(["downsample", str(tmp_path / "g" / "0"), "--levels", "1", "--no-progress"])
    ms = shardstore.zarr3.open_group(tmp_path / "g").attrs["ome"]["multiscales"][0]
    assert ms["axes"][0]["unit"] == "micrometer"
    assert ms["datasets"][1]["coordinateTransformations"][0]["scale"] == [1.0, 0.2, 0.2]
    assert shardstore.open(tmp_path / "g" / "1").shards is None


def test_zarr_array_without_group_is_refused_clearly(tmp_path: Path) -> None:
    shardstore.zarr3.create(tmp_path / "a.zarr", shape=(8, 8), dtype="uint8", chunks=(4, 4))
    with pytest.raises(shardstore.ShardStoreError, match="a.zarr.*no parent group"):
        downsample(tmp_path / "a.zarr", (2, 2))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.zarr"]


# --------------------------------------------------------------------------- N5

def test_n5_pyramid_attributes_and_tensorstore(tmp_path: Path) -> None:
    x = image((20, 37, 50))  # z, y, x (N5 dimensions are x, y, z)
    a = shardstore.n5.create(tmp_path, "vol/s0", shape=x.shape, dtype="uint8", block_size=(8, 16, 16),
                             attributes={"pixelResolution": {"unit": "nm", "dimensions": [4, 4, 40]}})
    a[...] = x
    r = downsample(tmp_path / "vol", (2, 2, 1), levels=2, max_memory="256K")
    assert r.blocks > 1
    for k, want in enumerate(reference(x, (1, 2, 2), 2, "mean"), start=1):
        got = ts_read({"driver": "n5", "kvstore": f"file://{tmp_path}/vol/s{k}"})
        np.testing.assert_array_equal(np.asarray(got).transpose(), want)  # tensorstore shows N5 in x, y, z
        attrs = json.loads((tmp_path / "vol" / f"s{k}" / "attributes.json").read_text())
        assert attrs["downsamplingFactors"] == [2 ** k, 2 ** k, 1]
        assert attrs["pixelResolution"] == {"unit": "nm", "dimensions": [4 * 2 ** k, 4 * 2 ** k, 40]}
    group = json.loads((tmp_path / "vol" / "attributes.json").read_text())
    assert group["scales"] == [[1, 1, 1], [2, 2, 1], [4, 4, 1]]
    assert group["pixelResolution"] == {"unit": "nm", "dimensions": [4, 4, 40]}


# --------------------------------------------------------------------------- plan, CLI

def test_plan_levels_until_and_blocks() -> None:
    p = plan_pyramid((1024, 1024, 512), 1, (2, 2, 2), until=64, unit=(256, 256, 256), max_memory=256 << 20)
    assert p.shapes[-1] == (64, 64, 32) and p.levels == 4
    assert all(b % 256 == 0 for b in p.block) and p.estimated_bytes <= 256 << 20
    small = plan_pyramid((1024, 1024, 512), 1, (2, 2, 1), levels=5, max_memory=8 << 20)
    assert small.shapes[-1] == (32, 32, 512) and small.estimated_bytes <= 8 << 20
    assert all(b % c == 0 for b, c in zip(small.block, small.cumulative[min(small.streamed, small.levels - 1)]))
    with pytest.raises(ValueError, match="some entry > 1"):
        plan_pyramid((8, 8), 1, (1, 1), levels=1)
    with pytest.raises(shardstore.ShardStoreError, match="max-memory"):
        plan_pyramid((4096,) * 3, 8, (2, 2, 2), levels=8, max_memory=1 << 20)


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    x = segmentation((40, 40, 40))
    _ome_group(tmp_path / "seg.zarr", x)
    assert main(["downsample", str(tmp_path / "seg.zarr"), "--factor", "2,2,2", "--until", "10",
                 "--max-memory", "512K", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "mode pyramid of 2 level(s)" in out and "level 2: shape (10, 10, 10)" in out
    np.testing.assert_array_equal(shardstore.open(tmp_path / "seg.zarr" / "2")[...], reference(x, (2, 2, 2), 2, "mode")[1])
    with pytest.raises(SystemExit):
        main(["downsample", str(tmp_path / "seg.zarr"), "--method", "median"])
    assert main(["downsample", str(tmp_path / "nothing")]) == 2
    assert "nothing: no array or group found" in capsys.readouterr().err


# --------------------------------------------------------------------------- memory

CHILD = textwrap.dedent("""
    import asyncio  # noqa: F401  (imported by shardstore on first use: a one-off 6.5 MiB, not the budget's)
    import sys
    from shardstore.ops import downsample

    def status(field):
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field))

    with open("/proc/self/clear_refs", "w") as f:  # reset the peak (VmHWM) to the current RSS
        f.write("5")
    before = status("VmRSS")
    r = downsample(sys.argv[1], (2, 2, 2), levels=4, method=sys.argv[3], max_memory=int(sys.argv[2]))
    print(status("VmHWM") - before, r.blocks, r.plan.estimated_bytes)
""")
RAW = [{"name": "bytes", "configuration": {"endian": "little"}}]


@pytest.mark.parametrize("method,dtype", [("mean", "uint8"), ("mode", "uint64")])
def test_peak_memory_stays_within_max_memory(tmp_path: Path, method: str, dtype: str) -> None:
    """The base is several times --max-memory; the child's peak RSS grows by less than it.
    Measured inside the child (VmHWM after resetting it): a forked child's ru_maxrss would
    include the parent's pages (RECIPES.md)."""
    budget = 16 << 20
    shape = (128, 512, 512) if dtype == "uint8" else (48, 256, 512)
    base_bytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    shardstore.zarr3.create_group(tmp_path / "g")
    a = shardstore.zarr3.create(tmp_path / "g" / "0", shape=shape, dtype=dtype, chunks=(32, 32, 32),
                                shards=(64, 64, 64), codecs=RAW)
    for z in range(0, shape[0], 16):
        a[z:z + 16] = (image((16,) + shape[1:], z) // 16).astype(dtype)  # 16 labels: many mixed blocks
    assert base_bytes >= 2 * budget
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "g"), str(budget), method],
                          capture_output=True, text=True, timeout=240, check=True)
    grew, blocks, estimate = (int(v) for v in proc.stdout.split())
    assert blocks >= 8 and estimate <= budget
    print(f"{method} {dtype}: peak RSS grew by {grew / 2**20:.1f} MiB, budget {budget / 2**20:.0f} MiB")
    assert 0 < grew <= budget, f"peak RSS grew by {grew / 2**20:.1f} MiB, budget {budget / 2**20:.0f} MiB"
    x = np.asarray(a)
    np.testing.assert_array_equal(shardstore.open(tmp_path / "g" / "4")[...], reference(x, (2, 2, 2), 4, method)[-1])
