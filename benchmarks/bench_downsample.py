"""Pyramid building: ``shardstore downsample`` vs igneous (precomputed) and ngff-zarr (OME-Zarr).

Data: ``em_like_pair`` (shardstore.demo_volume): an EM-like uint8 image and its uint64
segmentation, default 1024 x 1024 x 512 (x, y, z). Each is written once as the base of

- a sharded Neuroglancer precomputed volume (chunks 64^3; igneous' sharding parameters;
  ``raw`` image, ``compressed_segmentation`` labels), copied for each library, and
- an OME-Zarr 0.5 image (Zarr v3, chunks 64^3 in 256^3 shards, zstd) for shardstore, and the
  same layout prepared by ngff-zarr itself (``metadata_only``, then the base filled in).

Then, each in a fresh child process timed with ``/usr/bin/time -f "%e %M"`` (wall seconds,
peak RSS of the process tree's largest member):

- ``shardstore downsample PATH --factor F --levels N --max-memory M`` (precomputed and OME-Zarr);
- igneous: ``create_image_shard_downsample_tasks(num_mips=N, factor=F, memory_target=M)`` run
  by ``LocalTaskQueue(parallel=P)`` (``--igneous-parallel``, default the CPU count);
- ngff-zarr: ``to_multiscales`` (``dask_bin_shrink`` = mean for the image, ``dask_image_mode``
  for the labels) + ``to_ngff_zarr(start_level=1)``: only the new levels are written.

Figures: seconds per library, the ratio anchor / shardstore (above 1: shardstore is faster),
peak RSS against ``--max-memory``, and the share of level-1 voxels equal to shardstore's
(igneous truncates means, shardstore rounds half to even: expect ~50% equal images, differing
by one; labels must agree for 2x2x2, whose tie rule is the same).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np

import shardstore
from shardstore.demo_volume import em_like_pair, em_like_volume
from shardstore.formats.precomputed.scales import sharding_for_scale
from shardstore.ops.downsample import parse_size

KINDS = ("image", "segmentation")

IGNEOUS = textwrap.dedent("""
    import sys, warnings
    warnings.filterwarnings("ignore")
    from taskqueue import LocalTaskQueue
    import igneous.task_creation as tc
    path, factor, levels, memory, parallel = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    factor = tuple(int(f) for f in factor.split(","))
    tasks = tc.create_image_shard_downsample_tasks("file://" + path, mip=0, factor=factor, num_mips=levels,
                                                   memory_target=memory)
    tq = LocalTaskQueue(parallel=parallel, progress=False)
    tq.insert(tasks)
    tq.execute(progress=False)
""")

NGFF = textwrap.dedent("""
    import sys, warnings
    warnings.filterwarnings("ignore")
    import dask, zarr, dask.array as da, ngff_zarr as nz
    path, factor, levels, kind = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    fx, fy, fz = (int(f) for f in factor.split(","))
    scales = [{"z": fz ** k, "y": fy ** k, "x": fx ** k} for k in range(1, levels + 1)]
    method = nz.Methods.DASK_BIN_SHRINK if kind == "image" else nz.Methods.DASK_IMAGE_MODE
    base = zarr.open_array(path + "/scale0/image", mode="r")
    image = nz.to_ngff_image(da.from_zarr(base), dims=["z", "y", "x"])
    ms = nz.to_multiscales(image, scale_factors=scales, method=method, chunks=64)
    nz.to_ngff_zarr(path, ms, version="0.5", chunks_per_shard=4, start_level=1, overwrite=False)
""")


def timed(cmd: list[str]) -> dict[str, float]:
    """Run ``cmd`` under /usr/bin/time; wall seconds and peak RSS (MiB)."""
    proc = subprocess.run(["/usr/bin/time", "-f", "TIME %e %M", *cmd], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[:4]} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    line = [ln for ln in proc.stderr.splitlines() if ln.startswith("TIME ")][-1]
    _, seconds, kib = line.split()
    return {"seconds": float(seconds), "rss_mib": int(kib) / 1024}


def write_precomputed(path: Path, values_xyz: np.ndarray, kind: str) -> None:
    size = list(values_xyz.shape)
    encoding = "compressed_segmentation" if kind == "segmentation" else "raw"
    chunk = [64, 64, 64]
    a = shardstore.precomputed.create(path, data_type=values_xyz.dtype, type=kind, mode="w", scales=[{
        "size": size, "resolution": [8, 8, 8], "chunk_size": chunk, "encoding": encoding,
        "sharding": sharding_for_scale(size, chunk, values_xyz.dtype, encoding)}])
    step = 256
    for z0 in range(0, size[2], step):
        a[:, :, z0:z0 + step] = values_xyz[:, :, z0:z0 + step, None]


def write_ome(path: Path, values: np.ndarray) -> None:
    shardstore.zarr3.create_group(path, mode="w", attributes={"ome": {"version": "0.5", "multiscales": [{
        "axes": [{"name": n, "type": "space", "unit": "nanometer"} for n in "zyx"],
        "datasets": [{"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [8.0] * 3}]}]}]}})
    a = shardstore.zarr3.create(path / "0", shape=values.shape, dtype=values.dtype, chunks=(64,) * 3,
                                shards=(256,) * 3, dimension_names=["z", "y", "x"])
    for z0 in range(0, values.shape[0], 256):
        a[z0:z0 + 256] = values[z0:z0 + 256]


def prepare_ngff(path: Path, values: np.ndarray, factor: tuple[int, ...], levels: int) -> None:
    """ngff-zarr's own store: its metadata for every level, then the base filled in (untimed)."""
    import dask.array as da
    import ngff_zarr as nz
    import zarr

    fx, fy, fz = factor
    image = nz.to_ngff_image(da.from_array(values, chunks=256), dims=["z", "y", "x"])
    scales = [{"z": fz ** k, "y": fy ** k, "x": fx ** k} for k in range(1, levels + 1)]
    ms = nz.to_multiscales(image, scale_factors=scales, chunks=64)
    nz.to_ngff_zarr(str(path), ms, version="0.5", chunks_per_shard=4, metadata_only=True)
    base = zarr.open_array(str(path / "scale0" / "image"), mode="r+")
    for z0 in range(0, values.shape[0], 256):
        base[z0:z0 + 256] = values[z0:z0 + 256]


def agreement(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean(a == b)) if a.shape == b.shape else 0.0


def run_case(args: argparse.Namespace, kind: str, factor: tuple[int, ...], values: np.ndarray, work: Path) -> list[dict[str, Any]]:
    label = f"{kind} {'x'.join(map(str, factor))}"
    f_arg = ",".join(map(str, factor))
    levels = str(args.levels)
    memory = parse_size(args.max_memory)
    rows: list[dict[str, Any]] = []
    py = sys.executable
    cli = [py, "-m", "shardstore", "downsample", "--factor", f_arg, "--levels", levels,
           "--max-memory", str(memory), "--no-progress"]

    if "precomputed" in args.formats and {"shardstore", "igneous"} & set(args.libs):
        src = work / f"{kind}.precomputed"
        t0 = time.perf_counter()
        write_precomputed(src, values.T, kind)
        print(f"  wrote the precomputed base in {time.perf_counter() - t0:.1f} s", flush=True)
        results: dict[str, dict[str, float]] = {}
        copies = {}
        for lib in ("shardstore", "igneous"):
            if lib not in args.libs:
                continue
            copies[lib] = work / f"{kind}-{lib}.precomputed"
            shutil.rmtree(copies[lib], ignore_errors=True)
            shutil.copytree(src, copies[lib])
            cmd = [*cli, str(copies[lib])] if lib == "shardstore" else \
                [py, "-c", IGNEOUS, str(copies[lib]), f_arg, levels, str(memory), str(args.igneous_parallel)]
            results[lib] = timed(cmd)
            print(f"  precomputed {lib}: {results[lib]}", flush=True)
        same = None
        if len(copies) == 2:
            a = np.asarray(shardstore.precomputed.open(copies["shardstore"], 1))
            b = np.asarray(shardstore.precomputed.open(copies["igneous"], 1))
            same = agreement(a, b)
        rows.append(_row(label, "precomputed", "igneous", results, memory, same))
        if not args.keep:
            for p in [src, *copies.values()]:
                shutil.rmtree(p, ignore_errors=True)

    if "ome-zarr" in args.formats and {"shardstore", "ngff-zarr"} & set(args.libs):
        results = {}
        ours, theirs = work / f"{kind}.ome.zarr", work / f"{kind}-ngff.ome.zarr"
        if "shardstore" in args.libs:
            write_ome(ours, values)
            results["shardstore"] = timed([*cli, str(ours)])
            print(f"  OME-Zarr shardstore: {results['shardstore']}", flush=True)
        if "ngff-zarr" in args.libs:
            shutil.rmtree(theirs, ignore_errors=True)
            prepare_ngff(theirs, values, factor, args.levels)
            results["ngff-zarr"] = timed([py, "-c", NGFF, str(theirs), f_arg, levels, kind])
            print(f"  OME-Zarr ngff-zarr: {results['ngff-zarr']}", flush=True)
        same = None
        if len(results) == 2:
            import zarr

            a = np.asarray(shardstore.open(ours / "1"))
            b = np.asarray(zarr.open_array(str(theirs / "scale1" / "image"), mode="r"))
            same = agreement(a, b)
        rows.append(_row(label, "OME-Zarr", "ngff-zarr", results, memory, same))
        if not args.keep:
            shutil.rmtree(ours, ignore_errors=True)
            shutil.rmtree(theirs, ignore_errors=True)
    return rows


def _row(label: str, fmt: str, anchor: str, results: dict[str, dict[str, float]], memory: int,
         same: float | None) -> dict[str, Any]:
    ours, theirs = results.get("shardstore"), results.get(anchor)
    return {
        "case": label, "format": fmt, "anchor": anchor,
        "shardstore s": ours and ours["seconds"], "anchor s": theirs and theirs["seconds"],
        "ratio": (theirs["seconds"] / ours["seconds"]) if ours and theirs else None,
        "shardstore RSS MiB": ours and ours["rss_mib"], "max-memory MiB": memory / 2**20,
        "anchor RSS MiB": theirs and theirs["rss_mib"],
        "level 1 equal": same,
    }


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.2f}" if v < 100 else f"{v:,.0f}"
    return str(v)


def markdown_table(rows: list[dict[str, Any]]) -> str:
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_cell(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", default="1024,1024,512", help="x,y,z of the base (default 1024,1024,512)")
    p.add_argument("--levels", type=int, default=5)
    p.add_argument("--factors", default="2,2,2;2,2,1", help="factors to run, ';'-separated (x,y,z)")
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--libs", default="shardstore,igneous,ngff-zarr")
    p.add_argument("--formats", default="precomputed,ome-zarr")
    p.add_argument("--max-memory", default="1G", help="shardstore --max-memory and igneous memory_target")
    p.add_argument("--igneous-parallel", type=int, default=2)
    p.add_argument("--out-dir", type=Path, default=None)
    p.add_argument("--keep", action="store_true")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    args.libs = args.libs.split(",")
    args.formats = args.formats.split(",")
    x, y, z = (int(v) for v in args.size.split(","))
    work = args.out_dir or Path(tempfile.mkdtemp(prefix="bench-downsample-", dir="/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    kinds = args.kinds.split(",")
    if "segmentation" in kinds:
        image, labels = em_like_pair((z, y, x))
    else:  # the labels alone are 8 bytes a voxel: make them only when asked for
        image, labels = em_like_volume((z, y, x)), None
    print(f"data: {x}x{y}x{z} ({', '.join(kinds)}) in {time.perf_counter() - t0:.1f} s; work dir {work}", flush=True)
    rows = []
    for kind in kinds:
        values = image if kind == "image" else labels
        assert values is not None
        for f in args.factors.split(";"):
            factor = tuple(int(v) for v in f.split(","))
            print(f"{kind}, factor {factor}, {args.levels} levels", flush=True)
            rows.extend(run_case(args, kind, factor, values, work))
    print()
    print(markdown_table(rows))
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=1))
    if not args.keep and args.out_dir is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
