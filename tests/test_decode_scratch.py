"""Chunk decodes into per-thread scratch buffers (``decode_transient`` / ``decode_to``) and
the remembered threading choice of blocking reads (``_share_now``'s ``memo``).

Reads of gzip chunks decompress with libdeflate straight into a buffer each thread reuses,
then copy out; anything that buffer cannot hold exactly (several gzip members, padding,
corrupt data) must still read as before through ``decode``. Spies make the tests fail when
the fast path silently stops being used.
"""

from __future__ import annotations

import gzip
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import shardstore
from shardstore import n5
from shardstore._sync import codec_pool, io_pool
from shardstore.codecs import gzip as gzip_codec
from shardstore.codecs.n5_block import MODE_DEFAULT, _header_bytes
from shardstore.config import IOConfig
from shardstore.core import threads
from shardstore.errors import CodecError

#: the arrays spied on run without the native reader: it takes N5 gzip blocks in local files
#: before this path sees them (``tests/test_native_read.py``), and this path serves every other store
GENERIC = IOConfig(native=False)


class DecodeToSpy:
    """Counts ``GzipCodec.decode_to`` calls that decoded in place and those that declined."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.done = self.declined = 0
        real = gzip_codec.GzipCodec.decode_to
        lock = threading.Lock()

        def spy(codec, data, spec, out):
            ok = real(codec, data, spec, out)
            with lock:
                if ok:
                    self.done += 1
                else:
                    self.declined += 1
            return ok

        monkeypatch.setattr(gzip_codec.GzipCodec, "decode_to", spy)


def _volume(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    return np.random.default_rng(5).integers(0, 200, size=shape).astype(dtype)


@pytest.mark.parametrize("dtype", ["uint8", "int16", "float64"])
def test_n5_gzip_reads_decode_in_place_and_match_numpy(tmp_path: Path, monkeypatch, dtype: str) -> None:
    vol = _volume((40, 33, 50), dtype)
    a = n5.create(str(tmp_path / "c.n5"), "d", shape=vol.shape, dtype=dtype, block_size=(16, 16, 16),
                  compression={"type": "gzip", "level": 1}, config=GENERIC)
    a[...] = vol
    spy = DecodeToSpy(monkeypatch)
    np.testing.assert_array_equal(np.asarray(a), vol)
    np.testing.assert_array_equal(a[3:37, 5:30, 7:45], vol[3:37, 5:30, 7:45])
    np.testing.assert_array_equal(a[::5, 20, ::-3], vol[::5, 20, ::-3])
    assert spy.done > 0  # full-size blocks (edge blocks are smaller: the usual decode)
    assert spy.declined == 0


def test_zarr3_gzip_reads_decode_in_place(tmp_path: Path, monkeypatch) -> None:
    vol = _volume((30, 20, 25), "uint16")
    z = shardstore.create(str(tmp_path / "a.zarr"), shape=vol.shape, dtype=vol.dtype, chunks=(8, 8, 8),
                          codecs=[{"name": "bytes", "configuration": {"endian": "big"}},
                                  {"name": "gzip", "configuration": {"level": 1}}], config=GENERIC)
    z[...] = vol
    spy = DecodeToSpy(monkeypatch)
    np.testing.assert_array_equal(np.asarray(z), vol)
    np.testing.assert_array_equal(z[1:29, 3:17, 2:24], vol[1:29, 3:17, 2:24])
    assert spy.done > 0 and spy.declined == 0


def _write_block(root: Path, key: str, payload: bytes, shape_c: tuple[int, ...]) -> None:
    path = root / "d" / key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(_header_bytes(MODE_DEFAULT, shape_c) + payload)


def test_streams_the_scratch_path_declines_still_read(tmp_path: Path, monkeypatch) -> None:
    """Several gzip members, zero padding and a zlib stream go back to ``decode``."""
    root = tmp_path / "c.n5"
    a = n5.create(str(root), "d", shape=(8, 8), dtype="uint8", block_size=(4, 4),
                  compression={"type": "gzip", "level": 1}, config=GENERIC)
    blocks = {(y, x): np.arange(16, dtype=np.uint8).reshape(4, 4) + 16 * (2 * y + x) for y in range(2) for x in range(2)}
    raw = {k: v.tobytes() for k, v in blocks.items()}
    _write_block(root, "0/0", gzip.compress(raw[0, 0][:7]) + gzip.compress(raw[0, 0][7:]), (4, 4))  # 2 members
    _write_block(root, "1/0", gzip.compress(raw[0, 1]) + b"\0" * 9, (4, 4))  # N5 key: x first
    _write_block(root, "0/1", zlib.compress(raw[1, 0]), (4, 4))  # zlib framing
    _write_block(root, "1/1", gzip.compress(raw[1, 1]), (4, 4))  # the plain case
    spy = DecodeToSpy(monkeypatch)
    expected = np.block([[blocks[0, 0], blocks[0, 1]], [blocks[1, 0], blocks[1, 1]]])
    np.testing.assert_array_equal(np.asarray(a), expected)
    assert spy.done == 2  # the zlib stream and the plain one (libdeflate reads zlib too)
    assert spy.declined == 2  # several members; padding


def test_corrupt_gzip_still_raises_naming_the_block(tmp_path: Path, monkeypatch) -> None:
    root = tmp_path / "c.n5"
    a = n5.create(str(root), "d", shape=(8, 8), dtype="uint8", block_size=(8, 8),
                  compression={"type": "gzip", "level": 1}, config=GENERIC)
    a[...] = _volume((8, 8), "uint8")
    path = root / "d" / "0" / "0"
    data = bytearray(path.read_bytes())
    data[-6] ^= 0xFF  # the CRC of the uncompressed data
    path.write_bytes(bytes(data))
    spy = DecodeToSpy(monkeypatch)
    with pytest.raises(CodecError, match=r"0/0.*gzip"):
        np.asarray(a)
    assert spy.declined == 1


def test_threads_reading_at_once_keep_their_own_scratch(tmp_path: Path) -> None:
    vol = _volume((64, 64, 64), "uint16")
    a = n5.create(str(tmp_path / "c.n5"), "d", shape=vol.shape, dtype=vol.dtype, block_size=(16, 16, 16),
                  compression={"type": "gzip", "level": 1})
    a[...] = vol
    boxes = [tuple(slice(s, s + 20) for s in o) for o in np.random.default_rng(1).integers(0, 44, (40, 3))]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda b: a[b], boxes))
    for b, r in zip(boxes, results):
        np.testing.assert_array_equal(r, vol[b])


def _items(n: int) -> list[int]:
    return list(range(n))


def test_memo_starts_the_codec_threads_at_once_and_updates(monkeypatch) -> None:
    """A read whose last call chose the codec threads hands work to them before timing an
    item; cheap items then set the memo back to "inline"."""
    done: list[int] = []
    lock = threading.Lock()
    slow = {"on": True}

    def fn(batch: list[int], sink: list[int]) -> None:
        if slow["on"]:
            threading.Event().wait(0.002)  # off the GIL, like a decode
        with lock:
            sink.extend(batch)

    config = IOConfig(waiting_item_seconds=1.0)  # the sleeps are "CPU work" here
    memo: dict = {}
    threads.share_now(fn, _items(40), done, config=config, memo=memo)
    assert sorted(done) == _items(40) and memo[fn] == "codec"
    submitted = []
    pool = codec_pool(config.codec_threads)
    real_submit = pool.submit
    monkeypatch.setattr(pool, "submit", lambda *a, **k: submitted.append(1) or real_submit(*a, **k))
    slow["on"] = False
    done.clear()
    threads.share_now(fn, _items(40), done, config=config, memo=memo)
    assert sorted(done) == _items(40)
    assert submitted  # started at once, from the memo
    assert memo[fn] == "inline"  # ... and re-measured: the items are cheap now


def test_memo_path_raises_the_first_error(monkeypatch) -> None:
    def fn(batch: list[int]) -> None:
        threading.Event().wait(0.001)
        if 17 in batch:
            raise ValueError("item 17")

    memo = {fn: "codec"}
    with pytest.raises(ValueError, match="item 17"):
        threads.share_now(fn, _items(40), config=IOConfig(), memo=memo)


def test_memo_path_adds_io_threads_when_the_data_went_cold(monkeypatch) -> None:
    """A read that starts on the codec threads from the memo but finds its items waiting
    (a cold disk) gets the I/O threads for the rest of this very read."""
    done: list[int] = []
    lock = threading.Lock()
    blocks = [0]  # blocks read from storage, as the system counts them (Linux)
    monkeypatch.setattr(threads, "_RUSAGE_THREAD", 1)
    monkeypatch.setattr(threads, "_blocks_read", lambda: blocks[0])

    def fn(batch: list[int]) -> None:
        threading.Event().wait(0.002 * len(batch))  # off the CPU, with blocks read: disk reads
        with lock:
            blocks[0] += 64 * len(batch)
            done.extend(batch)

    # the codec threads the read starts with: fixed here, so that the count below does not
    # depend on the machine's CPU count (with more than io_reads_in_flight cores, none is added)
    config = IOConfig(waiting_item_seconds=0.001, codec_threads=2)
    submitted = []
    pool = io_pool(config.io_threads)
    real_submit = pool.submit
    monkeypatch.setattr(pool, "submit", lambda *a, **k: submitted.append(1) or real_submit(*a, **k))
    memo = {fn: "codec"}
    threads.share_now(fn, _items(64), config=config, memo=memo)
    assert sorted(done) == _items(64)
    assert memo[fn] == "io"
    assert len(submitted) == config.io_reads_in_flight - 2 > 0


def test_scratch_max_bytes_of_the_config_limits_the_kept_buffer(monkeypatch) -> None:
    """A thread keeps its scratch buffer only for chunks up to the array's
    ``IOConfig.scratch_max_bytes``; larger ones decode into a fresh buffer each time."""
    from shardstore.codecs import base
    from shardstore.store.memory import MemoryStore

    vol = _volume((16, 16, 16), "uint16")  # 8^3 uint16 chunks: 1 KiB each
    inline = IOConfig(thread_item_seconds=1e9)  # every chunk decoded on this thread
    store = MemoryStore()
    z = shardstore.create(store, shape=vol.shape, dtype=vol.dtype, chunks=(8, 8, 8), config=inline,
                          codecs=[{"name": "bytes", "configuration": {"endian": "little"}},
                                  {"name": "gzip", "configuration": {"level": 1}}])
    z[...] = vol
    spy = DecodeToSpy(monkeypatch)
    sel = (slice(1, 7), slice(2, 15), slice(3, 5))  # partial chunks: decoded, then copied out
    for limit, kept in ((1023, False), (1024, True)):
        monkeypatch.delattr(base._scratch, "buf", raising=False)
        a = shardstore.open(store, config=inline.replace(scratch_max_bytes=limit))
        done = spy.done
        np.testing.assert_array_equal(a[sel], vol[sel])
        assert spy.done > done  # decoded in place, into a scratch buffer either way
        buf = getattr(base._scratch, "buf", None)
        assert (buf is not None and buf.nbytes == 1024) is kept, limit


def test_zstd_decodes_to_a_buffer_exactly_what_decode_gives() -> None:
    """``ZstdCodec.decode_to`` (libzstd into the caller's buffer) agrees with ``decode``, and
    declines whatever ``decode`` would refuse or size differently, so that ``decode`` words it."""
    import zstandard

    from shardstore.codecs.base import ChunkSpec
    from shardstore.codecs.zstd import ZstdCodec

    spec = ChunkSpec((4096,), np.dtype("uint8"))
    data = np.random.default_rng(5).integers(0, 8, 4096, dtype=np.uint8).tobytes()
    for codec in (ZstdCodec(3), ZstdCodec(3, checksum=True)):
        frame = codec.encode(data, spec)
        out = np.zeros(4096, np.uint8)
        assert codec.decode_to(memoryview(frame), spec, out) and out.tobytes() == data
        assert not codec.decode_to(frame, spec, np.zeros(4095, np.uint8))  # too small
        assert not codec.decode_to(frame, spec, np.zeros(4097, np.uint8))  # larger than the content
        assert not codec.decode_to(b"", spec, out)
    # several frames, and a frame without its content size, decode whole as in ``decode``
    two = zstandard.ZstdCompressor().compress(data[:1000]) + zstandard.ZstdCompressor().compress(data[1000:])
    unsized = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    streamed = unsized.compress(data) + unsized.flush()
    for frames in (two, streamed):
        out = np.zeros(4096, np.uint8)
        assert ZstdCodec().decode_to(frames, spec, out) and out.tobytes() == data
        assert ZstdCodec().decode(frames, spec, 4096) == data
    # a damaged checksum: declined, and ``decode`` raises
    frame = bytearray(ZstdCodec(3, checksum=True).encode(data, spec))
    frame[-1] ^= 0xFF
    assert not ZstdCodec().decode_to(bytes(frame), spec, np.zeros(4096, np.uint8))
    with pytest.raises(CodecError):
        ZstdCodec().decode(bytes(frame), spec, 4096)


def test_zarr3_zstd_reads_decode_in_scratch(tmp_path: Path, monkeypatch) -> None:
    from shardstore.codecs import zstd as zstd_codec

    calls: list[bool] = []
    real = zstd_codec.ZstdCodec.decode_to

    def spy(self, data, spec, out) -> bool:  # type: ignore[no-untyped-def]
        calls.append(real(self, data, spec, out))
        return calls[-1]

    monkeypatch.setattr(zstd_codec.ZstdCodec, "decode_to", spy)
    data = np.arange(40 * 50, dtype="int32").reshape(40, 50)
    a = shardstore.zarr3.create(str(tmp_path), shape=data.shape, dtype="int32", chunks=(16, 16), config=GENERIC,
                                codecs=[{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd"}])
    a[...] = data
    b = shardstore.zarr3.open(str(tmp_path), config=GENERIC)
    np.testing.assert_array_equal(b[3:37, 5:45], data[3:37, 5:45])
    assert calls and all(calls)


def _owned_copies(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Per chunk the read puts in the cache, whether ``owned`` had to copy it."""
    from shardstore.core import io as core_io

    copies: list[bool] = []
    real = core_io.owned

    def spy(chunk: np.ndarray) -> np.ndarray:
        got = real(chunk)
        copies.append(got is not chunk)
        return got

    monkeypatch.setattr(core_io, "owned", spy)
    return copies


@pytest.mark.parametrize("endian", ["little", "big"])
def test_chunks_to_cache_decode_into_the_buffer_their_entry_keeps(monkeypatch, endian: str) -> None:
    """A chunk the cache keeps is decompressed into a fresh buffer that becomes its entry
    (``CodecPipeline.decode_kept``), not into a bytes object the entry then copies to own its
    memory: ``owned`` copies nothing, and the values are those of the volume."""
    copies = _owned_copies(monkeypatch)
    data = np.arange(40 * 50, dtype="int32").reshape(40, 50)
    store = shardstore.MemoryStore()
    a = shardstore.zarr3.create(store, shape=data.shape, dtype="int32", chunks=(16, 16), shards=(32, 32),
                                codecs=[{"name": "sharding_indexed", "configuration": {"chunk_shape": [16, 16], "codecs": [
                                    {"name": "bytes", "configuration": {"endian": endian}}, {"name": "zstd"}]}}])
    a[...] = data
    b = shardstore.zarr3.open(store, config=IOConfig(chunk_cache_bytes=1 << 20))
    np.testing.assert_array_equal(b[3:37, 5:45], data[3:37, 5:45])
    assert len(copies) == 9 and not any(copies)
    np.testing.assert_array_equal(b[3:37, 5:45], data[3:37, 5:45])  # (from the cache)
    assert len(copies) == 9


@pytest.mark.parametrize(("fmt", "dtype"), [("precomputed", "uint8"), ("precomputed", "uint16"), ("zarr3", "<u2"),
                                          ("zarr3", ">u2"), ("precomputed-sharded", "uint8")])
def test_raw_chunks_to_cache_are_read_into_the_memory_their_entry_keeps(tmp_path: Path, monkeypatch, fmt: str,
                                                                         dtype: str) -> None:
    """An uncompressed chunk the cache keeps is read into memory of its own that its entry
    views (``CodecPipeline.decodes_to_view``), not into the thread's reused buffer that the
    entry would then copy: ``owned`` copies nothing, for chunk files and shards alike (a
    big-endian chunk decodes to a new array either way); the values are the volume's."""
    copies = _owned_copies(monkeypatch)
    data = (np.arange(40 * 50 * 8) % 60000).astype(dtype).reshape(40, 50, 8)
    if fmt == "zarr3":
        # (in memory: local chunk files of this layout go to the native reader, which reads
        # kept chunks straight into their entries itself)
        store = shardstore.MemoryStore()
        a = shardstore.zarr3.create(store, shape=data.shape, dtype=dtype, chunks=(16, 16, 8), codecs=[
            {"name": "bytes", "configuration": {"endian": "big" if dtype.startswith(">") else "little"}}])
        a[...] = data
        b = shardstore.zarr3.open(store, config=IOConfig(chunk_cache_bytes=1 << 20))
    else:
        scale: dict = {"size": list(data.shape), "chunk_size": [16, 16, 8], "encoding": "raw"}
        if fmt == "precomputed-sharded":
            scale["sharding"] = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0,
                                 "minishard_bits": 2, "shard_bits": 1, "minishard_index_encoding": "raw",
                                 "data_encoding": "raw"}
        a = shardstore.precomputed.create(str(tmp_path), data_type=dtype, scales=[scale])
        a[...] = data[..., None]
        b = shardstore.precomputed.open(str(tmp_path), config=IOConfig(chunk_cache_bytes=1 << 20))
        data = data[..., None]
    for box in [(slice(0, 16), slice(16, 32)), (slice(3, 37), slice(5, 45))]:  # one chunk, then several
        np.testing.assert_array_equal(b[box], data[box])
        np.testing.assert_array_equal(b[box], data[box])  # (from the cache)
    assert copies and not any(copies)


def test_bcolz_chunks_to_cache_decode_into_their_entry(tmp_path: Path, monkeypatch) -> None:
    """bcolz chunks (bloscpack, which decodes into the caller's array) kept by the cache are
    decompressed straight into a new array that becomes the entry: ``owned`` copies nothing."""
    from shardstore import bcolz

    copies = _owned_copies(monkeypatch)
    data = np.arange(50_000, dtype="int32")
    c = bcolz.carray(data, rootdir=str(tmp_path / "c"), chunklen=8192)
    c.flush()
    b = bcolz.open(str(tmp_path / "c"), mode="r", config=IOConfig(chunk_cache_bytes=8 << 20))
    np.testing.assert_array_equal(b[1000:40_000], data[1000:40_000])
    assert copies and not any(copies)
