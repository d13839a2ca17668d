"""SIGKILL at any moment loses nothing that was readable (issue 22, point 1).

For each format (Zarr v3 sharded and not, N5, precomputed sharded and not, the uint64
key-value store, bcolz ``__setitem__`` / ``append`` + ``trim`` / ``resize`` / ctable
``addcol``), a writer process (``_crash_scenarios.py``) rewrites or appends in a loop and is
killed with SIGKILL at a random (seeded) moment; after each kill the dataset must open and every
unit hold exactly one generation's content (a bcolz carray: a prefix of what was appended).
The metadata (``zarr.json``, ``attributes.json``, ``info``, bcolz ``meta/`` and ``__attrs__``,
ctable ``__rootdirs__``) is rewritten every generation too, so it is killed mid-update as well.

After the kills, ``integrity.scan`` finds no problem and ``repair`` removes every temp file the
killed writers left (none is held: the writers are dead).

The default run kills each writer a few times; ``-m slow`` kills each one 100 times.
"""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _crash_scenarios import RUN, SCENARIOS

from shardstore.ops.integrity import repair, scan

SCRIPT = str(Path(__file__).with_name("_crash_scenarios.py"))
SEED = 22
#: after its first generation, the writer is killed within this many seconds
MAX_DELAY = 0.15
#: what each check must see, given the last generation G the writer reported complete:
#: "old-or-new": every unit holds G's content or a later one (odd generations rewrite every
#: unit, so no unit may be older than the last odd one <= G, nor newer than G+2: G+1 may have
#: completed before it could report so, and G+2 be in flight);
#: "column": ctable column g<G> is there (the in-flight generation removes an older one);
#: None: the bcolz lengths (a prefix, or rows that are their number or dflt, is the check)
PROGRESS = {"bcolz-append-trim": None, "bcolz-resize": None, "ctable-addcol": "column"}

if sys.platform == "win32":  # pragma: no cover
    pytest.skip("SIGKILL is POSIX", allow_module_level=True)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}


def _start(name: str, path: str, run: int) -> subprocess.Popen[bytes]:
    # unbuffered: readline() takes "ready" byte by byte, leaving the "done" lines that follow
    # in the pipe for communicate() (which reads the descriptor, not a Python buffer)
    proc = subprocess.Popen([sys.executable, SCRIPT, name, path, str(run)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=_env(), bufsize=0)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 120)
    line = proc.stdout.readline() if ready else b""
    if line != b"ready\n":
        proc.kill()
        _, err = proc.communicate(timeout=30)
        pytest.fail(f"writer {name} run {run} did not start: {line!r}\n{err.decode(errors='replace')}")
    return proc


def kill_loop(base: Path, name: str, kills: int) -> dict[str, int]:
    """Set up ``name``, kill its writer ``kills`` times checking after each; then scan and repair."""
    scenario = SCENARIOS[name]
    path = str(base / name)
    scenario.setup(path)
    rng = random.Random(f"{SEED}-{name}")
    for run in range(1, kills + 1):
        proc = _start(name, path, run)
        time.sleep(rng.uniform(0, MAX_DELAY))
        proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
        if proc.returncode != -signal.SIGKILL:
            pytest.fail(f"writer {name} run {run} ended by itself ({proc.returncode}):\n{err.decode(errors='replace')}")
        done = [int(line.split()[1]) for line in out.decode().splitlines() if line.startswith("done ")]
        last = max(done, default=run * RUN + 1)  # the first generation completed before "ready"
        seen = scenario.check(path, run)  # raises on any torn or mixed unit
        want = PROGRESS.get(name, "old-or-new")
        if want == "old-or-new":
            floor = last if last % 2 else last - 1
            assert floor <= min(seen) and max(seen) <= last + 2, (
                f"{name} run {run}: generations {min(seen)}..{max(seen)} seen, {last} was the last completed")
        elif want == "column":
            assert last in seen and max(seen) <= last + 2, f"{name} run {run}: columns {sorted(seen)}, last {last}"
        assert scan(path).problems == []  # every stored unit decodes, not only those read above
    fixed = repair(path, grace=0)
    assert all(t.removed for t in fixed.temps)
    after = scan(path)
    assert after.temps == [] and after.orphans == []
    scenario.check(path, kills)  # removing the temp files changed nothing readable
    return {"kills": kills, "temp_files_left": len(fixed.temps)}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_killed_writer_leaves_readable_data(tmp_path: Path, name: str) -> None:
    kill_loop(tmp_path, name, kills=3)


@pytest.mark.slow
@pytest.mark.timeout(3600)  # 100 writer processes; minutes on a loaded machine
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_killed_writer_leaves_readable_data_100(tmp_path: Path, name: str) -> None:
    stats = kill_loop(tmp_path, name, kills=100)
    print(f"{name}: {stats}")
