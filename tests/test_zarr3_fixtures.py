"""Zarr v3 conformance: shardstore reads the shared reference fixtures bit-exactly.

Every ``format == "zarr3"`` case of ``MANIFEST.json`` and every array in it is opened
read-only from the shared directory; anything that writes works on a copy in ``tmp_path``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from _helpers import (
    assert_bitexact, fill_from_json, find_fixtures_dir, fixtures_missing_reason,
    load_manifest, random_array, sample_selections, sha256_le, ts_read, zarr_read,
)

shardstore = pytest.importorskip("shardstore")
from shardstore.errors import ChecksumError, CodecError, ReadOnlyError  # noqa: E402

_MANIFEST = load_manifest()


def _array_params() -> list:
    if _MANIFEST is None:
        return [pytest.param(None, None, None, marks=pytest.mark.skip(
            reason=fixtures_missing_reason()))]
    params = []
    for case in _MANIFEST["cases"]:
        if case["format"] != "zarr3":
            continue
        for array_path, info in case["arrays"].items():
            name = case["id"].removeprefix("zarr3/") + (f"::{array_path}" if array_path else "")
            params.append(pytest.param(case, array_path, info, id=name))
    return params


ARRAYS = _array_params()
ARRAY_ARGS = "case, array_path, info"


def _array_dir(fixtures_dir: Path, case: dict, array_path: str) -> Path:
    return fixtures_dir / case["path"] / array_path if array_path else fixtures_dir / case["path"]


def _expected(fixtures_dir: Path, info: dict) -> np.ndarray:
    return np.load(fixtures_dir / info["expected_npy"])


def _open_fixture(fixtures_dir: Path, case: dict, array_path: str):
    return shardstore.open(str(_array_dir(fixtures_dir, case, array_path)), mode="r")


def _case(case_id: str) -> dict:
    if _MANIFEST is None:
        pytest.skip(fixtures_missing_reason())
    for case in _MANIFEST["cases"]:
        if case["id"] == case_id:
            return case
    pytest.fail(f"fixture case {case_id!r} missing from MANIFEST.json")


@pytest.fixture(scope="module", autouse=True)
def _shared_fixtures_untouched():
    """Fail loudly if any test wrote into the shared zarr3 fixtures."""
    root = find_fixtures_dir()
    if root is None:
        yield
        return

    def snapshot() -> dict:
        return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
                for p in sorted((root / "zarr3").rglob("*"))}

    before = snapshot()
    yield
    after = snapshot()
    assert after == before, "shared/fixtures/zarr3 was modified by the tests"


# --------------------------------------------------------------------------- full reads

@pytest.mark.parametrize(ARRAY_ARGS, ARRAYS)
def test_expected_npy_matches_manifest_hash(fixtures_dir, case, array_path, info):
    """Sanity check of the test helper itself (no shardstore involved)."""
    expected = _expected(fixtures_dir, info)
    assert list(expected.shape) == info["shape"]
    assert expected.dtype == np.dtype(info["dtype"])
    assert sha256_le(expected) == info["sha256"]


@pytest.mark.parametrize(ARRAY_ARGS, ARRAYS)
def test_read_full(fixtures_dir, case, array_path, info):
    a = _open_fixture(fixtures_dir, case, array_path)
    assert tuple(a.shape) == tuple(info["shape"])
    assert a.dtype.newbyteorder("=") == np.dtype(info["dtype"]).newbyteorder("=")
    data = np.asarray(a)
    assert data.shape == tuple(info["shape"])
    assert sha256_le(data) == info["sha256"], "sha256 (manifest hash_convention) differs"
    assert_bitexact(data, _expected(fixtures_dir, info), "np.asarray(a) vs _expected npy")
    assert_bitexact(a[...], _expected(fixtures_dir, info), "a[...]")


@pytest.mark.parametrize(ARRAY_ARGS, ARRAYS)
def test_partial_reads(fixtures_dir, case, array_path, info):
    a = _open_fixture(fixtures_dir, case, array_path)
    expected = _expected(fixtures_dir, info)
    for sel in sample_selections(expected.shape):
        assert_bitexact(a[sel], expected[sel], f"a[{sel!r}]")


@pytest.mark.parametrize(ARRAY_ARGS, ARRAYS)
def test_orthogonal_reads(fixtures_dir, case, array_path, info):
    expected = _expected(fixtures_dir, info)
    if expected.ndim == 0:
        pytest.skip("orthogonal indexing needs at least one dimension")
    a = _open_fixture(fixtures_dir, case, array_path)
    first = np.array([expected.shape[0] - 1, 0, expected.shape[0] // 2])
    rest = [np.arange(s) % 3 != 1 for s in expected.shape[1:]]  # boolean masks
    got = a.oindex[(first, *rest)]
    assert_bitexact(got, expected[np.ix_(first, *rest)], "a.oindex[int array, bool masks]")


# --------------------------------------------------------------------------- metadata

@pytest.mark.parametrize(ARRAY_ARGS, ARRAYS)
def test_metadata_facts(fixtures_dir, case, array_path, info):
    md = json.loads((_array_dir(fixtures_dir, case, array_path) / "zarr.json").read_text())
    a = _open_fixture(fixtures_dir, case, array_path)
    dtype = np.dtype(md["data_type"])
    assert a.ndim == len(md["shape"])
    assert a.size == int(np.prod(md["shape"], dtype=np.int64))
    assert a.nbytes == a.size * dtype.itemsize
    fill = np.asarray(a.fill_value, dtype=dtype)
    assert_bitexact(fill, fill_from_json(md["data_type"], md["fill_value"]), "fill_value")
    assert dict(a.attrs) == md.get("attributes", {})
    if "dimension_names" in md:
        assert tuple(a.dimension_names) == tuple(md["dimension_names"])
    else:
        assert a.dimension_names is None or all(n is None for n in a.dimension_names)
    outer = tuple(md["chunk_grid"]["configuration"]["chunk_shape"])
    top = md["codecs"][-1]
    if top["name"] == "sharding_indexed":
        assert tuple(a.shards) == outer
        inner = tuple(top["configuration"]["chunk_shape"])
        nested = [c for c in top["configuration"]["codecs"] if c["name"] == "sharding_indexed"]
        allowed = {inner} | {tuple(c["configuration"]["chunk_shape"]) for c in nested}
        assert tuple(a.chunks) in allowed
    else:
        assert a.shards is None
        assert tuple(a.chunks) == outer
    assert a.metadata["data_type"] == md["data_type"]
    assert list(a.metadata["shape"]) == md["shape"]


# Hard-coded expectations (not through the helper's parser): raw little-endian bits.
FILL_BITS = {
    "zarr3/ts_v2_key_encoding_float16_hexfill": ("float16", "003c"),            # "0x3c00" = 1.0
    "zarr3/zp_shard_start_gzip_float32_nan": ("float32", "0000c07f"),           # "NaN"
    "zarr3/ts_nested_sharding_float64_inf": ("float64", "000000000000f07f"),    # "Infinity"
    "zarr3/ts_shard_transpose_bigendian_complex64": ("complex64", "0000c07f00002040"),
    "zarr3/zp_shard_blosc_zstd_bitshuffle_uint64": ("uint64", "ff" * 8),        # 2**64-1
    "zarr3/zp_shard_bool_zstd": ("bool", "01"),
    "zarr3/zp_default_key_dot_separator_int8": ("int8", "80"),                  # -128
    "zarr3/crafted_shard_unordered_gaps_int64": ("int64", "ff" * 8),            # -1
    "zarr3/ts_shard_blosc_lz4_uint8_noindexcrc": ("uint8", "ff"),               # 255
    "zarr3/zp_unsharded_uint32_edge_fill42": ("uint32", "2a000000"),
}


@pytest.mark.parametrize("case_id", sorted(FILL_BITS))
def test_fill_value_bits(fixtures_dir, case_id):
    case = _case(case_id)
    dtype, bits = FILL_BITS[case_id]
    a = _open_fixture(fixtures_dir, case, "")
    got = np.asarray(a.fill_value, dtype=dtype).astype(np.dtype(dtype).newbyteorder("<"))
    assert got.tobytes().hex() == bits, f"fill_value {a.fill_value!r}"
    if dtype == "uint64":  # must not have gone through float64
        assert int(a.fill_value) == 2**64 - 1


def test_dimension_names_with_null_and_attributes(fixtures_dir):
    a = _open_fixture(fixtures_dir, _case("zarr3/zp_default_key_dot_separator_int8"), "")
    assert list(a.dimension_names) == ["z", None, "x"]
    assert dict(a.attrs) == {"description": "dot separated", "scale": [1.5, 2, 3]}


# --------------------------------------------------------------------------- groups

def test_group_hierarchy(fixtures_dir):
    case = _case("zarr3/zp_group_hierarchy")
    root = fixtures_dir / case["path"]
    g = shardstore.zarr3.open_group(str(root), mode="r")
    assert sorted(g.keys()) == ["cplx", "sub"]
    assert dict(g.attrs) == {"title": "root group", "version": 3}
    sub = g["sub"]
    assert sorted(sub.keys()) == ["arr_u16"]
    assert dict(sub.attrs) == {"level": 1, "nested": {"k": [1, 2, 3]}}
    for parent, name, array_path in [(g, "cplx", "cplx"), (sub, "arr_u16", "sub/arr_u16")]:
        arr = parent[name]
        info = case["arrays"][array_path]
        assert tuple(arr.shape) == tuple(info["shape"])
        assert_bitexact(np.asarray(arr), _expected(fixtures_dir, info), f"group[{name!r}]")
    assert list(g["cplx"].dimension_names) == ["t", "u"]
    assert dict(g["cplx"].attrs) == {"units": "V"}
    with pytest.raises(KeyError):
        g["does_not_exist"]


# --------------------------------------------------------------------------- open variants

OPEN_CASE = "zarr3/ts_shard_end_crc32c_zstd_int16"


@pytest.mark.parametrize("how", ["path_object", "file_url", "zarr3_open", "local_store"])
def test_open_variants(fixtures_dir, how):
    case = _case(OPEN_CASE)
    root = fixtures_dir / case["path"]
    if how == "path_object":
        a = shardstore.open(root, mode="r")
    elif how == "file_url":
        a = shardstore.open(root.as_uri(), mode="r")
    elif how == "zarr3_open":
        a = shardstore.zarr3.open(str(root), mode="r")
    else:
        a = shardstore.open(shardstore.LocalStore(str(root)), mode="r")
    assert_bitexact(np.asarray(a), _expected(fixtures_dir, case["arrays"][""]), how)


def test_read_only_refuses_writes(fixtures_dir, tmp_path):
    case = _case(OPEN_CASE)
    dst = tmp_path / "case"
    shutil.copytree(fixtures_dir / case["path"], dst)
    before = {p: p.read_bytes() for p in dst.rglob("*") if p.is_file()}
    a = shardstore.open(str(dst), mode="r")
    with pytest.raises(ReadOnlyError):
        a[0:4, 0:5] = 1
    after = {p: p.read_bytes() for p in dst.rglob("*") if p.is_file()}
    assert after == before


CORRUPTIONS = {
    # name: (case, shard key, mutation, expected error)
    "index_crc32c_mismatch": ("zarr3/ts_shard_end_crc32c_zstd_int16", "c/0/1",
                              lambda b: b[:-10] + bytes([b[-10] ^ 0x40]) + b[-9:], ChecksumError),
    "start_index_crc32c_mismatch": ("zarr3/zp_shard_start_gzip_float32_nan", "c/1/0/0",
                                    lambda b: bytes([b[0] ^ 0x01]) + b[1:], ChecksumError),
    "truncated_shard": ("zarr3/ts_shard_blosc_lz4_uint8_noindexcrc", "c/0/1",
                        lambda b: b[: len(b) // 3], CodecError),
}


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_corrupt_shard_raises_naming_the_key(fixtures_dir, tmp_path, name):
    case_id, key, mutate, error = CORRUPTIONS[name]
    dst = tmp_path / "case"
    shutil.copytree(fixtures_dir / _case(case_id)["path"], dst)
    shard = dst / key
    shard.write_bytes(mutate(shard.read_bytes()))
    a = shardstore.open(str(dst), mode="r")
    with pytest.raises(error) as excinfo:
        np.asarray(a)
    assert key in str(excinfo.value), f"error message does not name {key!r}: {excinfo.value}"


# --------------------------------------------------------------------------- write path

@pytest.mark.parametrize(ARRAY_ARGS, ARRAYS)
def test_rewrite_copy_roundtrip(fixtures_dir, tmp_path, case, array_path, info):
    """Copy the case, rewrite all data through shardstore, re-read: same sha; then a
    partial overwrite checked against NumPy and tensorstore, and a full zarr-python read."""
    dst = tmp_path / "case"
    shutil.copytree(fixtures_dir / case["path"], dst)
    arr_dir = dst / array_path if array_path else dst
    expected = _expected(fixtures_dir, info)

    a = shardstore.open(str(arr_dir), mode="r+")
    a[...] = expected
    again = shardstore.open(str(arr_dir), mode="r")
    assert sha256_le(np.asarray(again)) == info["sha256"]
    assert_bitexact(ts_read(arr_dir), expected, "tensorstore after shardstore rewrite")

    if expected.ndim == 0:
        return
    oracle = expected.copy()
    sel = tuple(slice(1, None, 2) for _ in expected.shape)
    patch = random_array(oracle[sel].shape, str(expected.dtype), seed=123)
    oracle[sel] = patch
    a[sel] = patch
    assert_bitexact(np.asarray(shardstore.open(str(arr_dir), mode="r")), oracle,
                    "shardstore after partial overwrite")
    assert_bitexact(ts_read(arr_dir), oracle, "tensorstore after partial overwrite")
    assert_bitexact(zarr_read(arr_dir), oracle, "zarr-python after partial overwrite")


def test_every_zarr3_case_is_collected(fixtures_dir, manifest):
    """Fails (in CI) rather than silently collecting nothing when the fixtures are missing."""
    cases = [c for c in manifest["cases"] if c["format"] == "zarr3"]
    assert len(cases) >= 14
    assert len(ARRAYS) == sum(len(c["arrays"]) for c in cases)
