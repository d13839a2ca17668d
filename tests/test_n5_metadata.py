"""N5 metadata: attributes.json parsing and writing, groups, modes, format detection."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import shardstore
from shardstore import n5
from shardstore.errors import (
    ContainsNodeError,
    MetadataError,
    ReadOnlyError,
    ShardStoreError,
    UnsupportedFeatureError,
)
from shardstore.formats.n5.metadata import (
    DatasetMetadata,
    GroupMetadata,
    parse_document,
)


def _doc(**over) -> dict:
    doc = {"dimensions": [5, 4, 3], "blockSize": [2, 2, 2], "dataType": "uint16",
           "compression": {"type": "gzip", "level": -1, "useZlib": False}}
    doc.update(over)
    return doc


def test_dataset_document_views_and_round_trip() -> None:
    doc = _doc(resolution=[4, 4, 40], n5="2.0.0")
    meta = parse_document(json.dumps(doc).encode())
    assert isinstance(meta, DatasetMetadata)
    assert meta.shape == (3, 4, 5) and meta.chunk_shape == (2, 2, 2)
    assert meta.dtype == np.dtype("uint16")
    assert meta.attributes == {"resolution": [4, 4, 40]}
    assert meta.to_dict() == doc  # every member back as written (gzip level -1 too)


def test_legacy_compression_type_and_missing_compression() -> None:
    doc = _doc()
    del doc["compression"]
    meta = parse_document({**doc, "compressionType": "bzip2"})
    assert meta.codec.name == "bzip2" and meta.to_dict()["compressionType"] == "bzip2"
    assert parse_document(doc).codec.name == "raw"


@pytest.mark.parametrize("comp", [
    {"type": "raw"},
    {"type": "gzip", "level": 6},
    {"type": "gzip", "level": 3, "useZlib": True},
    {"type": "bzip2", "blockSize": 9},
    {"type": "xz", "preset": 6},
    {"type": "lz4", "blockSize": 65536},
    {"type": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0, "nthreads": 4},
    {"type": "blosc", "cname": "zstd", "clevel": 1, "shuffle": -1, "blocksize": 0, "typesize": 2},
    {"type": "zstd", "level": 3, "nbWorkers": 0},
])
def test_every_compression_round_trips_its_json(tmp_path: Path, comp: dict) -> None:
    a = n5.create(tmp_path / "c.n5", "ds", shape=(6, 5), dtype="int32", block_size=(4, 4), compression=comp)
    written = json.loads((tmp_path / "c.n5/ds/attributes.json").read_text())["compression"]
    assert {k: written[k] for k in comp} == comp  # given members kept, defaults added
    a[...] = np.arange(30).reshape(6, 5)
    a.attrs["x"] = 1  # rewriting the document keeps the compression object exactly
    assert json.loads((tmp_path / "c.n5/ds/attributes.json").read_text())["compression"] == written
    assert (np.asarray(n5.open(tmp_path / "c.n5", "ds")) == np.arange(30).reshape(6, 5)).all()


def test_created_compression_defaults(tmp_path: Path) -> None:
    n5.create(tmp_path / "c.n5", "ds", shape=(4,), dtype="uint8")
    doc = json.loads((tmp_path / "c.n5/ds/attributes.json").read_text())
    assert doc["compression"] == {"type": "gzip", "level": 1, "useZlib": False}
    n5.create(tmp_path / "c.n5", "b", shape=(4,), dtype="uint8", compression={"type": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1})
    doc = json.loads((tmp_path / "c.n5/b/attributes.json").read_text())
    assert "nthreads" not in doc["compression"]  # tensorstore refuses it


@pytest.mark.parametrize("doc,err,match", [
    (_doc(dimensions=[5, -1, 3]), MetadataError, "dimensions"),
    (_doc(blockSize=[2, 0, 2]), MetadataError, "blockSize"),
    (_doc(blockSize=[2, 2]), MetadataError, "rank"),
    (_doc(dimensions="5"), MetadataError, "dimensions"),
    (_doc(dataType="string"), UnsupportedFeatureError, "dataType"),
    (_doc(dataType="complex64"), UnsupportedFeatureError, "dataType"),
    (_doc(compression={"type": "snappy"}), UnsupportedFeatureError, "snappy"),
    (_doc(compression="gzip"), MetadataError, "compression"),
    (_doc(compression={"level": 1}), MetadataError, "type"),
    (_doc(compression={"type": "gzip", "level": 12}), MetadataError, "level"),
    (_doc(compression={"type": "blosc", "cname": "lz4", "clevel": 5}), MetadataError, "shuffle"),
    (_doc(compression={"type": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 7}), MetadataError, "shuffle"),
    (_doc(codecs=[]), UnsupportedFeatureError, "codecs"),
    (_doc(shardSize=[4, 4, 4]), UnsupportedFeatureError, "shardSize"),
    ({"dimensions": [4], "blockSize": [2]}, MetadataError, "dataType"),
    ({"n5": "5.0.0"}, UnsupportedFeatureError, "5.0.0"),
    ({"n5": 4}, MetadataError, "version"),
])
def test_invalid_documents(doc: dict, err: type, match: str) -> None:
    with pytest.raises(err, match=match):
        parse_document(json.dumps(doc).encode(), "ds/attributes.json")


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b"\xff\xfe", b""])
def test_malformed_attributes_json_names_the_file(tmp_path: Path, raw: bytes) -> None:
    (tmp_path / "c.n5/ds").mkdir(parents=True)
    (tmp_path / "c.n5/ds/attributes.json").write_bytes(raw)
    with pytest.raises(MetadataError, match=r"ds/attributes\.json"):
        n5.open(tmp_path / "c.n5", "ds")


def test_groups_versions_and_hidden_members(tmp_path: Path) -> None:
    root = n5.create_group(tmp_path / "c.n5", attributes={"a": 1})
    assert json.loads((tmp_path / "c.n5/attributes.json").read_text()) == {"n5": "4.0.0", "a": 1}
    assert root.attrs.asdict() == {"a": 1}
    root.attrs["b"] = [1, 2]
    assert json.loads((tmp_path / "c.n5/attributes.json").read_text()) == {"n5": "4.0.0", "a": 1, "b": [1, 2]}
    with pytest.raises(MetadataError, match="version"):
        root.attrs["n5"] = "1.0.0"
    sub = root.create_group("x/y", attributes={"deep": True})
    assert sub.attrs["deep"] is True
    assert root.keys() == ["x"] and root["x"].keys() == ["y"]  # "x" has no attributes.json
    assert isinstance(root["x"], n5.Group) and root["x"].attrs.asdict() == {}
    assert root.require_group("x/y").attrs["deep"] is True
    with pytest.raises(ContainsNodeError):
        root.create_group("x/y")
    with pytest.raises(KeyError):
        root["nope"]
    ro = n5.open_group(tmp_path / "c.n5")
    with pytest.raises(ReadOnlyError):
        ro.attrs["c"] = 3


def test_dataset_creation_writes_root_version_keeps_root_attrs(tmp_path: Path) -> None:
    (tmp_path / "c.n5").mkdir()
    (tmp_path / "c.n5/attributes.json").write_text('{"owner": "me"}')
    n5.create(tmp_path / "c.n5", "a/b/ds", shape=(3,), dtype="float32")
    assert json.loads((tmp_path / "c.n5/attributes.json").read_text()) == {"n5": "4.0.0", "owner": "me"}
    assert not (tmp_path / "c.n5/a/attributes.json").exists()  # parents are plain directories
    assert n5.open_group(tmp_path / "c.n5", path="a").keys() == ["b"]


def test_dataset_at_container_root(tmp_path: Path) -> None:
    a = n5.create(tmp_path / "c.n5", shape=(4, 6), dtype="int8", block_size=(2, 4), attributes={"u": 1})
    a[...] = 5
    doc = json.loads((tmp_path / "c.n5/attributes.json").read_text())
    assert doc["n5"] == "4.0.0" and doc["u"] == 1
    b = shardstore.open(str(tmp_path / "c.n5"))
    assert b.attrs.asdict() == {"u": 1} and (np.asarray(b) == 5).all()
    assert (tmp_path / "c.n5/1/0").is_file()  # block (0, 1) in N5 order x/y


def test_create_modes_and_reserved_attributes(tmp_path: Path) -> None:
    a = n5.create(tmp_path / "c.n5", "ds", shape=(4,), dtype="uint8", block_size=(2,))
    a[...] = 1
    with pytest.raises(ContainsNodeError):
        n5.create(tmp_path / "c.n5", "ds", shape=(4,), dtype="uint8")
    b = n5.create(tmp_path / "c.n5", "ds", shape=(8,), dtype="uint16", mode="w")
    assert b.shape == (8,) and (np.asarray(b) == 0).all()  # old blocks deleted
    with pytest.raises(MetadataError, match="metadata keys"):
        n5.create(tmp_path / "c.n5", "x", shape=(4,), dtype="uint8", attributes={"dimensions": [1]})
    with pytest.raises(MetadataError, match="metadata keys"):
        b.attrs["blockSize"] = [3]
    with pytest.raises(UnsupportedFeatureError):
        n5.create(tmp_path / "c.n5", "y", shape=(4,), dtype="complex64")
    with pytest.raises(MetadataError, match="rank"):
        n5.create(tmp_path / "c.n5", "z", shape=(4, 4), dtype="uint8", block_size=(2,))
    ro = n5.open(tmp_path / "c.n5", "ds")
    with pytest.raises(ReadOnlyError):
        ro[0] = 1


def test_axis_order_and_block_keys(tmp_path: Path) -> None:
    a = n5.create(tmp_path / "c.n5", "ds", shape=(3, 5, 7), dtype="uint16", block_size=(1, 2, 4),
                  compression={"type": "raw"})
    doc = json.loads((tmp_path / "c.n5/ds/attributes.json").read_text())
    assert doc["dimensions"] == [7, 5, 3] and doc["blockSize"] == [4, 2, 1]
    a[2, 4, 6] = 0x1234
    raw = (tmp_path / "c.n5/ds/1/2/2").read_bytes()  # C coords (2, 2, 1) -> x/y/z = 1/2/2
    # mode 0, ndim 3, clipped sizes x=3 (7 - 4), y=1 (5 - 4), z=1; payload big-endian
    assert raw[:16] == bytes.fromhex("0000 0003 00000003 00000001 00000001".replace(" ", ""))
    assert raw[16:] == bytes.fromhex("0000 0000 1234")


def test_detect_and_api(tmp_path: Path) -> None:
    n5.create(tmp_path / "c.n5", "g/ds", shape=(4, 4), dtype="uint8", block_size=(2, 2))[...] = 2
    assert shardstore.open(str(tmp_path / "c.n5/g/ds")).format == "n5"
    g = shardstore.open(str(tmp_path / "c.n5"))  # the root group (has attributes.json)
    assert isinstance(g, n5.Group) and g.keys() == ["g"]
    b = shardstore.create(str(tmp_path / "d.n5"), format="n5", shape=(3,), dtype="int64", block_size=(2,))
    b[...] = [1, 2, 3]
    assert list(shardstore.open(str(tmp_path / "d.n5"), mode="r")[...]) == [1, 2, 3]
    # a zarr.json next to an attributes.json wins
    z = shardstore.zarr3.create(str(tmp_path / "z"), shape=(2,), dtype="uint8")
    (tmp_path / "z/attributes.json").write_text(json.dumps(_doc()))
    assert shardstore.open(str(tmp_path / "z")).format == "zarr3"
    with pytest.raises(ShardStoreError, match="no N5"):
        n5.open(tmp_path / "empty.n5", "x")
    with pytest.raises(ShardStoreError, match="found a dataset"):
        n5.open_group(tmp_path / "c.n5", "g/ds")
    assert z.shape == (2,)


def test_group_document_parsing() -> None:
    meta = parse_document(b'{"n5": "2.0.0", "k": {"nested": [1]}}')
    assert isinstance(meta, GroupMetadata)
    assert meta.attributes == {"k": {"nested": [1]}} and meta.to_dict() == {"n5": "2.0.0", "k": {"nested": [1]}}
    with pytest.raises(MetadataError, match="lacks"):
        parse_document(b'{"dimensions": [3], "blockSize": [3]}')


def test_n5_compressions_share_the_codec_registry() -> None:
    from shardstore.codecs import registry
    from shardstore.codecs.blosc import BloscCodec
    from shardstore.codecs.gzip import GzipCodec
    from shardstore.codecs.zstd import ZstdCodec

    assert set(registry.registered_codecs("n5")) >= {"raw", "gzip", "bzip2", "xz", "lz4", "blosc", "zstd"}
    # one implementation per algorithm: the Zarr v3 and N5 names map to the same classes
    for name, cls in (("gzip", GzipCodec), ("blosc", BloscCodec), ("zstd", ZstdCodec)):
        assert registry.get_codec_class(name, "n5") is registry.get_codec_class(name) is cls
    # N5-only members stay out of Zarr v3 configurations
    with pytest.raises(MetadataError, match="useZlib"):
        registry.codec_from_config({"name": "gzip", "configuration": {"level": 1, "useZlib": True}})
    assert registry.codec_from_config({"name": "gzip", "configuration": {"level": 1}}).to_config() == {
        "name": "gzip", "configuration": {"level": 1}}


def test_append_and_resize_rewrite_clipped_edge_blocks(tmp_path: Path) -> None:
    a = n5.create(tmp_path / "c.n5", "ds", shape=(3, 5), dtype="int32", block_size=(2, 4),
                  compression={"type": "zstd", "level": 1})
    a[...] = np.arange(15).reshape(3, 5)
    assert a.append(np.full((2, 5), -1), axis=0) == (5, 5)
    expected = np.concatenate([np.arange(15).reshape(3, 5), np.full((2, 5), -1)])
    assert (np.asarray(n5.open(tmp_path / "c.n5", "ds")) == expected).all()
    assert json.loads((tmp_path / "c.n5/ds/attributes.json").read_text())["dimensions"] == [5, 5]
    a.resize((5, 3))
    assert (np.asarray(n5.open(tmp_path / "c.n5", "ds")) == expected[:, :3]).all()
    assert not (tmp_path / "c.n5/ds/1").exists()  # blocks beyond the new shape are gone
