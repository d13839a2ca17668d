"""The glibc allocator tuning of ``shardstore._malloc`` (process-wide, so checked in children)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

CHECK = "from shardstore._malloc import tune_malloc; print(tune_malloc(), tune_malloc())"


def _run(env: dict[str, str]) -> str:
    return subprocess.run([sys.executable, "-c", CHECK], env={**os.environ, **env}, capture_output=True,
                          text=True, check=True).stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_thresholds_are_set_once_on_glibc() -> None:
    assert _run({}) == "True False"  # set on the first call, left alone on the second


def test_tuning_can_be_switched_off() -> None:
    assert _run({"SHARDSTORE_MALLOC_TUNING": "0"}) == "False False"
