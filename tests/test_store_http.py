"""HTTPStore: the StoreTests battery read through real nginx (Range support), and its fault
handling against a misbehaving loopback server of our own: dropped connections, 200 to a
range request, a wrong Content-Range, timeouts, 5xx, servers that refuse suffix ranges."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Hashable, Sequence
from typing import TYPE_CHECKING

import pytest

from shardstore.errors import ReadOnlyError, StoreError, UnsupportedFeatureError
from shardstore.store import (
    LocalStore,
    OffsetBR,
    RangeBR,
    Store,
    SuffixBR,
    store_from_url,
)
from shardstore.store.base import ByteRange
from shardstore.store.http import HTTPStore
from shardstore.testing import StoreTests

pytest_plugins = ["_servers"]
pytestmark = pytest.mark.timeout(120)

if TYPE_CHECKING:
    from _servers import FaultyServer, Nginx

VALUE = bytes(range(256)) * 400  # 102400 bytes


class NginxBacked(Store):
    """Writes go to files under nginx's root; every read goes through ``HTTPStore``.

    Lets the StoreTests battery check HTTPStore's reads (ranges, suffixes, missing keys,
    empty values, batches) against what a real server answers.
    """

    def __init__(self, local: LocalStore, http: HTTPStore) -> None:
        super().__init__()
        self.local, self.http = local, http

    def __repr__(self) -> str:
        return f"NginxBacked({self.http!r})"

    async def _get(self, key: str, byte_range: ByteRange | None) -> bytes | None:
        return await self.http.get(key, byte_range)

    async def get_many(self, requests: Sequence[tuple[str, ByteRange | None]]) -> list[bytes | None]:
        return await self.http.get_many(requests)

    async def exists(self, key: str) -> bool:
        return await self.http.exists(key)

    async def get_versioned(self, key: str, byte_range: ByteRange | None = None) -> tuple[bytes | None, Hashable | None]:
        return await self.http.get_versioned(key, byte_range)

    async def _set(self, key: str, value: bytes) -> None:
        await self.local.set(key, value)

    async def _delete(self, key: str) -> None:
        await self.local.delete(key)

    async def _list_prefix(self, prefix: str) -> AsyncIterator[str]:
        async for key in self.local.list_prefix(prefix):
            yield key


class TestHTTPStoreOverNginx(StoreTests):
    supports_listing = False
    supports_conditional_writes = False  # the writes here bypass HTTP

    @pytest.fixture
    def store(self, nginx: Nginx) -> Store:
        name = uuid.uuid4().hex[:12]
        return NginxBacked(LocalStore(nginx.root / name), HTTPStore(f"{nginx.url}/{name}"))

    def make_read_only(self, store: Store) -> Store:
        return store.http  # type: ignore[attr-defined]


# -- nginx: requests as the server sees them ---------------------------------------------------
def test_nginx_requests_are_ranged_and_missing_is_none(nginx: Nginx) -> None:
    name = uuid.uuid4().hex[:12]
    (nginx.root / name).mkdir()
    (nginx.root / name / "v").write_bytes(VALUE)
    store = store_from_url(f"{nginx.url}/{name}")
    assert isinstance(store, HTTPStore) and store.read_only

    async def run() -> None:
        assert await store.get("v", SuffixBR(10)) == VALUE[-10:]
        assert await store.get("v", OffsetBR(102390)) == VALUE[102390:]
        assert await store.get("v", RangeBR(5, 9)) == VALUE[5:9]
        # nearby ranges of one key: one merged request
        got = await store.get_many([("v", RangeBR(0, 10)), ("v", RangeBR(20, 30)), ("v", RangeBR(1000, 1010))])
        assert got == [VALUE[0:10], VALUE[20:30], VALUE[1000:1010]]
        assert await store.get("missing") is None

    asyncio.run(run())
    mine = [r for r in nginx.requests() if f"/{name}/" in r[1]]
    assert [(m, r, s) for m, _, r, s in mine] == [
        ("GET", "bytes=-10", "206"), ("GET", "bytes=102390-", "206"), ("GET", "bytes=5-8", "206"),
        ("GET", "bytes=0-1009", "206"), ("GET", "-", "404")], mine


def test_http_store_is_read_only(nginx: Nginx) -> None:
    store = store_from_url(f"{nginx.url}/x")
    with pytest.raises(ReadOnlyError, match="'k'"):
        asyncio.run(store.set("k", b"v"))
    with pytest.raises(UnsupportedFeatureError, match="read-only"):
        store_from_url(f"{nginx.url}/x", mode="r+")
    with pytest.raises(UnsupportedFeatureError, match="list"):
        asyncio.run(store.list_dir(""))
    with pytest.raises(ValueError, match="unknown storage options"):
        store_from_url(f"{nginx.url}/x", storage_options={"endpoint": "x"})


# -- faults ------------------------------------------------------------------------------------
def _store(server: FaultyServer, **options: object) -> Store:
    opts = {"timeout": 0.5, "connect_timeout": 0.5, "max_retries": 2, "retry_timeout": 5.0, **options}
    return store_from_url(server.url, storage_options=opts)


@pytest.mark.parametrize("mode", ["drop", "ignore-range", "wrong-range"])
@pytest.mark.parametrize("byte_range", [None, RangeBR(100, 2000), OffsetBR(500), SuffixBR(100)], ids=str)
def test_bad_replies_raise_store_error_never_wrong_data(faulty_server: FaultyServer, mode: str, byte_range: ByteRange | None) -> None:
    faulty_server.files["v"] = VALUE
    faulty_server.modes["v"] = mode
    store = _store(faulty_server)
    if byte_range is None and mode != "drop":
        assert asyncio.run(store.get("v")) == VALUE  # a whole read is unaffected by Range bugs
        return
    with pytest.raises(StoreError, match="'v'") as info:
        asyncio.run(store.get("v", byte_range))
    assert faulty_server.url in str(info.value)
    if mode == "drop":
        assert faulty_server.hits["v"] == 3  # bounded: 1 + 2 retries of the broken body


def test_timeout_gives_store_error_after_bounded_retries(faulty_server: FaultyServer) -> None:
    faulty_server.files["v"] = VALUE
    faulty_server.modes["v"] = "hang"
    store = _store(faulty_server, timeout=0.3, max_retries=1)
    t0 = time.monotonic()
    with pytest.raises(StoreError, match="'v'"):
        asyncio.run(store.get("v", RangeBR(0, 10)))
    assert time.monotonic() - t0 < 10
    assert faulty_server.hits["v"] == 2


def test_5xx_is_retried_then_fails_clearly(faulty_server: FaultyServer) -> None:
    faulty_server.files.update({"flaky": VALUE, "down": VALUE})
    faulty_server.modes.update({"flaky": "flaky", "down": "503"})
    store = _store(faulty_server, max_retries=3)
    assert asyncio.run(store.get("flaky", RangeBR(0, 10))) == VALUE[:10]
    assert faulty_server.hits["flaky"] == 3  # two 503s, then the answer
    with pytest.raises(StoreError, match="'down'.*503"):
        asyncio.run(store.get("down"))
    assert faulty_server.hits["down"] == 4


def test_suffix_fallback_when_the_server_refuses_suffix_ranges(faulty_server: FaultyServer) -> None:
    faulty_server.files["v"] = VALUE
    faulty_server.modes["v"] = "no-suffix"
    store = _store(faulty_server)
    assert asyncio.run(store.get("v", SuffixBR(100))) == VALUE[-100:]
    assert asyncio.run(store.get("v", SuffixBR(10**6))) == VALUE


def test_connection_reuse_and_bounded_concurrency(faulty_server: FaultyServer) -> None:
    for i in range(40):
        faulty_server.files[f"k{i}"] = VALUE
        faulty_server.modes[f"k{i}"] = "slow"
    store = _store(faulty_server, max_concurrency=4, timeout=5)

    async def run() -> list[bytes | None]:
        return await store.get_many([(f"k{i}", RangeBR(0, 100)) for i in range(40)])

    assert asyncio.run(run()) == [VALUE[:100]] * 40
    assert faulty_server.max_active <= 4
    assert faulty_server.connections <= 4  # keep-alive: connections are reused
    asyncio.run(run())  # a new event loop still works (obstore is not loop-bound)
    assert faulty_server.connections <= 8


def test_missing_and_empty_ranges(faulty_server: FaultyServer) -> None:
    faulty_server.files["v"] = VALUE
    faulty_server.files["empty"] = b""
    store = _store(faulty_server)

    async def run() -> None:
        assert await store.get("nope") is None
        assert await store.get("nope", SuffixBR(5)) is None
        assert await store.get("v", RangeBR(10, 10)) == b""
        assert await store.get("nope", RangeBR(10, 10)) is None
        assert await store.get("v", RangeBR(200_000, 200_010)) == b""
        assert await store.get("empty", SuffixBR(4)) == b""
        assert await store.exists("v") and not await store.exists("nope")

    asyncio.run(run())


def test_range_cache_over_http(faulty_server: FaultyServer) -> None:
    faulty_server.files["v"] = VALUE
    store = _store(faulty_server, cache_bytes=1 << 20)

    async def run() -> None:
        assert await store.get_many([("v", RangeBR(0, 1000)), ("v", RangeBR(1500, 3000))]) == [VALUE[:1000], VALUE[1500:3000]]
        assert faulty_server.hits["v"] == 1  # one coalesced request
        assert await store.get("v", RangeBR(100, 2000)) == VALUE[100:2000]  # inside it: cached
        assert await store.get_many([("v", RangeBR(2000, 2500))]) == [VALUE[2000:2500]]
        assert faulty_server.hits["v"] == 1
        assert await store.get("v", RangeBR(5000, 6000)) == VALUE[5000:6000]
        assert faulty_server.hits["v"] == 2
        store.invalidate()  # type: ignore[attr-defined]
        assert await store.get("v", RangeBR(100, 2000)) == VALUE[100:2000]
        assert faulty_server.hits["v"] == 3

    asyncio.run(run())
