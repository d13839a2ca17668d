"""``downsample(..., workers=N / scheduler=ADDRESS)`` and ``--workers`` / ``--scheduler``: the
blocks run on local processes or a Dask cluster, and every level is identical to the one built
by one process (and to the NumPy reference), for each format, anisotropic and odd sizes."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from test_downsample import SHARDING, _ome_group, _precomputed, image, reference, segmentation

import shardstore
from shardstore.cli import main
from shardstore.ops import downsample


def _levels(open_level, count: int) -> list[np.ndarray]:
    return [np.asarray(open_level(k)) for k in range(1, count + 1)]


@pytest.mark.parametrize("kind", ["image", "segmentation"])
def test_precomputed_sharded_workers_equal_one_process(tmp_path: Path, kind: str) -> None:
    shape = (70, 45, 20)  # x, y, z; odd sizes
    x = image(shape) if kind == "image" else segmentation(shape)
    _precomputed(tmp_path / "one", x, kind, sharded=True)
    shutil.copytree(tmp_path / "one", tmp_path / "two")
    one = downsample(tmp_path / "one", (2, 2, 1), levels=3, max_memory="400K")
    two = downsample(tmp_path / "two", (2, 2, 1), levels=3, max_memory="400K", workers=2)
    # several blocks per worker, streamed levels and a buffered one written at the end
    assert two.blocks >= 4 and 1 <= two.plan.streamed < two.plan.levels
    assert two.plan.estimated_bytes <= 200 << 10  # each worker plans with half the budget
    refs = reference(x, (2, 2, 1), 3, one.method, scan="F")
    got_one = _levels(lambda k: shardstore.precomputed.open(tmp_path / "one", scale=k)[..., 0], 3)
    got_two = _levels(lambda k: shardstore.precomputed.open(tmp_path / "two", scale=k)[..., 0], 3)
    for want, a, b in zip(refs, got_one, got_two):
        np.testing.assert_array_equal(a, want)
        np.testing.assert_array_equal(b, want)


def test_ome_zarr_workers_equal_reference(tmp_path: Path) -> None:
    x = segmentation((21, 70, 45))  # z, y, x
    _ome_group(tmp_path / "seg.zarr", x)
    r = downsample(tmp_path / "seg.zarr", (2, 2, 2), levels=3, max_memory="512K", workers=2)
    assert r.method == "mode" and r.blocks >= 4
    for k, want in enumerate(reference(x, (2, 2, 2), 3, "mode"), start=1):
        np.testing.assert_array_equal(shardstore.open(tmp_path / "seg.zarr" / str(k))[...], want)


def test_n5_workers_equal_reference(tmp_path: Path) -> None:
    x = image((20, 37, 50))  # z, y, x
    a = shardstore.n5.create(tmp_path, "vol/s0", shape=x.shape, dtype="uint8", block_size=(8, 16, 16))
    a[...] = x
    r = downsample(tmp_path / "vol", (2, 2, 1), levels=2, max_memory="512K", workers=2)
    assert r.blocks >= 4
    for k, want in enumerate(reference(x, (1, 2, 2), 2, "mean"), start=1):
        np.testing.assert_array_equal(shardstore.open(tmp_path / "vol" / f"s{k}")[...], want)


def test_cli_on_a_dask_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                               monkeypatch: pytest.MonkeyPatch) -> None:
    distributed = pytest.importorskip("distributed")
    # a stuck run fails with the report of its pending tasks and their stacks, well before
    # pytest-timeout's 300 s ends it with none (the tasks take about a second)
    monkeypatch.setenv("SHARDSTORE_TASK_STALL_SECONDS", "90")
    x = segmentation((40, 36, 18))
    _precomputed(tmp_path / "seg", x, "segmentation", sharded=True)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        assert main(["downsample", str(tmp_path / "seg"), "--factor", "2,2,1", "--levels", "2",
                     "--max-memory", "256K", "--scheduler", cluster.scheduler_address, "--no-progress"]) == 0
    assert "mode pyramid of 2 level(s)" in capsys.readouterr().out
    for k, want in enumerate(reference(x, (2, 2, 1), 2, "mode", scan="F"), start=1):
        np.testing.assert_array_equal(shardstore.precomputed.open(tmp_path / "seg", scale=k)[..., 0], want)


@pytest.mark.parametrize("value", ["0", "-2", "two"])
def test_cli_workers_must_be_a_positive_number(tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str) -> None:
    with pytest.raises(SystemExit):
        main(["downsample", str(tmp_path), "--workers", value])
    assert "--workers" in capsys.readouterr().err


def test_workers_below_one_refused_from_python(tmp_path: Path) -> None:
    with pytest.raises(shardstore.ShardStoreError, match="at least 1"):
        downsample(tmp_path, workers=0)


def test_unreachable_scheduler_fails_clearly_before_changing_anything(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dask = pytest.importorskip("dask")
    pytest.importorskip("distributed")
    x = image((32, 32, 8))
    _precomputed(tmp_path / "img", x, "image", sharded=False)
    downsample(tmp_path / "img", (2, 2, 1), levels=1)
    before = shardstore.precomputed.read_info(tmp_path / "img")
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        # port 9 (discard) has no listener on the test machines: the connection is refused
        code = main(["downsample", str(tmp_path / "img"), "--factor", "2,2,1", "--levels", "2",
                     "--scheduler", "tcp://127.0.0.1:9", "--no-progress"])
    assert code == 2
    assert "cannot reach the Dask scheduler at 'tcp://127.0.0.1:9'" in capsys.readouterr().err
    assert shardstore.precomputed.read_info(tmp_path / "img") == before  # the old pyramid is kept
    np.testing.assert_array_equal(shardstore.precomputed.open(tmp_path / "img", scale=1)[..., 0],
                                  reference(x, (2, 2, 1), 1, "mean", scan="F")[0])


@pytest.mark.parametrize("factor,workers", [((2, 2, 1), 1), ((2, 2, 1), 2), ((2, 2, 2), 2)])
def test_precomputed_streamed_levels_are_written_as_whole_shards(tmp_path: Path, factor: tuple[int, ...],
                                                                 workers: int) -> None:
    """Each shard of a streamed level lies inside one block's footprint, so it is written once,
    whole, by one block: no worker reads back and rewrites another's shard. (A precomputed
    shard is a run of compressed Morton codes: its extent is not simply the footprint's.)"""
    from shardstore.formats.precomputed.driver import morton_codes

    x = segmentation((128, 128, 64))
    scale = {"size": [128, 128, 64], "chunk_size": [16, 16, 16], "encoding": "compressed_segmentation",
             "sharding": SHARDING}
    shardstore.precomputed.create(tmp_path, data_type="uint64", type="segmentation", scales=[scale])[...] = x[..., None]
    r = downsample(tmp_path, factor, levels=3, max_memory="12M", workers=workers)
    info = shardstore.precomputed.read_info(tmp_path)
    checked = 0
    for level, footprint in enumerate(r.plan.footprints(), start=1):
        if footprint is None:
            continue
        s = info["scales"][level]
        chunk = s["chunk_sizes"][0]
        grid = [-(-n // c) for n, c in zip(s["size"], chunk)]
        shard = morton_codes(tuple(grid)) >> (s["sharding"]["preshift_bits"] + s["sharding"]["minishard_bits"])
        coords = [a.reshape(-1, order="F") for a in np.meshgrid(*(np.arange(g) for g in grid), indexing="ij")]
        block = [c * k // f for c, k, f in zip(coords, chunk, footprint[:3])]
        owner = np.ravel_multi_index(block, [max(b) + 1 for b in block])
        pairs = np.unique(np.stack([shard, owner.astype(np.uint64)]), axis=1)
        assert pairs.shape[1] == np.unique(shard).size, f"level {level}: a shard spans blocks"
        assert np.unique(shard).size > 1 and np.unique(owner).size > 1 and np.unique(shard).size < shard.size
        checked += 1
    assert checked >= 1
    for k, want in enumerate(reference(x, factor, 3, "mode", scan="F"), start=1):
        np.testing.assert_array_equal(shardstore.precomputed.open(tmp_path, scale=k)[..., 0], want)
