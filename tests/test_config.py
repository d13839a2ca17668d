"""``shardstore.IOConfig``: one value for every tuning knob, passed at open/create.

Defaults, the ``SHARDSTORE_<FIELD>`` environment overrides, that a config given at open or
create reaches the array, its layout, the sharding adapters and the stores built from a URL
and changes what they do, pickling, and that importing or using shardstore changes no
process-wide setting (numcodecs' blosc threading, the glibc allocator).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import shardstore
from shardstore import IOConfig
from shardstore.config import ENV_VARS, default_config
from shardstore.errors import CodecError, ConfigError
from shardstore.store import registry
from shardstore.store.base import ByteRange, Store
from shardstore.store.local import LocalStore
from shardstore.store.memory import MemoryStore
from shardstore.store.wrappers import AsyncOnlyStore

# -- the value ------------------------------------------------------------------------------


def test_defaults_are_the_tuned_values_and_documented() -> None:
    c = IOConfig()
    assert (c.write_groups_in_flight, c.write_batch_chunks, c.read_groups_in_flight, c.small_read_chunks) == (2, 16, 8, 64)
    assert c.native is True and c.malloc_tuning is False
    assert c.max_concurrency is None and c.retry_conflicts is None  # each store keeps its own default
    assert c.read_attempts == 32 and c.bcolz_writer_wait == 10.0
    # a store made without a config behaves as the defaults say
    store = LocalStore("/tmp/never-created-by-this-test", read_only=True)
    assert (store.write_jobs, store.inline_read_bytes, store.parallel_unlink_files) == (
        c.local_write_jobs, c.local_inline_read_bytes, c.local_parallel_unlink_files)
    # every field has a comment in the class body (the README table is built from the same names)
    source = Path(shardstore.config.__file__).read_text()
    for f in dataclasses.fields(IOConfig):
        assert f"    {f.name}:" in source
        assert f.name in Path(__file__).parents[1].joinpath("README.md").read_text(), f"README lacks {f.name}"


def test_frozen_picklable_and_replace_friendly() -> None:
    c = IOConfig(native=False, read_attempts=3, codec_threads=4)
    assert pickle.loads(pickle.dumps(c)) == c
    assert hash(c) == hash(IOConfig(native=False, read_attempts=3, codec_threads=4))
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.native = True  # type: ignore[misc]
    d = dataclasses.replace(c, read_attempts=5)
    assert (d.read_attempts, d.native, c.read_attempts) == (5, False, 3)
    assert c.replace(native=True) == IOConfig(read_attempts=3, codec_threads=4)


@pytest.mark.parametrize("changes, message", [
    ({"io_threads": 0}, "io_threads must be positive"),
    ({"read_attempts": -1}, "read_attempts must be positive"),
    ({"native": 1}, "native must be True or False"),
    ({"write_batch_chunks": 2.5}, "write_batch_chunks must be a int"),
    ({"inline_item_seconds": "fast"}, "inline_item_seconds must be a float"),
    ({"local_inline_read_bytes": -5}, "must be >= 0"),
])
def test_invalid_fields_raise_config_error(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        IOConfig(**changes)
    assert issubclass(ConfigError, ValueError) and issubclass(ConfigError, shardstore.ShardStoreError)


# -- environment overrides ----------------------------------------------------------------------


def test_every_field_has_one_environment_variable() -> None:
    assert set(ENV_VARS.values()) == {f.name for f in dataclasses.fields(IOConfig)}
    # the names the library always answered to keep working
    assert ENV_VARS["SHARDSTORE_NATIVE"] == "native"
    assert ENV_VARS["SHARDSTORE_MALLOC_TUNING"] == "malloc_tuning"


def test_from_env_parses_each_kind() -> None:
    env = {"SHARDSTORE_NATIVE": "0", "SHARDSTORE_MALLOC_TUNING": "yes", "SHARDSTORE_IO_THREADS": "4",
           "SHARDSTORE_INLINE_ITEM_SECONDS": "2e-4", "SHARDSTORE_CODEC_THREADS": "none",
           "SHARDSTORE_LOCAL_INLINE_READ_BYTES": "0x100000", "UNRELATED": "1"}
    c = IOConfig.from_env(env)
    assert (c.native, c.malloc_tuning, c.io_threads, c.inline_item_seconds, c.codec_threads) == (False, True, 4, 2e-4, None)
    assert c.local_inline_read_bytes == 1 << 20
    assert IOConfig.from_env({}) == IOConfig()
    assert IOConfig.from_env({"SHARDSTORE_READ_ATTEMPTS": "7"}, native=False) == IOConfig(read_attempts=7, native=False)


@pytest.mark.parametrize("name, raw", [("SHARDSTORE_NATIVE", "maybe"), ("SHARDSTORE_IO_THREADS", "many"),
                                       ("SHARDSTORE_IO_THREADS", "0"), ("SHARDSTORE_READ_ATTEMPTS", "none")])
def test_bad_environment_values_name_the_variable(name: str, raw: str) -> None:
    with pytest.raises(ConfigError, match=name.lower().removeprefix("shardstore_") if raw == "0" else name):
        IOConfig.from_env({name: raw})


def test_the_environment_changes_the_default_and_an_explicit_config_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHARDSTORE_NATIVE", "0")
    monkeypatch.setenv("SHARDSTORE_READ_ATTEMPTS", "9")
    assert default_config() == IOConfig(native=False, read_attempts=9)
    a = shardstore.zarr3.create("memory://", shape=(8,), dtype="u1", chunks=(4,), shards=(8,))
    assert (a.config.native, a.config.read_attempts, a.driver.layout.store.read_attempts) == (False, 9, 9)
    explicit = IOConfig()
    b = shardstore.zarr3.create("memory://", shape=(8,), dtype="u1", chunks=(4,), config=explicit)
    assert b.config is explicit and b.config.native is True
    with pytest.raises(TypeError, match="IOConfig"):
        default_config({"native": False})  # type: ignore[arg-type]


def test_the_environment_default_is_made_once_per_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # (made at every open and create: arrays opened under one environment share it, and a
    # changed variable, or one removed, is seen by the next open)
    monkeypatch.setenv("SHARDSTORE_READ_ATTEMPTS", "5")
    first = default_config()
    assert default_config() is first and first.read_attempts == 5
    monkeypatch.setenv("SHARDSTORE_READ_ATTEMPTS", "6")
    assert default_config().read_attempts == 6
    monkeypatch.delenv("SHARDSTORE_READ_ATTEMPTS")
    assert default_config().read_attempts == IOConfig().read_attempts
    monkeypatch.setenv("SHARDSTORE_READ_ATTEMPTS", "5")
    assert default_config() == first


# -- reaching the array, its layout and its stores ---------------------------------------------


def _create_every_format(root: Path, config: IOConfig) -> dict[str, shardstore.Array]:
    vol = np.arange(16 * 16 * 16, dtype="u2").reshape(16, 16, 16)
    arrays = {
        "zarr3": shardstore.create(root / "z", shape=vol.shape, dtype="u2", chunks=(8,) * 3, shards=(16,) * 3, config=config),
        "n5": shardstore.n5.create(root / "n", shape=vol.shape, dtype="u2", block_size=(8,) * 3, config=config),
        "precomputed": shardstore.precomputed.create(
            root / "p", data_type="uint16", config=config,
            scales=[{"size": [16, 16, 16], "chunk_sizes": [[8, 8, 8]],
                     "sharding": {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 0, "hash": "identity",
                                  "minishard_bits": 1, "shard_bits": 1, "minishard_index_encoding": "raw",
                                  "data_encoding": "raw"}}]),
        "bcolz": shardstore.bcolz.carray(vol.reshape(-1), rootdir=root / "b", chunklen=512, config=config),
    }
    for name, a in arrays.items():
        a[...] = vol.reshape(-1) if name == "bcolz" else vol[..., None] if name == "precomputed" else vol
    return arrays


def test_create_and_open_of_every_format_pass_the_config_down(tmp_path: Path) -> None:
    config = IOConfig(read_attempts=5, retry_conflicts=3, local_write_jobs=2, native=False)
    created = _create_every_format(tmp_path, config)
    for name, a in created.items():
        assert a.config is config, name
        assert a.driver.layout.config is config, name
    assert created["zarr3"].driver.layout.store.read_attempts == 5  # the sharding adapter
    assert created["precomputed"].driver.layout.store.read_attempts == 5
    for sub in ("z", "n", "p", "b"):
        for opened in (shardstore.open(tmp_path / sub, config=config), shardstore.open(tmp_path / sub, mode="r+", config=config)):
            assert opened.config is config and opened.driver.layout.config is config, sub
    # the store built from the path took the store-level fields
    base = shardstore.open(tmp_path / "n", mode="r+", config=config).driver.layout.store
    assert isinstance(base, LocalStore) and (base.retry_conflicts, base.write_jobs) == (3, 2)
    # without a config: the defaults (the environment's)
    assert shardstore.open(tmp_path / "z").config == IOConfig.from_env()


def test_groups_hand_their_config_to_children(tmp_path: Path) -> None:
    config = IOConfig(read_attempts=4)
    g = shardstore.zarr3.create_group(tmp_path / "g", config=config)
    a = g.create_array("a", shape=(4,), dtype="u1", chunks=(2,))
    assert a.config is config and shardstore.zarr3.open_group(tmp_path / "g", config=config)["a"].config is config
    n = shardstore.n5.create_group(tmp_path / "c.n5", config=config)
    d = n.create_dataset("d", shape=(4,), dtype="u1", block_size=(2,))
    assert d.config is config and n["d"].config is config
    t = shardstore.bcolz.ctable({"x": np.arange(5), "y": np.ones(5)}, rootdir=tmp_path / "t", config=config)
    t.addcol(np.zeros(5), name="z")
    assert {c.config for c in t.cols.values()} == {config}


def test_storage_options_given_explicitly_win_over_the_config(tmp_path: Path) -> None:
    store = registry.store_from_url("memory://", mode="w", config=IOConfig(max_concurrency=3, retry_conflicts=4,
                                                                           coalesce_max_gap=10, coalesce_max_request=99))
    assert (store.max_concurrency, store.retry_conflicts, store.coalesce_max_gap, store.coalesce_max_request) == (3, 4, 10, 99)
    kept = registry.store_from_url("memory://", mode="w", config=IOConfig())
    assert (kept.max_concurrency, kept.coalesce_max_gap) == (MemoryStore.max_concurrency, None)  # None: the store's own
    given = MemoryStore()
    assert registry.store_from_url(given, config=IOConfig(max_concurrency=3)) is given
    assert given.max_concurrency == Store.max_concurrency  # a Store passed in keeps its settings


class _CountingStore(MemoryStore):
    """A memory store read through the generic (semaphore-bounded) ``get_many``, counting how
    many reads are in flight at once; no synchronous reads declared, so every read takes that path."""

    def __init__(self) -> None:
        super().__init__()
        self.in_flight = 0
        self.most = 0

    async def get_many(self, requests: Sequence[tuple[str, ByteRange | None]]) -> list[bytes | None]:
        return await Store.get_many(self, requests)

    async def _get(self, key: str, byte_range: ByteRange | None) -> bytes | None:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await asyncio.sleep(0.002)  # every read of a batch is started before the first ends
            return await super()._get(key, byte_range)
        finally:
            self.in_flight -= 1

    @property
    def sync_reads(self) -> None:  # type: ignore[override]
        return None  # declared unsupported: reads take the event-loop runner


@pytest.mark.parametrize("limit", [1, 3])
def test_a_concurrency_limit_given_at_open_bounds_the_reads_in_flight(monkeypatch: pytest.MonkeyPatch, limit: int) -> None:
    made: list[_CountingStore] = []

    def factory(url: str, read_only: bool, options: Mapping[str, Any]) -> Store:
        made.append(_CountingStore())
        return made[-1]

    monkeypatch.setitem(registry._FACTORIES, "counting", factory)
    a = shardstore.open("counting://x", mode="w", shape=(64,), dtype="u1", chunks=(4,), config=IOConfig(max_concurrency=limit))
    a[...] = np.arange(64, dtype="u1")
    store = made[0]
    assert store.max_concurrency == limit
    store.most = 0
    np.testing.assert_array_equal(a[...], np.arange(64, dtype="u1"))  # 16 chunks in one read
    assert store.most == limit  # reached, never exceeded


def test_a_small_varlength_limit_refuses_large_n5_blocks(tmp_path: Path) -> None:
    a = shardstore.n5.create(tmp_path / "c.n5", "d", shape=(64,), dtype="u1", block_size=(64,))
    a.write_varlength_block((0,), np.arange(200, dtype="u1"))
    np.testing.assert_array_equal(a.read_varlength_block((0,)), np.arange(200, dtype="u1"))
    small = shardstore.n5.open(tmp_path / "c.n5", path="d", config=IOConfig(max_varlength_nbytes=100))
    with pytest.raises(CodecError):
        small.read_varlength_block((0,))


def test_native_switch_reaches_the_layout_from_config_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    a = shardstore.zarr3.create("memory://", shape=(8,), dtype="u1", chunks=(4,), config=IOConfig(native=False))
    assert a.driver.layout.config.native is False
    monkeypatch.setenv("SHARDSTORE_NATIVE", "0")
    assert shardstore.zarr3.create("memory://", shape=(8,), dtype="u1", chunks=(4,)).driver.layout.config.native is False


# -- no process-wide side effects ---------------------------------------------------------------

_SIDE_EFFECTS = """
import numcodecs.blosc as blosc
before = blosc.use_threads
import numpy as np
import shardstore
from shardstore import _malloc
a = shardstore.zarr3.create("memory://", shape=(64, 64), dtype="u2", chunks=(32, 32), shards=(64, 64),
                            codecs=[{"name": "bytes", "configuration": {"endian": "little"}},
                                    {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle"}}])
a[...] = np.arange(64 * 64, dtype="u2").reshape(64, 64)
assert int(a[...].sum()) == sum(range(64 * 64))
print(before, blosc.use_threads, _malloc._done)
"""


def test_importing_and_using_shardstore_changes_no_process_wide_setting() -> None:
    env = {k: v for k, v in os.environ.items() if k != "SHARDSTORE_MALLOC_TUNING"}
    out = subprocess.run([sys.executable, "-c", _SIDE_EFFECTS], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["None", "None", "False"]


def test_the_server_takes_its_streaming_and_discovery_limits_from_the_config(tmp_path: Path) -> None:
    from shardstore.serve.app import Server

    for name in ("a", "b/c"):
        shardstore.zarr3.create(tmp_path / name / "v.zarr", shape=(4,), dtype="u1", chunks=(2,))
    config = IOConfig(serve_stream_threshold_bytes=16, serve_stream_block_bytes=7)
    server = Server(tmp_path, port=0, config=config)
    assert (server.source.stream_threshold, server.source.stream_block) == (16, 7)
    assert [d.path for d in server.datasets] == ["a/v.zarr", "b/c/v.zarr"]
    # the walk stops after the configured number of directories (root, a, b: c not reached)
    assert [d.path for d in Server(tmp_path, port=0, config=IOConfig(discover_max_dirs=3)).datasets] == []
    assert [d.path for d in Server(tmp_path, port=0, config=IOConfig(discover_max_dirs=4)).datasets] == ["a/v.zarr"]


def test_verify_opens_with_the_config_and_batches_by_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from shardstore.ops import integrity

    a = shardstore.n5.create(tmp_path / "c.n5", "d", shape=(64,), dtype="u1", block_size=(4,))
    a[...] = np.arange(64, dtype="u1")
    batches: list[int] = []
    seen: list[IOConfig] = []
    scan_array = integrity._scan_array

    def spy_scan(arr: Any, name: str, progress: Any) -> Any:
        seen.append(arr.config)
        store = arr.driver.layout.store
        original = store.get_many

        async def counting(requests: Sequence[tuple[str, ByteRange | None]]) -> list[bytes | None]:
            batches.append(len(requests))
            return await original(requests)

        monkeypatch.setattr(store, "get_many", counting)
        return scan_array(arr, name, progress)

    monkeypatch.setattr(integrity, "_scan_array", spy_scan)
    config = IOConfig(verify_batch_chunks=5)
    report = integrity.scan(tmp_path / "c.n5", config=config)
    assert not report.problems and seen == [config]
    assert batches == [5] * 3 + [1]  # 16 blocks in batches of 5


def test_codec_and_io_pools_are_sized_by_the_config() -> None:
    from shardstore import _sync

    assert _sync.codec_pool_size(3) == 3 and _sync.codec_pool(3) is _sync.codec_pool(3)
    assert _sync.codec_pool_size() == max(os.cpu_count() or 1, 2)
    assert _sync.io_pool(5)._max_workers == 5 and _sync.io_pool()._max_workers == IOConfig().io_threads
    store = registry.store_from_url("memory://", mode="w", config=IOConfig(codec_threads=3))
    assert store.codec_threads == 3


def test_a_pickled_config_carries_only_its_changed_fields() -> None:
    import pickle

    from shardstore import IOConfig

    default = pickle.dumps(IOConfig())
    changed = IOConfig(read_groups_in_flight=3, native=False)
    assert pickle.loads(pickle.dumps(changed)) == changed
    assert pickle.loads(default) == IOConfig()
    assert len(default) < 100 and len(pickle.dumps(changed)) < len(default) + 80


# -- the core reads its limits and thresholds from the layout's config ---------------------------


class _InFlightStore(AsyncOnlyStore):
    """``base`` on the async runner (no synchronous reads or writes declared), counting the
    ``get_many`` / ``update_many`` batches in flight at once: each waits on the loop before it
    goes on, so every batch the core lets start is started before the first one ends."""

    def __init__(self, base: Store) -> None:
        super().__init__(base)
        self.now = self.most = 0

    async def _counted(self, run: Any) -> Any:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            await asyncio.sleep(0.002)
            return await run
        finally:
            self.now -= 1

    async def get_many(self, requests: Sequence[tuple[str, ByteRange | None]]) -> list[bytes | None]:
        return await self._counted(super().get_many(requests))  # type: ignore[no-any-return]

    async def update_many(self, items: Sequence[tuple[str, Any]]) -> None:
        await self._counted(super().update_many(items))


@pytest.mark.parametrize("limit", [1, 3])
def test_read_and_write_groups_in_flight_bound_the_async_runner(limit: int) -> None:
    # one chunk per group (write_batch_chunks=1): 16 groups of an unsharded 64-element array
    config = IOConfig(write_batch_chunks=1, small_read_chunks=0, read_groups_in_flight=limit, write_groups_in_flight=limit)
    store = _InFlightStore(MemoryStore())
    a = shardstore.zarr3.create(store, shape=(64,), dtype="u1", chunks=(4,), config=config)
    assert a.driver.layout.store.sync_reads is None and a.driver.layout.config is config
    data = np.arange(1, 65, dtype="u1")
    a[...] = data
    assert store.most == limit  # reached, never exceeded
    store.most = 0
    np.testing.assert_array_equal(a[...], data)
    assert store.most == limit
    # a read of at most small_read_chunks chunks fetches every group at once, unbounded
    b = shardstore.zarr3.open(store, config=config.replace(small_read_chunks=16))
    store.most = 0
    np.testing.assert_array_equal(b[...], data)
    assert store.most == 16


def _scatter_threads(monkeypatch: pytest.MonkeyPatch, seconds: float = 0.0) -> list[int]:
    """The threads that run the core's chunk decodes (``core.io._scatter``) from now on;
    ``seconds``: each batch is made to take that long more (off the GIL)."""
    import time

    from shardstore.core import io

    seen: list[int] = []
    real = io._scatter

    def spy(batch: list, *args: Any) -> list:
        seen.append(threading.get_ident())
        time.sleep(seconds)
        return real(batch, *args)

    monkeypatch.setattr(io, "_scatter", spy)
    return seen


def _zstd_array(store: Store, config: IOConfig) -> shardstore.Array:
    a = shardstore.zarr3.create(store, shape=(64, 64), dtype="u2", chunks=(8, 8), config=config,
                                codecs=[{"name": "bytes", "configuration": {"endian": "little"}},
                                        {"name": "zstd", "configuration": {"level": 1}}])
    a[...] = np.arange(64 * 64, dtype="u2").reshape(64, 64)
    return a


def test_thread_thresholds_keep_blocking_reads_inline_or_send_them_to_the_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = np.arange(64 * 64, dtype="u2").reshape(64, 64)
    inline = _zstd_array(MemoryStore(), IOConfig(thread_item_seconds=1e9))
    pooled = _zstd_array(MemoryStore(), IOConfig(thread_item_seconds=0.0, thread_work_seconds=0.0,
                                                 waiting_item_seconds=1e9, codec_threads=2))
    seen = _scatter_threads(monkeypatch)
    np.testing.assert_array_equal(inline[...], expected)  # 64 chunks, on the blocking runner
    assert seen and set(seen) == {threading.get_ident()}  # every batch on the calling thread
    assert set(inline.driver.layout.threads_memo.values()) == {"inline"}
    np.testing.assert_array_equal(pooled[...], expected)
    assert set(pooled.driver.layout.threads_memo.values()) == {"codec"}


def test_inline_item_seconds_keeps_async_decodes_on_the_loop_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = np.arange(64 * 64, dtype="u2").reshape(64, 64)
    inline = _zstd_array(AsyncOnlyStore(MemoryStore()), IOConfig(inline_item_seconds=1e9))
    spread = _zstd_array(AsyncOnlyStore(MemoryStore()), IOConfig(inline_item_seconds=0.0, codec_threads=2))
    # (batches of a few ms: a codec thread that starts late still finds some left, as real
    # decodes would leave it; with 64 tiny chunks the loop's thread could take them all first)
    seen = _scatter_threads(monkeypatch, seconds=2e-3)
    np.testing.assert_array_equal(inline[...], expected)
    assert len(set(seen)) == 1  # the event loop's thread alone
    seen.clear()
    np.testing.assert_array_equal(spread[...], expected)
    assert len(set(seen)) == 2  # the loop's thread and one of the two codec threads


def test_native_false_makes_reads_and_writes_skip_the_native_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from shardstore.core import rawread, rawwrite

    real = rawread._rawio
    if real is None or not hasattr(real, "write_boxes"):
        pytest.skip("the C extension is not built")
    calls = {"read_boxes": 0, "write_boxes": 0}

    class Module:
        set_libdeflate = staticmethod(real.set_libdeflate)

        @staticmethod
        def read_boxes(*args: Any) -> Any:
            calls["read_boxes"] += 1
            return real.read_boxes(*args)

        @staticmethod
        def write_boxes(*args: Any) -> Any:
            calls["write_boxes"] += 1
            return real.write_boxes(*args)

    monkeypatch.setattr(rawread, "_rawio", Module)
    monkeypatch.setattr(rawwrite, "_rawio", Module)
    data = np.arange(32 * 32, dtype="u2").reshape(32, 32)
    for native in (True, False):
        a = shardstore.n5.create(tmp_path / f"{native}.n5", "d", shape=(32, 32), dtype="u2", block_size=(16, 16),
                                 compression={"type": "raw"}, config=IOConfig(native=native))
        before = dict(calls)
        a[...] = data
        np.testing.assert_array_equal(a[...], data)
        used = {k: calls[k] - before[k] for k in calls}
        # (how many native calls a read or write makes depends on how it spreads over threads)
        assert all(n > 0 for n in used.values()) if native else not any(used.values()), (native, used)
    # chunks larger than native_max_chunk_bytes (16 x 16 x 2 bytes here) always take the Python path
    small = shardstore.n5.open(tmp_path / "True.n5", path="d", config=IOConfig(native_max_chunk_bytes=511))
    before = dict(calls)
    np.testing.assert_array_equal(small[...], data)
    assert calls == before
    assert rawread.raw_reader(dataclasses.replace(small.driver.layout, config=IOConfig(native_max_chunk_bytes=512)),
                              np.empty((32, 32), "u2")) is not None
