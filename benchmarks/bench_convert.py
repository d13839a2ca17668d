"""``shardstore convert`` vs tensorstore (and dask + zarr-python) on three conversions.

Data: ``make_volume(size)`` (uint8, EM-like; default 1024^3 = 1 GiB), written once as

- (a) a sharded Neuroglancer precomputed volume, 64^3 chunks (igneous' sharding parameters),
  converted to Zarr v3 with 64^3 chunks in 256^3 shards, zstd level 3;
- (b) Zarr v3, 64^3 chunks in 256^3 shards, zstd 3, resharded to 512^3 shards, same codecs
  (shardstore copies the chunk bytes: the verbatim path);
- (c) N5, 64^3 blocks, gzip level 1, converted to Zarr v3 (64^3 in 256^3 shards, zstd 3).

Each run is a fresh child process (wall seconds; peak RSS: VmHWM, or the largest worker's):

- shardstore: ``shardstore.convert(src, dst, ...)`` with ``--max-memory``, one worker and two;
- tensorstore: open source and destination, copy in shard-aligned blocks, each block in its
  own transaction (as tensorstore's documentation advises for sharded writes);
- (b) only: dask + zarr-python, ``da.from_zarr(src).rechunk(512^3)`` stored into a zarr-python
  sharded array (``lock=False``: the blocks are whole shards).

igneous is not an anchor: it writes precomputed only (no Zarr destination for (a)).

    python benchmarks/bench_convert.py [--size 1024] [--max-memory 2G] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
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


def child(args: list[str]) -> None:
    lib, case, src, dst, max_memory, workers = args
    import importlib

    for module in {"shardstore": ["shardstore"], "tensorstore": ["tensorstore"]}.get(lib, ["dask.array", "zarr"]):
        importlib.import_module(module)  # imports are not part of the timing
    t0 = time.perf_counter()
    if lib == "shardstore":
        extra = run_shardstore(case, src, dst, max_memory, int(workers))
    elif lib == "tensorstore":
        extra = run_tensorstore(case, src, dst)
    else:
        extra = run_dask(src, dst)
    seconds = time.perf_counter() - t0
    import resource

    # worker processes (shardstore x2) count too: the largest of this process and its children
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "rss_mib": max(peak_rss_mib(), children), **extra}))


# --------------------------------------------------------------------------- table (parent)

def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", type=int, default=1024, help="edge of the uint8 volume (1024: 1 GiB)")
    p.add_argument("--max-memory", default="2G", help="shardstore's --max-memory")
    p.add_argument("--workdir", help="keep data here (default: a temporary directory)")
    p.add_argument("--cases", default="abc")
    ns = p.parse_args()
    work = Path(ns.workdir) if ns.workdir else Path(tempfile.mkdtemp(prefix="bench-convert-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    paths = prepare(work, ns.size)
    print(f"data ready in {time.perf_counter() - t0:.0f} s: {ns.size}^3 uint8 in {work}", flush=True)
    runs = [("shardstore", 1), ("shardstore", 2), ("tensorstore", 1), ("dask+zarr", 1)]
    rows = []
    mb = ns.size ** 3 / 1e6
    for case in ns.cases:
        values: dict[str, float | None] = {}
        rss: dict[str, float | None] = {}
        for lib, workers in runs:
            if lib == "dask+zarr" and case != "b":
                continue
            name = lib if lib != "shardstore" else f"shardstore x{workers}"
            dst = work / f"out-{case}-{lib}-{workers}.zarr"
            res = run_child(__file__, ["child", lib, case, paths[case], str(dst), ns.max_memory, str(workers)])
            values[name] = mb / res["seconds"]
            rss[name] = res["rss_mib"]
            shutil.rmtree(dst, ignore_errors=True)
            print(f"  ({case}) {name}: {res['seconds']:.1f} s, {values[name]:.0f} MB/s, peak RSS {res['rss_mib']:.0f} MiB"
                  + (f", {res['verbatim']} verbatim / {res['reencoded']} re-encoded chunks" if "verbatim" in res else ""),
                  flush=True)
        rows.append((f"({case}) MB/s", values))
        rows.append((f"({case}) peak RSS MiB", rss))
    libs = ["shardstore x1", "shardstore x2", "tensorstore", "dask+zarr"]
    print(format_table(f"convert, {ns.size}^3 uint8, --max-memory {ns.max_memory}", rows, libs,
                       ratios=[("shardstore x1", "tensorstore"), ("shardstore x1", "dask+zarr"),
                               ("shardstore x2", "shardstore x1")]))
    if not ns.workdir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child(sys.argv[2:])
    else:
        main()
