"""I/O patterns of Zarr v3 arrays, counted with ``RecordingStore``.

The array is written beforehand into a base store (``MemoryStore`` over a dict we can inspect,
or ``LocalStore`` whose files we can read), then opened through ``RecordingStore(base)``. The
requests it records are what a remote backend would be billed for (its ``get_many`` coalesces
ranges of one key, so a merged range counts once).

Every test runs on both core runners (``backend.runner``): the async one (what remote stores
use) and the blocking one, which local and memory stores use through the synchronous protocol
(``SyncRecordingStore`` records it). Both make the same requests.

Layout used by most tests: shape (32, 32) uint16, shards (16, 16), inner chunks (4, 4): four
shards ``c/0/0 c/0/1 c/1/0 c/1/1`` of 4x4 = 16 inner chunks; the index (``[bytes, crc32c]``) is
``16*16 + 4 = 260`` bytes at the end of each shard.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import shardstore
from shardstore.store import MemoryStore, LocalStore, RangeBR, SuffixBR
from shardstore.store.wrappers import RecordingStore, SyncRecordingStore
from shardstore.testing.runners import RUNNERS

pytestmark = pytest.mark.timeout(60)

SHAPE = (32, 32)
SHARDS = (16, 16)
CHUNKS = (4, 4)
CPS = (4, 4)
N_INNER = 16
INDEX_SIZE = 16 * N_INNER + 4
EMPTY = 0xFFFF_FFFF_FFFF_FFFF
ALL_SHARDS = {"c/0/0", "c/0/1", "c/1/0", "c/1/1"}


def _data(shape: tuple[int, ...] = SHAPE) -> np.ndarray:
    return (np.arange(int(np.prod(shape)), dtype=np.uint16) % 1000 + 1).reshape(shape)


class Backend:
    """A base store plus raw access to what it holds (not through shardstore)."""

    def __init__(self, kind: str, tmp_path: Path, runner: str = "async") -> None:
        self.kind = kind
        self.runner = runner  # the core runner the recorded array uses (see ``open_recorded``)
        if kind == "memory":
            self.dict: dict[str, bytes] = {}
            self.store: Any = MemoryStore(self.dict)
        else:
            self.root = tmp_path / "store"
            self.store = LocalStore(self.root)

    def raw(self, key: str) -> bytes | None:
        if self.kind == "memory":
            return self.dict.get(key)
        p = self.root.joinpath(*key.split("/"))
        return p.read_bytes() if p.is_file() else None

    def keys(self) -> set[str]:
        if self.kind == "memory":
            return set(self.dict)
        return {p.relative_to(self.root).as_posix() for p in self.root.rglob("*") if p.is_file()}

    def chunk_keys(self) -> set[str]:
        return {k for k in self.keys() if k.startswith("c/")}


@pytest.fixture(params=[(kind, runner) for kind in ("memory", "local") for runner in RUNNERS], ids="-".join)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    kind, runner = request.param
    return Backend(kind, tmp_path, runner)


def create(backend: Backend, data: np.ndarray | None = None, **kwargs: Any) -> None:
    """Create (and optionally fill) the array on the base store, unrecorded."""
    kw: dict[str, Any] = dict(shape=SHAPE, dtype="uint16", chunks=CHUNKS, shards=SHARDS, fill_value=0)
    kw.update(kwargs)
    a = shardstore.zarr3.create(backend.store, **kw)
    if data is not None:
        a[...] = data


def open_recorded(backend: Backend, mode: str) -> tuple[Any, RecordingStore]:
    """The array through a recorder: one that declares the synchronous protocol (and records
    its requests) for the blocking runner, one that declares none for the async runner."""
    rec = SyncRecordingStore(backend.store) if backend.runner == "blocking" else RecordingStore(backend.store)
    a = shardstore.zarr3.open(rec, mode=mode)
    rec.reset()  # count only what the measured operation does
    return a, rec


def by_op(rec: RecordingStore, op: str) -> Counter[str]:
    return Counter(r.key for r in rec.requests if r.op == op)


def describe(rec: RecordingStore) -> str:
    return "\n".join(f"  {r.op} {r.key} {r.byte_range}" for r in rec.requests) or "  (none)"


def parse_index(raw: bytes, location: str = "end") -> np.ndarray:
    """The (n, 2) index of a shard, per the spec (crc32c verified)."""
    import google_crc32c

    idx = raw[len(raw) - INDEX_SIZE :] if location == "end" else raw[:INDEX_SIZE]
    body, crc = idx[:-4], idx[-4:]
    assert int.from_bytes(crc, "little") == google_crc32c.value(body)
    return np.frombuffer(body, dtype="<u8").reshape(N_INNER, 2)


def empty_entries(index: np.ndarray) -> list[int]:
    return [i for i, (o, n) in enumerate(index) if o == EMPTY and n == EMPTY]


# == reads ==================================================================================
def test_cold_inner_chunk_costs_two_gets_then_one(backend: Backend) -> None:
    create(backend, _data())
    a, rec = open_recorded(backend, "r")

    np.testing.assert_array_equal(a[0:4, 0:4], _data()[0:4, 0:4])
    gets = [r for r in rec.requests if r.op == "get"]
    assert 1 <= len(gets) <= 2, describe(rec)
    assert {r.key for r in rec.requests} == {"c/0/0"}, describe(rec)
    assert all(r.byte_range is not None for r in gets), f"fetched a whole shard for one chunk:\n{describe(rec)}"
    assert gets[0].byte_range == SuffixBR(INDEX_SIZE), f"index first, as a suffix read:\n{describe(rec)}"

    # a second inner chunk of the same shard: the index is cached, one ranged get
    rec.reset()
    np.testing.assert_array_equal(a[4:8, 8:12], _data()[4:8, 8:12])
    assert [(r.op, r.key) for r in rec.requests] == [("get", "c/0/0")], describe(rec)
    assert isinstance(rec.requests[0].byte_range, RangeBR)

    # the same chunk again: still at most one get (data is not cached, the index is)
    rec.reset()
    a[0:4, 0:4]
    assert rec.count("get") <= 1, describe(rec)


def test_index_at_start_is_a_prefix_read(backend: Backend) -> None:
    create(backend, _data(), index_location="start")
    a, rec = open_recorded(backend, "r")
    np.testing.assert_array_equal(a[8:12, 0:4], _data()[8:12, 0:4])
    gets = [r for r in rec.requests if r.op == "get"]
    assert len(gets) == 2, describe(rec)
    assert gets[0].byte_range == RangeBR(0, INDEX_SIZE), describe(rec)


def test_missing_shard_costs_one_get(backend: Backend) -> None:
    create(backend)
    a, rec = open_recorded(backend, "r")
    assert (a[0:4, 0:4] == 0).all()
    assert [(r.op, r.key) for r in rec.requests] == [("get", "c/0/0")], describe(rec)
    rec.reset()
    assert (a[4:8, 4:8] == 0).all()
    assert rec.count("get") <= 1, describe(rec)


@pytest.mark.parametrize(
    "selection,shards",
    [
        ((slice(0, 16), slice(0, 16)), {"c/0/0"}),
        ((slice(2, 6), slice(14, 18)), {"c/0/0", "c/0/1"}),
        ((slice(20, 30), slice(20, 30)), {"c/1/1"}),
        ((slice(15, 17), slice(None)), ALL_SHARDS),
        ((5, slice(None, None, -1)), {"c/0/0", "c/0/1"}),
        ((slice(None), 31), {"c/0/1", "c/1/1"}),
    ],
    ids=["one_whole", "two_across", "one_inside", "all_four", "row_reversed", "column"],
)
def test_read_touches_only_needed_shards(backend: Backend, selection: Any, shards: set[str]) -> None:
    create(backend, _data())
    a, rec = open_recorded(backend, "r")
    np.testing.assert_array_equal(a[selection], _data()[selection])
    assert set(by_op(rec, "get")) == shards, describe(rec)
    assert {r.op for r in rec.requests} == {"get"}, describe(rec)
    # a cold shard costs at most the index plus one coalesced range (or one whole read)
    assert all(n <= 2 for n in by_op(rec, "get").values()), describe(rec)


def test_oindex_read_touches_only_needed_shards(backend: Backend) -> None:
    create(backend, _data())
    a, rec = open_recorded(backend, "r")
    rows, cols = np.array([1, 3, 2]), np.array([30, 17])
    np.testing.assert_array_equal(a.oindex[rows, cols], _data()[np.ix_(rows, cols)])
    assert set(by_op(rec, "get")) == {"c/0/1"}, describe(rec)


@pytest.mark.parametrize(
    "selection",
    [(slice(0, 4), slice(0, 16)), (slice(0, 8), slice(0, 8)), (slice(1, 11), slice(3, 13))],
    ids=["row_of_chunks", "2x2_block", "unaligned_block"],
)
def test_nearby_inner_chunks_coalesce_into_one_ranged_get(backend: Backend, selection: Any) -> None:
    """Several inner chunks of one shard (not all of them): index + one merged range."""
    create(backend, _data())
    a, rec = open_recorded(backend, "r")
    np.testing.assert_array_equal(a[selection], _data()[selection])
    gets = [r for r in rec.requests if r.op == "get"]
    assert len(gets) == 2, describe(rec)
    assert gets[0].byte_range == SuffixBR(INDEX_SIZE), describe(rec)
    assert isinstance(gets[1].byte_range, RangeBR), describe(rec)


def test_adjacent_inner_chunks_coalesce_without_gap_tolerance(backend: Backend) -> None:
    """With no gap allowed, chunks that are adjacent in the shard still merge. shardstore writes
    inner chunks in C order, so one row of inner chunks is one contiguous range."""
    create(backend, _data())
    a, rec = open_recorded(backend, "r")
    rec.coalesce_max_gap = 0
    np.testing.assert_array_equal(a[4:8, 0:16], _data()[4:8, 0:16])
    gets = [r for r in rec.requests if r.op == "get"]
    assert len(gets) == 2, describe(rec)
    br = gets[1].byte_range
    index = parse_index(backend.raw("c/0/0") or b"")
    wanted = index[4:8]  # C-order indices of inner chunks (1, 0..3)
    # (the blocking runner also reads the index's length past the last chunk: with the index at
    # the end, that proves no entry runs into it, since a ranged read cannot know the size)
    guard = INDEX_SIZE if backend.runner == "blocking" else 0
    assert br == RangeBR(int(wanted[0, 0]), int(wanted[-1, 0] + wanted[-1, 1]) + guard), describe(rec)


def test_whole_shard_read_is_one_get(backend: Backend) -> None:
    create(backend, _data())
    a, rec = open_recorded(backend, "r")
    np.testing.assert_array_equal(a[16:32, 0:16], _data()[16:32, 0:16])
    assert [(r.op, r.key) for r in rec.requests] == [("get", "c/1/0")], describe(rec)


# == writes =================================================================================
def test_writes_run_on_the_backends_runner(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    # the recorded requests below come from the runner the backend names: sharded writes run
    # loop-free (the blocking runner) over a store that declares synchronous writes
    from shardstore.core import array as core_array

    create(backend)
    a, rec = open_recorded(backend, "r+")
    used: list[str] = []
    write_from, write_from_now = core_array.write_from, core_array.write_from_now

    async def on_loop(*args: Any, **kwargs: Any) -> None:
        used.append("async")
        await write_from(*args, **kwargs)

    def now(*args: Any, **kwargs: Any) -> bool:
        used.append("blocking")
        return write_from_now(*args, **kwargs)

    monkeypatch.setattr(core_array, "write_from", on_loop)
    monkeypatch.setattr(core_array, "write_from_now", now)
    a[3:5, 3:5] = 9
    assert used == [backend.runner]
    assert by_op(rec, "set") == Counter({"c/0/0": 1}), describe(rec)


def test_whole_shard_writes_one_set_per_shard_no_gets(backend: Backend) -> None:
    create(backend, _data())
    a, rec = open_recorded(backend, "r+")
    new = _data() * 2 + 1

    a[0:16, 16:32] = new[0:16, 16:32]
    assert rec.requests == [("set", "c/0/1", None)], describe(rec)

    rec.reset()
    a[...] = new
    assert by_op(rec, "set") == Counter({k: 1 for k in ALL_SHARDS}), describe(rec)
    assert rec.count("get") == 0 and rec.count("delete") == 0, describe(rec)
    np.testing.assert_array_equal(shardstore.zarr3.open(backend.store, mode="r")[...], new)


def test_whole_edge_shard_write_needs_no_read(backend: Backend) -> None:
    """Shape (30, 30): shard c/1/1 covers [16, 30) x [16, 30) of the array; writing all of that
    is a whole-shard write even though its last inner chunks stick out of the array."""
    shape = (30, 30)
    create(backend, _data(shape), shape=shape)
    a, rec = open_recorded(backend, "r+")
    a[16:, 16:] = 7
    assert rec.requests == [("set", "c/1/1", None)], describe(rec)
    expected = _data(shape)
    expected[16:, 16:] = 7
    np.testing.assert_array_equal(shardstore.zarr3.open(backend.store, mode="r")[...], expected)


@pytest.mark.parametrize(
    "selection,shards",
    [
        ((slice(1, 3), slice(1, 3)), {"c/0/0"}),
        ((slice(14, 18), slice(14, 18)), ALL_SHARDS),
        ((slice(0, 16), slice(2, 18)), {"c/0/0", "c/0/1"}),
        ((20, slice(None, None, -3)), {"c/1/0", "c/1/1"}),
    ],
    ids=["inside_one", "corner_of_four", "whole_plus_partial", "strided_row"],
)
def test_partial_write_rewrites_only_touched_shards(backend: Backend, selection: Any, shards: set[str]) -> None:
    create(backend, _data())
    before = {k: backend.raw(k) for k in ALL_SHARDS}
    a, rec = open_recorded(backend, "r+")
    expected = _data()
    expected[selection] = 5
    a[selection] = 5

    assert by_op(rec, "set") == Counter({k: 1 for k in shards}), describe(rec)
    assert set(by_op(rec, "get")) <= shards, describe(rec)
    assert rec.count("delete") == 0 and rec.count("list") == 0, describe(rec)
    # read-modify-write costs at most: index + partial chunks + the shard once more
    assert all(n <= 3 for n in by_op(rec, "get").values()), describe(rec)
    for k in ALL_SHARDS - shards:
        assert backend.raw(k) == before[k], f"untouched shard {k} was rewritten"
    np.testing.assert_array_equal(shardstore.zarr3.open(backend.store, mode="r")[...], expected)


def test_write_then_read_does_not_use_stale_index(backend: Backend) -> None:
    create(backend, _data())
    a, rec = open_recorded(backend, "r+")
    a[0:4, 0:4]  # caches the index of c/0/0
    a[0:4, 4:8] = np.full((4, 4), 9, dtype=np.uint16)  # changes offsets inside c/0/0
    np.testing.assert_array_equal(a[0:8, 0:8][:4, 4:8], 9)
    np.testing.assert_array_equal(a[4:8, 0:4], _data()[4:8, 0:4])


# == fill values are not stored =============================================================
def test_fill_write_of_whole_shard_deletes_it(backend: Backend) -> None:
    create(backend, _data())
    a, rec = open_recorded(backend, "r+")
    a[16:32, 16:32] = 0
    assert rec.requests == [("delete", "c/1/1", None)], describe(rec)
    assert backend.raw("c/1/1") is None
    assert backend.chunk_keys() == ALL_SHARDS - {"c/1/1"}
    rec.reset()
    assert (a[16:32, 16:32] == 0).all()
    expected = _data()
    expected[16:, 16:] = 0
    np.testing.assert_array_equal(shardstore.zarr3.open(backend.store, mode="r")[...], expected)


def test_shard_emptied_piecewise_is_deleted(backend: Backend) -> None:
    create(backend, _data())
    a, rec = open_recorded(backend, "r+")
    a[0:16, 0:8] = 0
    assert by_op(rec, "set") == Counter({"c/0/0": 1}), describe(rec)
    rec.reset()
    a[0:16, 8:16] = 0
    assert by_op(rec, "delete") == Counter({"c/0/0": 1}), describe(rec)
    assert rec.count("set") == 0, describe(rec)
    assert backend.raw("c/0/0") is None


def test_fill_write_to_missing_shard_writes_nothing(backend: Backend) -> None:
    create(backend)
    a, rec = open_recorded(backend, "r+")
    a[...] = 0
    a[3:9, 3:9] = 0
    assert rec.count("set") == 0, describe(rec)
    assert backend.chunk_keys() == set()


@pytest.mark.parametrize("location", ["end", "start"])
def test_fill_inner_chunks_are_not_stored(backend: Backend, location: str) -> None:
    create(backend, index_location=location)
    a, rec = open_recorded(backend, "r+")
    block = np.zeros((16, 16), dtype=np.uint16)
    block[0:4, 0:4] = 3  # inner chunk 0
    block[8:12, 12:16] = 4  # inner chunk (2, 3) -> C-order 11
    a[0:16, 0:16] = block
    assert rec.requests == [("set", "c/0/0", None)], describe(rec)

    raw = backend.raw("c/0/0")
    assert raw is not None
    index = parse_index(raw, location)
    assert empty_entries(index) == [i for i in range(N_INNER) if i not in (0, 11)]
    stored = int(index[0, 1] + index[11, 1])
    assert len(raw) == INDEX_SIZE + stored, "the shard holds more than the index and two chunks"

    # overwrite one stored inner chunk with fill: its entry becomes empty, the shard shrinks
    a[8:12, 12:16] = 0
    raw2 = backend.raw("c/0/0")
    assert raw2 is not None
    index2 = parse_index(raw2, location)
    assert empty_entries(index2) == [i for i in range(1, N_INNER)]
    assert len(raw2) == INDEX_SIZE + int(index2[0, 1])
    expected = block.copy()
    expected[8:12, 12:16] = 0
    np.testing.assert_array_equal(a[0:16, 0:16], expected)


# == unsharded ==============================================================================
def test_unsharded_fill_chunks_are_not_created(backend: Backend) -> None:
    create(backend, shards=None)
    a, rec = open_recorded(backend, "r+")
    a[...] = 0
    assert rec.count("set") == 0, describe(rec)
    assert backend.chunk_keys() == set()

    rec.reset()
    block = np.zeros((8, 8), dtype=np.uint16)
    block[0:4, 4:8] = 1
    a[0:8, 0:8] = block  # four whole chunks, one of them not fill
    assert by_op(rec, "set") == Counter({"c/0/1": 1}), describe(rec)
    assert rec.count("get") == 0, describe(rec)
    assert backend.chunk_keys() == {"c/0/1"}


def test_unsharded_fill_write_deletes_chunk(backend: Backend) -> None:
    create(backend, _data(), shards=None)
    assert len(backend.chunk_keys()) == 64
    a, rec = open_recorded(backend, "r+")
    a[4:8, 8:12] = 0  # one whole chunk
    assert rec.requests == [("delete", "c/1/2", None)], describe(rec)
    assert "c/1/2" not in backend.chunk_keys()

    rec.reset()
    a[0:2, 0:4] = 0  # partial chunk, still holding data: read + rewrite, no delete
    assert by_op(rec, "set") == Counter({"c/0/0": 1}) and by_op(rec, "get") == Counter({"c/0/0": 1}), describe(rec)
    rec.reset()
    a[2:4, 0:4] = 0  # now the chunk is all fill: deleted
    assert by_op(rec, "delete") == Counter({"c/0/0": 1}) and rec.count("set") == 0, describe(rec)
    assert "c/0/0" not in backend.chunk_keys()


def test_unsharded_reads_one_get_per_chunk(backend: Backend) -> None:
    create(backend, _data(), shards=None)
    a, rec = open_recorded(backend, "r")
    np.testing.assert_array_equal(a[2:6, 2:6], _data()[2:6, 2:6])
    assert by_op(rec, "get") == Counter({"c/0/0": 1, "c/0/1": 1, "c/1/0": 1, "c/1/1": 1}), describe(rec)
    assert all(r.byte_range is None for r in rec.requests), describe(rec)
