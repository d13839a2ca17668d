"""``shardstore convert`` vs tensorstore (and dask + zarr-python) on three conversions.

Data: ``make_volume(size)`` (uint8, EM-like; default 1024^3 = 1 GiB), written once as

- (a) a sharded Neuroglancer precomputed volume, 64^3 chunks (igneous' sharding parameters),
  converted to Zarr v3 with 64^3 chunks in 256^3 shards, zstd level 3;
- (b) Zarr v3, 64^3 chunks in 256^3 shards, zstd 3, resharded to 512^3 shards, same codecs
  (shardstore copies the chunk bytes: the verbatim path);
- (c) N5, 64^3 blocks, gzip level 1, converted to Zarr v3 (64^3 in 256^3 shards, zstd 3).

Each run is a fresh child process; it reports wall seconds, CPU seconds (user + system of the
child and its worker processes) and peak RSS (VmHWM, or the largest worker's). Rows:

- ``shardstore x1`` / ``x2``: ``shardstore.convert(src, dst, ..., workers=N)`` with
  ``--max-memory``, unpinned: every process may use every core (the default a user gets);
- ``shardstore x1 pinned`` / ``x2 pinned``: the scale-out figure. ``x1 pinned`` runs on one
  core (``os.sched_setaffinity``, as ``taskset -c``), ``x2 pinned`` gives each of its two worker
  processes a core of its own (the spawned workers claim one each as they start, see
  ``_pin_spawned_worker``). Their ratio says how the work splits over processes that own
  whole shards, without the one process's threads already using the second core;
- ``tensorstore``: open source and destination, copy in shard-aligned blocks, each block in its
  own transaction (as tensorstore's documentation advises for sharded writes);
- ``dask+zarr``, (b) only: ``da.from_zarr(src).rechunk(512^3)`` stored into a zarr-python
  sharded array (``lock=False``: the blocks are whole shards).

``--repeat N`` runs every row N times, the order of the rows rotating from one repetition to
the next (a slow spell of the shared machine then hits every row alike); the table gives the
median of each figure. igneous is not an anchor: it writes precomputed only (no Zarr
destination for (a)), and this script has no ``--anchor-python`` to run it elsewhere.

    python benchmarks/bench_convert.py [--size 1024] [--max-memory 2G] [--repeat 3] [--workdir DIR]
        [--rows "shardstore x1,shardstore x2,shardstore x1 pinned,shardstore x2 pinned,tensorstore,dask+zarr"]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import format_table, make_volume, peak_rss_mib, run_child  # noqa: E402

SHARD_A = 256
SHARD_B = 512
ZSTD = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 3, "checksum": False}}]


# --------------------------------------------------------------------------- data (parent)

def prepare(work: Path, size: int) -> dict[str, str]:
    import shardstore
    from shardstore.formats.precomputed.scales import sharding_for_scale

    paths = {"a": str(work / "a.precomputed"), "b": str(work / "b.zarr"), "c": str(work / "c.n5")}
    if all(Path(p).exists() for p in paths.values()):
        return paths
    vol = make_volume(size)  # [z, y, x]
    shape = vol.shape
    sharding = sharding_for_scale(shape[::-1], [64] * 3, "uint8")
    a = shardstore.precomputed.create(paths["a"], data_type="uint8", mode="w", scales=[{
        "size": list(shape[::-1]), "chunk_size": [64] * 3, "encoding": "raw", "sharding": sharding}])
    a[..., 0] = vol.T
    b = shardstore.zarr3.create(paths["b"], shape=shape, dtype="uint8", chunks=(64,) * 3, shards=(SHARD_A,) * 3,
                                codecs=ZSTD, mode="w")
    b[...] = vol
    c = shardstore.n5.create(paths["c"], shape=shape, dtype="uint8", block_size=(64,) * 3,
                             compression={"type": "gzip", "level": 1}, mode="w")
    c[...] = vol
    return paths


# --------------------------------------------------------------------------- runs (child)

def run_shardstore(case: str, src: str, dst: str, max_memory: str, workers: int) -> dict[str, Any]:
    import shardstore

    shards = (SHARD_B if case == "b" else SHARD_A,) * 3
    kw: dict[str, Any] = {} if case == "b" else {"compression": "zstd:3"}
    r = shardstore.convert(src, dst, shards=shards, max_memory=max_memory, workers=workers, overwrite=True, **kw)
    return {"verbatim": r.chunks_verbatim, "reencoded": r.chunks_reencoded}


def _ts_source(case: str, src: str) -> Any:
    import tensorstore as ts

    if case == "a":
        s = ts.open({"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file", "path": src}}).result()
        return s[..., 0].T  # [x, y, z, c] -> [z, y, x]
    if case == "b":
        return ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": src}}).result()
    return ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": src}}).result().T  # N5 order -> C order


def run_tensorstore(case: str, src: str, dst: str) -> dict[str, Any]:
    import itertools

    import tensorstore as ts

    source = _ts_source(case, src)
    shape = list(source.shape)
    shard = SHARD_B if case == "b" else SHARD_A
    out = ts.open({
        "driver": "zarr3", "kvstore": {"driver": "file", "path": dst}, "create": True, "delete_existing": True,
        "metadata": {"shape": shape, "data_type": "uint8",
                     "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [shard] * 3}},
                     "codecs": [{"name": "sharding_indexed", "configuration": {
                         "chunk_shape": [64] * 3, "codecs": ZSTD,
                         "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]}}]},
    }).result()
    for z, y, x in itertools.product(*(range(0, n, shard) for n in shape)):
        region = tuple(slice(o, min(o + shard, n)) for o, n in zip((z, y, x), shape))
        with ts.Transaction() as txn:
            out.with_transaction(txn)[region].write(source[region]).result()
    return {}


def run_dask(src: str, dst: str) -> dict[str, Any]:
    import dask.array as da
    import zarr
    from zarr.codecs import ZstdCodec

    z = zarr.open_array(src, mode="r")
    x = da.from_zarr(z).rechunk((SHARD_B,) * 3)
    out = zarr.create_array(dst, shape=z.shape, dtype=z.dtype, chunks=(64,) * 3, shards=(SHARD_B,) * 3,
                            compressors=[ZstdCodec(level=3)], overwrite=True)
    da.store(x, out, lock=False)
    return {}


#: set in a child whose worker processes each take a core: a directory of claimed slots
PIN_DIR_ENV = "BENCH_CONVERT_PIN_DIR"
#: the cores to hand out, comma-separated
PIN_CORES_ENV = "BENCH_CONVERT_PIN_CORES"


def _pin_spawned_worker() -> None:
    """In a worker spawned by ``convert(workers=N)``: take the first free core of
    ``PIN_CORES_ENV`` (claimed by creating a slot file, so two workers never share one)."""
    import os

    cores = [int(c) for c in os.environ[PIN_CORES_ENV].split(",")]
    for slot in range(len(cores)):
        try:
            os.close(os.open(os.path.join(os.environ[PIN_DIR_ENV], str(slot)), os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            continue
        os.sched_setaffinity(0, {cores[slot]})
        return
    raise RuntimeError("more worker processes than cores to pin them to")


# spawn imports the parent's main script as ``__mp_main__`` in each worker before it runs a
# task: the one place a benchmark can act in the workers without the library knowing
if __name__ == "__mp_main__" and os.environ.get(PIN_DIR_ENV):
    _pin_spawned_worker()


def child(args: list[str]) -> None:
    lib, case, src, dst, max_memory, workers, pinned = args
    import importlib

    if pinned == "1":
        cores = sorted(os.sched_getaffinity(0))
        if int(workers) == 1:
            os.sched_setaffinity(0, {cores[0]})  # before the imports: thread pools see one CPU
        else:
            os.environ[PIN_DIR_ENV] = tempfile.mkdtemp(prefix="bench-convert-pin-")
            os.environ[PIN_CORES_ENV] = ",".join(map(str, cores[:int(workers)]))
    for module in {"shardstore": ["shardstore"], "tensorstore": ["tensorstore"]}.get(lib, ["dask.array", "zarr"]):
        importlib.import_module(module)  # imports are not part of the timing
    import resource

    def cpu() -> float:
        return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                      resource.getrusage(resource.RUSAGE_CHILDREN)))

    c0, t0 = cpu(), time.perf_counter()
    if lib == "shardstore":
        extra = run_shardstore(case, src, dst, max_memory, int(workers))
    elif lib == "tensorstore":
        extra = run_tensorstore(case, src, dst)
    else:
        extra = run_dask(src, dst)
    seconds = time.perf_counter() - t0
    cpu_s = cpu() - c0  # worker processes have been joined: RUSAGE_CHILDREN holds them
    # worker processes (shardstore x2) count too: the largest of this process and its children
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    load = os.getloadavg()[0]  # the shared machine's runnable threads over the last minute, ours included
    print(json.dumps({"seconds": seconds, "cpu_s": cpu_s, "rss_mib": max(peak_rss_mib(), children), "load": load,
                      **extra}))


# --------------------------------------------------------------------------- table (parent)

#: row name -> (library, workers, pinned)
ROWS: dict[str, tuple[str, int, bool]] = {
    "shardstore x1": ("shardstore", 1, False),
    "shardstore x2": ("shardstore", 2, False),
    "shardstore x1 pinned": ("shardstore", 1, True),
    "shardstore x2 pinned": ("shardstore", 2, True),
    "tensorstore": ("tensorstore", 1, False),
    "dask+zarr": ("dask+zarr", 1, False),
}
#: (numerator, denominator) rows of the ratio columns: denominator seconds / numerator seconds
RATIOS = [("shardstore x1", "tensorstore"), ("shardstore x1", "dask+zarr"), ("shardstore x2", "shardstore x1"),
          ("shardstore x2 pinned", "shardstore x1 pinned")]


def _markdown(results: dict[str, dict[str, list[dict[str, Any]]]], rows: list[str]) -> str:
    """One line per case and row: median seconds, CPU s, utilisation, largest RSS, the machine's
    load average at the end of the runs, and the ratios (median seconds of the other row / this
    row's)."""
    lines = ["| case | row | runs | s (median) | CPU s | CPU s / s | peak RSS MiB | load | ratio |",
             "|---|---|---|---|---|---|---|---|---|"]
    for case, by_row in results.items():
        med = {r: statistics.median(x["seconds"] for x in runs) for r, runs in by_row.items()}
        for row in rows:
            runs = by_row.get(row)
            if not runs:
                continue
            cpu = statistics.median(x["cpu_s"] for x in runs)
            rss = max(x["rss_mib"] for x in runs)
            loads = [x["load"] for x in runs if "load" in x]
            load = f"{statistics.median(loads):.1f}" if loads else "-"
            ratios = [f"{med[den] / med[num]:.2f} vs {den}" for num, den in RATIOS if num == row and den in med]
            lines.append(f"| ({case}) | {row} | {len(runs)} | {med[row]:.2f} | {cpu:.2f} | {cpu / med[row]:.2f} | "
                         f"{rss:,.0f} | {load} | {'; '.join(ratios) or '-'} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", type=int, default=1024, help="edge of the uint8 volume (1024: 1 GiB)")
    p.add_argument("--max-memory", default="2G", help="shardstore's --max-memory")
    p.add_argument("--workdir", help="keep data here (default: a temporary directory)")
    p.add_argument("--cases", default="abc")
    p.add_argument("--repeat", type=int, default=1, help="runs of every row (the table gives medians)")
    p.add_argument("--rows", default=",".join(ROWS), help="comma-separated rows, of: " + ", ".join(ROWS))
    p.add_argument("--json", help="write every run's figures here")
    ns = p.parse_args()
    rows = [r.strip() for r in ns.rows.split(",") if r.strip()]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        p.error(f"unknown rows {unknown}; choose from {list(ROWS)}")
    work = Path(ns.workdir) if ns.workdir else Path(tempfile.mkdtemp(prefix="bench-convert-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    paths = prepare(work, ns.size)
    print(f"data ready in {time.perf_counter() - t0:.0f} s: {ns.size}^3 uint8 in {work}", flush=True)
    mb = ns.size ** 3 / 1e6
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for case in ns.cases:
        case_rows = [r for r in rows if ROWS[r][0] != "dask+zarr" or case == "b"]
        by_row = results.setdefault(case, {})
        for rep in range(max(1, ns.repeat)):
            k = rep % len(case_rows)
            for name in case_rows[k:] + case_rows[:k]:
                lib, workers, pinned = ROWS[name]
                dst = work / f"out-{case}-{lib}-{workers}.zarr"
                res = run_child(__file__, ["child", lib, case, paths[case], str(dst), ns.max_memory, str(workers),
                                           "1" if pinned else "0"])
                shutil.rmtree(dst, ignore_errors=True)
                by_row.setdefault(name, []).append(res)
                print(f"  ({case}) {name}: {res['seconds']:.1f} s, {mb / res['seconds']:.0f} MB/s, "
                      f"CPU {res['cpu_s']:.1f} s, peak RSS {res['rss_mib']:.0f} MiB"
                      + (f", {res['verbatim']} verbatim / {res['reencoded']} re-encoded chunks"
                         if "verbatim" in res else ""), flush=True)
    table_rows = []
    for case, by_row in results.items():
        table_rows.append((f"({case}) MB/s", {r: mb / statistics.median(x["seconds"] for x in v) for r, v in by_row.items()}))
    print(format_table(f"convert, {ns.size}^3 uint8, --max-memory {ns.max_memory}, MB/s (median of {ns.repeat})",
                       table_rows, rows, ratios=RATIOS))
    print(_markdown(results, rows))
    if ns.json:
        Path(ns.json).write_text(json.dumps(results, indent=1))
    if not ns.workdir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child(sys.argv[2:])
    else:
        main()
