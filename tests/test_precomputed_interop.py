"""Interop both ways with tensorstore (``neuroglancer_precomputed``) and cloud-volume.

What they write, shardstore reads bit-exactly (JPEG: within a few units); what shardstore
writes, they read bit-exactly wherever they support the encoding. Known reader gaps:
cloud-volume decodes multi-channel JPEG and PNG chunks as planar (shared/fixtures/README.md),
cannot write uint16 PNG (pyspng) nor multi-channel compressed_segmentation. By default it gzips
the chunk files of unsharded scales under a ``.gz`` name, which shardstore reads (tensorstore
does not): the round trips use ``compress=False``, the ``.gz`` case has its own test.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import shardstore

ts = pytest.importorskip("tensorstore")
cloudvolume = pytest.importorskip("cloudvolume")
warnings.filterwarnings("ignore", module="cloudvolume")

pc = shardstore.precomputed
SIZE = [37, 29, 13]
OFFSET = [-3, 5, 7]

SHARDED = {
    "@type": "neuroglancer_uint64_sharded_v1", "hash": "murmurhash3_x86_128", "preshift_bits": 1,
    "minishard_bits": 2, "shard_bits": 2, "minishard_index_encoding": "gzip", "data_encoding": "gzip",
}
IDENTITY = {
    "@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0,
    "minishard_bits": 1, "shard_bits": 1, "minishard_index_encoding": "raw", "data_encoding": "raw",
}

# (id, data_type, channels, encoding, sharding, cloud-volume reads it, cloud-volume writes it)
CASES = [
    ("raw_u8", "uint8", 1, "raw", None, True, True),
    ("raw_u16_2ch", "uint16", 2, "raw", None, True, True),
    ("raw_f32", "float32", 1, "raw", None, True, True),
    ("raw_i16", "int16", 1, "raw", None, True, True),
    ("raw_u64_sharded_murmur", "uint64", 1, "raw", SHARDED, True, False),
    ("raw_u8_sharded_identity", "uint8", 3, "raw", IDENTITY, True, False),
    ("cseg_u32", "uint32", 1, "compressed_segmentation", None, True, True),
    ("cseg_u64_2ch", "uint64", 2, "compressed_segmentation", None, True, False),
    ("cseg_u64_sharded", "uint64", 1, "compressed_segmentation", SHARDED, True, False),
    ("jpeg_1ch", "uint8", 1, "jpeg", None, True, True),
    ("jpeg_3ch", "uint8", 3, "jpeg", IDENTITY, False, False),
    ("png_u8", "uint8", 1, "png", None, True, True),
    ("png_u8_3ch", "uint8", 3, "png", None, False, True),
    ("png_u16", "uint16", 1, "png", None, False, False),
    ("png_u16_4ch", "uint16", 4, "png", None, False, False),
]
IDS = [c[0] for c in CASES]


def _data(dtype: str, nc: int, encoding: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    shape = (*SIZE, nc)
    if encoding == "jpeg":  # smooth, so that JPEG stays within a few units
        x, y, z = np.meshgrid(*(np.arange(s) for s in SIZE), indexing="ij")
        base = x * 2 + y * 3 + z * 4 + 20
        return np.stack([base + 10 * c for c in range(nc)], axis=-1).astype(np.uint8)
    if encoding == "compressed_segmentation":
        labels = rng.integers(0, 2**63, 12, dtype=np.uint64) | np.uint64(2**63 if dtype == "uint64" else 0)
        out = labels[rng.integers(0, 12, shape)].astype(dtype) if dtype == "uint64" else rng.integers(0, 9, shape).astype(dtype)
        out[:16, :16, :8] = 0  # an all-zero chunk (not stored)
        return out
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    out = rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    out[:16, :16, :8] = 0
    return out


def _scale(encoding: str, sharding: dict | None) -> dict[str, Any]:
    scale: dict[str, Any] = {"size": SIZE, "chunk_size": [16, 16, 8], "voxel_offset": OFFSET,
                             "resolution": [4, 4, 40], "encoding": encoding}
    if encoding == "compressed_segmentation":
        scale["compressed_segmentation_block_size"] = [8, 4, 4]
    if sharding is not None:
        scale["sharding"] = sharding
    return scale


def _tol(encoding: str) -> int:
    return 10 if encoding == "jpeg" else 0


def _close(got: np.ndarray, want: np.ndarray, encoding: str) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    if encoding == "jpeg":
        assert int(np.abs(got.astype(int) - want.astype(int)).max()) <= _tol(encoding)
    else:
        np.testing.assert_array_equal(got, want)


def _ts_open(path: Path, **kw: Any) -> Any:
    return ts.open({"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file", "path": str(path)}, **kw}).result()


def _cv(path: Path, **kw: Any) -> Any:
    return cloudvolume.CloudVolume(f"file://{path}", progress=False, fill_missing=True, **kw)


@pytest.mark.parametrize(("name", "dtype", "nc", "enc", "sharding", "cv_reads", "cv_writes"), CASES, ids=IDS)
def test_shardstore_writes_tensorstore_and_cloudvolume_read(
    tmp_path: Path, name: str, dtype: str, nc: int, enc: str, sharding: dict | None, cv_reads: bool, cv_writes: bool
) -> None:
    data = _data(dtype, nc, enc)
    a = pc.create(tmp_path, data_type=dtype, num_channels=nc, scales=[_scale(enc, sharding)],
                  type="segmentation" if enc == "compressed_segmentation" else "image", jpeg_quality=95)
    a[...] = data
    t = _ts_open(tmp_path)
    assert list(t.domain.inclusive_min) == [*OFFSET, 0]
    _close(np.asarray(t.read().result()), data, enc)
    if cv_reads:
        _close(np.asarray(_cv(tmp_path)[:, :, :]), data, enc)
    _close(np.asarray(pc.open(tmp_path)), data, enc)  # shardstore decodes what it wrote the same


@pytest.mark.parametrize(("name", "dtype", "nc", "enc", "sharding", "cv_reads", "cv_writes"), CASES, ids=IDS)
def test_tensorstore_writes_shardstore_reads(
    tmp_path: Path, name: str, dtype: str, nc: int, enc: str, sharding: dict | None, cv_reads: bool, cv_writes: bool
) -> None:
    data = _data(dtype, nc, enc, seed=1)
    scale = _scale(enc, sharding)
    scale["chunk_size"] = scale["chunk_size"]
    t = _ts_open(tmp_path, create=True, multiscale_metadata={"type": "image", "data_type": dtype, "num_channels": nc},
                 scale_metadata=scale)
    t.translate_to[0].write(data).result()
    expected = np.asarray(t.read().result())  # what tensorstore decodes (JPEG: lossy)
    _close(expected, data, enc)
    got = np.asarray(pc.open(tmp_path))
    if enc == "jpeg":  # the same libjpeg-turbo decode: bit-exact in practice, a unit or two allowed
        assert int(np.abs(got.astype(int) - expected.astype(int)).max()) <= 2
    else:
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(("name", "dtype", "nc", "enc", "sharding", "cv_reads", "cv_writes"),
                         [c for c in CASES if c[6]], ids=[c[0] for c in CASES if c[6]])
def test_cloudvolume_writes_shardstore_reads(
    tmp_path: Path, name: str, dtype: str, nc: int, enc: str, sharding: dict | None, cv_reads: bool, cv_writes: bool
) -> None:
    data = _data(dtype, nc, enc, seed=2)
    scale = _scale(enc, None)
    scale["chunk_sizes"] = [scale.pop("chunk_size")]
    scale["key"] = "4_4_40"
    info = {"type": "image", "data_type": dtype, "num_channels": nc, "scales": [scale]}
    cv = _cv(tmp_path, info=info, compress=False)
    cv.commit_info()
    cv[:, :, :] = data
    # the reference decoding is tensorstore's (cloud-volume reads multi-channel PNG planar)
    expected = np.asarray(_ts_open(tmp_path).read().result())
    _close(expected, data, enc)
    got = np.asarray(pc.open(tmp_path))
    if enc == "jpeg":
        assert int(np.abs(got.astype(int) - expected.astype(int)).max()) <= 2
    else:
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(("dtype", "nc", "enc"), [("uint8", 1, "raw"), ("uint16", 2, "raw"),
                                                  ("uint32", 1, "compressed_segmentation")])
def test_cloudvolume_gzipped_chunk_files(tmp_path: Path, dtype: str, nc: int, enc: str) -> None:
    """cloud-volume's default ``compress=True`` writes ``<chunk>.gz`` files: shardstore reads
    them, merges partial writes into them (writing plain files that shadow the ``.gz``) and
    deletes both when a chunk becomes all zero."""
    data = _data(dtype, nc, enc, seed=5)
    scale = _scale(enc, None)
    scale["chunk_sizes"] = [scale.pop("chunk_size")]
    scale["key"] = "4_4_40"
    cv = _cv(tmp_path, info={"type": "image", "data_type": dtype, "num_channels": nc, "scales": [scale]})
    cv.commit_info()
    cv[:, :, :] = data
    names = sorted(p.name for p in (tmp_path / "4_4_40").iterdir())
    assert names and all(n.endswith(".gz") for n in names)
    a = pc.open(tmp_path, mode="r+")
    np.testing.assert_array_equal(a[...], data)
    np.testing.assert_array_equal(a[5:30, 3:20, 2:11], data[5:30, 3:20, 2:11])
    a[3:9, 2:20, 1:4] = 7  # partial chunks: merged with what the .gz files hold
    data[3:9, 2:20, 1:4] = 7
    first = tmp_path / "4_4_40" / "-3-13_5-21_7-15"  # the chunk at the origin
    assert first.exists() and (tmp_path / "4_4_40" / "-3-13_5-21_7-15.gz").exists()
    a[0:16, 0:16, 0:8] = 0  # ... becomes all zero: both of its files go
    data[0:16, 0:16, 0:8] = 0
    assert not first.exists() and not (tmp_path / "4_4_40" / "-3-13_5-21_7-15.gz").exists()
    np.testing.assert_array_equal(pc.open(tmp_path)[...], data)
    # a corrupt .gz is a CodecError naming the file
    victim = next(p for p in (tmp_path / "4_4_40").iterdir() if p.name.endswith(".gz")
                  and not (tmp_path / "4_4_40" / p.name[:-3]).exists())
    victim.write_bytes(victim.read_bytes()[:20])
    with pytest.raises(shardstore.errors.CodecError, match=re.escape(victim.name)):
        np.asarray(pc.open(tmp_path))


def test_cloudvolume_writes_whole_shards_shardstore_reads_and_merges(tmp_path: Path) -> None:
    """cloud-volume writes a sharded scale whole; shardstore reads it and merges a partial
    write into it (where cloud-volume itself would replace the shard), and both still agree."""
    data = _data("uint32", 1, "raw", seed=3)
    scale = _scale("raw", {**IDENTITY, "shard_bits": 0, "minishard_bits": 2})  # one shard: 0.shard
    scale["chunk_sizes"] = [scale.pop("chunk_size")]
    scale["key"] = "4_4_40"
    cv = _cv(tmp_path, info={"type": "segmentation", "data_type": "uint32", "num_channels": 1, "scales": [scale]},
             compress=False)
    cv.commit_info()
    try:
        cv[:, :, :] = data
    except Exception as e:  # cloud-volume writes only regions that map to a single shard
        pytest.skip(f"cloud-volume cannot write this sharded layout: {e}")
    a = pc.open(tmp_path, mode="r+")
    np.testing.assert_array_equal(a[...], data)
    a[3:9, 2:20, 1:4] = 77
    data[3:9, 2:20, 1:4] = 77
    np.testing.assert_array_equal(np.asarray(_cv(tmp_path)[:, :, :]), data)
    np.testing.assert_array_equal(np.asarray(_ts_open(tmp_path).read().result()), data)


def test_partial_writes_by_shardstore_read_by_tensorstore(tmp_path: Path) -> None:
    """Several partial writes into a sharded volume; tensorstore sees exactly the NumPy result."""
    a = pc.create(tmp_path, data_type="uint16", scales=[_scale("raw", SHARDED)])
    oracle = np.zeros(a.shape, np.uint16)
    rng = np.random.default_rng(4)
    for _ in range(6):
        lo = [int(rng.integers(0, s)) for s in SIZE]
        box = tuple(slice(l, int(rng.integers(l + 1, s + 1))) for l, s in zip(lo, SIZE))
        v = rng.integers(1, 1000, tuple(s.stop - s.start for s in box) + (1,), dtype=np.uint16)
        a[box] = v
        oracle[box] = v
    np.testing.assert_array_equal(np.asarray(_ts_open(tmp_path).read().result()), oracle)
