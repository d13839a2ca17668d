"""N5 benchmark: shardstore vs tensorstore vs z5py, in one run.

Every library writes and reads the same deterministic EM-like uint8 volume (default 512^3;
see ``_common.make_volume``) as an N5 dataset ``data`` in a fresh container, blocks of 64^3.
Two compression variants: ``raw`` and ``gzip`` level 1 (N5 ``{"type": "gzip", "level": 1}``).
Rows (``--libs`` takes libraries or row names): ``shardstore`` and ``shardstore+cache`` (an
``IOConfig`` with its decoded-chunk cache; skipped with the reason printed when the installed
shardstore has none), ``tensorstore`` (``cache_pool`` 0) and ``tensorstore+cache`` (256 MiB),
``z5py`` (``n_threads`` 1, its default) and ``z5py+threads`` (``n_threads`` = the CPU count).
Every row returns C order (tensorstore indexes N5 x-first; it reads the transposed view with
``order="C"``).

Phases per variant and row (the same as bench_zarr3.py; see its docstring): write (fresh
child process, whole volume, includes creation) once per input order (``--orders``, default
C and F; C is N5's stored order), size on disk, whole read cold (page cache dropped and the
array reopened before each repetition) and warm, 256 reads of 64^3 boxes at random
block-aligned origins and 256 reads of 100^3 boxes at random origins, each cold (page cache
dropped, fresh handle) and then warm (the same boxes again). Timings are the best of ``--repeat``
(default 3, the write included), of the phases that start cold ``--cold-repeat`` (default 5);
the libraries take turns at every repetition of every phase
(``_common.bench_volumes``), so that a slow spell of the shared machine hits them alike.
The "vs best" columns divide each shardstore row's figure by the best anchor row's (named),
oriented so that above 1 means shardstore is better (for size and RSS too). The "(medians)"
column does the same with each row's median repetition: best-of-N favours a library whose
repetitions scatter widely, and the two columns together show when a ratio is a coin flip.

Usage: python benchmarks/bench_n5.py [--quick] [--libs shardstore,tensorstore,z5py]
       [--variants raw,gzip] [--orders C,F] [--shardstore-config JSON] [--shardstore-cache-config JSON] [--size 512] [--reads 256] [--repeat N] [--out-dir DIR]
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
from _common import (  # noqa: E402
    Origin,
    Row,
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
    volume_figures,
)
from _common import child_write as _child_write  # noqa: E402

BLOCK = 64
COMPRESSIONS = {"raw": {"type": "raw"}, "gzip": {"type": "gzip", "level": 1}}



class ShardStore:
    package = "shardstore"

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        import shardstore

        self.n5 = shardstore.n5
        self.kw = shardstore_kwargs(config, shardstore.n5.create, shardstore.n5.open)

    def write(self, path: Path, vol: np.ndarray, variant: str) -> None:
        a = self.n5.create(str(path), "data", shape=vol.shape, dtype="uint8",
                           block_size=(BLOCK,) * vol.ndim, compression=COMPRESSIONS[variant], mode="w", **self.kw)
        a[...] = vol

    def open(self, path: Path) -> Any:
        return self.n5.open(str(path), "data", mode="r", **self.kw)

    def read_all(self, h: Any) -> np.ndarray:
        return np.asarray(h)

    def read_box(self, h: Any, origin: Origin, n: int) -> np.ndarray:
        return h[box(origin, n)]


class TensorStore:
    """tensorstore indexes N5 in ``dimensions`` (x-first) order: the transposed view."""

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

    def __init__(self, threads: int | None = 1) -> None:
        import z5py

        self.z5py = z5py
        self.threads = threads or os.cpu_count() or 1

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


LIBS: dict[str, Any] = {"shardstore": ShardStore, "tensorstore": TensorStore, "z5py": Z5py}
ROWS = [  # every library's default configuration and its fastest documented one
    *shardstore_rows(),
    *tensorstore_rows(),
    Row("z5py", "z5py", {"threads": 1}, note="n_threads 1 (its default)"),
    Row("z5py+threads", "z5py", {"threads": None}, note=f"n_threads {os.cpu_count()} (the CPU count)"),
]


def child_write(args: argparse.Namespace) -> None:
    """The write phase, in its own process (see ``_common.child_write``)."""
    row, variant, path = args.child_write
    adapter = build_adapters(select_rows(ROWS, [row]), LIBS, args, quiet=True)[row]
    _child_write(adapter, variant, path, args.volume)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--reads", type=int, default=256)
    p.add_argument("--repeat", type=int, default=None, help="best of N (default 3)")
    p.add_argument("--variants", default="raw,gzip")
    add_row_arguments(p, ROWS)
    add_cold_repeat_argument(p)
    p.add_argument("--orders", default="C,F",
                   help="input orders of the write (C: N5 stores x fastest, the last axis here; default C,F)")
    p.add_argument("--out-dir", type=Path, default=None)
    p.add_argument("--keep", action="store_true")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--quick", action="store_true", help="smoke test: size 128, 32 reads, 1 repetition")
    p.add_argument("--child-write", nargs=3, metavar=("ROW", "VARIANT", "DIR"), help=argparse.SUPPRESS)
    p.add_argument("--volume", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.size, args.reads, args.repeat = 128, 32, args.repeat or 1
    args.rows = select_rows(ROWS, [s for s in args.libs.split(",") if s])
    args.variants = [s for s in args.variants.split(",") if s]
    args.orders = [s for s in args.orders.split(",") if s]
    for value, known in ((args.variants, COMPRESSIONS), (args.orders, ("C", "F"))):
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
    out_dir = Path(tempfile.mkdtemp(prefix="bench_n5_", dir="/tmp")) if made_dir else args.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    libs = dict.fromkeys(r.lib for r in args.rows)
    env = {"python": platform.python_version(), "cpus": os.cpu_count(), "loadavg": os.getloadavg(),
           **{f"{k}_version": version(LIBS[k].package) for k in libs},
           "numpy_version": np.__version__}
    config = {"size": args.size, "reads": args.reads, "write_repeat": write_repeat,
              "read_repeat": read_repeat, "cold_repeat": cold_repeats(args), "block": BLOCK, "orders": args.orders,
              "shardstore_config": args.shardstore_config,
              "shardstore_cache_config": args.shardstore_cache_config, "out_dir": str(out_dir)}
    print(f"# {json.dumps(config)}\n# {json.dumps(env)}", flush=True)
    vol = make_volume(args.size)
    npys = save_orders(vol, out_dir, args.orders)
    origins = {
        "aligned": random_origins(vol.shape, min(BLOCK, args.size), args.reads, align=BLOCK, seed=1),
        "unaligned": random_origins(vol.shape, min(100, args.size), args.reads, seed=2),
    }
    adapters = build_adapters(args.rows, LIBS, args)
    rows = [r for r in args.rows if r.name in adapters]
    results: dict[str, dict[str, Any]] = {}
    summary: dict[str, dict[str, Any]] = {}
    try:
        for variant in args.variants:
            t0 = time.perf_counter()
            paths = {name: out_dir / f"{variant}_{name}.n5" for name in adapters}
            results[variant] = bench_volumes(__file__, adapters, variant, paths, vol, npys, origins,
                                             write_repeat, read_repeat, BLOCK, row_child_args(args),
                                             turn=args.turn, cold_repeat=cold_repeats(args))
            for name, res in results[variant].items():
                resident = res["resident_after_drop"]
                print(f"# {variant}/{name}: cache drop: {res['cache_drop']}, resident after drop: "
                      f"{'n/a' if resident is None else f'{resident:.1%}'}", flush=True)
            print(f"# {variant}: all rows done in {time.perf_counter() - t0:.1f}s", flush=True)
            print(returns_line(results[variant]) + " (tensorstore: the transposed view, read(order='C'))")
            if not args.keep:
                for path in paths.values():
                    shutil.rmtree(path, ignore_errors=True)
            title = (f"\nN5, {args.size}^3 uint8, block {BLOCK}^3, compression "
                     f"{json.dumps(COMPRESSIONS[variant])}; best of {read_repeat} (reads), {write_repeat} (writes)")
            table, summary[variant] = anchor_table(title, volume_figures(args.orders), results[variant], rows)
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
