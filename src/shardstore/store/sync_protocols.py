"""The synchronous store protocols: what a store can do from any thread, without an event loop.

A store *declares* which of these it implements through ``Store.sync_reads``,
``Store.sync_opens``, ``Store.sync_unit_reads``, ``Store.sync_writes`` and
``Store.file_paths`` (the store itself, or None), decided once per
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
    from .open_values import HeldFiles

__all__ = [
    "OpenValue",
    "SupportsFilePath",
    "SupportsFileSpans",
    "SupportsGetManySync",
    "SupportsGetManyTagged",
    "SupportsGetSync",
    "SupportsGetTransientSync",
    "SupportsOpenSync",
    "SupportsSetSync",
    "UnitReads",
]

if TYPE_CHECKING:
    #: ``read(fd, which, offsets, lengths, tail) -> done``: reads the values ``which``
    #: (positions in the caller's keys) that are byte spans of one local file held open by
    #: the caller as descriptor ``fd`` (``OpenValue.fileno``; offsets and lengths below
    #: 2**63), none of which may reach into the file's last ``tail`` bytes, and says which of
    #: them it read (a bool per value). Lists, not arrays: a call has a few values, for which
    #: NumPy's fixed cost per operation is most of the time
    SpanReader = Callable[[int, list[int], list[int], list[int], int], list[bool]]


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


class SupportsCheckedGenerationSync(Protocol):
    """``checked_generation`` as a blocking call from any thread (HTTP and S3: obstore's
    blocking HEAD). Keys must already be valid."""

    def checked_generation_sync(self, key: str) -> Hashable | None:
        ...


class SupportsGetManyTagged(Protocol):
    """Whole values, each with the generation of its unit that the very reply carrying it
    was read at (``Store.tagged_reads``; async, unlike the protocols above: it is what
    lets the decoded-chunk cache skip the generation question for chunks it does not hold)."""

    async def get_many_tagged(self, keys: Sequence[str]) -> tuple[list[bytes | None], list[Hashable | None]]:
        """(values, None when missing; their units' generations, ``MISSING`` or None: not known)."""
        ...


class OpenValue(Protocol):
    """One version of a stored value, held open for positioned reads from any thread (a file
    descriptor on local disks: a writer replaces the file by a rename, so what an open file
    gives never changes; the bytes object in memory). Readers of a shard take its index and
    its data from one of these, so they can never mix two versions of it, and need no second
    look at the generation afterwards."""

    @property
    def generation(self) -> Hashable:
        """The generation of this version (the token ``generation_sync`` gives for it)."""
        ...

    @property
    def size(self) -> int:
        """Its length in bytes."""
        ...

    def read(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)``, cut at the end of the value (thread-safe)."""
        ...

    def advise(self, spans: Sequence[tuple[int, int]]) -> None:
        """Tell the storage that ``spans`` will be read soon (a file not in the page cache
        asks the kernel for all of them at once); nothing for a value in memory."""
        ...

    def read_many(self, spans: Sequence[tuple[int, int]], *, advise: bool = True) -> list[bytes]:
        """``read`` of each ``(start, end)``, in that order, after ``advise(spans)`` unless
        the caller did that already (``advise=False``)."""
        ...

    def read_transient(self, start: int, end: int, max_bytes: int) -> bytes | memoryview:
        """``read``, possibly into a buffer the calling thread reuses (up to ``max_bytes``):
        valid only until this thread's next ``read_transient``, for a caller that decodes it
        at once (``open_values.read_buffer``)."""
        ...

    def fileno(self) -> int:
        """The descriptor of the open file it reads, for native readers that read it
        themselves (``SupportsFileSpans``); -1 when it is not a file (a value in memory)."""
        ...

    def close(self) -> None:
        """Let go of it (the file descriptor); no read follows."""
        ...


class SupportsOpenSync(Protocol):
    """Stores that can hold one version of a value open (files, memory): the sharding
    adapters' synchronous reads then read a shard's index and data from that one version."""

    def open_sync(self, key: str) -> OpenValue | None:
        """The current version of ``key``'s value (a valid key), None when it is missing."""
        ...


class UnitReads(Protocol):
    """Values of the keys given to ``SupportsGetManySync.open_units_sync``, read from one
    version of each unit (shard) they lie in, from any thread until ``close``."""

    def get_sync(self, key: str, byte_range: ByteRange | None = None) -> bytes | None:
        """The value of one of the keys opened (or a range of it), None when it is missing."""
        ...

    def get_transient_sync(self, key: str, max_bytes: int) -> bytes | memoryview | None:
        """``get_sync`` of the whole value, possibly in a buffer the calling thread reuses (up
        to ``max_bytes``): valid only until this thread's next transient read, for a caller
        that decodes it at once (``OpenValue.read_transient``)."""
        ...

    def close(self) -> None:
        """Let go of the units (their open files)."""
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

    def open_units_sync(self, keys: Sequence[str]) -> UnitReads:
        """The units (shards) holding ``keys`` opened, each at one version, and their indexes
        loaded: the values are then read by the blocking runner's threads, each its own
        (positioned reads of one open file on local disks, overlapping the decodes, as reads
        of separate chunk files do), never from two versions of a shard."""
        ...


class SupportsSetSync(Protocol):
    """Writes callable from any thread; keys are validated here. Files and memory offer them,
    and the sharding adapters over such stores (each shard's read-modify-write then runs
    through the base's ``update_many_sync``), so the core's blocking runner writes shards too."""

    def set_sync(self, key: str, value: bytes | Parts | None, atomic: bool = True) -> None:
        """``set`` (None: ``delete``), synchronously. ``atomic=False`` allows a cheaper write
        that a concurrent reader may see half done, for keys no reader looks at yet (files a
        format's metadata does not count yet). The store is done with ``value`` when this
        returns (a caller may reuse its buffer): one that keeps it keeps a copy."""
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

    @property
    def absent_without_file(self) -> bool:
        """True when a key whose file does not exist has no value, so a native reader that
        finds no file may fill the chunk itself; False where the value may be stored another
        way too (CloudVolume's ``<name>.gz`` beside a missing ``<name>``)."""
        ...


class SupportsFileSpans(Protocol):
    """Sharding adapters over plain local files: where each value (an inner chunk) lies in
    its shard file, for native readers that read, decode and place a whole shard's chunks in
    one call (``core/spanread.py``). The adapter keeps what only it knows: the index (cached
    while the shard's generation holds) and the open version of the shard file (``OpenValue``)
    the spans are read from, the one its index came from: so no generation is checked around
    the read, as for the generic path's ``open_units_sync``."""

    @property
    def value_encoding(self) -> str | None:
        """How the store encodes each value on top of the codec's bytes ("gzip": a gzip
        stream, precomputed's ``data_encoding``), or None: the spans hold the codec's bytes."""
        ...

    def read_spans_sync(self, keys: Sequence[str], read: SpanReader, held: HeldFiles | None = None) -> list[bool]:
        """Calls ``read`` once per shard file with the spans of the keys' values found in its
        index, and returns a bool per key: True where ``read`` read it. False (missing
        values and shards, a damaged index, the reader's refusals) is for the caller's
        generic path, which reads those keys again (overwriting anything ``read`` placed for
        them) and words any error. ``held``: the shard files the calls of one read share (the
        caller closes them once the read is done; see ``HeldFiles``), else each call opens
        and closes its own."""
        ...
