"""Fuzz harness for every decoder and parser: run ``python -m shardstore.testing.fuzz``.

The contract each input is held to (``check_case``):

- reading it returns a value, or raises a ``ShardStoreError`` whose message names the key
  that was changed (a metadata document, a chunk, a shard);
- nothing else: any other exception type is a failure;
- no crash (the worker process dying, e.g. a segfault in a C decoder) and no hang (an input
  taking longer than ``--timeout`` seconds): the parent watches every worker, kills a stuck
  one, records the input and starts a new worker after it;
- no allocation beyond what the metadata allows: workers run under ``RLIMIT_AS`` (their
  address space after imports plus ``--memory-mb``), so a header claiming 2^40 elements that
  is believed ends in a ``MemoryError``, which is a failure.

Targets (``TARGETS``): the reference fixtures mutated byte by byte and structurally, datasets
and containers built from the specs (``fuzz_cases.BUILDERS``) then mutated, and the codec
streams (gzip, zlib, zstd, lz4, blosc, bz2, xz, crc32c) decoded on their own. ``n5_rawio``
and ``zarr3_spans`` write their blocks or shards to local files so that the C extension
(``_rawio.read_boxes`` with inflate, ``_rawio.read_spans``) reads them. Every input is a pure function of ``(target, seed, index)``, so a failure is
reproduced with ``--target T --seed S --only INDEX``.

Examples::

    python -m shardstore.testing.fuzz --executions 1000000 --jobs 2      # the long run
    python -m shardstore.testing.fuzz --executions 2000 --jobs 1 --json  # a smoke run
"""

from __future__ import annotations

import argparse
import json
import math
import os
import queue as queue_mod
import re
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .fuzz_cases import (
    BUILDERS,
    Case,
    Draw,
    RandomDraw,
    fixture_cases,
    is_json_key,
    mutate_bytes,
    mutate_case,
)

__all__ = ["TARGETS", "ContractViolation", "check_case", "main", "make_input", "run"]

#: a whole read allocates at most this much; larger arrays are read at a corner
READ_ALL_BYTES = 64 << 20


class ContractViolation(AssertionError):
    """An input broke the contract (wrong exception type, an error not naming its key)."""


# -- running one case ---------------------------------------------------------------------

def _bounded_read(a: Any) -> None:
    shape = tuple(getattr(a, "shape", ()))
    itemsize = np.dtype(a.dtype).itemsize if hasattr(a, "dtype") else 1
    if math.prod(shape) * itemsize <= READ_ALL_BYTES:
        np.asarray(a[...])
    else:
        np.asarray(a[tuple(slice(0, min(n, 4)) for n in shape)])


def _open_and_read(case: Case, store: Any) -> None:
    import shardstore
    from shardstore.formats import precomputed
    from shardstore.formats.precomputed.kv import open_kv

    if case.kind == "kv":
        kv = open_kv(store, case.kv_spec, mode="r")
        keys = list(kv.keys())
        kv.get_many(keys[:64] + [0, 1, 2**64 - 1])
        return
    for i, path in enumerate(case.paths):
        if case.kind == "precomputed":
            if i and i >= _scale_count(case):
                continue  # a mutated info with fewer scales: asking for scale i is a user error
            node = precomputed.open(store, scale=i)
        else:
            node = shardstore.open(store, path=path or None)
        if hasattr(node, "shape"):
            _bounded_read(node)


def _scale_count(case: Case) -> int:
    try:
        return len(json.loads(case.files["info"])["scales"])
    except Exception:  # noqa: BLE001  (the reader reports what is wrong with it)
        return 1


def _names_key(message: str, key: str, case: Case) -> bool:
    """Whether ``message`` names ``key``, in full or relative to the node it belongs to (a
    precomputed scale, an array in a group), as the node's own store sees it. A changed
    metadata document may also be reported through a chunk it no longer fits (any key)."""
    names = [key] + [key[len(r) + 1 :] for r in case.paths if r and key.startswith(r + "/")]
    if is_json_key(key):
        # a changed document may point at chunks that are not there (or not where it says):
        # naming such a chunk key, quoted, names what is wrong
        names += [k.rsplit("/", 1)[-1] for k in case.files if is_json_key(k)]
        return any(n in message for n in names) or re.search(r"'[^' ]+'", message) is not None
    return any(n in message for n in names)


def check_case(case: Case, workdir: str | None = None) -> str:
    """Read ``case`` and hold the result to the contract: "ok", "error" (a ShardStoreError
    naming the mutated key) or a ``ContractViolation``. MemoryError propagates."""
    from shardstore.errors import ShardStoreError
    from shardstore.store import LocalStore, MemoryStore

    if case.local:
        if workdir is None:
            raise ValueError("a case on local files needs a workdir")
        root = os.path.join(workdir, "ds")
        shutil.rmtree(root, ignore_errors=True)
        for key, value in case.files.items():
            path = os.path.join(root, *key.split("/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(value)
        store: Any = LocalStore(root, read_only=True)
    else:
        store = MemoryStore(dict(case.files), read_only=True)
    try:
        _open_and_read(case, store)
    except MemoryError:
        raise
    except ShardStoreError as e:
        if case.mutated is None:
            raise ContractViolation(f"a valid input was rejected: {type(e).__name__}: {e}") from e
        if not _names_key(str(e), case.mutated, case):
            raise ContractViolation(f"{type(e).__name__} does not name the key {case.mutated!r}: {e}") from e
        return "error"
    except Exception as e:
        raise ContractViolation(f"{type(e).__name__} (not a ShardStoreError): {e}") from e
    return "ok"


# -- codec streams on their own ------------------------------------------------------------

def _stream_cases() -> list[tuple[list[Any], str, tuple[int, ...], str]]:
    """(zarr3 codec chain, namespace, chunk shape, dtype) for each stream kind."""
    b = {"name": "bytes", "configuration": {"endian": "little"}}
    return [
        ([b, {"name": "gzip", "configuration": {"level": 1}}], "zarr3", (64,), "uint16"),
        ([b, {"name": "zstd", "configuration": {"level": 1, "checksum": True}}], "zarr3", (64,), "int32"),
        ([b, {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle",
                                                 "typesize": 4, "blocksize": 0}}], "zarr3", (8, 8), "float32"),
        ([b, {"name": "blosc", "configuration": {"cname": "zstd", "clevel": 3, "shuffle": "bitshuffle",
                                                 "typesize": 2, "blocksize": 64}}], "zarr3", (100,), "uint16"),
        ([b, {"name": "crc32c"}], "zarr3", (16,), "uint8"),
        ([{"type": "lz4", "blockSize": 65536}], "n5", (40,), "uint8"),
        ([{"type": "bzip2", "blockSize": 9}], "n5", (40,), "int16"),
        ([{"type": "xz", "preset": 1}], "n5", (40,), "float64"),
        ([{"type": "gzip", "level": 1, "useZlib": True}], "n5", (7, 3), "uint32"),
    ]


class _StreamTarget:
    """A codec chain's encoded chunk, mutated, decoded by the pipeline (no store, no key)."""

    def __init__(self) -> None:
        self._pipes: list[tuple[Any, Any, bytes]] = []

    def _setup(self) -> None:
        from shardstore.codecs.base import ChunkSpec
        from shardstore.codecs.pipeline import CodecPipeline
        from shardstore.codecs.registry import codec_from_config
        from shardstore.formats.n5.metadata import parse_document

        for chain, ns, shape, dtype in _stream_cases():
            if ns == "n5":
                meta = parse_document({"dimensions": list(shape[::-1]), "blockSize": list(shape[::-1]),
                                       "dataType": dtype, "compression": chain[0]}, "fuzz")
                big = codec_from_config({"name": "bytes", "configuration": {"endian": "big"}})
                pipe = CodecPipeline([big, meta.codec])  # type: ignore[union-attr]
            else:
                pipe = CodecPipeline.from_config(chain)
            spec = ChunkSpec(shape, np.dtype(dtype), 0)
            pipe = pipe.bind(spec)
            data = (np.arange(math.prod(shape)) % 11).astype(dtype).reshape(shape)
            self._pipes.append((pipe, spec, pipe.encode(data, spec)))

    def case(self, d: Draw) -> tuple[Any, Any, bytes]:
        if not self._pipes:
            self._setup()
        pipe, spec, encoded = d.choice(self._pipes)
        return pipe, spec, mutate_bytes(d, encoded)

    def check(self, item: tuple[Any, Any, bytes]) -> str:
        from shardstore.errors import ShardStoreError

        pipe, spec, data = item
        try:
            out = pipe.decode(data, spec)
        except MemoryError:
            raise
        except ShardStoreError:
            return "error"
        except Exception as e:
            raise ContractViolation(f"{type(e).__name__} (not a ShardStoreError) from {pipe!r}: {e}") from e
        if tuple(out.shape) != spec.shape:
            raise ContractViolation(f"{pipe!r} decoded a chunk of shape {out.shape}, expected {spec.shape}")
        return "ok"


# -- targets -------------------------------------------------------------------------------

@dataclass
class _Target:
    name: str
    #: (draw, index) -> an input; inputs are checked by ``check``
    make: Callable[[Draw, int], Any]
    check: Callable[[Any, str | None], str]
    describe: Callable[[Any], str]


_FIXTURES: list[Case] | None = None
_BASE: dict[tuple[str, int, int], Case] = {}
#: a builder's valid case serves this many consecutive inputs (building costs more than reading)
BASE_REUSE = 8
#: one input in this many is the valid case itself, unmutated: it must read without error
VALID_EVERY = 16


def _fixtures() -> list[Case]:
    global _FIXTURES
    if _FIXTURES is None:
        _FIXTURES = fixture_cases()
    return _FIXTURES


def _built(name: str, seed: int, index: int) -> Case:
    slot = (name, seed, index // BASE_REUSE)
    case = _BASE.get(slot)
    if case is None:
        _BASE.clear()
        case = _BASE[slot] = BUILDERS[name](RandomDraw(f"{seed}:{name}:base:{slot[2]}"))
    return case


def _builder_target(name: str, seed_holder: list[int]) -> _Target:
    def make(d: Draw, index: int) -> Case:
        base = _built(name, seed_holder[0], index)
        return base if index % VALID_EVERY == 0 else mutate_case(d, base)

    return _Target(name, make, lambda c, w: check_case(c, w), lambda c: f"{c.name} mutated {c.mutated!r}")


def _fixture_target() -> _Target:
    def make(d: Draw, index: int) -> Case:
        cases = _fixtures()
        if not cases:
            raise RuntimeError("the reference fixtures were not found: set $SHARDSTORE_FIXTURES")
        base = d.choice(cases)
        return base if index % VALID_EVERY == 0 else mutate_case(d, base)

    return _Target("fixtures", make, lambda c, w: check_case(c, w), lambda c: f"{c.name} mutated {c.mutated!r}")


_SEED = [0]
_STREAMS = _StreamTarget()
TARGETS: dict[str, _Target] = {
    "fixtures": _fixture_target(),
    **{name: _builder_target(name, _SEED) for name in BUILDERS},
    "streams": _Target("streams", lambda d, i: _STREAMS.case(d), lambda x, w: _STREAMS.check(x),
                       lambda x: repr(x[0])),
}


def make_input(target: str, seed: int, index: int) -> Any:
    """The input number ``index`` of ``target`` for ``seed`` (a pure function of the three)."""
    _SEED[0] = seed
    return TARGETS[target].make(RandomDraw(f"{seed}:{target}:{index}"), index)


# -- the worker pool -----------------------------------------------------------------------

def _address_space() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _worker(targets: Sequence[str], seed: int, indices: range, progress: Any, slot: int,
            queue: Any, memory_mb: int) -> None:
    import resource

    import shardstore  # noqa: F401  (import before the cap: imports are not inputs)
    from shardstore.core import rawread

    rawread.inflate_available()  # load libdeflate now, as a reader would
    workdir = tempfile.mkdtemp(prefix="shardstore-fuzz-")
    # run every target's first (valid) input before the cap: one-time setup (lazy imports,
    # thread pools, caches) is not what the cap is about
    for target in targets:
        try:
            TARGETS[target].check(make_input(target, seed, 0), workdir)
        except Exception:  # noqa: BLE001, S110  (reported when the input comes up in the loop)
            pass
    if memory_mb > 0:
        cap = _address_space() + (memory_mb << 20)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    counts: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    try:
        for i in indices:
            target = targets[i % len(targets)]
            progress[slot] = i
            try:
                item = make_input(target, seed, i)
                outcome = TARGETS[target].check(item, workdir)
                outcomes[f"{target}:{outcome}"] += 1
            except MemoryError as e:
                queue.put(("failure", target, i, "MemoryError", f"allocation beyond the cap: {e}"))
            except ContractViolation as e:
                queue.put(("failure", target, i, "contract", str(e)[:2000]))
            except Exception as e:  # noqa: BLE001  (a bug in the harness itself)
                queue.put(("failure", target, i, "harness", "".join(traceback.format_exception(e))[-2000:]))
            counts[target] += 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        queue.put(("done", slot, dict(counts), dict(outcomes)))


@dataclass
class Report:
    executions: dict[str, int]
    outcomes: dict[str, int]
    failures: list[dict[str, Any]]
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"executions": self.executions, "total": sum(self.executions.values()), "outcomes": self.outcomes,
                "failures": self.failures, "seconds": round(self.seconds, 1)}


def run(executions: int, jobs: int = 2, seed: int = 0, targets: Sequence[str] | None = None,
        timeout: float = 10.0, memory_mb: int = 1024, start: int = 0,
        log: Callable[[str], None] | None = None) -> Report:
    """Run ``executions`` inputs (indices ``start`` ...) spread over ``jobs`` worker processes."""
    import multiprocessing as mp

    names = list(targets or TARGETS)
    unknown = set(names) - set(TARGETS)
    if unknown:
        raise ValueError(f"unknown fuzz targets {sorted(unknown)}; known: {sorted(TARGETS)}")
    # glibc makes a malloc arena per thread (64 MiB of address space each): with a few
    # arenas only, the address-space cap measures what inputs allocate, not thread counts
    os.environ.setdefault("MALLOC_ARENA_MAX", "2")
    ctx = mp.get_context("spawn")
    progress = ctx.Array("q", jobs, lock=False)
    queue = ctx.Queue()
    stop = start + executions
    counts: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    failures: list[dict[str, Any]] = []
    procs: dict[int, Any] = {}
    seen: dict[int, tuple[int, float]] = {}
    firsts: dict[int, int] = {}
    t0 = time.monotonic()

    def launch(slot: int, first: int) -> None:
        progress[slot] = first
        p = ctx.Process(target=_worker, args=(names, seed, range(first, stop, jobs), progress, slot, queue, memory_mb),
                        daemon=True)
        p.start()
        procs[slot] = p
        firsts[slot] = first
        seen[slot] = (first, time.monotonic() + 60.0)  # imports and warm-up get a minute

    def failed(slot: int, kind: str, i: int, detail: str) -> None:
        target = names[i % len(names)]
        failures.append({"target": target, "seed": seed, "index": i, "kind": kind, "detail": detail})
        # the worker ran its inputs before i (their failures, if any, were reported) but
        # never sent its tally: count them here, and input i itself
        for j in range(firsts[slot], i + 1, jobs):
            counts[names[j % len(names)]] += 1
        if log:
            log(f"FAILURE {kind} {target} seed={seed} index={i}: {detail[:300]}")

    for slot in range(jobs):
        launch(slot, start + slot)
    running = set(procs)
    last_log = time.monotonic()
    while running:
        try:
            msg = queue.get(timeout=0.2)
        except queue_mod.Empty:
            msg = None
        now = time.monotonic()
        if log and now - last_log > 30:
            last_log = now
            done = sum(max(0, (progress[s] - start - s) // jobs) for s in range(jobs))  # worker s: start+s, +jobs, ...
            log(f"{now - t0:.0f}s: ~{done} executions, {len(failures)} failures")
        if msg is not None:
            if msg[0] == "failure":
                _, target, i, kind, detail = msg
                failures.append({"target": target, "seed": seed, "index": i, "kind": kind, "detail": detail})
                if log:
                    log(f"FAILURE {kind} {target} seed={seed} index={i}: {detail[:300]}")
            elif msg[0] == "done":
                _, slot, c, o = msg
                counts.update(c)
                outcomes.update(o)
                procs[slot].join()
                running.discard(slot)
            continue
        for slot in list(running):
            p = procs[slot]
            i = progress[slot]
            if not p.is_alive():  # died without "done": a crash on input i
                code = p.exitcode
                p.join()
                failed(slot, "crash", i, f"worker exited with code {code} (signal {-code if code and code < 0 else 0})")
                _respawn(slot, i, stop, jobs, launch, running)
                continue
            last_i, deadline = seen[slot]
            if i != last_i:
                seen[slot] = (i, now + timeout)
            elif now > deadline:
                p.kill()
                p.join()
                failed(slot, "hang", i, f"no result within {timeout} s")
                _respawn(slot, i, stop, jobs, launch, running)
    return Report(dict(counts), dict(outcomes), failures, time.monotonic() - t0)


def _respawn(slot: int, i: int, stop: int, jobs: int, launch: Callable[[int, int], None], running: set[int]) -> None:
    if i + jobs < stop:
        launch(slot, i + jobs)
    else:
        running.discard(slot)


# -- command line --------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m shardstore.testing.fuzz", description=__doc__.split("\n\n")[0])
    p.add_argument("--executions", type=int, default=10_000, help="inputs to run in total (default 10000)")
    p.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--start", type=int, default=0, help="first input index (to continue a run)")
    p.add_argument("--target", action="append", choices=sorted(TARGETS), help="only these targets (repeatable)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds an input may take (default 10)")
    p.add_argument("--memory-mb", type=int, default=1024,
                   help="address space a worker may add after its imports (RLIMIT_AS; 0 = no cap)")
    p.add_argument("--only", type=int, help="run input INDEX in this process and show the result (reproduce)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    args = p.parse_args(argv)
    if args.only is not None:
        target = (args.target or ["fixtures"])[0]
        item = make_input(target, args.seed, args.only)
        print(TARGETS[target].describe(item))
        workdir = tempfile.mkdtemp(prefix="shardstore-fuzz-")
        try:
            print(TARGETS[target].check(item, workdir))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        return 0
    report = run(args.executions, args.jobs, args.seed, args.target, args.timeout, args.memory_mb, args.start,
                 log=lambda s: print(s, file=sys.stderr, flush=True))
    if args.json:
        print(json.dumps(report.to_json(), indent=1))
    else:
        for name, n in sorted(report.executions.items()):
            bad = sum(1 for f in report.failures if f["target"] == name)
            print(f"{name:14s} {n:9d} executions  {bad} failures")
        print(f"total {sum(report.executions.values())} executions, {len(report.failures)} failures, "
              f"{report.seconds:.0f} s")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
