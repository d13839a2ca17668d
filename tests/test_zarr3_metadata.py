"""Zarr v3 metadata: data types, every fill_value spelling, key encodings, extensions, groups."""

from __future__ import annotations

import json

import numpy as np
import pytest

import shardstore
from shardstore.errors import ContainsNodeError, MetadataError, ReadOnlyError, UnsupportedFeatureError
from shardstore.formats.zarr3.metadata import dump_fill_value, parse_document, parse_fill_value

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "complex64", "complex128"]


def bits(x) -> bytes:
    return np.asarray(x).tobytes()


@pytest.mark.parametrize(
    "dtype, json_value, expected",
    [
        ("bool", True, np.bool_(True)),
        ("uint64", 18446744073709551615, np.uint64(2**64 - 1)),
        ("int64", -(2**63), np.int64(-(2**63))),
        ("float32", "NaN", np.float32(np.nan)),
        ("float64", "Infinity", np.float64(np.inf)),
        ("float64", "-Infinity", np.float64(-np.inf)),
        ("float16", "0x3c00", np.float16(1.0)),
        ("float32", "0x7fc00001", np.frombuffer(bytes.fromhex("7fc00001")[::-1], "<f4")[0]),
        ("float64", 1.5, np.float64(1.5)),
        ("float32", 3, np.float32(3)),
        ("complex64", ["NaN", 2.5], np.complex64(complex(np.nan, 2.5))),
        ("complex128", [1.0, "-Infinity"], np.complex128(complex(1.0, -np.inf))),
    ],
)
def test_fill_value_spellings(dtype, json_value, expected):
    value = parse_fill_value(json_value, np.dtype(dtype))
    assert value.dtype == np.dtype(dtype)
    assert bits(value) == bits(np.asarray(expected, dtype=dtype))


def test_nan_payloads_survive_a_round_trip_through_json():
    odd_nan = np.frombuffer(bytes.fromhex("7fc00001")[::-1], "<f4")[0]
    assert dump_fill_value(odd_nan, np.dtype("float32")) == "0x7fc00001"
    assert dump_fill_value(np.float32(np.nan), np.dtype("float32")) == "NaN"
    assert dump_fill_value(np.complex64(complex(np.nan, -np.inf)), np.dtype("complex64")) == ["NaN", "-Infinity"]
    assert dump_fill_value(np.uint64(2**64 - 1), np.dtype("uint64")) == 2**64 - 1


@pytest.mark.parametrize(
    "dtype, json_value",
    [("bool", 1), ("uint8", 256), ("int8", -129), ("int32", 1.5), ("float32", "nan"),
     ("float16", "0x1ffff"), ("complex64", 1.0), ("uint16", None), ("int16", True)],
)
def test_bad_fill_values_are_refused(dtype, json_value):
    with pytest.raises(MetadataError):
        parse_fill_value(json_value, np.dtype(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_round_trips_with_fill(tmp_path, dtype):
    rng = np.random.default_rng(1)
    data = (rng.random((7, 5)) * 100).astype(dtype)
    fill = np.ones((), dtype=dtype)[()]
    a = shardstore.zarr3.create(tmp_path / "a", shape=(7, 5), dtype=dtype, chunks=(2, 2), shards=(4, 4), fill_value=fill)
    a[1:, 1:] = data[1:, 1:]
    b = shardstore.open(tmp_path / "a")
    expected = np.full((7, 5), fill, dtype=dtype)
    expected[1:, 1:] = data[1:, 1:]
    assert b.dtype == np.dtype(dtype)
    assert bits(b[...]) == bits(expected)
    assert bits(b.fill_value) == bits(fill)


@pytest.mark.parametrize(
    "encoding, expected_key",
    [
        ({"name": "default"}, "c/1/2"),
        ({"name": "default", "configuration": {"separator": "."}}, "c.1.2"),
        ({"name": "v2"}, "1.2"),
        ({"name": "v2", "configuration": {"separator": "/"}}, "1/2"),
    ],
)
def test_chunk_key_encodings(encoding, expected_key):
    store = shardstore.MemoryStore()
    a = shardstore.zarr3.create(store, shape=(6, 6), dtype="uint8", chunks=(2, 2), chunk_key_encoding=encoding)
    a[2, 4] = 9
    assert sorted(k for k in store._data if k != "zarr.json") == [expected_key]
    assert json.loads(store._data["zarr.json"])["chunk_key_encoding"] == encoding
    assert shardstore.open(store)[2, 4] == 9


def test_rank0_keys():
    for encoding, key in [({"name": "default"}, "c"), ({"name": "v2"}, "0")]:
        store = shardstore.MemoryStore()
        a = shardstore.zarr3.create(store, shape=(), dtype="float64", chunks=(), chunk_key_encoding=encoding)
        a[...] = 2.5
        assert key in store._data and a[()] == 2.5


def _doc(**changes):
    doc = {
        "zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
        "codecs": [{"name": "bytes"}],
    }
    doc.update(changes)
    return json.dumps(doc).encode()


def test_unknown_members_and_must_understand():
    with pytest.raises(UnsupportedFeatureError, match="unknown member 'future_thing'"):
        parse_document(_doc(future_thing={"x": 1}), "a/zarr.json")
    meta = parse_document(_doc(future_thing={"must_understand": False, "x": 1}), "a/zarr.json")
    assert meta.shape == (4,)
    # the unknown member is kept when the document is written back
    assert meta.to_dict()["future_thing"] == {"must_understand": False, "x": 1}
    with pytest.raises(UnsupportedFeatureError, match="transformer"):
        parse_document(_doc(storage_transformers=[{"name": "chunk-manifest"}]), "a/zarr.json")
    parse_document(_doc(storage_transformers=[{"name": "x", "must_understand": False}]), "a/zarr.json")


def test_short_form_extension_names():
    meta = parse_document(_doc(chunk_key_encoding="v2", codecs=["bytes", "crc32c"]), "zarr.json")
    assert meta.key_encoding == "v2" and meta.separator == "."


@pytest.mark.parametrize(
    "change, message",
    [
        ({"zarr_format": 2}, "zarr_format"),
        ({"shape": [-1]}, "shape"),
        ({"data_type": "float128"}, "data_type"),
        ({"codecs": []}, "codecs"),
        ({"codecs": [{"name": "gzip", "configuration": {"level": 1}}]}, "array->bytes"),
        ({"codecs": [{"name": "no_such_codec"}]}, "no_such_codec"),
        ({"chunk_grid": {"name": "rectilinear", "configuration": {}}}, "rectilinear"),
        ({"dimension_names": ["x", "y"]}, "dimension_names"),
        ({"fill_value": "zero"}, "fill_value"),
    ],
)
def test_invalid_documents_name_the_problem(change, message):
    with pytest.raises((MetadataError, UnsupportedFeatureError), match=message):
        parse_document(_doc(**change), "arr/zarr.json")


def test_metadata_written_back_preserves_foreign_members(tmp_path):
    """Resizing or setting attributes keeps members exactly as another writer spelled them."""
    (tmp_path / "a").mkdir()
    doc = json.loads(_doc(dimension_names=[None]))
    doc["codecs"] = [{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 0, "checksum": False}}]
    (tmp_path / "a" / "zarr.json").write_text(json.dumps(doc))
    a = shardstore.open(tmp_path / "a", mode="r+")
    a.attrs["note"] = "hi"
    a.resize(10)
    written = json.loads((tmp_path / "a" / "zarr.json").read_text())
    assert written["shape"] == [10] and written["attributes"] == {"note": "hi"}
    assert written["codecs"] == doc["codecs"] and written["dimension_names"] == [None]
    assert "storage_transformers" not in written


def test_groups_attributes_and_children(tmp_path):
    root = shardstore.zarr3.create_group(tmp_path / "g", attributes={"title": "root"})
    sub = root.create_group("sub")
    arr = sub.create_array("arr", shape=(3,), dtype="int32", chunks=(2,), dimension_names=["t"])
    arr[:] = [1, 2, 3]
    root.attrs.update({"version": 2})
    g = shardstore.open_group(tmp_path / "g")
    assert dict(g.attrs) == {"title": "root", "version": 2}
    assert g.keys() == ["sub"] and "sub" in g and "nope" not in g
    assert g["sub"].keys() == ["arr"]
    assert g["sub/arr"][...].tolist() == [1, 2, 3]
    assert g["sub"]["arr"].dimension_names == ("t",)
    assert [name for name, _ in g.groups()] == ["sub"] and g["sub"].arrays()[0][0] == "arr"
    assert "arr (3,) int32" in g.tree()
    with pytest.raises(ReadOnlyError):
        g.attrs["x"] = 1
    with pytest.raises(ReadOnlyError):
        g["sub/arr"][0] = 5
    with pytest.raises(KeyError):
        g["missing"]


def test_create_modes(tmp_path):
    shardstore.zarr3.create(tmp_path / "a", shape=(4,), dtype="uint8", chunks=(2,))[:] = 7
    with pytest.raises(ContainsNodeError):
        shardstore.zarr3.create(tmp_path / "a", shape=(4,), dtype="uint8", chunks=(2,))
    a = shardstore.zarr3.create(tmp_path / "a", shape=(4,), dtype="uint8", chunks=(2,), mode="w")
    assert a[...].tolist() == [0, 0, 0, 0], "mode='w' replaces the old chunks"
    b = shardstore.open(tmp_path / "b", mode="w", shape=(3,), dtype="int16", chunks=(3,))
    assert b.format == "zarr3" and b.shape == (3,)
    c = shardstore.open(tmp_path / "b", mode="a")
    c[:] = 5
    assert shardstore.open(tmp_path / "b")[...].tolist() == [5, 5, 5]


def test_compressor_only_codec_list_gets_bytes_added():
    a = shardstore.zarr3.create(shardstore.MemoryStore(), shape=(8,), dtype="uint16", chunks=(4,),
                                codecs=[{"name": "gzip", "configuration": {"level": 1}}])
    assert [c["name"] for c in a.metadata["codecs"]] == ["bytes", "gzip"]


def test_array_properties():
    a = shardstore.zarr3.create(shardstore.MemoryStore(), shape=(100, 60), dtype="float32",
                                chunks=(10, 20), shards=(50, 60), fill_value="NaN",
                                attributes={"a": 1}, dimension_names=["y", "x"])
    assert (a.shape, a.ndim, a.size, a.nbytes) == ((100, 60), 2, 6000, 24000)
    assert (a.chunks, a.shards, a.dtype) == ((10, 20), (50, 60), np.dtype("float32"))
    assert np.isnan(a.fill_value) and np.isnan(a[3, 4])
    assert dict(a.attrs) == {"a": 1} and a.dimension_names == ("y", "x") and len(a) == 100
    assert np.asarray(a, dtype="float64").dtype == np.float64
    assert "shards=(50, 60)" in repr(a)
