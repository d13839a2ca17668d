"""Copies of cached chunks into a read's result (``core/placing.py``): the native kernel's
(``_rawio.place_boxes``), shared with its helper thread when large enough, with streaming stores
and a 64-byte-aligned allocation for large results, and the same values NumPy's copies give,
for every format's memory order and any selection."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import shardstore
from shardstore.core import placing, rawread, spanread
from shardstore.core.grid import RegularGrid
from shardstore.core.indexing import ChunkProjection, basic_indexer
from shardstore.testing.runners import RUNNERS, Runner, on_runner

MIB = 1 << 20
SHAPE = (40, 36, 75)  # (chunk rows of 80 bytes and an edge row of 22: streamed lines, heads and tails)
needs_native = pytest.mark.skipif(
    not rawread.available() and not os.environ.get("SHARDSTORE_REQUIRE_NATIVE"), reason="C extension not built"
)


def _make(fmt: str, runner: Runner = "blocking") -> tuple[Callable[..., shardstore.Array], np.ndarray]:
    """(open the array again with a chunk cache, its volume): SHAPE in memory as the runner
    sees it, chunks with rows of 40 elements (precomputed's along its first axis, Fortran
    order), edge chunks, written. The opened array streams every
    read's copies (``streaming_copy_bytes=0``) unless ``config`` says otherwise."""
    store = on_runner(shardstore.MemoryStore(), runner)
    vol = np.random.default_rng(3).integers(0, 60000, SHAPE).astype("uint16")
    if fmt == "zarr3":
        a = shardstore.create(store, shape=SHAPE, dtype="uint16", chunks=(16, 16, 40), shards=(32, 32, 80),
                              codecs=[{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd"}])
    elif fmt == "n5":  # (edge blocks are stored clipped)
        a = shardstore.n5.create(store, "d", shape=SHAPE, dtype="uint16", block_size=(16, 16, 40),
                                 compression={"type": "raw"})
    else:  # precomputed: chunks decode to Fortran order
        a = shardstore.precomputed.create(store, data_type="uint16", scales=[
            {"size": list(SHAPE), "chunk_size": [40, 16, 16], "encoding": "raw"}])
        vol = vol[..., None]
    a[...] = vol

    def reopen(**config: Any) -> shardstore.Array:
        cfg = shardstore.IOConfig(**{"chunk_cache_bytes": 64 * MIB, "streaming_copy_bytes": 0, **config})
        if fmt == "n5":
            return shardstore.n5.open(store, path="d", mode="r", config=cfg)
        if fmt == "precomputed":
            return shardstore.precomputed.open(store, mode="r", config=cfg)
        return shardstore.open(store, mode="r", config=cfg)

    return reopen, vol


@pytest.fixture
def kernel_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bool, bool]]:
    """(jobs, stream, helper) of every ``_rawio.place_boxes`` call."""
    calls: list[tuple[int, bool, bool]] = []
    real = placing._rawio

    class Counting:
        def place_boxes(self, out: Any, shape: Any, dims: Any, itemsize: int, jobs: list, stream: bool,
                        helper: bool = False) -> None:
            calls.append((len(jobs), stream, helper))
            real.place_boxes(out, shape, dims, itemsize, jobs, stream, helper)

    if real is not None:
        monkeypatch.setattr(placing, "_rawio", Counting())
    return calls


FORMATS = ["zarr3", "n5", "precomputed"]


@needs_native
@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_streamed_copies_of_cached_chunks_give_numpys_values(fmt: str, runner: Runner,
                                                            kernel_calls: list[tuple[int, bool, bool]]) -> None:
    reopen, vol = _make(fmt, runner)
    c = reopen()
    selections: list[tuple[Any, ...]] = [
        (slice(None),) * 3, (slice(5, 40), slice(3, 35), slice(1, 74)), (slice(2, 39, 3), slice(None), slice(7, 70, 2)),
        (17, slice(4, 33), slice(None)), (slice(None), 0, 35), (slice(None), slice(None), slice(3, 75)),
    ]
    for sel in selections:
        sel = sel + (slice(None),) * (vol.ndim - 3)
        first = c[sel]  # fills the cache (the chunks are decoded)
        again = c[sel]  # all hits
        np.testing.assert_array_equal(first, vol[sel])
        np.testing.assert_array_equal(again, vol[sel])
    assert kernel_calls and all(stream for _, stream, _ in kernel_calls)


@needs_native
@pytest.mark.parametrize("fmt", FORMATS)
def test_large_results_are_line_aligned_and_in_the_formats_order(fmt: str) -> None:
    reopen, vol = _make(fmt)
    c = reopen()
    for _ in range(2):
        out = c[...]
        assert out.ctypes.data % 64 == 0
        assert out.flags.f_contiguous if fmt == "precomputed" else out.flags.c_contiguous
        assert out.flags.writeable
        np.testing.assert_array_equal(out, vol)
    assert reopen(streaming_copy_bytes=vol.nbytes + 1)[...].base is None  # (NumPy's own allocation)


@needs_native
@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_chunks_decoded_by_the_generic_path_are_streamed_into_large_results(
    fmt: str, runner: Runner, kernel_calls: list[tuple[int, bool, bool]]
) -> None:
    """Without the cache too (memory, and HTTP/S3 on the async runner: no native reader of
    files), each decoded chunk goes into a large result by the kernel's streaming stores."""
    reopen, vol = _make(fmt, runner)
    c = reopen(chunk_cache_bytes=0)
    for sel in [(slice(None),) * 3, (slice(5, 40), slice(3, 35), slice(1, 74)), (3, slice(None), slice(2, 70, 3))]:
        sel = sel + (slice(None),) * (vol.ndim - 3)
        np.testing.assert_array_equal(c[sel], vol[sel])
    assert kernel_calls and all(stream for _, stream, _ in kernel_calls)


@needs_native
def test_results_below_the_threshold_are_copied_without_streaming_stores(
    kernel_calls: list[tuple[int, bool, bool]]
) -> None:
    reopen, vol = _make("zarr3")
    c = reopen(streaming_copy_bytes=vol.nbytes + 1)
    c[...]
    np.testing.assert_array_equal(c[...], vol)  # (all hits)
    assert kernel_calls and not any(stream for _, stream, _ in kernel_calls)
    c = reopen(streaming_copy_bytes=vol.nbytes)
    c[...]
    np.testing.assert_array_equal(c[...], vol)
    assert kernel_calls[-1][1] is True


@needs_native
@pytest.mark.parametrize("fmt", FORMATS)
def test_copies_of_many_hits_share_the_helper_thread(fmt: str, kernel_calls: list[tuple[int, bool, bool]]) -> None:
    """From ``IOConfig.thread_copy_bytes`` of copies on, the kernel is asked to share them with
    its helper thread; below it, it copies alone. The values are NumPy's either way."""
    reopen, vol = _make(fmt)
    for copy_bytes, helper in [(vol.nbytes + 1, False), (0, True)]:
        c = reopen(streaming_copy_bytes=1 << 40, thread_copy_bytes=copy_bytes)
        sel = (slice(3, 38), slice(2, 35), slice(5, 70)) + (slice(None),) * (vol.ndim - 3)
        c[sel]
        kernel_calls.clear()
        np.testing.assert_array_equal(c[sel], vol[sel])  # (all hits)
        assert kernel_calls and all(h is helper for _, _, h in kernel_calls)


def _hit_jobs(n: int) -> tuple[np.ndarray, list[tuple[np.ndarray, list[int]]], np.ndarray]:
    """(out, place_boxes jobs, expected): ``n`` chunks of 32^2 uint16 side by side."""
    rng = np.random.default_rng(n)
    chunks = [rng.integers(0, 60000, (32, 32)).astype("uint16") for _ in range(n)]
    jobs = [(c, [0, 1, 32, 0, 0, 1, 32, 32 * i]) for i, c in enumerate(chunks)]
    return np.zeros((32, 32 * n), dtype="uint16"), jobs, np.concatenate(chunks, axis=1)


@needs_native
def test_the_helper_thread_serves_one_call_at_a_time_and_others_copy_alone() -> None:
    """Calls from several threads at once: one gets the helper, the others copy alone; every
    result is complete (no box copied twice or left out)."""
    import threading

    from shardstore import _rawio

    errors: list[BaseException] = []

    def place(seed: int) -> None:
        try:
            for k in range(40):
                out, jobs, expected = _hit_jobs(8 + (seed + k) % 9)
                _rawio.place_boxes(out, (32, 32), (0, 1), 2, jobs, k % 2 == 0, True)
                np.testing.assert_array_equal(out, expected)
        except BaseException as e:  # (reported by the test's thread)
            errors.append(e)

    threads = [threading.Thread(target=place, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads) and errors == []


@needs_native
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_child_copies_with_a_helper_of_its_own() -> None:
    """The parent's helper thread is not in a forked child: the child starts its own (it
    would otherwise post copies to no thread, or find the helper's lock held forever)."""
    import time

    from shardstore import _rawio

    out, jobs, expected = _hit_jobs(6)
    _rawio.place_boxes(out, (32, 32), (0, 1), 2, jobs, False, True)  # (the parent's helper started)
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 only when its copies came out whole
        code = 1
        try:
            for _ in range(20):
                o, j, e = _hit_jobs(7)
                _rawio.place_boxes(o, (32, 32), (0, 1), 2, j, False, True)
                code = 0 if code in (0, 1) and np.array_equal(o, e) else 2
        finally:
            os._exit(code)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung in place_boxes")
        time.sleep(0.01)
    assert os.waitstatus_to_exitcode(status) == 0
    np.testing.assert_array_equal(out, expected)


def test_native_false_copies_by_numpy(kernel_calls: list[tuple[int, bool, bool]]) -> None:
    reopen, vol = _make("precomputed")
    c = reopen(native=False)
    c[...]
    np.testing.assert_array_equal(c[...], vol)
    assert kernel_calls == []


# -- native reads of local files ---------------------------------------------------------------
@pytest.fixture
def native_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool, int]]:
    """(kernel, stream, jobs with a buffer to keep the chunk in) of every native read of chunk
    files (``read_boxes``) and shard files (``read_spans``)."""
    calls: list[tuple[str, bool, int]] = []
    real = rawread._rawio

    class Recording:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def read_boxes(self, *args: Any) -> bytes:
            calls.append(("read_boxes", bool(args[9]), sum(len(j) > 2 and j[2] is not None for j in args[6])))
            return real.read_boxes(*args)

        def read_spans(self, *args: Any) -> bytes:
            calls.append(("read_spans", bool(args[10]), sum(len(j) > 3 and j[3] is not None for j in args[8])))
            return real.read_spans(*args)

    if real is not None:
        monkeypatch.setattr(rawread, "_rawio", Recording())
        monkeypatch.setattr(spanread, "_rawio", Recording())
    return calls


LOCAL = {  # format -> (create in a directory, the kernel that reads it)
    "zarr3-zstd": (lambda d: shardstore.create(str(d), shape=SHAPE, dtype="uint16", chunks=(16, 16, 40), shards=(32, 32, 80),
                                               codecs=[{"name": "bytes", "configuration": {"endian": "little"}},
                                                       {"name": "zstd"}]), "read_spans"),
    "zarr3-big-endian": (lambda d: shardstore.create(str(d), shape=SHAPE, dtype="uint16", chunks=(16, 16, 40),
                                                     shards=(32, 32, 80),
                                                     codecs=[{"name": "bytes", "configuration": {"endian": "big"}}]),
                         "read_spans"),
    # (uint8: N5's big-endian uint16 is copied item by item, swapped, never streamed)
    "n5-raw": (lambda d: shardstore.n5.create(str(d), "d", shape=SHAPE, dtype="uint8", block_size=(16, 16, 64),
                                              compression={"type": "raw"}), "read_boxes"),
    "n5-gzip": (lambda d: shardstore.n5.create(str(d), "d", shape=SHAPE, dtype="uint8", block_size=(16, 16, 64),
                                               compression={"type": "gzip"}), "read_boxes"),
    "n5-uint16": (lambda d: shardstore.n5.create(str(d), "d", shape=SHAPE, dtype="uint16", block_size=(16, 16, 40),
                                                 compression={"type": "raw"}), "read_boxes"),
    "precomputed-raw": (lambda d: shardstore.precomputed.create(str(d), data_type="uint16", scales=[
        {"size": list(SHAPE), "chunk_size": [40, 16, 16], "encoding": "raw"}]), "read_boxes"),
    "precomputed-sharded": (lambda d: shardstore.precomputed.create(str(d), data_type="uint16", scales=[
        {"size": list(SHAPE), "chunk_size": [40, 16, 16], "encoding": "raw", "sharding": {
            "@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 3, "minishard_bits": 0,
            "shard_bits": 0, "minishard_index_encoding": "raw", "data_encoding": "raw"}}]), "read_spans"),
}


@needs_native
@pytest.mark.parametrize("fmt", sorted(LOCAL))
def test_native_reads_of_files_stream_and_decode_the_chunks_to_cache_into_their_entries(
    fmt: str, tmp_path: Path, native_reads: list[tuple[str, bool, int]]
) -> None:
    """Large results are streamed; with the chunk cache, every chunk a native read takes
    (partly read ones too) is decoded straight into its cache entry, in native byte order,
    and later reads of it are hits."""
    create, kernel = LOCAL[fmt]
    a = create(tmp_path)
    vol = np.random.default_rng(4).integers(0, 250, SHAPE).astype(a.dtype)
    vol = vol[..., None] if a.ndim == 4 else vol
    a[...] = vol
    path = str(tmp_path)

    def reopen(**config: Any) -> shardstore.Array:
        cfg = shardstore.IOConfig(**{"streaming_copy_bytes": 0, **config})
        if fmt.startswith("n5"):
            return shardstore.n5.open(path, path="d", mode="r", config=cfg)
        return (shardstore.precomputed.open if fmt.startswith("precomputed") else shardstore.open)(path, mode="r", config=cfg)

    sels = [(slice(None),) * 3, (slice(3, 38), slice(2, 35), slice(1, 74)), (slice(None), 7, slice(5, 75, 2))]
    sels = [sel + (slice(None),) * (vol.ndim - 3) for sel in sels]
    for sel in sels:
        np.testing.assert_array_equal(reopen()[sel], vol[sel])
    assert native_reads and {k for k, _, _ in native_reads} == {kernel}
    assert all(stream and kept == 0 for _, stream, kept in native_reads)
    native_reads.clear()
    np.testing.assert_array_equal(reopen(streaming_copy_bytes=vol.nbytes + 1)[...], vol)
    assert native_reads and not any(stream for _, stream, _ in native_reads)

    for sel in sels[::-1]:  # (partial reads first: their chunks are decoded whole, kept, and the later reads hit)
        native_reads.clear()
        cached = reopen(chunk_cache_bytes=64 * MIB)
        np.testing.assert_array_equal(cached[sel], vol[sel])
        assert native_reads and all(stream and kept for _, stream, kept in native_reads)
        cache = cached._async.chunk_cache
        assert cache is not None and len(cache)
        for key, (_, chunk, _) in cache._entries.items():
            assert chunk.dtype.isnative and not chunk.flags.writeable
        native_reads.clear()
        np.testing.assert_array_equal(cached[sel], vol[sel])
        assert native_reads == []  # (all hits)
    np.testing.assert_array_equal(cached[...], vol)  # (every chunk: hits and the rest, mixed)
    np.testing.assert_array_equal(cached[...], vol)


# -- the kernel, given hits directly ------------------------------------------------------------
@needs_native
@given(
    st.tuples(*[st.integers(1, 50) for _ in range(3)]), st.integers(3, 40), st.sampled_from(["C", "F", "mixed"]),
    st.booleans(), st.data(),
)
@example(shape=(16, 16, 16), chunk=4, order="F", clipped=False, data=None)
@example(shape=(17, 9, 13), chunk=4, order="mixed", clipped=True, data=None)
@example(shape=(23, 45, 50), chunk=33, order="C", clipped=False, data=None)  # (rows of 132 bytes: streamed)
def test_place_hits_equals_numpys_copies(shape: tuple[int, int, int], chunk: int, order: str, clipped: bool,
                                         data: Any) -> None:
    """Hits of any memory order, edge chunks full-size (Zarr) or clipped (N5, precomputed),
    any basic selection (steps, negative steps and integers too): the same as NumPy."""
    vol = np.random.default_rng(sum(shape) * chunk).integers(0, 1 << 30, shape).astype("int32")
    grid = RegularGrid(shape, (chunk,) * 3)
    sel: tuple[Any, ...] = (slice(None),) * 3
    if data is not None:
        sel = tuple(data.draw(st.one_of(st.integers(-n, n - 1), st.builds(
            slice, st.none() | st.integers(-n, n), st.none() | st.integers(-n, n), st.sampled_from([None, 1, 2, 3, -1, -2]))))
            for n in shape)
    indexer = basic_indexer(sel, grid)
    expected = vol[sel]
    out = np.full(expected.shape, -1, dtype="int32")
    hits = []
    for p in indexer:
        box = tuple(slice(c * chunk, (c + 1) * chunk) for c in p.coords)
        part = vol[box] if clipped else np.pad(vol[box], [(0, chunk - n) for n in vol[box].shape])
        layout = order if order != "mixed" else "CF"[sum(p.coords) % 2]
        hits.append((p, np.array(part, order=layout)))
    for config in [{"streaming_copy_bytes": 0}, {"streaming_copy_bytes": 1 << 40, "thread_copy_bytes": 0},
                   {"streaming_copy_bytes": 0, "thread_copy_bytes": 0}]:
        out[...] = -1
        placing.place_hits(hits, out, shardstore.IOConfig(**config))
        np.testing.assert_array_equal(out, expected)


@needs_native
def test_hits_the_kernel_cannot_take_are_left_to_numpy() -> None:
    base = np.arange(8 * 8 * 8, dtype="int32").reshape(8, 8, 8)
    whole = (slice(0, 8, 1),) * 3
    p = ChunkProjection((0, 0, 0), whole, whole, True)
    other_dtype = (p, base.astype("int64"))
    strided = (p, np.arange(16 * 8 * 8, dtype="int32").reshape(16, 8, 8)[::2])
    ok = (p, base)
    out = np.zeros((8, 8, 8), dtype="int32")
    assert placing._place_natively([other_dtype, strided, ok], out, False, False) == [other_dtype, strided]
    np.testing.assert_array_equal(out, base)


@needs_native
def test_the_kernel_refuses_what_does_not_fit() -> None:
    from shardstore import _rawio

    out = np.zeros((8, 8), dtype="uint8")
    chunk = np.ones((4, 4), dtype="uint8")
    box = [0, 1, 4, 0, 0, 1, 4, 6]  # (start, step, count, out_start) per dim: out column 6..9
    with pytest.raises(ValueError, match="outside"):
        _rawio.place_boxes(out, (4, 4), (0, 1), 1, [(chunk, box)], False)
    with pytest.raises(ValueError, match="size"):
        _rawio.place_boxes(out, (4, 4), (0, 1), 1, [(np.ones(15, dtype="uint8"), [0, 1, 4, 0, 0, 1, 4, 0])], False)
    read_only = np.zeros((8, 8), dtype="uint8")
    read_only.setflags(write=False)
    with pytest.raises((ValueError, BufferError)):
        _rawio.place_boxes(read_only, (4, 4), (0, 1), 1, [(chunk, [0, 1, 4, 0, 0, 1, 4, 0])], False)
    with pytest.raises(ValueError, match="item size"):
        _rawio.place_boxes(out, (4, 4), (0, 1), 2, [(chunk, [0, 1, 4, 0, 0, 1, 4, 0])], False)
    assert not out.any()


@needs_native
def test_the_kernel_takes_a_box_per_dimension_or_flattened() -> None:
    from shardstore import _rawio

    chunk = np.arange(16, dtype="uint8").reshape(4, 4)
    flat, nested = np.zeros((8, 8), dtype="uint8"), np.zeros((8, 8), dtype="uint8")
    _rawio.place_boxes(flat, (4, 4), (0, 1), 1, [(chunk, [1, 2, 2, 3, 0, 1, 3, 5])], False)
    _rawio.place_boxes(nested, (4, 4), (0, 1), 1, [(chunk, ((1, 2, 2, 3), (0, 1, 3, 5)))], False)
    expected = np.zeros((8, 8), dtype="uint8")
    expected[3:5, 5:8] = chunk[1::2, 0:3]
    np.testing.assert_array_equal(flat, expected)
    np.testing.assert_array_equal(nested, expected)
    with pytest.raises(ValueError, match="piece"):
        _rawio.place_boxes(nested, (4, 4), (0, 1), 1, [(chunk, ((1, 2, 2), (0, 1, 3)))], False)
    with pytest.raises(ValueError, match="outside"):
        _rawio.place_boxes(nested, (4, 4), (0, 1), 1, [(chunk, ((1, 2, 2, 3), (0, 1, 3, 6)))], False)


@given(st.lists(st.tuples(st.integers(-25, 25), st.integers(-25, 25), st.sampled_from([None, 1, 2, 3, -1, -2])),
                min_size=3, max_size=3), st.booleans())
@example([(None, None, None), (3, 20, 2), (5, 6, None)], False)
@example([(None, None, -1), (1, 2, None), (4, 9, 2)], True)
def test_plan_boxes_takes_the_indexers_boxes_as_it_would_work_them_out(
    bounds: list[tuple[int | None, int | None, int | None]], drop_first: bool,
) -> None:
    grid = RegularGrid((20, 21, 22), (4, 5, 6))
    sel: tuple = tuple(slice(*b) for b in bounds)
    if drop_first:
        sel = (7, *sel[1:])
    indexer = basic_indexer(sel, grid)
    items = [(p, None) for p in indexer]
    plain = [(ChunkProjection(p.coords, p.chunk_selection, p.out_selection, p.is_complete), None) for p, _ in items]
    boxes, taken, rest, dims = rawread.plan_boxes(items, len(indexer.shape))
    worked, worked_taken, worked_rest, worked_dims = rawread.plan_boxes(plain, len(indexer.shape))
    assert [len(taken), len(rest), dims] == [len(worked_taken), len(worked_rest), worked_dims]
    assert [tuple(b) for b in boxes] == [tuple(b) for b in worked]
    # the indexer's own boxes are passed on as they are, not worked out again per chunk
    assert all(box is p.box for box, (p, _) in zip(boxes, taken))
    if all(s.step is None or s.step > 0 for s in sel if isinstance(s, slice)):
        assert not rest  # every chunk of a forward selection goes to the kernels
