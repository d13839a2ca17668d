"""N5 blocks that disagree with their dataset, corrupt payloads, varlength blocks, and codec
unit tests for the N5 compressions (lz4 dialects, gzip/zlib, bombs). Every failure is a
shardstore error naming the block key; nothing allocates more than the block allows."""

from __future__ import annotations

import bz2
import gzip
import lzma
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from _helpers import assert_bitexact

from shardstore import n5
from shardstore.codecs.base import ChunkSpec
from shardstore.codecs.lz4 import (
    Lz4Codec,
    lz4_block_stream_decode,
    lz4_block_stream_encode,
)
from shardstore.codecs.n5_block import (
    N5BlockCodec,
    compression_from_n5,
    read_block_header,
)
from shardstore.errors import (
    ChecksumError,
    ChunkNotFoundError,
    CodecError,
    ShardStoreError,
)

COMPRESSIONS = {
    "raw": {"type": "raw"},
    "gzip": {"type": "gzip", "level": 1},
    "zlib": {"type": "gzip", "level": 1, "useZlib": True},
    "bzip2": {"type": "bzip2", "blockSize": 1},
    "xz": {"type": "xz", "preset": 0},
    "lz4": {"type": "lz4", "blockSize": 65536},
    "lz4_bare": {"type": "lz4", "blockSize": 6},
    "blosc": {"type": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1},
    "zstd": {"type": "zstd", "level": 1},
}


def _header(mode: int, size: list[int], num: int | None = None) -> bytes:
    h = struct.pack(">HH", mode, len(size)) + struct.pack(f">{len(size)}I", *size)
    return h + (struct.pack(">I", num) if num is not None else b"")


def _dataset(tmp_path: Path, comp: dict | None = None, dtype: str = "uint16"):
    a = n5.create(tmp_path / "c.n5", "ds", shape=(6, 8), dtype=dtype, block_size=(4, 4),
                  compression=comp or {"type": "raw"})
    return a, tmp_path / "c.n5/ds"


def _codec(comp: dict) -> N5BlockCodec:
    return N5BlockCodec(compression_from_n5(comp)).bind(ChunkSpec((4, 4), np.dtype("uint16"), 0))


@pytest.mark.parametrize("raw,match", [
    (_header(0, [4, 4, 1]) + bytes(32), "3 dimensions, the dataset has 2"),
    (_header(0, [4]) + bytes(8), "1 dimensions"),
    (_header(0, [5, 4]) + bytes(40), "exceeds the block size"),
    (_header(0, [4, 4000000]) + bytes(8), "exceeds the block size"),
    (_header(7, [4, 4]) + bytes(32), "unknown block mode 7"),
    (struct.pack(">HI", 2, 32) + bytes(32), "mode 2"),
    (_header(0, [4, 4])[:6], "truncated header"),
    (b"\x00", "too short"),
    (_header(0, [4, 4]) + bytes(31), "31 bytes"),
    (_header(0, [4, 4]) + bytes(33), "33 bytes"),
    (_header(1, [4, 4], 3) + bytes(6), "varlength"),
])
def test_bad_block_headers_name_the_key(tmp_path: Path, raw: bytes, match: str) -> None:
    a, root = _dataset(tmp_path)
    (root / "1/0").parent.mkdir(parents=True, exist_ok=True)
    (root / "1/0").write_bytes(raw)  # block (0, 1) in C order
    with pytest.raises(CodecError, match=match) as info:
        a[...]
    assert "N5 block 'ds/1/0'" in str(info.value)
    assert (a[:, :4] == 0).all()  # the other block is unaffected


@pytest.mark.parametrize("name", list(COMPRESSIONS))
def test_truncated_and_corrupt_payloads(tmp_path: Path, name: str) -> None:
    a, root = _dataset(tmp_path, COMPRESSIONS[name])
    data = (np.arange(48, dtype="uint16") * 7).reshape(6, 8)
    a[...] = data
    good = (root / "0/0").read_bytes()
    for bad in (good[: len(good) - 3], good[:20], good[:-1] + bytes([good[-1] ^ 0xFF]) + b"\x17junk"):
        (root / "0/0").write_bytes(bad)
        with pytest.raises(CodecError, match="N5 block 'ds/0/0'"):
            a[...]
    (root / "0/0").write_bytes(good)
    assert_bitexact(np.asarray(a), data)


_BOMBS = {
    "gzip": lambda b: gzip.compress(b, 1),
    "zlib": lambda b: zlib.compress(b, 1),
    "bzip2": lambda b: bz2.compress(b, 1),
    "xz": lambda b: lzma.compress(b, preset=0),
}


@pytest.mark.parametrize("name", list(_BOMBS))
def test_decompression_bombs_refused(tmp_path: Path, name: str) -> None:
    import psutil

    bomb = _BOMBS[name](bytes(50_000_000))
    a, root = _dataset(tmp_path, COMPRESSIONS[name])
    (root / "0").mkdir(parents=True, exist_ok=True)
    (root / "0/0").write_bytes(_header(0, [4, 4]) + bomb)
    before = psutil.Process().memory_info().rss
    with pytest.raises(CodecError, match="more than the 32 bytes"):
        a[...]
    assert psutil.Process().memory_info().rss - before < 20e6


def test_lz4_stream_bomb_and_huge_frame_refused() -> None:
    codec = _codec(COMPRESSIONS["lz4"])
    frame = b"LZ4Block" + struct.pack("<BIII", 0x26, 10, 60000, 0) + bytes(10)
    with pytest.raises(CodecError, match="more than the 32 bytes"):
        codec.decode(_header(0, [4, 4]) + frame, ChunkSpec((4, 4), np.dtype("uint16"), 0))
    with pytest.raises(CodecError, match="corrupt lz4 block frame"):  # larger than its level allows
        lz4_block_stream_decode(b"LZ4Block" + struct.pack("<BIII", 0x20, 10, 5000, 0) + bytes(10), 10**6)


def test_lz4_dialects_checksums_and_framing() -> None:
    raw = b"0123456789" * 20000
    stream = lz4_block_stream_encode(raw, 65536)
    assert stream.startswith(b"LZ4Block") and stream.endswith(b"LZ4Block" + struct.pack("<BIII", 0x16, 0, 0, 0))
    assert lz4_block_stream_decode(stream, len(raw)) == raw
    corrupt = bytearray(stream)
    corrupt[17] ^= 1  # a checksum byte of the first frame
    with pytest.raises(ChecksumError):
        lz4_block_stream_decode(bytes(corrupt), len(raw))
    with pytest.raises(CodecError, match="stray"):
        lz4_block_stream_decode(stream + b"x", len(raw))
    with pytest.raises(CodecError, match="truncated"):
        lz4_block_stream_decode(stream[:-5], len(raw))
    bare = Lz4Codec(6)
    assert bare.bare and not Lz4Codec(64).bare
    spec = ChunkSpec((len(raw),), np.dtype("uint8"), 0)
    enc = bare.encode(raw, spec)
    assert not enc.startswith(b"LZ4Block")
    assert Lz4Codec(65536).decode(enc, spec, len(raw)) == raw  # told apart by content
    with pytest.raises(CodecError, match="bare lz4"):
        bare.decode(enc, spec, len(raw) - 1)


def test_gzip_reads_either_header_for_n5() -> None:
    data = bytes(range(32))
    spec = ChunkSpec((4, 4), np.dtype("uint16"), 0)
    for comp in (COMPRESSIONS["gzip"], COMPRESSIONS["zlib"]):
        codec = _codec(comp)
        for payload in (gzip.compress(data), zlib.compress(data)):
            block = _header(0, [4, 4]) + payload
            assert codec.decode(block, spec).tobytes() == np.frombuffer(data, ">u2").astype("u2").tobytes()
    assert _codec(COMPRESSIONS["zlib"]).encode(np.zeros((4, 4), "u2"), spec)[12:14] in (b"\x78\x01", b"\x78\x5e", b"\x78\x9c")
    assert _codec(COMPRESSIONS["gzip"]).encode(np.zeros((4, 4), "u2"), spec)[12:14] == b"\x1f\x8b"


def test_full_size_and_smaller_edge_blocks_read(tmp_path: Path) -> None:
    a, root = _dataset(tmp_path)  # shape (6, 8), blocks (4, 4): block (1, 0) is clipped to (2, 4)
    (root / "0").mkdir(parents=True, exist_ok=True)
    full = np.arange(16, dtype=">u2").reshape(4, 4)
    (root / "0/1").write_bytes(_header(0, [4, 4]) + full.tobytes())  # tensorstore: full size
    assert_bitexact(a[4:6, 0:4], full[:2].astype("u2"))
    small = np.arange(4, dtype=">u2").reshape(1, 4)  # smaller than the in-bounds part: zero padded
    (root / "0/1").write_bytes(_header(0, [4, 1]) + small.tobytes())
    assert_bitexact(a[4:6, 0:4], np.array([[0, 1, 2, 3], [0, 0, 0, 0]], "u2"))
    mode1 = _header(1, [4, 2], 8) + np.arange(8, dtype=">u2").tobytes()  # varlength, n == prod
    (root / "0/1").write_bytes(mode1)
    assert_bitexact(a[4:6, 0:4], np.arange(8, dtype="u2").reshape(2, 4))


@pytest.mark.parametrize("name", ["raw", "gzip", "lz4", "blosc", "zstd"])
@pytest.mark.parametrize("dtype", ["uint8", "int64", "float32"])
def test_varlength_blocks(tmp_path: Path, name: str, dtype: str) -> None:
    a = n5.create(tmp_path / "c.n5", "ds", shape=(6, 8), dtype=dtype, block_size=(4, 4),
                  compression=COMPRESSIONS[name])
    values = (np.arange(37) - 5).astype(dtype)
    a.write_varlength_block((1, 0), values)
    raw = (tmp_path / "c.n5/ds/0/1").read_bytes()
    header = read_block_header(raw)
    assert (header.mode, header.size, header.num_elements) == (1, (4, 2), 37)  # clipped size
    got = a.read_varlength_block((1, 0))
    assert got.dtype == np.dtype(dtype) and got.flags.writeable
    assert_bitexact(got, values)
    with pytest.raises(CodecError, match=r"N5 block 'ds/0/1'.*read_varlength_block"):
        a[...]
    with pytest.raises(CodecError, match="max_nbytes"):
        a.read_varlength_block((1, 0), max_nbytes=10)
    with pytest.raises(ChunkNotFoundError, match="ds/1/0"):
        a.read_varlength_block((0, 1))
    a[0:4, 4:8] = 3  # a regular block reads as varlength too (x fastest)
    assert_bitexact(a.read_varlength_block((0, 1)), np.full(16, 3, dtype))
    with pytest.raises(IndexError):
        a.read_varlength_block((2, 0))
    a.write_varlength_block((1, 1), [])
    assert a.read_varlength_block((1, 1)).size == 0


def test_varlength_huge_declared_count_refused_before_allocation(tmp_path: Path) -> None:
    a, root = _dataset(tmp_path, COMPRESSIONS["zstd"])
    (root / "0").mkdir(parents=True, exist_ok=True)
    (root / "0/0").write_bytes(_header(1, [4, 4], 0xFFFFFFFF) + b"\x28\xb5\x2f\xfd")
    with pytest.raises(CodecError, match="max_nbytes"):
        a.read_varlength_block((0, 0))


def test_errors_are_shardstore_errors(tmp_path: Path) -> None:
    a, root = _dataset(tmp_path, COMPRESSIONS["blosc"])
    (root / "0").mkdir(parents=True, exist_ok=True)
    (root / "0/0").write_bytes(_header(0, [4, 4]) + b"\x02\x01\x21\x02" + struct.pack("<III", 2**31, 0, 28) + bytes(12))
    with pytest.raises(ShardStoreError, match="N5 block 'ds/0/0'"):
        a[...]
