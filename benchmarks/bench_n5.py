"""N5 benchmark: shardstore vs tensorstore vs z5py, in one run.

Every library writes and reads the same deterministic EM-like uint8 volume (default 512^3;
see ``_common.make_volume``) as an N5 dataset ``data`` in a fresh container, blocks of 64^3.
Two compression variants: ``raw`` and ``gzip`` level 1 (N5 ``{"type": "gzip", "level": 1}``).
z5py runs with ``n_threads`` = the CPU count (its default is 1); tensorstore with a cache pool
of 0 bytes (no chunk cache), as in bench_zarr3.py.

Phases per variant and library (the same as bench_zarr3.py; see its docstring): write (fresh
child process, whole volume, includes creation), size on disk, whole read cold (page cache
dropped before each repetition) and warm, 256 reads of 64^3 boxes at random block-aligned
origins, 256 reads of 100^3 boxes at random origins. Timings are the best of ``--repeat``
(default 3, the write included); the libraries take turns at every repetition of every phase
(``_common.bench_volumes``), so that a slow spell of the shared machine hits them alike.
The ratio column divides shardstore's figure by the best of tensorstore and z5py in the run
(> 1 is better for MB/s and reads/s; < 1 is better for size and RSS). The median ratio
does the same with each library's median repetition: best-of-N favours a library whose
repetitions scatter widely, and the two columns together show when a ratio is a coin flip.

Usage: python benchmarks/bench_n5.py [--quick] [--libs shardstore,tensorstore,z5py]
       [--variants raw,gzip] [--size 512] [--reads 256] [--repeat N] [--out-dir DIR]
       [--keep] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    Origin,
    bench_volumes,
    box,
    child_write as _child_write,
    format_table,
    make_volume,
    random_origins,
)

BLOCK = 64
COMPRESSIONS = {"raw": {"type": "raw"}, "gzip": {"type": "gzip", "level": 1}}



class ShardStore:
    package = "shardstore"

    def __init__(self) -> None:
        import shardstore

        self.n5 = shardstore.n5

    def write(self, path: Path, vol: np.ndarray, variant: str) -> None:
        a = self.n5.create(str(path), "data", shape=vol.shape, dtype="uint8",
                           block_size=(BLOCK,) * vol.ndim, compression=COMPRESSIONS[variant], mode="w")
        a[...] = vol

    def open(self, path: Path) -> Any:
        return self.n5.open(str(path), "data", mode="r")

    def read_all(self, h: Any) -> np.ndarray:
        return np.asarray(h)

    def read_box(self, h: Any, origin: Origin, n: int) -> np.ndarray:
        return h[box(origin, n)]


class TensorStore:
    """tensorstore indexes N5 in ``dimensions`` (x-first) order: the transposed view."""

    package = "tensorstore"

    def __init__(self) -> None:
        import tensorstore

        self.ts = tensorstore
        self.context = tensorstore.Context({"cache_pool": {"total_bytes_limit": 0}})

    def _spec(self, path: Path) -> dict[str, Any]:
        return {"driver": "n5", "kvstore": {"driver": "file", "path": str(path / "data")}}

    def write(self, path: Path, vol: np.ndarray, variant: str) -> None:
        metadata = {"dimensions": list(vol.shape[::-1]), "blockSize": [BLOCK] * vol.ndim,
                    "dataType": "uint8", "compression": COMPRESSIONS[variant]}
        a = self.ts.open({**self._spec(path), "metadata": metadata}, create=True,
                         delete_existing=True, context=self.context).result()
        a.write(vol.transpose()).result()

    def open(self, path: Path) -> Any:
        return self.ts.open(self._spec(path), open=True, read=True, context=self.context).result().T

    def read_all(self, h: Any) -> np.ndarray:
        return h.read(order="C").result()

    def read_box(self, h: Any, origin: Origin, n: int) -> np.ndarray:
        return h[box(origin, n)].read(order="C").result()


class Z5py:
    package = "z5py"

    def __init__(self) -> None:
        import z5py

        self.z5py = z5py
        self.threads = os.cpu_count() or 1

    def write(self, path: Path, vol: np.ndarray, variant: str) -> None:
        f = self.z5py.File(str(path), mode="w")
        opts = {"level": 1} if variant == "gzip" else {}
        ds = f.create_dataset("data", shape=vol.shape, chunks=(BLOCK,) * vol.ndim, dtype="uint8",
                              compression=variant, n_threads=self.threads, **opts)
        ds[...] = vol

    def open(self, path: Path) -> Any:
        ds = self.z5py.File(str(path), mode="r")["data"]
        ds.n_threads = self.threads
        return ds

    def read_all(self, h: Any) -> np.ndarray:
        return h[...]

    def read_box(self, h: Any, origin: Origin, n: int) -> np.ndarray:
        return h[box(origin, n)]


LIBS = {"shardstore": ShardStore, "tensorstore": TensorStore, "z5py": Z5py}
ROWS = [  # (result key, table label, higher is better)
    ("write_MBps", "write MB/s", True),
    ("read_cold_MBps", "read cold MB/s", True),
    ("read_warm_MBps", "read warm MB/s", True),
    ("aligned_reads_per_s", "64^3 aligned reads/s", True),
    ("unaligned_reads_per_s", "100^3 unaligned reads/s", True),
    ("disk_MiB", "size on disk MiB", False),
    ("rss_peak_MiB", "peak RSS write MiB", False),
]


def child_write(lib: str, variant: str, path: str, volume: str) -> None:
    """The write phase, in its own process (see ``_common.child_write``)."""
    _child_write(LIBS[lib](), variant, path, volume)


def best_other(values: dict[str, float | None], higher: bool) -> float | None:
    others = [v for k, v in values.items() if k != "shardstore" and v is not None]
    if not others:
        return None
    return max(others) if higher else min(others)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--reads", type=int, default=256)
    p.add_argument("--repeat", type=int, default=None, help="best of N (default 3)")
    p.add_argument("--variants", default="raw,gzip")
    p.add_argument("--libs", default="shardstore,tensorstore,z5py")
    p.add_argument("--out-dir", type=Path, default=None)
    p.add_argument("--keep", action="store_true")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--quick", action="store_true", help="smoke test: size 128, 32 reads, 1 repetition")
    p.add_argument("--child-write", nargs=3, metavar=("LIB", "VARIANT", "DIR"), help=argparse.SUPPRESS)
    p.add_argument("--volume", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.size, args.reads, args.repeat = 128, 32, args.repeat or 1
    args.libs = [s for s in args.libs.split(",") if s]
    args.variants = [s for s in args.variants.split(",") if s]
    for value, known in ((args.libs, LIBS), (args.variants, COMPRESSIONS)):
        if unknown := set(value) - set(known):
            p.error(f"unknown {sorted(unknown)}; choose from {sorted(known)}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child_write:
        child_write(*args.child_write, volume=args.volume)
        return
    write_repeat = read_repeat = args.repeat or 3
    made_dir = args.out_dir is None
    out_dir = Path(tempfile.mkdtemp(prefix="bench_n5_", dir="/tmp")) if made_dir else args.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    env = {"python": platform.python_version(), "cpus": os.cpu_count(), "loadavg": os.getloadavg(),
           **{f"{k}_version": version(v.package) for k, v in LIBS.items() if k in args.libs},
           "numpy_version": np.__version__}
    config = {"size": args.size, "reads": args.reads, "write_repeat": write_repeat,
              "read_repeat": read_repeat, "block": BLOCK, "out_dir": str(out_dir)}
    print(f"# {json.dumps(config)}\n# {json.dumps(env)}", flush=True)
    vol = make_volume(args.size)
    npy = out_dir / "source.npy"
    np.save(npy, vol)
    origins = {
        "aligned": random_origins(vol.shape, min(BLOCK, args.size), args.reads, align=BLOCK, seed=1),
        "unaligned": random_origins(vol.shape, min(100, args.size), args.reads, seed=2),
    }
    adapters = {name: LIBS[name]() for name in args.libs}
    results: dict[str, dict[str, Any]] = {}
    try:
        for variant in args.variants:
            results[variant] = {}
            t0 = time.perf_counter()
            paths = {name: out_dir / f"{variant}_{name}.n5" for name in adapters}
            results[variant] = bench_volumes(__file__, adapters, variant, paths, vol, npy, origins,
                                             write_repeat, read_repeat, BLOCK)
            for name, res in results[variant].items():
                resident = res["resident_after_drop"]
                print(f"# {variant}/{name}: cache drop: {res['cache_drop']}, resident after drop: "
                      f"{'n/a' if resident is None else f'{resident:.1%}'}", flush=True)
            print(f"# {variant}: all libraries done in {time.perf_counter() - t0:.1f}s", flush=True)
            if not args.keep:
                for path in paths.values():
                    shutil.rmtree(path, ignore_errors=True)
            rows = []
            for key, label, higher in ROWS:
                values = {n: results[variant][n][key] for n in args.libs}
                best = best_other(values, higher)
                if "shardstore" in values and best:
                    values["best other"] = best
                    values["ratio"] = values["shardstore"] / best
                    medians = {n: results[variant][n].get(f"{key}_median") for n in args.libs}
                    if None not in medians.values() and (best_median := best_other(medians, higher)):
                        values["median ratio"] = medians["shardstore"] / best_median
                rows.append((label, values))
            title = (f"\nN5, {args.size}^3 uint8, block {BLOCK}^3, compression "
                     f"{json.dumps(COMPRESSIONS[variant])} (ratio = shardstore / best of the others, "
                     f"best repetitions; median ratio: the same of the median repetitions)")
            print(format_table(title, rows, [*args.libs, "best other", "ratio", "median ratio"]), flush=True)
    finally:
        if not args.keep:
            npy.unlink(missing_ok=True)
            if made_dir:
                shutil.rmtree(out_dir, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps({"config": config, "env": env, "results": results}, indent=2))


if __name__ == "__main__":
    main()
