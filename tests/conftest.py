"""Shared pytest fixtures: where the conformance fixtures live and their manifest."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

# Test modules import `_helpers` as a top-level module whatever pytest's import mode is.
_TESTS_DIR = str(Path(__file__).resolve().parent)
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)

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
