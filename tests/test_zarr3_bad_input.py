"""Bad input for the Zarr v3 driver: corrupt shards, corrupt chunks, invalid metadata, failed writes.

Every case must raise a ``shardstore`` error (a ``ShardStoreError``) whose message names the key
or document concerned, and must never hang or allocate what a corrupt header claims. Corrupt
files are made by writing a valid array with shardstore into ``tmp_path`` and editing bytes on
disk; index positions come from the spec (index at the end: the last ``16*n (+4)`` bytes, an
``(offset, nbytes)`` uint64 pair per inner chunk in C order, then a little-endian crc32c).
"""

from __future__ import annotations

import gzip
import json
import math
import resource
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any

import google_crc32c
import numpy as np
import pytest
import zstandard

import shardstore
from shardstore.errors import (
    ChecksumError,
    MetadataError,
    ShardStoreError,
)

pytestmark = pytest.mark.timeout(60)

EMPTY = 0xFFFF_FFFF_FFFF_FFFF

# -- array under test ---------------------------------------------------------------------
# shape (64, 32), shards (32, 32), inner chunks (16, 16): two shards c/0/0 and c/1/0, each with
# n = 4 inner chunks of 16*16 uint16 = 512 bytes.
SHAPE = (64, 32)
SHARDS = (32, 32)
CHUNKS = (16, 16)
N_INNER = 4
DTYPE = "uint16"
BAD_SHARD = "c/1/0"
GOOD_SHARD = "c/0/0"
#: a selection inside the bad shard touching a single inner chunk (C-order index 0 of c/1/0)
ONE_CHUNK_OF_BAD = (slice(32, 48), slice(0, 16))
#: a selection inside the good shard
GOOD_REGION = (slice(0, 32), slice(0, 32))

BYTES_LE = {"name": "bytes", "configuration": {"endian": "little"}}
CODECS: dict[str, list[dict[str, Any]]] = {
    "raw": [BYTES_LE],
    "zstd": [BYTES_LE, {"name": "zstd", "configuration": {"level": 3, "checksum": False}}],
    "gzip": [BYTES_LE, {"name": "gzip", "configuration": {"level": 5}}],
    "blosc": [
        BYTES_LE,
        {
            "name": "blosc",
            "configuration": {
                "cname": "lz4",
                "clevel": 5,
                "shuffle": "shuffle",
                "typesize": 2,
                "blocksize": 0,
            },
        },
    ],
}
INDEX_NO_CRC = [BYTES_LE]


def _data() -> np.ndarray:
    # compressible but with no inner chunk equal to the fill value 0
    return (np.arange(math.prod(SHAPE), dtype=np.uint16) % 251 + 1).reshape(SHAPE)


def make_array(tmp_path: Path, codec: str = "zstd", **kwargs: Any) -> Path:
    """Write the standard array to ``tmp_path / 'a'`` and return that directory."""
    path = tmp_path / "a"
    a = shardstore.zarr3.create(
        path,
        shape=SHAPE,
        dtype=DTYPE,
        chunks=CHUNKS,
        shards=SHARDS,
        codecs=CODECS[codec],
        fill_value=0,
        **kwargs,
    )
    a[...] = _data()
    return path


# -- shard byte surgery (from the spec, independent of shardstore) ---------------------------
def index_size(crc: bool = True) -> int:
    return 16 * N_INNER + (4 if crc else 0)


def split_shard(raw: bytes, crc: bool = True, location: str = "end") -> np.ndarray:
    """The (n, 2) index of a shard (crc verified when present)."""
    isz = index_size(crc)
    assert len(raw) >= isz
    idx = raw[len(raw) - isz :] if location == "end" else raw[:isz]
    if crc:
        body, stored = idx[:-4], idx[-4:]
        assert struct.unpack("<I", stored)[0] == google_crc32c.value(body)
        idx = body
    return np.frombuffer(idx, dtype="<u8").reshape(N_INNER, 2).copy()


def encode_index(index: np.ndarray, crc: bool = True) -> bytes:
    body = np.ascontiguousarray(index, dtype="<u8").tobytes()
    return body + (struct.pack("<I", google_crc32c.value(body)) if crc else b"")


def shard_path(array_dir: Path, key: str = BAD_SHARD) -> Path:
    return array_dir.joinpath(*key.split("/"))


def inner_chunks(raw: bytes, crc: bool = True) -> list[bytes | None]:
    index = split_shard(raw, crc)
    return [
        None if (o == EMPTY and n == EMPTY) else raw[int(o) : int(o) + int(n)]
        for o, n in index
    ]


def build_shard(chunks: list[bytes | None], crc: bool = True) -> bytes:
    """A valid shard (index at end) holding ``chunks`` packed in order."""
    index = np.full((N_INNER, 2), EMPTY, dtype=np.uint64)
    parts, off = [], 0
    for i, c in enumerate(chunks):
        if c is None:
            continue
        index[i] = (off, len(c))
        parts.append(c)
        off += len(c)
    return b"".join(parts) + encode_index(index, crc)


def replace_chunk(array_dir: Path, i: int, new: bytes, crc: bool = True) -> None:
    p = shard_path(array_dir)
    chunks = inner_chunks(p.read_bytes(), crc)
    chunks[i] = new
    p.write_bytes(build_shard(chunks, crc))


def set_index_entry(
    array_dir: Path, i: int, offset: int, nbytes: int, crc: bool = True, location: str = "end"
) -> None:
    """Rewrite index entry ``i`` of the bad shard (recomputing the crc32c)."""
    p = shard_path(array_dir)
    raw = p.read_bytes()
    isz = index_size(crc)
    index = split_shard(raw, crc, location)
    index[i] = (offset, nbytes)
    if location == "end":
        p.write_bytes(raw[: len(raw) - isz] + encode_index(index, crc))
    else:
        p.write_bytes(encode_index(index, crc) + raw[isz:])


# -- assertions ---------------------------------------------------------------------------
def assert_names(exc: BaseException, *names: str) -> None:
    msg = str(exc)
    assert any(n in msg for n in names), f"error message does not name {names}: {msg!r}"


def read_fails(
    array_dir: Path,
    selection: Any = Ellipsis,
    key: str = BAD_SHARD,
    exc_type: type[BaseException] = ShardStoreError,
) -> BaseException:
    """Open read-only, read ``selection``: it must raise ``exc_type`` naming ``key``."""
    a = shardstore.zarr3.open(array_dir, mode="r")
    t0 = time.monotonic()
    with pytest.raises(exc_type) as info:
        a[selection]
    assert time.monotonic() - t0 < 30
    assert_names(info.value, key)
    return info.value


def good_shard_still_reads(array_dir: Path) -> None:
    a = shardstore.zarr3.open(array_dir, mode="r")
    np.testing.assert_array_equal(a[GOOD_REGION], _data()[GOOD_REGION])


#: read the whole array (whole-shard read path) and one inner chunk (byte-range read path)
READ_PATHS = pytest.mark.parametrize(
    "selection", [Ellipsis, ONE_CHUNK_OF_BAD], ids=["whole", "one_chunk"]
)


# == corrupt shards =========================================================================
@READ_PATHS
def test_truncated_shard_shorter_than_index(tmp_path: Path, selection: Any) -> None:
    d = make_array(tmp_path)
    p = shard_path(d)
    p.write_bytes(p.read_bytes()[:10])
    read_fails(d, selection)
    good_shard_still_reads(d)


@READ_PATHS
def test_empty_shard_file(tmp_path: Path, selection: Any) -> None:
    d = make_array(tmp_path)
    shard_path(d).write_bytes(b"")
    read_fails(d, selection)
    good_shard_still_reads(d)


@READ_PATHS
def test_shard_truncated_inside_chunks(tmp_path: Path, selection: Any) -> None:
    # the index bytes are intact (kept at the end) but the chunk area lost its tail, so the
    # offsets now point past the end / into the index
    d = make_array(tmp_path)
    p = shard_path(d)
    raw = p.read_bytes()
    isz = index_size()
    p.write_bytes(raw[:20] + raw[len(raw) - isz :])
    read_fails(d, selection)


@READ_PATHS
@pytest.mark.parametrize("where", [0, 17, 16 * N_INNER - 1, 16 * N_INNER + 1])
def test_index_crc32c_mismatch(tmp_path: Path, selection: Any, where: int) -> None:
    """Flip one byte of the index (entries or the stored crc itself)."""
    d = make_array(tmp_path)
    p = shard_path(d)
    raw = bytearray(p.read_bytes())
    raw[len(raw) - index_size() + where] ^= 0x5A
    p.write_bytes(bytes(raw))
    read_fails(d, selection, exc_type=ChecksumError)
    good_shard_still_reads(d)


@READ_PATHS
@pytest.mark.parametrize(
    "entry",
    [
        ("offset_past_end", lambda size, o, n: (size + 100, n)),
        ("size_past_end", lambda size, o, n: (o, size)),
        ("offset_plus_size_overflows", lambda size, o, n: (EMPTY - 10, 100)),
        ("huge_size", lambda size, o, n: (o, 1 << 62)),
        ("half_empty_offset", lambda size, o, n: (EMPTY, n)),
        ("half_empty_nbytes", lambda size, o, n: (o, EMPTY)),
    ],
    ids=lambda e: e[0],
)
def test_index_entry_out_of_bounds(tmp_path: Path, selection: Any, entry: Any) -> None:
    d = make_array(tmp_path)
    raw = shard_path(d).read_bytes()
    o, n = (int(v) for v in split_shard(raw)[0])
    set_index_entry(d, 0, *entry[1](len(raw), o, n))
    read_fails(d, selection)
    good_shard_still_reads(d)


@pytest.mark.parametrize(
    "location,selection",
    # with the index at the end, a byte-range read cannot know the shard size, so only the
    # whole-shard read can see the overlap
    [("end", Ellipsis), ("start", Ellipsis), ("start", ONE_CHUNK_OF_BAD)],
    ids=["end-whole", "start-whole", "start-one_chunk"],
)
def test_entry_overlapping_index_without_crc(tmp_path: Path, location: str, selection: Any) -> None:
    """No crc32c in index_codecs and raw inner chunks: a chunk range that covers index bytes
    decodes "fine" unless the reader checks that chunks stay out of the index."""
    d = make_array(tmp_path, codec="raw", index_codecs=INDEX_NO_CRC, index_location=location)
    raw = shard_path(d).read_bytes()
    isz = index_size(crc=False)
    o, n = (int(v) for v in split_shard(raw, crc=False, location=location)[0])
    # same length as a real chunk, ending at the end of the shard / starting at 0 (in the index)
    set_index_entry(d, 0, len(raw) - n if location == "end" else 0, n, crc=False, location=location)
    assert n > isz
    read_fails(d, selection)


# == corrupt inner chunks ===================================================================
@pytest.mark.parametrize("codec", ["zstd", "gzip", "blosc"])
def test_truncated_inner_chunk(tmp_path: Path, codec: str) -> None:
    d = make_array(tmp_path, codec=codec)
    chunk = inner_chunks(shard_path(d).read_bytes())[0]
    assert chunk is not None
    replace_chunk(d, 0, chunk[: len(chunk) // 2])
    read_fails(d, ONE_CHUNK_OF_BAD)
    read_fails(d, Ellipsis)


@pytest.mark.parametrize("codec", ["zstd", "gzip", "blosc"])
@pytest.mark.parametrize("keep_header", [0, 16], ids=["all_garbage", "garbage_after_16"])
def test_garbage_inner_chunk(tmp_path: Path, codec: str, keep_header: int) -> None:
    """Same-length random bytes instead of the compressed chunk (optionally keeping the first
    16 bytes: the blosc header / gzip header stay plausible)."""
    d = make_array(tmp_path, codec=codec)
    chunk = inner_chunks(shard_path(d).read_bytes())[0]
    assert chunk is not None
    rng = np.random.default_rng(1234)
    garbage = chunk[:keep_header] + rng.integers(0, 256, len(chunk) - keep_header, dtype=np.uint8).tobytes()
    replace_chunk(d, 0, garbage)
    read_fails(d, ONE_CHUNK_OF_BAD)
    read_fails(d, Ellipsis)


def _wrong_size_payloads() -> list[tuple[str, str, bytes]]:
    import numcodecs

    chunk_bytes = math.prod(CHUNKS) * 2
    out = []
    for label, n in (("short", chunk_bytes - 2), ("long", chunk_bytes * 2), ("empty", 0)):
        payload = (np.arange(n, dtype=np.uint8) % 7).tobytes()
        out.append(("raw", label, payload))
        out.append(("zstd", label, zstandard.ZstdCompressor().compress(payload)))
        out.append(("gzip", label, gzip.compress(payload)))
        blosc = numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)
        out.append(("blosc", label, bytes(blosc.encode(payload))))
    return out


@pytest.mark.parametrize(
    "codec,label,payload", _wrong_size_payloads(), ids=lambda v: v if isinstance(v, str) else None
)
def test_inner_chunk_decodes_to_wrong_size(tmp_path: Path, codec: str, label: str, payload: bytes) -> None:
    d = make_array(tmp_path, codec=codec)
    replace_chunk(d, 0, payload)
    read_fails(d, ONE_CHUNK_OF_BAD)
    read_fails(d, Ellipsis)


def _max_rss_bytes() -> int:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024


@pytest.mark.parametrize("memcpyed", [False, True], ids=["compressed", "memcpyed"])
def test_blosc_header_declares_huge_size(tmp_path: Path, memcpyed: bool) -> None:
    """A blosc header claiming ~4 GiB must be refused before anything that size is allocated."""
    import numcodecs

    d = make_array(tmp_path, codec="blosc")
    chunk = inner_chunks(shard_path(d).read_bytes())[0]
    assert chunk is not None
    if memcpyed:
        # clevel 0 gives a memcpyed chunk: the raw bytes follow the header
        chunk = bytes(numcodecs.Blosc(cname="lz4", clevel=0).encode(_data()[32:48, 0:16].tobytes()))
        assert chunk[2] & 0x02
    hacked = bytearray(chunk)
    struct.pack_into("<I", hacked, 4, 0xFFFF_FF00)  # nbytes
    replace_chunk(d, 0, bytes(hacked))
    before = _max_rss_bytes()
    t0 = time.monotonic()
    read_fails(d, ONE_CHUNK_OF_BAD)
    assert time.monotonic() - t0 < 10
    assert _max_rss_bytes() - before < 512 * 2**20, "decoding a hostile blosc header allocated its claim"


def test_corrupt_chunk_with_crc32c_is_checksum_error(tmp_path: Path) -> None:
    codecs = CODECS["zstd"] + [{"name": "crc32c"}]
    path = tmp_path / "b"
    a = shardstore.zarr3.create(path, shape=SHAPE, dtype=DTYPE, chunks=CHUNKS, shards=SHARDS, codecs=codecs)
    a[...] = _data()
    chunk = bytearray(inner_chunks(shard_path(path).read_bytes())[0] or b"")
    chunk[5] ^= 0xFF
    replace_chunk(path, 0, bytes(chunk))
    read_fails(path, ONE_CHUNK_OF_BAD, exc_type=ChecksumError)


# == invalid zarr.json ======================================================================
def _meta_path(d: Path) -> Path:
    return d / "zarr.json"


def _load_meta(d: Path) -> dict[str, Any]:
    return json.loads(_meta_path(d).read_text())


def _save_meta(d: Path, meta: Any) -> None:
    _meta_path(d).write_text(json.dumps(meta))


def open_fails(d: Path, exc_type: type[BaseException] = ShardStoreError) -> BaseException:
    """Opening (and reading, in case validation is lazy) must raise, naming zarr.json."""
    with pytest.raises(exc_type) as info:
        a = shardstore.zarr3.open(d, mode="r")
        a[...]
    assert_names(info.value, "zarr.json")
    return info.value


def _sharding(meta: dict[str, Any]) -> dict[str, Any]:
    (codec,) = [c for c in meta["codecs"] if c["name"] == "sharding_indexed"]
    return codec["configuration"]


@pytest.mark.parametrize(
    "text", [b"{not json", b"", b"[]", b'"array"', b"null", b"\xff\xfe\x00"], ids=repr
)
def test_metadata_not_a_json_object(tmp_path: Path, text: bytes) -> None:
    d = make_array(tmp_path)
    _meta_path(d).write_bytes(text)
    open_fails(d, MetadataError)


@pytest.mark.parametrize(
    "member",
    ["zarr_format", "node_type", "shape", "data_type", "chunk_grid", "chunk_key_encoding",
     "fill_value", "codecs"],
)
def test_metadata_missing_member(tmp_path: Path, member: str) -> None:
    d = make_array(tmp_path)
    meta = _load_meta(d)
    del meta[member]
    _save_meta(d, meta)
    open_fails(d)


def _set(path: tuple[Any, ...], value: Any):
    def edit(meta: dict[str, Any]) -> None:
        node = meta
        for p in path[:-1]:
            node = node[p]
        node[path[-1]] = value

    return edit


WRONG_TYPES = {
    "zarr_format_str": _set(("zarr_format",), "3"),
    "zarr_format_2": _set(("zarr_format",), 2),
    "node_type_bad": _set(("node_type",), "banana"),
    "node_type_group": _set(("node_type",), "group"),
    "shape_str": _set(("shape",), "64"),
    "shape_elem_str": _set(("shape",), [64, "32"]),
    "shape_negative": _set(("shape",), [-64, 32]),
    "shape_float": _set(("shape",), [64.5, 32]),
    "shape_bool": _set(("shape",), [True, 32]),
    "shape_rank_mismatch": _set(("shape",), [64, 32, 3]),
    "data_type_int": _set(("data_type",), 7),
    "data_type_unknown": _set(("data_type",), "uint17"),
    "chunk_grid_str": _set(("chunk_grid",), "regular"),
    "chunk_grid_unknown": _set(("chunk_grid", "name"), "irregular"),
    "chunk_shape_zero": _set(("chunk_grid", "configuration", "chunk_shape"), [0, 32]),
    "chunk_shape_str": _set(("chunk_grid", "configuration", "chunk_shape"), "32"),
    "chunk_shape_rank": _set(("chunk_grid", "configuration", "chunk_shape"), [32]),
    "cke_unknown": _set(("chunk_key_encoding",), {"name": "fancy"}),
    "cke_separator": _set(("chunk_key_encoding",), {"name": "default", "configuration": {"separator": "-"}}),
    "codecs_object": _set(("codecs",), {"name": "bytes"}),
    "codecs_empty": _set(("codecs",), []),
    "codecs_two_ab": _set(("codecs",), [BYTES_LE, BYTES_LE]),
    "codecs_bb_first": _set(("codecs",), [{"name": "crc32c"}, BYTES_LE]),
    "unknown_codec": _set(("codecs",), [{"name": "no_such_codec"}]),
    "unknown_codec_bare": _set(("codecs",), ["no_such_codec"]),
    "unknown_inner_codec": lambda m: _sharding(m).__setitem__("codecs", [BYTES_LE, {"name": "lzma9000"}]),
    "index_codecs_compressed": lambda m: _sharding(m).__setitem__(
        "index_codecs", [BYTES_LE, {"name": "zstd", "configuration": {"level": 1}}]),
    "index_location_bad": lambda m: _sharding(m).__setitem__("index_location", "middle"),
    "bytes_endian_bad": lambda m: _sharding(m).__setitem__(
        "codecs", [{"name": "bytes", "configuration": {"endian": "sideways"}}]),
    "bytes_endian_missing_uint16": lambda m: _sharding(m).__setitem__("codecs", [{"name": "bytes"}]),
    "zstd_level_str": lambda m: _sharding(m).__setitem__(
        "codecs", [BYTES_LE, {"name": "zstd", "configuration": {"level": "high"}}]),
    "dimension_names_len": _set(("dimension_names",), ["x"]),
    "dimension_names_int": _set(("dimension_names",), [1, 2]),
    "attributes_list": _set(("attributes",), [1, 2]),
    "storage_transformers_unknown": _set(("storage_transformers",), [{"name": "mystery"}]),
    "unknown_member": _set(("frobnicate",), {"x": 1}),
    "unknown_member_must_understand_true": _set(("frobnicate",), {"must_understand": True}),
    "unknown_member_scalar": _set(("frobnicate",), 3),
}


@pytest.mark.parametrize("case", sorted(WRONG_TYPES))
def test_metadata_invalid(tmp_path: Path, case: str) -> None:
    d = make_array(tmp_path)
    meta = _load_meta(d)
    WRONG_TYPES[case](meta)
    _save_meta(d, meta)
    open_fails(d)


def test_unknown_member_with_must_understand_false_opens(tmp_path: Path) -> None:
    d = make_array(tmp_path)
    meta = _load_meta(d)
    meta["frobnicate"] = {"must_understand": False, "anything": [1, 2]}
    _save_meta(d, meta)
    a = shardstore.zarr3.open(d, mode="r")
    np.testing.assert_array_equal(a[...], _data())


@pytest.mark.parametrize(
    "dtype,fill",
    [
        ("float32", "nan"),
        ("float32", "NAN"),
        ("float32", "inf"),
        ("float32", "+Infinity"),
        ("float32", "0x7fc0"),  # hex of the wrong width
        ("float32", "0xZZZZZZZZ"),
        ("float32", "1.5"),
        ("float32", None),
        ("float32", [1.0]),
        ("float32", True),
        ("float16", "0x3c00000"),
        ("uint8", 256),
        ("uint8", -1),
        ("int8", 1.5),
        ("int32", "1"),
        ("int32", 1e20),
        ("uint64", 18446744073709551616),
        ("int64", 9223372036854775808),
        ("bool", 0),
        ("bool", "true"),
        ("bool", None),
        ("complex64", 1.0),
        ("complex64", [1.0]),
        ("complex64", [1.0, 2.0, 3.0]),
        ("complex64", ["nan", 0.0]),
    ],
    ids=lambda v: repr(v),
)
def test_bad_fill_value_spelling(tmp_path: Path, dtype: str, fill: Any) -> None:
    path = tmp_path / "a"
    a = shardstore.zarr3.create(path, shape=(4,), dtype=dtype, chunks=(2,), fill_value=False if dtype == "bool" else 0)
    a[...] = np.ones(4, dtype=dtype)
    meta = _load_meta(path)
    meta["fill_value"] = fill
    _save_meta(path, meta)
    open_fails(path, MetadataError)


def test_inner_chunk_shape_not_dividing_shard_shape_on_open(tmp_path: Path) -> None:
    d = make_array(tmp_path)
    meta = _load_meta(d)
    _sharding(meta)["chunk_shape"] = [5, 16]
    _save_meta(d, meta)
    open_fails(d, MetadataError)


def test_inner_chunk_shape_rank_mismatch_on_open(tmp_path: Path) -> None:
    d = make_array(tmp_path)
    meta = _load_meta(d)
    _sharding(meta)["chunk_shape"] = [16]
    _save_meta(d, meta)
    open_fails(d, MetadataError)


def test_inner_chunk_shape_not_dividing_shard_shape_on_create(tmp_path: Path) -> None:
    with pytest.raises(ShardStoreError) as info:
        shardstore.zarr3.create(tmp_path / "a", shape=SHAPE, dtype=DTYPE, chunks=(5, 16), shards=SHARDS)
    assert "5" in str(info.value)
    assert not (tmp_path / "a" / "zarr.json").exists()


# == failed writes leave the old shards intact ==============================================
class _Boom(RuntimeError):
    pass


def _shard_files(d: Path) -> dict[str, bytes]:
    return {
        p.relative_to(d).as_posix(): p.read_bytes()
        for p in sorted(d.rglob("*"))
        if p.is_file() and p.name != "zarr.json"
    }


@pytest.mark.parametrize("codec", ["zstd", "blosc"])
@pytest.mark.parametrize("kind", ["whole_shards", "partial"])
def test_write_failing_midway_keeps_old_shards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, codec: str, kind: str
) -> None:
    """An encoder that fails after some chunks: every shard is left either exactly as it was or
    completely rewritten (never half-written or unreadable), and the shard whose encoding failed
    is left as it was. (shardstore streams shards, so shards finished before the failure may
    hold the new data: the promise is per shard, see ``core/io.py``.)"""
    from shardstore.codecs.registry import get_codec_class

    # 4 shards (2x2) of 4 inner chunks each
    shape, shards, chunks = (64, 64), (32, 32), (16, 16)
    d = tmp_path / "a"
    a = shardstore.zarr3.create(d, shape=shape, dtype=DTYPE, chunks=chunks, shards=shards, codecs=CODECS[codec])
    old = (np.arange(64 * 64, dtype=np.uint16) % 1000 + 1).reshape(shape)
    a[...] = old
    before = _shard_files(d)
    assert sorted(before) == ["c/0/0", "c/0/1", "c/1/0", "c/1/1"]

    cls = get_codec_class(codec)
    real_encode = cls.encode
    calls = {"n": 0}
    lock = threading.Lock()

    def failing_encode(self: Any, data: Any, spec: Any) -> Any:
        with lock:
            calls["n"] += 1
            n = calls["n"]
        if n > 5:  # let more than one shard's worth of chunks succeed first
            raise _Boom(f"injected failure at encode call {n}")
        return real_encode(self, data, spec)

    monkeypatch.setattr(cls, "encode", failing_encode)
    a = shardstore.zarr3.open(d, mode="r+")
    new = (old * 3 + 7).astype(np.uint16)
    sel = (slice(None), slice(None)) if kind == "whole_shards" else (slice(8, 56), slice(8, 56))
    expected_new = old.copy()
    expected_new[sel] = new[sel]
    with pytest.raises(Exception) as info:  # noqa: PT011 - any error, as long as it surfaces
        a[sel] = new[sel]
    assert calls["n"] > 5, f"the injected failure never happened ({info.value!r})"
    assert "injected failure" in str(info.value) or isinstance(info.value, _Boom)
    monkeypatch.undo()

    after = _shard_files(d)
    assert sorted(after) == sorted(before), "stray or missing files after a failed write"
    result = shardstore.zarr3.open(d, mode="r")[...]  # every shard must still be readable
    unchanged = []
    for key in before:
        i, j = (int(x) for x in key.split("/")[1:])
        region = (slice(32 * i, 32 * i + 32), slice(32 * j, 32 * j + 32))
        if after[key] == before[key]:
            unchanged.append(key)
            np.testing.assert_array_equal(result[region], old[region])
        else:
            np.testing.assert_array_equal(
                result[region], expected_new[region], err_msg=f"shard {key} half-written by a failed write"
            )
    assert unchanged, "every shard was rewritten although an encode failed"
