"""In-memory store: a dict of bytes. Useful for tests and scratch arrays."""

from __future__ import annotations

import functools
import itertools
import threading
from collections.abc import AsyncIterator, Hashable, Sequence
from typing import TYPE_CHECKING

from ..errors import ConflictError, NotPicklableError
from ._keys import validate_key
from .base import (
    MISSING,
    ByteRange,
    Parts,
    Store,
    Update,
    _check_value,
    joined,
    slice_range,
)
from .open_values import BytesVersion
from .read_modify_write import run_update_steps_sync, update_steps

if TYPE_CHECKING:
    from .sync_protocols import SupportsGetSync, SupportsOpenSync, SupportsSetSync

__all__ = ["MemoryStore"]


class MemoryStore(Store):
    """Keys and values in a Python dict (shared when passed in)."""

    runs_on_any_loop = True
    answers_inline = True

    # a request costs nothing here: merging ranges would only add copies
    coalesce_max_gap = None

    def __init__(self, data: dict[str, bytes] | None = None, *, read_only: bool = False) -> None:
        super().__init__(read_only=read_only)
        self._data: dict[str, bytes] = {} if data is None else data
        self._writes = itertools.count()
        self._versions: dict[str, int] = {}
        self._rmw_lock = threading.RLock()

    def __repr__(self) -> str:
        flag = ", read_only=True" if self.read_only else ""
        return f"MemoryStore(<{len(self._data)} keys>{flag})"

    def __reduce__(self) -> tuple:
        # a copy in another process would silently diverge from this one: writes there
        # would never reach the data here
        raise NotPicklableError(
            "cannot pickle an array or store held in memory (memory://): another process would get a "
            "separate copy; write it to a local directory or s3:// to use it from other processes (Dask workers)")

    async def _get(self, key: str, byte_range: ByteRange | None) -> bytes | None:
        value = self._data.get(key)
        if value is None:
            return None
        return value if byte_range is None else slice_range(value, byte_range)

    async def get_many(
        self, requests: Sequence[tuple[str, ByteRange | None]]
    ) -> list[bytes | None]:
        # everything is already here: slice directly, no tasks
        out: list[bytes | None] = []
        for key, byte_range in requests:
            value = self._data.get(validate_key(key))
            if value is not None and byte_range is not None:
                value = slice_range(value, byte_range)
            out.append(value)
        return out

    # -- synchronous reads and writes (declared: ``sync_protocols``) -------------------------
    @property
    def sync_reads(self) -> SupportsGetSync:
        return self

    @property
    def sync_opens(self) -> SupportsOpenSync:
        return self

    def open_sync(self, key: str) -> BytesVersion | None:
        value = self._data.get(key)
        if value is None:
            return None
        # the generation of this very object (``generation_sync`` names the object too)
        return BytesVersion(value, (self._versions.get(key), id(value)))

    @property
    def sync_writes(self) -> SupportsSetSync | None:
        return None if self.read_only else self

    def get_sync(self, key: str, byte_range: ByteRange | None = None) -> bytes | None:
        value = self._data.get(key)
        if value is None or byte_range is None:
            return value
        return slice_range(value, byte_range)

    def get_ranges_sync(self, key: str, ranges: Sequence[ByteRange | None]) -> list[bytes | None]:
        value = self._data.get(key)
        if value is None:
            return [None] * len(ranges)
        return [value if br is None else slice_range(value, br) for br in ranges]

    def generation_sync(self, key: str) -> Hashable:
        validate_key(key)
        value = self._data.get(key)
        if value is None:
            return MISSING
        # values placed in the shared dict from outside have no counter: use the object
        return (self._versions.get(key), id(value))

    async def generation(self, key: str) -> Hashable | None:
        return self.generation_sync(key)

    def set_sync(self, key: str, value: bytes | Parts | None, atomic: bool = True) -> None:  # (always atomic)
        self._check_writable(key)
        validate_key(key)
        if value is not None:
            _check_value(key, value)
        self._put(key, value)

    def _put(self, key: str, value: bytes | Parts | None) -> None:
        if value is None:
            self._data.pop(key, None)
        else:
            self._data[key] = bytes(joined(value))
            self._versions[key] = next(self._writes)

    async def _set(self, key: str, value: bytes) -> None:
        self._put(key, value)

    def update_many_sync(self, items: Sequence[tuple[str, bytes | Parts | Update | None]]) -> None:
        """``update_many`` on this thread: each read-modify-write is ``update_steps``, as on
        the event loop, with the store's conditional write (``set_if``'s)."""
        for key, value in self._checked_updates(items).items():
            if callable(value):
                run_update_steps_sync(
                    update_steps(key, value, self.retry_conflicts),
                    value,
                    functools.partial(self._get_versioned_now, key),
                    functools.partial(self._set_if_now, key),
                )
            else:
                self._put(key, value)

    def _get_versioned_now(self, key: str) -> tuple[bytes | None, Hashable]:
        with self._rmw_lock:
            return self._data.get(key), self.generation_sync(key)

    def _set_if_now(self, key: str, value: bytes | Parts | None, generation: Hashable | None) -> None:
        with self._rmw_lock:  # (compare and write as one step, from any thread)
            if generation is not None and self.generation_sync(key) != generation:
                raise ConflictError(
                    f"{key!r} changed since it was read (another writer updated it); re-read and retry"
                )
            self._put(key, value)

    async def set_if(self, key: str, value: bytes | Parts | None, generation: Hashable | None) -> None:
        self._check_writable(key)
        validate_key(key)
        if value is not None:
            _check_value(key, value)
        self._set_if_now(key, value, generation)

    async def _delete(self, key: str) -> None:
        self._data.pop(key, None)

    async def exists(self, key: str) -> bool:
        return validate_key(key) in self._data

    async def _list_prefix(self, prefix: str) -> AsyncIterator[str]:
        for key in [k for k in self._data if k.startswith(prefix)]:
            yield key
