"""S3-compatible object storage (AWS S3, SeaweedFS, MinIO, Ceph, R2, ...) through obstore.

``s3://bucket/prefix`` maps key ``"c/0/0"`` to object ``prefix/c/0/0``. Reads are those of
``ObjectStoreBase`` (ranged GETs, 404 = missing). Writes are single PUTs up to
``multipart_threshold`` bytes (64 MiB by default, so a shard is one request) and multipart
uploads above it. Deletes in a batch go as DeleteObjects requests of up to 1000 keys.
Listing pages through ListObjectsV2.

Conditional writes: ``get_versioned`` returns the ETag of the reply it read, and ``set_if``
sends ``If-Match: <etag>`` (or ``If-None-Match: *`` for a key read as missing); a 412 reply
becomes ``ConflictError`` naming the key. S3 has no conditional DELETE for ordinary buckets,
so a conditional delete checks the ETag with a HEAD first (a small race window remains).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import AsyncIterable, AsyncIterator, Hashable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .._aio import gather
from ..errors import ConflictError, StoreError
from ._aws_credentials import INSTANCE_METADATA_ENV, s3_credentials
from ._coalesce import coalesce_ranges
from ._keys import validate_key
from .base import (
    MISSING,
    ByteRange,
    Parts,
    RangeBR,
    _check_value,
    joined,
)
from .http import (
    ObjectStoreBase,
    RangeCache,
    import_obstore,
    make_client_options,
    retry_config,
)
from .read_modify_write import DEFAULT_RETRY_CONFLICTS
from .streamed import Buffer, Streamed, checked_ends

if TYPE_CHECKING:
    import asyncio
else:
    from .._lazy import asyncio

__all__ = ["S3Store", "s3_credentials", "s3_store_from_url"]

#: DeleteObjects takes at most this many keys per request
_DELETE_BATCH = 1000


def _env(*names: str) -> str | None:
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    return None


async def _as_async(parts: Iterable[Buffer]) -> AsyncIterator[Buffer]:
    for part in parts:
        yield part


class S3Store(ObjectStoreBase):
    """Keys under ``prefix`` in ``bucket`` of an S3-compatible service.

    Credentials are looked up in this order, and the first source found is used
    (``credential_source`` says which; see ``s3_credentials``):

    1. the arguments (``access_key_id`` / ``secret_access_key`` / ``session_token``);
    2. the environment: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``;
    3. the shared files: ``AWS_SHARED_CREDENTIALS_FILE`` (``~/.aws/credentials``), then
       ``AWS_CONFIG_FILE`` (``~/.aws/config``), profile ``profile`` or ``AWS_PROFILE`` or
       ``default``;
    4. the cloud instance-metadata service, only when asked for: ``instance_metadata=True``
       or ``SHARDSTORE_S3_INSTANCE_METADATA=1`` (then obstore's own chain runs: container
       and web-identity credentials, and the metadata endpoint on a link-local address);
    5. otherwise unsigned (anonymous) requests, as ``anonymous=True`` asks for: public
       buckets read; an access-denied reply says how to pass credentials.

    No network request is made to find credentials unless step 4 was asked for. Region and
    endpoint come from the arguments, else ``AWS_REGION`` / ``AWS_DEFAULT_REGION`` and
    ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``, else the profile's ``region`` in the
    config file. ``cache_bytes`` > 0 keeps that many bytes of byte ranges read (LRU), so
    that reading them again costs no request; this store's writes and deletes drop a key's
    ranges. A custom ``endpoint`` uses path-style requests (``endpoint/bucket/key``).
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        read_only: bool = False,
        endpoint: str | None = None,
        region: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        session_token: str | None = None,
        anonymous: bool = False,
        profile: str | None = None,
        instance_metadata: bool | None = None,
        virtual_hosted_style: bool | None = None,
        timeout: float | str = 60.0,
        connect_timeout: float | str = 5.0,
        max_retries: int = 5,
        retry_timeout: float = 120.0,
        max_concurrency: int = 32,
        multipart_threshold: int = 64 << 20,
        multipart_chunk_size: int = 16 << 20,
        retry_conflicts: int = DEFAULT_RETRY_CONFLICTS,
        cache_bytes: int = 0,
        body_retries: int = 2,
        client_options: Mapping[str, Any] | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(read_only=read_only)
        obs = import_obstore()
        if not bucket:
            raise ValueError("an S3 store needs a bucket name")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        if self.prefix:
            validate_key(self.prefix)
        self._pre = f"{self.prefix}/" if self.prefix else ""
        endpoint = endpoint or _env("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
        if (access_key_id is None) != (secret_access_key is None):
            raise ValueError("give both access_key_id and secret_access_key (or neither)")
        creds = s3_credentials(access_key_id, secret_access_key, session_token, anonymous=anonymous,
                               profile=profile, instance_metadata=instance_metadata)
        access_key_id, secret_access_key, session_token = creds.access_key_id, creds.secret_access_key, creds.session_token
        #: where the credentials came from: "arguments", "environment", "file:<path> [<profile>]",
        #: "instance-metadata" or "anonymous"
        self.credential_source = creds.source
        region = region or _env("AWS_REGION", "AWS_DEFAULT_REGION") or creds.region or "us-east-1"
        self.endpoint = endpoint
        self.region = region
        self.max_concurrency = int(max_concurrency)
        self.body_retries = int(body_retries)
        self.multipart_threshold = int(multipart_threshold)
        self.multipart_chunk_size = int(multipart_chunk_size)
        if self.multipart_chunk_size < 5 << 20:
            raise ValueError("multipart_chunk_size must be at least 5 MiB (the S3 minimum part size)")
        #: how often a read-modify-write that lost a race is redone (0: raise ConflictError)
        self.retry_conflicts = int(retry_conflicts)
        self._cache = RangeCache(cache_bytes) if cache_bytes > 0 else None
        cfg: dict[str, Any] = {"region": region}
        if endpoint:
            cfg["endpoint"] = endpoint
            cfg["virtual_hosted_style_request"] = bool(virtual_hosted_style)
        elif virtual_hosted_style is not None:
            cfg["virtual_hosted_style_request"] = bool(virtual_hosted_style)
        if creds.source == "anonymous":
            cfg["skip_signature"] = True
        else:
            # over TLS, which protects the body already, an upload's body is not hashed into
            # its signature (botocore's default too): no SHA-256 pass over every value put
            # (17.9 -> 5.2 ms of CPU for a 12 MB shard); over plain HTTP it still is
            cfg["unsigned_payload"] = not endpoint or urlsplit(endpoint).scheme.lower() == "https"
        if access_key_id is not None:
            cfg["access_key_id"] = access_key_id
            cfg["secret_access_key"] = secret_access_key
            if session_token:
                cfg["session_token"] = session_token
        cfg.update(config or {})
        self._where = f"s3://{bucket}/{self._pre}" + (f" ({endpoint})" if endpoint else "")
        try:
            self._client = obs.store.S3Store(
                bucket, config=cfg,
                client_options=make_client_options(endpoint or "https://", timeout=timeout,
                                                   connect_timeout=connect_timeout, extra=client_options),
                retry_config=retry_config(max_retries, retry_timeout))
        except Exception as e:
            raise StoreError(f"cannot configure the S3 store for s3://{bucket}/{self._pre}: {e}") from e

    def __repr__(self) -> str:
        flag = ", read_only=True" if self.read_only else ""
        where = f", endpoint={self.endpoint!r}" if self.endpoint else ""
        return f"S3Store('s3://{self.bucket}/{self._pre}'{where}{flag})"

    def _path(self, key: str) -> str:
        return self._pre + key

    def _error(self, what: str, key: str, e: BaseException) -> StoreError:
        err = super()._error(what, key, e)
        if self.credential_source == "anonymous" and "access denied" in str(err):
            return StoreError(
                f"{err}; no credentials were found, so the request was unsigned: pass "
                "storage_options={'access_key_id': ..., 'secret_access_key': ...} (or 'profile'), set "
                "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AWS_PROFILE, or write ~/.aws/credentials; "
                f"on a cloud instance, allow its metadata service with instance_metadata=True or {INSTANCE_METADATA_ENV}=1"
            )
        return err

    # -- writes ------------------------------------------------------------------------------
    async def _put(self, key: str, value: Any, mode: Any = None) -> None:
        obs = import_obstore()
        exc = obs.exceptions
        data = joined(value)
        if self._cache is not None:
            self._cache.drop(key)
        size = memoryview(data).nbytes
        multipart = mode is None and size > self.multipart_threshold
        try:
            async with self._limit():
                await obs.put_async(self._client, self._path(key), data, mode=mode, use_multipart=multipart,
                                    chunk_size=self.multipart_chunk_size, max_concurrency=8)
        except (exc.AlreadyExistsError, exc.PreconditionError) as e:
            raise ConflictError(
                f"{key!r} at {self._where} changed since it was read (another writer updated it); "
                "re-read and retry"
            ) from e
        except (FileNotFoundError, exc.NotFoundError) as e:
            if mode is not None:  # If-Match on an object deleted meanwhile
                raise ConflictError(f"{key!r} at {self._where} was deleted since it was read (another writer)") from e
            raise self._error("write", key, e) from e
        except Exception as e:
            raise self._error("write", key, e) from e

    async def _set(self, key: str, value: bytes) -> None:
        await self._put(key, value)

    async def set_streamed(self, key: str, value: Streamed) -> None:
        """A value without a head that fits in one part (``multipart_chunk_size``) is one
        PUT; a larger one streams as a multipart upload (parts of ``multipart_chunk_size``, at
        least the S3 minimum of 5 MiB; the object appears only when the upload completes, so
        readers see the old value until then). Unconditional, like every whole-value write
        here; a value with a head (an index at the start) cannot be written before its head is
        known, so it is collected and put at once."""
        if value.head_size:
            await super().set_streamed(key, value)
            return
        self._check_writable(key)
        validate_key(key)
        body = value.body
        parts = body.__aiter__() if isinstance(body, AsyncIterable) else _as_async(body)
        # up to one part is held before deciding: a multipart upload costs two more round
        # trips (create, complete) than a PUT, and a single part would hold as much anyway
        held: list[Buffer] = []
        size = 0
        async for part in parts:
            held.append(part)
            size += memoryview(part).nbytes
            if size > self.multipart_chunk_size:
                break
        else:  # the whole body fits one part: finish says whether (and what) to store
            ends = checked_ends(key, value)
            if ends is None:
                await self._delete_many([key])
            else:
                await self._put(key, Parts([*held, ends[1]]))
            return

        failed: list[BaseException] = []  # the body's own error (an encoder's), raised as it is

        async def stream() -> AsyncIterator[Buffer]:
            try:
                for part in held:
                    yield part
                held.clear()  # (sent on: not kept for the whole upload)
                async for part in parts:
                    yield part
                ends = checked_ends(key, value)
            except BaseException as e:
                failed.append(e)
                raise
            if ends is not None and ends[1]:
                yield ends[1]

        obs = import_obstore()
        if self._cache is not None:
            self._cache.drop(key)
        try:
            async with self._limit():
                await obs.put_async(self._client, self._path(key), stream(), use_multipart=True,
                                    chunk_size=self.multipart_chunk_size, max_concurrency=8)
        except Exception as e:
            if failed:
                raise failed[0] from None
            raise self._error("write", key, e) from e

    async def _delete(self, key: str) -> None:
        await self._delete_many([key])

    async def _delete_many(self, keys: Sequence[str]) -> None:
        obs = import_obstore()
        for i in range(0, len(keys), _DELETE_BATCH):
            batch = list(keys[i : i + _DELETE_BATCH])
            if self._cache is not None:
                for k in batch:
                    self._cache.drop(k)
            try:
                async with self._limit():
                    await obs.delete_async(self._client, [self._path(k) for k in batch])
            except (FileNotFoundError, obs.exceptions.NotFoundError):
                continue  # deleting a missing key is not an error
            except Exception as e:
                raise self._error("delete", batch[0], e) from e

    async def set_many(self, items: Sequence[tuple[str, bytes | None]]) -> None:
        """Puts concurrently (bounded); deletes as DeleteObjects batches."""
        if not items:
            return
        final = self._checked_batch(items)
        limit = asyncio.Semaphore(self.max_concurrency)

        async def put(key: str, value: bytes) -> None:
            async with limit:
                await self._put(key, value)

        deletes = [k for k, v in final.items() if v is None]
        jobs = [put(k, v) for k, v in final.items() if v is not None]
        if deletes:
            jobs.append(self._delete_many(deletes))
        await asyncio.gather(*jobs)

    async def set_if(self, key: str, value: bytes | Parts | None, generation: Hashable | None) -> None:
        """Conditional PUT: ``If-Match: <etag>``, or ``If-None-Match: *`` for ``MISSING``."""
        self._check_writable(key)
        validate_key(key)
        if value is not None:
            _check_value(key, value)
        if value is None:
            if generation is not None:
                meta = await self._head(key)
                now = MISSING if meta is None else meta.get("e_tag")
                if now != generation:
                    raise ConflictError(f"{key!r} at {self._where} changed since it was read (another writer updated it); re-read and retry")
            await self._delete_many([key])
            return
        mode: str | dict[str, str] | None
        if generation is None:
            mode = None
        elif generation == MISSING:
            mode = "create"
        elif isinstance(generation, str):
            mode = {"e_tag": generation}
        else:
            raise TypeError(f"not a generation of an S3 object: {generation!r}")
        await self._put(key, value, mode)

    async def delete_prefix(self, prefix: str) -> None:
        self._check_writable(prefix)
        keys = [k async for k in self.list_prefix(prefix)]
        await self._delete_many(keys)

    # -- reads of one version ------------------------------------------------------------------
    async def get_ranges_at(
        self, key: str, ranges: Sequence[ByteRange | None], generation: Hashable | None
    ) -> list[bytes | None] | None:
        """Ranged GETs with ``If-Match: <etag>`` (the ETag a shard index was read at): a 412
        (the object was replaced meanwhile) gives None, so the caller re-reads the index. With
        ``cache_bytes``, ranges read before at this same ETag come from the range cache: bytes of
        that version, consistent with the index the caller holds."""
        validate_key(key)
        if not isinstance(generation, str) or any(not isinstance(br, RangeBR) for br in ranges):
            return await super().get_ranges_at(key, ranges, generation)
        obs = import_obstore()
        exc = obs.exceptions
        spans = [(br.start, br.end) for br in ranges]  # type: ignore[union-attr]
        out: list[bytes | None] = [None] * len(ranges)
        # the range cache serves ranges of this very version: entries are filed under the key
        # *and* its ETag, so a replaced object's old bytes can never match
        cache, tagged = self._cache, f"{key}\0{generation}"
        todo = list(range(len(spans))) if cache is None else cache.fill(tagged, spans, out)
        if not todo:
            return out
        wanted = [spans[i] for i in todo]
        groups = [(s, e, [todo[j] for j in m]) for s, e, m in
                  coalesce_ranges(wanted, self.coalesce_max_gap or 0, self.coalesce_max_request)]
        stale = False

        async def one(start: int, end: int, members: list[int]) -> None:
            nonlocal stale
            if end <= start:
                for i in members:
                    out[i] = b""
                return
            try:
                body = (await self._get_reply(self._path(key), {"range": (start, end), "if_match": generation}))[0]
            except (exc.PreconditionError, exc.NotFoundError, FileNotFoundError):
                stale = True  # replaced or deleted since the index was read
                return
            except Exception as e:
                raise self._error("read", key, e) from e
            # as ``get_many``: a large reply is handed out as a read-only view (a whole shard's
            # chunks are sliced out of it without copies), a small one as bytes
            data: bytes | memoryview = (
                memoryview(body).toreadonly() if len(body) >= self.zero_copy_min_bytes else bytes(body)
            )
            if cache is not None:
                cache.put(tagged, start, data)
            for i in members:
                lo, hi = spans[i]
                out[i] = data[lo - start : hi - start]  # (bytes-like, as get_many's)

        await gather(one(s, e, m) for s, e, m in groups)
        return None if stale else out

    # -- listing -----------------------------------------------------------------------------
    async def _list_prefix(self, prefix: str) -> AsyncIterator[str]:
        obs = import_obstore()
        # object_store lists whole path segments: list the directory, filter the partial name
        head = prefix.rpartition("/")[0]
        full = self._pre + head
        n = len(self._pre)
        try:
            stream = obs.list(self._client, prefix=full or None, chunk_size=1000)
            async for batch in stream:
                for meta in batch:
                    path = meta["path"]
                    if not path.startswith(self._pre):
                        continue
                    key = path[n:]
                    if key.startswith(prefix):
                        yield key
        except Exception as e:
            raise self._error("list", prefix or "''", e) from e


def s3_store_from_url(url: str, read_only: bool, options: Mapping[str, Any]) -> S3Store:
    """``s3://bucket/prefix`` plus storage options -> S3Store (the registry's factory)."""
    parts = urlsplit(url)
    if not parts.netloc:
        raise ValueError(f"an S3 URL needs a bucket: s3://bucket/prefix, got {url!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"an S3 URL takes no query or fragment: {url!r}")
    opts = dict(options)
    aliases = {"endpoint_url": "endpoint", "aws_region": "region", "key": "access_key_id",
               "secret": "secret_access_key", "token": "session_token", "aws_access_key_id": "access_key_id",
               "aws_secret_access_key": "secret_access_key", "aws_session_token": "session_token"}
    for alias, name in aliases.items():
        if alias in opts:
            opts.setdefault(name, opts.pop(alias))
    creds = opts.pop("credentials", None)
    if creds is not None:  # {"access_key_id": ..., "secret_access_key": ..., "session_token": ...}
        for k, v in dict(creds).items():
            opts.setdefault(aliases.get(k) or k, v)
    known = {p.name for p in inspect.signature(S3Store).parameters.values()
             if p.kind is p.KEYWORD_ONLY} - {"read_only"}
    unknown = set(opts) - known
    if unknown:
        raise ValueError(f"unknown storage options for an S3 store: {sorted(unknown)} (known: {sorted(known | {'credentials'})})")
    return S3Store(parts.netloc, parts.path, read_only=read_only, **opts)
