"""The bloscpack frame of bcolz chunk files: golden header bytes, round trips, bad input."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from shardstore.codecs.base import ChunkSpec
from shardstore.codecs.blosc import available_compressors
from shardstore.codecs.bloscpack import BloscpackCodec, bcolz_typesize, bloscpack_header, check_bloscpack_header
from shardstore.codecs.pipeline import CodecPipeline
from shardstore.codecs.registry import codec_from_config
from shardstore.errors import CodecError, MetadataError

CNAMES = [c for c in ("blosclz", "lz4", "lz4hc", "zlib", "zstd") if c in available_compressors()]


def _codec(spec: ChunkSpec, chunklen: int | None = None, **kw) -> BloscpackCodec:
    return BloscpackCodec(chunklen=chunklen or spec.shape[0], **kw).bind(spec)


def test_header_golden_bytes() -> None:
    assert bloscpack_header() == bytes.fromhex("626c706b01000000" "0100000000000000")
    check_bloscpack_header(bloscpack_header())


@pytest.mark.parametrize(
    "header, message",
    [
        (b"blpK" + bloscpack_header()[4:], "magic"),
        (bloscpack_header()[:4] + b"\x02" + bloscpack_header()[5:], "version"),
        (bloscpack_header()[:5] + b"\x00\x01\x00" + bloscpack_header()[8:], "reserved"),
        (bloscpack_header()[:8] + struct.pack("<q", 2), "2 blosc chunks"),
        (bloscpack_header()[:8] + struct.pack("<q", -1), "-1 blosc chunks"),
        (bloscpack_header()[:10], "too short"),
    ],
)
def test_header_rejected(header: bytes, message: str) -> None:
    with pytest.raises(CodecError, match=message):
        check_bloscpack_header(header)


def test_typesize_rule() -> None:
    assert bcolz_typesize(np.dtype("S7")) == 1
    assert bcolz_typesize(np.dtype("U5")) == 4
    assert bcolz_typesize(np.dtype("V300")) == 1
    assert bcolz_typesize(np.dtype("f8")) == 8
    assert bcolz_typesize(np.dtype("M8[ns]")) == 8


@pytest.mark.parametrize("cname", CNAMES)
@pytest.mark.parametrize("shuffle", [0, 1, 2])
@pytest.mark.parametrize("clevel", [0, 1, 9])
def test_roundtrip_cparams(cname: str, shuffle: int, clevel: int) -> None:
    data = (np.arange(3000) // 7).astype("<i4")
    spec = ChunkSpec((3000,), np.dtype("i4"), 0)
    codec = _codec(spec, cname=cname, shuffle=shuffle, clevel=clevel)
    enc = codec.encode(data, spec)
    assert enc[:16] == bloscpack_header()
    if clevel == 0:
        assert enc[18] & 0x02  # stored uncompressed (memcpyed)
    assert enc[19] == 4  # typesize
    assert np.array_equal(codec.decode(enc, spec), data)


@pytest.mark.parametrize(
    "dtype, values",
    [
        ("bool", [True, False, True]),
        ("S5", [b"ab", b"", b"hello"]),
        ("U3", ["a", "xyz", ""]),
        ("M8[ns]", [0, 10**18, -5]),
        ("m8[s]", [1, 2, 3]),
        ("c16", [1 + 2j, 0, -1j]),
        ("f2", [1.5, -2.0, 0.25]),
        ("u8", [0, 2**64 - 1, 7]),
    ],
)
def test_roundtrip_dtypes(dtype: str, values: list) -> None:
    dt = np.dtype(dtype)
    data = np.array(values).astype(dt) if dt.kind in "Mm" else np.array(values, dtype=dt)
    spec = ChunkSpec(data.shape, dt, np.zeros((), dt)[()])
    codec = _codec(spec)
    enc = codec.encode(data, spec)
    assert enc[19] == bcolz_typesize(dt)
    out = codec.decode(enc, spec)
    assert out.dtype == dt and np.array_equal(out, data)


def test_multidimensional_rows() -> None:
    data = np.arange(5 * 3 * 4, dtype="f8").reshape(5, 3, 4)
    spec = ChunkSpec((5, 3, 4), np.dtype("f8"), 0.0)
    codec = _codec(spec)
    assert np.array_equal(codec.decode(codec.encode(data, spec), spec), data)


def test_quantize_is_lossy_like_bcolz() -> None:
    data = np.linspace(0, 1, 1000)
    spec = ChunkSpec((1000,), np.dtype("f8"), 0.0)
    codec = _codec(spec, quantize=2)
    out = codec.decode(codec.encode(data, spec), spec)
    assert np.abs(out - data).max() < 0.01 and not np.array_equal(out, data)
    with pytest.raises(MetadataError, match="quantize"):
        CodecPipeline([BloscpackCodec(quantize=2, chunklen=4)]).bind(ChunkSpec((4,), np.dtype("i4"), 0))


def test_sizes_disagree() -> None:
    spec = ChunkSpec((100,), np.dtype("i4"), 0)
    codec = _codec(spec)
    enc = bytearray(codec.encode(np.arange(100, dtype="i4"), spec))
    bigger = ChunkSpec((120,), np.dtype("i4"), 0)
    with pytest.raises(CodecError, match="uncompressed bytes"):  # fewer rows than the chunk needs
        _codec(bigger).decode(bytes(enc), bigger)
    with pytest.raises(CodecError):  # truncated file
        codec.decode(bytes(enc[:-3]), spec)
    with pytest.raises(CodecError):  # trailing garbage: blosc cbytes disagrees with the file
        codec.decode(bytes(enc) + b"xx", spec)
    bad = bytearray(enc)
    bad[16 + 4 : 16 + 8] = struct.pack("<I", 4 * 1000)  # nbytes beyond what the chunk may hold
    with pytest.raises(CodecError):
        codec.decode(bytes(bad), spec)


def test_stale_leftover_rows_are_dropped_only_for_leftovers() -> None:
    """A leftover file holding more rows than meta/sizes says (an interrupted append) reads
    the first rows; a full chunk of the wrong size is an error."""
    full = ChunkSpec((10,), np.dtype("i4"), 0)
    codec = _codec(full, chunklen=10)
    enc = codec.encode(np.arange(10, dtype="i4"), full)
    assert np.array_equal(codec.decode(enc, full.with_shape((6,))), np.arange(6))
    short = codec.encode(np.arange(6, dtype="i4"), full.with_shape((6,)))
    with pytest.raises(CodecError, match="expected 40"):
        codec.decode(short, full)
    with pytest.raises(CodecError, match="expected 32"):
        codec.decode(short, full.with_shape((8,)))


def test_config_roundtrip() -> None:
    conf = {"name": "bloscpack", "configuration": {"cname": "zstd", "clevel": 3, "shuffle": 2, "quantize": 0, "chunklen": 64}}
    codec = codec_from_config(conf, namespace="bcolz")
    assert isinstance(codec, BloscpackCodec) and codec.to_config() == conf
    with pytest.raises(MetadataError):
        codec_from_config({"name": "bloscpack", "configuration": {"clevel": 11}}, namespace="bcolz")
