"""Shared pytest fixtures (where the conformance fixtures live and their manifest) and the
Hypothesis profiles of the suite.

Hypothesis profiles (``HYPOTHESIS_PROFILE`` picks one explicitly):

- ``default``: the normal run and CI. Derandomized (the same examples on every run and every
  machine) with no example database, so a green gate stays green and a failure reproduces.
- ``randomized``: fresh random examples, ten times as many (tests ask for ``examples(n)``),
  failures kept in ``.hypothesis/`` and replayed first. Loaded by the slow run
  (``python -m pytest -m slow``), which then also runs every Hypothesis test. A failure it
  finds becomes an ``@example`` of that test (``print_blob`` shows how to reproduce it).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, is_hypothesis_test, settings

# Test modules import `_helpers` as a top-level module whatever pytest's import mode is.
_TESTS_DIR = str(Path(__file__).resolve().parent)
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)

# every test fails if its process opens a Python connection to anything but loopback (issue 22:
# the suite's S3 and HTTP tests must never reach a cloud metadata endpoint or the internet)
pytest_plugins = ["_net_audit"]

from _helpers import find_fixtures_dir, fixtures_missing_reason  # noqa: E402


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """Read-only shared fixtures ($SHARDSTORE_FIXTURES, else <repo>/../shared/fixtures).

    Never write below it: copy a case to ``tmp_path`` first.
    """
    found = find_fixtures_dir()
    if found is None:
        if os.environ.get("CI"):  # CI has shared/ beside the clone: missing means broken
            pytest.fail(fixtures_missing_reason())
        pytest.skip(fixtures_missing_reason())
    return found


@pytest.fixture(scope="session")
def manifest(fixtures_dir: Path) -> dict:
    """The parsed MANIFEST.json of the shared fixtures."""
    return json.loads((fixtures_dir / "MANIFEST.json").read_text())


# -- Hypothesis profiles ------------------------------------------------------------------------
_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile(
    "default", derandomize=True, database=None, deadline=None, print_blob=True, suppress_health_check=_HEALTH
)
# max_examples is 10x Hypothesis' 100: ``_helpers.examples(n)`` scales every test's budget by it
settings.register_profile(
    "randomized", max_examples=1000, derandomize=False, deadline=None, print_blob=True, suppress_health_check=_HEALTH
)
_profile = "default"


def _runs_slow_tests(markexpr: str) -> bool:
    """Whether ``-m`` selects the slow tests (``-m slow``; not the default ``not slow``)."""
    return "slow" in markexpr.replace("not slow", "")


def pytest_configure(config: pytest.Config) -> None:
    # before collection: the test modules' @settings inherit from the profile loaded here
    global _profile
    _profile = os.environ.get("HYPOTHESIS_PROFILE") or (
        "randomized" if _runs_slow_tests(config.getoption("markexpr", "") or "") else "default"
    )
    settings.load_profile(_profile)


def _uses_hypothesis(item: pytest.Item) -> bool:
    obj = getattr(item, "obj", None)
    if obj is not None and is_hypothesis_test(obj):
        return True
    cls = getattr(item, "cls", None)  # RuleBasedStateMachine.TestCase
    return cls is not None and isinstance(getattr(cls, "settings", None), settings)


@pytest.hookimpl(tryfirst=True)  # before -m deselects: the slow run takes every property test
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _profile != "randomized":
        return
    slow_run = _runs_slow_tests(config.getoption("markexpr", "") or "")
    for item in items:
        if not _uses_hypothesis(item):
            continue
        if slow_run:
            item.add_marker(pytest.mark.slow)
        # ten times the examples: ten times the time limit (closest marker: it wins)
        limit = item.get_closest_marker("timeout")
        seconds = limit.args[0] if limit is not None and limit.args else config.getini("timeout") or 300
        item.add_marker(pytest.mark.timeout(10 * float(seconds)), append=False)


def pytest_report_header(config: pytest.Config) -> str:
    return f"hypothesis profile: {_profile}"
