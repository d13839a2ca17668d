"""Where served bytes come from: a local directory (no escape, symlinks included) or any
shardstore ``Store`` (S3, HTTP, memory, ...).

A read answers one request: the bytes of the asked range, where they sit in the value, the
value's total size (for ``Content-Range``) and a validator for ``ETag``.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .._sync import io_pool
from ..config import IOConfig
from ..errors import StoreError
from ..store.base import ByteRange, RangeBR, Store, SuffixBR, validate_key
from ..store.http import ObjectStoreBase
from ..store.local import LocalStore
from ..store.registry import store_from_url
from .ranges import satisfiable

__all__ = ["Blob", "LocalSource", "Source", "StoreSource", "open_source"]



#: ``read_more(start, end)``: bytes ``[start, end)`` of the value, for streamed bodies
ReadMore = Callable[[int, int], Awaitable[bytes]]


@dataclass(frozen=True)
class Blob:
    """Bytes ``[start, end)`` of a value of ``size`` bytes: in ``data``, or, for long bodies,
    read piece by piece with ``read_more`` (then ``close`` must be called when done).
    ``modified`` is the value's modification time (HTTP clients such as object_store require
    ``Last-Modified``)."""

    data: bytes
    start: int
    end: int
    size: int
    etag: str | None
    modified: datetime | None = None
    read_more: ReadMore | None = None
    close: Callable[[], None] | None = None


class Source:
    """Read-only access to the keys below one root."""

    #: the root for messages (a directory or URL)
    where: str
    #: the store behind it (dataset discovery, opening arrays for ``view``)
    store: Store
    #: bodies longer than this are sent in ``stream_block`` pieces instead of read whole
    #: (``IOConfig.serve_stream_threshold_bytes`` / ``serve_stream_block_bytes``)
    stream_threshold: int = IOConfig.serve_stream_threshold_bytes
    stream_block: int = IOConfig.serve_stream_block_bytes
    #: the size of the I/O pool local files are read in (``IOConfig.io_threads``)
    io_threads: int = IOConfig.io_threads

    def use_config(self, config: IOConfig) -> None:
        """Take the streaming thresholds and I/O pool size of ``config``."""
        self.stream_threshold = config.serve_stream_threshold_bytes
        self.stream_block = config.serve_stream_block_bytes
        self.io_threads = config.io_threads

    async def read(self, key: str, byte_range: ByteRange | None, head: bool = False) -> Blob | None:
        """``key``'s bytes (or the range of them), None when missing; ``Unsatisfiable`` when the
        range selects nothing. ``head``: only the sizes and ETag (``data`` is empty)."""
        raise NotImplementedError


class LocalSource(Source):
    """Files below a directory. Keys are resolved with every symlink followed and must land
    inside the (resolved) root: a symlink pointing outside reads as missing."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self._root = os.path.realpath(root)
        if not os.path.isdir(self._root):
            raise StoreError(f"cannot serve {str(root)!r}: not a directory")
        self.where = self._root
        self.store = LocalStore(self._root, read_only=True)

    def resolve(self, key: str) -> str | None:
        """The real file behind ``key`` if it lies inside the root, else None."""
        real = os.path.realpath(os.path.join(self._root, *key.split("/")))
        if os.path.commonpath([real, self._root]) != self._root or real == self._root:
            return None
        return real

    def _read(self, key: str, byte_range: ByteRange | None, head: bool) -> Blob | None:
        path = self.resolve(key)
        if path is None:
            return None
        try:
            # O_NONBLOCK: opening a FIFO placed below the root must not wait for a writer
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError):
            return None
        keep_open = False
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):  # a directory or device is not a key
                return None
            size = st.st_size
            start, end = satisfiable(byte_range, size) if byte_range is not None else (0, size)
            etag, modified = f'"{st.st_mtime_ns:x}-{size:x}"', datetime.fromtimestamp(st.st_mtime, UTC)
            if head:
                return Blob(b"", start, end, size, etag, modified)
            if end - start > self.stream_threshold:
                keep_open = True  # the streamed reply reads from this descriptor, then closes it

                async def read_more(a: int, b: int) -> bytes:
                    return await asyncio.get_running_loop().run_in_executor(io_pool(self.io_threads), os.pread, fd, b - a, a)

                return Blob(b"", start, end, size, etag, modified, read_more, lambda: os.close(fd))
            data = os.pread(fd, end - start, start) if end > start else b""
            # a file that shrank meanwhile gives a shorter body, announced as such
            return Blob(data, start, start + len(data), size, etag, modified)
        except OSError as e:
            raise StoreError(f"cannot read {key!r} in {self._root!r}: {e.strerror or e}") from e
        finally:
            if not keep_open:
                os.close(fd)

    async def read(self, key: str, byte_range: ByteRange | None, head: bool = False) -> Blob | None:
        return await asyncio.get_running_loop().run_in_executor(io_pool(self.io_threads), self._read, key, byte_range, head)


class StoreSource(Source):
    """Keys of a shardstore ``Store``.

    Object stores (S3, HTTP) answer a range request with one upstream request, whose reply
    metadata carries the size and ETag (``_fetch`` / ``_head`` of ``ObjectStoreBase``, as
    the store's own versioned reads use them). Whole values and long ranges ask for the size
    first and are streamed in ranged pieces when long. Other stores read the whole value.
    """

    def __init__(self, store: Store, where: str | None = None) -> None:
        self.store = store
        self.where = where or repr(store)

    async def read(self, key: str, byte_range: ByteRange | None, head: bool = False) -> Blob | None:
        store = self.store
        key = validate_key(key)
        if not isinstance(store, ObjectStoreBase):
            whole = await store.get(key)
            if whole is None:
                return None
            size = len(whole)
            start, end = satisfiable(byte_range, size) if byte_range is not None else (0, size)
            return Blob(bytes(whole[start:end]), start, end, size, None)
        short = (isinstance(byte_range, RangeBR) and byte_range.end - byte_range.start <= self.stream_threshold) or (
            isinstance(byte_range, SuffixBR) and byte_range.n <= self.stream_threshold)
        if short and not head:
            # one GET gives the bytes and the object's size and ETag (its reply metadata)
            value, meta = await store._fetch(key, byte_range)
            if value is None:
                return None
            if meta is None:  # upstream's 416: the key exists, the range is past its end
                meta = await store._head(key)
                if meta is None:
                    return None
            size = int(meta["size"])
            start, _ = satisfiable(byte_range, size) if byte_range is not None else (0, size)
            return Blob(bytes(value), start, start + len(value), size, meta.get("e_tag"), meta.get("last_modified"))
        meta = await store._head(key)
        if meta is None:
            return None
        size = int(meta["size"])
        start, end = satisfiable(byte_range, size) if byte_range is not None else (0, size)
        etag, modified = meta.get("e_tag"), meta.get("last_modified")
        if head:
            return Blob(b"", start, end, size, etag, modified)
        if end - start > self.stream_threshold:

            async def read_more(a: int, b: int) -> bytes:
                value = await store.get(key, RangeBR(a, b))
                if value is None or len(value) != b - a:
                    raise StoreError(f"{key!r} at {self.where} changed while it was being sent")
                return bytes(value)

            return Blob(b"", start, end, size, etag, modified, read_more)
        value = await store.get(key, RangeBR(start, end)) if end > start else b""
        if value is None:
            return None
        return Blob(bytes(value), start, start + len(value), size, etag, modified)


def open_source(location: str | os.PathLike[str] | Store, storage_options: Mapping[str, Any] | None = None,
                config: IOConfig | None = None) -> Source:
    """A ``LocalSource`` for a local directory (path or ``file://``), else a ``StoreSource``
    over ``store_from_url(location, mode="r")``; ``config`` sets the streaming thresholds
    (and the store's limits)."""
    source = _source_for(location, storage_options, config)
    if config is not None:
        source.use_config(config)
    return source


def _source_for(location: str | os.PathLike[str] | Store, storage_options: Mapping[str, Any] | None,
                config: IOConfig | None) -> Source:
    if isinstance(location, Store):
        if isinstance(location, LocalStore):
            return LocalSource(location.root)
        return StoreSource(location)
    text = os.fspath(location)
    text = text.removeprefix("file://")
    if "://" not in text:
        return LocalSource(Path(text).expanduser())
    return StoreSource(store_from_url(text, mode="r", storage_options=storage_options, config=config), text)
