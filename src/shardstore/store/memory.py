"""In-memory store: a dict of bytes. Useful for tests and scratch arrays."""

from __future__ import annotations

import itertools
import threading
from collections.abc import AsyncIterator, Callable, Hashable, Sequence

from ..errors import NotPicklableError
from .base import (
    MISSING,
    BlockingReader,
    BlockingWriter,
    ByteRange,
    Parts,
    Store,
    Update,
    _check_value,
    joined,
    slice_range,
    validate_key,
)

__all__ = ["MemoryStore"]


class MemoryStore(Store):
    """Keys and values in a Python dict (shared when passed in)."""

    runs_on_any_loop = True

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

    def blocking_reader(self) -> BlockingReader:
        data = self._data

        def read(key: str, byte_range: ByteRange | None = None) -> bytes | None:
            value = data.get(key)
            if value is None or byte_range is None:
                return value
            return slice_range(value, byte_range)

        return read

    def blocking_writer(self) -> BlockingWriter | None:
        if self.read_only:
            return None

        def write(key: str, value: bytes | Parts | Update | None, atomic: bool = True) -> None:  # (always atomic)
            validate_key(key)
            if callable(value):  # a read-modify-write: one at a time per store
                with self._rmw_lock:
                    new = value(self._data.get(key))
                    write(key, new)
                return
            if value is None:
                self._data.pop(key, None)
            else:
                _check_value(key, value)
                self._data[key] = bytes(joined(value))
                self._versions[key] = next(self._writes)

        return write

    async def _set(self, key: str, value: bytes) -> None:
        self._data[key] = bytes(value)
        self._versions[key] = next(self._writes)

    def blocking_ranges_reader(self) -> Callable[[str, Sequence[ByteRange | None]], list[bytes | None]]:
        data = self._data

        def read_ranges(key: str, ranges: Sequence[ByteRange | None]) -> list[bytes | None]:
            value = data.get(key)
            if value is None:
                return [None] * len(ranges)
            return [value if br is None else slice_range(value, br) for br in ranges]

        return read_ranges

    def _generation(self, key: str) -> Hashable:
        validate_key(key)
        value = self._data.get(key)
        if value is None:
            return MISSING
        # values placed in the shared dict from outside have no counter: use the object
        return (self._versions.get(key), id(value))

    def blocking_generation(self) -> Callable[[str], Hashable]:
        return self._generation

    async def generation(self, key: str) -> Hashable | None:
        return self._generation(key)

    async def _delete(self, key: str) -> None:
        self._data.pop(key, None)

    async def exists(self, key: str) -> bool:
        return validate_key(key) in self._data

    async def _list_prefix(self, prefix: str) -> AsyncIterator[str]:
        for key in [k for k in self._data if k.startswith(prefix)]:
            yield key
