"""bcolz bad input -> clear shardstore errors naming the file; interrupted writes stay readable."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from shardstore import bcolz as sbz
from shardstore.errors import ChunkNotFoundError, CodecError, MetadataError, ReadOnlyError, ShardStoreError, StoreError
from shardstore.store.local import LocalStore


def _make(tmp_path: Path, n: int = 1000, chunklen: int = 100) -> tuple[Path, np.ndarray]:
    data = np.arange(n, dtype="i8") * 3
    sbz.carray(data, rootdir=tmp_path / "c", chunklen=chunklen)
    return tmp_path / "c", data


def _patch(path: Path, offset: int, raw: bytes) -> None:
    b = bytearray(path.read_bytes())
    b[offset : offset + len(raw)] = raw
    path.write_bytes(bytes(b))


@pytest.mark.parametrize(
    "offset, raw, message",
    [
        (0, b"BLPK", "magic"),
        (4, b"\x02", "version"),
        (8, struct.pack("<q", 3), "3 blosc chunks"),
        (16 + 4, struct.pack("<I", 800 - 8), "uncompressed bytes"),  # blosc nbytes != 100 rows
        (16 + 12, struct.pack("<I", 5), "header says the chunk is 5 bytes"),  # blosc cbytes != file
    ],
)
def test_corrupt_chunk_file_names_it(tmp_path: Path, offset: int, raw: bytes, message: str) -> None:
    root, data = _make(tmp_path)
    blp = root / "data" / "__3.blp"
    _patch(blp, offset, raw)
    ca = sbz.open(root, mode="r")
    assert np.array_equal(ca[:300], data[:300])  # other chunks are fine
    with pytest.raises(CodecError, match=message) as info:
        ca[:]
    assert str(blp) in str(info.value)


def test_truncated_chunk_file(tmp_path: Path) -> None:
    root, _ = _make(tmp_path)
    blp = root / "data" / "__9.blp"
    blp.write_bytes(blp.read_bytes()[:-10])
    with pytest.raises(CodecError, match="__9.blp"):
        sbz.open(root, mode="r")[950]


def test_missing_chunk_in_the_middle(tmp_path: Path) -> None:
    root, data = _make(tmp_path)
    (root / "data" / "__4.blp").unlink()
    ca = sbz.open(root, mode="r")
    assert np.array_equal(ca[500:], data[500:])
    with pytest.raises(ChunkNotFoundError, match="__4.blp"):
        ca[:]


def test_stale_files_beyond_the_length_are_ignored(tmp_path: Path) -> None:
    root, data = _make(tmp_path, n=250)
    (root / "data" / "__7.blp").write_bytes(b"garbage")
    (root / "data" / ".gitkeep").write_bytes(b"")
    assert np.array_equal(sbz.open(root, mode="r")[:], data)


@pytest.mark.parametrize("name", ["meta/sizes", "meta/storage", "__attrs__"])
@pytest.mark.parametrize("text", ['{"shape": [1000', "[1, 2]", "\xff\xfe"])
def test_malformed_meta_json(tmp_path: Path, name: str, text: str) -> None:
    root, _ = _make(tmp_path)
    (root / name).write_bytes(text.encode("latin-1"))
    with pytest.raises(MetadataError) as info:
        sbz.open(root, mode="r")
    assert str(root / name) in str(info.value)


@pytest.mark.parametrize(
    "name, doc, message",
    [
        ("meta/sizes", '{"shape": [-1], "nbytes": 0, "cbytes": 0}', "shape"),
        ("meta/sizes", '{"shape": [10], "cbytes": 0}', "nbytes"),
        ("meta/storage", '{"dtype": "int99", "cparams": {"clevel": 5, "shuffle": 1}, "chunklen": 5, "expectedlen": 1, "dflt": 0}', "dtype"),
        ("meta/storage", '{"dtype": "int8", "cparams": {"clevel": 15, "shuffle": 1}, "chunklen": 5, "expectedlen": 1, "dflt": 0}', "clevel"),
        ("meta/storage", '{"dtype": "int8", "cparams": {"clevel": 5, "shuffle": 1, "cname": "foo"}, "chunklen": 5, "expectedlen": 1, "dflt": 0}', "cname"),
        ("meta/storage", '{"dtype": "int8", "cparams": {"clevel": 5, "shuffle": 1}, "chunklen": 0, "expectedlen": 1, "dflt": 0}', "chunklen"),
        ("meta/storage", '{"dtype": "int8", "cparams": {"clevel": 5, "shuffle": 1}, "chunklen": 5, "expectedlen": 1, "dflt": "x"}', "dflt"),
    ],
)
def test_invalid_meta_fields(tmp_path: Path, name: str, doc: str, message: str) -> None:
    root, _ = _make(tmp_path)
    (root / name).write_text(doc + "\n")
    with pytest.raises(MetadataError, match=message) as info:
        sbz.open(root, mode="r")
    assert str(root / name) in str(info.value)


def test_missing_storage_and_not_bcolz(tmp_path: Path) -> None:
    root, _ = _make(tmp_path)
    (root / "meta" / "storage").unlink()
    with pytest.raises(MetadataError, match="storage"):
        sbz.open(root, mode="r")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ShardStoreError, match="no bcolz"):
        sbz.open(tmp_path / "empty", mode="r")


def test_bad_rootdirs(tmp_path: Path) -> None:
    sbz.ctable({"a": np.arange(5)}, rootdir=tmp_path / "t")
    (tmp_path / "t" / "__rootdirs__").write_text('{"names": ["a", "../x"]}\n')
    with pytest.raises(MetadataError, match="__rootdirs__"):
        sbz.open(tmp_path / "t", mode="r")


def test_read_only(tmp_path: Path) -> None:
    root, _ = _make(tmp_path)
    ca = sbz.open(root, mode="r")
    with pytest.raises(ReadOnlyError):
        ca.append([1, 2])
    with pytest.raises(ReadOnlyError):
        ca[0] = 5
    with pytest.raises(ReadOnlyError):
        ca.attrs["x"] = 1
    sbz.ctable({"a": np.arange(5)}, rootdir=tmp_path / "t")
    with pytest.raises(ReadOnlyError):
        sbz.open(tmp_path / "t", mode="r").append({"a": [1]})


def test_mode_a_refuses_existing_rootdir(tmp_path: Path) -> None:
    root, _ = _make(tmp_path)
    with pytest.raises(ShardStoreError, match="exists"):
        sbz.carray([1, 2], rootdir=root, mode="a")


# -- interrupted writes -----------------------------------------------------------------------
class FailingStore(LocalStore):
    """A local store whose writes start failing after ``budget`` successful ones."""

    def __init__(self, root: Path, budget: int) -> None:
        super().__init__(root)
        self.budget = budget

    def _write(self, key: str, value: bytes) -> None:  # every file write of the store
        self._spend(key)
        super()._write(key, value)

    def _write_in_place(self, key: str, value: bytes) -> None:  # (stores that have it)
        self._spend(key)
        super()._write_in_place(key, value)  # type: ignore[misc]

    def _spend(self, key: str) -> None:
        if self.budget <= 0:
            raise StoreError(f"injected failure writing {key!r}")
        self.budget -= 1


@pytest.mark.parametrize("op", ["append", "append_big", "resize_up", "trim"])
def test_interrupted_write_leaves_old_content(tmp_path: Path, op: str) -> None:
    """Fail the k-th file write of an operation, for every k: the old content reads back."""
    data = np.arange(1037, dtype="i4")
    budget = 0
    while True:
        root = tmp_path / f"{op}{budget}"
        sbz.carray(data, rootdir=root, chunklen=100)
        ca = sbz.open(FailingStore(root, budget), mode="a")
        try:
            if op == "append":
                ca.append(np.arange(50, dtype="i4"))
            elif op == "append_big":
                ca.append(np.arange(450, dtype="i4"))
            elif op == "resize_up":
                ca.resize(1500)
            else:
                ca.trim(300)
            ca.flush()  # appends write the leftover and meta/sizes here
        except StoreError:
            ca._async.discard_pending()  # (else the finalizer tries again at exit)
            after = sbz.open(root, mode="r")[:]
            # either the old content, or (after meta/sizes was written) the new one
            assert np.array_equal(after, data) or len(after) != len(data), (op, budget)
            # and it is still writable afterwards
            sbz.open(root, mode="a").append(np.array([1, 2, 3], dtype="i4"))
            budget += 1
            continue
        break
    assert budget > 1


def test_interrupted_ctable_append(tmp_path: Path) -> None:
    cols = {"a": np.arange(300, dtype="i4"), "b": np.arange(300, dtype="f8")}
    sbz.ctable(cols, rootdir=tmp_path / "t", chunklen=64)
    # columns of unequal length (an append that stopped after the first column)
    sbz.open(tmp_path / "t" / "a", mode="a").append(np.arange(10, dtype="i4"))
    t = sbz.open(tmp_path / "t", mode="r")
    assert len(t) == 300 and np.array_equal(t["b"][:], cols["b"])
    t = sbz.open(tmp_path / "t", mode="a")  # writable open repairs: drops the partial rows
    assert len(t["a"]) == 300
    t.append({"a": [1], "b": [2.0]})
    t.flush()
    assert len(sbz.open(tmp_path / "t", mode="r")) == 301
