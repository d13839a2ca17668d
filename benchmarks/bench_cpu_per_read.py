"""CPU time and minor page faults per read or write, for comparing two shardstore versions
on a machine too loaded for wall-clock figures.

Wall-clock ratios of the other benches swing by 0.7-1.8x when other processes share the
cores; the CPU time a read costs this process (all its threads) and the pages it faults in
vary far less. Each run is a fresh process (glibc's adaptive malloc thresholds depend on
what the process freed before: a fresh process is where a per-chunk allocation shows), so
run it once per version, alternating, and compare the best figures. The data is made once,
in its own process (``--make``), so that the measuring process frees no large buffer first:

    python benchmarks/bench_cpu_per_read.py --make --data /tmp/cpr
    python benchmarks/bench_cpu_per_read.py --op pc-aligned --data /tmp/cpr
    /work/venv-old/bin/python benchmarks/bench_cpu_per_read.py --op pc-aligned --data /tmp/cpr

Ops: ``pc-aligned`` / ``pc-unaligned`` (64^3 / 100^3 boxes of unsharded precomputed raw,
64^3 chunks), ``n5-aligned`` / ``n5-unaligned`` (N5 raw, 64^3 blocks), ``n5-gzip-write``
(a whole N5 gzip write, the faults of a fresh process writing), ``small-reads`` (1-chunk
reads of 8^3 precomputed chunks: the Python overhead per read).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import make_volume, random_origins  # noqa: E402

SIZE = 256


def _make(data: Path) -> None:
    import shardstore

    vol = make_volume(SIZE)
    np.save(data / "volume.npy", vol)
    small = (np.arange(64**3) % 251).astype(np.uint8).reshape(64, 64, 64)
    for name, chunk, v in (("pc", 64, vol), ("pc-small", 8, small)):
        a = shardstore.precomputed.create(str(data / name), data_type="uint8", mode="w", scales=[{
            "key": "s0", "size": list(v.shape), "resolution": [1, 1, 1], "voxel_offset": [0, 0, 0],
            "chunk_sizes": [[chunk] * 3], "encoding": "raw"}])
        a[...] = v[..., None]
    _n5_write(data / "n5-raw", vol, "raw")


def _n5_write(path: Path, vol: np.ndarray, compression: str) -> None:
    import shardstore

    a = shardstore.n5.create(str(path), "d", shape=vol.shape, dtype="uint8", block_size=(64,) * 3,
                             compression={"type": compression}, mode="w")
    a[...] = vol


def main() -> None:
    import shardstore

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--op", choices=["pc-aligned", "pc-unaligned", "n5-aligned", "n5-unaligned",
                                    "n5-gzip-write", "small-reads"])
    p.add_argument("--make", action="store_true", help="make the datasets under --data (once)")
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--repeat", type=int, default=7)
    args = p.parse_args()
    if args.make:
        args.data.mkdir(parents=True, exist_ok=True)
        _make(args.data)
        return
    if args.op == "n5-gzip-write":  # as bench_n5's write child: the volume loaded, kept alive
        vol = np.load(args.data / "volume.npy")
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        cpu = time.process_time()
        _n5_write(args.data / "n5-gzip", vol, "gzip")
        print(f"{args.op}: {(time.process_time() - cpu) * 1e3:.1f} ms CPU, "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before} minor faults")
        return
    if args.op == "small-reads":
        a: Any = shardstore.precomputed.open(str(args.data / "pc-small"))
        boxes = [tuple(slice(o, o + 8) for o in (x, y, z)) for x in range(0, 64, 8) for y in range(0, 64, 8)
                 for z in range(0, 64, 8)]
    else:
        fmt, kind = args.op.split("-")
        if fmt == "pc":
            a = shardstore.precomputed.open(str(args.data / "pc"))
        else:
            a = shardstore.n5.open(str(args.data / "n5-raw"), "d", mode="r")
        n = 64 if kind == "aligned" else 100
        boxes = [tuple(slice(c, c + n) for c in o)
                 for o in random_origins((SIZE,) * 3, n, 64, align=64 if kind == "aligned" else 1, seed=1)]
    for b in boxes:  # warm: the page cache, the thread pools
        a[b]
    best, f0 = float("inf"), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(args.repeat):
        cpu = time.process_time()
        for b in boxes:
            a[b]
        best = min(best, time.process_time() - cpu)
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / (args.repeat * len(boxes))
    print(f"{args.op}: {best / len(boxes) * 1e6:.1f} us CPU per read (best of {args.repeat}), "
          f"{faults:.1f} minor faults per read (mean)")


if __name__ == "__main__":
    main()
