"""Writers that get killed, and the checks that follow (``tests/test_crash_kill.py``).

Each scenario has ``setup(path)`` (the dataset at generation 0, written by the test), ``write(node,
gen)`` (one generation of writes, run in a loop by a separate process until it is killed with
SIGKILL) and ``check(path, last_run)`` (run after each kill: the dataset opens and each unit
holds the content of exactly one generation written so far).

Generation ``g`` of run ``r`` is ``r * RUN + i`` (i = 1, 2, ...); its content is ``pattern(g)``:
``g * 2**32 + position``, so one value tells the generation and the position, and a chunk that
mixes two writes, or holds shifted or stale bytes, cannot pass.

Run as a script: ``python _crash_scenarios.py SCENARIO PATH RUN`` opens the dataset, prints
``ready`` once its first generation is written (so every kill finds that run's first
generation complete), then writes generations, printing ``done G`` after each, until it is
killed.
"""

from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import shardstore
from shardstore.formats.precomputed import open_kv

RUN = 100_000  # generations per run, at most (a run lasts well under a second)
SHIFT = np.uint64(1 << 32)


def pattern(gen: int, shape: tuple[int, ...]) -> np.ndarray:
    return np.uint64(gen) * SHIFT + np.arange(math.prod(shape), dtype=np.uint64).reshape(shape)


def valid_gen(g: int, last_run: int) -> bool:
    """Generation 0 (setup) or one of the runs so far (``g % RUN == 0`` is never written)."""
    return g == 0 or (0 < g // RUN <= last_run and g % RUN != 0)


class Mismatch(AssertionError):
    pass


def check_blocks(data: np.ndarray, block: tuple[int, ...], last_run: int, what: str) -> set[int]:
    """Every ``block``-shaped unit of ``data`` (a full-array read) is one generation's pattern;
    returns the generations seen."""
    seen: set[int] = set()
    full = pattern(0, data.shape)
    starts = [range(0, s, b) for s, b in zip(data.shape, block)]
    for origin in itertools.product(*starts):
        sel = tuple(slice(o, o + b) for o, b in zip(origin, block))
        unit = data[sel]
        g = int(unit.flat[0] // SHIFT)
        if not valid_gen(g, last_run):
            raise Mismatch(f"{what}: unit at {origin} holds generation {g}, never written (last run {last_run})")
        if not np.array_equal(unit, full[sel] + np.uint64(g) * SHIFT):
            raise Mismatch(f"{what}: unit at {origin} mixes generations or positions (first value: generation {g})")
        seen.add(g)
    return seen


@dataclass
class Scenario:
    setup: Callable[[str], None]
    open: Callable[[str], Any]  # the writer's handle
    write: Callable[[Any, int], None]
    check: Callable[[str, int], set[int]]


# -- chunked arrays: Zarr v3, N5, precomputed ---------------------------------------------------
SHAPE = (64, 64)
CHUNKS = (8, 8)
SHARDS = (32, 32)


def _array_write(a: Any, gen: int, region: tuple[slice, ...], attrs: bool = True) -> None:
    """Odd generations rewrite everything, even ones a region aligned to chunks but not to
    shards (a read-modify-write of sharded units); then the attributes (a metadata rewrite)."""
    data = pattern(gen, a.shape)
    if gen % 2:
        a[...] = data
    else:
        a[region] = data[region]
    if attrs:
        a.attrs["gen"] = gen


def _check_array(a: Any, block: tuple[int, ...], last_run: int, what: str) -> set[int]:
    gen = a.attrs.get("gen", 0)
    if not valid_gen(int(gen), last_run):
        raise Mismatch(f"{what}: attributes name generation {gen}, never written")
    return check_blocks(np.asarray(a[...]), block, last_run, what)


def _zarr3(sharded: bool) -> Scenario:
    def setup(path: str) -> None:
        a = shardstore.zarr3.create(path, shape=SHAPE, dtype="uint64", chunks=CHUNKS,
                                    shards=SHARDS if sharded else None, mode="w")
        a[...] = pattern(0, SHAPE)

    return Scenario(
        setup,
        lambda path: shardstore.open(path, mode="r+"),
        lambda a, gen: _array_write(a, gen, (slice(8, 40), slice(16, 48))),
        lambda path, last: _check_array(shardstore.open(path), CHUNKS, last, path),
    )


def _n5(compression: str) -> Scenario:
    # raw blocks in local files are written by the C extension (its own temp file + rename)
    def setup(path: str) -> None:
        a = shardstore.n5.create(path, "em/raw", shape=SHAPE, dtype="uint64", block_size=CHUNKS,
                                 compression={"type": compression}, mode="w")
        a[...] = pattern(0, SHAPE)

    return Scenario(
        setup,
        lambda path: shardstore.open(path, mode="r+", path="em/raw"),
        lambda a, gen: _array_write(a, gen, (slice(8, 40), slice(16, 48))),
        lambda path, last: _check_array(shardstore.open(path, path="em/raw"), CHUNKS, last, path),
    )


PC_SIZE = (64, 64, 4)
PC_CHUNK = (16, 16, 4)
UINT64_SHARDING = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 1,
                   "minishard_bits": 1, "shard_bits": 2, "minishard_index_encoding": "gzip", "data_encoding": "gzip"}


def _precomputed(sharded: bool) -> Scenario:
    scale: dict[str, Any] = {"size": list(PC_SIZE), "chunk_size": list(PC_CHUNK)}
    if sharded:
        scale["sharding"] = UINT64_SHARDING
    shape = (*PC_SIZE, 1)

    def setup(path: str) -> None:
        a = shardstore.precomputed.create(path, data_type="uint64", scales=[scale], mode="w")
        a[...] = pattern(0, shape)

    return Scenario(
        setup,
        lambda path: shardstore.precomputed.open(path, mode="r+"),
        lambda a, gen: _array_write(a, gen, (slice(16, 48), slice(0, 32))),
        lambda path, last: _check_array(shardstore.open(path), (*PC_CHUNK, 1), last, path),
    )


# -- the uint64 key-value store -------------------------------------------------------------------
KV_KEYS = 96
KV_SPEC = {**UINT64_SHARDING, "hash": "murmurhash3_x86_128", "minishard_bits": 2, "shard_bits": 2}


def _kv_value(gen: int, key: int) -> bytes:
    return pattern(gen, (key % 7 + 1,)).tobytes() + key.to_bytes(8, "little")


def _kv_write(kv: Any, gen: int) -> None:
    keys = range(KV_KEYS) if gen % 2 else range(gen % 3, KV_KEYS, 3)  # all shards, or some keys
    kv.update({k: _kv_value(gen, k) for k in keys})


def _kv_check(path: str, last_run: int) -> set[int]:
    kv = open_kv(path)
    values = kv.get_many(range(KV_KEYS))
    seen = set()
    for k, v in values.items():
        if v is None:
            raise Mismatch(f"{path}: key {k} is missing")
        g = int(np.frombuffer(v[:8], dtype=np.uint64)[0] // SHIFT)
        if not valid_gen(g, last_run) or v != _kv_value(g, k):
            raise Mismatch(f"{path}: key {k} holds a value of no single generation")
        seen.add(g)
    if sorted(kv.keys()) != list(range(KV_KEYS)):
        raise Mismatch(f"{path}: listing gives other keys than 0..{KV_KEYS - 1}")
    return seen


def _kv_setup(path: str) -> None:
    kv = open_kv(path, sharding=KV_SPEC, mode="w")
    kv.update({k: _kv_value(0, k) for k in range(KV_KEYS)})


# -- bcolz ----------------------------------------------------------------------------------------
CHUNKLEN = 256


def _bcolz_setitem_setup(path: str) -> None:
    shardstore.bcolz.carray(pattern(0, (16 * CHUNKLEN,)), rootdir=path, chunklen=CHUNKLEN, mode="w").flush()


def _bcolz_setitem(ca: Any, gen: int) -> None:
    if gen % 2:
        ca[:] = pattern(gen, ca.shape)
    else:
        lo = (gen // 2 % 8) * CHUNKLEN
        ca[lo : lo + 5 * CHUNKLEN] = pattern(gen, ca.shape)[lo : lo + 5 * CHUNKLEN]
    ca.attrs["gen"] = gen


def _bcolz_setitem_check(path: str, last_run: int) -> set[int]:
    ca = shardstore.bcolz.open(path, mode="r")
    if len(ca) != 16 * CHUNKLEN:
        raise Mismatch(f"{path}: length {len(ca)}, expected {16 * CHUNKLEN}")
    return _check_array(ca, (CHUNKLEN,), last_run, path)


def _rows(lo: int, hi: int) -> np.ndarray:
    return np.arange(lo, hi, dtype=np.int64)


def _bcolz_append_setup(path: str) -> None:
    shardstore.bcolz.carray(_rows(0, 1000), rootdir=path, chunklen=CHUNKLEN, mode="w").flush()


def _bcolz_append(ca: Any, gen: int) -> None:
    """Appends of row numbers (flushed), now and then a trim, so the length goes up and down."""
    rng = np.random.default_rng(gen)
    if gen % 5 == 0 and len(ca) > 2000:
        ca.trim(int(rng.integers(1, 1500)))
    else:
        n = len(ca)
        ca.append(_rows(n, n + int(rng.integers(1, 700))))
        ca.flush()


def _bcolz_prefix_check(path: str, last_run: int) -> set[int]:
    ca = shardstore.bcolz.open(path, mode="r")
    x = ca[:]
    if len(x) < 1 or not np.array_equal(x, _rows(0, len(x))):
        bad = int(np.flatnonzero(x != _rows(0, len(x)))[0])
        raise Mismatch(f"{path}: not a prefix of the appended rows: row {bad} holds {x[bad]}")
    return {len(x)}


def _bcolz_resize_setup(path: str) -> None:
    shardstore.bcolz.carray(_rows(0, 1000), rootdir=path, chunklen=CHUNKLEN, dflt=-1, mode="w").flush()


def _bcolz_resize(ca: Any, gen: int) -> None:
    """``resize`` up (new rows are dflt -1) then fill them; every 4th generation shrink."""
    rng = np.random.default_rng(gen)
    n = len(ca)
    if gen % 4 == 0 and n > 2000:
        ca.resize(n - int(rng.integers(1, 1500)))
    else:
        m = n + int(rng.integers(1, 900))
        ca.resize(m)
        ca[n:m] = _rows(n, m)


def _bcolz_resize_check(path: str, last_run: int) -> set[int]:
    ca = shardstore.bcolz.open(path, mode="r")
    x = ca[:]
    ok = (x == _rows(0, len(x))) | (x == -1)
    if len(x) < 1 or not ok.all():
        bad = int(np.flatnonzero(~ok)[0])
        raise Mismatch(f"{path}: row {bad} holds {x[bad]}: neither its number nor dflt")
    return {len(x)}


def _ctable_setup(path: str) -> None:
    shardstore.bcolz.ctable([_rows(0, 3000)], names=["base"], rootdir=path, mode="w").flush()


def _ctable_addcol(ct: Any, gen: int) -> None:
    """Add a column per generation, drop the oldest beyond three."""
    ct.addcol(_rows(0, 3000) * gen + 1, name=f"g{gen}")
    added = [n for n in ct.names if n.startswith("g")]
    if len(added) > 3:
        ct.delcol(added[0])


def _ctable_check(path: str, last_run: int) -> set[int]:
    ct = shardstore.bcolz.open(path, mode="r")
    seen = set()
    for name in ct.names:
        col = ct[name][:]
        want = _rows(0, 3000) if name == "base" else _rows(0, 3000) * int(name[1:]) + 1
        if not np.array_equal(col, want):
            raise Mismatch(f"{path}: column {name!r} does not hold what was written")
        if name != "base":
            g = int(name[1:])
            if not valid_gen(g, last_run):
                raise Mismatch(f"{path}: column {name!r} of a generation never written")
            seen.add(g)
    return seen


SCENARIOS: dict[str, Scenario] = {
    "zarr3": _zarr3(False),
    "zarr3-sharded": _zarr3(True),
    "n5": _n5("gzip"),
    "n5-raw": _n5("raw"),
    "precomputed": _precomputed(False),
    "precomputed-sharded": _precomputed(True),
    "kv": Scenario(_kv_setup, lambda path: open_kv(path, mode="r+"), _kv_write, _kv_check),
    "bcolz-setitem": Scenario(_bcolz_setitem_setup, lambda p: shardstore.bcolz.open(p, mode="r+"),
                              _bcolz_setitem, _bcolz_setitem_check),
    "bcolz-append-trim": Scenario(_bcolz_append_setup, lambda p: shardstore.bcolz.open(p, mode="r+"),
                                  _bcolz_append, _bcolz_prefix_check),
    "bcolz-resize": Scenario(_bcolz_resize_setup, lambda p: shardstore.bcolz.open(p, mode="r+"),
                             _bcolz_resize, _bcolz_resize_check),
    "ctable-addcol": Scenario(_ctable_setup, lambda p: shardstore.bcolz.open(p, mode="r+"),
                              _ctable_addcol, _ctable_check),
}


def main(argv: list[str]) -> None:
    name, path, run = argv[0], argv[1], int(argv[2])
    scenario = SCENARIOS[name]
    node = scenario.open(path)
    scenario.write(node, run * RUN + 1)  # one whole generation before the kill can come
    print("ready", flush=True)
    for i in range(2, RUN):
        scenario.write(node, run * RUN + i)
        print(f"done {run * RUN + i}", flush=True)  # the generations that completed
    print("finished without being killed", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
