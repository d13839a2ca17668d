"""The glibc allocator tuning of ``shardstore._malloc`` (process-wide, so checked in children):
opt-in through ``IOConfig(malloc_tuning=True)`` or ``SHARDSTORE_MALLOC_TUNING=1``, never on import."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

CHECK = "from shardstore._malloc import tune_malloc; print(tune_malloc(), tune_malloc())"
#: prints whether opening an array tuned the allocator (the second call then finds it done)
OPEN = """
import shardstore
from shardstore import _malloc
a = shardstore.zarr3.create("memory://", shape=(4,), dtype="u1", chunks=(2,){config})
a[...] = 1
print(_malloc._done)
"""

glibc_only = pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                                reason="glibc only")


def _run(code: str, env: dict[str, str] | None = None) -> str:
    base = {k: v for k, v in os.environ.items() if k != "SHARDSTORE_MALLOC_TUNING"}
    return subprocess.run([sys.executable, "-c", code], env={**base, **(env or {})}, capture_output=True,
                          text=True, check=True).stdout.strip()


@glibc_only
def test_thresholds_are_set_once_on_glibc() -> None:
    assert _run(CHECK) == "True False"  # set on the first call, left alone on the second


def test_opening_an_array_leaves_the_allocator_alone_by_default() -> None:
    assert _run(OPEN.format(config="")) == "False"


@glibc_only
def test_a_config_or_the_environment_asks_for_the_tuning() -> None:
    assert _run(OPEN.format(config=", config=shardstore.IOConfig(malloc_tuning=True)")) == "True"
    assert _run(OPEN.format(config=""), {"SHARDSTORE_MALLOC_TUNING": "1"}) == "True"
    # an explicit config is used as given: the environment only changes the default
    assert _run(OPEN.format(config=", config=shardstore.IOConfig()"), {"SHARDSTORE_MALLOC_TUNING": "1"}) == "False"
