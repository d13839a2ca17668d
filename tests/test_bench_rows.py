"""benchmarks/_common.select_rows: libraries, row names and ``=row`` (exactly one row).

compare_versions relies on ``=shardstore``: the library name ``shardstore`` also selects
``shardstore+cache``, a row the pre-redesign version does not have.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(scope="module")
def common() -> Iterator[ModuleType]:
    spec = importlib.util.spec_from_file_location("_bench_common", BENCHMARKS / "_common.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look the module up while building Row
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop(spec.name, None)


def rows(common: ModuleType) -> list[Any]:
    return [*common.shardstore_rows(), *common.tensorstore_rows()]


def names(selected: list[Any]) -> list[str]:
    return [r.name for r in selected]


def test_library_selects_all_its_rows(common: ModuleType) -> None:
    assert names(common.select_rows(rows(common), ["shardstore"])) == ["shardstore", "shardstore+cache"]


def test_row_name(common: ModuleType) -> None:
    assert names(common.select_rows(rows(common), ["tensorstore+cache"])) == ["tensorstore+cache"]


def test_exact_row_name_selects_only_that_row(common: ModuleType) -> None:
    assert names(common.select_rows(rows(common), ["=shardstore"])) == ["shardstore"]
    assert names(common.select_rows(rows(common), ["=shardstore", "tensorstore"])) == [
        "shardstore", "tensorstore", "tensorstore+cache"]


@pytest.mark.parametrize("wanted", [["nope"], ["=nope"], ["=tensorstore+nope"]])
def test_unknown(common: ModuleType, wanted: list[str]) -> None:
    with pytest.raises(SystemExit, match="unknown rows"):
        common.select_rows(rows(common), wanted)


def test_compare_versions_runs_exactly_the_shardstore_row() -> None:
    text = (BENCHMARKS / "compare_versions.py").read_text()
    assert '["--libs", "=shardstore"]' in text


def test_vs_best_anchor_counts_none_as_better_than_some(common: ModuleType) -> None:
    """A request count where shardstore makes none (its cache served every read) and the best
    anchor some: shardstore is better, not unrated."""
    rs = rows(common)
    ours, anchor = rs[0].name, next(r.name for r in rs if not r.ours)
    lower = common.vs_best_anchor({ours: 0, anchor: 32}, rs, higher=False)
    assert lower[ours] == float("inf")
    assert common.vs_best_anchor({ours: 0, anchor: 0}, rs, higher=False)[ours] == 1.0
    assert common.vs_best_anchor({ours: 24, anchor: 0}, rs, higher=False)[ours] is None
    assert common.vs_best_anchor({ours: 16, anchor: 32}, rs, higher=False)[ours] == 2.0
    assert common.vs_best_anchor({ours: 16, anchor: 32}, rs, higher=True)[ours] == 0.5


def test_turns_give_every_row_the_first_and_the_last_turn(common: ModuleType) -> None:
    """Rows take turns in an order that rotates and reverses, so no row always goes first,
    nor always after the same rows (ours are declared before the anchors): a bench that runs
    its rows once per process is given another ``--turn`` per run."""
    turns = common.turns
    declared = ["ours", "ours+cache", "ts", "ts+cache"]
    orders = [turns(declared, rep) for rep in range(2 * len(declared))]
    assert orders[0] == declared and orders[1] == declared[::-1]
    assert all(sorted(o) == sorted(declared) for o in orders)
    assert {o[0] for o in orders} == set(declared) and {o[-1] for o in orders} == set(declared)
    assert [turns(["a", "b"], rep)[0] for rep in range(4)] == ["a", "b", "b", "a"]
    assert turns([], 3) == []


@pytest.fixture(scope="module")
def anchor_runs() -> Iterator[ModuleType]:
    sys.path.insert(0, str(BENCHMARKS))  # (it imports compare_versions beside it)
    spec = importlib.util.spec_from_file_location("_bench_anchor_runs", BENCHMARKS / "anchor_runs.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.path.remove(str(BENCHMARKS))


def _flags(anchor_runs: ModuleType, runs: list[dict[str, dict[str, Any]]]) -> dict[str, str]:
    lines = anchor_runs.table({"bench_x": runs}, 1.0)[2:]
    return {cells[1].strip().removeprefix("bench_x:"): cells[-2].strip() for cells in (line.split("|") for line in lines)}


def test_a_format_bound_figure_meets_the_target_through_its_floor_only(anchor_runs: ModuleType) -> None:
    """Issue 21: a figure the format bounds meets the target within 10 % of the floor measured
    beside it, even below the anchor (another layout); below both it is flagged, as is a
    figure with no floor row; the raw-I/O floor row bounds nothing (a reader also decodes)."""
    floor = {"best_anchor": "format floor"}

    def run(cold_floor: float, append_floor: float) -> dict[str, dict[str, Any]]:
        return {
            "read_cold_MBps": {"best_anchor": "blosc2", "shardstore": 0.8, "shardstore+cache": 0.6},
            "append_MBps": {"best_anchor": "blosc2", "shardstore": 0.7},
            "disk_MiB": {"best_anchor": "blosc2", "shardstore": 0.97},
            "slices_per_s": {"best_anchor": "blosc2", "shardstore": 1.2},
            "read_cold_MBps / floor_read_cold_MBps [format floor]": {**floor, "shardstore": cold_floor},
            "read_cold_MBps / floor_io_read_cold_MBps [format floor]": {**floor, "shardstore": 0.5},
            "append_MBps / floor_append_MBps [format floor]": {**floor, "shardstore": append_floor},
        }

    flags = _flags(anchor_runs, [run(1.1, 0.7), run(0.95, 0.85), run(0.8, 0.95)])  # medians 0.95, 0.85
    assert flags["read_cold_MBps"].startswith("< 1; format-bound") and "floor_read_cold_MBps" in flags["read_cold_MBps"]
    assert flags["read_cold_MBps / floor_read_cold_MBps [format floor]"] == ""
    assert flags["append_MBps"] == "**< 1**"
    assert flags["append_MBps / floor_append_MBps [format floor]"] == "**< 0.9**"
    assert flags["read_cold_MBps / floor_io_read_cold_MBps [format floor]"] == ""
    assert flags["disk_MiB"] == "**< 1**" and flags["slices_per_s"] == ""
    # the cold read's floor missed (median 0.85): the figure is flagged like any other
    flags = _flags(anchor_runs, [run(0.85, 0.95)] * 3)
    assert flags["read_cold_MBps"] == "**< 1**" and flags["append_MBps"].startswith("< 1; format-bound")
