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

__all__ = ["SupportsFilePath", "SupportsGetManySync", "SupportsGetSync", "SupportsSetSync"]


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


class SupportsGetManySync(Protocol):
    """Sharding adapters over stores with synchronous reads: many whole values at once, each
    shard's index once and its values with one multi-range read of it (the requests the async
    ``get_many`` makes), so the blocking runner fetches a shard's chunks as one unit."""

    def get_many_sync(self, keys: Sequence[str]) -> list[bytes | None]:
        """The values of ``keys`` (valid keys), None for each missing one, in order."""
        ...


class SupportsSetSync(Protocol):
    """Writes callable from any thread; keys are validated here. Files and memory offer them,
    and the sharding adapters over such stores (each shard's read-modify-write then runs
    through the base's ``update_many_sync``), so the core's blocking runner writes shards too."""

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
