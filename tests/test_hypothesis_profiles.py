"""The Hypothesis profile of a run (tests/conftest.py): the gate is deterministic, the slow
run randomized with more examples."""

from __future__ import annotations

import conftest
import pytest
from _helpers import examples
from hypothesis import settings


def test_profiles_are_registered_as_documented() -> None:
    default = settings.get_profile("default")
    assert default.derandomize and default.database is None and default.deadline is None and default.print_blob
    randomized = settings.get_profile("randomized")
    assert not randomized.derandomize and randomized.max_examples == 10 * default.max_examples


def test_this_run_uses_the_profile_conftest_chose() -> None:
    loaded = settings.default
    assert loaded.derandomize == (conftest._profile == "default")
    assert examples(40) == (40 if conftest._profile == "default" else 400)


@pytest.mark.parametrize(("markexpr", "slow"), [
    ("", False), ("not slow", False), ("slow", True), ("slow and not remote", True), ("not slow and x", False),
])
def test_slow_runs_are_recognised(markexpr: str, slow: bool) -> None:
    assert conftest._runs_slow_tests(markexpr) is slow
