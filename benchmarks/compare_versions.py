"""Issue 17's performance check: the benchmarks under two shardstore versions, side by side.

    python benchmarks/compare_versions.py --old /work/venv-old/bin/python --new /work/venv/bin/python

``--save runs.json`` keeps every run's figures; ``--load runs.json ...`` pools them with the
runs of a later call (``--runs 0``: report them only).

Each interpreter must import its own shardstore (the scripts themselves are taken from this
directory for both). Every bench runs with ``--libs =shardstore --json`` (exactly the row
"shardstore", not shardstore+cache, which only the new version has), old and new alternating
(each running first in every other run) so that machine load hits both alike, ``--runs`` times (default 3); the table gives each numeric
figure's median per version and a ratio oriented so that above 1 means the new one is better
(new/old for rates like MB/s and reads/s, old/new for seconds, MiB and file counts), flagged
below the threshold (default 0.95). Figures are the JSON's numeric leaves.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# bench -> arguments: the whole comparison with --runs 3 takes about 10 minutes on 2 shared cores.
# Reads keep each bench's own best-of-3 (no --repeat 1): a single warm whole read mostly times
# the first touch of a freshly allocated output (glibc maps it anew until its mmap threshold has
# adapted), which says more about the allocator's state than about the read path.
BENCHES: dict[str, list[str]] = {
    "bench_zarr3": ["--size", "256", "--reads", "64"],
    "bench_n5": ["--size", "256", "--reads", "64"],
    "bench_precomputed": ["--size", "256", "--reads", "64", "--runs", "1"],
    "bench_precomputed_kv": ["--keys", "50000", "--reads", "2000", "--runs", "1"],
    "bench_bcolz": ["--n", "20000000", "--reads", "2000", "--runs", "1"],
    "bench_remote": ["--size", "256", "--reads", "32", "--repeat", "1"],
}
TINY: dict[str, list[str]] = {name: ["--quick"] for name in BENCHES}
TINY["bench_bcolz"] = ["--n", "2000000", "--piece", "100000", "--reads", "200", "--runs", "1"]

# Figures that are not speeds or sizes of the data (run bookkeeping, echoed arguments).
SKIP_KEYS = {"args", "config", "env", "resident_after_drop"}
# Benches without a --libs option (all have one now; kept for benches added without it).
NO_LIBS_OPTION: set[str] = set()
# Rows of other libraries and shardstore-vs-anchor ratios (they measure the anchors too).
FOREIGN = ("tensorstore", "paired/", "vs_best_anchor/")


def flatten(obj: Any, prefix: str = "") -> dict[str, float]:
    """Numeric leaves of a bench's JSON, keyed by their path."""
    out: dict[str, float] = {}
    if isinstance(obj, dict):
        items = [(str(k), v) for k, v in obj.items() if str(k) not in SKIP_KEYS]
    elif isinstance(obj, list):
        items = [(str(i), v) for i, v in enumerate(obj)]
    else:
        items = []
    for key, value in items:
        path = f"{prefix}/{key}" if prefix else key
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)):
            out[path] = float(value)
        else:
            out.update(flatten(value, path))
    return out


def higher_is_better(key: str) -> bool:
    """Rates (MB/s, reads/s, ratios) improve upward; seconds, MiB and counts improve downward."""
    return any(unit in key for unit in ("MBps", "per_s", "MB/s", "reads/s", "ratio"))


def bench_json(python: str, bench: str, args: list[str], scratch: Path) -> Any:
    """The JSON a bench script writes, run by ``python`` in a fresh process (in ``scratch``,
    without this process's PYTHONPATH, so that it imports that interpreter's shardstore); a
    string saying why when it failed. (``anchor_runs.py`` runs the benches this way too.)"""
    out = scratch / f"{bench}.json"
    out.unlink(missing_ok=True)
    cmd = [python, str(HERE / f"{bench}.py"), "--json", str(out), *args]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=scratch)
    if proc.returncode != 0 or not out.exists():
        return f"exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:] or proc.stdout[-200:]}"
    return json.loads(out.read_text())


def run_once(python: str, bench: str, args: list[str], scratch: Path) -> dict[str, float] | str:
    # "=shardstore": that row only; plain "shardstore" (the library) would add shardstore+cache
    # on the new side, which the old version skips: extra work and cache state between rows
    libs = [] if bench in NO_LIBS_OPTION else ["--libs", "=shardstore"]
    got = bench_json(python, bench, [*libs, *args], scratch)
    return got if isinstance(got, str) else flatten(got)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--old", required=True, help="python of the old version")
    p.add_argument("--new", default=sys.executable, help="python of the new version (default: this one)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--benches", default=",".join(BENCHES))
    p.add_argument("--threshold", type=float, default=0.95)
    p.add_argument("--tiny", action="store_true", help="smoke test: each bench's --quick sizes, 1 run")
    p.add_argument("--save", type=Path, help="write every run's figures to this JSON file (for --load)")
    p.add_argument("--load", type=Path, nargs="*", default=[],
                   help="runs saved by earlier --save calls, pooled with this call's (--runs 0: only them)")
    args = p.parse_args()
    sizes = TINY if args.tiny else BENCHES
    benches = [b if b.startswith("bench_") else f"bench_{b}" for b in args.benches.split(",")]
    unknown = [b for b in benches if b not in sizes]
    if unknown:
        p.error(f"unknown benches {unknown}; known: {', '.join(sizes)}")
    runs = 1 if args.tiny else args.runs
    # bench -> version -> the runs' figures; earlier runs first (noise differs from minute to
    # minute on a shared machine: pooling runs made at different times evens it out)
    saved: dict[str, dict[str, list[dict[str, float]]]] = {}
    for path in args.load:
        for bench, versions in json.loads(path.read_text()).items():
            for which, rows in versions.items():
                saved.setdefault(bench, {}).setdefault(which, []).extend(rows)
    pooled = {b: len(saved.get(b, {}).get("new", [])) for b in benches}
    print(f"| figure | old median | new median | better ratio (new vs old) | (runs {runs}"
          + (f" + {max(pooled.values())} loaded" if args.load else "") + "; sizes: "
          + "; ".join(f"{b} {' '.join(sizes[b])}" for b in benches) + ") |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="compare-", dir="/tmp") as tmp:
        scratch = Path(tmp)
        for bench in benches:
            got: dict[str, list[dict[str, float]]] = saved.setdefault(bench, {"old": [], "new": []})
            got.setdefault("old", [])
            got.setdefault("new", [])
            for run in range(runs):
                # the order alternates: a figure that suffers from running second (the disk still
                # busy with the first one's files, say) then costs both versions alike
                pair = [("old", args.old), ("new", args.new)]
                for which, python in pair if run % 2 == 0 else pair[::-1]:
                    res = run_once(python, bench, sizes[bench], scratch)
                    if isinstance(res, str):
                        print(f"| {bench} ({which}) | failed: {res} | | | |", flush=True)
                    else:
                        got[which].append(res)
                if args.save:
                    args.save.write_text(json.dumps(saved))
            if not got["old"] or not got["new"]:
                continue
            keys = [k for k in got["new"][0]
                    if all(k in r for r in got["old"] + got["new"]) and not any(f in k for f in FOREIGN)]
            for key in keys:
                old = statistics.median(r[key] for r in got["old"])
                new = statistics.median(r[key] for r in got["new"])
                if higher_is_better(key):
                    ratio = new / old if old else float("nan")
                else:
                    ratio = old / new if new else float("nan")
                flag = "**< threshold**" if ratio < args.threshold else ""
                print(f"| {bench}:{key} | {old:.4g} | {new:.4g} | {ratio:.3f} | {flag} |", flush=True)


if __name__ == "__main__":
    main()
