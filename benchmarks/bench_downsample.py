"""Pyramid building: ``shardstore downsample`` vs igneous (precomputed) and ngff-zarr (OME-Zarr).

Data: ``em_like_pair`` (shardstore.demo_volume): an EM-like uint8 image and its uint64
segmentation, default 1024 x 1024 x 512 (x, y, z). Each is written once as the base of

- a sharded Neuroglancer precomputed volume (chunks 64^3; igneous' sharding parameters;
  ``raw`` image, ``compressed_segmentation`` labels), copied for each library, and
- an OME-Zarr 0.5 image (Zarr v3, chunks 64^3 in 256^3 shards, zstd) for shardstore, and the
  same layout prepared by ngff-zarr itself (``metadata_only``, then the base filled in).

Then, each in a fresh child process timed with ``/usr/bin/time -f "%e %M"`` (wall seconds,
peak RSS of the process tree's largest member) while the summed RSS of the whole process
tree (the child and its worker processes) is sampled every 50 ms:

- ``shardstore downsample PATH --factor F --levels N --max-memory M --workers W`` (precomputed
  and OME-Zarr; one row per ``--workers`` value, default 1 and 2);
- igneous: ``create_image_shard_downsample_tasks(num_mips=N, factor=F, memory_target=M)`` run
  by ``LocalTaskQueue(parallel=P)`` (``--igneous-parallel``, default the CPU count);
- ngff-zarr: ``to_multiscales`` (``dask_bin_shrink`` = mean for the image, ``dask_image_mode``
  for the labels) + ``to_ngff_zarr(start_level=1)``: only the new levels are written.

The anchors run under ``--anchor-python`` (default: this interpreter), so they can live in a
venv of their own. With ``--repeat R`` every case runs R times, the libraries alternating
(shardstore W=1, anchor, shardstore W=2, ...) on fresh copies, so that load from other jobs
on a shared machine hits them alike; each repeat's rows compare runs made back to back.

Figures: seconds per library (wall, and CPU: user + system of all its processes, which
other jobs' load disturbs less), the ratio anchor / shardstore (above 1: shardstore is faster),
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
import psutil

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

NGFF_PREPARE = textwrap.dedent("""
    # ngff-zarr's own store: its metadata for every level, then the base filled in (untimed)
    import sys, warnings
    warnings.filterwarnings("ignore")
    import numpy as np, dask.array as da, ngff_zarr as nz, zarr
    path, source, factor, levels = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    values = np.load(source, mmap_mode="r")
    fx, fy, fz = (int(f) for f in factor.split(","))
    image = nz.to_ngff_image(da.from_array(values, chunks=256), dims=["z", "y", "x"])
    scales = [{"z": fz ** k, "y": fy ** k, "x": fx ** k} for k in range(1, levels + 1)]
    ms = nz.to_multiscales(image, scale_factors=scales, chunks=64)
    nz.to_ngff_zarr(path, ms, version="0.5", chunks_per_shard=4, metadata_only=True)
    base = zarr.open_array(path + "/scale0/image", mode="r+")
    for z0 in range(0, values.shape[0], 256):
        base[z0:z0 + 256] = values[z0:z0 + 256]
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


def _tree_rss(proc: psutil.Process) -> int:
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:  # exited meanwhile
            pass
    return total


def timed(cmd: list[str]) -> dict[str, float]:
    """Run ``cmd`` under /usr/bin/time: wall seconds, CPU seconds (user + system, worker
    processes included), peak RSS of the largest process (MiB) and
    the peak of the whole tree's summed RSS (sampled every 50 ms; MiB)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:  # pipes could fill up
        proc = subprocess.Popen(["/usr/bin/time", "-f", "TIME %e %M %U %S", *cmd], stdout=out, stderr=err, text=True)
        watched, tree_peak = psutil.Process(proc.pid), 0
        while proc.poll() is None:
            try:
                tree_peak = max(tree_peak, _tree_rss(watched))
            except psutil.Error:
                pass
            time.sleep(0.05)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[:4]} failed:\n{stdout[-2000:]}\n{stderr[-4000:]}")
    line = [ln for ln in stderr.splitlines() if ln.startswith("TIME ")][-1]
    _, seconds, kib, user, system = line.split()
    return {"seconds": float(seconds), "cpu": float(user) + float(system), "rss_mib": int(kib) / 1024,
            "tree_mib": tree_peak / 2**20}


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


def prepare_ngff(args: argparse.Namespace, path: Path, values: np.ndarray, factor: str, work: Path) -> None:
    source = work / "ngff-base.npy"
    np.save(source, values)
    try:
        subprocess.run([args.anchor_python, "-c", NGFF_PREPARE, str(path), str(source), factor, str(args.levels)],
                       check=True)
    finally:
        source.unlink()


def agreement(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean(a == b)) if a.shape == b.shape else 0.0


def run_case(args: argparse.Namespace, kind: str, factor: tuple[int, ...], values: np.ndarray, work: Path) -> list[dict[str, Any]]:
    label = f"{kind} {'x'.join(map(str, factor))}"
    f_arg = ",".join(map(str, factor))
    levels = str(args.levels)
    memory = parse_size(args.max_memory)
    rows: list[dict[str, Any]] = []

    def cli(path: Path, workers: int) -> list[str]:
        return [args.shardstore_python, "-m", "shardstore", "downsample", str(path), "--factor", f_arg,
                "--levels", levels, "--max-memory", str(memory), "--workers", str(workers), "--no-progress"]

    def order(anchor: str) -> list[tuple[str, int]]:
        """shardstore W=1, the anchor, shardstore W=2, ...: the anchor between our runs."""
        ours = [("shardstore", w) for w in args.workers] if "shardstore" in args.libs else []
        theirs = [(anchor, 0)] if anchor in args.libs else []
        return ours[:1] + theirs + ours[1:]

    def rows_of(fmt: str, anchor: str, results: dict[tuple[str, int], dict[str, float]], same: float | None,
                repeat: int) -> None:
        for (lib, workers), ours in results.items():
            if lib == "shardstore":
                rows.append(_row(label, fmt, anchor, workers, repeat, ours, results.get((anchor, 0)), memory, same))
        if not any(lib == "shardstore" for lib, _ in results):
            rows.append(_row(label, fmt, anchor, None, repeat, None, results.get((anchor, 0)), memory, same))

    if "precomputed" in args.formats and {"shardstore", "igneous"} & set(args.libs):
        src = work / f"{kind}.precomputed"
        t0 = time.perf_counter()
        write_precomputed(src, values.T, kind)
        print(f"  wrote the precomputed base in {time.perf_counter() - t0:.1f} s", flush=True)
        for repeat in range(1, args.repeat + 1):
            results: dict[tuple[str, int], dict[str, float]] = {}
            copies: dict[tuple[str, int], Path] = {}
            for lib, workers in order("igneous"):
                copy = copies[lib, workers] = work / f"{kind}-{lib}-{workers}.precomputed"
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(src, copy)
                cmd = cli(copy, workers) if lib == "shardstore" else \
                    [args.anchor_python, "-c", IGNEOUS, str(copy), f_arg, levels, str(memory), str(args.igneous_parallel)]
                results[lib, workers] = timed(cmd)
                print(f"  precomputed {lib}{f' workers={workers}' if workers else ''}: {results[lib, workers]}", flush=True)
            same = None
            ours = [c for (lib, _), c in copies.items() if lib == "shardstore"]
            if ours and ("igneous", 0) in copies:
                a = np.asarray(shardstore.precomputed.open(ours[0], scale=1))
                b = np.asarray(shardstore.precomputed.open(copies["igneous", 0], scale=1))
                same = agreement(a, b)
                for other in ours[1:]:  # every --workers value builds the same pyramid
                    assert np.array_equal(a, np.asarray(shardstore.precomputed.open(other, scale=1))), other
            rows_of("precomputed", "igneous", results, same, repeat)
            if not args.keep:
                for p in copies.values():
                    shutil.rmtree(p, ignore_errors=True)
        if not args.keep:
            shutil.rmtree(src, ignore_errors=True)

    if "ome-zarr" in args.formats and {"shardstore", "ngff-zarr"} & set(args.libs):
        for repeat in range(1, args.repeat + 1):
            results = {}
            paths: dict[tuple[str, int], Path] = {}
            for lib, workers in order("ngff-zarr"):
                path = paths[lib, workers] = work / f"{kind}-{lib}-{workers}.ome.zarr"
                shutil.rmtree(path, ignore_errors=True)
                if lib == "shardstore":
                    write_ome(path, values)
                    results[lib, workers] = timed(cli(path, workers))
                else:
                    prepare_ngff(args, path, values, f_arg, work)
                    results[lib, workers] = timed([args.anchor_python, "-c", NGFF, str(path), f_arg, levels, kind])
                print(f"  OME-Zarr {lib}{f' workers={workers}' if workers else ''}: {results[lib, workers]}", flush=True)
            same = None
            ours = [p for (lib, _), p in paths.items() if lib == "shardstore"]
            if ours and ("ngff-zarr", 0) in paths:
                import zarr

                a = np.asarray(shardstore.open(ours[0] / "1"))
                b = np.asarray(zarr.open_array(str(paths["ngff-zarr", 0] / "scale1" / "image"), mode="r"))
                same = agreement(a, b)
            rows_of("OME-Zarr", "ngff-zarr", results, same, repeat)
            if not args.keep:
                for p in paths.values():
                    shutil.rmtree(p, ignore_errors=True)
    return rows


def _row(label: str, fmt: str, anchor: str, workers: int | None, repeat: int, ours: dict[str, float] | None,
         theirs: dict[str, float] | None, memory: int, same: float | None) -> dict[str, Any]:
    return {
        "case": label, "format": fmt, "anchor": anchor, "run": repeat, "workers": workers,
        "shardstore s": ours and ours["seconds"], "anchor s": theirs and theirs["seconds"],
        "ratio": (theirs["seconds"] / ours["seconds"]) if ours and theirs else None,
        "shardstore CPU s": ours and ours["cpu"], "anchor CPU s": theirs and theirs["cpu"],
        "shardstore RSS MiB (all processes)": ours and ours["tree_mib"], "max-memory MiB": memory / 2**20,
        "anchor RSS MiB (all processes)": theirs and theirs["tree_mib"],
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
    p.add_argument("--workers", default="1,2", help="shardstore --workers values, one row each (default 1,2)")
    p.add_argument("--repeat", type=int, default=1, help="run every case this many times, libraries alternating")
    p.add_argument("--anchor-python", default=sys.executable,
                   help="interpreter with igneous-pipeline / ngff-zarr (default: this one)")
    p.add_argument("--shardstore-python", default=sys.executable, help="interpreter that runs shardstore")
    p.add_argument("--out-dir", type=Path, default=None)
    p.add_argument("--keep", action="store_true")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    args.libs = args.libs.split(",")
    args.formats = args.formats.split(",")
    args.workers = [int(w) for w in args.workers.split(",")]
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
