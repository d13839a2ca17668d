"""Run the C extension's fuzz targets under AddressSanitizer and UndefinedBehaviorSanitizer.

``python -m shardstore.testing.fuzz_sanitize --executions 20000``

1. builds ``_rawio.c`` with ``-fsanitize=address,undefined`` into a temporary copy of the
   package (the installed extension is not touched);
2. runs the fuzz targets that reach it (``n5_rawio``: mutated raw, gzip and zlib N5 blocks
   in local files, read by ``_rawio.read_boxes``, with ``inflate=True`` for gzip / zlib;
   ``zarr3_spans``: mutated Zarr v3 shards of raw, gzip, zstd and blosc inner chunks, read
   by ``_rawio.read_spans``) in
   worker processes with ``libasan`` / ``libubsan`` preloaded, every sanitizer report fatal
   (``halt_on_error``);
3. a sanitizer report kills the worker: the fuzz runner records it as a crash with the input
   index, and the report is in the worker's stderr (shown here).

No memory cap here (ASan reserves terabytes of address space); the hang watch stays.
Needs gcc with libasan and libubsan (Debian: ``gcc``). Exit status 1 on any finding.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from pathlib import Path

__all__ = ["build_sanitized", "main", "sanitizer_libs"]

PACKAGE = Path(__file__).resolve().parents[1]
FLAGS = ["-O1", "-g", "-std=c99", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
         "-fno-sanitize-recover=undefined", "-shared", "-fPIC"]


def sanitizer_libs(cc: str = "gcc") -> list[str]:
    """Paths of libasan and libubsan for ``cc`` (to preload into Python, which is not built
    with them)."""
    out = []
    for name in ("libasan.so", "libubsan.so"):
        path = subprocess.run([cc, f"-print-file-name={name}"], capture_output=True, text=True, check=True).stdout.strip()
        if not os.path.isabs(path) or not os.path.exists(path):
            raise RuntimeError(f"{cc} has no {name} (install gcc with its sanitizer runtimes)")
        out.append(path)
    return out


def build_sanitized(dest: Path, cc: str = "gcc") -> Path:
    """A copy of the package under ``dest`` whose ``_rawio`` is built with the sanitizers;
    returns the directory to put on PYTHONPATH."""
    root = dest / "src"
    shutil.copytree(PACKAGE, root / "shardstore", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    out = root / "shardstore" / f"_rawio{suffix}"
    cmd = [cc, *FLAGS, f"-I{sysconfig.get_paths()['include']}", str(PACKAGE / "_rawio.c"), "-o", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m shardstore.testing.fuzz_sanitize", description=__doc__.split("\n\n")[0])
    p.add_argument("--executions", type=int, default=20_000)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", action="append", default=None, help="default: n5_rawio and zarr3_spans")
    p.add_argument("--cc", default="gcc")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="shardstore-asan-") as tmp:
        src = build_sanitized(Path(tmp), args.cc)
        env = dict(os.environ)
        env["PYTHONPATH"] = str(src) + os.pathsep + env.get("PYTHONPATH", "")
        env["LD_PRELOAD"] = ":".join(sanitizer_libs(args.cc))
        # leaks: CPython's own allocations at exit are not ours to judge
        env["ASAN_OPTIONS"] = "detect_leaks=0:halt_on_error=1:abort_on_error=1:allocator_may_return_null=1"
        env["UBSAN_OPTIONS"] = "halt_on_error=1:print_stacktrace=1"
        # the workers must load the sanitized build, with the runtime really in the process
        check = ("import ctypes, shardstore._rawio as r; from shardstore.core import rawread; "
                 f"assert r.__file__.startswith({str(src)!r}), r.__file__; "
                 "assert hasattr(ctypes.CDLL(None), '__asan_init'); assert rawread.inflate_available(); "
                 "from shardstore.core import spanread; assert len(spanread.loaded_codecs()) == len(spanread.CODECS)")
        subprocess.run([sys.executable, "-c", check], env=env, check=True)
        cmd = [sys.executable, "-m", "shardstore.testing.fuzz", "--json", "--memory-mb", "0",
               "--executions", str(args.executions), "--jobs", str(args.jobs), "--seed", str(args.seed)]
        for t in args.target or ["n5_rawio", "zarr3_spans"]:
            cmd += ["--target", t]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        sys.stderr.write("".join(line + "\n" for line in r.stderr.splitlines() if "ERROR" in line or "runtime error" in line
                                 or "SUMMARY" in line or "FAILURE" in line))
        report = json.loads(r.stdout) if r.stdout.strip() else {"failures": [{"kind": "runner", "detail": r.stderr[-3000:]}]}
        report["sanitized_extension"] = True
        print(json.dumps(report, indent=1))
        return 1 if report.get("failures") else 0


if __name__ == "__main__":
    sys.exit(main())
