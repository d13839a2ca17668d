"""bcolz carray benchmark: shardstore vs bcolz vs python-blosc2 (SChunk and NDArray).

A 1-D int32 carray of smooth data (default 200,000,000 elements), default cparams
(lz4, clevel 5, byte shuffle) for every library, each with its own default threading
(printed: 2 threads each on a 2-core machine):

- append: created empty, then appended in 1,000,000-element pieces (bcolz and shardstore:
  ``append`` + a final ``flush``; blosc2 SChunk: ``append_data`` of 4 MB chunks; blosc2
  NDArray: preallocated to the full length, filled piece by piece: it has no append);
- whole read, cold (page cache dropped first, the same way for every library, and the array
  opened afresh; the best of ``--cold-repeat`` reads, default 3, the libraries taking turns: one
  cold read of ~50 ms per run moved its ratio by 0.76-1.30 between runs) and warm;
- ``--reads`` random 1000-element slice reads, one at a time;
- the **format floor** (``format_floor``, in a child process, at shardstore's chunk length):
  what any writer or reader of one blosc file per chunk must at least do, with nothing around
  it, and shardstore's ratios against it (the figures a one-file layout beats are bound by it).

The machine this runs on is shared, and its load changes within seconds. So that every
library meets the same load, the libraries take turns at a fine grain: each piece is
appended to every library in turn (the order rotating), the warm read is done three times
per library in rotating turns (median kept), and the slice reads go in batches of 1,000, each
batch read by every library in turn. Every figure is measured ``--runs`` times; the table
gives the median figures, names the best anchor row (bcolz, blosc2 SChunk, blosc2 NDArray) of
each and shardstore's ratio against it (above 1 = shardstore better, for size too); below it,
the median of the per-run ratios against each run's best anchor row. ``shardstore+cache``
(an ``IOConfig`` with the decoded-chunk cache) is skipped with the reason printed when the
installed shardstore has none. The anchors run with their own default threading, which is
their fastest documented configuration here (all cores); a 1-D array has no input order.

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
from _common import (  # noqa: E402
    MB,
    Row,
    add_row_arguments,
    anchor_table,
    build_adapters,
    disk_usage,
    drop_page_cache,
    run_child,
    select_rows,
    shardstore_kwargs,
    shardstore_rows,
    turns,
)


def smooth_piece(start: int, n: int) -> np.ndarray:
    x = np.arange(start, start + n, dtype=np.float64)
    return (np.sin(x / 50_000.0) * 1e6 + x / 1000.0).astype(np.int32)


def make_source(n: int, piece: int) -> np.ndarray:
    source = np.empty(n, dtype=np.int32)
    for i in range(0, n, piece):
        source[i : i + piece] = smooth_piece(i, min(piece, n - i))
    return source


class Shardstore:
    def __init__(self, config: dict[str, Any] | None = None) -> None:
        from shardstore import bcolz as sbz

        self.kw = shardstore_kwargs(config, sbz.carray, sbz.open)

    def create(self, path: Path, n: int, piece_nbytes: int) -> Any:
        from shardstore import bcolz as sbz

        return sbz.carray(None, rootdir=path, dtype="i4", expectedlen=n, **self.kw)

    def add(self, h: Any, piece: np.ndarray) -> None:
        h.append(piece)

    def finish(self, h: Any) -> None:
        h.flush()

    def open(self, path: Path) -> Any:
        from shardstore import bcolz as sbz

        return sbz.open(path, mode="r", **self.kw)

    def read_all(self, h: Any) -> np.ndarray:
        return h[:]

    def read_slice(self, h: Any, start: int, n: int) -> np.ndarray:
        return h[start : start + n]


class Bcolz(Shardstore):
    def __init__(self) -> None:
        pass

    def create(self, path: Path, n: int, piece_nbytes: int) -> Any:
        import bcolz

        return bcolz.carray(np.empty(0, "i4"), rootdir=str(path), expectedlen=n, mode="w")

    def open(self, path: Path) -> Any:
        import bcolz

        return bcolz.open(str(path), mode="r")


def _blosc2_cparams() -> dict[str, Any]:
    import blosc2

    return {"codec": blosc2.Codec.LZ4, "clevel": 5, "filters": [blosc2.Filter.SHUFFLE], "typesize": 4}


class Blosc2SChunk:
    def create(self, path: Path, n: int, piece_nbytes: int) -> Any:
        import blosc2

        return blosc2.SChunk(chunksize=piece_nbytes, urlpath=str(path), mode="w", cparams=_blosc2_cparams())

    def add(self, h: Any, piece: np.ndarray) -> None:
        h.append_data(piece)

    def finish(self, h: Any) -> None:
        pass  # every append_data is in the file

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
    def __init__(self) -> None:
        pass

    def create(self, path: Path, n: int, piece_nbytes: int) -> Any:
        import blosc2

        return [blosc2.empty((n,), dtype=np.int32, urlpath=str(path), mode="w", cparams=_blosc2_cparams()), 0]

    def add(self, h: Any, piece: np.ndarray) -> None:
        arr, pos = h
        arr[pos : pos + len(piece)] = piece
        h[1] = pos + len(piece)

    def finish(self, h: Any) -> None:
        pass

    def open(self, path: Path) -> Any:
        import blosc2

        return blosc2.open(str(path), mode="r")


ADAPTERS = {"shardstore": Shardstore, "bcolz": Bcolz, "blosc2_schunk": Blosc2SChunk, "blosc2_ndarray": Blosc2NDArray}
ROWS = [  # each anchor runs with its own default threading, which is also its fastest
    *shardstore_rows(),
    Row("bcolz", "bcolz", note="bcolz-zipline, blosc threads = its ncores default"),
    Row("blosc2_schunk", "blosc2_schunk", note="python-blosc2 SChunk, one file"),
    Row("blosc2_ndarray", "blosc2_ndarray", note="python-blosc2 NDArray, one file"),
]
FIGURES = [  # (key, label, higher is better)
    ("append_MBps", "append MB/s", True),
    ("read_cold_MBps", "whole read cold MB/s", True),
    ("read_warm_MBps", "whole read warm MB/s", True),
    ("slices_per_s", "1000-elem slices/s", True),
    ("disk_MiB", "size on disk MiB", False),
]


def bench_run(adapters: dict[str, Any], out_dir: Path, pieces: list[np.ndarray], n: int, starts: np.ndarray,
              source: np.ndarray, run: int, floor: bool = False, cold_repeat: int = 3) -> dict[str, dict[str, float]]:
    """One run of every measurement for every row, the rows taking turns; with ``floor``,
    also ``format_floor`` (as the row "format floor") at shardstore's chunk length. The cold
    whole read is the best of ``cold_repeat`` (rows in turns), as the format floor's."""
    libs = list(adapters)
    paths = {name: out_dir / name for name in libs}
    spent = dict.fromkeys(libs, 0.0)
    handles = {}
    for name in libs:
        shutil.rmtree(paths[name], ignore_errors=True)
        if paths[name].exists():
            paths[name].unlink()
        t0 = time.perf_counter()
        handles[name] = adapters[name].create(paths[name], n, pieces[0].nbytes)
        spent[name] += time.perf_counter() - t0
    for i, piece in enumerate(pieces):  # append: every piece to every library in turn
        for name in turns(libs, i + run):
            t0 = time.perf_counter()
            adapters[name].add(handles[name], piece)
            spent[name] += time.perf_counter() - t0
    for name in turns(libs, run):
        t0 = time.perf_counter()
        adapters[name].finish(handles[name])
        spent[name] += time.perf_counter() - t0
    del handles
    out = {name: {"append_MBps": source.nbytes / MB / spent[name]} for name in libs}
    opened = {}
    cold: dict[str, list[float]] = {name: [] for name in libs}
    for rep in range(cold_repeat):  # cold: the cache dropped and the array opened afresh before each read
        for name in turns(libs, rep + run):
            p = paths[name]
            if rep == 0:
                out[name]["disk_MiB"] = (disk_usage(p)[0] if p.is_dir() else p.stat().st_size) / 2**20
            _drop(p)
            opened[name] = adapters[name].open(p)
            _touch(source.nbytes)
            t0 = time.perf_counter()
            data = adapters[name].read_all(opened[name])
            cold[name].append(time.perf_counter() - t0)
            if rep == 0 and not np.array_equal(data, source):
                raise AssertionError(f"{name}: whole read differs from the source")
            del data
    for name in libs:
        out[name]["read_cold_MBps"] = source.nbytes / MB / min(cold[name])
        for s in starts[:3]:
            if not np.array_equal(adapters[name].read_slice(opened[name], int(s), 1000), source[s : s + 1000]):
                raise AssertionError(f"{name}: slice at {s} differs")
    warm: dict[str, list[float]] = {name: [] for name in libs}
    for rep in range(3):  # warm: three reads per library, in turns; the median counts
        for name in turns(libs, rep + run):
            t0 = time.perf_counter()
            adapters[name].read_all(opened[name])
            warm[name].append(time.perf_counter() - t0)
    slices = dict.fromkeys(libs, 0.0)
    batch = 1000
    for b, lo in enumerate(range(0, len(starts), batch)):  # slices: batches read in turns
        part = [int(s) for s in starts[lo : lo + batch]]
        for name in turns(libs, b + run):
            a, h = adapters[name], opened[name]
            t0 = time.perf_counter()
            for s in part:
                a.read_slice(h, s, 1000)
            slices[name] += time.perf_counter() - t0
    for name in libs:
        out[name]["read_warm_MBps"] = source.nbytes / MB / statistics.median(warm[name])
        out[name]["slices_per_s"] = len(starts) / slices[name]
    if floor:
        from shardstore.config import IOConfig

        chunklen = next(opened[name].chunklen for name in libs if adapters[name].__class__ is Shardstore)
        # in a child process: c-blosc's global thread count it sets, and the memory it uses,
        # stay out of the rows' later runs
        out["format floor"] = run_child(__file__, [
            "--child-floor", str(chunklen), str(out_dir / "floor"), str(IOConfig.io_reads_in_flight),
            "--n", str(n), "--piece", str(len(pieces[0])), "--cold-repeat", str(cold_repeat)])
    return out


def format_floor(source: np.ndarray, chunklen: int, scratch: Path, io_threads: int, cold_repeat: int = 3) -> dict[str, float]:
    """What any reader or writer of bcolz's layout (one blosc file per chunk) must at least do,
    done with nothing around it, as MB/s of the uncompressed data (the figures' unit):

    - ``floor_append_MBps``: every chunk compressed with c-blosc (numcodecs, the cparams
      of every row) and written to a file of its own, on one thread per core;
    - ``floor_io_read_cold_MBps``: those files read into memory after the page cache is
      dropped, ``io_threads`` at a time: the raw I/O of a cold whole read;
    - ``floor_read_cold_MBps``: the same, each file also decompressed into its place in a
      new result array: a minimal reader. (The result is allocated per read, as every row's
      read returns a new array: decompressing into memory already faulted in, as this did
      until session 28, skipped ~20 % of a read's CPU that no reader returning an array can.)

    A library of the format can come close to these but not beat them; a one-file format
    (blosc2) is not bound by them."""
    from concurrent.futures import ThreadPoolExecutor

    from numcodecs import blosc

    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    starts = range(0, len(source), chunklen)
    files = [scratch / f"__{k}.blp" for k in range(len(starts))]
    cores = os.cpu_count() or 1
    blosc.set_nthreads(1)  # (the threads here: one per core)

    def write(k: int) -> None:
        data = blosc.compress(source[starts[k] : starts[k] + chunklen], b"lz4", 5, blosc.SHUFFLE)
        with open(files[k], "wb") as f:
            f.write(data)

    out: dict[str, float] = {}
    os.sync()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(cores) as pool:
        list(pool.map(write, range(len(files))))
    out["floor_append_MBps"] = source.nbytes / MB / (time.perf_counter() - t0)

    def read(k: int) -> bytes:
        with open(files[k], "rb") as f:
            return f.read()

    def read_decoded(k: int) -> None:
        blosc.decompress(read(k), result[starts[k] : starts[k] + chunklen])

    for key, fn, threads in (("floor_io_read_cold_MBps", read, io_threads),
                             ("floor_read_cold_MBps", read_decoded, max(io_threads, cores))):
        best = float("inf")
        for _ in range(cold_repeat):  # (the best, as the rows' cold reads)
            drop_page_cache(scratch)
            _touch(source.nbytes)
            t0 = time.perf_counter()
            result = np.empty_like(source)  # (untouched by the raw I/O pass: no page is faulted in)
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(fn, range(len(files))))
            best = min(best, time.perf_counter() - t0)
        out[key] = source.nbytes / MB / best
    if not np.array_equal(result, source):
        raise AssertionError("format floor: the minimal reader's result differs from the source")
    shutil.rmtree(scratch, ignore_errors=True)
    return out


def _touch(nbytes: int) -> None:
    """Allocate, write and free ``nbytes`` of memory, so that the next read's result lands in
    memory this process has used before. On this VM the first use of fresh memory costs a
    host page fault per page: the first library to read 800 MB in the process paid about
    1 s for it (measured: blosc2 NDArray 235 MB/s cold when first, 1,640 MB/s otherwise)."""
    np.ones(nbytes, dtype=np.uint8)


def _drop(path: Path) -> None:
    """The same eviction for every library: ``drop_page_cache`` (global ``drop_caches`` when
    permitted, which also evicts code pages; else per file), also for blosc2's single file."""
    if path.is_dir():
        drop_page_cache(path)
        return
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
        return
    except OSError:
        pass
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _threads() -> str:
    """Each library's threading (its own default; the codec threads of shardstore)."""
    out = []
    try:
        from shardstore._sync import codec_pool_size

        out.append(f"shardstore codec threads={codec_pool_size()}")
    except ImportError:
        pass
    try:
        import blosc2

        out.append(f"blosc2 nthreads={blosc2.nthreads}")
    except ImportError:
        pass
    try:
        import bcolz

        out.append(f"bcolz blosc nthreads={bcolz.ncores}")  # (set by bcolz at import)
    except (ImportError, AttributeError):
        pass
    return ", ".join(out)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=200_000_000, help="elements (default 200,000,000)")
    p.add_argument("--piece", type=int, default=1_000_000, help="elements per append (default 1,000,000)")
    p.add_argument("--reads", type=int, default=10_000, help="random slice reads (default 10,000)")
    p.add_argument("--runs", type=int, default=3, help="repetitions; ratios are medians over runs")
    p.add_argument("--cold-repeat", type=int, default=3,
                   help="cold whole reads per run and row, in turns; the best counts (default 3)")
    add_row_arguments(p, ROWS)
    p.add_argument("--out-dir", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--child-floor", nargs=3, metavar=("CHUNKLEN", "DIR", "IO_THREADS"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child_floor:
        chunklen, scratch, io_threads = args.child_floor
        print(json.dumps(format_floor(make_source(args.n, args.piece), int(chunklen), Path(scratch), int(io_threads),
                                      args.cold_repeat)))
        return
    rows = select_rows(ROWS, [s for s in args.libs.split(",") if s])
    out_dir = args.out_dir or Path(tempfile.mkdtemp(prefix="bench_bcolz_", dir="/tmp"))
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    source = make_source(args.n, args.piece)
    pieces = [source[i : i + args.piece] for i in range(0, args.n, args.piece)]
    starts = np.random.default_rng(1).integers(0, args.n - 1000, args.reads)
    print(f"# n={args.n} piece={args.piece} reads={args.reads} runs={args.runs} cpus={os.cpu_count()} "
          f"loadavg={os.getloadavg()} (data made in {time.perf_counter() - t0:.1f}s)\n# {_threads()}", flush=True)
    adapters = build_adapters(rows, ADAPTERS, args)
    rows = [r for r in rows if r.name in adapters]
    libs = list(adapters)
    runs: list[dict[str, dict[str, float]]] = []
    try:
        for r in range(args.runs):
            res = bench_run(adapters, out_dir, pieces, args.n, starts, source, r + args.turn, floor=any(
                adapters[name].__class__ is Shardstore for name in libs), cold_repeat=max(args.cold_repeat, 1))
            for name in res:
                print(f"# run {r} {name}: {json.dumps({k: round(v, 1) for k, v in res[name].items()})}", flush=True)
            runs.append(res)
    finally:
        if args.out_dir is None:
            shutil.rmtree(out_dir, ignore_errors=True)
    median = {lib: {k: statistics.median(run[lib][k] for run in runs) for k, _, _ in FIGURES} for lib in libs}
    table, vs_best = anchor_table(f"\nbcolz carray, {args.n:,} int32 (median figure over {args.runs} runs)",
                                  FIGURES, median, rows)
    print(table)
    # median of per-run ratios (the noisy machine moves all rows together within a run)
    anchors = [r.name for r in rows if not r.ours]
    paired: dict[str, dict[str, float]] = {}
    for row in rows:
        if row.ours and anchors:
            paired[row.name] = {key: statistics.median(
                run[row.name][key] / max(run[a][key] for a in anchors) for run in runs) for key, _, _ in FIGURES[:4]}
            print(f"median per-run ratio {row.name} / best anchor row (> 1 = shardstore faster): "
                  + ", ".join(f"{label} {paired[row.name][key]:.2f}" for key, label, _ in FIGURES[:4]))
    floors = floor_ratios(runs, [r.name for r in rows if r.ours])
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"out_dir": str(out_dir), "json": str(args.json)},
                                         "runs": runs, "vs_best_anchor": vs_best, "paired": paired,
                                         "vs_format_floor": floors},
                                        indent=2, default=str))


#: (figure of a row, the format floor's figure it is bound by)
FLOORS = [("append_MBps", "floor_append_MBps"), ("read_cold_MBps", "floor_read_cold_MBps"),
          ("read_cold_MBps", "floor_io_read_cold_MBps")]


def floor_ratios(runs: list[dict[str, dict[str, float]]], ours: list[str]) -> dict[str, dict[str, float]]:
    """Print and return, per shardstore row, the median over the runs of its figure / the
    format floor's (``format_floor``) for the figures the layout bounds."""
    runs = [run for run in runs if "format floor" in run]
    if not runs:
        return {}
    print("\nformat floor (one blosc file per chunk, nothing around it; median over runs): "
          + ", ".join(f"{k} {statistics.median(run['format floor'][k] for run in runs):,.0f}"
                      for k in runs[0]["format floor"]))
    result: dict[str, dict[str, float]] = {}
    for name in ours:
        result[name] = {f"{fig} / {floor}": statistics.median(run[name][fig] / run["format floor"][floor] for run in runs)
                        for fig, floor in FLOORS}
        print(f"median per-run ratio {name} / format floor: "
              + ", ".join(f"{k} {v:.2f}" for k, v in result[name].items()))
    return result


if __name__ == "__main__":
    main()
