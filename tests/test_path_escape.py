"""Paths taken from metadata (or from names a caller passes on) cannot leave the root.

A precomputed ``info`` whose scale ``key`` is ``../x`` or absolute, an N5 dataset path with
``..``, a Zarr group member name with ``..``, a bcolz ctable column named ``../../etc``: each
is a ``ShardStoreError`` naming the offending path, and nothing is read or written outside the
root, on local files (a sentinel directory beside the root stays untouched and unread) and on
S3 (where ``..`` would address another prefix: every request stays under the dataset's
prefix, and no object appears outside it).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import shardstore
from shardstore.errors import ShardStoreError
from shardstore.formats import bcolz, n5, precomputed, zarr3
from shardstore.store import MemoryStore, RecordingStore, Store, store_from_url

pytest_plugins = ["_servers", "_net_audit"]
pytestmark = pytest.mark.timeout(120)

if TYPE_CHECKING:
    from _servers import SeaweedFS

ESCAPES = ["../x", "a/../../x", "..", "s0/../../outside"]


def _precomputed(store: Any) -> None:
    a = precomputed.create(store, data_type="uint8", scales=[{"size": [8, 8, 4], "chunk_sizes": [[4, 4, 2]], "key": "s0"}])
    a[...] = 1


def _set_scale_key(store: Store, key: str) -> None:
    info = json.loads(shardstore._sync.sync(store.get("info")))
    info["scales"][0]["key"] = key
    shardstore._sync.sync(store.set("info", json.dumps(info).encode()))


def _attempts(store: Any) -> list[tuple[str, Callable[[], Any]]]:
    """What a user does with a volume: open it, read it, write it."""
    return [
        ("open", lambda: precomputed.open(store)),
        ("read", lambda: np.asarray(precomputed.open(store)[...])),
        ("write", lambda: precomputed.open(store, mode="r+").__setitem__(Ellipsis, 3)),
    ]


# -- local files ---------------------------------------------------------------------------

@pytest.fixture
def sandbox(tmp_path: Path) -> tuple[Path, Path]:
    """(root, outside): the dataset lives in root; outside is a sibling that must stay empty."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "info").write_text('{"secret": true}')
    return root, outside


def _untouched(outside: Path, tmp_path: Path) -> None:
    assert sorted(p.name for p in outside.iterdir()) == ["info"]
    assert (outside / "info").read_text() == '{"secret": true}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outside", "root"]


@pytest.mark.parametrize("key", [*ESCAPES, "ABSOLUTE"])
def test_precomputed_scale_key_cannot_escape_local(sandbox: tuple[Path, Path], tmp_path: Path, key: str) -> None:
    root, outside = sandbox
    if key == "ABSOLUTE":
        key = str(outside)
    store = store_from_url(str(root / "vol"), mode="w")
    _precomputed(store)
    _set_scale_key(store, key)
    for what, attempt in _attempts(str(root / "vol")):
        with pytest.raises(ShardStoreError) as info:
            attempt()
        assert key in str(info.value) and "info" in str(info.value), (what, str(info.value))
    _untouched(outside, tmp_path)


@pytest.mark.parametrize("path", ["../outside", "ds/../../outside", "..", "a//b", "./ds"])
def test_n5_dataset_path_cannot_escape(sandbox: tuple[Path, Path], tmp_path: Path, path: str) -> None:
    root, outside = sandbox
    n5.create(str(root / "c.n5"), "ds", shape=(4, 4), dtype="uint8", block_size=(2, 2))[...] = 5
    attempts = [
        lambda: n5.open(str(root / "c.n5"), path),
        lambda: n5.create(str(root / "c.n5"), path, shape=(2,), dtype="uint8"),
        lambda: shardstore.open(str(root / "c.n5"), path=path),
        lambda: n5.open_group(str(root / "c.n5"), mode="a").create_dataset(path, shape=(2,), dtype="uint8"),
    ]
    for attempt in attempts:
        with pytest.raises(ShardStoreError) as info:
            attempt()
        assert path.strip("/") in str(info.value)
    _untouched(outside, tmp_path)


@pytest.mark.parametrize("name", ["..", "../outside", "sub/../../outside", "a//b"])
def test_zarr_group_member_name_cannot_escape(sandbox: tuple[Path, Path], tmp_path: Path, name: str) -> None:
    root, outside = sandbox
    g = zarr3.open_group(str(root / "g.zarr"), mode="a")
    g.create_array("sub", shape=(2,), dtype="uint8")
    attempts = [
        lambda: g[name],
        lambda: g.create_array(name, shape=(2,), dtype="uint8"),
        lambda: g.create_group(name),
    ]
    for attempt in attempts:
        with pytest.raises(ShardStoreError) as info:
            attempt()
        assert repr(name.strip("/")) in str(info.value)
    _untouched(outside, tmp_path)
    # a '/' inside a name is a nested path below the group, as in zarr-python
    assert g.create_array("deep/er", shape=(2,), dtype="uint8").shape == (2,)
    assert (root / "g.zarr" / "deep" / "er" / "zarr.json").is_file()


@pytest.mark.parametrize("column", ["../../outside", "../x", "a/b", "/etc"])
def test_bcolz_column_name_cannot_escape(sandbox: tuple[Path, Path], tmp_path: Path, column: str) -> None:
    root, outside = sandbox
    t = bcolz.ctable({"a": np.arange(5), "b": np.arange(5.0)}, rootdir=str(root / "t"), mode="w")
    with pytest.raises(ShardStoreError) as info:
        t.addcol(np.arange(5), name=column)
    assert column in str(info.value)
    # a column name planted in the metadata (``__rootdirs__``) by someone else
    doc = json.loads((root / "t" / "__rootdirs__").read_text())
    doc["names"] = ["a", column]
    (root / "t" / "__rootdirs__").write_text(json.dumps(doc))
    for mode in ("r", "a"):
        with pytest.raises(ShardStoreError) as info:
            bcolz.open(str(root / "t"), mode=mode)
        assert column in str(info.value) and "__rootdirs__" in str(info.value)
    _untouched(outside, tmp_path)


def test_memory_store_same_errors() -> None:
    """The checks are in the drivers, not in the file system: a memory store gets the same."""
    store = MemoryStore()
    _precomputed(store)
    _set_scale_key(store, "../x")
    with pytest.raises(ShardStoreError, match=r"\.\./x"):
        precomputed.open(store)


# -- S3 ------------------------------------------------------------------------------------

def _s3_keys(server: SeaweedFS) -> set[str]:
    """Every object in the bucket."""
    whole = store_from_url(f"s3://{server.bucket}", mode="r", storage_options=server.storage_options())
    return set(shardstore._sync.sync(_collect(whole)))


async def _collect(store: Store) -> list[str]:
    return [k async for k in store.list_prefix("")]


@pytest.mark.parametrize("key", ["../x", "s0/../../other", ".."])
def test_precomputed_scale_key_cannot_escape_s3(seaweedfs: SeaweedFS, key: str) -> None:
    base = f"esc-{uuid.uuid4().hex[:10]}"
    # a dataset at base/vol and a neighbour at base/other that '..' would reach
    neighbour = store_from_url(seaweedfs.url(f"{base}/other"), mode="w", storage_options=seaweedfs.storage_options())
    _precomputed(neighbour)
    vol = store_from_url(seaweedfs.url(f"{base}/vol"), mode="w", storage_options=seaweedfs.storage_options())
    _precomputed(vol)
    _set_scale_key(vol, key)
    before = _s3_keys(seaweedfs)
    recorded = RecordingStore(store_from_url(seaweedfs.url(f"{base}/vol"), mode="r+",
                                             storage_options=seaweedfs.storage_options()))
    for what, attempt in _attempts(recorded):
        with pytest.raises(ShardStoreError) as info:
            attempt()
        assert key in str(info.value), (what, str(info.value))
    assert _s3_keys(seaweedfs) == before  # nothing written anywhere
    requested = {r.key for r in recorded.requests}
    assert "info" in requested  # the volume was looked at ...
    assert all(".." not in k.split("/") and not k.startswith("/") for k in requested), requested  # ... only there


def test_zarr_and_n5_names_cannot_escape_s3(seaweedfs: SeaweedFS) -> None:
    base = f"esc-{uuid.uuid4().hex[:10]}"
    opts = seaweedfs.storage_options()
    g = zarr3.open_group(seaweedfs.url(f"{base}/g"), mode="a", storage_options=opts)
    before = _s3_keys(seaweedfs)
    for attempt in (lambda: g.create_array("../evil", shape=(2,), dtype="uint8"), lambda: g[".."],
                    lambda: n5.create(seaweedfs.url(f"{base}/c"), "../evil", shape=(2,), dtype="uint8",
                                      storage_options=opts)):
        with pytest.raises(ShardStoreError, match="evil|'..'"):
            attempt()
    assert _s3_keys(seaweedfs) == before
    assert not any("evil" in k for k in before)
