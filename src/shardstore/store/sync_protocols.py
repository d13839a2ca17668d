"""The synchronous store protocols: what a store can do from any thread, without an event loop.

A store *declares* which of these it implements through ``Store.sync_reads``,
``Store.sync_writes`` and ``Store.file_paths`` (the store itself, or None), decided once per
store: wrappers and adapters follow the store they wrap. Nothing probes methods at run time;
mypy checks that a store returning itself there implements the protocol.

Only backends where an operation is cheap and local (files, memory) and adapters over them
offer these: the core's blocking runner then reads, decodes and scatters chunks in its worker
threads, without the event-loop round trips that otherwise dominate reads of small chunks.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .base import Parts, Update
    from .byte_range import ByteRange

__all__ = ["SupportsFilePath", "SupportsGetManySync", "SupportsGetSync", "SupportsGetTransientSync", "SupportsSetSync"]


class SupportsGetSync(Protocol):
    """Reads callable from any thread. Keys must already be valid (``validate_key``)."""

    def get_sync(self, key: str, byte_range: ByteRange | None = None) -> bytes | None:
        """``get``, synchronously."""
        ...

    def get_ranges_sync(self, key: str, ranges: Sequence[ByteRange | None]) -> list[bytes | None]:
        """Several byte ranges of one value (one open of a file for all of them)."""
        ...

    def generation_sync(self, key: str) -> Hashable | None:
        """``generation``, synchronously (None: this store cannot tell)."""
        ...


class SupportsGetTransientSync(Protocol):
    """Whole-value reads into a buffer the calling thread reuses (local files).

    A read allocating a fresh chunk-sized ``bytes`` and freeing it again makes glibc's default
    allocator give that memory back to the kernel and fault it in again on the next read (its
    trim threshold adapts to the largest block freed, and a read frees two: the fetched bytes
    and, once the caller drops it, the output). The blocking runner decodes each chunk before
    it reads the next, so it can read into one buffer per thread instead, which stays mapped.
    """

    def get_transient_sync(self, key: str, keep_bytes: int) -> bytes | memoryview | None:
        """``get_sync(key)``, possibly as a view of this thread's read buffer, which the next
        call from this thread overwrites: the caller copies what it keeps before reading
        again. Values larger than ``keep_bytes`` come as plain bytes (no buffer that big is
        kept)."""
        ...


class SupportsGetManySync(Protocol):
    """Sharding adapters over stores with synchronous reads: many whole values at once, each
    shard's index once and its values with one multi-range read of it (the requests the async
    ``get_many`` makes), so the blocking runner fetches a shard's chunks as one unit."""

    def get_many_sync(self, keys: Sequence[str]) -> list[bytes | None]:
        """The values of ``keys`` (valid keys), None for each missing one, in order."""
        ...


class SupportsSetSync(Protocol):
    """Writes callable from any thread; keys are validated here."""

    def set_sync(self, key: str, value: bytes | Parts | None, atomic: bool = True) -> None:
        """``set`` (None: ``delete``), synchronously. ``atomic=False`` allows a cheaper write
        that a concurrent reader may see half done, for keys no reader looks at yet (files a
        format's metadata does not count yet)."""
        ...

    def update_many_sync(self, items: Sequence[tuple[str, bytes | Parts | Update | None]]) -> None:
        """``update_many``, synchronously, through the same read-modify-write (lock and
        generation check) as the store's ``update_many``."""
        ...


class SupportsFilePath(Protocol):
    """Stores whose values are plain local files, for native readers and writers that open
    them themselves (``shardstore._rawio``)."""

    def file_path(self, key: str) -> str:
        """The file holding ``key``'s value (the key must already be valid)."""
        ...
