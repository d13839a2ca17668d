"""Per-thread buffers reused instead of a fresh chunk-sized allocation per chunk.

Whole-chunk reads of the blocking runner go into a per-thread buffer (``get_transient_sync``):
the values are right, the buffer is reused, and a read allocates nothing chunk-sized but its
output (a fresh ``bytes`` per chunk is what glibc's default allocator maps and unmaps again).
N5 compressed blocks are laid out for the compressor in a per-thread encode buffer."""

from __future__ import annotations

import os
import threading
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import shardstore
from shardstore.store._fileio import pread_transient
from shardstore.store.local import LocalStore
from shardstore.store.wrappers import AsyncOnlyStore, PrefixStore, SyncRecordingStore


def _file(tmp_path: Path, name: str, data: bytes) -> int:
    path = tmp_path / name
    path.write_bytes(data)
    return os.open(path, os.O_RDONLY)


def test_pread_transient_reuses_one_buffer_per_thread(tmp_path: Path) -> None:
    a, b = _file(tmp_path, "a", b"x" * 1000), _file(tmp_path, "b", b"yz" * 300)
    try:
        first = pread_transient(a, 1000, 0, keep_bytes=4096)
        assert isinstance(first, memoryview) and bytes(first) == b"x" * 1000
        second = pread_transient(b, 600, 0, keep_bytes=4096)
        assert bytes(second) == b"yz" * 300
        assert bytes(first[:600]) == b"yz" * 300  # the same memory: the first view is spent
        assert bytes(pread_transient(a, 10, 995, keep_bytes=4096)) == b"x" * 5  # end of file
        big = pread_transient(a, 1000, 0, keep_bytes=100)  # above keep_bytes: plain bytes
        assert isinstance(big, bytes) and big == b"x" * 1000

        mine = pread_transient(b, 4, 0, keep_bytes=4096)
        other: list[bytes] = []  # another thread has its own buffer
        t = threading.Thread(target=lambda: other.append(bytes(pread_transient(a, 4, 0, 4096))))
        t.start()
        t.join()
        assert other == [b"xxxx"] and bytes(mine) == b"yzyz"
    finally:
        os.close(a)
        os.close(b)


def test_wrappers_forward_transient_reads_and_record_them(tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "k").write_bytes(b"value")
    local = LocalStore(tmp_path)
    assert local.transient_reads is local
    prefixed = PrefixStore(local, "p")
    assert prefixed.transient_reads is prefixed
    assert bytes(prefixed.get_transient_sync("k", 1 << 20) or b"") == b"value"
    assert prefixed.get_transient_sync("missing", 1 << 20) is None
    assert AsyncOnlyStore(local).transient_reads is None  # declares no synchronous reads
    recorded = SyncRecordingStore(prefixed)
    assert bytes(recorded.get_transient_sync("k", 1 << 20) or b"") == b"value"
    assert recorded.requests == [("get", "k", None)]


@pytest.mark.parametrize("fmt", ["n5-gzip", "precomputed", "zarr3-zstd"])
def test_blocking_reads_of_many_chunks_through_one_buffer(tmp_path: Path, fmt: str) -> None:
    """Every chunk holds other values and sizes differ (gzip, zstd): a decode that kept a view
    of the reused buffer past its chunk would show another chunk's bytes here."""
    rng = np.random.default_rng(3)
    data = (np.arange(40 * 36 * 20).reshape(40, 36, 20) * 7 + rng.integers(0, 5, (40, 36, 20))).astype("u2")
    path = str(tmp_path / "a")
    if fmt == "n5-gzip":
        a = shardstore.n5.create(path, "d", shape=data.shape, dtype="u2", block_size=(16, 16, 8),
                                 compression={"type": "gzip"}, mode="w")
    elif fmt == "precomputed":
        data = data[..., None]
        a = shardstore.precomputed.create(path, data_type="uint16", mode="w", scales=[{
            "key": "s0", "size": list(data.shape[:3]), "resolution": [1, 1, 1], "voxel_offset": [0, 0, 0],
            "chunk_sizes": [[16, 16, 8]], "encoding": "raw"}])
    else:
        a = shardstore.zarr3.create(path, shape=data.shape, dtype="u2", chunks=(16, 16, 8),
                                    codecs=[{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd"}], mode="w")
    a[...] = data
    assert a._async.driver.layout.store.transient_reads is not None  # the path under test
    np.testing.assert_array_equal(a[...], data)
    np.testing.assert_array_equal(a[3:33, 5:30, 2:19], data[3:33, 5:30, 2:19])


def test_repeated_chunk_reads_allocate_only_their_output(tmp_path: Path) -> None:
    """One 256 KiB chunk per read (precomputed raw: the Python path): at its peak a read holds
    its output and nothing chunk-sized besides (the file's bytes go to the thread's buffer),
    where a fresh ``bytes`` per chunk doubled it. (Each such allocation, once freed, is what
    glibc's default allocator unmapped and faulted in again on the next read, ~100 page
    faults per read, without the process-wide malloc tuning.) Counted with tracemalloc,
    which sees numpy's and Python's allocations: deterministic, whatever the allocator does."""
    path = str(tmp_path / "a")
    a = shardstore.precomputed.create(path, data_type="uint8", mode="w", scales=[{
        "key": "s0", "size": [256, 256, 64], "resolution": [1, 1, 1], "voxel_offset": [0, 0, 0],
        "chunk_sizes": [[64, 64, 64]], "encoding": "raw"}])
    a[...] = (np.arange(256 * 256 * 64, dtype=np.uint32).reshape(256, 256, 64, 1) % 251).astype(np.uint8)
    a = shardstore.precomputed.open(path)
    boxes = [(slice(x, x + 64), slice(y, y + 64)) for x in range(0, 256, 64) for y in range(0, 256, 64)]
    for box in boxes:  # (the thread's buffer is made here, before counting)
        a[box]
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        for box in boxes * 2:
            a[box]
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert peak < 1.5 * 64**3, peak  # the output (64^3 bytes) and small objects only
    expected = (np.arange(256 * 256 * 64, dtype=np.uint32).reshape(256, 256, 64, 1) % 251).astype(np.uint8)
    for box in boxes:
        np.testing.assert_array_equal(a[box], expected[box])


@pytest.mark.parametrize("dtype", ["u1", "<u2", ">i4", "<f8"])
def test_n5_blocks_encoded_through_the_thread_buffer_decode_back(dtype: str) -> None:
    """Blocks from strided views (the encode buffer's path) and from contiguous big-endian
    arrays (no copy), encoded one after another on one thread: each decodes to its values."""
    from shardstore.codecs.base import ChunkSpec
    from shardstore.codecs.n5_block import N5BlockCodec, compression_from_n5

    native = np.dtype(dtype).newbyteorder("=")
    spec = ChunkSpec((6, 5, 4), native, 0)
    codec = N5BlockCodec(compression_from_n5({"type": "gzip", "level": 1})).bind(spec)
    big = (np.arange(12 * 10 * 8) * 3 % 251).reshape(12, 10, 8).astype(dtype)
    blocks = [big[::2, ::2, ::2], big[6:, 5:, 4:], np.ascontiguousarray(big[:6, :5, :4]).astype(native.newbyteorder(">"))]
    encoded = [codec.encode(b, spec) for b in blocks]
    for b, data in zip(blocks, encoded):
        np.testing.assert_array_equal(codec.decode(data, spec), b)


@pytest.mark.parametrize("dtype", ["<i4", ">f8", "u1", "S3"])
def test_bloscpack_transient_encode_is_the_file_encode_reads_back(dtype: str) -> None:
    """bcolz chunk files encoded into the thread's buffer (header and blosc chunk together):
    the same bytes as ``encode``; consecutive encodes reuse the memory (so each result is
    written before the next encode), another thread has its own."""
    from shardstore.codecs.base import ChunkSpec
    from shardstore.codecs.bloscpack import BloscpackCodec

    native = np.dtype(dtype).newbyteorder("=") if np.dtype(dtype).kind != "S" else np.dtype(dtype)
    spec = ChunkSpec((1000,), native, np.zeros((), native)[()])
    codec = BloscpackCodec("lz4", 5, 1, 0, 1000).bind(spec)
    rows = [(np.arange(1000) * k % 97).astype(dtype) for k in (1, 3)]
    first = codec.encode_transient(rows[0], spec)
    assert bytes(first) == codec.encode(rows[0], spec)
    kept = bytes(first)
    other: list[bytes] = []
    t = threading.Thread(target=lambda: other.append(bytes(codec.encode_transient(rows[1], spec))))
    t.start()
    t.join()
    assert bytes(first) == kept  # untouched by the other thread's encode
    second = codec.encode_transient(rows[1], spec)
    assert bytes(second) == codec.encode(rows[1], spec) == other[0]
    assert np.shares_memory(np.frombuffer(first, np.uint8), np.frombuffer(second, np.uint8))
    np.testing.assert_array_equal(codec.decode(bytes(second), spec), rows[1])


def test_blosc_compress_into_agrees_with_compress() -> None:
    from shardstore.codecs.blosc import MAX_OVERHEAD, compress_chunk, compress_chunk_into

    data = (np.arange(50_000, dtype=np.int32) // 7).tobytes()
    for cname, typesize in (("lz4", 4), ("zstd", 4), ("blosclz", 3)):  # (3 does not divide: the fallback)
        out = np.full(len(data) + MAX_OVERHEAD, 0xAB, np.uint8)
        n = compress_chunk_into(data, cname, 5, 1, 0, typesize, out)
        assert bytes(out[:n]) == compress_chunk(data, cname, 5, 1, 0, typesize)


def test_bcolz_appends_fill_one_pending_chunk(tmp_path: Path) -> None:
    """Appends complete the pending chunk in one buffer the handle keeps (no array per
    append); pieces shorter and longer than a chunk, and a failed write, leave the right rows."""
    from shardstore import bcolz

    ca = bcolz.carray(None, rootdir=tmp_path / "c", dtype="i8", chunklen=100, mode="w")
    expected = []
    n = 0
    for size in (30, 50, 19, 1, 250, 7, 100, 93, 0, 301):
        piece = np.arange(n, n + size, dtype="i8") * 3
        ca.append(piece)
        piece[:] = -1  # the caller's array is its own again once append returns
        expected.append(np.arange(n, n + size, dtype="i8") * 3)
        n += size
        pending = ca._async._pending
        assert pending.tail is not None and len(pending.tail) == n % 100
        if len(pending.tail):
            assert pending.tail.base is pending.buf
    buf = ca._async._pending.buf
    store = ca._async.driver.store
    real = store.set_sync

    def failing(key: str, value: object, atomic: bool = True) -> None:
        raise OSError("disk full")

    store.set_sync = failing  # type: ignore[method-assign]  # (the chunk the next piece completes)
    with pytest.raises(OSError):
        ca.append(np.full(150, -7, dtype="i8"))
    store.set_sync = real  # type: ignore[method-assign]
    ca.append(np.arange(n, n + 5, dtype="i8") * 3)
    expected.append(np.arange(n, n + 5, dtype="i8") * 3)
    assert ca._async._pending.buf is buf  # one buffer for the handle's life
    ca.flush()
    np.testing.assert_array_equal(bcolz.open(tmp_path / "c", mode="r")[:], np.concatenate(expected))


def test_read_buffers_start_at_a_64_byte_boundary() -> None:
    """The kernel copies from the page cache into a buffer at malloc's 16-byte alignment
    10-20 % slower than at a 64-byte one."""
    import threading

    from shardstore.store._fileio import read_buffer

    seen: list[int] = []

    def take() -> None:
        for n in (1000, 300_000, 5000):
            view = read_buffer(n, 1 << 20)
            assert view is not None and len(view) == n
            seen.append(np.frombuffer(view, np.uint8).ctypes.data % 64)

    t = threading.Thread(target=take)
    t.start()
    t.join()
    take()
    assert seen == [0] * 6
