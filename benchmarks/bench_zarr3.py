"""Zarr v3 sharding benchmark: shardstore vs tensorstore vs zarr-python, in one run.

Every library writes and reads the same deterministic EM-like uint8 volume (default 512^3;
see ``_common.make_volume``) as a Zarr v3 array with the same metadata semantics: shards of
256^3 (``sharding_indexed``, index at the end, index codecs ``bytes`` little + ``crc32c``),
inner chunks of 64^3, chunk keys ``c/i/j/k``, fill value 0. Two inner codec variants:

* ``zstd``  -- bytes + zstd level 3 (no checksum);
* ``blosc`` -- bytes + blosc lz4 clevel 5, byte shuffle, typesize 1.

Rows (library configurations; ``--libs`` takes libraries or row names): ``shardstore`` (its
defaults), ``shardstore+cache`` (an ``IOConfig`` with its decoded-chunk cache; skipped with the
reason printed when the installed shardstore has none), ``tensorstore`` (``cache_pool`` 0) and
``tensorstore+cache`` (256 MiB), ``zarr`` (zarr-python's default pipeline) and ``zarr+zarrs``
(``codec_pipeline.path = zarrs.ZarrsCodecPipeline``; skipped when zarrs is not installed).

Phases, per variant, every row taking turns (``_common.bench_volumes``):

1. **write**: a fresh child process (``--child-write ROW VARIANT DIR``) loads the volume from
   a .npy file, creates the array and writes it whole with one ``a[...] = vol``; once per
   input order (``--orders``, default C and F: Zarr stores C, so C is also the anchors'
   preferred order). The child reports the wall time of create + write (data reaches the
   page cache, no fsync) and its peak RSS (``VmHWM``; it includes the interpreter, the import
   and the volume the child holds).
2. **size on disk**: apparent size of all files of the dataset (zarr.json included).
3. **read cold**: the dataset is evicted from the page cache and the array opened afresh
   (so no chunk cache survives) before every repetition (``/proc/sys/vm/drop_caches`` if
   writable, else ``posix_fadvise(DONTNEED)`` per file; the output says which and how much
   stayed resident according to ``fincore``), then the whole array is read into one array.
4. **read warm**: the same whole read on the same handle with the page cache (and any chunk
   cache) warm. Every library returns C order here (printed).
5. **aligned random reads**: 256 reads of 64^3 boxes at random chunk-aligned origins, cold
   (page cache dropped, fresh handle) and then warm (the same boxes again on that handle).
6. **unaligned random reads**: 256 reads of 100^3 boxes at random origins (each touches up
   to 8 inner chunks and may straddle shards), cold and warm as above. The origins are
   seeded and identical for every row; a few results are checked.
7. **writes into shards** (issue 17): ``--reads`` writes of 8^3 boxes at random origins into
   the existing array (each a read-modify-write of one shard), then whole aligned shards
   rewritten (up to 4; no read needed, so this shows what locking costs). After the reads,
   on a handle opened ``r+`` (only API the pre-redesign shardstore also has), every row in
   turn at each repetition, as the reads.

Timings are the best of ``--repeat`` repetitions (default 3, the write's as bench_n5's: one
child-process write of ~0.1 s per row and input order moved its ratio by 10-20 % between runs),
those of the phases that start cold (3, 5, 6) the best of ``--cold-repeat`` (default 5).
Throughputs are in MB/s (10^6 bytes of uncompressed data per second); random reads in
reads/s; sizes and RSS in MiB. For every figure the table names the best anchor row and
gives each shardstore row's ratio against it, oriented so that above 1 means shardstore is
better (for size and RSS too), from the best repetitions and from the medians.

Usage: python benchmarks/bench_zarr3.py [--quick] [--libs shardstore,tensorstore,zarr]
       [--variants zstd,blosc] [--orders C,F] [--shardstore-config JSON]
       [--shardstore-cache-config JSON] [--size 512] [--reads 256] [--repeat N] [--out-dir DIR]
       [--keep] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    Origin,
    Row,
    RowUnavailable,
    add_cold_repeat_argument,
    add_row_arguments,
    anchor_table,
    bench_volumes,
    box,
    build_adapters,
    cold_repeats,
    make_volume,
    random_origins,
    returns_line,
    row_child_args,
    save_orders,
    select_rows,
    shardstore_kwargs,
    shardstore_rows,
    tensorstore_rows,
    turns,
    volume_figures,
)
from _common import child_write as _child_write  # noqa: E402

SHARD, CHUNK = 256, 64
BYTES = {"name": "bytes", "configuration": {"endian": "little"}}
COMPRESSORS = {  # the inner bytes->bytes codec of each variant, as Zarr v3 JSON
    "zstd": {"name": "zstd", "configuration": {"level": 3, "checksum": False}},
    "blosc": {
        "name": "blosc",
        "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 1, "blocksize": 0},
    },
}



# --------------------------------------------------------------------------- libraries
# Each adapter imports its library lazily, so a write child only loads the one it measures.


class ShardStore:
    package = "shardstore"

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        import shardstore

        self.mod = shardstore
        self.kw = shardstore_kwargs(config, shardstore.zarr3.create, shardstore.zarr3.open)

    def write(self, path: Path, vol: np.ndarray, variant: str) -> None:
        a = self.mod.zarr3.create(
            str(path), shape=vol.shape, dtype="uint8", chunks=(CHUNK,) * vol.ndim,
            shards=(SHARD,) * vol.ndim, codecs=[BYTES, COMPRESSORS[variant]], mode="w", **self.kw,
        )
        a[...] = vol

    def open(self, path: Path) -> Any:
        return self.mod.zarr3.open(str(path), mode="r", **self.kw)

    def open_rw(self, path: Path) -> Any:
        return self.mod.zarr3.open(str(path), mode="r+", **self.kw)

    def write_box(self, h: Any, sel: tuple[slice, ...], value: np.ndarray | int) -> None:
        h[sel] = value

    def read_all(self, h: Any) -> np.ndarray:
        return np.asarray(h)

    def read_box(self, h: Any, origin: Origin, n: int) -> np.ndarray:
        return h[box(origin, n)]


class TensorStore:
    package = "tensorstore"

    def __init__(self, cache_bytes: int = 0) -> None:
        import tensorstore

        self.ts = tensorstore
        self.cache_bytes = cache_bytes

    @property
    def context(self) -> Any:
        """A fresh context per open: a reopened array starts with an empty chunk cache."""
        return self.ts.Context({"cache_pool": {"total_bytes_limit": self.cache_bytes}})

    def _spec(self, path: Path) -> dict[str, Any]:
        return {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}

    def write(self, path: Path, vol: np.ndarray, variant: str) -> None:
        sharding = {
            "chunk_shape": [CHUNK] * vol.ndim,
            "codecs": [BYTES, COMPRESSORS[variant]],
            "index_codecs": [BYTES, {"name": "crc32c"}],
            "index_location": "end",
        }
        metadata = {
            "shape": list(vol.shape),
            "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [SHARD] * vol.ndim}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0,
            "codecs": [{"name": "sharding_indexed", "configuration": sharding}],
        }
        spec = {**self._spec(path), "metadata": metadata}
        a = self.ts.open(spec, create=True, delete_existing=True, context=self.context).result()
        a.write(vol).result()

    def open(self, path: Path) -> Any:
        return self.ts.open(self._spec(path), open=True, read=True, context=self.context).result()

    def open_rw(self, path: Path) -> Any:
        return self.ts.open(self._spec(path), open=True, read=True, write=True, context=self.context).result()

    def write_box(self, h: Any, sel: tuple[slice, ...], value: np.ndarray | int) -> None:
        h[sel].write(value).result()

    def read_all(self, h: Any) -> np.ndarray:
        return h.read().result()

    def read_box(self, h: Any, origin: Origin, n: int) -> np.ndarray:
        return h[box(origin, n)].read().result()


class ZarrPython:
    package = "zarr"

    def __init__(self, zarrs: bool = False) -> None:
        import zarr
        from zarr.codecs import BloscCodec, ZstdCodec

        self.zarr = zarr
        # zarr-python binds the codec pipeline when an array is opened, so opening (and
        # creating) inside this config makes every later read and write of it use zarrs
        self.pipeline: dict[str, Any] = {}
        if zarrs:
            try:
                import zarrs as _zarrs  # noqa: F401
            except ImportError as e:
                raise RowUnavailable(f"zarrs is not installed ({e}); pip install zarrs") from None
            self.pipeline = {"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"}
        self.compressors = {  # the same codecs as COMPRESSORS, as zarr-python objects
            "zstd": ZstdCodec(level=3, checksum=False),
            "blosc": BloscCodec(cname="lz4", clevel=5, shuffle="shuffle", typesize=1),
        }

    def write(self, path: Path, vol: np.ndarray, variant: str) -> None:
        with self.zarr.config.set(self.pipeline):
            a = self.zarr.create_array(
                store=str(path), shape=vol.shape, chunks=(CHUNK,) * vol.ndim,
                shards=(SHARD,) * vol.ndim, dtype="uint8", fill_value=0,
                compressors=self.compressors[variant], overwrite=True,
            )
            a[...] = vol

    def open(self, path: Path) -> Any:
        with self.zarr.config.set(self.pipeline):
            return self.zarr.open_array(str(path), mode="r")

    def open_rw(self, path: Path) -> Any:
        with self.zarr.config.set(self.pipeline):
            return self.zarr.open_array(str(path), mode="r+")

    def write_box(self, h: Any, sel: tuple[slice, ...], value: np.ndarray | int) -> None:
        h[sel] = value

    def read_all(self, h: Any) -> np.ndarray:
        return h[...]

    def read_box(self, h: Any, origin: Origin, n: int) -> np.ndarray:
        return h[box(origin, n)]


LIBS: dict[str, Any] = {"shardstore": ShardStore, "tensorstore": TensorStore, "zarr": ZarrPython}
ROWS = [  # every library's default configuration and its fastest documented one
    *shardstore_rows(),
    *tensorstore_rows(),
    Row("zarr", "zarr", {}, note="zarr-python's default codec pipeline"),
    Row("zarr+zarrs", "zarr", {"zarrs": True}, note="codec_pipeline.path zarrs.ZarrsCodecPipeline"),
]
ROW_LIB = {r.name: r.lib for r in ROWS}


# --------------------------------------------------------------------------- phases


def child_write(args: argparse.Namespace) -> None:
    """The write phase, in its own process (see ``_common.child_write``)."""
    row, variant, path = args.child_write
    adapter = build_adapters(select_rows(ROWS, [row]), LIBS, args, quiet=True)[row]
    _child_write(adapter, variant, path, args.volume)


PARTIAL = 8  # edge of the small writes into existing shards (inside one inner chunk or two)


def bench_updates(adapters: dict[str, Any], paths: dict[str, Path], vol: np.ndarray, origins: list[Origin],
                  repeat: int, turn: int = 0) -> dict[str, dict[str, float]]:
    """Writes into the existing dataset: small boxes (a read-modify-write of one shard each, the
    case issue 17 says must need one read instead of two) and whole aligned shards (no read at
    all; the figure that shows what locking costs). Only API every version has: open r+, a[sel] = v.
    Every row takes its turn at each of ``repeat`` repetitions, the order rotating (as the
    reads do): the best repetition counts, its median beside it (``<figure>_median``)."""
    handles = {name: adapter.open_rw(paths[name]) for name, adapter in adapters.items()}
    edge = min(SHARD, *vol.shape)
    n_shards = max(1, min(4, vol.shape[0] // edge))
    times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in adapters}
    for rep in range(max(repeat, 1)):
        for name in turns(list(adapters), rep + turn):
            adapter, h = adapters[name], handles[name]
            t0 = time.perf_counter()
            for o in origins:
                adapter.write_box(h, box(o, PARTIAL), 9)
            times[name][0].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            for i in range(n_shards):  # (the volume's own values again: each repetition starts alike)
                sel = (slice(i * edge, (i + 1) * edge),) + (slice(0, edge),) * (vol.ndim - 1)
                adapter.write_box(h, sel, vol[sel])
            times[name][1].append(time.perf_counter() - t0)
    whole_mb = n_shards * edge**vol.ndim / 1e6
    return {name: {"partial_writes_per_s": len(origins) / min(partial),
                   "partial_writes_per_s_median": len(origins) / statistics.median(partial),
                   "whole_shard_write_MBps": whole_mb / min(whole),
                   "whole_shard_write_MBps_median": whole_mb / statistics.median(whole)}
            for name, (partial, whole) in times.items()}


UPDATE_FIGURES = [
    ("partial_writes_per_s", f"{PARTIAL}^3 writes into shards/s", True),
    ("whole_shard_write_MBps", "whole-shard rewrite MB/s", True),
]


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", type=int, default=512, help="edge of the cubic volume (default 512)")
    p.add_argument("--reads", type=int, default=256, help="random reads per kind (default 256)")
    p.add_argument("--repeat", type=int, default=None,
                   help="best of N for every timing (default 3)")
    p.add_argument("--variants", default="zstd,blosc", help="comma list of: zstd, blosc")
    add_row_arguments(p, ROWS)
    add_cold_repeat_argument(p)
    p.add_argument("--orders", default="C,F",
                   help="input orders of the write (C is what Zarr stores; default C,F)")
    p.add_argument("--out-dir", type=Path, default=None, help="where datasets go (default: a tempdir in /tmp)")
    p.add_argument("--keep", action="store_true", help="keep the datasets")
    p.add_argument("--json", type=Path, default=None, help="also dump the results to this file")
    p.add_argument("--quick", action="store_true", help="smoke test: size 128, 32 reads, 1 repetition")
    p.add_argument("--child-write", nargs=3, metavar=("ROW", "VARIANT", "DIR"), help=argparse.SUPPRESS)
    p.add_argument("--volume", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.size, args.reads, args.repeat = 128, 32, args.repeat or 1
    args.rows = select_rows(ROWS, [s for s in args.libs.split(",") if s])
    args.variants = [s for s in args.variants.split(",") if s]
    args.orders = [s for s in args.orders.split(",") if s]
    for value, known in ((args.variants, COMPRESSORS), (args.orders, ("C", "F"))):
        if unknown := set(value) - set(known):
            p.error(f"unknown {sorted(unknown)}; choose from {sorted(known)}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child_write:
        child_write(args)
        return
    write_repeat = read_repeat = args.repeat or 3
    made_dir = args.out_dir is None
    out_dir = Path(tempfile.mkdtemp(prefix="bench_zarr3_", dir="/tmp")) if made_dir else args.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    libs = dict.fromkeys(r.lib for r in args.rows)
    env = {
        "python": platform.python_version(), "cpus": os.cpu_count(), "loadavg": os.getloadavg(),
        **{f"{k}_version": version(LIBS[k].package) for k in libs},
        "numpy_version": np.__version__,
    }
    config = {"size": args.size, "reads": args.reads, "write_repeat": write_repeat,
              "read_repeat": read_repeat, "cold_repeat": cold_repeats(args), "shard": SHARD, "chunk": CHUNK, "orders": args.orders,
              "shardstore_config": args.shardstore_config,
              "shardstore_cache_config": args.shardstore_cache_config, "out_dir": str(out_dir)}
    print(f"# {json.dumps(config)}\n# {json.dumps(env)}", flush=True)

    t0 = time.perf_counter()
    vol = make_volume(args.size)
    npys = save_orders(vol, out_dir, args.orders)
    shape = vol.shape
    origins = {
        "aligned": random_origins(shape, min(CHUNK, args.size), args.reads, align=CHUNK, seed=1),
        "unaligned": random_origins(shape, min(100, args.size), args.reads, seed=2),
        "partial": random_origins(shape, PARTIAL, args.reads, seed=3),
    }
    print(f"# volume {shape} generated in {time.perf_counter() - t0:.1f}s", flush=True)
    adapters = build_adapters(args.rows, LIBS, args)
    rows = [r for r in args.rows if r.name in adapters]
    results: dict[str, dict[str, Any]] = {}
    summary: dict[str, dict[str, Any]] = {}
    try:
        for variant in args.variants:
            t0 = time.perf_counter()
            paths = {name: out_dir / f"{variant}_{name}" for name in adapters}
            results[variant] = bench_volumes(__file__, adapters, variant, paths, vol, npys, origins,
                                             write_repeat, read_repeat, CHUNK, row_child_args(args),
                                             turn=args.turn, cold_repeat=cold_repeats(args))
            updates = bench_updates(adapters, paths, vol, origins["partial"], read_repeat, turn=args.turn)
            for name in adapters:
                res = results[variant][name]
                res.update(updates[name])
                resident = res["resident_after_drop"]
                print(f"# {variant}/{name}: cache drop: {res['cache_drop']}, resident after drop: "
                      f"{'n/a' if resident is None else f'{resident:.1%}'}", flush=True)
                if not args.keep:
                    shutil.rmtree(paths[name], ignore_errors=True)
            print(f"# {variant}: all rows done in {time.perf_counter() - t0:.1f}s", flush=True)
            print(returns_line(results[variant]) + " (tensorstore read(), order C)", flush=True)
            title = (f"\nZarr v3, {args.size}^3 uint8, shard {SHARD}^3, chunk {CHUNK}^3, "
                     f"variant {variant} ({json.dumps(COMPRESSORS[variant]['configuration'])}); "
                     f"best of {read_repeat} (reads), {write_repeat} (writes)")
            table, summary[variant] = anchor_table(
                title, [*volume_figures(args.orders), *UPDATE_FIGURES], results[variant], rows)
            print(table, flush=True)
    finally:
        if not args.keep:
            for npy in npys.values():
                npy.unlink(missing_ok=True)
            if made_dir:
                shutil.rmtree(out_dir, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps({"config": config, "env": env, "results": results,
                                         "vs_best_anchor": summary}, indent=2))


if __name__ == "__main__":
    main()
