"""Formats on remote stores, against real servers: SeaweedFS (S3) and nginx (HTTP ranges).

Per format: a round trip through ``s3://`` URLs with ``storage_options``; request counts as
the server received them (a counting proxy in front of SeaweedFS; nginx's access log):
cold point read, warm point read, adjacent inner chunks in one ranged GET, a whole-shard
write in one PUT; interop with tensorstore's s3 kvstore both ways; reads over nginx; and a
conditional shard rewrite that loses a race (ConflictError, or a retry when asked for).

Adding a format = one ``RemoteFormat`` entry in ``FORMATS`` (its writer, its tensorstore
driver spec, and its request budgets); every test here is parametrized over that table.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import shardstore
from shardstore.errors import ConflictError, StoreError
from shardstore.store import store_from_url

pytest_plugins = ["_servers"]
pytestmark = pytest.mark.timeout(180)

if TYPE_CHECKING:
    from _servers import CountingProxy, FaultyServer, Nginx, SeaweedFS


@dataclass(frozen=True)
class RemoteFormat:
    """How a format is written and read in these tests (one entry per format)."""

    name: str
    #: create the array at ``url`` (a Store or URL) with ``storage_options``; ``shape`` /
    #: ``shard`` / ``chunk`` are cubes' edges; returns the open Array
    create: Callable[..., Any]
    #: the tensorstore driver spec over a kvstore dict, or None when there is no interop test
    ts_spec: Callable[[dict[str, Any]], dict[str, Any]] | None
    cold_gets: int = 2  # point read from a cold index cache
    warm_gets: int = 1  # ... and with the shard index cached


def _zarr3_create(url: Any, storage_options: dict | None, *, shape: int, shard: int, chunk: int, dtype: str = "uint16") -> Any:
    return shardstore.open(url, mode="w", storage_options=storage_options, format="zarr3",
                           shape=(shape,) * 3, dtype=dtype, chunks=(chunk,) * 3, shards=(shard,) * 3)


FORMATS = {
    "zarr3": RemoteFormat("zarr3", _zarr3_create, lambda kv: {"driver": "zarr3", "kvstore": kv}),
}

SHAPE, SHARD, CHUNK = 64, 32, 8  # 8 shards of 4x4x4 = 64 inner chunks


@pytest.fixture(params=sorted(FORMATS))
def fmt(request: pytest.FixtureRequest) -> RemoteFormat:
    return FORMATS[request.param]


def _data(shape: int = SHAPE, dtype: str = "uint16", seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(1, 60000, size=(shape,) * 3).astype(dtype)


def _url(server: SeaweedFS, fmt: RemoteFormat) -> str:
    return server.url(f"{fmt.name}-{uuid.uuid4().hex[:10]}")


def _gets(proxy: CountingProxy) -> list[tuple[str, str, str | None]]:
    return [r for r in proxy.requests if r[0] == "GET"]


# -- S3 round trip and request counts ----------------------------------------------------------
def test_roundtrip_over_s3_urls(seaweedfs: SeaweedFS, fmt: RemoteFormat) -> None:
    url, opts = _url(seaweedfs, fmt), seaweedfs.storage_options()
    data = _data()
    a = fmt.create(url, opts, shape=SHAPE, shard=SHARD, chunk=CHUNK)
    a[...] = data
    a[1:5, 3:40, 60:] = 7  # partial shard writes: read-merge-write with set_if
    data[1:5, 3:40, 60:] = 7
    b = shardstore.open(url, storage_options=opts)
    assert b.read_only
    np.testing.assert_array_equal(b[...], data)
    np.testing.assert_array_equal(b[10:20, 33:35, 5], data[10:20, 33:35, 5])


def test_request_counts_at_the_server(seaweedfs_proxy: tuple[SeaweedFS, CountingProxy], fmt: RemoteFormat) -> None:
    server, proxy = seaweedfs_proxy
    url, opts = _url(server, fmt), server.storage_options()
    data = _data()
    a = fmt.create(url, opts, shape=SHAPE, shard=SHARD, chunk=CHUNK)
    proxy.reset()
    a[:SHARD, :SHARD, :SHARD] = data[:SHARD, :SHARD, :SHARD]  # exactly one whole shard
    assert proxy.count("PUT") == 1 and proxy.count() == 1, proxy.requests
    a[:, :, :] = data

    r = shardstore.open(url, storage_options=opts)
    proxy.reset()
    np.testing.assert_array_equal(r[:CHUNK, :CHUNK, :CHUNK], data[:CHUNK, :CHUNK, :CHUNK])
    cold = _gets(proxy)
    assert 1 <= len(cold) <= fmt.cold_gets and proxy.count() == len(cold), proxy.requests
    assert all(rng is not None for _, _, rng in cold), cold  # ranged, never the whole shard

    proxy.reset()
    np.testing.assert_array_equal(r[CHUNK : 2 * CHUNK, :CHUNK, :CHUNK], data[CHUNK : 2 * CHUNK, :CHUNK, :CHUNK])
    assert len(_gets(proxy)) == fmt.warm_gets and proxy.count() == fmt.warm_gets, proxy.requests

    # inner chunks that sit next to each other in the shard (C order: last axis fastest)
    r2 = shardstore.open(url, storage_options=opts)
    proxy.reset()
    sel = (slice(2 * CHUNK, 3 * CHUNK), slice(CHUNK, 2 * CHUNK), slice(0, SHARD))  # 4 adjacent chunks
    np.testing.assert_array_equal(r2[sel], data[sel])
    assert len(_gets(proxy)) <= fmt.cold_gets, proxy.requests
    proxy.reset()
    sel = (slice(3 * CHUNK, 4 * CHUNK), slice(0, 2 * CHUNK), slice(0, SHARD))  # 8 chunks, 2 runs
    np.testing.assert_array_equal(r2[sel], data[sel])
    assert len(_gets(proxy)) == 1, proxy.requests  # warm index: one coalesced ranged GET


def test_storage_options_reach_the_format_create(seaweedfs: SeaweedFS) -> None:
    url = _url(seaweedfs, FORMATS["zarr3"])
    a = shardstore.zarr3.create(url, storage_options=seaweedfs.storage_options(), shape=(10,), dtype="u1", chunks=(5,))
    a[...] = np.arange(10, dtype="u1")
    np.testing.assert_array_equal(shardstore.zarr3.open(url, storage_options=seaweedfs.storage_options())[...],
                                  np.arange(10, dtype="u1"))


# -- conditional shard rewrites ------------------------------------------------------------------
def _race(seaweedfs: SeaweedFS, fmt: RemoteFormat, retry_conflicts: int) -> tuple[Any, np.ndarray, np.ndarray]:
    """Writer A merges into a shard while an interloper replaces that shard (once)."""
    url = _url(seaweedfs, fmt)
    opts = seaweedfs.storage_options()
    x, y = _data(seed=1), _data(seed=2)
    a = fmt.create(url, opts, shape=SHAPE, shard=SHARD, chunk=CHUNK)
    raw = store_from_url(url, mode="w", storage_options=opts)
    shard_keys = []

    async def keys() -> None:
        shard_keys.extend(sorted([k async for k in raw.list_prefix("") if not k.endswith(".json")
                                  and not k.startswith(("info", "attributes", "meta"))]))

    a[...] = x
    asyncio.run(keys())
    key = shard_keys[0]
    x_shard = asyncio.run(raw.get(key))
    a[...] = y  # now the shard holds y's bytes; the interloper puts x's back

    writer = shardstore.open(url, mode="r+", storage_options={**opts, "retry_conflicts": retry_conflicts})
    s3 = writer.driver.layout.store  # find the S3Store under the format's adapters
    while not hasattr(s3, "bucket"):
        s3 = s3.base
    original = s3.set_if
    fired = []

    async def set_if_with_interloper(k: str, value: Any, generation: Any) -> None:
        if not fired:
            fired.append(k)
            await raw.set(key, x_shard)  # another writer replaced the shard meanwhile
        await original(k, value, generation)

    s3.set_if = set_if_with_interloper
    return writer, x, y


def test_lost_race_raises_conflict_naming_the_shard(seaweedfs: SeaweedFS, fmt: RemoteFormat) -> None:
    writer, x, _ = _race(seaweedfs, fmt, retry_conflicts=0)
    with pytest.raises(ConflictError, match="another writer") as info:
        writer[0, 0, 0:2] = 5  # a partial write into the first shard
    assert "shard" in str(info.value)
    # the interloper's shard is intact
    np.testing.assert_array_equal(writer[:SHARD, :SHARD, :SHARD], x[:SHARD, :SHARD, :SHARD])


def test_lost_race_retried_when_asked(seaweedfs: SeaweedFS, fmt: RemoteFormat) -> None:
    writer, x, _ = _race(seaweedfs, fmt, retry_conflicts=2)
    # whole inner chunks, part of a shard: the adapter redoes its shard merge. (An inner chunk
    # written partly was merged by the core from what it read before the race; redoing that
    # needs a retry at the core's level, see the report.)
    writer[0:CHUNK, 0:CHUNK, 0:CHUNK] = 5
    expected = x[:SHARD, :SHARD, :SHARD].copy()
    expected[0:CHUNK, 0:CHUNK, 0:CHUNK] = 5  # merged into the interloper's shard, not the stale one
    np.testing.assert_array_equal(writer[:SHARD, :SHARD, :SHARD], expected)


# -- interop with tensorstore's s3 kvstore ---------------------------------------------------------
@pytest.fixture
def aws_env(seaweedfs: SeaweedFS, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in seaweedfs.env().items():
        monkeypatch.setenv(name, value)


def test_tensorstore_reads_what_shardstore_wrote(seaweedfs: SeaweedFS, fmt: RemoteFormat, aws_env: None) -> None:
    if fmt.ts_spec is None:
        pytest.skip(f"no tensorstore driver for {fmt.name}")
    import tensorstore as ts

    prefix = f"{fmt.name}-{uuid.uuid4().hex[:10]}"
    data = _data(seed=3)
    a = fmt.create(seaweedfs.url(prefix), seaweedfs.storage_options(), shape=SHAPE, shard=SHARD, chunk=CHUNK)
    a[...] = data
    a[5:9, 0, :] = 0  # partly fill: some inner chunks stay absent
    data[5:9, 0, :] = 0
    t = ts.open(fmt.ts_spec(seaweedfs.tensorstore_kvstore(prefix)), open=True, read=True).result()
    np.testing.assert_array_equal(t.read().result(), data)


def test_shardstore_reads_what_tensorstore_wrote(seaweedfs: SeaweedFS, fmt: RemoteFormat, aws_env: None, tmp_path: Any) -> None:
    if fmt.ts_spec is None:
        pytest.skip(f"no tensorstore driver for {fmt.name}")
    import tensorstore as ts

    # the metadata comes from an array shardstore creates locally, so both describe the same
    local = fmt.create(str(tmp_path / "m"), None, shape=SHAPE, shard=SHARD, chunk=CHUNK)
    data = _data(seed=4)
    prefix = f"{fmt.name}-ts-{uuid.uuid4().hex[:10]}"
    spec = fmt.ts_spec(seaweedfs.tensorstore_kvstore(prefix))
    spec["metadata"] = local.metadata if isinstance(local.metadata, dict) else local.metadata()
    t = ts.open(spec, create=True).result()
    t[...] = data
    t[0:8, 0:8, 0:8] = 0  # an absent inner chunk
    data[0:8, 0:8, 0:8] = 0
    got = shardstore.open(seaweedfs.url(prefix), storage_options=seaweedfs.storage_options())
    np.testing.assert_array_equal(got[...], data)


# -- reads over nginx ----------------------------------------------------------------------------
def test_reads_over_nginx(nginx: Nginx, fmt: RemoteFormat) -> None:
    name = f"{fmt.name}-{uuid.uuid4().hex[:10]}"
    data = _data(seed=5)
    a = fmt.create(str(nginx.root / name), None, shape=SHAPE, shard=SHARD, chunk=CHUNK)
    a[...] = data
    a[0:8, 0:8, 0:8] = 0
    data[0:8, 0:8, 0:8] = 0
    r = shardstore.open(f"{nginx.url}/{name}")
    before = len(nginx.requests())
    np.testing.assert_array_equal(r[40:48, 8:16, 16:24], data[40:48, 8:16, 16:24])
    cold = nginx.requests()[before:]
    assert len(cold) <= fmt.cold_gets and all(rng != "-" for _, _, rng, _ in cold), cold
    before = len(nginx.requests())
    np.testing.assert_array_equal(r[40:48, 16:24, 16:24], data[40:48, 16:24, 16:24])
    assert len(nginx.requests()) - before == fmt.warm_gets
    np.testing.assert_array_equal(r[...], data)


def test_wrong_content_range_never_gives_wrong_data(faulty_server: FaultyServer, fmt: RemoteFormat, tmp_path: Any) -> None:
    data = _data(seed=6)
    a = fmt.create(str(tmp_path / "a"), None, shape=SHAPE, shard=SHARD, chunk=CHUNK)
    a[...] = data
    for path in sorted(p for p in (tmp_path / "a").rglob("*") if p.is_file()):
        key = path.relative_to(tmp_path / "a").as_posix()
        faulty_server.files[key] = path.read_bytes()
        if not key.endswith(".json") and key not in ("info", "attributes"):
            faulty_server.modes[key] = "wrong-range"
    r = shardstore.open(faulty_server.url, storage_options={"max_retries": 1, "timeout": 2})
    with pytest.raises(StoreError, match="asked for|Requested|range"):
        r[0:8, 0:8, 0:8]
