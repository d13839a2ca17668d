"""Layer 1: the key-value store interface. Bytes only: no numpy, no metadata.

Keys are ``/``-separated relative strings. A missing key reads as ``None``, never an exception.
Byte ranges are ``RangeBR(start, end)`` (end exclusive), ``OffsetBR(start)`` (to the end) and
``SuffixBR(n)`` (the last n bytes). A range that reaches past the end of a value is clipped, as
HTTP servers do; a start at or beyond the end gives ``b""``.
"""

from __future__ import annotations

import abc
import weakref
from collections.abc import AsyncIterator, Hashable, Sequence
from typing import TYPE_CHECKING, Final, cast

from .._aio import gather
from ..errors import ConflictError, NotPicklableError, ReadOnlyError
from ._coalesce import coalesce_ranges
from ._declarations import StoreDeclarations

# (re-exported: key validation is part of the store interface)
from ._keys import validate_key, validate_prefix

# (re-exported: stores and their callers import byte ranges from here)
from .byte_range import ByteRange, OffsetBR, RangeBR, SuffixBR, resolve_range, slice_range

# (``Update``, ``conflict_backoff`` and ``DEFAULT_RETRY_CONFLICTS`` re-exported for the stores and adapters)
from .read_modify_write import (
    DEFAULT_RETRY_CONFLICTS,
    Update,
    conflict_backoff,
    run_update,
    update_steps,
)

if TYPE_CHECKING:
    import asyncio

    from .streamed import Streamed
else:
    from .._lazy import asyncio

#: ``generation`` of a key that does not exist
MISSING: Final = ("missing",)

__all__ = [
    "DEFAULT_RETRY_CONFLICTS",
    "MISSING",
    "ByteRange",
    "OffsetBR",
    "Parts",
    "RangeBR",
    "Store",
    "SuffixBR",
    "Update",
    "conflict_backoff",
    "joined",
    "resolve_range",
    "slice_range",
    "validate_key",
    "validate_prefix",
]


class Parts(tuple):
    """A value given as bytes-like parts, stored as their concatenation.

    Lets a sharding adapter hand a shard to a backend that can write it without joining it
    first (``Store.accepts_parts``); other backends receive it joined.
    """

    __slots__ = ()


def _check_value(key: str, value: object) -> None:
    if value is None or isinstance(value, str):
        raise TypeError(f"value for store key {key!r} must be bytes-like, got {type(value).__name__}")


def joined(value: bytes | Parts) -> bytes:
    """``value`` as one bytes-like object."""
    return b"".join(value) if isinstance(value, Parts) else value


class Store(StoreDeclarations, abc.ABC):
    """Asynchronous key-value store.

    Subclasses implement ``_get``, ``_set``, ``_delete``, ``_list_prefix`` (and may override
    ``get_many`` / ``set_many`` / ``exists`` / ``_get_parts`` for efficiency). The public
    methods validate keys and enforce ``read_only`` once, here. The settings and declared
    abilities of a store are its base class, ``_declarations.StoreDeclarations``.
    """

    def __init__(self, *, read_only: bool = False) -> None:
        self._read_only = read_only

    def __reduce__(self) -> tuple:
        """A store pickles as the URL and options that open it again: no client sessions,
        locks, pools or caches travel, and the other process opens its own."""
        if self.reopen_spec is None:
            raise NotPicklableError(
                f"cannot pickle {self!r}: it was not opened from a path or URL, so another process "
                "cannot open it again (open it with a path, file:// or s3:// URL and storage_options)")
        from .registry import reopen_store

        return (reopen_store, self.reopen_spec)

    @property
    def read_only(self) -> bool:
        return self._read_only

    def _check_writable(self, key: str | None = None, *, more: int = 0) -> None:
        """Raise ReadOnlyError naming ``key`` (and how many ``more`` keys) when read-only."""
        if self.read_only:
            what = "" if key is None else f" {key!r}" + (f" and {more} more keys" if more else "")
            raise ReadOnlyError(f"cannot write{what}: {self!r} is read-only")

    # -- reads -------------------------------------------------------------------------------
    async def get(self, key: str, byte_range: ByteRange | None = None) -> bytes | None:
        """The value at ``key`` (or the given byte range of it); ``None`` when missing."""
        return await self._get(validate_key(key), byte_range)

    async def get_many(
        self, requests: Sequence[tuple[str, ByteRange | None]]
    ) -> list[bytes | None]:
        """Values for many ``(key, byte_range)`` requests, in request order.

        Results are bytes-like: remote stores may hand large ranged replies (>= 1 MiB) to the
        decoders as read-only ``memoryview``s instead of copying them into ``bytes``.

        The default groups requests by key. Per key, nearby ``RangeBR`` ranges are merged into
        few backend requests (``coalesce_max_gap`` / ``coalesce_max_request``) and sliced back
        out; other ranges go as they are, identical ones once; when the whole value is asked
        for, every request of that key is served from it. Keys are fetched concurrently,
        bounded by ``max_concurrency``. A missing key gives ``None`` for each of its requests.
        """
        by_key: dict[str, list[int]] = {}
        for pos, (key, _) in enumerate(requests):
            by_key.setdefault(validate_key(key), []).append(pos)
        results: list[bytes | None] = [None] * len(requests)
        limit = asyncio.Semaphore(self.max_concurrency)
        jobs = [
            self._get_key_many(key, [(p, requests[p][1]) for p in positions], results, limit)
            for key, positions in by_key.items()
        ]
        await gather(jobs)
        return results

    async def _get_key_many(
        self,
        key: str,
        reqs: list[tuple[int, ByteRange | None]],
        results: list[bytes | None],
        limit: asyncio.Semaphore,
    ) -> None:
        """Fetch every request of one key (plan, ``_get_parts``, slice back into ``results``)."""
        if any(br is None for _, br in reqs):
            (whole,) = await self._get_parts(key, [None], limit)
            for pos, br in reqs:
                results[pos] = whole if whole is None or br is None else slice_range(whole, br)
            return
        spans: dict[tuple[int, int], int] = {}  # distinct RangeBR -> index into `ranges`
        others: dict[ByteRange | None, int] = {}  # distinct OffsetBR / SuffixBR -> index into `parts`
        for _, br in reqs:
            if isinstance(br, RangeBR):
                spans.setdefault((br.start, br.end), len(spans))
        ranges = list(spans)
        if self.coalesce_max_gap is None:
            groups = [(s, e, [i]) for i, (s, e) in enumerate(ranges)]
        else:
            groups = coalesce_ranges(ranges, self.coalesce_max_gap, self.coalesce_max_request)
        parts: list[ByteRange | None] = [RangeBR(s, e) for s, e, _ in groups]
        group_of = {i: g for g, (_, _, members) in enumerate(groups) for i in members}
        for _, br in reqs:
            if not isinstance(br, RangeBR) and br not in others:
                others[br] = len(parts)
                parts.append(br)
        values = await self._get_parts(key, parts, limit)
        for pos, br in reqs:
            if isinstance(br, RangeBR):
                g = group_of[spans[(br.start, br.end)]]
                value = values[g]
                if value is not None:
                    g_start = groups[g][0]
                    value = value[br.start - g_start : br.end - g_start]
                results[pos] = value
            else:
                results[pos] = values[others[br]]

    async def _get_parts(
        self, key: str, parts: Sequence[ByteRange | None], limit: asyncio.Semaphore
    ) -> list[bytes | None]:
        """Fetch several (already merged) byte ranges of one key; ``limit`` bounds requests.

        The default is one ``_get`` per part, concurrently. A backend that reads many ranges
        cheaply in one call (a local file) overrides this.
        """

        async def one(br: ByteRange | None) -> bytes | None:
            async with limit:
                return await self._get(key, br)

        return await gather(one(br) for br in parts)

    async def generation(self, key: str) -> Hashable | None:
        """A cheap token that changes whenever the value at ``key`` changes, or None.

        Caches (a shard index) compare it to decide whether what they hold is still current.
        ``None`` means the backend cannot tell cheaply; a missing key gives ``MISSING``.
        Local files answer with one ``stat``; the in-memory store with a write counter.
        """
        validate_key(key)
        return None

    async def checked_generation(self, key: str) -> Hashable | None:
        """``generation``, asked even where that costs a request (a HEAD on HTTP and S3), for
        caches of decoded data that must never serve an old value; None: cannot tell."""
        return await self.generation(key)

    async def get_versioned(
        self, key: str, byte_range: ByteRange | None = None
    ) -> tuple[bytes | None, Hashable | None]:
        """The value (or range) at ``key`` and the generation it was read at.

        Read-modify-write callers pass that generation to ``set_if`` so a concurrent
        writer's update is never silently overwritten. Backends whose reads carry a version
        (an S3 ETag) override this to take both from one response.
        """
        gen = await self.generation(key)
        return await self.get(key, byte_range), gen

    async def get_ranges_at(
        self, key: str, ranges: Sequence[ByteRange | None], generation: Hashable | None
    ) -> list[bytes | None] | None:
        """Byte ranges of ``key``'s value *as it was at* ``generation`` (what ``get_versioned``
        returned with, say, a shard index), or None when the value has changed since.

        Readers of a unit in two steps (an index, then the data it points to) use it so that
        the data never comes from another version than the index. The default reads, then
        compares the generation again: sound for generations that never repeat for a key
        (files: a rename gives a new inode; memory: a write counter). Object stores override
        it with ``If-Match``. ``generation`` None (the backend cannot tell) reads plainly.
        """
        values = await self.get_many([(key, br) for br in ranges])
        if generation is not None:
            now = await self.generation(key)
            if now is not None and now != generation:
                return None
        return values

    async def exists(self, key: str) -> bool:
        """Whether ``key`` holds a value."""
        return (await self.get(key, RangeBR(0, 0))) is not None

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        """Every key that starts with ``prefix`` (full keys, any order)."""
        async for key in self._list_prefix(validate_prefix(prefix)):
            yield key

    async def list_dir(self, prefix: str) -> tuple[list[str], list[str]]:
        """Immediate children of ``prefix`` (which is '' or ends in '/'): (keys, sub-prefixes).

        Both are sorted names relative to ``prefix``; sub-prefixes without the trailing '/'.
        """
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        keys: set[str] = set()
        dirs: set[str] = set()
        async for key in self.list_prefix(prefix):
            rest = key[len(prefix) :]
            head, sep, _ = rest.partition("/")
            (dirs if sep else keys).add(head)
        return sorted(keys), sorted(dirs)

    # -- writes ------------------------------------------------------------------------------
    async def set(self, key: str, value: bytes) -> None:
        """Store ``value`` (any bytes-like object) at ``key``, atomically where the backend allows."""
        self._check_writable(key)
        validate_key(key)
        _check_value(key, value)
        await self._set(key, value if self.accepts_parts else joined(value))

    async def set_streamed(self, key: str, value: Streamed) -> None:
        """Store a value given as a stream of parts (``streamed.Streamed``; nothing stored:
        the key is deleted), as atomically as ``set``. The default collects the parts and
        writes them with one ``set``; local files and S3 write them as they arrive."""
        from .streamed import collect_async

        self._check_writable(key)
        validate_key(key)
        parts = await collect_async(key, value)
        if parts is None:
            await self._delete(key)
        else:
            await self._set(key, Parts(parts) if self.accepts_parts else b"".join(parts))  # type: ignore[arg-type]

    def set_streamed_sync(self, key: str, value: Streamed) -> None:
        """``set_streamed`` from any thread, for stores that declare ``sync_writes``: the
        default collects the parts and writes them with one ``set_sync``."""
        from .streamed import collect

        writes = self.sync_writes
        if writes is None:
            raise TypeError(f"{self!r} declares no synchronous writes")
        parts = collect(key, value)
        writes.set_sync(key, None if parts is None else Parts(parts))

    def _checked_batch(self, items: Sequence[tuple[str, bytes | None]]) -> dict[str, bytes | None]:
        """A ``set_many`` batch checked (writable, keys, values) and reduced to the last item
        of each key, in the order of those last occurrences."""
        if items:
            self._check_writable(items[0][0], more=len(items) - 1)
        final: dict[str, bytes | None] = {}
        for key, value in items:
            validate_key(key)
            if value is not None:
                _check_value(key, value)
            final.pop(key, None)
            final[key] = value
        return final

    async def set_many(self, items: Sequence[tuple[str, bytes | None]]) -> None:
        """Apply many writes concurrently; a ``None`` value deletes the key.

        When a key appears more than once, its last item wins. Sharding adapters override
        this to rewrite each touched shard once per batch.
        """
        final = self._checked_batch(items)
        limit = asyncio.Semaphore(self.max_concurrency)

        async def one(key: str, value: bytes | None) -> None:
            async with limit:
                if value is None:
                    await self._delete(key)
                else:
                    await self._set(key, value if self.accepts_parts else joined(value))

        await gather(one(k, v) for k, v in final.items())

    async def update_many(self, items: Sequence[tuple[str, bytes | Parts | Update | None]]) -> None:
        """Writes where some values are ``Update`` functions: the one read-modify-write.

        Plain values (and None) are written as ``set_many`` writes them. For each key with an
        ``Update``, the stored value is read once with its generation, passed to the function,
        and the result written once, conditionally on that generation (``set_if``: a lock
        across processes on local files, a conditional PUT on S3). A lost race re-reads and
        calls the function again, up to ``retry_conflicts`` times with backoff; then
        ``ConflictError`` names the key. A key's last item wins, as in ``set_many``.
        """
        final = self._checked_updates(items)
        plain = [(k, v) for k, v in final.items() if not callable(v)]
        updates = [(k, v) for k, v in final.items() if callable(v)]
        limit = asyncio.Semaphore(self.max_concurrency)

        async def one(key: str, update: Update) -> None:
            async with limit:
                await self._update(key, update)

        jobs = [one(k, u) for k, u in updates]
        if plain:  # (Parts values are bytes-like: set_many joins them where needed)
            jobs.append(self.set_many(cast("list[tuple[str, bytes | None]]", plain)))
        await gather(jobs)

    def _checked_updates(self, items: Sequence[tuple[str, bytes | Parts | Update | None]]) -> dict[str, bytes | Parts | Update | None]:
        """``_checked_batch`` for ``update_many`` items (functions are not checked as values)."""
        if items:
            self._check_writable(items[0][0], more=len(items) - 1)
        final: dict[str, bytes | Parts | Update | None] = {}
        for key, value in items:
            validate_key(key)
            if value is not None and not callable(value):
                _check_value(key, value)
            final.pop(key, None)
            final[key] = value
        return final

    async def _update(self, key: str, update: Update) -> None:
        """One read-modify-write of ``key`` through ``get_versioned`` and ``set_if``, retried
        (``update_steps`` run on the event loop)."""
        steps = update_steps(key, update, self.retry_conflicts)
        reply: object = None
        while True:
            try:
                step = steps.send(reply)
            except StopIteration:
                return
            if step[0] == "read":
                reply = await self.get_versioned(key)
            elif step[0] == "merge":
                reply = await run_update(update, step[1], self.inline_update_bytes, self.codec_threads)
            elif step[0] == "write":
                try:
                    await self.set_if(key, step[1], step[2])
                    reply = None
                except ConflictError as e:
                    reply = e
            else:
                await conflict_backoff(step[1])
                reply = None

    async def set_if(self, key: str, value: bytes | Parts | None, generation: Hashable | None) -> None:
        """Write (or, for ``None``, delete) ``key`` only if it is still at ``generation``.

        ``generation`` is what ``get_versioned`` / ``generation`` returned; ``MISSING`` means
        "only if the key does not exist"; ``None`` (the backend could not tell) writes
        unconditionally. Raises ``ConflictError`` naming the key when another writer got there
        first. The default compares and writes under a per-key lock, which is exact for
        writers in this process; object-store backends override it with conditional requests.
        """
        self._check_writable(key)
        validate_key(key)
        if value is not None:
            _check_value(key, value)
        locks = self.__dict__.setdefault("_cas_locks", weakref.WeakValueDictionary())
        lock = locks.get(key)
        if lock is None:
            lock = locks[key] = asyncio.Lock()
        async with lock:  # per key: compare-and-write of one key is atomic here
            if generation is not None:
                now = await self.generation(key)
                if now is not None and now != generation:
                    raise ConflictError(
                        f"{key!r} changed since it was read (another writer updated it); "
                        "re-read and retry"
                    )
            if value is None:
                await self._delete(key)
            else:  # (Parts reach only backends that take them: accepts_parts)
                await self._set(key, value if self.accepts_parts else joined(value))  # type: ignore[arg-type]

    async def delete(self, key: str) -> None:
        """Remove ``key``; removing a missing key is not an error."""
        self._check_writable(key)
        await self._delete(validate_key(key))

    async def delete_prefix(self, prefix: str) -> None:
        """Remove every key under ``prefix``."""
        self._check_writable(prefix)
        keys = [k async for k in self.list_prefix(prefix)]
        await self.set_many([(k, None) for k in keys])

    # -- backend hooks -----------------------------------------------------------------------
    @abc.abstractmethod
    async def _get(self, key: str, byte_range: ByteRange | None) -> bytes | None: ...

    @abc.abstractmethod
    async def _set(self, key: str, value: bytes) -> None: ...

    @abc.abstractmethod
    async def _delete(self, key: str) -> None: ...

    @abc.abstractmethod
    def _list_prefix(self, prefix: str) -> AsyncIterator[str]: ...
