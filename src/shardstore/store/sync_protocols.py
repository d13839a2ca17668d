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

from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .base import Parts, Update
    from .byte_range import ByteRange

__all__ = ["SupportsFilePath", "SupportsFileSpans", "SupportsGetManySync", "SupportsGetSync", "SupportsSetSync"]

if TYPE_CHECKING:  # (numpy only in annotations: this layer handles bytes)
    import numpy as np

    #: ``read(path, which, offsets, lengths, tail) -> done``: reads the values ``which``
    #: (positions in the caller's keys) that are byte spans of one local file (int64 arrays),
    #: none of which may reach into the file's last ``tail`` bytes, and says which of them it
    #: read (a bool array)
    SpanReader = Callable[[str, np.ndarray, np.ndarray, np.ndarray, int], np.ndarray]


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


class SupportsFileSpans(Protocol):
    """Sharding adapters over plain local files: where each value (an inner chunk) lies in
    its shard file, for native readers that read, decode and place a whole shard's chunks in
    one call (``core/spanread.py``). The adapter keeps what only it knows: the index (cached
    while the shard's generation holds) and that generation, checked around the read."""

    @property
    def value_encoding(self) -> str | None:
        """How the store encodes each value on top of the codec's bytes ("gzip": a gzip
        stream, precomputed's ``data_encoding``), or None: the spans hold the codec's bytes."""
        ...

    def read_spans_sync(self, keys: Sequence[str], read: SpanReader) -> np.ndarray:
        """Calls ``read`` once per shard file with the spans of the keys' values found in its
        index, and returns a bool per key: True where ``read`` read it and the file was not
        replaced meanwhile. False (missing values and shards, a damaged index, a replaced
        file, the reader's refusals) is for the caller's generic path, which reads those
        keys again (overwriting anything ``read`` placed for them) and words any error."""
        ...
