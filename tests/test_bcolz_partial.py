"""Partial decoding of bcolz chunks (only the blosc blocks a selection needs) and the block
size shardstore writes. NumPy (a full decode) is the oracle."""

from __future__ import annotations

import struct
from pathlib import Path

import numcodecs.blosc as nblosc
import numpy as np
import pytest
from _helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from shardstore import bcolz as sbz
from shardstore.codecs.base import ChunkSpec
from shardstore.codecs.blosc import available_compressors, read_blosc_header
from shardstore.codecs.bloscpack import (
    BLOCK_BYTES,
    HEADER_SIZE,
    BloscpackCodec,
    decode_blosc_range,
)
from shardstore.codecs.crc32c import Crc32cCodec
from shardstore.codecs.pipeline import CodecPipeline
from shardstore.errors import ChunkNotFoundError, CodecError

CNAMES = [c for c in ("blosclz", "lz4", "lz4hc", "zlib", "zstd", "snappy") if c in available_compressors()]
_BLOSC_HEADER = struct.Struct("<BBBBIII")


def _smooth(n: int, dtype: str, seed: int = 0) -> np.ndarray:
    steps = np.random.default_rng(seed).integers(-3, 4, n)
    return np.cumsum(steps).astype(dtype)


# -- the blosc block range ---------------------------------------------------------------------
@pytest.mark.parametrize("cname", CNAMES)
@pytest.mark.parametrize("shuffle", [0, 1, 2])
@pytest.mark.parametrize("dtype", ["u1", "i2", "i4", "f8"])
def test_range_matches_full_decode(cname: str, shuffle: int, dtype: str) -> None:
    data = _smooth(100_003, dtype).tobytes()  # a short last block
    itemsize = np.dtype(dtype).itemsize
    chunk = nblosc.compress(data, cname.encode(), 5, shuffle, 4096, itemsize)
    header = read_blosc_header(chunk)
    bs, n = header.blocksize, len(data)
    ranges = [(0, 8), (n - 8, n), (bs - 4, bs + 4), (n // 2, n // 2 + 4000), (n - bs // 2, n - bs // 2 + 8), (0, n)]
    for start, stop in ranges:
        start, stop = max(start, 0), min(stop, n)
        part = decode_blosc_range(memoryview(chunk), header, start, stop)
        if part is not None:
            assert bytes(part) == data[start:stop], (start, stop)
    if not header.memcpyed:  # every block: a full decode is as cheap
        assert decode_blosc_range(memoryview(chunk), header, 0, n) is None


@settings(max_examples=examples(60), deadline=None)
@given(st.integers(0, 49_999), st.integers(1, 50_000), st.sampled_from([0, 1, 2]))
def test_range_property(start: int, length: int, shuffle: int) -> None:
    data = _smooth(50_000, "i4", seed=3).tobytes()
    chunk = nblosc.compress(data, b"lz4", 5, shuffle, 2048, 4)
    header = read_blosc_header(chunk)
    start, stop = start * 4, min(start + length, 50_000) * 4
    part = decode_blosc_range(memoryview(chunk), header, start, stop)
    if part is not None:
        assert bytes(part) == data[start:stop]


def test_range_of_stored_uncompressed_chunk_is_a_view() -> None:
    data = np.arange(1000, dtype="i4").tobytes()
    chunk = nblosc.compress(data, b"lz4", 0, 1, 0, 4)
    header = read_blosc_header(chunk)
    assert header.memcpyed
    assert bytes(decode_blosc_range(memoryview(chunk), header, 40, 80)) == data[40:80]


def _chunk_with_blocks(nblocks: int = 8) -> bytearray:
    data = _smooth(nblocks * 8192, "i4").tobytes()
    return bytearray(nblosc.compress(data, b"lz4", 5, 1, 8192, 4))


@pytest.mark.parametrize(
    "patch",
    [
        lambda c: struct.pack_into("<i", c, 16 + 4 * 3, len(c) + 100),  # block offset past the end
        lambda c: struct.pack_into("<i", c, 16 + 4 * 3, 4),  # inside the header
        lambda c: struct.pack_into("<i", c, 16 + 4 * 3, struct.unpack_from("<i", c, 16 + 4 * 2)[0]),  # overlap
    ],
)
def test_range_rejects_corrupt_offsets(patch) -> None:
    chunk = _chunk_with_blocks()
    patch(chunk)
    header = read_blosc_header(chunk)
    with pytest.raises(CodecError, match="offsets"):
        decode_blosc_range(memoryview(bytes(chunk)), header, 3 * header.blocksize, 3 * header.blocksize + 8)


def test_range_rejects_corrupt_block() -> None:
    chunk = _chunk_with_blocks()
    header = read_blosc_header(chunk)
    start = struct.unpack_from("<i", chunk, 16 + 4 * 3)[0]
    struct.pack_into("<i", chunk, start, 1 << 30)  # the first split's compressed size
    with pytest.raises(CodecError, match="corrupt blosc chunk"):
        decode_blosc_range(memoryview(bytes(chunk)), header, 3 * header.blocksize, 3 * header.blocksize + 8)


# -- the codec -------------------------------------------------------------------------------
SELECTIONS = [
    (slice(5, 17),),
    (slice(0, 1),),
    (slice(3000, 3990, 7),),
    (slice(None, None, 1000),),
    (slice(3999, 4000),),
    (slice(10, 10),),
    (0,),
    (-1,),
    (2047,),
    (slice(99_990, 100_000),),  # the short last block
    (slice(-70_000, -69_000),),
    (np.array([3, 5, 900]),),
]


@pytest.mark.parametrize("dtype", ["bool", "i1", "u2", "i4", "f8", "S7", "U3", "M8[ns]", "c16"])
@pytest.mark.parametrize("cname", ["lz4", "zstd", "blosclz"])
def test_decode_partial_matches_decode(dtype: str, cname: str) -> None:
    if cname not in available_compressors():
        pytest.skip(f"{cname} not built in")
    rows = 100_000
    data = _smooth(rows, "i8").astype(dtype)
    spec = ChunkSpec((rows,), np.dtype(dtype), None)
    codec = BloscpackCodec(cname=cname, chunklen=rows).bind(spec)
    codec._blosc.blocksize = 4096  # several blocks (c-blosc makes split blocks >= 64 KiB)
    encoded = codec.encode(data, spec)
    full = codec.decode(encoded, spec)
    for sel in SELECTIONS:
        part = codec.decode_partial(encoded, spec, sel)
        if part is not None:
            want = full[sel]
            assert np.asarray(part).dtype == np.asarray(want).dtype and np.array_equal(part, want), sel
    assert codec.decode_partial(encoded, spec, (slice(0, 5),)) is not None
    if not read_blosc_header(memoryview(encoded)[HEADER_SIZE:]).memcpyed:  # else a view of it all
        assert codec.decode_partial(encoded, spec, (slice(None),)) is None  # the whole chunk


def test_decode_partial_multidimensional_and_stale_leftover() -> None:
    data = _smooth(6000 * 12, "f4").reshape(6000, 3, 4)
    spec = ChunkSpec((6000, 3, 4), np.dtype("f4"), None)
    codec = BloscpackCodec(chunklen=10_000).bind(spec)
    codec._blosc.blocksize = 4096
    encoded = codec.encode(data, spec)
    for sel in [(slice(100, 110), 2, slice(None)), (5999, slice(1, 3), np.array([0, 3])), (slice(5, 3000, 9), 0, 0)]:
        assert np.array_equal(codec.decode_partial(encoded, spec, sel), data[sel])
    # an interrupted append left more rows in the leftover than meta/sizes says: the first ones count
    short = ChunkSpec((5000, 3, 4), np.dtype("f4"), None)
    assert np.array_equal(codec.decode_partial(encoded, short, (slice(4980, 5000),)), data[4980:5000])
    with pytest.raises(CodecError, match="uncompressed bytes"):
        codec.decode_partial(encoded, ChunkSpec((7000, 3, 4), np.dtype("f4"), None), (slice(0, 5),))


def test_pipeline_decodes_partially_only_a_lone_array_bytes_codec() -> None:
    spec = ChunkSpec((100_000,), np.dtype("i4"), None)
    codec = BloscpackCodec(chunklen=100_000).bind(spec)
    codec._blosc.blocksize = 4096
    data = _smooth(100_000, "i4")
    encoded = codec.encode(data, spec)
    assert np.array_equal(CodecPipeline([codec]).decode_region(encoded, spec, (slice(7, 9),)), data[7:9])
    chained = CodecPipeline([codec, Crc32cCodec()])
    assert chained.decode_region(chained.encode(data, spec), spec, (slice(7, 9),)) is None


# -- carrays on disk -------------------------------------------------------------------------
def test_written_blocks_are_small_for_fast_codecs_only(tmp_path: Path) -> None:
    data = _smooth(600_000, "i4")
    for cname in ("lz4", "zstd"):
        ca = sbz.carray(data, rootdir=tmp_path / cname, chunklen=262_144, cparams={"cname": cname})
        raw = (tmp_path / cname / "data" / "__0.blp").read_bytes()
        blocksize = _BLOSC_HEADER.unpack_from(raw, HEADER_SIZE)[5]
        if cname == "lz4":
            assert blocksize <= BLOCK_BYTES
        else:  # chosen by c-blosc as bcolz does
            auto = nblosc.compress(data[:262_144].tobytes(), b"zstd", 5, 1, 0, 4)
            assert blocksize == _BLOSC_HEADER.unpack_from(auto)[5]
        assert np.array_equal(ca[:], data)


def test_small_chunks_are_byte_identical_to_bcolz(tmp_path: Path) -> None:
    bcolz = pytest.importorskip("bcolz")
    data = _smooth(5000, "i4")
    bcolz.carray(data, rootdir=str(tmp_path / "b"), chunklen=1000, mode="w").flush()
    sbz.carray(data, rootdir=tmp_path / "s", chunklen=1000)
    for i in range(5):
        name = f"data/__{i}.blp"
        assert (tmp_path / "s" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


@pytest.mark.parametrize("writer", ["shardstore", "bcolz"])
def test_slices_of_large_chunks(tmp_path: Path, writer: str) -> None:
    data = _smooth(700_001, "i4")
    root = tmp_path / "c"
    if writer == "bcolz":
        bcolz = pytest.importorskip("bcolz")
        b = bcolz.carray(data, rootdir=str(root), chunklen=262_144, mode="w")  # 2 blocks of 512 KiB
        b.flush()
    else:
        sbz.carray(data, rootdir=root, chunklen=262_144)
    ca = sbz.open(root, mode="r")
    starts = np.random.default_rng(5).integers(0, len(data) - 1000, 40)
    for s in [0, 131_000, 262_000, 524_200, 699_000, *starts.tolist()]:
        assert np.array_equal(ca[s : s + 1000], data[s : s + 1000]), s
    assert ca[-1] == data[-1] and ca[300_000] == data[300_000]
    assert np.array_equal(ca[1000:200_000:997], data[1000:200_000:997])
    assert np.array_equal(ca[[5, 300_000, 700_000]], data[[5, 300_000, 700_000]])
    if writer == "shardstore":  # bcolz reads the small blocks
        bcolz = pytest.importorskip("bcolz")
        assert np.array_equal(bcolz.open(str(root), mode="r")[:], data)


def test_small_reads_name_corrupt_and_missing_files(tmp_path: Path) -> None:
    data = _smooth(300_000, "i4")
    root = tmp_path / "c"
    sbz.carray(data, rootdir=root, chunklen=100_000)
    blp = root / "data" / "__1.blp"
    raw = bytearray(blp.read_bytes())
    struct.pack_into("<i", raw, 2 * HEADER_SIZE + 4, len(raw) * 2)  # block 1 offset beyond the file
    blp.write_bytes(bytes(raw))
    ca = sbz.open(root, mode="r")
    assert np.array_equal(ca[10:20], data[10:20])
    with pytest.raises(CodecError, match="offsets") as info:
        ca[150_000:150_010]
    assert str(blp) in str(info.value)
    (root / "data" / "__2.blp").unlink()
    with pytest.raises(ChunkNotFoundError, match="__2.blp"):
        ca[250_000:250_010]


# -- ranged reads and decoding into the caller's array (the core's partial-read hooks) ------------
def _ranged(data: bytes, log: list | None = None):
    def read(start: int, stop: int) -> bytes:
        if log is not None:
            log.append((start, min(stop, len(data))))
        return data[start:stop]

    return read


@pytest.mark.parametrize("dtype", ["bool", "u2", "i4", "f8", "S7", "U3", "c16"])
@pytest.mark.parametrize("cname", ["lz4", "zstd", "blosclz"])
@pytest.mark.parametrize("shuffle", [0, 1, 2])
def test_decode_partial_from_matches_decode(dtype: str, cname: str, shuffle: int) -> None:
    if cname not in available_compressors():
        pytest.skip(f"{cname} not built in")
    rows = 100_000
    data = _smooth(rows, "i8").astype(dtype)
    spec = ChunkSpec((rows,), np.dtype(dtype), None)
    codec = BloscpackCodec(cname=cname, shuffle=shuffle, chunklen=rows).bind(spec)
    codec._blosc.blocksize = 4096
    encoded = codec.encode(data, spec)
    full = codec.decode(encoded, spec)
    for sel in SELECTIONS:
        log: list = []
        part = codec.decode_partial_from(_ranged(encoded, log), spec, sel)
        if part is not None:
            assert np.asarray(part).dtype == np.asarray(full[sel]).dtype and np.array_equal(part, full[sel]), sel
            narrow = len(range(*sel[0].indices(rows))) < 100 if isinstance(sel[0], slice) else True
            if len(encoded) > 3 * 4096 and narrow:
                assert sum(b - a for a, b in log) < len(encoded) // 2, sel  # read only a part
    assert codec.decode_partial_from(_ranged(encoded), spec, (slice(0, 5),)) is not None
    assert codec.decode_partial_from(lambda a, b: None, spec, (slice(0, 5),)) is None  # missing file


def test_decode_partial_from_stored_and_small_chunks() -> None:
    spec = ChunkSpec((50_000,), np.dtype("i4"), None)
    data = np.random.default_rng(0).integers(0, 2**31, 50_000).astype("i4")  # incompressible
    codec = BloscpackCodec(clevel=0, chunklen=50_000).bind(spec)
    encoded = codec.encode(data, spec)
    log: list = []
    assert np.array_equal(codec.decode_partial_from(_ranged(encoded, log), spec, (slice(100, 110),)), data[100:110])
    assert log[-1] == (2 * HEADER_SIZE + 400, 2 * HEADER_SIZE + 440)  # just the rows
    small = ChunkSpec((300,), np.dtype("i4"), None)  # the whole file fits the first read
    codec = BloscpackCodec(chunklen=300).bind(small)
    encoded = codec.encode(data[:300], small)
    for sel in [(slice(5, 9),), (7,), (slice(200, 290),)]:
        assert np.array_equal(codec.decode_partial_from(_ranged(encoded), small, sel), data[:300][sel])
    assert codec.decode_partial_from(_ranged(encoded), small, (slice(None),)) is None  # most rows: read whole


def test_decode_partial_from_falls_back_when_the_file_changed() -> None:
    """A file replaced between the header read and the block read gives None (the caller then
    reads the file whole), not wrong data; a bad header is an error as for a whole read."""
    rows = 100_000
    spec = ChunkSpec((rows,), np.dtype("i4"), None)
    codec = BloscpackCodec(chunklen=rows).bind(spec)
    codec._blosc.blocksize = 4096
    old = codec.encode(_smooth(rows, "i4", seed=1), spec)
    new = codec.encode(_smooth(rows, "i4", seed=2) * 1000, spec)
    calls = iter([old, new, new, new])
    assert codec.decode_partial_from(lambda a, b: next(calls)[a:b], spec, (slice(50_000, 50_010),)) is None
    truncated = old[: len(old) // 2]
    assert codec.decode_partial_from(_ranged(truncated), spec, (slice(90_000, 90_010),)) is None
    with pytest.raises(CodecError, match="magic"):
        codec.decode_partial_from(_ranged(b"xxxx" + old[4:]), spec, (slice(5, 9),))
    with pytest.raises(CodecError, match="uncompressed bytes"):
        codec.decode_partial_from(_ranged(old), ChunkSpec((rows + 8,), np.dtype("i4"), None), (slice(5, 9),))


@pytest.mark.parametrize("dtype", ["bool", "u1", "i4", "f8", "S3", "U2", "M8[s]"])
def test_decode_into(dtype: str) -> None:
    rows = 20_000
    data = _smooth(rows * 2, "i8").astype(dtype).reshape(rows, 2)
    spec = ChunkSpec((rows, 2), np.dtype(dtype), None)
    codec = BloscpackCodec(chunklen=rows).bind(spec)
    for clevel in (0, 5):
        codec = BloscpackCodec(clevel=clevel, chunklen=rows).bind(spec)
        encoded = codec.encode(data, spec)
        out = np.zeros((rows + 10, 2), dtype=dtype)
        done = codec.decode_into(encoded, spec, out[5 : rows + 5])
        assert done == (np.dtype(dtype).kind != "b")  # bools take the general path
        if done:
            assert np.array_equal(out[5 : rows + 5], data) and not out[:5].any() and not out[rows + 5 :].any()
    assert not codec.decode_into(encoded, spec, np.zeros((rows, 4), dtype)[:, :2])  # not contiguous
    short = ChunkSpec((rows - 100, 2), np.dtype(dtype), None)  # a stale leftover: general path
    assert not codec.decode_into(encoded, short, np.zeros((rows - 100, 2), dtype))
    if np.dtype(dtype).kind != "b":
        with pytest.raises(CodecError):
            codec.decode_into(encoded[:-5], spec, np.zeros((rows, 2), dtype))


@pytest.mark.parametrize("dtype", ["i4", "bool", "S3", "f8"])
def test_small_reads_of_one_chunk(tmp_path: Path, dtype: str) -> None:
    """``ca[a:b]`` / ``ca[i]`` within a chunk take the carray's direct ranged path: same values,
    types and writability as NumPy, pending appends included."""
    data = _smooth(50_000, "i8").astype(dtype)
    ca = sbz.carray(data[:30_000], rootdir=tmp_path / "c", chunklen=8192)
    ca.append(data[30_000:])  # the last rows are still in memory: read after a flush
    for sel in [slice(10, 20), slice(8190, 8195), slice(-5, None), slice(49_990, 60_000), slice(5, 5), slice(0, 1)]:
        got = ca[sel]
        assert got.dtype == data.dtype and np.array_equal(got, data[sel]), sel
        assert got.flags.writeable and got.flags.owndata, sel
    for i in [0, 8191, 8192, -1, -50_000, 31_234]:
        got = ca[i]
        assert type(got) is type(data[i]) and got == data[i], i
    with pytest.raises(IndexError):
        ca[50_000]
    rows = np.arange(60 * 6, dtype="i2").reshape(60, 2, 3)
    nd = sbz.carray(rows, rootdir=tmp_path / "nd", chunklen=16)
    assert np.array_equal(nd[3], rows[3]) and np.array_equal(nd[17:20], rows[17:20])


def test_small_reads_of_a_cached_carray_are_served_from_its_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a decoded-chunk cache, ``ca[a:b]`` keeps the chunk it decodes and the next small
    reads of that chunk copy from it: neither a partial nor a whole decode again."""
    from shardstore.config import IOConfig
    from shardstore.core import io

    data = _smooth(50_000, "i4")
    sbz.carray(data, rootdir=tmp_path / "c", chunklen=8192).flush()
    ca = sbz.open(tmp_path / "c", mode="r", config=IOConfig(chunk_cache_bytes=1 << 20))
    decodes = {"whole": 0, "partial": 0}
    whole, partial = io.decode_chunk, CodecPipeline.decode_region_from

    def count(kind: str, fn):  # type: ignore[no-untyped-def]
        def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
            decodes[kind] += 1
            return fn(*args, **kwargs)
        return counted

    monkeypatch.setattr(io, "decode_chunk", count("whole", whole))
    monkeypatch.setattr(CodecPipeline, "decode_region_from", count("partial", partial))
    assert np.array_equal(ca[100:200], data[100:200]) and decodes == {"whole": 1, "partial": 0}
    for sel in [slice(5000, 5100), slice(0, 1), slice(8000, 8192)]:
        got = ca[sel]
        assert np.array_equal(got, data[sel]) and got.flags.writeable, sel
    assert int(ca[7]) == data[7]
    assert decodes == {"whole": 1, "partial": 0}
    assert np.array_equal(ca[9000:9100], data[9000:9100]) and decodes == {"whole": 2, "partial": 0}  # chunk 1
