"""What a ``Store`` declares about itself, apart from its data: the settings the core and
``Store``'s default methods use it with (class attributes, taken from an ``IOConfig`` by
``use_config``), and the optional abilities beyond the async interface (properties giving
the object that does it, usually the store itself, or None: declared, never probed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config import IOConfig
from ._coalesce import DEFAULT_MAX_GAP, DEFAULT_MAX_REQUEST
from .read_modify_write import DEFAULT_RETRY_CONFLICTS

if TYPE_CHECKING:
    from ._filelock import Lease
    from .streamed import SupportsUnitStreams
    from .sync_protocols import (
        SupportsCheckedGenerationSync,
        SupportsFilePath,
        SupportsFileSpans,
        SupportsGetManySync,
        SupportsGetManyTagged,
        SupportsGetSync,
        SupportsGetTransientSync,
        SupportsOpenSync,
        SupportsSetSync,
    )

__all__ = ["StoreDeclarations"]


class StoreDeclarations:
    """The settings and declared abilities of a ``Store`` (its base class)."""

    #: how many backend requests ``get_many`` / ``set_many`` keep in flight by default
    max_concurrency: int = 16
    #: whether ``_set`` takes ``Parts`` values as they are (else they arrive joined)
    accepts_parts: bool = False
    #: whether reads may run on any event loop (no loop-bound client sessions inside), so
    #: the sync API can run them on the caller's thread (see ``_sync``)
    runs_on_any_loop: bool = False
    #: whether its coroutines finish without an event loop (every wait goes through
    #: ``_aio.to_thread`` / ``_aio.gather``): a create's or open's metadata then runs on the
    #: caller's thread with no loop at all (``_sync.sync_on``, ``_aio.run_inline``)
    answers_inline: bool = False
    #: whether its reads' coroutines finish without an event loop, waiting with blocking
    #: calls under ``_aio.run_inline`` (remote stores: obstore's blocking requests), so that a
    #: blocking read needing one chunk, whose requests nothing could overlap, runs on the
    #: caller's thread with no loop round trip (``AsyncArray.read_now``)
    reads_inline: bool = False
    #: ``get_many`` merges ranges of one key closer than this many bytes into one request;
    #: ``None`` turns merging off (for backends where a request costs nothing, e.g. memory)
    coalesce_max_gap: int | None = DEFAULT_MAX_GAP
    #: ...but a merged request does not grow beyond this many bytes
    coalesce_max_request: int = DEFAULT_MAX_REQUEST
    #: how often ``update_many`` redoes a read-modify-write whose conditional write lost a
    #: race before raising ``ConflictError`` (0: raise at the first conflict)
    retry_conflicts: int = DEFAULT_RETRY_CONFLICTS
    #: a read-modify-write merge of a value up to this many bytes runs on the event loop
    #: thread; larger ones in the codec thread pool (``IOConfig.inline_update_bytes``)
    inline_update_bytes: int = IOConfig.inline_update_bytes
    #: the size of the codec pool those larger merges run in (``IOConfig.codec_threads``)
    codec_threads: int | None = IOConfig.codec_threads

    #: how to open this store again, in this process or another: (url, read_only,
    #: storage_options), set by ``store_from_url``; None for a store built by hand
    reopen_spec: tuple[str, bool, dict] | None = None

    def use_config(self, config: IOConfig) -> None:
        """Take the store-level fields of ``config`` (``max_concurrency``, ``retry_conflicts``
        and the ``coalesce_*`` limits when not None, thresholds). ``shardstore.open`` and every format's
        open/create call it on the stores they build from a path or URL; a Store passed in
        keeps its own settings. Backends override it to take their own fields too."""
        if config.max_concurrency is not None:
            self.max_concurrency = config.max_concurrency
        if config.retry_conflicts is not None:
            self.retry_conflicts = config.retry_conflicts
        if config.coalesce_max_gap is not None:
            self.coalesce_max_gap = config.coalesce_max_gap
        if config.coalesce_max_request is not None:
            self.coalesce_max_request = config.coalesce_max_request
        self.inline_update_bytes = config.inline_update_bytes
        self.codec_threads = config.codec_threads

    # -- declared synchronous support (see ``sync_protocols``) ---------------------------------
    @property
    def sync_reads(self) -> SupportsGetSync | None:
        """This store's reads from any thread (``get_sync``...), or None when it has none.

        Declared by the store, never probed: files, memory and adapters or wrappers over
        them return themselves; remote stores return None (their reads need the loop).
        """
        return None

    @property
    def sync_checks(self) -> SupportsCheckedGenerationSync | None:
        """This store's ``checked_generation_sync`` (the generation of a value, asked with a
        blocking request from any thread), or None: declared by HTTP and S3 and the wrappers
        and adapters over them, whose reads need the loop but whose decoded-chunk cache a
        blocking read can check on the calling thread (files and memory have ``sync_reads``)."""
        return None

    #: whether ``get_versioned`` takes the generation from the very reply that carries the
    #: value (an ETag), not from a question asked before it (HTTP, S3): what a sharding
    #: adapter over it needs to declare ``tagged_reads`` for its inner chunks
    versions_in_replies: bool = False

    @property
    def tagged_reads(self) -> SupportsGetManyTagged | None:
        """This store's ``get_many_tagged`` (values with the generation of their unit that
        the replies carrying them were read at), or None: declared by HTTP and S3 (each GET's
        ETag) and the Zarr sharding adapter over them (the ETag its shard index was read at,
        to which its chunk reads are pinned). The decoded-chunk cache then asks no generation
        (a HEAD) before fetching chunks it holds nothing of: it keeps them under their tags."""
        return None

    @property
    def sync_opens(self) -> SupportsOpenSync | None:
        """This store's ``open_sync`` (one version of a value held open for reads from any
        thread: files, memory), or None. Sharding adapters read a shard's index and data
        through it, so that they come from one version without a second generation check."""
        return None

    @property
    def sync_unit_reads(self) -> SupportsGetManySync | None:
        """Reads of many values of one unit at once from any thread (``get_many_sync``), or
        None: declared by sharding adapters with ``sync_reads``, whose shard's chunks the
        blocking runner then fetches together (index once, one multi-range read)."""
        return None

    @property
    def sync_writes(self) -> SupportsSetSync | None:
        """This store's writes from any thread (``set_sync``, ``update_many_sync``), or None
        (remote, read-only, or adapters whose writes go through ``update_many`` only)."""
        return None

    @property
    def file_spans(self) -> SupportsFileSpans | None:
        """Where values lie in local files, by byte span (``read_spans_sync``), or None:
        declared by sharding adapters over plain files, for the core's native shard reads."""
        return None

    @property
    def file_paths(self) -> SupportsFilePath | None:
        """This store's ``file_path(key)`` for native readers and writers, or None (not a
        plain file store)."""
        return None

    @property
    def unit_streams(self) -> SupportsUnitStreams | None:
        """Writes of a whole unit from a stream of its values (``streamed``), or None:
        declared by sharding adapters, so the core can encode a shard chunk by chunk straight
        into its destination instead of holding the whole shard."""
        return None

    @property
    def transient_reads(self) -> SupportsGetTransientSync | None:
        """This store's whole-value reads into a per-thread buffer (``get_transient_sync``),
        or None: declared by local files and the wrappers over them."""
        return None

    def lease(self, key: str, timeout: float) -> Lease | None:
        """An exclusive claim across processes on the unit ``key`` names (held until its
        ``release()`` or the holder's exit), waiting up to ``timeout`` seconds for the holder
        to let go; None when it stays taken, or when the backend has no such locks (then
        ``leases`` is False). Formats with a single writer per dataset (bcolz) use it."""
        return None

    #: whether ``lease`` can claim units (local files)
    leases: bool = False
