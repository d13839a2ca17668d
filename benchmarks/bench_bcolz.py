"""bcolz carray benchmark: shardstore vs bcolz vs python-blosc2 (SChunk and NDArray).

A 1-D int32 carray of smooth data (default 200,000,000 elements), default cparams
(lz4, clevel 5, byte shuffle) for every library, each with its own default threading:

- append: created empty, then appended in 1,000,000-element pieces (bcolz: ``append`` +
  ``flush``; blosc2 SChunk: ``append_data`` of 4 MB chunks; blosc2 NDArray: preallocated to
  the full length, filled piece by piece: it has no append);
- whole read, cold (page cache dropped first) and warm;
- ``--reads`` random 1000-element slice reads, one at a time.

Every timing is repeated ``--runs`` times (libraries interleaved within a run); the tables
give per-run figures and the median of the per-run ratios shardstore/bcolz and
shardstore/best-blosc2 (higher is better for shardstore in every row).

    python benchmarks/bench_bcolz.py                      # full size
    python benchmarks/bench_bcolz.py --n 20000000 --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import MB, disk_usage, drop_page_cache, format_table  # noqa: E402

LIBS = ("shardstore", "bcolz", "blosc2_schunk", "blosc2_ndarray")


def smooth_piece(start: int, n: int) -> np.ndarray:
    x = np.arange(start, start + n, dtype=np.float64)
    return (np.sin(x / 50_000.0) * 1e6 + x / 1000.0).astype(np.int32)


class Shardstore:
    def append(self, path: Path, pieces: list[np.ndarray], n: int) -> None:
        from shardstore import bcolz as sbz

        ca = sbz.carray(None, rootdir=path, dtype="i4", expectedlen=n)
        for p in pieces:
            ca.append(p)
        ca.flush()

    def open(self, path: Path) -> Any:
        from shardstore import bcolz as sbz

        return sbz.open(path, mode="r")

    def read_all(self, h: Any) -> np.ndarray:
        return h[:]

    def read_slice(self, h: Any, start: int, n: int) -> np.ndarray:
        return h[start : start + n]


class Bcolz(Shardstore):
    def append(self, path: Path, pieces: list[np.ndarray], n: int) -> None:
        import bcolz

        ca = bcolz.carray(np.empty(0, "i4"), rootdir=str(path), expectedlen=n, mode="w")
        for p in pieces:
            ca.append(p)
        ca.flush()

    def open(self, path: Path) -> Any:
        import bcolz

        return bcolz.open(str(path), mode="r")


def _blosc2_cparams() -> dict[str, Any]:
    import blosc2

    return {"codec": blosc2.Codec.LZ4, "clevel": 5, "filters": [blosc2.Filter.SHUFFLE], "typesize": 4}


class Blosc2SChunk:
    def append(self, path: Path, pieces: list[np.ndarray], n: int) -> None:
        import blosc2

        sc = blosc2.SChunk(chunksize=pieces[0].nbytes, urlpath=str(path), mode="w", cparams=_blosc2_cparams())
        for p in pieces:
            sc.append_data(p)

    def open(self, path: Path) -> Any:
        import blosc2

        return blosc2.open(str(path), mode="r")

    def read_all(self, h: Any) -> np.ndarray:
        out = np.empty(h.nbytes // 4, dtype=np.int32)
        h.get_slice(0, len(out), out=out)
        return out

    def read_slice(self, h: Any, start: int, n: int) -> np.ndarray:
        out = np.empty(n, dtype=np.int32)
        h.get_slice(start, start + n, out=out)
        return out


class Blosc2NDArray(Shardstore):
    def append(self, path: Path, pieces: list[np.ndarray], n: int) -> None:
        import blosc2

        arr = blosc2.empty((n,), dtype=np.int32, urlpath=str(path), mode="w", cparams=_blosc2_cparams())
        pos = 0
        for p in pieces:
            arr[pos : pos + len(p)] = p
            pos += len(p)

    def open(self, path: Path) -> Any:
        import blosc2

        return blosc2.open(str(path), mode="r")


ADAPTERS = {"shardstore": Shardstore, "bcolz": Bcolz, "blosc2_schunk": Blosc2SChunk, "blosc2_ndarray": Blosc2NDArray}
ROWS = [
    ("append_MBps", "append MB/s"),
    ("read_cold_MBps", "whole read cold MB/s"),
    ("read_warm_MBps", "whole read warm MB/s"),
    ("slices_per_s", "1000-elem slices/s"),
    ("disk_MiB", "size on disk MiB"),
]


def bench_lib(name: str, path: Path, pieces: list[np.ndarray], n: int, starts: np.ndarray, source: np.ndarray) -> dict[str, float]:
    a = ADAPTERS[name]()
    shutil.rmtree(path, ignore_errors=True)
    if path.exists():
        path.unlink()
    t0 = time.perf_counter()
    a.append(path, pieces, n)
    append_s = time.perf_counter() - t0
    disk = disk_usage(path)[0] if path.is_dir() else path.stat().st_size
    drop_page_cache(path) if path.is_dir() else _drop_file(path)
    h = a.open(path)
    t0 = time.perf_counter()
    data = a.read_all(h)
    cold = time.perf_counter() - t0
    if not np.array_equal(data, source):
        raise AssertionError(f"{name}: whole read differs from the source")
    del data
    t0 = time.perf_counter()
    a.read_all(h)
    warm = time.perf_counter() - t0
    for s in starts[:3]:
        if not np.array_equal(a.read_slice(h, int(s), 1000), source[s : s + 1000]):
            raise AssertionError(f"{name}: slice at {s} differs")
    t0 = time.perf_counter()
    for s in starts:
        a.read_slice(h, int(s), 1000)
    slices = time.perf_counter() - t0
    nbytes = source.nbytes
    return {
        "append_MBps": nbytes / MB / append_s,
        "read_cold_MBps": nbytes / MB / cold,
        "read_warm_MBps": nbytes / MB / warm,
        "slices_per_s": len(starts) / slices,
        "disk_MiB": disk / 2**20,
    }


def _drop_file(path: Path) -> None:
    os.sync()
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=200_000_000, help="elements (default 200,000,000)")
    p.add_argument("--piece", type=int, default=1_000_000, help="elements per append (default 1,000,000)")
    p.add_argument("--reads", type=int, default=10_000, help="random slice reads (default 10,000)")
    p.add_argument("--runs", type=int, default=3, help="repetitions; ratios are medians over runs")
    p.add_argument("--libs", default=",".join(LIBS))
    p.add_argument("--out-dir", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    libs = [s for s in args.libs.split(",") if s]
    out_dir = args.out_dir or Path(tempfile.mkdtemp(prefix="bench_bcolz_", dir="/tmp"))
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    source = np.empty(args.n, dtype=np.int32)
    for i in range(0, args.n, args.piece):
        source[i : i + args.piece] = smooth_piece(i, min(args.piece, args.n - i))
    pieces = [source[i : i + args.piece] for i in range(0, args.n, args.piece)]
    starts = np.random.default_rng(1).integers(0, args.n - 1000, args.reads)
    print(f"# n={args.n} piece={args.piece} reads={args.reads} runs={args.runs} cpus={os.cpu_count()} "
          f"loadavg={os.getloadavg()} (data made in {time.perf_counter() - t0:.1f}s)", flush=True)
    runs: list[dict[str, dict[str, float]]] = []
    try:
        for r in range(args.runs):
            res = {}
            for name in libs:
                res[name] = bench_lib(name, out_dir / name, pieces, args.n, starts, source)
                print(f"# run {r} {name}: {json.dumps({k: round(v, 1) for k, v in res[name].items()})}", flush=True)
            runs.append(res)
            shutil.rmtree(out_dir / "x", ignore_errors=True)
    finally:
        if args.out_dir is None:
            shutil.rmtree(out_dir, ignore_errors=True)
    median = {lib: {k: statistics.median(run[lib][k] for run in runs) for k, _ in ROWS} for lib in libs}
    rows = [(label, {lib: median[lib][key] for lib in libs}) for key, label in ROWS]
    print(format_table(f"\nbcolz carray, {args.n:,} int32 (median figure over {args.runs} runs)", rows, libs))
    # median of per-run ratios (the noisy machine moves all libraries together within a run)
    b2 = [lib for lib in libs if lib.startswith("blosc2")]
    print("\nmedian per-run ratio (shardstore / other; > 1 = shardstore faster):")
    for key, label in ROWS[:4]:
        cells = []
        if "bcolz" in libs:
            cells.append(f"vs bcolz {statistics.median(run['shardstore'][key] / run['bcolz'][key] for run in runs):.2f}")
        if b2:
            best = statistics.median(run["shardstore"][key] / max(run[x][key] for x in b2) for run in runs)
            cells.append(f"vs best blosc2 {best:.2f}")
        print(f"  {label:24s} " + "   ".join(cells))
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"out_dir": str(out_dir), "json": str(args.json)}, "runs": runs}, indent=2, default=str))


if __name__ == "__main__":
    main()
