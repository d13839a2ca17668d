"""Stores over other stores: a key prefix, a read-only view, and a request recorder for tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Hashable, Sequence
from typing import TYPE_CHECKING, ClassVar, NamedTuple

from ._coalesce import coalesce_ranges
from ._keys import validate_key, validate_prefix
from .base import (
    ByteRange,
    Parts,
    RangeBR,
    Store,
    Update,
)

if TYPE_CHECKING:
    from ._filelock import Lease
    from .streamed import Streamed
    from .sync_protocols import (
        OpenValue,
        SupportsCheckedGenerationSync,
        SupportsFilePath,
        SupportsGetManyTagged,
        SupportsGetSync,
        SupportsGetTransientSync,
        SupportsOpenSync,
        SupportsSetSync,
    )

__all__ = ["AsyncOnlyStore", "PrefixStore", "ReadOnlyStore", "RecordingStore", "Request", "SyncRecordingStore"]


class _Wrapper(Store):
    """Forwards to ``base``; ``read_only`` follows the base (or is forced on).

    The synchronous protocols are forwarded as the base declares them (decided once, here),
    unless the class says it passes none (``forwards_sync``).
    """

    #: whether the base's synchronous reads and writes pass through this wrapper
    forwards_sync: ClassVar[bool] = True
    #: whether the base's ``file_paths`` pass through (native readers and writers, and bcolz'
    #: empty ``data/`` directory, then use the files directly, bypassing this wrapper)
    forwards_file_paths: ClassVar[bool] = True
    #: whether the base's tagged reads (values with the versions their replies carried) and
    #: versioned replies pass through: a wrapper that changes values or counts requests says no
    forwards_tagged: ClassVar[bool] = True

    def __init__(self, base: Store, *, read_only: bool = False) -> None:
        if not isinstance(base, Store):
            raise TypeError(f"{type(self).__name__} wraps a Store, got {type(base).__name__}")
        super().__init__(read_only=read_only)
        self.base = base
        forwards = self.forwards_sync
        self._base_reads = base.sync_reads if forwards else None
        self._base_opens = base.sync_opens if forwards else None
        self._base_writes = base.sync_writes if forwards and not self.read_only else None
        self._base_paths = base.file_paths if self.forwards_file_paths else None
        self._base_transient = base.transient_reads if forwards else None
        self._base_checks = base.sync_checks if forwards else None

    @property
    def sync_reads(self) -> SupportsGetSync | None:
        return None if self._base_reads is None else self

    @property
    def sync_opens(self) -> SupportsOpenSync | None:
        return None if self._base_opens is None else self

    @property
    def sync_checks(self) -> SupportsCheckedGenerationSync | None:
        return None if self._base_checks is None else self

    def checked_generation_sync(self, key: str) -> Hashable | None:
        checks = self._base_checks
        assert checks is not None, "called only when sync_checks is declared"
        return checks.checked_generation_sync(self._full(key))

    def open_sync(self, key: str) -> OpenValue | None:
        opens = self._base_opens
        assert opens is not None, "called only when sync_opens is declared"
        return opens.open_sync(self._full(key))

    @property
    def sync_writes(self) -> SupportsSetSync | None:
        return None if self._base_writes is None else self

    @property
    def file_paths(self) -> SupportsFilePath | None:
        return None if self._base_paths is None else self

    def get_sync(self, key: str, byte_range: ByteRange | None = None) -> bytes | None:
        reads = self._base_reads
        assert reads is not None, "called only when sync_reads is declared"
        return reads.get_sync(self._full(key), byte_range)

    @property
    def transient_reads(self) -> SupportsGetTransientSync | None:
        return None if self._base_transient is None else self

    def get_transient_sync(self, key: str, keep_bytes: int) -> bytes | memoryview | None:
        transient = self._base_transient
        assert transient is not None, "called only when transient_reads is declared"
        return transient.get_transient_sync(self._full(key), keep_bytes)

    def get_ranges_sync(self, key: str, ranges: Sequence[ByteRange | None]) -> list[bytes | None]:
        reads = self._base_reads
        assert reads is not None, "called only when sync_reads is declared"
        return reads.get_ranges_sync(self._full(key), ranges)

    def generation_sync(self, key: str) -> Hashable | None:
        reads = self._base_reads
        assert reads is not None, "called only when sync_reads is declared"
        return reads.generation_sync(self._full(key))

    def file_path(self, key: str) -> str:
        paths = self._base_paths
        assert paths is not None, "called only when file_paths is declared"
        return paths.file_path(self._full(key))

    @property
    def absent_without_file(self) -> bool:
        paths = self._base_paths
        return paths is not None and paths.absent_without_file

    def set_sync(self, key: str, value: bytes | Parts | None, atomic: bool = True) -> None:
        writes = self._base_writes
        assert writes is not None, "called only when sync_writes is declared"
        self._check_writable(key)
        writes.set_sync(self._full(validate_key(key)), value, atomic)

    def update_many_sync(self, items: Sequence[tuple[str, bytes | Parts | Update | None]]) -> None:
        writes = self._base_writes
        assert writes is not None, "called only when sync_writes is declared"
        if items:
            self._check_writable(items[0][0], more=len(items) - 1)
        writes.update_many_sync([(self._full(validate_key(k)), v) for k, v in items])

    def set_streamed_sync(self, key: str, value: Streamed) -> None:
        if self._base_writes is None:
            raise TypeError(f"{self!r} declares no synchronous writes")
        self._check_writable(key)
        self.base.set_streamed_sync(self._full(validate_key(key)), value)

    async def set_streamed(self, key: str, value: Streamed) -> None:
        # the base streams it (a local temp file, an S3 multipart upload) as it can
        self._check_writable(key)
        await self.base.set_streamed(self._full(validate_key(key)), value)

    @property
    def read_only(self) -> bool:
        return self._read_only or self.base.read_only

    @property
    def runs_on_any_loop(self) -> bool:  # type: ignore[override]
        return self.base.runs_on_any_loop

    @property
    def answers_inline(self) -> bool:  # type: ignore[override]
        return self.base.answers_inline

    @property
    def reads_inline(self) -> bool:  # type: ignore[override]
        return self.base.reads_inline

    @property
    def versions_in_replies(self) -> bool:  # type: ignore[override]
        return self.forwards_tagged and self.base.versions_in_replies

    @property
    def tagged_reads(self) -> SupportsGetManyTagged | None:
        return self if self.forwards_tagged and self.base.tagged_reads is not None else None

    async def get_many_tagged(self, keys: Sequence[str]) -> tuple[list[bytes | None], list[Hashable | None]]:
        tagged = self.base.tagged_reads
        assert tagged is not None, "called only when tagged_reads is declared"
        return await tagged.get_many_tagged([self._full(validate_key(k)) for k in keys])

    async def generation(self, key: str) -> Hashable | None:
        return await self.base.generation(self._full(validate_key(key)))

    async def checked_generation(self, key: str) -> Hashable | None:
        return await self.base.checked_generation(self._full(validate_key(key)))

    async def get_versioned(
        self, key: str, byte_range: ByteRange | None = None
    ) -> tuple[bytes | None, Hashable | None]:
        return await self.base.get_versioned(self._full(validate_key(key)), byte_range)

    async def set_if(self, key: str, value: bytes | Parts | None, generation: Hashable | None) -> None:
        self._check_writable(key)
        await self.base.set_if(self._full(validate_key(key)), value, generation)

    async def get_ranges_at(
        self, key: str, ranges: Sequence[ByteRange | None], generation: Hashable | None
    ) -> list[bytes | None] | None:
        return await self.base.get_ranges_at(self._full(validate_key(key)), ranges, generation)

    async def update_many(self, items: Sequence[tuple[str, bytes | Parts | Update | None]]) -> None:
        # the base does the read-modify-writes: its locks and conditional writes apply
        if items:
            self._check_writable(items[0][0], more=len(items) - 1)
        await self.base.update_many([(self._full(validate_key(k)), v) for k, v in items])

    @property
    def retry_conflicts(self) -> int:  # type: ignore[override]
        return self.base.retry_conflicts

    def _full(self, key: str) -> str:
        return key


class PrefixStore(_Wrapper):
    """The keys of ``base`` under ``prefix`` (a key path such as ``"group/array"``).

    Key ``"c/0"`` here is ``"group/array/c/0"`` in the base; listings strip the prefix again.
    Batched calls go to the base's batched calls, so its coalescing or sharding still applies.
    """

    def __init__(self, base: Store, prefix: str) -> None:
        super().__init__(base)
        prefix = prefix.strip("/")
        if prefix:
            validate_key(prefix)
        self.prefix = prefix
        self._pre = f"{prefix}/" if prefix else ""

    def __repr__(self) -> str:
        return f"PrefixStore({self.base!r}, {self.prefix!r})"

    def __reduce__(self) -> tuple:
        return (PrefixStore, (self.base, self.prefix))

    def _full(self, key: str) -> str:
        return self._pre + key

    async def _get(self, key: str, byte_range: ByteRange | None) -> bytes | None:
        return await self.base.get(self._full(key), byte_range)

    @property
    def leases(self) -> bool:  # type: ignore[override]
        return self.base.leases

    def lease(self, key: str, timeout: float) -> Lease | None:
        return None if self.read_only else self.base.lease(self._full(validate_key(key)), timeout)

    async def get_many(
        self, requests: Sequence[tuple[str, ByteRange | None]]
    ) -> list[bytes | None]:
        return await self.base.get_many([(self._full(validate_key(k)), br) for k, br in requests])

    async def exists(self, key: str) -> bool:
        return await self.base.exists(self._full(validate_key(key)))

    async def _set(self, key: str, value: bytes) -> None:
        await self.base.set(self._full(key), value)

    async def set_many(self, items: Sequence[tuple[str, bytes | None]]) -> None:
        if items:
            self._check_writable(items[0][0], more=len(items) - 1)
        await self.base.set_many([(self._full(validate_key(k)), v) for k, v in items])

    async def _delete(self, key: str) -> None:
        await self.base.delete(self._full(key))

    async def delete_prefix(self, prefix: str) -> None:
        self._check_writable(prefix)
        await self.base.delete_prefix(self._pre + validate_prefix(prefix))

    async def _list_prefix(self, prefix: str) -> AsyncIterator[str]:
        n = len(self._pre)
        async for key in self.base.list_prefix(self._pre + prefix):
            yield key[n:]


class ReadOnlyStore(_Wrapper):
    """A read-only view of ``base``: every write raises ``ReadOnlyError`` naming the key."""

    def __init__(self, base: Store) -> None:
        super().__init__(base, read_only=True)

    def __repr__(self) -> str:
        return f"ReadOnlyStore({self.base!r})"

    def __reduce__(self) -> tuple:
        return (ReadOnlyStore, (self.base,))

    async def _get(self, key: str, byte_range: ByteRange | None) -> bytes | None:
        return await self.base.get(key, byte_range)

    async def get_many(
        self, requests: Sequence[tuple[str, ByteRange | None]]
    ) -> list[bytes | None]:
        return await self.base.get_many(requests)

    async def exists(self, key: str) -> bool:
        return await self.base.exists(key)

    async def _set(self, key: str, value: bytes) -> None:  # unreachable: read_only is checked first
        self._check_writable(key)

    async def _delete(self, key: str) -> None:
        self._check_writable(key)

    async def _list_prefix(self, prefix: str) -> AsyncIterator[str]:
        async for key in self.base.list_prefix(prefix):
            yield key


def _merged(store: Store, ranges: Sequence[ByteRange | None]) -> list[ByteRange | None]:
    """The requests ``ranges`` of one key cost on a backend that coalesces like ``store``."""
    spans = sorted({(br.start, br.end) for br in ranges if isinstance(br, RangeBR)})
    others = list(dict.fromkeys(br for br in ranges if not isinstance(br, RangeBR)))
    if None in others:
        return [None]
    if store.coalesce_max_gap is None:
        merged = [RangeBR(s, e) for s, e in spans]
    else:
        merged = [RangeBR(s, e) for s, e, _ in coalesce_ranges(spans, store.coalesce_max_gap, store.coalesce_max_request)]
    return [*merged, *others]


class Request(NamedTuple):
    """One request that reached the backend; compares equal to a plain tuple."""

    op: str  # "get", "set", "delete" or "list"
    key: str  # the key, or the prefix for "list"
    byte_range: ByteRange | None


class RecordingStore(_Wrapper):
    """Records every request that reaches ``base``, as a remote backend would be billed for.

    It keeps the default ``get_many`` of ``Store``, so ranges of one key are coalesced just as
    a remote store coalesces them and a merged range counts once; ``exists`` counts as a
    zero-length "get". Each ``set_many`` item counts as one "set" or "delete", each listing as
    one "list". Tune the model through ``coalesce_max_gap`` / ``coalesce_max_request`` (class
    attributes of ``Store``, settable per instance).
    """

    #: requests made through the synchronous protocols or to files would go unrecorded
    forwards_sync = False
    forwards_file_paths = False
    forwards_tagged = False

    def __init__(self, base: Store) -> None:
        super().__init__(base)
        self.requests: list[Request] = []

    def __repr__(self) -> str:
        return f"RecordingStore({self.base!r})"

    def count(self, op: str | None = None, key_prefix: str | None = None) -> int:
        """How many recorded requests match ``op`` and start with ``key_prefix``."""
        return sum(
            1
            for r in self.requests
            if (op is None or r.op == op) and (key_prefix is None or r.key.startswith(key_prefix))
        )

    def reset(self) -> None:
        """Forget the recorded requests."""
        self.requests.clear()

    async def _get(self, key: str, byte_range: ByteRange | None) -> bytes | None:
        self.requests.append(Request("get", key, byte_range))
        return await self.base.get(key, byte_range)

    async def get_versioned(
        self, key: str, byte_range: ByteRange | None = None
    ) -> tuple[bytes | None, Hashable | None]:
        self.requests.append(Request("get", validate_key(key), byte_range))
        return await self.base.get_versioned(key, byte_range)

    async def set_if(self, key: str, value: bytes | Parts | None, generation: Hashable | None) -> None:
        self._check_writable(key)
        self.requests.append(Request("set" if value is not None else "delete", validate_key(key), None))
        await self.base.set_if(key, value, generation)

    async def _set(self, key: str, value: bytes) -> None:
        self.requests.append(Request("set", key, None))
        await self.base.set(key, value)

    async def set_streamed(self, key: str, value: Streamed) -> None:
        self.requests.append(Request("set", validate_key(key), None))  # (one put, streamed)
        await super().set_streamed(key, value)

    async def get_ranges_at(
        self, key: str, ranges: Sequence[ByteRange | None], generation: Hashable | None
    ) -> list[bytes | None] | None:
        validate_key(key)
        self.requests.extend(Request("get", key, br) for br in _merged(self, ranges))
        return await self.base.get_ranges_at(key, ranges, generation)

    async def update_many(self, items: Sequence[tuple[str, bytes | Parts | Update | None]]) -> None:
        """Forwarded; each call of an update function counts as the GET of the value it was
        given and the (conditional) PUT or DELETE of its result, as on a remote backend."""
        await self.base.update_many(self._recorded_items(items))

    def _recorded_items(
        self, items: Sequence[tuple[str, bytes | Parts | Update | None]]
    ) -> list[tuple[str, bytes | Parts | Update | None]]:
        """``items`` with plain writes recorded now and updates recorded when they run."""
        if items:
            self._check_writable(items[0][0], more=len(items) - 1)
        out: list[tuple[str, bytes | Parts | Update | None]] = []
        for key, value in items:
            validate_key(key)
            if callable(value):
                value = self._recorded(key, value)
            else:
                self.requests.append(Request("set" if value is not None else "delete", key, None))
            out.append((key, value))
        return out

    def _recorded(self, key: str, update: Update) -> Update:
        def recorded(old: bytes | None) -> bytes | Parts | None:
            self.requests.append(Request("get", key, None))
            new = update(old)
            if new is not None or old is not None:  # (nothing to delete: no request)
                self.requests.append(Request("set" if new is not None else "delete", key, None))
            return new

        return recorded

    async def _delete(self, key: str) -> None:
        self.requests.append(Request("delete", key, None))
        await self.base.delete(key)

    async def _list_prefix(self, prefix: str) -> AsyncIterator[str]:
        self.requests.append(Request("list", prefix, None))
        async for key in self.base.list_prefix(prefix):
            yield key


class SyncRecordingStore(RecordingStore):
    """A ``RecordingStore`` that also declares the base's synchronous protocol and records
    what goes through it, so that request counts cover the core's blocking runner too: each
    ``get_sync`` is one "get", ``get_ranges_sync`` counts its ranges as ``get_many`` would
    merge them, ``set_sync`` one "set" or "delete", ``update_many_sync`` as ``update_many``.
    Generations are not counted (a ``stat``, as ``generation`` is not counted either)."""

    forwards_sync = True

    def __repr__(self) -> str:
        return f"SyncRecordingStore({self.base!r})"

    @property
    def sync_opens(self) -> SupportsOpenSync | None:
        # not forwarded: the reads of an open value are not requests this recorder can count
        # as a remote store would bill them, so adapters use the counted reads instead
        return None

    def get_sync(self, key: str, byte_range: ByteRange | None = None) -> bytes | None:
        self.requests.append(Request("get", key, byte_range))
        return super().get_sync(key, byte_range)

    def get_transient_sync(self, key: str, keep_bytes: int) -> bytes | memoryview | None:
        self.requests.append(Request("get", key, None))
        return super().get_transient_sync(key, keep_bytes)

    def get_ranges_sync(self, key: str, ranges: Sequence[ByteRange | None]) -> list[bytes | None]:
        self.requests.extend(Request("get", key, br) for br in _merged(self, ranges))
        return super().get_ranges_sync(key, ranges)

    def set_sync(self, key: str, value: bytes | Parts | None, atomic: bool = True) -> None:
        self.requests.append(Request("set" if value is not None else "delete", validate_key(key), None))
        super().set_sync(key, value, atomic)

    def set_streamed_sync(self, key: str, value: Streamed) -> None:
        self.requests.append(Request("set", validate_key(key), None))
        super().set_streamed_sync(key, value)

    def update_many_sync(self, items: Sequence[tuple[str, bytes | Parts | Update | None]]) -> None:
        super().update_many_sync(self._recorded_items(items))


class AsyncOnlyStore(_Wrapper):
    """``base`` through its asynchronous interface only: it declares no synchronous reads or
    writes, so the core runs every read and write on its async runner (tests run both
    runners over one local or memory store this way). Its ``file_paths`` stay (they select
    no runner)."""

    forwards_sync = False

    def __repr__(self) -> str:
        return f"AsyncOnlyStore({self.base!r})"

    @property
    def accepts_parts(self) -> bool:  # type: ignore[override]
        return self.base.accepts_parts

    @property
    def coalesce_max_gap(self) -> int | None:  # type: ignore[override]
        return self.base.coalesce_max_gap

    async def _get(self, key: str, byte_range: ByteRange | None) -> bytes | None:
        return await self.base.get(key, byte_range)

    async def get_many(self, requests: Sequence[tuple[str, ByteRange | None]]) -> list[bytes | None]:
        return await self.base.get_many(requests)

    async def exists(self, key: str) -> bool:
        return await self.base.exists(key)

    async def _set(self, key: str, value: bytes) -> None:
        await self.base.set(key, value)

    async def set_many(self, items: Sequence[tuple[str, bytes | None]]) -> None:
        await self.base.set_many(items)

    async def _delete(self, key: str) -> None:
        await self.base.delete(key)

    async def delete_prefix(self, prefix: str) -> None:
        await self.base.delete_prefix(prefix)

    async def _list_prefix(self, prefix: str) -> AsyncIterator[str]:
        async for key in self.base.list_prefix(prefix):
            yield key

    @property
    def leases(self) -> bool:  # type: ignore[override]
        return self.base.leases

    def lease(self, key: str, timeout: float) -> Lease | None:
        return self.base.lease(key, timeout)
