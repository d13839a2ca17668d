"""Bad precomputed input: clear shardstore errors naming the file, never a crash or hang."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import shardstore
from shardstore.errors import CodecError, MetadataError, ShardStoreError, UnsupportedFeatureError

pc = shardstore.precomputed

GOOD: dict[str, Any] = {
    "@type": "neuroglancer_multiscale_volume", "type": "image", "data_type": "uint8", "num_channels": 1,
    "scales": [{"key": "s0", "size": [10, 10, 10], "resolution": [1, 1, 1], "voxel_offset": [0, 0, 0],
                "chunk_sizes": [[5, 5, 5]], "encoding": "raw"}],
}


def _with(**changes: Any) -> dict[str, Any]:
    doc = json.loads(json.dumps(GOOD))
    for k, v in changes.items():
        if k.startswith("s_"):
            if v is None:
                doc["scales"][0].pop(k[2:])
            else:
                doc["scales"][0][k[2:]] = v
        elif v is None:
            doc.pop(k)
        else:
            doc[k] = v
    return doc


BAD_INFOS = [
    ("missing data_type", _with(data_type=None), "data_type"),
    ("missing scales", _with(scales=None), "scales"),
    ("empty scales", _with(scales=[]), "scales"),
    ("bad data_type", _with(data_type="complex64"), "data_type"),
    ("bad type", _with(type="mesh"), "type"),
    ("zero channels", _with(num_channels=0), "num_channels"),
    ("bool channels", _with(num_channels=True), "num_channels"),
    ("wrong @type", _with(**{"@type": "neuroglancer_skeletons"}), "@type"),
    ("missing size", _with(s_size=None), "size"),
    ("size of 2", _with(s_size=[1, 2]), "size"),
    ("negative size", _with(s_size=[1, -2, 3]), "size"),
    ("float size", _with(s_size=[1.5, 2, 3]), "size"),
    ("zero chunk", _with(s_chunk_sizes=[[0, 5, 5]]), "chunk_sizes"),
    ("no chunk", _with(s_chunk_sizes=[]), "chunk_sizes"),
    ("bad resolution", _with(s_resolution=[1, 0, 1]), "resolution"),
    ("bad offset", _with(s_voxel_offset=[0, 0.5, 0]), "voxel_offset"),
    ("bad encoding", _with(s_encoding="gif"), "encoding"),
    ("missing key", _with(s_key=None), "key"),
    ("cseg without block", _with(data_type="uint32", s_encoding="compressed_segmentation"), "block_size"),
    ("cseg on uint8", _with(s_encoding="compressed_segmentation", s_compressed_segmentation_block_size=[8, 8, 8]), "uint32"),
    ("jpeg on 2 channels", _with(num_channels=2, s_encoding="jpeg"), "jpeg"),
    ("png on float", _with(data_type="float32", s_encoding="png"), "png"),
    ("bad sharding", _with(s_sharding={"@type": "neuroglancer_uint64_sharded_v1", "hash": "md5"}), "sharding"),
    ("sharded two chunk sizes", _with(s_chunk_sizes=[[5, 5, 5], [2, 2, 2]], s_sharding={
        "@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0,
        "minishard_bits": 0, "shard_bits": 0}), "exactly one"),
    ("huge chunk", _with(s_chunk_sizes=[[1 << 20, 1 << 20, 1 << 20]]), "chunk"),
    ("duplicate keys", _with(scales=[GOOD["scales"][0], GOOD["scales"][0]]), "unique"),
]


@pytest.mark.parametrize(("name", "doc", "member"), BAD_INFOS, ids=[b[0] for b in BAD_INFOS])
def test_bad_info_is_a_metadata_error_naming_the_file_and_member(tmp_path: Path, name: str, doc: Any, member: str) -> None:
    (tmp_path / "info").write_text(json.dumps(doc))
    with pytest.raises(MetadataError) as e:
        pc.open(tmp_path)
    assert "info" in str(e.value) and member in str(e.value)


def test_info_not_json_or_not_an_object(tmp_path: Path) -> None:
    for text in ("{not json", "[1, 2]", "\xff\xfe"):
        (tmp_path / "info").write_bytes(text.encode("latin-1"))
        with pytest.raises(MetadataError, match="info"):
            pc.open(tmp_path)


def test_unsupported_encoding_is_refused_when_opened(tmp_path: Path) -> None:
    (tmp_path / "info").write_text(json.dumps(_with(s_encoding="compresso")))
    with pytest.raises(UnsupportedFeatureError, match="compresso"):
        pc.open(tmp_path)


def test_no_volume(tmp_path: Path) -> None:
    with pytest.raises(ShardStoreError, match="no precomputed volume"):
        pc.open(tmp_path)


def _raw_volume(tmp_path: Path, encoding: str = "raw", dtype: str = "uint8", **scale: Any) -> Any:
    a = pc.create(tmp_path, data_type=dtype, scales=[{"size": [10, 10, 10], "chunk_size": [5, 5, 5], "key": "s0",
                                                      "encoding": encoding, **scale}])
    a[...] = 1
    return a


@pytest.mark.parametrize("payload", [b"", b"\x01" * 124, b"\x01" * 126, b"\x01" * 10_000])
def test_raw_chunk_of_the_wrong_size_names_the_file(tmp_path: Path, payload: bytes) -> None:
    _raw_volume(tmp_path)
    (tmp_path / "s0" / "5-10_0-5_0-5").write_bytes(payload)
    a = pc.open(tmp_path)
    with pytest.raises(CodecError, match="5-10_0-5_0-5"):
        a[...]
    assert (a[0:5, 0:5, 0:5] == 1).all()  # the other chunks still read


def test_gzipped_chunk_file_bomb_or_garbage_names_the_file(tmp_path: Path) -> None:
    _raw_volume(tmp_path)
    chunk = tmp_path / "s0" / "5-10_0-5_0-5"
    chunk.unlink()
    gz = tmp_path / "s0" / "5-10_0-5_0-5.gz"
    for payload in (gzip.compress(b"\0" * (20 << 20)), b"\x1f\x8b garbage", gzip.compress(b"\x01" * 124)):
        gz.write_bytes(payload)
        for read in (lambda a: a[...], lambda a: a.oindex[[5, 6], :, :]):
            with pytest.raises(CodecError, match=r"5-10_0-5_0-5(\.gz)?"):
                read(pc.open(tmp_path))
    gz.write_bytes(gzip.compress(b"\x02" * 125))
    assert (pc.open(tmp_path)[5:10, 0:5, 0:5] == 2).all()


def test_edge_chunk_stored_at_full_size_is_refused(tmp_path: Path) -> None:
    pc.create(tmp_path, data_type="uint8", scales=[{"size": [7, 5, 5], "chunk_size": [5, 5, 5], "key": "s0"}])
    (tmp_path / "s0").mkdir()
    (tmp_path / "s0" / "5-7_0-5_0-5").write_bytes(b"\x02" * 125)  # not truncated at the edge
    with pytest.raises(CodecError, match="5-7_0-5_0-5"):
        pc.open(tmp_path)[...]


@pytest.mark.parametrize(("encoding", "dtype", "extra"), [
    ("jpeg", "uint8", {}), ("png", "uint8", {}), ("png", "uint16", {}),
    ("compressed_segmentation", "uint64", {"compressed_segmentation_block_size": [2, 3, 4]}),
])
def test_corrupt_encoded_chunks_name_the_file(tmp_path: Path, encoding: str, dtype: str, extra: dict) -> None:
    _raw_volume(tmp_path, encoding, dtype, **extra)
    path = tmp_path / "s0" / "0-5_5-10_0-5"
    good = path.read_bytes()
    for bad in (good[: len(good) // 2], good[:3], b"\xff" * 64):
        path.write_bytes(bad)
        with pytest.raises(CodecError, match="0-5_5-10_0-5"):
            pc.open(tmp_path)[...]
    # trailing bytes after a complete stream are ignored (as libjpeg / libpng / tensorstore do)
    path.write_bytes(good + b"\0" * 64)
    assert (pc.open(tmp_path)[...] == 1).all()


def test_chunk_image_with_another_size_is_refused(tmp_path: Path) -> None:
    _raw_volume(tmp_path, "png")
    other = tmp_path / "other"
    b = pc.create(other, data_type="uint8", scales=[{"size": [10, 10, 10], "chunk_size": [5, 5, 4], "key": "s0",
                                                     "encoding": "png"}])
    b[...] = 3
    (tmp_path / "s0" / "0-5_0-5_0-5").write_bytes((other / "s0" / "0-5_0-5_0-4").read_bytes())
    with pytest.raises(CodecError, match="cannot hold"):
        pc.open(tmp_path)[...]


def test_truncated_shard_names_the_shard_file(tmp_path: Path) -> None:
    sharding = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0,
                "minishard_bits": 1, "shard_bits": 0, "minishard_index_encoding": "gzip", "data_encoding": "gzip"}
    _raw_volume(tmp_path, sharding=sharding)
    shard = tmp_path / "s0" / "0.shard"
    data = shard.read_bytes()
    for cut in (8, 40, len(data) - 5):
        shard.write_bytes(data[:cut])
        with pytest.raises(CodecError, match="0.shard"):
            pc.open(tmp_path)[...]


_FUZZ = r"""
import sys, numpy as np
from shardstore.codecs.compressed_segmentation import CompressedSegmentationCodec
from shardstore.codecs.base import ChunkSpec
from shardstore.errors import CodecError
rng = np.random.default_rng(int(sys.argv[1]))
for dtype, shape, block in [("uint32", (20, 16, 8, 1), (8, 8, 8)), ("uint64", (9, 7, 5, 2), (4, 3, 2))]:
    spec = ChunkSpec(shape, np.dtype(dtype), 0)
    codec = CompressedSegmentationCodec(block)
    a = rng.integers(0, 40, shape).astype(dtype)
    enc = codec.encode(a, spec)
    for i in range(400):
        b = bytearray(enc)
        for _ in range(int(rng.integers(1, 4))):
            b[int(rng.integers(0, len(b)))] = int(rng.integers(0, 256))
        if i % 3 == 0:
            b = b[: int(rng.integers(0, len(b)))]
        try:
            out = codec.decode(bytes(b), spec)
            assert out.shape == shape
        except CodecError:
            pass
print("ok")
"""


def test_corrupt_compressed_segmentation_never_crashes() -> None:
    """The C++ decoder segfaults on corrupt offsets; our checks must stop every such input.
    Run in a child process so that a crash is a test failure, not a dead test run."""
    res = subprocess.run([sys.executable, "-c", _FUZZ, "7"], capture_output=True, text=True, timeout=240)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-2000:]


def test_huge_image_header_is_refused_without_allocating() -> None:
    from shardstore.codecs.base import ChunkSpec
    from shardstore.codecs.png import PngCodec

    import struct
    import zlib

    ihdr = struct.pack(">IIBBBBB", 60000, 60000, 8, 0, 0, 0, 0)
    png = (b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr
           + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr)))
    with pytest.raises(CodecError, match="cannot hold"):
        PngCodec().decode(png, ChunkSpec((8, 8, 8, 1), np.dtype("uint8"), 0))
