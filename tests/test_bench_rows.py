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
