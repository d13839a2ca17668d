"""S3Store against a real SeaweedFS server (SigV4 auth on): the StoreTests battery, paging,
multipart, conditional writes, credentials, URLs and options."""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING

import pytest

from shardstore.errors import ConflictError, ReadOnlyError, StoreError
from shardstore.store import PrefixStore, RangeBR, RecordingStore, Store, store_from_url
from shardstore.store.base import MISSING
from shardstore.testing import StoreTests, async_test

pytest_plugins = ["_servers"]
pytestmark = pytest.mark.timeout(120)

if TYPE_CHECKING:
    from _servers import CountingProxy, SeaweedFS


def _prefix() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


def make_s3(server: SeaweedFS, prefix: str | None = None, **options: object) -> Store:
    return store_from_url(server.url(prefix or _prefix()), mode="w", storage_options=server.storage_options(**options))


class TestS3Store(StoreTests):
    @pytest.fixture
    def store(self, seaweedfs: SeaweedFS) -> Store:
        return make_s3(seaweedfs)

    def make_read_only(self, store: Store) -> Store:
        return store_from_url(f"s3://{store.bucket}/{store.prefix}", mode="r",  # type: ignore[attr-defined]
                              storage_options={"endpoint": store.endpoint, "access_key_id": "testkey",  # type: ignore[attr-defined]
                                               "secret_access_key": "testsecret"})


class TestS3StoreViaRecording(StoreTests):
    """The battery through RecordingStore (as the request-count tests use it)."""

    @pytest.fixture
    def store(self, seaweedfs: SeaweedFS) -> Store:
        return RecordingStore(make_s3(seaweedfs))


class TestS3StoreUnderAPrefix(StoreTests):
    """The battery through PrefixStore (a format's node below a URL): tagged reads pass
    through it, with the prefix added to each key."""

    @pytest.fixture
    def store(self, seaweedfs: SeaweedFS) -> Store:
        store = PrefixStore(make_s3(seaweedfs), "node/")
        assert store.tagged_reads is store and store.versions_in_replies
        return store


class TestS3StoreWithUnsignedPayloads(StoreTests):
    """The battery with bodies sent as UNSIGNED-PAYLOAD (what HTTPS endpoints get by default;
    this server is plain HTTP, where the default hashes them)."""

    @pytest.fixture
    def store(self, seaweedfs: SeaweedFS) -> Store:
        store = make_s3(seaweedfs, config={"unsigned_payload": True})
        assert store._client.config["unsigned_payload"] == "true"  # type: ignore[attr-defined]
        return store


def test_tagged_reads_do_not_pass_a_wrapper_that_counts_requests(seaweedfs: SeaweedFS) -> None:
    recording = RecordingStore(make_s3(seaweedfs))
    assert recording.tagged_reads is None and not recording.versions_in_replies


# -- S3-specific behaviour ---------------------------------------------------------------------
@async_test
async def test_listing_pages_past_1000_keys(seaweedfs: SeaweedFS) -> None:
    store = make_s3(seaweedfs)
    keys = [f"c/{i // 100}/{i % 100}" for i in range(1150)]
    await store.set_many([(k, b"x") for k in keys])
    assert sorted([k async for k in store.list_prefix("")]) == sorted(keys)
    assert sorted([k async for k in store.list_prefix("c/1")]) == sorted(k for k in keys if k.startswith("c/1"))
    await store.delete_prefix("")  # DeleteObjects in batches of 1000
    assert [k async for k in store.list_prefix("")] == []


@async_test
async def test_prefix_isolation(seaweedfs: SeaweedFS) -> None:
    prefix = _prefix()
    outer = make_s3(seaweedfs, prefix)
    inner = make_s3(seaweedfs, f"{prefix}/arr")
    await outer.set("arr2/x", b"not mine")  # shares the string prefix "…/arr", not the directory
    await inner.set("zarr.json", b"{}")
    assert [k async for k in inner.list_prefix("")] == ["zarr.json"]
    assert sorted([k async for k in outer.list_prefix("")]) == ["arr/zarr.json", "arr2/x"]
    await inner.delete_prefix("")
    assert [k async for k in outer.list_prefix("")] == ["arr2/x"]


@async_test
async def test_multipart_upload_for_large_values(seaweedfs: SeaweedFS) -> None:
    store = make_s3(seaweedfs, multipart_threshold=6 << 20, multipart_chunk_size=5 << 20)
    value = bytes(range(256)) * (12 << 12)  # 12 MiB: three parts
    await store.set("big", value)
    assert await store.get("big") == value
    assert await store.get("big", RangeBR(5 << 20, (5 << 20) + 10)) == value[5 << 20 : (5 << 20) + 10]
    head = await store._head("big")  # type: ignore[attr-defined]
    assert head["e_tag"].strip('"').endswith("-3"), head  # the ETag of a 3-part upload


@async_test
async def test_conditional_writes_use_etags(seaweedfs: SeaweedFS) -> None:
    store = make_s3(seaweedfs)
    value, gen = await store.get_versioned("k")
    assert value is None and gen == MISSING
    await store.set_if("k", b"one", MISSING)  # If-None-Match: *
    with pytest.raises(ConflictError, match="'k'"):
        await store.set_if("k", b"two", MISSING)
    value, gen = await store.get_versioned("k")
    assert value == b"one" and isinstance(gen, str)
    value2, gen2 = await store.get_versioned("k", RangeBR(1, 2))
    assert value2 == b"n" and gen2 == gen  # a ranged read carries the same ETag
    await store.set("k", b"other writer")
    with pytest.raises(ConflictError, match="another writer"):
        await store.set_if("k", b"three", gen)  # If-Match on a stale ETag
    assert await store.get("k") == b"other writer"
    _, gen = await store.get_versioned("k")
    await store.set_if("k", b"four", gen)
    assert await store.get("k") == b"four"
    with pytest.raises(ConflictError):
        await store.set_if("k", None, gen)  # conditional delete with a stale ETag
    _, gen = await store.get_versioned("k")
    await store.set_if("k", None, gen)
    assert await store.get("k") is None


@async_test
async def test_concurrent_creators_exactly_one_wins(seaweedfs: SeaweedFS) -> None:
    store = make_s3(seaweedfs)
    results = await asyncio.gather(*(store.set_if("new", b"w%d" % i, MISSING) for i in range(8)),
                                   return_exceptions=True)
    winners = [i for i, r in enumerate(results) if r is None]
    assert len(winners) == 1, results
    assert all(isinstance(r, ConflictError) for r in results if r is not None)
    assert await store.get("new") == b"w%d" % winners[0]


def test_wrong_credentials_give_a_clear_error(seaweedfs: SeaweedFS) -> None:
    bad = store_from_url(seaweedfs.url(_prefix()), mode="w", storage_options={
        "endpoint": seaweedfs.endpoint, "credentials": {"access_key_id": "testkey", "secret_access_key": "wrong"},
        "max_retries": 0})
    with pytest.raises(StoreError, match="access denied|credentials") as info:
        asyncio.run(bad.set("k", b"v"))
    assert "'k'" in str(info.value)
    with pytest.raises(StoreError, match="'k'"):
        asyncio.run(bad.get("k"))


def test_credentials_from_environment(seaweedfs: SeaweedFS, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in seaweedfs.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", seaweedfs.endpoint)
    store = store_from_url(seaweedfs.url(_prefix()), mode="w")
    asyncio.run(store.set("k", b"from env"))
    assert asyncio.run(store.get("k")) == b"from env"


def test_read_only_url_and_options(seaweedfs: SeaweedFS) -> None:
    store = store_from_url(seaweedfs.url("some/prefix"), mode="r", storage_options=seaweedfs.storage_options())
    assert store.read_only and "some/prefix" in repr(store)
    with pytest.raises(ReadOnlyError, match="'k'"):
        asyncio.run(store.set("k", b"v"))
    with pytest.raises(ValueError, match="unknown storage options"):
        store_from_url("s3://b/p", storage_options={"endpoint": "http://x", "bogus": 1})
    with pytest.raises(ValueError, match="bucket"):
        store_from_url("s3:///nobucket")


def test_generation_costs_no_request(seaweedfs: SeaweedFS) -> None:
    store = make_s3(seaweedfs, endpoint="http://127.0.0.1:1")  # nothing listens there
    assert asyncio.run(store.generation("anything")) is None


class TestS3StoreWithRangeCache(StoreTests):
    """The battery with the range cache on: it must never change what reads return."""

    @pytest.fixture
    def store(self, seaweedfs: SeaweedFS) -> Store:
        return make_s3(seaweedfs, cache_bytes=1 << 20)


def test_range_cache_saves_repeated_requests(seaweedfs_proxy: tuple[SeaweedFS, CountingProxy]) -> None:
    server, proxy = seaweedfs_proxy
    store = make_s3(server, cache_bytes=4 << 20)
    value = bytes(range(256)) * 1000

    async def run() -> None:
        await store.set("v", value)
        proxy.reset()
        assert await store.get("v", RangeBR(10, 5000)) == value[10:5000]
        assert await store.get_many([(store_key, RangeBR(0, 9000)) for store_key in ["v"]]) == [value[:9000]]
        assert proxy.count("GET") == 2
        # repeated and contained ranges come from the cache
        assert await store.get("v", RangeBR(10, 5000)) == value[10:5000]
        assert await store.get_many([("v", RangeBR(100, 200)), ("v", RangeBR(8000, 9000))]) == [value[100:200], value[8000:9000]]
        assert proxy.count("GET") == 2
        await store.set("v", value[::-1])  # this store's writes drop the key's ranges
        assert await store.get("v", RangeBR(10, 5000)) == value[::-1][10:5000]
        assert proxy.count("GET") == 3
        await store.delete("v")
        assert await store.get("v", RangeBR(10, 5000)) is None

    asyncio.run(run())
    cache = store._cache  # type: ignore[attr-defined]
    for i in range(40):  # bounded: least recently used ranges go first
        cache.put(f"k{i}", 0, b"x" * 200_000)
    assert cache._size <= 4 << 20 and cache.get("k0", 0, 10) is None and cache.get("k39", 0, 10) is not None


def test_range_cache_serves_reads_of_one_version(seaweedfs_proxy: tuple[SeaweedFS, CountingProxy]) -> None:
    """``get_ranges_at`` (a shard's chunks at the ETag its index was read at) is served from the
    range cache while the object is that version, and never from another writer's old bytes."""
    server, proxy = seaweedfs_proxy
    prefix = _prefix()
    store = make_s3(server, prefix, cache_bytes=4 << 20)
    other = make_s3(server, prefix)  # another writer: this store's cache does not see its writes
    value = bytes(range(256)) * 1000

    async def run() -> None:
        await store.set("v", value)
        _, etag = await store.get_versioned("v", RangeBR(0, 1))
        proxy.reset()
        ranges = [RangeBR(10, 5000), RangeBR(6000, 7000)]
        assert await store.get_ranges_at("v", ranges, etag) == [value[10:5000], value[6000:7000]]
        gets = proxy.count("GET")
        assert gets >= 1
        assert await store.get_ranges_at("v", ranges, etag) == [value[10:5000], value[6000:7000]]
        assert await store.get_ranges_at("v", [RangeBR(100, 200)], etag) == [value[100:200]]
        assert proxy.count("GET") == gets  # the same version: no request
        await other.set("v", value[::-1])
        _, etag2 = await store.get_versioned("v", RangeBR(0, 1))
        assert etag2 != etag
        # a reader still holding the old index gets the old version whole (as if it had read a
        # moment earlier), never a mix; a reader at the new ETag gets the new bytes
        assert await store.get_ranges_at("v", ranges, etag) == [value[10:5000], value[6000:7000]]
        assert await store.get_ranges_at("v", [RangeBR(7000, 7100)], etag) is None  # not cached: 412
        assert await store.get_ranges_at("v", ranges, etag2) == [value[::-1][10:5000], value[::-1][6000:7000]]

    asyncio.run(run())


@async_test
async def test_large_ranged_replies_are_views_not_copies(seaweedfs: SeaweedFS) -> None:
    store = make_s3(seaweedfs)
    value = bytes(range(256)) * 12000  # 3 MB
    await store.set("big", value)
    a, b = await store.get_many([("big", RangeBR(0, 1 << 20)), ("big", RangeBR(2 << 20, 3 << 20))])
    assert isinstance(a, memoryview) and a == value[: 1 << 20] and b == value[2 << 20 : 3 << 20]
    whole, _ = await store.get_versioned("big")
    assert whole == value and whole.readonly  # type: ignore[union-attr]
    assert isinstance(await store.get("big"), bytes)  # get() stays bytes
    assert isinstance(await store.get("big", RangeBR(0, 2 << 20)), bytes)


@async_test
async def test_large_replies_of_one_version_are_views_too(seaweedfs: SeaweedFS) -> None:
    """``get_ranges_at`` (a sharded read at the ETag of its index) hands a large merged reply
    out as read-only views, as ``get_many`` does: a shard's chunks are sliced out of it
    without copying the reply and then each chunk again; small replies stay bytes."""
    store = make_s3(seaweedfs)
    value = bytes(range(256)) * 12000  # 3 MB
    await store.set("big", value)
    _, etag = await store.get_versioned("big", RangeBR(0, 1))
    a, b = await store.get_ranges_at("big", [RangeBR(0, 1 << 20), RangeBR((1 << 20) + 10, 2 << 20)], etag) or []
    assert isinstance(a, memoryview) and a.readonly and a == value[: 1 << 20]
    assert isinstance(b, memoryview) and b == value[(1 << 20) + 10 : 2 << 20]
    small = await store.get_ranges_at("big", [RangeBR(5, 100), RangeBR(200, 300)], etag) or []
    assert [type(v) for v in small] == [bytes, bytes] and small == [value[5:100], value[200:300]]
