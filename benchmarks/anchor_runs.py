"""Issue 21's target table: every format bench run several times, each figure's ratio against
its best anchor row as the median over the runs.

    python benchmarks/anchor_runs.py --runs 3 --save runs.json > table.md

Each bench script runs ``--runs`` times in a fresh process (with all its rows: shardstore's
default and cached rows and every anchor row in its default and fastest configuration) and
writes its JSON; a bench's ``vs_best_anchor`` gives, per figure, the best anchor row of that run
and each shardstore row's ratio against it (above 1: shardstore better). The table gives the
median of those per-run ratios for each shardstore row, the anchor rows that were best, and
flags figures where no shardstore row reaches ``--threshold`` (default 1.0). Figures bound by
their format (bench_bcolz: one blosc file per chunk) also get a row against the floor measured
beside them in the same run (``<figure> / <floor figure> [format floor]``), flagged below 90 %
of the threshold: the issue asks those to come within 10 % of the bound (the floor's raw I/O of
a cold read is shown, not flagged: a reader also decompresses). Such a figure below the anchor
(a one-file layout) but within 10 % of its floor is marked as format-bound, not flagged.
``--load`` reports runs saved earlier (``--runs 0``: only those), pooled with this call's.

Sizes default to ``--scale small`` (256^3 volumes, the sizes ``compare_versions`` uses, about 35
minutes for 3 runs of every bench on 2 cores); ``--scale full`` uses each bench's own defaults (512^3 volumes,
200M-element bcolz, about 25 minutes per run).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from compare_versions import BENCHES, bench_json  # noqa: E402

# the sizes issue 17's old-vs-new comparison uses (one place for both), except that each
# remote run takes the median of 3 repetitions (its own default), as the local benches take
# the best of 3: a SeaweedFS phase measured once moved its ratios by 10-25 % between runs
SMALL: dict[str, list[str]] = {**BENCHES, "bench_remote": ["--size", "256", "--reads", "32", "--repeat", "3"]}
FULL: dict[str, list[str]] = {
    "bench_zarr3": [], "bench_n5": [], "bench_precomputed": ["--runs", "1"],
    "bench_precomputed_kv": ["--runs", "1"], "bench_bcolz": ["--runs", "1"], "bench_remote": [],
}
META = ("best_anchor", "best_anchor_value")


def ratios(obj: Any, prefix: str = "") -> dict[str, dict[str, Any]]:
    """The ``vs_best_anchor`` leaves of a bench's JSON: figure path -> {best_anchor, row: ratio}."""
    out: dict[str, dict[str, Any]] = {}
    if isinstance(obj, dict):
        if "best_anchor" in obj:
            return {prefix: obj}
        for key, value in obj.items():
            out.update(ratios(value, f"{prefix}/{key}" if prefix else str(key)))
    return out


#: a figure bound by its format (bench_bcolz's ``vs_format_floor``: one blosc file per chunk)
#: meets the target within 10 % of the floor measured beside it (issue 21)
FLOOR = "format floor"
FLOOR_SHARE = 0.9


def run_bench(python: str, bench: str, args: list[str], scratch: Path) -> dict[str, dict[str, Any]] | str:
    got = bench_json(python, bench, args, scratch)
    if isinstance(got, str):
        return got
    out = ratios(got.get("vs_best_anchor", {}))
    for row, figures in got.get("vs_format_floor", {}).items():  # {row: {"fig / floor fig": ratio}}
        for fig, ratio in figures.items():
            out.setdefault(f"{fig} [{FLOOR}]", {"best_anchor": FLOOR})[row] = ratio
    return out


def _medians(got: list[dict[str, dict[str, Any]]], fig: str) -> dict[str, float]:
    """Each of our rows' median ratio over the runs that have ``fig``."""
    leaves = [r[fig] for r in got if fig in r]
    ours = sorted({k for leaf in leaves for k, v in leaf.items() if k not in META and v is not None})
    return {row: statistics.median(v for leaf in leaves if (v := leaf.get(row)) is not None) for row in ours}


def _bound(fig: str) -> bool:
    """A format-floor row that bounds a reader or writer (not the raw I/O of a cold read,
    shown to tell how much of it is the disk: every reader also decompresses)."""
    return fig.endswith(f"[{FLOOR}]") and "_io_" not in fig


def table(runs: dict[str, list[dict[str, dict[str, Any]]]], threshold: float) -> list[str]:
    """One markdown row per figure. Flagged (bold): a figure no row of ours brings to
    ``threshold`` of the best anchor row, or a format-floor row below ``FLOOR_SHARE`` of it.
    A figure the format bounds (it has a floor row) meets the target within ``FLOOR_SHARE``
    of that floor, as issue 21 asks, even below the anchor: the anchor then is another
    layout (blosc2's one file), and the cell says which floor it met."""
    lines = ["| figure | runs | best anchor rows | shardstore | shardstore+cache | other rows of ours | |",
             "|---|---|---|---|---|---|---|"]
    for bench, got in runs.items():
        if not got:
            continue
        meds = {fig: _medians(got, fig) for fig in got[-1]}
        floors_met: dict[str, str] = {}  # figure -> the floor row that bounds it and is met
        for fig, med in meds.items():
            if _bound(fig) and med and round(max(med.values()), 2) >= threshold * FLOOR_SHARE:
                floors_met.setdefault(fig.split(" / ")[0], fig.removesuffix(f" [{FLOOR}]").split(" / ")[1])
        for fig, med in meds.items():
            leaves = [r[fig] for r in got if fig in r]
            anchors = Counter(str(leaf.get("best_anchor")) for leaf in leaves)
            if not med:
                continue
            best = max(med.values())
            # (as printed: a size of 0.9999x is a tie, not a loss)
            bar = threshold * FLOOR_SHARE if fig.endswith(f"[{FLOOR}]") else threshold
            low = round(best, 2) < bar and (_bound(fig) or not fig.endswith(f"[{FLOOR}]"))
            flag = f"**< {bar:g}**" if low else ""
            if low and fig in floors_met:
                flag = f"< {bar:g}; format-bound: >= {threshold * FLOOR_SHARE:g} of {floors_met[fig]}"
            others = ", ".join(f"{row} {v:.2f}" for row, v in med.items() if row not in ("shardstore", "shardstore+cache"))
            cells = [f"{bench}:{fig}", str(len(leaves)), ", ".join(f"{a} ×{n}" for a, n in anchors.most_common()),
                     *(f"{med[r]:.2f}" if r in med else "-" for r in ("shardstore", "shardstore+cache")), others, flag]
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--benches", default=",".join(SMALL))
    p.add_argument("--scale", choices=("small", "full"), default="small")
    p.add_argument("--python", default=sys.executable, help="interpreter whose shardstore is measured")
    p.add_argument("--threshold", type=float, default=1.0)
    p.add_argument("--save", type=Path, help="write every run's ratios to this JSON file")
    p.add_argument("--load", type=Path, nargs="*", default=[], help="runs saved by earlier --save calls")
    args = p.parse_args()
    sizes = SMALL if args.scale == "small" else FULL
    benches = [b if b.startswith("bench_") else f"bench_{b}" for b in args.benches.split(",") if b]
    if unknown := [b for b in benches if b not in sizes]:
        p.error(f"unknown benches {unknown}; known: {', '.join(sizes)}")
    runs: dict[str, list[dict[str, dict[str, Any]]]] = {b: [] for b in benches}
    for path in args.load:
        for bench, got in json.loads(path.read_text()).items():
            runs.setdefault(bench, []).extend(got)
    with tempfile.TemporaryDirectory(prefix="anchor-runs-", dir="/tmp") as tmp:
        for bench in benches:
            for i in range(args.runs):
                # (each run starts the rows' turns elsewhere: a bench that runs its rows
                # once per process would otherwise always measure them in the same order)
                res = run_bench(args.python, bench, [*sizes[bench], "--turn", str(i)], Path(tmp))
                if isinstance(res, str):
                    print(f"# {bench} run {i + 1} failed: {res}", file=sys.stderr, flush=True)
                    continue
                runs[bench].append(res)
                print(f"# {bench} run {i + 1} done", file=sys.stderr, flush=True)
                if args.save:
                    args.save.write_text(json.dumps(runs))
    print(f"(median over runs of shardstore row / best anchor row; above 1 = shardstore better; "
          f"scale {args.scale}: " + "; ".join(f"{b} {' '.join(sizes[b])}" for b in benches) + ")\n")
    print("\n".join(table(runs, args.threshold)))


if __name__ == "__main__":
    main()
