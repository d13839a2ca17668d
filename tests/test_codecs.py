"""Layer 2: the Zarr v3 codecs (bytes, transpose, gzip, zstd, blosc, crc32c).

JSON round-trips against what tensorstore and zarr-python write, golden bytes, pipeline
round-trips for every dtype, interop with tensorstore / numcodecs / the shared fixtures, and
refusal of corrupt, truncated and decompression-bomb inputs.
"""

from __future__ import annotations

import gzip as pygzip
import json
import math
import struct
import threading
import tracemalloc
import zlib
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import zstandard

from shardstore.codecs.base import ChunkSpec
from shardstore.codecs.blosc import CNAMES, SHUFFLES, BloscCodec, read_blosc_header
from shardstore.codecs.bytes_ import BytesCodec
from shardstore.codecs.crc32c import Crc32cCodec
from shardstore.codecs.gzip import GzipCodec
from shardstore.codecs.pipeline import CodecPipeline
from shardstore.codecs.registry import codec_from_config
from shardstore.codecs.transpose import TransposeCodec
from shardstore.codecs.zstd import ZstdCodec
from shardstore.errors import ChecksumError, CodecError, MetadataError, UnsupportedFeatureError

DTYPES = (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
)
AVAILABLE_CNAMES = [c for c in CNAMES if c in numcodecs.blosc.list_compressors()]
MiB = 1 << 20


def spec_of(shape, dtype) -> ChunkSpec:
    return ChunkSpec(tuple(shape), np.dtype(dtype), 0)


def sample(shape, dtype, seed=0) -> np.ndarray:
    """Deterministic data with the awkward values of each dtype (NaN, inf, extremes)."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    n = math.prod(shape)
    if dt.kind == "b":
        a = rng.integers(0, 2, n).astype(bool)
    elif dt.kind in "iu":
        info = np.iinfo(dt)
        a = rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)
        a[:2] = (info.min, info.max)[: min(n, 2)]
    elif dt.kind == "f":
        a = (rng.standard_normal(n) * 1000).astype(dt)
        a[:4] = np.array([np.nan, np.inf, -np.inf, -0.0], dtype=dt)[: min(n, 4)]
    else:
        a = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dt)
        a[:1] = complex(np.nan, 2.5)
    return a.reshape(shape)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-exact equality (NaN payloads and -0.0 included), any byte order or layout."""
    dt = np.dtype(b.dtype).newbyteorder("<")
    if a.shape != b.shape:
        return False
    a = np.ascontiguousarray(a, dtype=dt).reshape(-1).view(np.uint8)
    return bool(np.array_equal(a, np.ascontiguousarray(b, dtype=dt).reshape(-1).view(np.uint8)))


def _bytes(endian):
    return {"name": "bytes", "configuration": {"endian": endian}}


def _transpose(order):
    return {"name": "transpose", "configuration": {"order": list(order)}}


def _gzip(level):
    return {"name": "gzip", "configuration": {"level": level}}


def _zstd(level, checksum=False):
    return {"name": "zstd", "configuration": {"level": level, "checksum": checksum}}


def _blosc(**overrides):
    """A blosc codec object; a member overridden with None is left out."""
    conf = {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", **overrides}
    return {"name": "blosc", "configuration": {k: v for k, v in conf.items() if v is not None}}


def pipeline(configs, shape, dtype) -> CodecPipeline:
    return CodecPipeline.from_config(configs).bind(spec_of(shape, dtype))


# ----------------------------------------------------------------------------- JSON forms
def _codec_objects(codecs):
    """Every codec object of a codec list, descending into sharding configurations."""
    for c in codecs:
        if isinstance(c, dict) and c.get("name") == "sharding_indexed":
            yield from _codec_objects(c["configuration"]["codecs"])
            yield from _codec_objects(c["configuration"]["index_codecs"])
        else:
            yield c


def test_fixture_codec_json_round_trips_exactly(fixtures_dir):
    seen = set()
    for meta_path in sorted((fixtures_dir / "zarr3").rglob("zarr.json")):
        meta = json.loads(meta_path.read_text())
        for obj in _codec_objects(meta.get("codecs", [])):
            codec = codec_from_config(obj)
            assert json.dumps(codec.to_config()) == json.dumps(obj), meta_path
            seen.add(obj["name"] if isinstance(obj, dict) else obj)
    assert {"bytes", "transpose", "gzip", "zstd", "blosc", "crc32c"} <= seen


@pytest.mark.parametrize(
    "obj",
    [
        {"name": "bytes"},
        "bytes",
        {"name": "bytes", "configuration": {}},
        {"configuration": {"endian": "big"}, "name": "bytes"},
        {"name": "transpose", "configuration": {"order": [2, 0, 1]}},
        {"name": "gzip", "configuration": {"level": 0}},
        {"configuration": {"checksum": False, "level": 3}, "name": "zstd"},
        {"name": "zstd", "configuration": {"level": -5}},
        {"name": "zstd", "configuration": {"level": 0, "checksum": True}, "must_understand": True},
        _blosc(cname="zstd", shuffle="bitshuffle"),
        {"name": "crc32c"},
        {"name": "crc32c", "configuration": {}},
        "crc32c",
    ],
)
def test_parsed_json_round_trips_verbatim(obj):
    codec = codec_from_config(obj)
    assert json.dumps(codec.to_config()) == json.dumps(obj)


def test_constructor_canonical_forms_match_zarr_python():
    zc = pytest.importorskip("zarr.codecs")
    pairs = [
        (BytesCodec("little"), zc.BytesCodec(endian="little")),
        (BytesCodec("big"), zc.BytesCodec(endian="big")),
        (BytesCodec(None), zc.BytesCodec(endian=None)),
        (TransposeCodec((2, 0, 1)), zc.TransposeCodec(order=(2, 0, 1))),
        (GzipCodec(level=5), zc.GzipCodec(level=5)),
        (ZstdCodec(level=3, checksum=False), zc.ZstdCodec(level=3, checksum=False)),
        (ZstdCodec(level=7, checksum=True), zc.ZstdCodec(level=7, checksum=True)),
        (Crc32cCodec(), zc.Crc32cCodec()),
        (
            BloscCodec(cname="lz4", clevel=5, shuffle="shuffle", typesize=4, blocksize=0),
            zc.BloscCodec(cname="lz4", clevel=5, shuffle="shuffle", typesize=4, blocksize=0),
        ),
    ]
    for ours, theirs in pairs:
        expected = json.loads(json.dumps(theirs.to_dict()))  # tuples -> lists
        assert json.dumps(ours.to_config()) == json.dumps(expected)
        assert codec_from_config(expected) == ours


def test_constructor_canonical_forms_match_tensorstore():
    ts = pytest.importorskip("tensorstore")
    ours = [
        TransposeCodec([1, 0]), BytesCodec("big"),
        BloscCodec("lz4", 5, "shuffle", typesize=2), ZstdCodec(3), GzipCodec(5), Crc32cCodec(),
    ]
    meta = {
        "shape": [4, 4], "data_type": "int16",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 4]}},
        "codecs": [c.to_config() for c in ours],
    }
    arr = ts.open({"driver": "zarr3", "kvstore": "memory://", "metadata": meta}, create=True).result()
    assert arr.spec().to_json()["metadata"]["codecs"] == [c.to_config() for c in ours]


def test_blosc_bind_fills_typesize_but_keeps_stored_json():
    obj = _blosc(clevel=1)
    codec = codec_from_config(obj)
    bound = codec.bind(spec_of((8,), "int32"))
    assert bound.typesize == 4 and codec.typesize is None
    assert bound.to_config() == obj
    out = bound.encode(np.arange(64, dtype="<i4").tobytes(), spec_of((64,), "int32"))
    assert read_blosc_header(out).typesize == 4
    # built in code: the canonical form gains typesize once bound, like zarr-python's
    assert "typesize" not in BloscCodec("lz4").to_config()["configuration"]
    assert BloscCodec("lz4").bind(spec_of((2,), "float64")).to_config()["configuration"]["typesize"] == 8


@pytest.mark.parametrize(
    "obj, fragment",
    [
        ({"name": "bytes", "configuration": {"endian": "middle"}}, "endian"),
        ({"name": "bytes", "configuration": {"endian": "little", "order": "C"}}, "order"),
        ({"name": "bytes", "configuration": {"endian": None}}, "endian"),
        ({"name": "transpose", "configuration": {"order": [0, 0]}}, "permutation"),
        ({"name": "transpose", "configuration": {"order": "C"}}, "order"),
        ({"name": "transpose", "configuration": {}}, "order"),
        ({"name": "transpose", "configuration": {"order": [1, 0], "x": 1}}, "'x'"),
        ({"name": "gzip", "configuration": {"level": 10}}, "level"),
        ({"name": "gzip", "configuration": {"level": "5"}}, "level"),
        ({"name": "gzip", "configuration": {"level": True}}, "level"),
        ({"name": "gzip", "configuration": {"level": 5, "mtime": 0}}, "'mtime'"),
        ({"name": "zstd", "configuration": {"level": 23}}, "level"),
        ({"name": "zstd", "configuration": {"level": -131073}}, "level"),
        ({"name": "zstd", "configuration": {"level": 3.0}}, "level"),
        ({"name": "zstd", "configuration": {"level": 3, "checksum": 1}}, "checksum"),
        ({"name": "zstd", "configuration": {"level": 3, "dict": "x"}}, "'dict'"),
        (_blosc(cname="foo"), "cname"),
        (_blosc(clevel=10), "clevel"),
        (_blosc(shuffle=1), "shuffle"),
        (_blosc(typesize=0), "typesize"),
        (_blosc(blocksize=-1), "blocksize"),
        (_blosc(shuffle=None), "shuffle"),
        (_blosc(nthreads=2), "'nthreads'"),
        ({"name": "crc32c", "configuration": {"seed": 0}}, "'seed'"),
    ],
)
def test_invalid_configuration_raises_metadata_error_naming_codec_and_member(obj, fragment):
    with pytest.raises(MetadataError) as info:
        codec_from_config(obj)
    assert repr(obj["name"]) in str(info.value) and fragment in str(info.value)


def test_blosc_snappy_is_unsupported_not_invalid():
    if "snappy" in numcodecs.blosc.list_compressors():
        pytest.skip("this c-blosc has snappy")
    with pytest.raises(UnsupportedFeatureError, match="snappy"):
        codec_from_config(_blosc(cname="snappy"))


def test_validate_against_the_chunk_spec():
    for dtype in ("bool", "int8", "uint8"):  # endian optional for 1-byte types
        pipeline([{"name": "bytes"}], (3,), dtype)
    with pytest.raises(MetadataError, match="endian"):
        pipeline([{"name": "bytes"}], (3,), "int16")
    with pytest.raises(MetadataError, match="rank"):
        pipeline([_transpose([1, 0]), "bytes"], (2, 3, 4), "uint8")
    with pytest.raises(MetadataError, match="array->bytes"):
        CodecPipeline.from_config([{"name": "gzip", "configuration": {"level": 1}}])


def test_encoded_sizes():
    spec = spec_of((2, 2, 2), "uint64")
    p = CodecPipeline.from_config(["bytes", "crc32c"])
    assert p.encoded_size(spec) == 68  # 16 * 4 index entries + checksum
    assert CodecPipeline.from_config(["bytes"]).encoded_size(spec) == 64
    assert CodecPipeline.from_config(["bytes", _gzip(1)]).encoded_size(spec) is None
    assert Crc32cCodec().encoded_size(10) == 14


def test_strided_chunks_laid_out_in_scratch_encode_independently(monkeypatch):
    """With a compressor after ``bytes``, a strided chunk is laid out in a per-thread scratch
    buffer (``encode_transient``): each encoding stays intact after the next, also when a
    bytes->bytes codec hands its input back unchanged (the pipeline then copies it)."""
    vol = np.arange(6 * 5 * 8, dtype="uint16").reshape(6, 5, 8)
    boxes = [vol[i : i + 3, :, j : j + 4] for i in (0, 3) for j in (0, 4)]
    assert not any(b.flags.c_contiguous for b in boxes)
    for configs in ([_bytes("little"), "crc32c"], [_bytes("big"), _blosc()]):
        p = pipeline(configs, (3, 5, 4), "uint16")
        spec = spec_of((3, 5, 4), "uint16")
        encoded = [p.encode(b, spec) for b in boxes]
        for box, enc in zip(boxes, encoded):
            np.testing.assert_array_equal(p.decode(enc, spec), box)
    monkeypatch.setattr(Crc32cCodec, "encode", lambda self, data, spec: data)
    p = pipeline([_bytes("little"), "crc32c"], (3, 5, 4), "uint16")
    encoded = [p.encode(b, spec_of((3, 5, 4), "uint16")) for b in boxes]
    for box, enc in zip(boxes, encoded):
        assert bytes(enc) == box.astype("<u2").tobytes()


# ----------------------------------------------------------------------------- golden bytes
def test_crc32c_golden():
    out = bytes(Crc32cCodec().encode(b"123456789", spec_of((9,), "uint8")))
    assert out == b"123456789" + (0xE3069283).to_bytes(4, "little")
    assert bytes(Crc32cCodec().decode(out, spec_of((9,), "uint8"), 9)) == b"123456789"


@pytest.mark.parametrize("n", [0, 9, 1028, 64 << 10, (64 << 10) + 1, 3 << 20])
def test_crc32c_of_bytes_and_views_of_every_size(n: int) -> None:
    """Bytes and small views hash with google-crc32c, large views with the crc32c package
    when installed: the same CRC-32C either way (the golden value above, NumPy's bytes)."""
    import google_crc32c

    from shardstore.codecs.crc32c import crc32c

    data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
    want = google_crc32c.value(data.tobytes())
    view = memoryview(data).toreadonly()
    assert crc32c(data.tobytes()) == crc32c(view) == crc32c(memoryview(data)[:]) == want
    assert crc32c(b"123456789") == crc32c(memoryview(b"_123456789")[1:]) == 0xE3069283


def test_reading_a_sharded_array_does_not_import_the_crc32c_package(tmp_path: Path) -> None:
    """The shard index checksum is hashed by google-crc32c: importing the ``crc32c`` package
    loads ``importlib.metadata`` (45 ms), which every process's first sharded read paid."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np, shardstore.zarr3 as z\n"
        f"a = z.create({str(tmp_path)!r}, shape=(8, 8), dtype='u1', chunks=(4, 4), shards=(8, 8), mode='w')\n"
        "a[...] = np.arange(64, dtype='u1').reshape(8, 8)\n"
        f"assert (z.open({str(tmp_path)!r}, mode='r')[...] == np.arange(64).reshape(8, 8)).all()\n"
        "print('crc32c' in sys.modules, 'importlib.metadata' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"], out


@pytest.mark.parametrize(
    "values, dtype, little, big",
    [
        ([1, -2], "int32", "01000000feffffff", "00000001fffffffe"),
        ([0x0102], "uint16", "0201", "0102"),
        ([1.0], "float16", "003c", "3c00"),
        ([1 + 2j], "complex64", "0000803f00000040", "3f80000040000000"),
        ([True, False], "bool", "0100", "0100"),
        ([-1, 2], "int8", "ff02", "ff02"),
    ],
)
def test_bytes_golden(values, dtype, little, big):
    a = np.array(values, dtype=dtype)
    spec = spec_of(a.shape, dtype)
    for endian, hexed in (("little", little), ("big", big)):
        codec = BytesCodec(endian)
        assert bytes(codec.encode(a, spec)).hex() == hexed
        assert same_bits(codec.decode(bytes.fromhex(hexed), spec), a)


def test_transpose_then_bytes_golden():
    a = np.arange(6, dtype="uint8").reshape(2, 3)
    p = pipeline([{"name": "transpose", "configuration": {"order": [1, 0]}}, "bytes"], (2, 3), "uint8")
    assert bytes(p.encode(a, spec_of((2, 3), "uint8"))) == bytes([0, 3, 1, 4, 2, 5])
    assert TransposeCodec([2, 0, 1]).resolve(spec_of((4, 5, 6), "uint8")).shape == (6, 4, 5)


def test_blosc_memcpyed_golden():
    raw = b"0123456789"
    out = BloscCodec("lz4", 5, "noshuffle", typesize=1).encode(raw, spec_of((10,), "uint8"))
    # version 2, versionlz 1, flags memcpyed|dont-split|lz4, typesize 1, nbytes, blocksize, cbytes
    assert out == bytes.fromhex("020132010a0000000a0000001a000000") + raw
    h = read_blosc_header(out)
    assert (h.nbytes, h.cbytes, h.memcpyed) == (10, 26, True)
    # a hand-made stored chunk (shuffle flag set; ignored when memcpyed) decodes
    crafted = struct.pack("<BBBBIII", 2, 1, 0x03, 2, 10, 10, 26) + raw
    assert bytes(BloscCodec("lz4", 5, "shuffle").decode(crafted, spec_of((5,), "uint16"), 10)) == raw


def test_gzip_stream_format_and_multi_member():
    data = bytes(range(256)) * 64
    spec = spec_of((len(data),), "uint8")
    for level in range(10):
        out = GzipCodec(level).encode(data, spec)
        assert out[:3] == b"\x1f\x8b\x08"  # gzip magic, deflate
        assert pygzip.decompress(out) == data and zlib.decompress(out, 31) == data
    assert len(GzipCodec(0).encode(data, spec)) > len(data)  # level 0 = stored
    two = pygzip.compress(b"hello ", mtime=0) + pygzip.compress(b"world", mtime=0)
    assert GzipCodec().decode(two, spec, 100) == b"hello world"
    assert GzipCodec().decode(two + b"\0" * 8, spec, 100) == b"hello world"  # gzip(1) padding


def test_zstd_frames_with_and_without_content_size_and_checksum():
    data = bytes(range(256)) * 64
    spec = spec_of((len(data),), "uint8")
    with_sum = ZstdCodec(3, checksum=True).encode(data, spec)
    without = ZstdCodec(3).encode(data, spec)
    assert with_sum[:4] == without[:4] == b"\x28\xb5\x2f\xfd"
    assert with_sum[4] & 0x04 and not without[4] & 0x04  # frame header checksum flag
    assert zstandard.get_frame_parameters(without).content_size == len(data)
    obj = zstandard.ZstdCompressor(level=1).compressobj()  # streaming: no content size
    streamed = obj.compress(data) + obj.flush()
    assert zstandard.get_frame_parameters(streamed).content_size == zstandard.CONTENTSIZE_UNKNOWN
    for frame in (with_sum, without, streamed):
        assert bytes(ZstdCodec().decode(frame, spec, len(data))) == data
    for frames in (streamed + without, without + streamed, without + with_sum):
        assert bytes(ZstdCodec().decode(frames, spec, 2 * len(data))) == data * 2
    with pytest.raises(CodecError):  # the second frame would overflow the chunk
        ZstdCodec().decode(without + streamed, spec, len(data) + 10)
    with pytest.raises(CodecError):  # trailing garbage after a frame
        ZstdCodec().decode(streamed + b"junk", spec, 2 * len(data))
    assert ZstdCodec(level=-131072).encode(data, spec)  # fastest negative level works


# ----------------------------------------------------------------------------- round-trips
CHAINS = {
    "bytes-little": [{"name": "bytes", "configuration": {"endian": "little"}}],
    "bytes-big": [{"name": "bytes", "configuration": {"endian": "big"}}],
    "transpose+bytes-big+gzip+crc32c": [
        {"name": "transpose", "configuration": {"order": [2, 0, 1]}},
        {"name": "bytes", "configuration": {"endian": "big"}},
        {"name": "gzip", "configuration": {"level": 5}},
        {"name": "crc32c"},
    ],
    "bytes+zstd-checksum+crc32c": [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "zstd", "configuration": {"level": 3, "checksum": True}},
        {"name": "crc32c"},
    ],
    "transpose+bytes+blosc": [
        {"name": "transpose", "configuration": {"order": [1, 2, 0]}},
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle"}},
    ],
    "bytes+blosc+gzip+zstd": [
        {"name": "bytes", "configuration": {"endian": "big"}},
        {"name": "blosc", "configuration": {"cname": "zstd", "clevel": 3, "shuffle": "bitshuffle"}},
        {"name": "gzip", "configuration": {"level": 1}},
        {"name": "zstd", "configuration": {"level": 1}},
    ],
}


@pytest.mark.parametrize("chain", sorted(CHAINS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_pipeline_round_trip(dtype, chain):
    shape = (3, 4, 5)
    spec = spec_of(shape, dtype)
    p = CodecPipeline.from_config(CHAINS[chain]).bind(spec)
    a = sample(shape, dtype)
    encoded = p.encode(a, spec)
    back = p.decode(bytes(encoded), spec)
    assert back.dtype == np.dtype(dtype) and back.shape == shape
    assert same_bits(back, a)


@pytest.mark.parametrize("dtype", ["uint8", "float64", "complex128"])
def test_round_trip_edge_shapes(dtype):
    for shape in [(), (1,), (0, 3), (1, 1, 1, 1, 7)]:
        spec = spec_of(shape, dtype)
        p = CodecPipeline.from_config(
            [{"name": "bytes", "configuration": {"endian": "little"}},
             {"name": "zstd", "configuration": {"level": 1}},
             {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 1, "shuffle": "shuffle"}},
             {"name": "gzip", "configuration": {"level": 1}}, "crc32c"]
        ).bind(spec)
        a = sample(shape, dtype)
        assert same_bits(p.decode(bytes(p.encode(a, spec)), spec), a)


@pytest.mark.parametrize("shuffle", SHUFFLES)
@pytest.mark.parametrize("cname", AVAILABLE_CNAMES)
def test_blosc_every_cname_and_shuffle_against_numcodecs(cname, shuffle):
    a = sample((40, 50), "int32") // 1000  # compressible
    raw = a.tobytes()
    spec = spec_of((len(raw),), "uint8")
    ours = BloscCodec(cname, 5, shuffle, typesize=4)
    theirs = numcodecs.Blosc(cname=cname, clevel=5, shuffle=SHUFFLES.index(shuffle), typesize=4)
    encoded = ours.encode(raw, spec)
    assert read_blosc_header(encoded).typesize == 4
    assert bytes(theirs.decode(encoded)) == raw
    assert bytes(ours.decode(theirs.encode(raw), spec, len(raw))) == raw
    assert bytes(ours.decode(encoded, spec, len(raw))) == raw


def test_gzip_and_zstd_against_numcodecs():
    raw = sample((1000,), "float32").tobytes()
    spec = spec_of((len(raw),), "uint8")
    assert bytes(numcodecs.GZip(level=6).decode(GzipCodec(6).encode(raw, spec))) == raw
    assert GzipCodec().decode(numcodecs.GZip(level=6).encode(raw), spec, len(raw)) == raw
    zs = numcodecs.Zstd(level=3, checksum=True)
    assert bytes(zs.decode(ZstdCodec(3, checksum=True).encode(raw, spec))) == raw
    assert bytes(ZstdCodec().decode(zs.encode(raw), spec, len(raw))) == raw


TS_CHAINS = [
    [_transpose([1, 0]), _bytes("big"), _gzip(6), {"name": "crc32c"}],
    [_bytes("little"), _zstd(3, checksum=True)],
    [_bytes("little"), _blosc(cname="zstd", shuffle="bitshuffle", typesize=8, blocksize=0)],
]


@pytest.mark.parametrize("codecs", TS_CHAINS, ids=["transpose-gzip-crc", "zstd-checksum", "blosc"])
def test_interop_with_tensorstore_both_ways(codecs):
    ts = pytest.importorskip("tensorstore")
    shape, dtype = (6, 10), "float64"
    a = sample(shape, dtype)
    ctx = ts.Context()
    meta = {
        "shape": list(shape), "data_type": dtype, "fill_value": 0,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(shape)}},
        "codecs": codecs,
    }
    arr = ts.open(
        {"driver": "zarr3", "kvstore": "memory://", "metadata": meta}, create=True, context=ctx
    ).result()
    arr[...] = a
    kv = ts.KvStore.open("memory://", context=ctx).result()
    spec = spec_of(shape, dtype)
    p = CodecPipeline.from_config(codecs).bind(spec)
    assert same_bits(p.decode(kv.read("c/0/0").result().value, spec), a)  # tensorstore -> us
    b = sample(shape, dtype, seed=1)
    kv.write("c/0/0", bytes(p.encode(b, spec))).result()  # us -> tensorstore
    fresh = ts.open({"driver": "zarr3", "kvstore": "memory://"}, context=ctx).result()
    assert same_bits(fresh.read().result(), b)


# ----------------------------------------------------------------------------- fixtures
def _chunk_coords(key: str, encoding: dict, rank: int) -> tuple[int, ...]:
    default_sep = "/" if encoding["name"] == "default" else "."
    sep = encoding.get("configuration", {}).get("separator", default_sep)
    parts = key.split(sep)
    if encoding["name"] == "default":
        parts = parts[1:]
    return tuple(int(p) for p in parts) if rank else ()


def _region(expected: np.ndarray, coords, chunk_shape) -> tuple[tuple[slice, ...], tuple[slice, ...]]:
    out, inner = [], []
    for c, n, size in zip(coords, chunk_shape, expected.shape):
        stop = min((c + 1) * n, size)
        out.append(slice(c * n, stop))
        inner.append(slice(0, max(stop - c * n, 0)))
    return tuple(out), tuple(inner)


def _fixture_arrays(fixtures_dir: Path):
    manifest = json.loads((fixtures_dir / "MANIFEST.json").read_text())
    for case in manifest["cases"]:
        if case["format"] != "zarr3":
            continue
        for array_path, info in case["arrays"].items():
            root = fixtures_dir / case["path"] / array_path
            yield case["id"], root, np.load(fixtures_dir / info["expected_npy"])


def test_decode_every_chunk_of_the_zarr3_fixtures(fixtures_dir):
    """Decode every stored chunk (and every inner chunk of single-level shards) with our
    codecs and compare with the expected arrays written by tensorstore / zarr-python."""
    checked = 0
    for case_id, root, expected in _fixture_arrays(fixtures_dir):
        meta = json.loads((root / "zarr.json").read_text())
        dtype = np.dtype(meta["data_type"])
        shape = tuple(meta["shape"])
        grid = tuple(meta["chunk_grid"]["configuration"]["chunk_shape"])
        codecs = meta["codecs"]
        sharded = codecs[0]["name"] == "sharding_indexed"
        inner_codecs = codecs[0]["configuration"]["codecs"] if sharded else []
        if any(c["name"] == "sharding_indexed" for c in inner_codecs):
            continue  # nested sharding belongs to the sharding tests
        files = (p for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))
        for path in sorted(p for p in files if p.name != "zarr.json"):
            key = path.relative_to(root).as_posix()
            if (path.parent / "zarr.json").exists() and path.parent != root:
                continue  # a child node's chunk
            coords = _chunk_coords(key, meta["chunk_key_encoding"], len(shape))
            data = path.read_bytes()
            if not sharded:
                chunks = [(coords, grid, CodecPipeline.from_config(codecs), data)]
            else:
                conf = codecs[0]["configuration"]
                inner = tuple(conf["chunk_shape"])
                cps = tuple(g // i for g, i in zip(grid, inner))
                ispec = spec_of(cps + (2,), "uint64")
                ip = CodecPipeline.from_config(conf["index_codecs"]).bind(ispec)
                isz = ip.encoded_size(ispec)
                at_start = conf.get("index_location", "end") == "start"
                raw_index = data[:isz] if at_start else data[len(data) - isz :]
                index = ip.decode(raw_index, ispec).reshape(-1, 2)
                chunks = []
                for i, (off, nbytes) in enumerate(index.tolist()):
                    if off == 2**64 - 1:
                        continue
                    sub = np.unravel_index(i, cps)
                    ccoords = tuple(c * k + s for c, k, s in zip(coords, cps, sub))
                    inner_p = CodecPipeline.from_config(conf["codecs"])
                    chunks.append((ccoords, inner, inner_p, data[off : off + nbytes]))
            for ccoords, cshape, p, cdata in chunks:
                spec = spec_of(cshape, dtype)
                decoded = p.bind(spec).decode(cdata, spec)
                out_sel, in_sel = _region(expected, ccoords, cshape)
                assert same_bits(decoded[in_sel], expected[out_sel]), (case_id, key, ccoords)
                checked += 1
    assert checked > 50


# ----------------------------------------------------------------------------- hostile input
def _peak_during(fn) -> int:
    tracemalloc.start()
    try:
        fn()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


@pytest.fixture(scope="module")
def zeros_64mib() -> bytes:
    return bytes(64 * MiB)


def test_gzip_bomb_refused_without_allocating(zeros_64mib):
    bomb = zlib.compress(zeros_64mib[: 16 * MiB], 9, 31)  # deflate tops out near 1000:1
    assert len(bomb) < 20_000

    def decode():
        with pytest.raises(CodecError, match="more than the 1048576 bytes"):
            GzipCodec().decode(bomb, spec_of((MiB,), "uint8"), MiB)

    assert _peak_during(decode) < 4 * MiB


def test_zstd_bomb_refused_without_allocating(zeros_64mib):
    declared = zstandard.ZstdCompressor(level=1).compress(zeros_64mib)
    obj = zstandard.ZstdCompressor(level=1).compressobj()
    undeclared = obj.compress(zeros_64mib) + obj.flush()
    assert len(declared) < 100_000 and len(undeclared) < 100_000
    for bomb in (declared, undeclared):
        def decode(bomb=bomb):
            with pytest.raises(CodecError):
                ZstdCodec().decode(bomb, spec_of((MiB,), "uint8"), MiB)

        assert _peak_during(decode) < 4 * MiB
    with pytest.raises(CodecError, match="declares 67108864 bytes"):
        ZstdCodec().decode(declared, spec_of((MiB,), "uint8"), MiB)


def test_blosc_bomb_refused_from_the_header(zeros_64mib):
    bomb = BloscCodec("blosclz", 1, "noshuffle", typesize=1).encode(zeros_64mib, spec_of((1,), "uint8"))
    assert len(bomb) < 1_000_000

    def decode():
        with pytest.raises(CodecError, match="declares 67108864 uncompressed bytes"):
            BloscCodec("blosclz", 1, "noshuffle").decode(bomb, spec_of((MiB,), "uint8"), MiB)

    assert _peak_during(decode) < 4 * MiB


def test_pipeline_caps_the_decoded_size():
    spec = spec_of((16,), "uint8")
    p = CodecPipeline.from_config(["bytes", {"name": "gzip", "configuration": {"level": 1}}]).bind(spec)
    with pytest.raises(CodecError):
        p.decode(zlib.compress(bytes(1000), 1, 31), spec)


def _flip(data: bytes, pos: int) -> bytes:
    b = bytearray(data)
    b[pos] ^= 0xFF
    return bytes(b)


def test_corrupt_and_truncated_input_raises_codec_error():
    raw = sample((64, 64), "float32").tobytes()
    spec = spec_of((len(raw),), "uint8")
    n = len(raw)
    for codec in (GzipCodec(5), ZstdCodec(3), ZstdCodec(3, checksum=True),
                  BloscCodec("lz4", 5, "shuffle", typesize=4),
                  BloscCodec("zstd", 5, "bitshuffle", typesize=4),
                  BloscCodec("blosclz", 5, "noshuffle", typesize=4), Crc32cCodec()):
        enc = bytes(codec.encode(raw, spec))
        for bad in (b"", enc[:3], enc[: len(enc) // 2], enc[:-1], b"garbage" * 10):
            with pytest.raises(CodecError):
                codec.decode(bad, spec, n)
        if isinstance(codec, (GzipCodec, Crc32cCodec)) or getattr(codec, "checksum", False):
            with pytest.raises(CodecError):  # checksummed formats catch any flipped byte
                codec.decode(_flip(enc, len(enc) // 2), spec, n)


def test_checksum_mismatches_raise_checksum_error():
    raw = bytes(range(256)) * 16
    spec = spec_of((len(raw),), "uint8")
    with pytest.raises(ChecksumError, match="0x"):
        Crc32cCodec().decode(_flip(Crc32cCodec().encode(raw, spec), 5), spec, len(raw))
    with pytest.raises(CodecError, match="too short"):
        Crc32cCodec().decode(b"abc", spec, len(raw))
    enc = ZstdCodec(3, checksum=True).encode(raw, spec)
    with pytest.raises(ChecksumError):
        ZstdCodec(3, checksum=True).decode(_flip(enc, len(enc) - 1), spec, len(raw))


def test_bytes_wrong_length_says_expected_and_got():
    with pytest.raises(CodecError, match="expected 24 bytes .* got 23"):
        BytesCodec("little").decode(bytes(23), spec_of((2, 3), "int32"))


def test_blosc_header_checks():
    enc = BloscCodec("lz4", 5, "shuffle", typesize=4).encode(bytes(4000), spec_of((1000,), "int32"))
    with pytest.raises(CodecError, match="header says the chunk is"):
        BloscCodec("lz4", 5, "shuffle").decode(enc + b"\0", spec_of((1000,), "int32"), 4000)
    with pytest.raises(CodecError, match="too short"):
        BloscCodec("lz4", 5, "shuffle").decode(enc[:10], spec_of((1000,), "int32"), 4000)
    lying = struct.pack("<BBBBIII", 2, 1, 0x02, 1, 100, 100, 26) + bytes(10)
    with pytest.raises(CodecError, match="cannot hold"):
        BloscCodec("lz4", 5, "shuffle").decode(lying, spec_of((100,), "uint8"), 100)


# ----------------------------------------------------------------------------- copies, threads
def test_bytes_codec_copies_at_most_once():
    a = np.arange(1000, dtype=np.float64)
    spec = spec_of(a.shape, a.dtype)
    native = "little" if np.little_endian else "big"
    out = BytesCodec(native).encode(a, spec)
    assert np.shares_memory(np.frombuffer(out, np.uint8), a)  # zero-copy encode
    assert out.readonly
    stored = a.tobytes()
    back = BytesCodec(native).decode(stored, spec)  # zero-copy (read-only) view of the input
    assert np.shares_memory(back, np.frombuffer(stored, np.uint8)) and same_bits(back, a)
    swapped = BytesCodec("big" if native == "little" else "little")
    back = swapped.decode(bytes(swapped.encode(a, spec)), spec)  # the swap is the one copy
    assert back.flags.writeable and back.dtype.isnative and same_bits(back, a)


def test_codecs_are_thread_safe():
    raw = [sample((128, 128), "int16", seed=i).tobytes() for i in range(4)]
    spec = spec_of((len(raw[0]),), "uint8")
    codecs = [
        ZstdCodec(3, checksum=True), ZstdCodec(-1), GzipCodec(4),
        BloscCodec("lz4", 5, "shuffle", typesize=2),
    ]
    errors = []

    def work(i):
        try:
            for _ in range(10):
                for c in codecs:
                    assert bytes(c.decode(c.encode(raw[i], spec), spec, len(raw[i]))) == raw[i]
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_a_codec_already_loaded_loads_no_other_codec_module(tmp_path: Path) -> None:
    """Creating and writing an N5 gzip array (its codec's module comes with the N5 format)
    imports none of the Zarr v3 codec modules it does not use (bytes, crc32c: ~0.5-1 ms of a
    process's first create); asking for a codec not loaded yet still finds it."""
    import subprocess
    import sys

    script = f"""
import sys
import shardstore
a = shardstore.n5.create({str(tmp_path)!r}, "x", shape=(8,), dtype="uint8", block_size=(4,), compression={{"type": "gzip"}})
a[...] = 1
print(sorted(m for m in ("shardstore.codecs.bytes_", "shardstore.codecs.crc32c") if m in sys.modules))
from shardstore.codecs.registry import get_codec_class
print(get_codec_class("crc32c").__name__)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["[]", "Crc32cCodec"], out.stdout
