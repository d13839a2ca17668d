"""Readers in other processes while a writer keeps rewriting parts of a sharded precomputed
volume (gzip data encoding, so chunks change size from version to version): every read
succeeds and every chunk it returns is whole, from one version. Before reads took the shard
index and the data from one version of the shard, such readers got "corrupt gzip stream"
errors (the index of one version applied to the bytes of the next).
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import shardstore
from shardstore.errors import ShardStoreError

pytestmark = pytest.mark.timeout(300)

SIZE = (64, 64, 8)  # x, y, z
CHUNK = (16, 16, 8)
GRID = (4, 4, 1)
N_CHUNKS = 16
SHARDING = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0,
            "minishard_bits": 1, "shard_bits": 1, "minishard_index_encoding": "gzip", "data_encoding": "gzip"}


def chunk_value(version: int, chunk: int) -> np.ndarray:
    """Chunk ``chunk`` as written at ``version``: ``(version * 16 + chunk) * 1000`` plus a
    pattern whose period (hence the gzip size) changes with the version."""
    lx, ly, lz = np.indices(CHUNK)
    return ((version * N_CHUNKS + chunk) * 1000 + (lx + 3 * ly + 7 * lz) % (version % 7 + 1)).astype("uint32")


def chunk_box(chunk: int) -> tuple[slice, slice, slice]:
    cx, cy = chunk % GRID[0], chunk // GRID[0]
    return (slice(cx * CHUNK[0], (cx + 1) * CHUNK[0]), slice(cy * CHUNK[1], (cy + 1) * CHUNK[1]), slice(0, CHUNK[2]))


def mixed_chunks(data: np.ndarray, box: tuple[slice, ...]) -> int:
    """How many chunks of a read ``box`` are not whole chunks of one version."""
    bad = 0
    for chunk in range(N_CHUNKS):
        cb = chunk_box(chunk)
        inter = [slice(max(b.start, c.start), min(b.stop, c.stop)) for b, c in zip(box, cb)]
        if any(s.start >= s.stop for s in inter):
            continue
        got = data[tuple(slice(s.start - b.start, s.stop - b.start) for s, b in zip(inter, box))]
        version, rest = divmod(int(got.flat[0]) // 1000, N_CHUNKS)
        if rest != chunk:
            bad += 1
            continue
        local = tuple(slice(s.start - c.start, s.stop - c.start) for s, c in zip(inter, cb))
        bad += not np.array_equal(got, chunk_value(version, chunk)[local])
    return bad


def _reader(where: str, seed: int, stop: Any, results: Any) -> None:
    """Read random boxes until ``stop`` is set; report (reads, errors, mixed chunks)."""
    a = shardstore.precomputed.open(where, mode="r")
    rng = np.random.default_rng(seed)
    reads = errors = mixed = 0
    first_error = ""
    while not stop.is_set() or reads == 0:
        lo = [int(rng.integers(0, s)) for s in SIZE]
        box = tuple(slice(lo_, int(rng.integers(lo_ + 1, s + 1))) for lo_, s in zip(lo, SIZE))
        reads += 1
        try:
            data = np.asarray(a[box])[..., 0]
        except (ShardStoreError, OSError, ValueError) as e:  # counted: the test requires none
            errors += 1
            first_error = first_error or f"{type(e).__name__}: {e}"
            continue
        mixed += mixed_chunks(data, box)
    results.put((reads, errors, mixed, first_error))


def check_readers(tmp_path: Path, n_readers: int, rewrites: int) -> None:
    where = str(tmp_path / "vol")
    scale = {"size": list(SIZE), "chunk_size": list(CHUNK), "encoding": "raw", "sharding": SHARDING}
    a = shardstore.precomputed.create(where, data_type="uint32", scales=[scale])
    for chunk in range(N_CHUNKS):
        a[chunk_box(chunk)] = chunk_value(0, chunk)[..., None]  # (one channel)
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["numpy", "shardstore", "test_multiwriter_readers"])
    stop, results = ctx.Event(), ctx.Queue()
    readers = [ctx.Process(target=_reader, args=(where, seed, stop, results)) for seed in range(n_readers)]
    for p in readers:
        p.start()
    try:
        rng = np.random.default_rng(12345)
        for version in range(1, rewrites + 1):
            # a few whole chunks per write: each write is a partial rewrite of its shards
            for chunk in rng.choice(N_CHUNKS, size=3, replace=False).tolist():
                a[chunk_box(chunk)] = chunk_value(version, chunk)[..., None]
    finally:
        stop.set()
        reports = [results.get(timeout=120) for _ in readers]
        for p in readers:
            p.join(timeout=60)
    reads = sum(r[0] for r in reports)
    errors = sum(r[1] for r in reports)
    mixed = sum(r[2] for r in reports)
    assert reads >= n_readers
    assert (errors, mixed) == (0, 0), f"{errors} errors, {mixed} mixed chunks in {reads} reads: {reports}"


def test_readers_see_whole_chunks_while_a_writer_rewrites(tmp_path: Path) -> None:
    check_readers(tmp_path, n_readers=2, rewrites=40)


@pytest.mark.slow
def test_four_readers_many_rewrites(tmp_path: Path) -> None:
    check_readers(tmp_path, n_readers=4, rewrites=600)
