"""Every shardstore node pickles as how to open it again (issue 19 point 1): zarr3 (sharded and
not), N5, precomputed (a non-default scale, and sharded), bcolz carray / ctable, the uint64 kv
store and groups round-trip through ``pickle`` and ``cloudpickle`` into a fresh ``spawn``
process, where they read the same data and write back; what travels is a few hundred bytes
that name only shardstore's reopen functions (no loop, thread, lock or cache). Memory arrays
refuse with ``NotPicklableError``."""

from __future__ import annotations

import hashlib
import io
import multiprocessing
import pickle
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import cloudpickle
import numpy as np
import pytest

import shardstore
from shardstore.errors import NotPicklableError, ShardStoreError

if TYPE_CHECKING:
    from _servers import SeaweedFS

pytest_plugins = ["_servers"]

#: what a pickled node may name: the reopen functions and the picklable store wrappers
ALLOWED_GLOBALS = {
    ("shardstore._reopen", "reopen"),
    ("shardstore._reopen", "NodeRecord"),
    ("shardstore.store.registry", "reopen_store"),
    ("shardstore.store.wrappers", "PrefixStore"),
    ("shardstore.formats.precomputed.nodes", "open"),
    ("shardstore.formats.bcolz.nodes", "reopen"),
    ("shardstore.config", "_from_changes"),  # the array's IOConfig travels with the record (changed fields only)
}
MAX_PICKLE_BYTES = 1024

SHARDING = {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 1, "hash": "murmurhash3_x86_128",
            "minishard_bits": 1, "shard_bits": 2, "minishard_index_encoding": "gzip", "data_encoding": "raw"}


def _data(shape: tuple[int, ...], dtype: str = "uint16") -> np.ndarray:
    return (np.arange(int(np.prod(shape))).reshape(shape) * 3 % 251).astype(dtype)


# -- the nodes: each builder writes a node under ``root`` and returns it, opened ----------------
def _zarr3_sharded(root: Path) -> Any:
    a = shardstore.zarr3.create(root / "z", shape=(20, 30), dtype="uint16", chunks=(5, 5), shards=(10, 15))
    a[...] = _data((20, 30))
    return a


def _zarr3_plain_read_only(root: Path) -> Any:
    a = shardstore.zarr3.create(root / "g", path="sub/arr", shape=(9, 7), dtype="float32", chunks=(4, 4))
    a[...] = _data((9, 7), "float32")
    return shardstore.open(root / "g", path="sub/arr")  # mode "r": reopens read-only


def _n5(root: Path) -> Any:
    a = shardstore.n5.create(root / "n5", "group/ds", shape=(12, 10), dtype="int32", block_size=(5, 4))
    a[...] = _data((12, 10), "int32")
    return shardstore.n5.open(root / "n5", "r+", path="group/ds")


def _precomputed_scale1(root: Path) -> Any:
    shardstore.precomputed.create(root / "p", data_type="uint8", scales=[
        {"size": [16, 12, 4]}, {"size": [8, 6, 2], "resolution": [2, 2, 2], "encoding": "png"}], num_channels=2)
    a = shardstore.precomputed.open(root / "p", "r+", scale=1, png_level=3)
    a[...] = _data((8, 6, 2, 2), "uint8")
    return a


def _precomputed_sharded(root: Path) -> Any:
    a = shardstore.precomputed.create(root / "ps", data_type="uint16", scales=[
        {"size": [16, 16, 4], "chunk_size": [4, 4, 4], "sharding": SHARDING}])
    a[...] = _data((16, 16, 4, 1))
    return a


def _carray(root: Path) -> Any:
    ca = shardstore.bcolz.carray(_data((5000,), "int64"), rootdir=str(root / "ca"), chunklen=1000)
    ca.append(np.arange(7))  # still in memory: pickling flushes it
    return ca


def _ctable(root: Path) -> Any:
    return shardstore.bcolz.ctable({"a": np.arange(50), "b": np.linspace(0, 1, 50)}, rootdir=str(root / "ct"))


def _kv(root: Path) -> Any:
    kv = shardstore.precomputed.open_kv(root / "kv", SHARDING, mode="w")
    kv.update({i * 7: f"value {i}".encode() for i in range(40)})
    return kv


def _zarr3_group(root: Path) -> Any:
    g = shardstore.open_group(root / "zg", mode="a")
    g.create_array("x", shape=(4,), dtype="uint8", chunks=(2,))
    return g


BUILDERS: dict[str, Callable[[Path], Any]] = {
    "zarr3-sharded": _zarr3_sharded,
    "zarr3-unsharded-read-only": _zarr3_plain_read_only,
    "n5": _n5,
    "precomputed-scale-1": _precomputed_scale1,
    "precomputed-sharded": _precomputed_sharded,
    "bcolz-carray": _carray,
    "bcolz-ctable": _ctable,
    "uint64-kv": _kv,
    "zarr3-group": _zarr3_group,
}


def _digest(data: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(data).tobytes()).hexdigest()


# -- what both sides compare, and what the child writes -----------------------------------------
def summary(node: Any) -> dict[str, Any]:
    """A node's identity and content, comparable across processes."""
    if isinstance(node, shardstore.Array):
        data = np.asarray(node)
        return {"type": type(node).__name__, "format": node.format, "shape": node.shape, "dtype": str(node.dtype),
                "read_only": node.read_only, "sha": _digest(data), "repr": repr(node)}
    if isinstance(node, shardstore.bcolz.CTable):
        return {"type": "CTable", "names": list(node.names), "len": len(node),
                "sha": _digest(node[:]), "read_only": node.read_only}
    if isinstance(node, shardstore.Group):
        return {"type": "Group", "keys": node.keys(), "read_only": node.read_only}
    return {"type": type(node).__name__, "items": sorted(node.items()), "read_only": node.read_only}


def write_marker(node: Any) -> None:
    if isinstance(node, shardstore.Array):
        node[(0,) * node.ndim] = 42
    elif isinstance(node, shardstore.bcolz.CTable):
        node.cols["a"][0] = 42
    elif isinstance(node, shardstore.Group):
        node.create_group("from_child")
    else:
        node[999] = b"from child"


def marker_written(node: Any) -> bool:
    if isinstance(node, shardstore.Array):
        return bool(node[(0,) * node.ndim] == 42)
    if isinstance(node, shardstore.bcolz.CTable):
        return bool(node.cols["a"][0] == 42)
    if isinstance(node, shardstore.Group):
        return "from_child" in node
    return bool(node.get(999) == b"from child")


def child(payload: bytes) -> dict[str, Any]:
    """Runs in a spawned process: unpickle, describe, write if writable."""
    node = pickle.loads(payload)
    out = summary(node)
    if not node.read_only:
        write_marker(node)
        if hasattr(node, "flush"):
            node.flush()
    return out


@pytest.fixture(scope="module")
def spawned() -> Iterator[Any]:
    """One fresh interpreter (``spawn``: nothing inherited from this one)."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        yield pool


def _globals_named(payload: bytes) -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()

    class Recording(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            found.add((module, name))
            return super().find_class(module, name)

    Recording(io.BytesIO(payload)).load()
    return found


def _reopen_fresh(node: Any) -> Any:
    """The node as a new handle here, to read what the child wrote."""
    return pickle.loads(pickle.dumps(node))


@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps], ids=["pickle", "cloudpickle"])
@pytest.mark.parametrize("kind", list(BUILDERS))
def test_node_round_trips_into_a_spawned_process(kind: str, dumps: Callable[[Any], bytes], tmp_path: Path,
                                                  spawned: Any) -> None:
    node = BUILDERS[kind](tmp_path)
    payload = dumps(node)
    assert len(payload) <= MAX_PICKLE_BYTES, f"{kind}: {len(payload)} bytes pickled: more than a reopen record"
    assert _globals_named(payload) <= ALLOWED_GLOBALS
    expected = summary(_reopen_fresh(node))
    assert pickle.loads(payload) is not node
    assert summary(pickle.loads(payload)) == expected
    assert spawned.apply(child, (payload,)) == expected
    if not node.read_only:
        assert marker_written(_reopen_fresh(node)), f"{kind}: the child's write did not land"


def test_created_array_reopens_writable_opened_read_only_stays_read_only(tmp_path: Path) -> None:
    a = _zarr3_sharded(tmp_path)
    assert a.node_record().mode == "r+" and not pickle.loads(pickle.dumps(a)).read_only
    r = shardstore.open(tmp_path / "z")
    assert pickle.loads(pickle.dumps(r)).read_only
    with pytest.raises(shardstore.ReadOnlyError):
        pickle.loads(pickle.dumps(r))[0, 0] = 1


def test_precomputed_keeps_scale_and_writer_options(tmp_path: Path) -> None:
    a = pickle.loads(pickle.dumps(_precomputed_scale1(tmp_path)))
    assert a.shape == (8, 6, 2, 2) and a.driver.index == 1
    assert a.driver.options.png_level == 3


def test_relative_path_reopens_from_another_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    a = shardstore.zarr3.create("rel", shape=(4,), dtype="uint8", chunks=(2,))
    a[...] = [1, 2, 3, 4]
    payload = pickle.dumps(a)
    monkeypatch.chdir(tmp_path.parent)
    np.testing.assert_array_equal(pickle.loads(payload)[...], [1, 2, 3, 4])


def test_memory_arrays_refuse_to_pickle_with_a_clear_error() -> None:
    a = shardstore.zarr3.create("memory://", shape=(4,), dtype="uint8", chunks=(2,))
    for dumps in (pickle.dumps, cloudpickle.dumps):
        with pytest.raises(NotPicklableError, match="memory") as e:
            dumps(a)
        assert isinstance(e.value, (ShardStoreError, TypeError))
    ca = shardstore.bcolz.carray(np.arange(10))  # no rootdir: in memory
    with pytest.raises(NotPicklableError):
        pickle.dumps(ca)


def test_store_built_by_hand_refuses_but_local_and_prefix_stores_pickle(tmp_path: Path) -> None:
    from shardstore.store.wrappers import PrefixStore, RecordingStore

    local = shardstore.LocalStore(tmp_path / "s")
    sync_set = shardstore.zarr3.create(PrefixStore(local, "deep/er"), shape=(3,), dtype="uint8", chunks=(3,))
    sync_set[...] = [5, 6, 7]
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(sync_set))[...], [5, 6, 7])
    with pytest.raises(NotPicklableError, match="not opened from a path or URL"):
        pickle.dumps(RecordingStore(local))


def test_pickling_reads_metadata_again(tmp_path: Path) -> None:
    """A reopened array describes the data as it is when unpickled (a resize shows)."""
    a = _zarr3_sharded(tmp_path)
    payload = pickle.dumps(a)
    a.resize(40, 30)
    assert pickle.loads(payload).shape == (40, 30)


def test_s3_array_round_trips_into_a_spawned_process(seaweedfs: SeaweedFS, spawned: Any) -> None:
    where, opts = seaweedfs.url(f"pickle-{uuid.uuid4().hex[:8]}/z"), seaweedfs.storage_options()
    a = shardstore.zarr3.create(where, shape=(20, 30), dtype="uint16", chunks=(5, 5), shards=(10, 15),
                                storage_options=opts)
    a[...] = _data((20, 30))
    payload = cloudpickle.dumps(a)
    assert len(payload) <= MAX_PICKLE_BYTES and _globals_named(payload) <= ALLOWED_GLOBALS
    expected = summary(_reopen_fresh(a))
    assert spawned.apply(child, (payload,)) == expected
    assert shardstore.open(where, storage_options=opts)[0, 0] == 42


def test_group_children_and_table_columns_pickle(tmp_path: Path) -> None:
    g = _zarr3_group(tmp_path)
    child_array = pickle.loads(pickle.dumps(g["x"]))
    assert child_array.shape == (4,) and not child_array.read_only
    t = _ctable(tmp_path)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(t.cols["a"]))[:], np.arange(50))
