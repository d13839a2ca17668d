"""Cost of the default zstd content checksum on the W1 figure (whole write of bench_zarr3.py).

Writes the same EM-like volume (``_common.make_volume``) as bench_zarr3.py's zstd variant
(shards 256^3, inner chunks 64^3, bytes + zstd level 3) with ``"checksum": false`` and with
``"checksum": true`` (the default of ``shardstore.zarr3.create``), alternating in one process
so that the load of a shared machine hits both alike; each write goes to a fresh directory,
with one ``a[...] = vol`` as in W1. It also reads each result back whole (warm) and checks it.
Prints the median seconds of each and the ratio (checksum on / off; 1.03 = 3 % slower), for
wall time and for the CPU time of the process (which other jobs on a shared machine disturb
much less than wall time), and last the codec alone: the CPU time of zstd-compressing every
chunk on one thread with and without the checksum (the only work that differs).

Usage: python benchmarks/bench_zarr3_checksum.py [--size 512] [--rounds 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import make_volume

import shardstore


def _write(path: Path, vol: np.ndarray, checksum: bool) -> tuple[float, float]:
    """Wall seconds and CPU seconds (all threads of this process) of one whole write."""
    codecs = [{"name": "bytes", "configuration": {"endian": "little"}},
              {"name": "zstd", "configuration": {"level": 3, "checksum": checksum}}]
    t0, c0 = time.perf_counter(), time.process_time()
    a = shardstore.zarr3.create(path, shape=vol.shape, dtype=vol.dtype, chunks=(64,) * 3, shards=(256,) * 3,
                                codecs=codecs, mode="w")
    a[...] = vol
    return time.perf_counter() - t0, time.process_time() - c0


def _read(path: Path) -> tuple[float, np.ndarray]:
    t0 = time.perf_counter()
    out = shardstore.open(path)[...]
    return time.perf_counter() - t0, out


def _codec_only(vol: np.ndarray, rounds: int) -> tuple[float, float]:
    """Median CPU seconds (this thread) to zstd-compress every 64^3 chunk of ``vol`` without
    and with the checksum: the only work that differs between the two writes, measured
    where other jobs cannot add to it."""
    import zstandard

    chunks = [np.ascontiguousarray(vol[i:i + 64, j:j + 64, k:k + 64]).tobytes()
              for i in range(0, vol.shape[0], 64) for j in range(0, vol.shape[1], 64) for k in range(0, vol.shape[2], 64)]
    cctx = {b: zstandard.ZstdCompressor(level=3, write_checksum=b, write_content_size=True) for b in (False, True)}
    spent: dict[bool, list[float]] = {False: [], True: []}
    for r in range(rounds):
        for checksum in ((False, True) if r % 2 == 0 else (True, False)):
            t0 = time.thread_time()
            for chunk in chunks:
                cctx[checksum].compress(chunk)
            spent[checksum].append(time.thread_time() - t0)
    return statistics.median(spent[False]), statistics.median(spent[True])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    vol = make_volume(args.size)
    times: dict[bool, list[float]] = {False: [], True: []}
    cpu: dict[bool, list[float]] = {False: [], True: []}
    reads: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory(prefix="bench-checksum-") as tmp:
        for r in range(args.rounds):
            for checksum in ((False, True) if r % 2 == 0 else (True, False)):
                path = Path(tmp) / f"c{int(checksum)}.zarr"
                shutil.rmtree(path, ignore_errors=True)
                wall, seconds = _write(path, vol, checksum)
                times[checksum].append(wall)
                cpu[checksum].append(seconds)
                seconds, out = _read(path)
                reads[checksum].append(seconds)
                if not np.array_equal(out, vol):
                    raise SystemExit(f"read back differs (checksum={checksum})")
    mb = vol.nbytes / 1e6
    off, on = statistics.median(times[False]), statistics.median(times[True])
    roff, ron = statistics.median(reads[False]), statistics.median(reads[True])
    print(f"{args.size}^3 uint8, {args.rounds} rounds, medians")
    print(f"whole write, checksum off: {off:.3f} s ({mb / off:.0f} MB/s)")
    print(f"whole write, checksum on:  {on:.3f} s ({mb / on:.0f} MB/s)")
    print(f"write time ratio on/off:   {on / off:.3f}")
    con, coff = statistics.median(cpu[True]), statistics.median(cpu[False])
    print(f"write CPU s ratio on/off:  {con / coff:.3f} ({coff:.3f} s -> {con:.3f} s; less sensitive to other load)")
    print(f"whole read (warm) on/off:  {ron / roff:.3f} ({roff:.3f} s -> {ron:.3f} s)")
    coff, con = _codec_only(vol, args.rounds)
    print(f"zstd-3 encode of every chunk, CPU s on/off: {con / coff:.3f} ({coff:.3f} s -> {con:.3f} s)")


if __name__ == "__main__":
    main()
