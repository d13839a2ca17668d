"""Read-only HTTP(S) store over any server that answers ``Range`` requests (nginx, a CDN, S3
public URLs), and the request machinery that the S3 store shares.

The client is `obstore <https://developmentseed.org/obstore/>`_ (Rust ``object_store`` with
reqwest): connection reuse, HTTP/1.1 keep-alive and HTTP/2, retries with exponential backoff
on 5xx, timeouts and connection resets, and a check that a ranged reply carries the
``Content-Range`` that was asked for. It was measured against aiohttp and httpx on nginx and
SeaweedFS and was the fastest of the three for small ranged reads (see the remote benchmark).

On top of it this module adds what the Store contract needs:

- a missing key (404) reads as ``None``; an unsatisfiable range (416: start at or past the end,
  or an empty value) as ``b""``; zero-length ranges cost a HEAD, not a GET;
- a server that refuses suffix ranges (answers them with 200 or "not supported") is asked
  for the size once (HEAD), then for an explicit range;
- a body cut short (connection dropped mid-transfer) is retried a bounded number of times;
  every reply is checked against the range it should hold, so wrong data is never returned;
- anything else becomes a ``StoreError`` naming the key and the URL;
- large ranged replies (a whole shard, merged ranges) are read-only views of the client's
  buffer, so a shard's chunks reach the decoders without copies;
- an optional ``RangeCache`` (``cache_bytes``) serves ranges read before without a request.
"""

from __future__ import annotations

import datetime
import random
import threading
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from .._aio import gather, inline_now, sleep
from .._sync import io_pool
from ..config import IOConfig
from ..errors import StoreError, UnsupportedFeatureError
from ._keys import validate_key
from .base import MISSING, ByteRange, OffsetBR, RangeBR, Store, SuffixBR

if TYPE_CHECKING:
    import asyncio

    from .sync_protocols import SupportsCheckedGenerationSync, SupportsGetManyTagged
else:
    from .._lazy import asyncio

__all__ = ["HTTPStore", "ObjectStoreBase", "RangeCache", "import_obstore", "make_client_options", "retry_config"]


T = TypeVar("T")

#: what a user installs when obstore is missing
INSTALL_HINT = "pip install 'shardstore[remote]'  (or: pip install obstore)"


def import_obstore() -> Any:
    """The ``obstore`` module, or an UnsupportedFeatureError saying how to install it."""
    try:
        import obstore
        import obstore.exceptions  # noqa: F401
        import obstore.store  # noqa: F401
    except ImportError as e:
        raise UnsupportedFeatureError(f"remote stores need the obstore package: {INSTALL_HINT}") from e
    return obstore


def _seconds(value: float | str) -> str:
    return value if isinstance(value, str) else f"{int(float(value) * 1000)}ms"


def make_client_options(
    url: str, *, timeout: float | str, connect_timeout: float | str, extra: Mapping[str, Any] | None
) -> dict[str, Any]:
    """obstore ``client_options``: timeouts, plain http allowed for ``http://`` endpoints."""
    opts: dict[str, Any] = {"timeout": _seconds(timeout), "connect_timeout": _seconds(connect_timeout),
                            "pool_idle_timeout": "60s"}
    if url.startswith("http://"):
        opts["allow_http"] = True
    opts.update(extra or {})
    return opts


def retry_config(max_retries: int, retry_timeout: float) -> dict[str, Any]:
    """Bounded retries with exponential backoff (50 ms doubling, at most 2 s apart)."""
    return {
        "max_retries": int(max_retries),
        "retry_timeout": datetime.timedelta(seconds=retry_timeout),
        "backoff": {"init_backoff": datetime.timedelta(milliseconds=50),
                    "max_backoff": datetime.timedelta(seconds=2), "base": 2},
    }


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:400] if text else type(e).__name__


def _status(e: BaseException, code: int) -> bool:
    """Whether an obstore error reports HTTP status ``code`` (it has no status attribute)."""
    text = str(e)
    first = text.partition("\n")[0]
    return f"status code: {code}" in text or f"status: {code}," in text or f" {code} " in first


def _blocking(fn: Callable[..., T], *args: Any) -> T:
    """One of obstore's blocking calls, from a thread that may block: right here, except on
    the main thread, which waits for it on an I/O thread instead. obstore's blocking calls
    return only when their request does, so Ctrl-C would wait out the request's timeouts
    (minutes, with retries, against a server that stalls); a wait for a thread's result is
    interrupted at once. (The hand-off costs ~0.1 ms of CPU, a fifth of the request.)"""
    if threading.current_thread() is threading.main_thread():
        return io_pool().submit(fn, *args).result()
    return fn(*args)


def _get_now(client: Any, path: str, options: dict[str, Any]) -> tuple[Any, Any, tuple[int, int]]:
    """A blocking GET: (body, the reply's metadata, the byte range it holds)."""
    result = import_obstore().get(client, path, options=options)
    return result.bytes(), result.meta, result.range


def _is_body_error(e: BaseException) -> bool:
    text = str(e).lower()
    return "body error" in text or "error decoding response body" in text or "connection reset" in text


class RangeCache:
    """Byte ranges read recently (LRU, at most ``max_bytes`` in total), for repeated reads.

    A lookup is served by any cached range of the key that contains it (a shard read whole
    serves its chunks). Writes and deletes through the store drop the key's ranges; other
    writers are not noticed (as with the shard-index cache: reopen to see their changes).
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = int(max_bytes)
        self._entries: OrderedDict[tuple[str, int], Any] = OrderedDict()  # (key, start) -> value
        self._starts: dict[str, set[int]] = {}
        self._size = 0
        self._lock = threading.Lock()

    def get(self, key: str, start: int, end: int) -> Any:
        with self._lock:
            for s in self._starts.get(key, ()):
                value = self._entries[(key, s)]
                if s <= start and end <= s + len(value):
                    self._entries.move_to_end((key, s))
                    return value if (start, end) == (s, s + len(value)) else memoryview(value)[start - s : end - s]
        return None

    def put(self, key: str, start: int, value: Any) -> None:
        n = len(value)
        if n > self.max_bytes // 4:  # one huge value must not flush everything else
            return
        with self._lock:
            old = self._entries.pop((key, start), None)
            self._size += n - (len(old) if old is not None else 0)
            self._entries[(key, start)] = value
            self._starts.setdefault(key, set()).add(start)
            while self._size > self.max_bytes:
                (k, s), v = self._entries.popitem(last=False)
                self._size -= len(v)
                self._starts[k].discard(s)
                if not self._starts[k]:
                    del self._starts[k]

    def fill(self, key: str, spans: Sequence[tuple[int, int] | None], out: list[Any]) -> list[int]:
        """Put the cached ``[start, end)`` ranges of ``key`` into ``out`` (same positions);
        returns the positions still to fetch (a None span is never cached)."""
        todo = []
        for i, span in enumerate(spans):
            hit = None if span is None else self.get(key, *span)
            if hit is None:
                todo.append(i)
            else:
                out[i] = hit
        return todo

    def drop(self, key: str) -> None:
        """Forget the key's ranges (it was written or deleted)."""
        with self._lock:
            for s in self._starts.pop(key, ()):
                self._size -= len(self._entries.pop((key, s)))

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._starts.clear()
            self._size = 0


def _etag_of(head: dict[str, Any] | None) -> Hashable | None:
    """An object's generation from its HEAD (``MISSING`` when absent, None without an ETag)."""
    return MISSING if head is None else head.get("e_tag")


class ObjectStoreBase(Store):
    """Reads through an obstore client: shared by ``HTTPStore`` and ``S3Store``.

    Subclasses set ``self._client`` (an obstore store) and ``self._where`` (a URL for messages)
    and may override ``_path`` (key -> object path).
    """

    #: obstore's futures resolve on whatever asyncio loop awaits them (its Tokio runtime is
    #: global), so the sync API may run reads on the caller's own loop
    runs_on_any_loop = True
    #: every wait of its reads is an obstore call, made blocking under ``_aio.run_inline``
    #: (obstore's blocking calls release the GIL): a blocking read of one chunk runs without
    #: the event loop, as a request that nothing could overlap (``AsyncArray.read_now``)
    reads_inline = True
    #: requests in flight at once (per event loop), whatever number of batches run
    max_concurrency = 32
    #: a round trip costs ~0.3-1 ms on a LAN and tens of ms to a cloud region, and each request
    #: costs the client CPU; merging ranges up to 1 MiB apart is cheaper than another request
    #: (obstore's own get_ranges merges at 1 MiB too; tensorstore only within 4 KiB, and sends
    #: several times the requests: bench_remote counts them; a 64 or 4 KiB gap here made
    #: unaligned 100^3 reads from SeaweedFS slower, not faster)
    coalesce_max_gap = 1 << 20
    #: extra attempts after a body was cut short (obstore retries failed requests itself,
    #: but not a reply whose body broke off)
    body_retries = 2
    #: recently read byte ranges (``cache_bytes`` > 0), or None
    _cache: RangeCache | None = None
    #: ranged and versioned replies at least this large are handed out as a read-only view of
    #: the client's buffer (no copy: a whole shard then costs no copies before its chunks are
    #: decoded); whole-value reads (metadata) and smaller replies are ``bytes``
    zero_copy_min_bytes: int = IOConfig.zero_copy_min_bytes

    def use_config(self, config: IOConfig) -> None:
        super().use_config(config)
        self.zero_copy_min_bytes = config.zero_copy_min_bytes

    _client: Any
    _where: str

    def invalidate(self) -> None:
        """Forget cached byte ranges (after another process changed the data)."""
        if self._cache is not None:
            self._cache.clear()

    def _limit(self) -> asyncio.Semaphore:
        """This store's bound on requests in flight, one per event loop (all callers share it,
        however many ``get_many`` calls a sharding adapter runs side by side)."""
        loop = asyncio.get_running_loop()
        limits = self.__dict__.setdefault("_limits", weakref.WeakKeyDictionary())
        sem = limits.get(loop)
        if sem is None:
            sem = limits[loop] = asyncio.Semaphore(self.max_concurrency)
        return sem

    def _path(self, key: str) -> str:
        return key

    def _error(self, what: str, key: str, e: BaseException) -> StoreError:
        exc = import_obstore().exceptions
        hint = ""
        if isinstance(e, (exc.PermissionDeniedError, exc.UnauthenticatedError)) or _status(e, 403) or _status(e, 401):
            hint = " (access denied: check the credentials, and that they may access this bucket/path)"
        return StoreError(f"cannot {what} key {key!r} at {self._where}: {_first_line(e)}{hint}")

    async def _head(self, key: str) -> dict[str, Any] | None:
        """The object's metadata (size, e_tag, ...) or None when missing."""
        obs = import_obstore()
        try:
            if inline_now():
                return _blocking(obs.head, self._client, self._path(key))
            async with self._limit():
                return await obs.head_async(self._client, self._path(key))
        except (FileNotFoundError, obs.exceptions.NotFoundError):
            return None
        except Exception as e:
            raise self._error("stat", key, e) from e

    async def _get_reply(self, path: str, options: dict[str, Any]) -> tuple[Any, Any, tuple[int, int]]:
        """One GET: (body, the reply's metadata, the byte range it holds). Under
        ``_aio.run_inline`` obstore's blocking call, which costs about half the CPU of its
        two awaited futures (each wakes the loop from the client's threads); else within
        this loop's bound on requests in flight."""
        obs = import_obstore()
        if inline_now():
            return _blocking(_get_now, self._client, path, options)
        async with self._limit():
            result = await obs.get_async(self._client, path, options=options)
            body = await result.bytes_async()
        return body, result.meta, result.range

    @property
    def sync_checks(self) -> SupportsCheckedGenerationSync:
        return self

    def checked_generation_sync(self, key: str) -> Hashable | None:
        """``checked_generation`` with obstore's blocking HEAD: no event loop, so a blocking
        read whose chunks the decoded-chunk cache holds makes no loop round trip (measured on
        SeaweedFS: 730-780 us and 0.2 ms of CPU per HEAD, against 880-1,130 us and 0.4 ms
        through the loop)."""
        obs = import_obstore()
        try:
            head = _blocking(obs.head, self._client, self._path(key))
        except (FileNotFoundError, obs.exceptions.NotFoundError):
            head = None
        except Exception as e:
            raise self._error("stat", key, e) from e
        return _etag_of(head)

    @staticmethod
    def _range_option(br: ByteRange | None) -> Any:
        if br is None:
            return None
        if isinstance(br, RangeBR):
            return (br.start, br.end)
        if isinstance(br, OffsetBR):
            return {"offset": br.start}
        return {"suffix": br.n}

    async def _fetch(self, key: str, br: ByteRange | None, view: bool = False) -> tuple[bytes | None, Any]:
        """(value or None when missing, the reply's metadata or None) for one request;
        ``view``: a large value may be a read-only memoryview instead of ``bytes``."""
        obs = import_obstore()
        exc = obs.exceptions
        if (isinstance(br, RangeBR) and br.end <= br.start) or (isinstance(br, SuffixBR) and br.n == 0):
            meta = await self._head(key)  # obstore refuses empty ranges: ask whether it exists
            return (None, None) if meta is None else (b"", meta)
        path = self._path(key)
        options = {} if br is None else {"range": self._range_option(br)}
        attempt = 0
        while True:
            try:
                data, meta, (start, end) = await self._get_reply(path, options)
                break
            except (FileNotFoundError, exc.NotFoundError):
                return None, None
            except exc.NotSupportedError as e:
                # a 200 with the whole value to a range request: an empty value (nginx answers
                # those so), a server without suffix ranges, or one without Range support
                meta = await self._head(key)
                if meta is None:
                    return None, None
                if int(meta["size"]) == 0:
                    return b"", meta
                if isinstance(br, SuffixBR):
                    return await self._suffix_fallback(key, br, int(meta["size"]))
                raise StoreError(
                    f"cannot read key {key!r} at {self._where}: the server ignores Range requests "
                    f"(answered {br} with the whole value); ranged reads need a server with Range support"
                ) from e
            except Exception as e:
                if br is not None and _status(e, 416):
                    return b"", None  # the key exists; the range starts at or past its end
                if _is_body_error(e) and attempt < self.body_retries:
                    attempt += 1
                    await sleep(0.05 * 2**attempt * (0.5 + random.random()))
                    continue
                raise self._error("read", key, e) from e
        value = memoryview(data).toreadonly() if view and len(data) >= self.zero_copy_min_bytes else bytes(data)
        # never hand out wrong data: the body must be the range the reply says, which must be
        # the range asked for (obstore checks Content-Range; this checks the body against it)
        want_start = br.start if isinstance(br, (RangeBR, OffsetBR)) else start
        if len(value) != end - start or start != want_start or end > meta["size"]:
            raise StoreError(
                f"cannot read key {key!r} at {self._where}: asked for {br}, got bytes "
                f"[{start}, {end}) of {meta['size']} with a {len(value)}-byte body"
            )
        return value, meta

    async def _suffix_fallback(self, key: str, br: SuffixBR, size: int) -> tuple[bytes | None, Any]:
        return await self._fetch(key, RangeBR(max(size - br.n, 0), size))

    async def _get(self, key: str, byte_range: ByteRange | None) -> bytes | None:
        cache = self._cache
        if cache is None or not isinstance(byte_range, RangeBR):
            return (await self._fetch(key, byte_range))[0]
        hit = cache.get(key, byte_range.start, byte_range.end)
        if hit is not None:
            return bytes(hit)
        value = (await self._fetch(key, byte_range))[0]
        if value is not None:
            cache.put(key, byte_range.start, value)
        return value

    async def _get_parts(
        self, key: str, parts: Sequence[ByteRange | None], limit: asyncio.Semaphore
    ) -> list[bytes | None]:
        """The merged ranges of one key (``get_many``): large ranged replies as views (their
        chunks are sliced out without copies), ranges read before from the cache."""
        cache = self._cache
        out: list[bytes | None] = [None] * len(parts)
        if cache is None:
            todo = list(range(len(parts)))
        else:
            todo = cache.fill(key, [(br.start, br.end) if isinstance(br, RangeBR) else None for br in parts], out)

        async def one(i: int) -> None:
            br = parts[i]
            async with limit:
                value = (await self._fetch(key, br, view=isinstance(br, RangeBR)))[0]
            out[i] = value
            if cache is not None and value is not None and isinstance(br, RangeBR):
                cache.put(key, br.start, value)

        await gather(one(i) for i in todo)
        return out

    async def get_versioned(
        self, key: str, byte_range: ByteRange | None = None
    ) -> tuple[bytes | None, Hashable | None]:
        """The value and its ETag from one GET (``MISSING`` when absent, None without an ETag)."""
        value, meta = await self._fetch(validate_key(key), byte_range, view=True)
        if value is None:
            return None, MISSING
        etag = meta.get("e_tag") if meta else None
        if etag is None and meta is None:  # a 416 / empty-range reply: ask for the ETag
            head = await self._head(key)
            etag = head.get("e_tag") if head else None
        return value, etag

    versions_in_replies = True

    @property
    def tagged_reads(self) -> SupportsGetManyTagged:
        return self

    async def get_many_tagged(self, keys: Sequence[str]) -> tuple[list[bytes | None], list[Hashable | None]]:
        """Whole values, each with the ETag of the GET that read it (``get_versioned``)."""
        got = await gather(self.get_versioned(k) for k in keys)
        return [v for v, _ in got], [t for _, t in got]

    async def generation(self, key: str) -> Hashable | None:
        """None: asking would cost a request, so caches (a shard index) are trusted.

        Writers that must not lose a concurrent update use ``get_versioned`` / ``set_if``.
        """
        validate_key(key)
        return None

    async def checked_generation(self, key: str) -> Hashable | None:
        """The ETag from a HEAD (``MISSING`` when absent, None when the server sends none)."""
        return _etag_of(await self._head(validate_key(key)))

    async def exists(self, key: str) -> bool:
        return await self._head(validate_key(key)) is not None


class HTTPStore(ObjectStoreBase):
    """Keys as URLs under ``url`` (``"c/0/0"`` is ``{url}/c/0/0``), read-only.

    Options: ``timeout`` / ``connect_timeout`` (seconds, per request), ``max_retries`` and
    ``retry_timeout`` (bounded retries with backoff on 5xx, timeouts and resets),
    ``max_concurrency`` (requests in flight per batch), ``headers`` (sent with every request,
    e.g. an Authorization header), ``client_options`` (passed to obstore as they are),
    ``cache_bytes`` (keep up to this many bytes of byte ranges read, so that reading them
    again costs no request; 0 = off), ``body_retries`` (new requests after a body broke off or
    stalled past ``timeout``, default 2). A read against a server that stalls takes at most
    about ``(1 + body_retries) * (1 + max_retries) * timeout`` plus backoff, then fails.
    Listing is not possible over plain HTTP.
    """

    def __init__(
        self,
        url: str,
        *,
        read_only: bool = True,
        timeout: float | str = 30.0,
        connect_timeout: float | str = 5.0,
        max_retries: int = 3,
        retry_timeout: float = 60.0,
        max_concurrency: int = 32,
        headers: Mapping[str, str] | None = None,
        client_options: Mapping[str, Any] | None = None,
        cache_bytes: int = 0,
        body_retries: int = 2,
    ) -> None:
        if not read_only:
            raise UnsupportedFeatureError(f"cannot open {url!r} for writing: HTTP stores are read-only (use s3:// to write)")
        super().__init__(read_only=True)
        obs = import_obstore()
        self._url = url.rstrip("/") + "/"
        self._where = self._url
        self.max_concurrency = int(max_concurrency)
        self.body_retries = int(body_retries)
        self._cache = RangeCache(cache_bytes) if cache_bytes > 0 else None
        opts = make_client_options(url, timeout=timeout, connect_timeout=connect_timeout, extra=client_options)
        if headers:
            opts["default_headers"] = dict(headers)
        self._client = obs.store.HTTPStore(self._url, client_options=opts,
                                           retry_config=retry_config(max_retries, retry_timeout))

    @property
    def url(self) -> str:
        return self._url

    def __repr__(self) -> str:
        return f"HTTPStore({self._url!r})"

    async def _set(self, key: str, value: bytes) -> None:  # unreachable: read-only is checked first
        self._check_writable(key)

    async def _delete(self, key: str) -> None:
        self._check_writable(key)

    async def _list_prefix(self, prefix: str) -> AsyncIterator[str]:
        raise UnsupportedFeatureError(f"cannot list {prefix!r} under {self._url}: plain HTTP servers cannot list keys")
        yield  # pragma: no cover
