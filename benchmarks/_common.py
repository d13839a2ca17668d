"""Helpers shared by the benchmark scripts (one script per format: bench_zarr3.py, ...).

Everything here is library-neutral: synthetic data, random read positions, page-cache
dropping, timing, peak-RSS measurement in a child process, disk usage and table printing.
NumPy only (no scipy), so a benchmark runs in the plain test environment.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

MB = 1e6  # throughput unit: 10^6 bytes of uncompressed data per second
MiB = 2**20  # size unit for disk usage and RSS
_T = TypeVar("_T")


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


#: how long a write child waits after its imports before it starts the clock
_SETTLE_SECONDS = 0.2


def child_write(adapter: Any, variant: str, path: str, volume: str) -> None:
    """The write phase, in its own process: print one JSON line with time and peak RSS.

    The volume is loaded in the memory layout it was saved in (``np.save`` keeps Fortran
    order), so a write figure is for an input in that order."""
    vol = np.load(volume)
    # NumPy's OpenBLAS threads spin for ~40 ms of CPU after its import: a row whose import is
    # quick (z5py) started writing while they held one of the two cores
    time.sleep(_SETTLE_SECONDS)
    before = peak_rss_mib()
    t0 = time.perf_counter()
    adapter.write(Path(path), vol, variant)
    seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds, "rss_peak_mib": peak_rss_mib(), "rss_before_mib": before}))


def save_orders(vol: np.ndarray, out_dir: Path, orders: Sequence[str]) -> dict[str, Path]:
    """The source volume saved once per input order ("C", "F"), for the write children."""
    out = {}
    for order in orders:
        out[order] = out_dir / f"source_{order}.npy"
        np.save(out[order], np.asfortranarray(vol) if order == "F" else np.ascontiguousarray(vol))
    return out


def order_key(key: str, order: str) -> str:
    """The result key of a write figure for an input in ``order``: C keeps the plain key (the
    JSON paths compare_versions reads), other orders insert it before the unit: ``write_F_MBps``,
    ``rss_peak_F_MiB``."""
    if order == "C":
        return key
    head, _, unit = key.rpartition("_")
    return f"{head}_{order}_{unit}"


#: repetitions of the volume benches' phases that start cold (best counts): 64 random reads
#: from a cold disk take ~0.1 s, and with the best of 3 their ratios moved by 20-40 % between
#: runs of the same code
COLD_REPEAT = 5


def add_cold_repeat_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cold-repeat", type=int, default=None,
                   help=f"best of N for the phases that start cold (default {COLD_REPEAT}; 1 with --quick)")


def cold_repeats(args: argparse.Namespace) -> int:
    return max(args.cold_repeat or (1 if args.quick else COLD_REPEAT), 1)


def bench_volumes(
    script: str, adapters: dict[str, Any], variant: str, paths: dict[str, Path], vol: np.ndarray,
    npy: Path | Mapping[str, Path], origins: dict[str, list[Origin]], write_repeat: int,
    read_repeat: int, chunk: int, child_args: Sequence[str] = (), turn: int = 0, cold_repeat: int | None = None,
) -> dict[str, dict[str, Any]]:
    """Every phase of a volume benchmark for several rows (library configurations), taking turns.

    Each phase is repeated (the best repetition counts) and every repetition is done by every
    row in turn, the order rotating: the shared machine's slow spells then hit all of them
    alike, instead of whichever row ran its phases during one. The write runs in child
    processes (``script --child-write ROW VARIANT DIR --volume NPY *child_args``), each after
    an ``os.sync()``, once per input order (``npy`` maps "C"/"F" to the volume saved in that
    layout; the last order's dataset is the one read). Then the whole read cold (page cache
    dropped and the array opened afresh, so no library cache survives either) and warm (the
    same handle again; checked against ``vol``), and for the aligned (``chunk``-sized) and
    unaligned (100^3) random boxes a cold pass (page cache dropped, fresh handle) followed by
    a warm pass of the same boxes on that handle: a row with a chunk cache reuses what the
    cold pass decoded, as its users' repeated views would. Reads go one at a time, results
    dropped (a few checked). Each adapter has ``open``, ``read_all`` and ``read_box``.
    ``cold_repeat`` (default ``read_repeat``): repetitions of the phases that start cold (the
    whole cold read, and the random passes with their warm pass), whose ~0.1 s of cold disk
    reads vary more between repetitions than the warm phases.
    """
    names = list(adapters)
    npys = {"C": npy} if isinstance(npy, Path) else dict(npy)

    writes: dict[str, dict[str, list[dict[str, Any]]]] = {n: {o: [] for o in npys} for n in names}
    for order, source in npys.items():
        for rep in range(max(write_repeat, 1)):
            for name in turns(names, rep + turn):
                # no dirty pages waiting (the .npy just saved, another library's files): the
                # kernel's writeback would otherwise slow whoever writes next
                os.sync()
                writes[name][order].append(run_child(script, ["--child-write", name, variant, str(paths[name]),
                                                              "--volume", str(source), *child_args]))
    handles: dict[str, Any] = {}
    times: dict[str, dict[str, list[float]]] = {n: {} for n in names}
    drops: dict[str, tuple[str, float | None]] = {}
    returns: dict[str, str] = {}

    def timed(phase: str, name: str, run: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        result = run()
        times[name].setdefault(phase, []).append(time.perf_counter() - t0)
        return result

    def cold_open(name: str) -> None:
        method = drop_page_cache(paths[name])
        drops.setdefault(name, (method, resident_fraction(paths[name])))
        handles[name] = adapters[name].open(paths[name])

    cold_reps = max(read_repeat if cold_repeat is None else cold_repeat, 1)
    for phase in ("cold", "warm"):
        for rep in range(cold_reps if phase == "cold" else max(read_repeat, 1)):
            for name in turns(names, rep + turn):
                if phase == "cold":
                    cold_open(name)
                data = timed(phase, name, lambda name=name: adapters[name].read_all(handles[name]))  # type: ignore[misc]
                if rep == 0 and phase == "cold":
                    returns[name] = layout_of(data)
                    if not np.array_equal(data, vol):
                        raise AssertionError(f"{name}/{variant}: whole read differs from the source volume")
                del data
    for kind, n in (("aligned", chunk), ("unaligned", 100)):
        n = min(n, vol.shape[0])
        boxes = origins[kind]
        for rep in range(cold_reps):
            for name in turns(names, rep + turn):
                a = adapters[name]
                cold_open(name)
                h = handles[name]

                def reads(a: Any = a, h: Any = h, boxes: list[Origin] = boxes, n: int = n) -> None:
                    for origin in boxes:  # one at a time, result dropped: random access, not a batch
                        a.read_box(h, origin, n)

                timed(f"{kind} cold", name, reads)
                timed(kind, name, reads)
        for name in names:
            for o in boxes[:4]:
                if not np.array_equal(adapters[name].read_box(handles[name], o, n), vol[box(o, n)]):
                    raise AssertionError(f"{name}/{variant}: {kind} read at {o} differs from the source")
    nbytes = vol.nbytes
    per_phase = {  # figure -> (phase, amount per run): figure = amount / seconds
        "read_cold_MBps": ("cold", nbytes / MB),
        "read_warm_MBps": ("warm", nbytes / MB),
        "aligned_cold_reads_per_s": ("aligned cold", len(origins["aligned"])),
        "aligned_reads_per_s": ("aligned", len(origins["aligned"])),
        "unaligned_cold_reads_per_s": ("unaligned cold", len(origins["unaligned"])),
        "unaligned_reads_per_s": ("unaligned", len(origins["unaligned"])),
    }
    results = {}
    for name in names:
        disk, nfiles = disk_usage(paths[name])
        res: dict[str, Any] = {}
        for order, ws in writes[name].items():
            write_s = [w["seconds"] for w in ws]
            # the headline is the best repetition; the median of the repetitions sits beside it
            # (``<figure>_median``), so that a row whose runs scatter widely shows that
            res[order_key("write_MBps", order)] = nbytes / MB / min(write_s)
            res[order_key("write_MBps", order) + "_median"] = nbytes / MB / statistics.median(write_s)
            res[order_key("rss_peak_MiB", order)] = max(w["rss_peak_mib"] for w in ws)
            res[order_key("rss_before_write_MiB", order)] = max(w["rss_before_mib"] for w in ws)
        results[name] = {
            **res,
            **{key: amount / min(times[name][phase]) for key, (phase, amount) in per_phase.items()},
            **{f"{key}_median": amount / statistics.median(times[name][phase])
               for key, (phase, amount) in per_phase.items()},
            "disk_MiB": disk / MiB,
            "files": nfiles,
            "returns": returns[name],
            "cache_drop": drops[name][0],
            "resident_after_drop": drops[name][1],
        }
    return results


def volume_figures(orders: Sequence[str]) -> list[tuple[str, str, bool]]:
    """The (key, label, higher is better) figures ``bench_volumes`` measures, writes per order."""
    writes = [(order_key("write_MBps", o), f"write MB/s, {o}-order input", True) for o in orders]
    rss = [(order_key("rss_peak_MiB", o), f"peak RSS write MiB, {o} input", False) for o in orders]
    return [
        *writes,
        ("read_cold_MBps", "read cold MB/s", True),
        ("read_warm_MBps", "read warm MB/s", True),
        ("aligned_cold_reads_per_s", "aligned reads/s cold", True),
        ("aligned_reads_per_s", "aligned reads/s warm", True),
        ("unaligned_cold_reads_per_s", "100^3 unaligned reads/s cold", True),
        ("unaligned_reads_per_s", "100^3 unaligned reads/s warm", True),
        ("disk_MiB", "size on disk MiB", False),
        *rss,
    ]


def returns_line(results: Mapping[str, Mapping[str, Any]]) -> str:
    """Which memory layout each row's whole read returned."""
    return "# whole reads return: " + ", ".join(f"{n} {r.get('returns', '?')}" for n, r in results.items())


# --------------------------------------------------------------------------- rows: configurations
# A "row" is one library in one configuration. Every anchor runs in its default configuration
# and in its fastest documented one, so that the ratio against the best anchor row cannot be
# flattered by benchmarking a competitor as nobody would run it.

#: tensorstore's cache_pool for the "+cache" rows. 256 MiB: the budget tensorstore's own
#: examples use for interactive reads, twice the 512^3 uint8 volume (so a re-read can be served
#: from decoded chunks), and the same size as the shardstore "+cache" row's default budget.
TS_CACHE_BYTES = 256 * MiB
#: the IOConfig fields of the default "shardstore+cache" row (override with
#: ``--shardstore-cache-config``); a field the installed shardstore lacks skips the row
SHARDSTORE_CACHE_CONFIG: dict[str, Any] = {"chunk_cache_bytes": TS_CACHE_BYTES}


class RowUnavailable(Exception):
    """A row's library or configuration is not installed or not supported: the row is skipped."""


@dataclass(frozen=True)
class Row:
    """One column of a benchmark table: ``lib`` (an adapter factory key) built with ``options``."""

    name: str
    lib: str
    options: Mapping[str, Any] = field(default_factory=dict)
    ours: bool = False  # shardstore's own rows; every other row is an anchor
    note: str = ""  # what the configuration is, printed once per run


def shardstore_rows(note_default: str = "opened with its defaults") -> list[Row]:
    """shardstore's two rows: as opened by default, and with its decoded-chunk cache."""
    return [
        Row("shardstore", "shardstore", {}, ours=True, note=note_default),
        Row("shardstore+cache", "shardstore", {"cache": True}, ours=True,
            note="IOConfig with the decoded-chunk cache (--shardstore-cache-config)"),
    ]


def tensorstore_rows(default_cache: int = 0) -> list[Row]:
    """tensorstore without a chunk cache (``cache_pool`` 0, or ``default_cache``) and with one."""
    return [
        Row("tensorstore", "tensorstore", {"cache_bytes": default_cache},
            note=f"cache_pool total_bytes_limit {default_cache}"),
        Row("tensorstore+cache", "tensorstore", {"cache_bytes": TS_CACHE_BYTES},
            note=f"cache_pool total_bytes_limit {TS_CACHE_BYTES} (256 MiB)"),
    ]


def select_rows(declared: Sequence[Row], wanted: Sequence[str]) -> list[Row]:
    """The declared rows named in ``wanted`` by row name or by library (all of its rows).

    ``=name`` selects only the row of that exact name: ``shardstore`` is also a library, so
    plain ``shardstore`` brings ``shardstore+cache`` along, which compare_versions must not
    run on the new side only (the old version has no such row).
    """
    exact = {w[1:] for w in wanted if w.startswith("=")}
    loose = {w for w in wanted if not w.startswith("=")}
    names = {r.name for r in declared}
    known = names | {r.lib for r in declared}
    if unknown := sorted((loose - known) | {f"={w}" for w in exact - names}):
        raise SystemExit(f"unknown rows/libraries {unknown}; choose from {sorted(known)} "
                         "(=row for one row by its exact name)")
    return [r for r in declared if r.name in exact or r.name in loose or r.lib in loose]


def turns(names: Sequence[_T], rep: int) -> list[_T]:
    """The order the rows (``names``) take their turns in at repetition ``rep``: rotated one
    place per repetition, and reversed at every other one, so that no row always goes first
    (or always after the same others: ours are declared before the anchors). Benches that
    repeat in one process pass their repetition; a bench run once per process adds its
    ``--turn`` (``anchor_runs.py`` gives each of its runs another)."""
    names = list(names)
    if not names:
        return names
    k = (rep // 2) % len(names)
    order = names[k:] + names[:k]
    return order[::-1] if rep % 2 else order


def add_row_arguments(parser: Any, declared: Sequence[Row]) -> None:
    """``--libs`` (rows or libraries), ``--turn`` and the shardstore configuration options."""
    parser.add_argument("--libs", default=",".join(dict.fromkeys(r.lib for r in declared)),
                        help="comma list of libraries (all their rows), rows, or =row (that row only): "
                        + ", ".join(r.name for r in declared))
    parser.add_argument("--turn", type=int, default=0,
                        help="start the rows' turns this many repetitions on (see turns(); default 0)")
    parser.add_argument("--shardstore-config", type=json.loads, default={},
                        help="JSON object of IOConfig fields for every shardstore row "
                        "(passed as config=IOConfig(...) to open/create)")
    parser.add_argument("--shardstore-cache-config", type=json.loads, default=SHARDSTORE_CACHE_CONFIG,
                        help="JSON object of IOConfig fields added for the shardstore+cache row "
                        f"(default {json.dumps(SHARDSTORE_CACHE_CONFIG)})")


def row_child_args(args: Any) -> list[str]:
    """The row options a ``--child-write`` process needs to rebuild the same adapter."""
    return ["--shardstore-config", json.dumps(args.shardstore_config),
            "--shardstore-cache-config", json.dumps(args.shardstore_cache_config)]


def row_options(row: Row, args: Any) -> dict[str, Any]:
    """The adapter keywords of ``row``: its options, with shardstore's IOConfig fields resolved."""
    options = dict(row.options)
    if row.lib == "shardstore":
        cache = options.pop("cache", False)
        options["config"] = {**args.shardstore_config, **(args.shardstore_cache_config if cache else {})}
    return options


def build_adapters(rows: Sequence[Row], factories: Mapping[str, Callable[..., Any]], args: Any,
                   quiet: bool = False) -> dict[str, Any]:
    """One adapter per available row; a row that cannot run is dropped with its reason printed."""
    out = {}
    for row in rows:
        try:
            out[row.name] = factories[row.lib](**row_options(row, args))
        except (RowUnavailable, ImportError) as e:
            if not quiet:
                print(f"# row {row.name} skipped: {e}", flush=True)
            continue
        if not quiet:
            print(f"# row {row.name}: {row.note or 'defaults'}", flush=True)
    return out


def shardstore_kwargs(config: Mapping[str, Any] | None, *entry_points: Callable[..., Any]) -> dict[str, Any]:
    """``{"config": IOConfig(**config)}`` for shardstore's open/create calls, or {} for no config.

    Raises RowUnavailable when the installed shardstore has no IOConfig, lacks one of the
    fields, or an entry point takes no ``config`` keyword: such a row is skipped, not faked.
    """
    if not config:
        return {}
    try:
        from shardstore.config import IOConfig
    except ImportError:
        raise RowUnavailable("the installed shardstore has no shardstore.config.IOConfig") from None
    fields = {f.name for f in dataclasses.fields(IOConfig)}
    if unknown := sorted(set(config) - fields):
        raise RowUnavailable(f"the installed shardstore's IOConfig has no field {', '.join(unknown)}")
    for fn in entry_points:
        params = inspect.signature(fn).parameters
        if "config" not in params and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            raise RowUnavailable(f"{fn.__module__}.{fn.__qualname__} takes no config=")
    return {"config": IOConfig(**config)}


def layout_of(a: Any) -> str:
    """"C", "F" (or "C/F" for 1-D and other arrays contiguous both ways) or "strided"."""
    flags = np.asarray(a).flags
    if flags.c_contiguous and flags.f_contiguous:
        return "C/F"
    return "C" if flags.c_contiguous else "F" if flags.f_contiguous else "strided"


# --------------------------------------------------------------------------- vs best anchor


def vs_best_anchor(values: Mapping[str, float | None], rows: Sequence[Row], higher: bool) -> dict[str, Any]:
    """The best anchor row of one figure and each of our rows' ratio against it.

    Ratios are oriented so that above 1 means shardstore is better: ours / best for rates,
    best / ours for sizes, seconds, RSS and request counts (``inf`` when ours is 0 and the
    best anchor's is not; None, unrated, the other way round: the requests of one kind, such
    as HEADs where the anchor sends conditional GETs, are compared in their totals).
    Empty when there is no anchor value.
    """
    anchors: dict[str, float] = {}
    for r in rows:
        v = values.get(r.name)
        if not r.ours and v is not None:
            anchors[r.name] = v
    if not anchors:
        return {}
    best = (max if higher else min)(anchors, key=anchors.__getitem__)
    bv = anchors[best]
    out: dict[str, Any] = {"best_anchor": best, "best_anchor_value": bv}
    for r in rows:
        v = values.get(r.name)
        if not r.ours or v is None:
            continue
        if higher:
            out[r.name] = v / bv if bv else None
        elif v:  # (some where the best anchor needs none, e.g. HEADs beside conditional GETs: unrated)
            out[r.name] = bv / v if bv else None
        else:  # (none where the best anchor needs some, e.g. GETs a cache saves: better, no finite ratio)
            out[r.name] = math.inf if bv else 1.0
    return out


def anchor_table(title: str, figures: Sequence[tuple[str, str, bool]],
                 results: Mapping[str, Mapping[str, Any]], rows: Sequence[Row]) -> tuple[str, dict[str, Any]]:
    """A table of every row's figures, the best anchor row and our rows' "vs best" ratios.

    ``figures`` holds (result key, label, higher is better); ``results`` maps row -> figures.
    When the results carry ``<key>_median`` (median repetitions), the shardstore row's ratio
    of the medians is printed too: best-of-N favours rows whose repetitions scatter widely.
    Returns the text and ``{key: vs_best_anchor(...)}`` (plus ``<key>_median`` entries).
    """
    present = [r for r in rows if r.name in results]
    ours = [r.name for r in present if r.ours]
    with_medians = any(f"{k}_median" in res for res in results.values() for k, _, _ in figures)
    header = ["", *(r.name for r in present), "best anchor", *(f"{o} vs best" for o in ours)]
    if with_medians and ours:
        header.append(f"{ours[0]} vs best (medians)")
    body, summary = [], {}
    for key, label, higher in figures:
        values = {r.name: results[r.name].get(key) for r in present}
        ratio = vs_best_anchor(values, present, higher)
        summary[key] = ratio
        cells = [label, *(_fmt(values[r.name]) for r in present), ratio.get("best_anchor", "-")]
        cells += [f"{ratio[o]:.2f}" if ratio.get(o) is not None else "-" for o in ours]
        if with_medians and ours:
            med = vs_best_anchor({r.name: results[r.name].get(f"{key}_median") for r in present}, present, higher)
            summary[f"{key}_median"] = med
            cells.append(f"{med[ours[0]]:.2f}" if med.get(ours[0]) is not None else "-")
        body.append(cells)
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    line = lambda cells: "  ".join(  # noqa: E731
        c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
    )
    sep = "-" * len(line(header))
    note = "(vs best: shardstore row / best anchor row; above 1 = shardstore better, for sizes too)"
    return "\n".join([title, note, sep, line(header), sep, *map(line, body), sep]), summary
