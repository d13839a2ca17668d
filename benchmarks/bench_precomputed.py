"""Neuroglancer precomputed volume benchmark: shardstore vs tensorstore vs cloud-volume, one run.

Every library writes and reads the same deterministic EM-like uint8 volume (default 512^3;
``_common.make_volume``) as a precomputed volume ``[x, y, z, 1]``: chunk 64^3, encoding ``raw``,
voxel_offset 0. Two variants:

* ``unsharded`` -- one file per chunk, ``x0-x1_y0-y1_z0-z1``;
* ``sharded``   -- ``neuroglancer_uint64_sharded_v1``, identity hash, preshift 0, 6 minishard
  bits, 3 shard bits (8 shards of 256^3: one octant each), raw minishard index and data.

Rows (``--libs`` takes libraries or row names): ``shardstore`` and ``shardstore+cache`` (an
``IOConfig`` with its decoded-chunk cache; skipped with the reason printed when the installed
shardstore has none), ``tensorstore`` (``cache_pool`` 0) and ``tensorstore+cache`` (256 MiB),
``cloudvolume`` (``lru_bytes`` 0, ``parallel=1``, ``fill_missing=True``: its defaults) and
``cloudvolume+lru`` (``lru_bytes`` 256 MiB, its decoded-chunk LRU). cloud-volume writes sharded
volumes one whole shard per call, so its write loops over the 8 octants.

Phases per variant, every row taking turns (``_common.bench_volumes``, as bench_zarr3.py):
write in a fresh child process (create + write the whole volume; wall time, peak RSS) once
per input order: ``--orders C,F``, C and Fortran ``[x, y, z]`` -- the layout CloudVolume and
tensorstore hand their users and the order precomputed chunks are stored in; size on disk;
whole read cold (page cache dropped and the volume reopened before each repetition) and
warm; 256 aligned 64^3 and 256 unaligned 100^3 reads at seeded random origins, each cold
(page cache dropped, fresh handle) and then warm (the same boxes again on that handle).
Every row returns Fortran order (printed): shardstore and CloudVolume do by themselves,
tensorstore is asked for ``read(order="F")``, as its users holding ``[x, y, z]`` arrays do.
Read timings are the best of ``--repeat`` (default 3), those of the phases that start cold
(the whole cold read, the random passes) of ``--cold-repeat`` (default 5).

``--runs N`` repeats everything N times; the table shows per-run medians, names the best
anchor row of each figure and divides shardstore's figure by it (oriented so that above 1
means shardstore is better, for size and RSS too).

Usage: python benchmarks/bench_precomputed.py [--quick] [--runs 3]
       [--libs shardstore,tensorstore,cloudvolume] [--variants unsharded,sharded] [--orders C,F]
       [--shardstore-config JSON] [--shardstore-cache-config JSON] [--size 512]
       [--reads 256] [--repeat N] [--out-dir DIR] [--keep] [--json FILE]
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
    TS_CACHE_BYTES,
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

CHUNK = 64
SHARDING = {
    "@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0,
    "minishard_bits": 6, "shard_bits": 3, "minishard_index_encoding": "raw", "data_encoding": "raw",
}
VARIANTS = ("unsharded", "sharded")



def scale_metadata(shape: tuple[int, ...], variant: str) -> dict[str, Any]:
    scale: dict[str, Any] = {
        "key": "1_1_1", "size": list(shape[:3]), "resolution": [1, 1, 1], "voxel_offset": [0, 0, 0],
        "chunk_sizes": [[CHUNK] * 3], "encoding": "raw",
    }
    if variant == "sharded":
        scale["sharding"] = SHARDING
    return scale


# --------------------------------------------------------------------------- libraries


class ShardStore:
    package = "shardstore"

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        import shardstore

        self.mod = shardstore
        self.kw = shardstore_kwargs(config, shardstore.precomputed.create, shardstore.precomputed.open)

    def write(self, path: Path, vol: np.ndarray, variant: str) -> None:
        a = self.mod.precomputed.create(str(path), data_type="uint8", scales=[scale_metadata(vol.shape, variant)],
                                        mode="w", **self.kw)
        a[...] = vol

    def open(self, path: Path) -> Any:
        return self.mod.precomputed.open(str(path), **self.kw)

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
        """A fresh context per open: a reopened volume starts with an empty chunk cache."""
        return self.ts.Context({"cache_pool": {"total_bytes_limit": self.cache_bytes}})

    def _spec(self, path: Path) -> dict[str, Any]:
        return {"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file", "path": str(path)}}

    def write(self, path: Path, vol: np.ndarray, variant: str) -> None:
        scale = scale_metadata(vol.shape, variant)
        scale["chunk_size"] = scale.pop("chunk_sizes")[0]
        scale.pop("key")
        spec = {
            **self._spec(path), "create": True, "delete_existing": True,
            "multiscale_metadata": {"type": "image", "data_type": "uint8", "num_channels": 1},
            "scale_metadata": scale,
        }
        a = self.ts.open(spec, context=self.context).result()
        a.write(vol).result()

    def open(self, path: Path) -> Any:
        return self.ts.open(self._spec(path), open=True, read=True, context=self.context).result()

    # Fortran order, as users holding [x, y, z] arrays ask for it (shardstore and CloudVolume
    # return it too): the same result layout for every row
    def read_all(self, h: Any) -> np.ndarray:
        return h.read(order="F").result()

    def read_box(self, h: Any, origin: Origin, n: int) -> np.ndarray:
        return h[box(origin, n)].read(order="F").result()


class CloudVolumeLib:
    package = "cloud-volume"

    def __init__(self, lru_bytes: int = 0) -> None:
        import warnings

        warnings.filterwarnings("ignore")
        from cloudvolume import CloudVolume

        self.CloudVolume = CloudVolume
        self.lru_bytes = lru_bytes

    def write(self, path: Path, vol: np.ndarray, variant: str) -> None:
        info = {"@type": "neuroglancer_multiscale_volume", "type": "image", "data_type": "uint8",
                "num_channels": 1, "scales": [scale_metadata(vol.shape, variant)]}
        cv = self.CloudVolume(f"file://{path}", info=info, progress=False, compress=False)
        cv.commit_info()
        if variant == "unsharded":
            cv[:, :, :] = vol
            return
        # cloud-volume writes one whole shard per call (it replaces the shard): with identity
        # hashing and 6 minishard bits, a shard is a cube of 4x4x4 chunks (256^3: an octant)
        edge = 4 * CHUNK
        for ox in range(0, vol.shape[0], edge):
            for oy in range(0, vol.shape[1], edge):
                for oz in range(0, vol.shape[2], edge):
                    box = tuple(slice(o, min(o + edge, n)) for o, n in zip((ox, oy, oz), vol.shape))
                    cv[box] = vol[box]

    def open(self, path: Path) -> Any:
        return self.CloudVolume(f"file://{path}", progress=False, fill_missing=True, lru_bytes=self.lru_bytes)

    def read_all(self, h: Any) -> np.ndarray:
        return np.asarray(h[:, :, :])

    def read_box(self, h: Any, origin: Origin, n: int) -> np.ndarray:
        return np.asarray(h[box(origin, n)])


LIBS: dict[str, Any] = {"shardstore": ShardStore, "tensorstore": TensorStore, "cloudvolume": CloudVolumeLib}
ROWS = [  # every library's default configuration and its fastest documented one
    *shardstore_rows(),
    *tensorstore_rows(),
    Row("cloudvolume", "cloudvolume", {"lru_bytes": 0}, note="lru_bytes 0, parallel 1 (its defaults)"),
    Row("cloudvolume+lru", "cloudvolume", {"lru_bytes": TS_CACHE_BYTES},
        note=f"lru_bytes {TS_CACHE_BYTES} (its decoded-chunk LRU, 256 MiB)"),
]
#: the layout CloudVolume and tensorstore hand their users: [x, y, z] arrays in Fortran order
ORDERS = ("C", "F")


# --------------------------------------------------------------------------- phases


def child_write(args: argparse.Namespace) -> None:
    """The write phase, in its own process (see ``_common.child_write``)."""
    row, variant, path = args.child_write
    adapter = build_adapters(select_rows(ROWS, [row]), LIBS, args, quiet=True)[row]
    _child_write(adapter, variant, path, args.volume)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--reads", type=int, default=256)
    p.add_argument("--repeat", type=int, default=3, help="best of N for each read timing (default 3)")
    p.add_argument("--runs", type=int, default=1, help="repeat everything N times; report medians")
    p.add_argument("--variants", default=",".join(VARIANTS))
    add_row_arguments(p, ROWS)
    add_cold_repeat_argument(p)
    p.add_argument("--orders", default=",".join(ORDERS), help="input orders of the write (default C,F)")
    p.add_argument("--out-dir", type=Path, default=None)
    p.add_argument("--keep", action="store_true")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--quick", action="store_true", help="smoke test: size 128, 32 reads, 1 repetition")
    p.add_argument("--child-write", nargs=3, metavar=("ROW", "VARIANT", "DIR"), help=argparse.SUPPRESS)
    p.add_argument("--volume", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.size, args.reads, args.repeat = 128, 32, 1
    args.rows = select_rows(ROWS, [s for s in args.libs.split(",") if s])
    args.variants = [s for s in args.variants.split(",") if s]
    args.orders = [s for s in args.orders.split(",") if s]
    for value, known in ((args.variants, VARIANTS), (args.orders, ORDERS)):
        if unknown := set(value) - set(known):
            p.error(f"unknown {sorted(unknown)}; choose from {sorted(known)}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child_write:
        child_write(args)
        return
    made_dir = args.out_dir is None
    out_dir = Path(tempfile.mkdtemp(prefix="bench_precomputed_", dir="/tmp")) if made_dir else args.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    libs = dict.fromkeys(r.lib for r in args.rows)
    env = {"python": platform.python_version(), "cpus": os.cpu_count(), "loadavg": os.getloadavg(),
           **{f"{k}_version": version(LIBS[k].package) for k in libs}}
    config = {"size": args.size, "reads": args.reads, "read_repeat": args.repeat, "cold_repeat": cold_repeats(args), "runs": args.runs,
              "chunk": CHUNK, "sharding": SHARDING, "orders": args.orders,
              "shardstore_config": args.shardstore_config, "shardstore_cache_config": args.shardstore_cache_config}
    print(f"# {json.dumps(config)}\n# {json.dumps(env)}", flush=True)
    vol = make_volume(args.size)[..., None]  # [x, y, z, channel]
    npys = save_orders(vol, out_dir, args.orders)
    origins = {
        "aligned": random_origins(vol.shape[:3], min(CHUNK, args.size), args.reads, align=CHUNK, seed=1),
        "unaligned": random_origins(vol.shape[:3], min(100, args.size), args.reads, seed=2),
    }
    adapters = build_adapters(args.rows, LIBS, args)
    rows = [r for r in args.rows if r.name in adapters]
    runs: list[dict[str, dict[str, dict[str, Any]]]] = []
    summary: dict[str, dict[str, Any]] = {}
    figures = [*volume_figures(args.orders), ("files", "files", False)]
    try:
        for run in range(args.runs):
            results: dict[str, dict[str, dict[str, Any]]] = {}
            for variant in args.variants:
                t0 = time.perf_counter()
                paths = {name: out_dir / f"{variant}_{name}" for name in adapters}
                results[variant] = bench_volumes(__file__, adapters, variant, paths, vol, npys, origins,
                                                 1, args.repeat, CHUNK, row_child_args(args), turn=run + args.turn,
                                                 cold_repeat=cold_repeats(args))
                print(f"# run {run + 1} {variant}: all rows {time.perf_counter() - t0:.1f}s "
                      f"({next(iter(results[variant].values()))['cache_drop']})", flush=True)
                if not args.keep:
                    for path in paths.values():
                        shutil.rmtree(path, ignore_errors=True)
            runs.append(results)
        for variant in args.variants:
            print("\n" + returns_line(runs[0][variant]) + " (tensorstore read(order='F'))")
            med = {n: {key: statistics.median(r[variant][n][key] for r in runs) for key, _, _ in figures}
                   for n in adapters}
            title = (f"precomputed, {args.size}^3 uint8, chunk {CHUNK}^3 raw, {variant}; median of "
                     f"{args.runs} run(s), each the best of {args.repeat} (reads), {cold_repeats(args)} (cold phases), 1 (writes)")
            table, summary[variant] = anchor_table(title, figures, med, rows)
            print(table, flush=True)
    finally:
        if not args.keep:
            for npy in npys.values():
                npy.unlink(missing_ok=True)
            if made_dir:
                shutil.rmtree(out_dir, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps({"config": config, "env": env, "runs": runs,
                                         "vs_best_anchor": summary}, indent=2))


if __name__ == "__main__":
    main()
