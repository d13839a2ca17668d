"""Neuroglancer precomputed volume benchmark: shardstore vs tensorstore vs cloud-volume, one run.

Every library writes and reads the same deterministic EM-like uint8 volume (default 512^3;
``_common.make_volume``) as a precomputed volume ``[x, y, z, 1]``: chunk 64^3, encoding ``raw``,
voxel_offset 0. Two variants:

* ``unsharded`` -- one file per chunk, ``x0-x1_y0-y1_z0-z1``;
* ``sharded``   -- ``neuroglancer_uint64_sharded_v1``, identity hash, preshift 0, 6 minishard
  bits, 3 shard bits (8 shards of 256^3: one octant each), raw minishard index and data.

Phases per variant and library (as bench_zarr3.py): write in a fresh child process (create +
write the whole volume; wall time, peak RSS), size on disk, whole read cold (page cache
dropped before each repetition) and warm, 256 aligned 64^3 reads and 256 unaligned 100^3 reads
at seeded random origins (warm). tensorstore runs without a chunk cache (cache pool 0),
cloud-volume with ``fill_missing=True``, no LRU, ``parallel=1`` (its default). cloud-volume
writes sharded volumes one whole shard per call, so its write loops over the 8 octants.

``--runs N`` repeats everything N times (libraries interleaved within a run); the table shows
per-run medians and the ratio columns divide shardstore's figure by the other library's
(> 1 is better for MB/s and reads/s, < 1 for size and RSS).

Usage: python benchmarks/bench_precomputed.py [--quick] [--runs 3]
       [--libs shardstore,tensorstore,cloudvolume] [--variants unsharded,sharded] [--size 512]
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
    Origin,
    bench_volume,
    box,
    child_write as _child_write,
    format_table,
    make_volume,
    random_origins,
)

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

    def __init__(self) -> None:
        import shardstore

        self.mod = shardstore

    def write(self, path: Path, vol: np.ndarray, variant: str) -> None:
        a = self.mod.precomputed.create(str(path), data_type="uint8", scales=[scale_metadata(vol.shape, variant)], mode="w")
        a[...] = vol

    def open(self, path: Path) -> Any:
        return self.mod.precomputed.open(str(path))

    def read_all(self, h: Any) -> np.ndarray:
        return np.asarray(h)

    def read_box(self, h: Any, origin: Origin, n: int) -> np.ndarray:
        return h[box(origin, n)]


class TensorStore:
    package = "tensorstore"

    def __init__(self) -> None:
        import tensorstore

        self.ts = tensorstore
        self.context = tensorstore.Context({"cache_pool": {"total_bytes_limit": 0}})

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

    def read_all(self, h: Any) -> np.ndarray:
        return h.read().result()

    def read_box(self, h: Any, origin: Origin, n: int) -> np.ndarray:
        return h[box(origin, n)].read().result()


class CloudVolumeLib:
    package = "cloud-volume"

    def __init__(self) -> None:
        import warnings

        warnings.filterwarnings("ignore")
        from cloudvolume import CloudVolume

        self.CloudVolume = CloudVolume

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
        return self.CloudVolume(f"file://{path}", progress=False, fill_missing=True, lru_bytes=0)

    def read_all(self, h: Any) -> np.ndarray:
        return np.asarray(h[:, :, :])

    def read_box(self, h: Any, origin: Origin, n: int) -> np.ndarray:
        return np.asarray(h[box(origin, n)])


LIBS: dict[str, Any] = {"shardstore": ShardStore, "tensorstore": TensorStore, "cloudvolume": CloudVolumeLib}


# --------------------------------------------------------------------------- phases


def child_write(lib: str, variant: str, path: str, volume: str) -> None:
    """The write phase, in its own process (see ``_common.child_write``)."""
    _child_write(LIBS[lib](), variant, path, volume)


def bench_one(name: str, adapter: Any, variant: str, path: Path, vol: np.ndarray, npy: Path,
              origins: dict[str, list[Origin]], read_repeat: int) -> dict[str, Any]:
    """All phases for one library and variant (one write; see ``_common.bench_volume``)."""
    return bench_volume(__file__, name, adapter, variant, path, vol, npy, origins, 1, read_repeat, CHUNK)


ROWS = [
    ("write_MBps", "write MB/s"),
    ("read_cold_MBps", "read cold MB/s"),
    ("read_warm_MBps", "read warm MB/s"),
    ("aligned_reads_per_s", "64^3 aligned reads/s"),
    ("unaligned_reads_per_s", "100^3 unaligned reads/s"),
    ("disk_MiB", "size on disk MiB"),
    ("files", "files"),
    ("rss_peak_MiB", "peak RSS write MiB"),
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--reads", type=int, default=256)
    p.add_argument("--repeat", type=int, default=3, help="best of N for each read timing (default 3)")
    p.add_argument("--runs", type=int, default=1, help="repeat everything N times; report medians")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--libs", default=",".join(LIBS))
    p.add_argument("--out-dir", type=Path, default=None)
    p.add_argument("--keep", action="store_true")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--quick", action="store_true", help="smoke test: size 128, 32 reads, 1 repetition")
    p.add_argument("--child-write", nargs=3, metavar=("LIB", "VARIANT", "DIR"), help=argparse.SUPPRESS)
    p.add_argument("--volume", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.size, args.reads, args.repeat = 128, 32, 1
    args.libs = [s for s in args.libs.split(",") if s]
    args.variants = [s for s in args.variants.split(",") if s]
    for value, known in ((args.libs, LIBS), (args.variants, VARIANTS)):
        if unknown := set(value) - set(known):
            p.error(f"unknown {sorted(unknown)}; choose from {sorted(known)}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child_write:
        child_write(*args.child_write, volume=args.volume)
        return
    made_dir = args.out_dir is None
    out_dir = Path(tempfile.mkdtemp(prefix="bench_precomputed_", dir="/tmp")) if made_dir else args.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    env = {"python": platform.python_version(), "cpus": os.cpu_count(), "loadavg": os.getloadavg(),
           **{f"{k}_version": version(v.package) for k, v in LIBS.items() if k in args.libs}}
    config = {"size": args.size, "reads": args.reads, "read_repeat": args.repeat, "runs": args.runs,
              "chunk": CHUNK, "sharding": SHARDING}
    print(f"# {json.dumps(config)}\n# {json.dumps(env)}", flush=True)
    vol = make_volume(args.size)[..., None]  # [x, y, z, channel]
    npy = out_dir / "source.npy"
    np.save(npy, vol)
    origins = {
        "aligned": random_origins(vol.shape[:3], min(CHUNK, args.size), args.reads, align=CHUNK, seed=1),
        "unaligned": random_origins(vol.shape[:3], min(100, args.size), args.reads, seed=2),
    }
    adapters = {name: LIBS[name]() for name in args.libs}
    runs: list[dict[str, dict[str, dict[str, Any]]]] = []
    ratios = [("shardstore", o) for o in ("tensorstore", "cloudvolume") if "shardstore" in args.libs and o in args.libs]
    try:
        for run in range(args.runs):
            results: dict[str, dict[str, dict[str, Any]]] = {}
            for variant in args.variants:
                results[variant] = {}
                for name, adapter in adapters.items():
                    t0 = time.perf_counter()
                    path = out_dir / f"{variant}_{name}"
                    results[variant][name] = bench_one(name, adapter, variant, path, vol, npy, origins, args.repeat)
                    print(f"# run {run + 1} {variant}/{name}: {time.perf_counter() - t0:.1f}s "
                          f"({results[variant][name]['cache_drop']})", flush=True)
                    if not args.keep:
                        shutil.rmtree(path, ignore_errors=True)
            runs.append(results)
        for variant in args.variants:
            rows = []
            for key, label in ROWS:
                rows.append((label, {n: statistics.median(r[variant][n][key] for r in runs) for n in args.libs}))
            title = (f"\nprecomputed, {args.size}^3 uint8, chunk {CHUNK}^3 raw, {variant}; median of "
                     f"{args.runs} run(s)")
            print(format_table(title, rows, args.libs, ratios), flush=True)
            if args.runs > 1 and ratios:  # the median of per-run ratios (less sensitive to drift)
                for a, b in ratios:
                    med = {label: statistics.median(r[variant][a][key] / r[variant][b][key] for r in runs)
                           for key, label in ROWS[:5]}
                    print(f"median per-run ratio {a}/{b}: " + ", ".join(f"{k} {v:.2f}" for k, v in med.items()))
    finally:
        if not args.keep:
            npy.unlink(missing_ok=True)
            if made_dir:
                shutil.rmtree(out_dir, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps({"config": config, "env": env, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
