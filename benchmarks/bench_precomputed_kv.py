"""Sharded uint64 key-value store benchmark: shardstore vs tensorstore vs CloudVolume, in one run.

Data: ``--keys`` (default 200,000) distinct random uint64 keys, each with 200-2000 random bytes
(seeded). Layout for every library: ``neuroglancer_uint64_sharded_v1``, murmurhash3_x86_128,
preshift 0, 16 shards x 64 minishards (shard_bits 4, minishard_bits 6), gzip minishard
indexes, raw data.

Phases per library (libraries inner, runs outer, so drift hits all alike):

1. **bulk write**: every key into a new, empty directory in one batch. shardstore:
   ``kv.update(values)``; tensorstore: the ``neuroglancer_uint64_sharded`` kvstore, all writes
   in one transaction, then commit; CloudVolume: ``synthesize_shard_files`` (it can only build
   whole shards) and writing the files, which is what its uploader does. Data ends in the
   page cache (no fsync).
2. **point reads**: ``--reads`` (default 10,000) random stored keys read one at a time
   (``kv[k]``; ``kvs.read(k).result()``; ``ShardReader.get_data(k)``), on a freshly opened
   handle, so the shard and minishard indexes are loaded during the run. Before each read
   phase every file of the dataset is read once (page cache warm; the page cache of a shared
   machine may be dropped by anything else running).
3. **get_many**: the same keys all at once (``kv.get_many``; all ``read`` futures issued, then
   awaited; ``get_data(list)``), on a fresh handle, with the page cache warm and then cold
   (``_common.drop_page_cache`` first: the issue's "batched point reads, cold").

Rows (``--libs`` takes libraries or row names): ``tensorstore`` with its default cache pool of
0 bytes (it then reads the minishard index again for every key) and ``tensorstore+cache``
(256 MiB, so it caches minishard indexes); ``cloudvolume`` (its ShardReader keeps its own LRU
of indexes); ``shardstore`` and ``shardstore+cache`` (an ``IOConfig`` with its decoded-chunk
cache; skipped with the reason printed when the installed shardstore has none).

Every figure is a rate (MB/s of values written, reads/s); the table gives each row's median
over ``--runs`` runs, names the best anchor row of each figure and each shardstore row's ratio
against it (above 1: shardstore better); below it, the median over runs of each run's ratio
against that run's best anchor row. Every read is checked
against the written values once.

Usage: python benchmarks/bench_precomputed_kv.py [--quick] [--runs 3] [--keys 200000]
       [--reads 10000] [--libs shardstore,tensorstore,cloudvolume] [--shardstore-config JSON]
       [--shardstore-cache-config JSON] [--out-dir DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import struct
import sys
import tempfile
import time
import types
from importlib.metadata import version
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
    drop_page_cache,
    select_rows,
    shardstore_kwargs,
    shardstore_rows,
    tensorstore_rows,
    turns,
)

SPEC = {
    "@type": "neuroglancer_uint64_sharded_v1",
    "hash": "murmurhash3_x86_128",
    "preshift_bits": 0,
    "minishard_bits": 6,
    "shard_bits": 4,
    "minishard_index_encoding": "gzip",
    "data_encoding": "raw",
}


def make_data(n: int, seed: int = 0) -> dict[int, bytes]:
    rng = np.random.default_rng(seed)
    keys = np.unique(rng.integers(0, 2**64, size=n + n // 10, dtype=np.uint64, endpoint=False))
    keys = rng.permutation(keys)[:n]
    sizes = rng.integers(200, 2001, size=n)
    blob = rng.bytes(int(sizes.sum()))
    ends = np.cumsum(sizes).tolist()
    starts = [0, *ends[:-1]]
    return {int(k): blob[s:e] for k, s, e in zip(keys.tolist(), starts, ends)}


class ShardstoreKV:
    def __init__(self, config: dict[str, Any] | None = None) -> None:
        from shardstore.formats.precomputed.kv import open_kv

        self._open = open_kv
        self.kw = shardstore_kwargs(config, open_kv)

    def write(self, path: Path, values: dict[int, bytes]) -> None:
        self._open(path, sharding=SPEC, mode="w", **self.kw).update(values)

    def open(self, path: Path) -> Any:
        return self._open(path, sharding=SPEC, **self.kw)

    def read_one(self, h: Any, key: int) -> bytes:
        return h[key]

    def read_many(self, h: Any, keys: list[int]) -> list[bytes]:
        got = h.get_many(keys)
        return [got[k] for k in keys]


class TensorstoreKV:
    def __init__(self, cache_bytes: int = 0) -> None:
        import tensorstore as ts

        self.ts = ts
        self.cache_bytes = cache_bytes

    def _open(self, path: Path) -> Any:
        return self.ts.KvStore.open({
            "driver": "neuroglancer_uint64_sharded",
            "base": f"file://{path}/",
            "metadata": SPEC,
            "context": {"cache_pool": {"total_bytes_limit": self.cache_bytes}},
        }).result()

    def write(self, path: Path, values: dict[int, bytes]) -> None:
        kvs = self._open(path)
        pack = struct.Struct(">Q").pack
        with self.ts.Transaction() as txn:
            t = kvs.with_transaction(txn)
            for k, v in values.items():
                t.write(pack(k), v)

    def open(self, path: Path) -> Any:
        return self._open(path)

    def read_one(self, h: Any, key: int) -> bytes:
        return h.read(struct.pack(">Q", key)).result().value

    def read_many(self, h: Any, keys: list[int]) -> list[bytes]:
        pack = struct.Struct(">Q").pack
        futures = [h.read(pack(k)) for k in keys]
        return [f.result().value for f in futures]


class CloudvolumeKV:
    def __init__(self) -> None:
        from cloudvolume.cacheservice import CacheService
        from cloudvolume.datasource.precomputed import sharding

        self.sharding = sharding
        self.CacheService = CacheService
        self.spec = sharding.ShardingSpecification.from_dict(SPEC)

    def write(self, path: Path, values: dict[int, bytes]) -> None:
        path.mkdir(parents=True, exist_ok=True)
        files = self.sharding.synthesize_shard_files(self.spec, dict(values))
        for name, data in files.items():
            (path / name).write_bytes(data)

    def open(self, path: Path) -> Any:
        url = f"file://{path}"
        cfg = types.SimpleNamespace(progress=False, secrets=None, parallel=1, cache_locking=False)
        cache = self.CacheService(url, enabled=False, config=cfg, meta=types.SimpleNamespace(cloudpath=url))
        return self.sharding.ShardReader(url, cache, self.spec)

    def read_one(self, h: Any, key: int) -> bytes:
        return h.get_data(key)

    def read_many(self, h: Any, keys: list[int]) -> list[bytes]:
        got = h.get_data(keys)
        return [got[k] for k in keys]


ADAPTERS = {"shardstore": ShardstoreKV, "tensorstore": TensorstoreKV, "cloudvolume": CloudvolumeKV}
ROWS = [  # every library's default configuration and its fastest documented one
    *shardstore_rows(),
    *tensorstore_rows(),
    Row("cloudvolume", "cloudvolume", {}, note="ShardReader with its own LRU of indexes"),
]
FIGURES = [  # (key, label, higher is better): every figure is a rate
    ("bulk write MB/s", "bulk write MB/s", True),
    ("point reads/s", "point reads/s", True),
    ("get_many reads/s", "get_many reads/s", True),
    ("get_many reads/s cold", "get_many reads/s cold", True),
]


def warm_page_cache(path: Path) -> None:
    """Read every file of the dataset once, so reads are timed against the page cache (the
    machine's page cache is shared and may have been dropped by anything running meanwhile)."""
    for f in sorted(path.rglob("*")):
        if f.is_file():
            with open(f, "rb") as fh:
                while fh.read(1 << 22):
                    pass


def run_once(lib: Any, path: Path, values: dict[int, bytes], probe: list[int], nbytes: int) -> dict[str, float]:
    shutil.rmtree(path, ignore_errors=True)
    t0 = time.perf_counter()
    lib.write(path, values)
    t_write = time.perf_counter() - t0

    warm_page_cache(path)
    h = lib.open(path)
    t0 = time.perf_counter()
    got = [lib.read_one(h, k) for k in probe]
    t_point = time.perf_counter() - t0
    if got != [values[k] for k in probe]:
        raise RuntimeError(f"{type(lib).__name__}: point reads returned wrong values")

    times = {}
    for temp in ("warm", "cold"):
        if temp == "warm":
            warm_page_cache(path)
        else:
            drop_page_cache(path)
        h = lib.open(path)
        t0 = time.perf_counter()
        got = lib.read_many(h, probe)
        times[temp] = time.perf_counter() - t0
        if got != [values[k] for k in probe]:
            raise RuntimeError(f"{type(lib).__name__}: get_many returned wrong values")
    return {
        "bulk write MB/s": nbytes / t_write / MB,
        "point reads/s": len(probe) / t_point,
        "get_many reads/s": len(probe) / times["warm"],
        "get_many reads/s cold": len(probe) / times["cold"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="20,000 keys, 2,000 reads, 1 run")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--keys", type=int, default=200_000)
    p.add_argument("--reads", type=int, default=10_000)
    add_row_arguments(p, ROWS)
    p.add_argument("--out-dir", default=None)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    if args.quick:
        args.keys, args.reads, args.runs = 20_000, 2_000, 1
    adapters = build_adapters(select_rows(ROWS, [s for s in args.libs.split(",") if s]), ADAPTERS, args)
    rows = [r for r in ROWS if r.name in adapters]
    libs = list(adapters)

    values = make_data(args.keys)
    nbytes = sum(map(len, values.values()))
    rng = np.random.default_rng(1)
    keys = list(values)
    probe = [keys[i] for i in rng.choice(len(keys), size=args.reads, replace=False)]
    out_dir = Path(args.out_dir) if args.out_dir else Path(tempfile.mkdtemp(prefix="bench_kv_"))
    print(f"{args.keys:,} keys, {nbytes / MB:.0f} MB of values, {args.reads:,} reads, {args.runs} runs; data in {out_dir}")

    runs: list[dict[str, dict[str, float]]] = []
    for r in range(args.runs):
        figures: dict[str, dict[str, float]] = {}
        for lib in turns(libs, r + args.turn):
            res = run_once(adapters[lib], out_dir / lib, values, probe, nbytes)
            for fig, v in res.items():
                figures.setdefault(fig, {})[lib] = v
        runs.append(figures)
        print(f"run {r + 1}: " + "; ".join(
            f"{fig}: " + ", ".join(f"{lib} {v:,.1f}" for lib, v in vals.items()) for fig, vals in figures.items()
        ), flush=True)

    med = {lib: {fig: statistics.median(run[fig][lib] for run in runs) for fig, _, _ in FIGURES} for lib in libs}
    table, vs_best = anchor_table(
        f"neuroglancer_uint64_sharded_v1 kv: {args.keys:,} keys (200-2000 B), 16 shards x 64 minishards, "
        f"gzip minishard index; medians of {args.runs} runs", FIGURES, med, rows)
    print()
    print(table)
    # the median of the per-run ratios against that run's best anchor row (the noisy machine
    # moves all rows together within a run)
    anchors = [r.name for r in rows if not r.ours]
    summary: dict[str, dict[str, Any]] = {}
    for fig, _, _ in FIGURES:
        summary[fig] = {lib: med[lib][fig] for lib in libs}
        for row in rows:
            if row.ours and anchors:
                ratios = [run[fig][row.name] / max(run[fig][a] for a in anchors) for run in runs]
                summary[fig][f"{row.name} vs best anchor"] = statistics.median(ratios)
    for row in rows:
        if row.ours and anchors:
            print(f"median per-run ratio {row.name} / best anchor row: "
                  + ", ".join(f"{fig} {summary[fig][f'{row.name} vs best anchor']:.2f}" for fig, _, _ in FIGURES))
    if args.json:
        env: dict[str, str | None] = {"python": platform.python_version(), "machine": platform.machine()}
        for pkg in ("tensorstore", "cloud-volume", "numpy", "mmh3"):
            try:
                env[pkg] = version(pkg)
            except Exception:  # noqa: BLE001 - reporting only
                env[pkg] = None
        Path(args.json).write_text(json.dumps({"args": vars(args), "env": env, "runs": runs, "summary": summary,
                                               "vs_best_anchor": vs_best}, indent=1))
    if not args.out_dir:
        shutil.rmtree(out_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
