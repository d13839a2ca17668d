"""Helpers shared by the benchmark scripts (one script per format: bench_zarr3.py, ...).

Everything here is library-neutral: synthetic data, random read positions, page-cache
dropping, timing, peak-RSS measurement in a child process, disk usage and table printing.
NumPy only (no scipy), so a benchmark runs in the plain test environment.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

MB = 1e6  # throughput unit: 10^6 bytes of uncompressed data per second
MiB = 2**20  # size unit for disk usage and RSS


# --------------------------------------------------------------------------- data


def _upsample_last(a: np.ndarray, cell: int, n: int) -> np.ndarray:
    """Linear interpolation along the last axis: grid points ``cell`` samples apart, first ``n`` kept.

    Broadcasts one ramp per cell instead of gathering, which is ~10x faster than np.interp.
    """
    ramp = np.arange(cell, dtype=np.float32) / cell
    lo, hi = a[..., :-1, None], a[..., 1:, None]
    out = lo + (hi - lo) * ramp  # shape (..., g - 1, cell)
    return out.reshape(*a.shape[:-1], -1)[..., :n]


def make_volume(size: int, seed: int = 0) -> np.ndarray:
    """A deterministic ``size``^3 uint8 volume that compresses roughly like EM data.

    128 plus two smooth random fields (trilinear upsampling of coarse random grids with cells
    of 64 and 16 voxels) plus small per-voxel noise (triangular, -6..6 grey levels).
    Built slab by slab so the float temporaries stay small (a few tens of MiB).
    """
    rng = np.random.default_rng(seed)
    octaves = []  # coarse grids upsampled along axes 0 and 1 (small), scaled by amplitude
    for cell, amplitude in ((64, 45.0), (16, 20.0)):
        g = -(-size // cell) + 1
        grid = rng.standard_normal((g, g, g), dtype=np.float32) * amplitude
        for axis in (0, 1):
            grid = np.moveaxis(_upsample_last(np.moveaxis(grid, axis, -1), cell, size), -1, axis)
        octaves.append((np.ascontiguousarray(grid), cell))
    out = np.empty((size, size, size), dtype=np.uint8)
    step = 32
    for z0 in range(0, size, step):
        z1 = min(z0 + step, size)
        noise = rng.integers(0, 7, (2, z1 - z0, size, size), dtype=np.uint8)
        slab = (noise[0] + noise[1]).astype(np.float32)
        slab += 122.0  # 128 minus the noise mean
        for grid, cell in octaves:
            slab += _upsample_last(grid[z0:z1], cell, size)
        np.clip(slab, 0, 255, out=slab)
        out[z0:z1] = slab  # float -> uint8 (truncates) on assignment
    return out


def random_origins(
    shape: Sequence[int], block: int, n: int, *, align: int = 1, seed: int = 1
) -> list[tuple[int, ...]]:
    """``n`` seeded random origins of ``block``^ndim boxes inside ``shape``, multiples of ``align``."""
    rng = np.random.default_rng(seed)
    cols = [rng.integers(0, (s - block) // align + 1, size=n) * align for s in shape]
    return [tuple(int(c[i]) for c in cols) for i in range(n)]


# --------------------------------------------------------------------------- files


def dataset_files(root: str | os.PathLike[str]) -> list[Path]:
    """Every regular file under ``root``, sorted."""
    return sorted(p for p in Path(root).rglob("*") if p.is_file())


def disk_usage(root: str | os.PathLike[str]) -> tuple[int, int]:
    """(total apparent size in bytes, number of files) of the dataset under ``root``."""
    files = dataset_files(root)
    return sum(p.stat().st_size for p in files), len(files)


def drop_page_cache(root: str | os.PathLike[str]) -> str:
    """Evict the dataset under ``root`` from the OS page cache; return the method used.

    First ``os.sync()`` (only clean pages can be dropped), then try the global
    ``echo 1 > /proc/sys/vm/drop_caches``; if that is not permitted, fall back to
    ``posix_fadvise(POSIX_FADV_DONTNEED)`` on every file of the dataset (after an fsync).
    """
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
        return "drop_caches"
    except OSError:
        pass
    for path in dataset_files(root):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return "posix_fadvise"


def resident_fraction(root: str | os.PathLike[str]) -> float | None:
    """Fraction of the dataset's bytes in the page cache (via util-linux ``fincore``), or None."""
    files = dataset_files(root)
    if not files or shutil.which("fincore") is None:
        return None
    res = subprocess.run(
        ["fincore", "-b", "-n", "-r", "-o", "RES,SIZE", *map(str, files)],
        capture_output=True, text=True, check=False,
    )
    if res.returncode != 0:
        return None
    resident = total = 0
    for line in res.stdout.split("\n"):
        if line.strip():
            r, s = line.split()[:2]
            resident, total = resident + int(r), total + int(s)
    return resident / total if total else None


# --------------------------------------------------------------------------- timing, memory


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, in MiB.

    Reads ``VmHWM`` from /proc/self/status. ``getrusage(RUSAGE_SELF).ru_maxrss`` is only the
    fallback: Linux carries it across fork + exec, so in a child started by a big parent it
    reports at least the parent's RSS (a 300 MiB parent makes a bare child report 325 MiB).
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def run_child(script: str | os.PathLike[str], args: Sequence[str]) -> dict[str, Any]:
    """Run ``python script *args`` in a fresh interpreter; parse the JSON of its last stdout line."""
    res = subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, check=False
    )
    if res.returncode != 0:
        raise RuntimeError(f"child {' '.join(args)} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().split("\n")[-1])


# --------------------------------------------------------------------------- output


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    if v >= 100:
        return f"{v:,.0f}"
    return f"{v:#.3g}" if v < 10 else f"{v:.1f}"


def format_table(
    title: str,
    rows: Sequence[tuple[str, dict[str, float | None]]],
    libs: Sequence[str],
    ratios: Sequence[tuple[str, str]] = (),
) -> str:
    """A plain-text table: one row per figure, one column per library, then ratio columns.

    ``rows`` holds (figure label, {lib: value}); ``ratios`` holds (numerator, denominator)
    library pairs, printed as ``num/den`` columns when both libraries have the value.
    """
    header = ["", *libs, *(f"{a}/{b}" for a, b in ratios)]
    body = []
    for label, values in rows:
        cells = [label, *(_fmt(values.get(lib)) for lib in libs)]
        for a, b in ratios:
            va, vb = values.get(a), values.get(b)
            cells.append(f"{va / vb:.2f}" if va is not None and vb else "-")
        body.append(cells)
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    line = lambda cells: "  ".join(  # noqa: E731
        c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
    )
    sep = "-" * len(line(header))
    return "\n".join([title, sep, line(header), sep, *map(line, body), sep])


# --------------------------------------------------------------------------- volume phases
Origin = tuple[int, ...]


def box(origin: Origin, n: int) -> tuple[slice, ...]:
    """The n-cube selection at ``origin``."""
    return tuple(slice(o, o + n) for o in origin)


def child_write(adapter: Any, variant: str, path: str, volume: str) -> None:
    """The write phase, in its own process: print one JSON line with time and peak RSS."""
    vol = np.load(volume)
    before = peak_rss_mib()
    t0 = time.perf_counter()
    adapter.write(Path(path), vol, variant)
    seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds, "rss_peak_mib": peak_rss_mib(), "rss_before_mib": before}))


def bench_volume(
    script: str, name: str, adapter: Any, variant: str, path: Path, vol: np.ndarray, npy: Path,
    origins: dict[str, list[Origin]], write_repeat: int, read_repeat: int, chunk: int,
) -> dict[str, Any]:
    """Every phase of a volume benchmark for one library and variant (see ``bench_volumes``)."""
    return bench_volumes(script, {name: adapter}, variant, {name: path}, vol, npy, origins,
                         write_repeat, read_repeat, chunk)[name]


def bench_volumes(
    script: str, adapters: dict[str, Any], variant: str, paths: dict[str, Path], vol: np.ndarray,
    npy: Path, origins: dict[str, list[Origin]], write_repeat: int, read_repeat: int, chunk: int,
) -> dict[str, dict[str, Any]]:
    """Every phase of a volume benchmark for several libraries, taking turns.

    Each phase is repeated (the best repetition counts) and every repetition is done by every
    library in turn, the order rotating: the shared machine's slow spells then hit all of
    them alike, instead of whichever library ran its phases during one. The write runs in
    child processes (``script --child-write``), each after an ``os.sync()``; then the whole
    read cold (page cache dropped first) and warm (checked against ``vol``) and the aligned
    (``chunk``-sized) and unaligned (100^3) random reads, one at a time with results dropped
    (a few checked). Each adapter has ``open``, ``read_all`` and ``read_box``.
    """
    names = list(adapters)

    def turns(rep: int) -> list[str]:
        k = rep % len(names)
        return names[k:] + names[:k]

    writes: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for rep in range(max(write_repeat, 1)):
        for name in turns(rep):
            # no dirty pages waiting (the .npy just saved, another library's files): the
            # kernel's writeback would otherwise slow whoever writes next
            os.sync()
            writes[name].append(run_child(script, ["--child-write", name, variant, str(paths[name]), "--volume", str(npy)]))
    handles = {n: adapters[n].open(paths[n]) for n in names}
    times: dict[str, dict[str, list[float]]] = {n: {} for n in names}
    drops: dict[str, tuple[str, float | None]] = {}

    def timed(phase: str, name: str, run: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        result = run()
        times[name].setdefault(phase, []).append(time.perf_counter() - t0)
        return result

    for phase in ("cold", "warm"):
        for rep in range(max(read_repeat, 1)):
            for name in turns(rep):
                if phase == "cold":
                    method = drop_page_cache(paths[name])
                    drops.setdefault(name, (method, resident_fraction(paths[name])))
                data = timed(phase, name, lambda: adapters[name].read_all(handles[name]))
                if rep == 0 and not np.array_equal(data, vol):
                    raise AssertionError(f"{name}/{variant}: whole read differs from the source volume")
                del data
    for kind, n in (("aligned", chunk), ("unaligned", 100)):
        n = min(n, vol.shape[0])
        boxes = origins[kind]
        for rep in range(max(read_repeat, 1)):
            for name in turns(rep):
                a, h = adapters[name], handles[name]

                def reads(a: Any = a, h: Any = h) -> None:
                    for origin in boxes:  # one at a time, result dropped: random access, not a batch
                        a.read_box(h, origin, n)

                timed(kind, name, reads)
        for name in names:
            for o in boxes[:4]:
                if not np.array_equal(adapters[name].read_box(handles[name], o, n), vol[box(o, n)]):
                    raise AssertionError(f"{name}/{variant}: {kind} read at {o} differs from the source")
    nbytes = vol.nbytes
    per_phase = {  # figure -> (phase, amount per run): figure = amount / seconds
        "read_cold_MBps": ("cold", nbytes / MB),
        "read_warm_MBps": ("warm", nbytes / MB),
        "aligned_reads_per_s": ("aligned", len(origins["aligned"])),
        "unaligned_reads_per_s": ("unaligned", len(origins["unaligned"])),
    }
    results = {}
    for name in names:
        disk, nfiles = disk_usage(paths[name])
        write_s = [w["seconds"] for w in writes[name]]
        # the headline is the best repetition; the median of the repetitions sits beside it
        # (``<figure>_median``), so that a library whose runs scatter widely shows that
        results[name] = {
            "write_MBps": nbytes / MB / min(write_s),
            "write_MBps_median": nbytes / MB / statistics.median(write_s),
            **{key: amount / min(times[name][phase]) for key, (phase, amount) in per_phase.items()},
            **{f"{key}_median": amount / statistics.median(times[name][phase])
               for key, (phase, amount) in per_phase.items()},
            "disk_MiB": disk / MiB,
            "files": nfiles,
            "rss_peak_MiB": max(w["rss_peak_mib"] for w in writes[name]),
            "rss_before_write_MiB": max(w["rss_before_mib"] for w in writes[name]),
            "cache_drop": drops[name][0],
            "resident_after_drop": drops[name][1],
        }
    return results
