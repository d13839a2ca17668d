"""Zarr v3 interop with the anchor libraries, both ways, bit-exactly.

(a) tensorstore / zarr-python write, shardstore reads.
(b) shardstore writes (and partially overwrites), tensorstore / zarr-python read.

The case table is not a cartesian product: every core dtype appears at least once per
anchor library, and every structural option (sharded / unsharded, index at start / end,
with / without crc32c, big-endian index, nested sharding, transpose outside and inside a
shard, big-endian bytes, gzip / zstd / blosc variants, edge shards, absent inner chunks and
shards, special fill values, every chunk key encoding, rank 0 and 1-D) at least once.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from _helpers import (
    ArraySpec, CORE_DTYPES, assert_bitexact, blosc_codec, bytes_codec, crc32c_codec,
    fill_array, fill_from_json, gzip_codec, normalize_codecs, random_array,
    sample_selections, sharding_codec, spec_data, transpose_codec, ts_labels, ts_read,
    ts_write, ts_write_region, write_with, zarr_read, zarr_write, zstd_codec,
)

ts = pytest.importorskip("tensorstore")
zarr = pytest.importorskip("zarr")
shardstore = pytest.importorskip("shardstore")

NAN, INF = float("nan"), float("inf")
L, BE, B1 = bytes_codec("little"), bytes_codec("big"), bytes_codec(None)
IDX, IDX_NOCRC = [L, crc32c_codec()], [L]
IDX_BE, IDX_BE_NOCRC = [BE, crc32c_codec()], [BE]
S2, SH2, IN2 = (37, 45), (16, 20), (4, 5)          # 3x3 shards, edges on both axes
S3, SH3, IN3 = (9, 14, 11), (4, 8, 6), (2, 4, 3)
V2_DOT = {"name": "v2", "configuration": {"separator": "."}}
V2_SLASH = {"name": "v2", "configuration": {"separator": "/"}}
DEFAULT_DOT = {"name": "default", "configuration": {"separator": "."}}


def sh(inner, codecs, index_codecs=IDX, loc="end"):
    return sharding_codec(inner, codecs, index_codecs, loc)


def _spec(library, name, dtype, shape, grid, codecs, fill, seed, **kw) -> ArraySpec:
    return ArraySpec(id=f"{library}-{dtype}-{name}", dtype=dtype, shape=shape,
                     chunk_shape=grid, codecs=codecs, fill_value=fill, seed=seed,
                     extra={"library": library}, **kw)


TS_CASES = [
    _spec("tensorstore", "shard_end_crc_zstd", "bool", S2, SH2,
          [sh(IN2, [B1, zstd_codec(3)])], False, 1),
    _spec("tensorstore", "unsharded_gzip_v2dot", "int8", S2, (8, 10),
          [B1, gzip_codec(6)], -128, 2, chunk_key_encoding=V2_DOT),
    _spec("tensorstore", "shard_start_nocrc_blosc_lz4", "int16", S2, SH2,
          [sh(IN2, [L, blosc_codec("lz4", 2, "shuffle")], IDX_NOCRC, "start")], 7, 3),
    _spec("tensorstore", "transpose_bigendian_zstd_3d", "int32", S3, (4, 5, 6),
          [transpose_codec([2, 0, 1]), BE, zstd_codec(5)], -7, 4),
    _spec("tensorstore", "nested_sharding", "int64", S2, SH2,
          [sh((8, 10), [sh(IN2, [L, gzip_codec(4)])], IDX, "start")], -2**63, 5),
    _spec("tensorstore", "shard_blosc_zlib_bitshuffle", "uint8", S2, SH2,
          [sh(IN2, [B1, blosc_codec("zlib", 1, "bitshuffle")])], 255, 6),
    _spec("tensorstore", "shard_bigendian_index_start_3d", "uint16", S3, SH3,
          [sh(IN3, [L, gzip_codec(1)], IDX_BE, "start")], 0, 7),
    _spec("tensorstore", "unsharded_1d_default_dot", "uint32", (103,), (10,),
          [L, gzip_codec(9)], 42, 8, chunk_key_encoding=DEFAULT_DOT),
    _spec("tensorstore", "shard_zstd_checksum_fillmax", "uint64", S2, SH2,
          [sh(IN2, [L, zstd_codec(1, checksum=True)])], 2**64 - 1, 9),
    _spec("tensorstore", "unsharded_bytes_only_nan_3d", "float16", S3, (3, 5, 4),
          [L], NAN, 10),
    _spec("tensorstore", "shard_inner_transpose_nocrc_inf", "float32", S2, SH2,
          [sh(IN2, [transpose_codec([1, 0]), L, gzip_codec(5)], IDX_NOCRC)], INF, 11,
          dimension_names=["y", "x"], attributes={"units": "m", "nested": {"a": [1, 2]}}),
    _spec("tensorstore", "shard_start_blosc_zstd_nan", "float64", S2, SH2,
          [sh((8, 10), [L, blosc_codec("zstd", 8, "shuffle")], IDX, "start")], NAN, 12),
    _spec("tensorstore", "shard_bigendian_everything", "complex64", S2, SH2,
          [sh(IN2, [BE, zstd_codec(3)], IDX_BE_NOCRC)], complex(NAN, 2.5), 13),
    _spec("tensorstore", "unsharded_blosc_lz4hc_v2slash", "complex128", S2, (8, 10),
          [L, blosc_codec("lz4hc", 16, "noshuffle")], complex(0.0, -INF), 14,
          chunk_key_encoding=V2_SLASH),
    _spec("tensorstore", "rank0", "float64", (), (), [L, gzip_codec(1)], 0.5, 15),
    # transpose *before* sharding_indexed: not expressible through create(); zarr-python
    # cannot read it either (it checks inner/outer divisibility before the transpose).
    _spec("tensorstore", "transpose_then_sharding", "int16", S2, SH2,
          [transpose_codec([1, 0]), sh((5, 4), [L, zstd_codec(2)])], -1, 16),
]

ZARR_CASES = [
    _spec("zarr", "unsharded_gzip0_v2slash", "bool", S2, (8, 10),
          [B1, gzip_codec(0)], True, 21, chunk_key_encoding=V2_SLASH),
    _spec("zarr", "shard_start_blosc_lz4hc_bitshuffle", "int8", S2, SH2,
          [sh(IN2, [B1, blosc_codec("lz4hc", 1, "bitshuffle")], IDX, "start")], -1, 22,
          dimension_names=["row", None], attributes={"title": "t", "n": 3}),
    _spec("zarr", "transpose_bigendian_blosc_zstd_3d", "int16", S3, (3, 5, 4),
          [transpose_codec([1, 2, 0]), BE, blosc_codec("zstd", 2, "shuffle")], -2**15, 23),
    _spec("zarr", "shard_end_nocrc_zstd0", "int32", S2, SH2,
          [sh(IN2, [L, zstd_codec(0)], IDX_NOCRC)], 0, 24),
    _spec("zarr", "shard_start_gzip_3d", "int64", S3, SH3,
          [sh(IN3, [L, gzip_codec(6)], IDX, "start")], 2**63 - 1, 25),
    _spec("zarr", "nested_sharding", "uint8", S2, SH2,
          [sh((8, 10), [sh(IN2, [B1, zstd_codec(2)], IDX_NOCRC, "start")])], 3, 26),
    _spec("zarr", "shard_1d_zstd_checksum", "uint16", (103,), (30,),
          [sh((10,), [L, zstd_codec(3, checksum=True)])], 1, 27),
    _spec("zarr", "shard_inner_transpose_bigendian", "uint32", S2, SH2,
          [sh(IN2, [transpose_codec([1, 0]), BE, gzip_codec(3)], IDX_BE)], 0, 28),
    _spec("zarr", "unsharded_bigendian_blosclz_default_dot", "uint64", S2, (8, 10),
          [BE, blosc_codec("blosclz", 8, "noshuffle")], 2**64 - 1, 29,
          chunk_key_encoding=DEFAULT_DOT),
    _spec("zarr", "shard_end_zstd_fill1", "float16", S2, SH2,
          [sh(IN2, [L, zstd_codec(3)])], 1.0, 30),
    _spec("zarr", "unsharded_gzip_nan_v2dot", "float32", S2, (8, 10),
          [L, gzip_codec(5)], NAN, 31, chunk_key_encoding=V2_DOT),
    _spec("zarr", "shard_start_bigendian_index_nocrc", "float64", S2, SH2,
          [sh(IN2, [BE, zstd_codec(5)], IDX_BE_NOCRC, "start")], -INF, 32),
    _spec("zarr", "unsharded_bigendian_nan_nan_3d", "complex64", S3, IN3,
          [BE], complex(NAN, NAN), 33),
    _spec("zarr", "shard_inner_transpose_blosc_lz4", "complex128", S2, SH2,
          [sh(IN2, [transpose_codec([1, 0]), L, blosc_codec("lz4", 16, "shuffle")])],
          complex(1.5, NAN), 34),
    _spec("zarr", "rank0", "int16", (), (), [L], 3, 35),
]

ALL_CASES = TS_CASES + ZARR_CASES
SHARDSTORE_CASES = [s for s in ALL_CASES if s.shardstore_expressible()]


def _params(specs):
    return [pytest.param(s, id=s.id) for s in specs]


def test_matrix_coverage():
    """Every core dtype is written by each anchor library at least once."""
    for library, cases in (("tensorstore", TS_CASES), ("zarr", ZARR_CASES)):
        assert set(CORE_DTYPES) <= {c.dtype for c in cases}, library


def _check_metadata_facts(a, spec: ArraySpec) -> None:
    assert tuple(a.shape) == tuple(spec.shape)
    assert a.dtype.newbyteorder("=") == np.dtype(spec.dtype)
    assert_bitexact(np.asarray(a.fill_value, dtype=spec.dtype),
                    fill_array(spec.dtype, spec.fill_value), "fill_value")
    if spec.dimension_names is not None:
        assert list(a.dimension_names) == list(spec.dimension_names)
    if spec.attributes is not None:
        assert dict(a.attrs) == spec.attributes


# --------------------------------------------------------------------------- (a) anchors write

@pytest.mark.parametrize("spec", _params(ALL_CASES))
def test_anchor_writes_shardstore_reads(tmp_path: Path, spec: ArraySpec):
    path = tmp_path / "arr"
    data = spec_data(spec)
    write_with(spec.extra["library"], path, spec, data)
    a = shardstore.open(str(path), mode="r")
    _check_metadata_facts(a, spec)
    assert_bitexact(np.asarray(a), data, "full read")
    for sel in sample_selections(spec.shape)[:3]:
        assert_bitexact(a[sel], data[sel], f"a[{sel!r}]")


# --------------------------------------------------------------------------- (b) shardstore writes

def _create(path: Path, spec: ArraySpec, mode: str = "w-"):
    kwargs = spec.shardstore_kwargs()
    kwargs["mode"] = mode
    return shardstore.zarr3.create(str(path), **kwargs)


def _assert_anchors_read(path: Path, expected: np.ndarray, what: str) -> None:
    assert_bitexact(ts_read(path), expected, f"tensorstore reads {what}")
    assert_bitexact(zarr_read(path), expected, f"zarr-python reads {what}")


def _assert_written_metadata(path: Path, spec: ArraySpec) -> None:
    md = json.loads((path / "zarr.json").read_text())
    assert md["zarr_format"] == 3 and md["node_type"] == "array"
    assert md["shape"] == list(spec.shape)
    assert md["data_type"] == spec.dtype
    assert md["chunk_grid"]["configuration"]["chunk_shape"] == list(spec.chunk_shape)
    itemsize = np.dtype(spec.dtype).itemsize
    assert normalize_codecs(md["codecs"], itemsize) == normalize_codecs(spec.codecs, itemsize)
    cke = md["chunk_key_encoding"]
    default_sep = "/" if cke["name"] == "default" else "."
    assert (cke["name"], (cke.get("configuration") or {}).get("separator", default_sep)) == (
        spec.cke["name"], spec.cke["configuration"]["separator"])
    assert_bitexact(fill_from_json(spec.dtype, md["fill_value"]),
                    fill_array(spec.dtype, spec.fill_value), "fill_value in zarr.json")


@pytest.mark.parametrize("spec", _params(SHARDSTORE_CASES))
def test_shardstore_writes_anchors_read(tmp_path: Path, spec: ArraySpec):
    path = tmp_path / "arr"
    data = spec_data(spec)
    a = _create(path, spec)
    a[...] = data
    _assert_written_metadata(path, spec)
    _assert_anchors_read(path, data, "shardstore-written array")
    assert_bitexact(np.asarray(shardstore.open(str(path), mode="r")), data, "shardstore re-read")
    if spec.dimension_names is not None:
        zd = zarr.open_array(str(path), mode="r").metadata.dimension_names
        assert list(zd) == list(spec.dimension_names)
    if spec.attributes is not None:
        assert zarr.open_array(str(path), mode="r").attrs.asdict() == spec.attributes


def _overwrite_steps(spec: ArraySpec) -> list:
    """(selection, values) pairs: strided region across shard borders, one aligned outer
    chunk, a fill-valued region (-> deletions), one element, a negative-step region."""
    shape, grid = spec.shape, spec.chunk_shape
    fill = fill_array(spec.dtype, spec.fill_value)
    steps = []
    strided = tuple(slice(1, s - 1, 2) for s in shape)
    aligned = tuple(slice(0, min(g, s)) for g, s in zip(grid, shape))
    fill_region = tuple(slice(g - 1, min(s, 2 * g + 1)) for g, s in zip(grid, shape))
    backwards = tuple(slice(s - 1, s // 3, -3) for s in shape)
    for i, sel in enumerate([strided, aligned, backwards]):
        target = np.empty(shape, dtype=spec.dtype)[sel].shape
        steps.append((sel, random_array(target, spec.dtype, seed=1000 + spec.seed + i)))
    steps.insert(2, (fill_region, np.full(np.empty(shape, bool)[fill_region].shape, fill)))
    steps.append((tuple(s // 2 for s in shape), random_array((), spec.dtype, seed=7)))
    return steps


OVERWRITE_IDS = {
    "tensorstore-bool-shard_end_crc_zstd", "tensorstore-int64-nested_sharding",
    "tensorstore-int32-transpose_bigendian_zstd_3d", "zarr-int64-shard_start_gzip_3d",
    "tensorstore-float64-shard_start_blosc_zstd_nan", "zarr-uint16-shard_1d_zstd_checksum",
    "zarr-uint32-shard_inner_transpose_bigendian", "zarr-complex128-shard_inner_transpose_blosc_lz4",
}
OVERWRITE_CASES = [s for s in SHARDSTORE_CASES if s.id in OVERWRITE_IDS]


@pytest.mark.parametrize("spec", _params(OVERWRITE_CASES))
def test_shardstore_partial_overwrites_anchors_read(tmp_path: Path, spec: ArraySpec):
    path = tmp_path / "arr"
    oracle = spec_data(spec)
    a = _create(path, spec)
    a[...] = oracle
    for i, (sel, values) in enumerate(_overwrite_steps(spec)):
        a[sel] = values
        oracle[sel] = values
        _assert_anchors_read(path, oracle, f"after overwrite #{i} {sel!r}")
    assert_bitexact(np.asarray(a), oracle, "same shardstore handle")


@pytest.mark.parametrize("spec", _params([
    next(s for s in TS_CASES if s.id == "tensorstore-uint64-shard_zstd_checksum_fillmax"),
    next(s for s in ZARR_CASES if s.id == "zarr-int8-shard_start_blosc_lz4hc_bitshuffle"),
    next(s for s in ZARR_CASES if s.id == "zarr-uint8-nested_sharding"),
    next(s for s in TS_CASES if s.id == "tensorstore-int16-transpose_then_sharding"),
]))
def test_shardstore_overwrites_anchor_written_array(tmp_path: Path, spec: ArraySpec):
    """An existing array written by an anchor, partially overwritten by shardstore."""
    path = tmp_path / "arr"
    oracle = spec_data(spec)
    write_with(spec.extra["library"], path, spec, oracle)
    a = shardstore.open(str(path), mode="r+")
    for sel, values in _overwrite_steps(spec):
        a[sel] = values
        oracle[sel] = values
    assert_bitexact(ts_read(path), oracle, "tensorstore")
    if spec.id != "tensorstore-int16-transpose_then_sharding":  # zarr-python can't open it
        assert_bitexact(zarr_read(path), oracle, "zarr-python")


TS_MODIFY_CASES = [s for s in SHARDSTORE_CASES if s.id in {
    "tensorstore-int64-nested_sharding", "zarr-float64-shard_start_bigendian_index_nocrc",
    "tensorstore-int8-unsharded_gzip_v2dot"}]


@pytest.mark.parametrize("spec", _params(TS_MODIFY_CASES))
def test_shardstore_writes_tensorstore_modifies_shardstore_reads(tmp_path, spec):
    path = tmp_path / "arr"
    oracle = spec_data(spec)
    a = _create(path, spec)
    a[...] = oracle
    region = (slice(5, 30), slice(3, 44, 2))
    patch = random_array(oracle[region].shape, spec.dtype, seed=99)
    ts_write_region(path, region, patch)
    oracle[region] = patch
    fill = fill_array(spec.dtype, spec.fill_value)
    ts_write_region(path, (slice(16, 32), slice(0, 20)), np.full((16, 20), fill))
    oracle[16:32, 0:20] = fill
    assert_bitexact(np.asarray(shardstore.open(str(path), mode="r")), oracle, "fresh open")


def test_same_handle_sees_external_modification(tmp_path):
    """A handle opened before tensorstore rewrote a shard must not serve a stale index.

    Uncompressed inner chunks: tensorstore drops inner chunk 0 (now fill), so every other
    inner chunk moves; stale offsets would then decode to wrong data without any error.
    """
    spec = ArraySpec("stale", "int16", (16, 20), (16, 20), [sh(IN2, [L])], 0, seed=50)
    path = tmp_path / "arr"
    oracle = random_array(spec.shape, spec.dtype, spec.seed)
    oracle[oracle == 0] = 1
    a = _create(path, spec)
    a[...] = oracle
    assert_bitexact(a[0:8, 0:10], oracle[0:8, 0:10], "warm the index cache")
    ts_write_region(path, (slice(0, 4), slice(0, 5)), np.zeros((4, 5), np.int16))
    oracle[0:4, 0:5] = 0
    assert_bitexact(np.asarray(shardstore.open(str(path), mode="r")), oracle, "fresh handle")
    assert_bitexact(a[...], oracle, "same handle after tensorstore rewrote shard c/0/0")


# --------------------------------------------------------------------------- (b) details

def test_all_fill_shard_not_stored(tmp_path):
    """Writers omit shards whose inner chunks are all fill; overwriting with fill deletes."""
    spec = next(s for s in SHARDSTORE_CASES if s.id == "zarr-int32-shard_end_nocrc_zstd0")
    path = tmp_path / "arr"
    a = _create(path, spec)
    data = spec_data(spec)  # outer chunk (1, 1) is all fill
    a[...] = data
    assert not (path / "c" / "1" / "1").exists(), "all-fill shard c/1/1 was stored"
    shard = (path / "c" / "0" / "0").read_bytes()
    index = np.frombuffer(shard[-16 * 16:], "<u8").reshape(4, 4, 2)  # [bytes] index at end
    assert (index[0, 0] == 2**64 - 1).all(), f"all-fill inner chunk 0 stored: {index[0, 0]}"
    assert (index[1:, 1:, 0] < len(shard)).all()
    a[0:16, 0:20] = 0
    data[0:16, 0:20] = 0
    assert not (path / "c" / "0" / "0").exists(), "shard c/0/0 overwritten with fill remains"
    _assert_anchors_read(path, data, "after fill overwrite")


def test_negative_zero_chunk_is_not_fill(tmp_path):
    """-0.0 differs from fill 0.0 bitwise: the chunk must be stored, not dropped."""
    spec = ArraySpec("negzero", "float32", (8, 8), (8, 8), [sh((4, 4), [L])], 0.0)
    path = tmp_path / "arr"
    data = np.ones((8, 8), np.float32)
    data[:4, :4] = -0.0
    a = _create(path, spec)
    a[...] = data
    _assert_anchors_read(path, data, "-0.0 inner chunk")


def test_attributes_and_dimension_names_seen_by_anchors(tmp_path):
    path = tmp_path / "arr"
    a = shardstore.zarr3.create(
        str(path), shape=S3, dtype="float32", chunks=IN3, shards=SH3,
        dimension_names=["z", None, "x"], attributes={"a": 1, "b": {"c": [1.5, "x"]}},
        fill_value=NAN)
    a.attrs["added"] = "later"
    za = zarr.open_array(str(path), mode="r")
    assert list(za.metadata.dimension_names) == ["z", None, "x"]
    assert za.attrs.asdict() == {"a": 1, "b": {"c": [1.5, "x"]}, "added": "later"}
    assert ts_labels(path) == ("z", "", "x")
    assert np.isnan(za.fill_value)


def test_groups_created_by_shardstore_listed_by_zarr(tmp_path):
    root = tmp_path / "root"
    g = shardstore.zarr3.create_group(str(root), attributes={"title": "root"})
    sub = g.create_group("sub")
    data = random_array(S2, "uint16", seed=41)
    sub.create_array("arr", shape=S2, dtype="uint16", chunks=IN2, shards=SH2)[...] = data
    top = random_array((7, 5), "complex128", seed=42)
    g.create_array("cplx", shape=(7, 5), dtype="complex128", chunks=(3, 5),
                   attributes={"units": "V"})[...] = top

    zg = zarr.open_group(str(root), mode="r")
    assert sorted(k for k, _ in zg.members()) == ["cplx", "sub"]
    assert sorted(zg.group_keys()) == ["sub"]
    assert sorted(zg.array_keys()) == ["cplx"]
    assert zg.attrs.asdict() == {"title": "root"}
    assert sorted(zg["sub"].array_keys()) == ["arr"]
    assert_bitexact(zg["sub/arr"][...], data, "zarr-python group member sub/arr")
    assert_bitexact(zg["cplx"][...], top, "zarr-python group member cplx")
    assert zg["cplx"].attrs.asdict() == {"units": "V"}
    assert_bitexact(ts_read(root / "sub" / "arr"), data, "tensorstore sub/arr")
    assert sorted(shardstore.zarr3.open_group(str(root), mode="r").keys()) == ["cplx", "sub"]


def test_zarr_written_group_read_by_shardstore(tmp_path):
    root = tmp_path / "root"
    zg = zarr.create_group(str(root), attributes={"k": [1, 2]})
    zsub = zg.create_group("inner", attributes={"deep": True})
    data = random_array((11, 13), "float32", seed=43)
    zsub.create_array("x", shape=(11, 13), dtype="float32", chunks=(4, 4),
                      shards=(8, 8), fill_value=NAN)[...] = data
    g = shardstore.zarr3.open_group(str(root), mode="r")
    assert sorted(g.keys()) == ["inner"]
    assert dict(g.attrs) == {"k": [1, 2]}
    assert dict(g["inner"].attrs) == {"deep": True}
    assert_bitexact(np.asarray(g["inner"]["x"]), data, "shardstore group member inner/x")


def test_every_dtype_small_roundtrip_all_directions(tmp_path):
    """Each dtype on one small sharded shape: shardstore -> anchors and anchors -> shardstore."""
    for i, dtype in enumerate(CORE_DTYPES):
        spec = ArraySpec(f"rt-{dtype}", dtype, (6, 7), (4, 4), [sh((2, 2), [L, gzip_codec(1)])],
                         fill_array(dtype, 0)[()].item(), seed=60 + i)
        path = tmp_path / dtype
        data = random_array(spec.shape, dtype, spec.seed)
        _create(path, spec)[...] = data
        _assert_anchors_read(path, data, dtype)
        zpath, tpath = tmp_path / f"z-{dtype}", tmp_path / f"t-{dtype}"
        zarr_write(zpath, spec, data)
        ts_write(tpath, spec, data)
        for p in (zpath, tpath):
            assert_bitexact(np.asarray(shardstore.open(str(p), mode="r")), data, f"{p.name}")


@pytest.mark.parametrize(
    "codecs",
    [
        [{"name": "zstd"}],
        [{"name": "gzip"}],
        [{"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle"}}],
    ],
)
def test_short_codec_configs_are_written_complete(tmp_path, codecs):
    """Defaults a user leaves out are spelled out in zarr.json, so tensorstore opens it."""
    import tensorstore as ts

    path = tmp_path / "short"
    a = shardstore.zarr3.create(path, shape=(8, 8), dtype="uint16", chunks=(4, 4), shards=(8, 8), codecs=codecs)
    a[...] = np.arange(64, dtype="uint16").reshape(8, 8)
    inner = a.metadata["codecs"][0]["configuration"]["codecs"]
    assert inner[0] == {"name": "bytes", "configuration": {"endian": "little"}}
    assert set(inner[1]["configuration"]) >= {"level"} or "typesize" in inner[1]["configuration"]
    t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}).result()
    assert np.array_equal(t[...].read().result(), a[...])
