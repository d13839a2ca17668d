"""``IOConfig``: every tuning knob of shardstore in one immutable value, passed at open/create.

Nothing here is process-wide: two arrays opened with different configs in one process each
run with their own. A value is frozen and picklable (it travels with an array to Dask
workers) and is changed with ``dataclasses.replace`` (or ``IOConfig.replace``).

Environment variables are overrides of the *default* only: an array opened without
``config=`` uses ``IOConfig.from_env()``; an explicit ``config=`` is used as given. Every
field ``name`` can be set as ``SHARDSTORE_<NAME>`` (upper case), e.g. ``SHARDSTORE_NATIVE=0``
(the name the native paths always answered to) or ``SHARDSTORE_MALLOC_TUNING=1``. Booleans
take ``0/1/true/false/yes/no/on/off``; a field whose default is None takes ``none`` too.
``ENV_VARS`` lists them all.

The only process-wide effect shardstore can have, the glibc allocator tuning, happens only
when a config asks for it (``malloc_tuning=True``); see ``shardstore._malloc``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError

__all__ = ["ENV_PREFIX", "ENV_VARS", "IOConfig", "default_config"]

ENV_PREFIX = "SHARDSTORE_"


@dataclass(frozen=True)
class IOConfig:
    """Concurrency limits, thresholds, cache sizes and switches of one array (and its stores).

    Defaults are the values the library was tuned with; every field is documented below and
    in the README's "Configuration" section.
    """

    # -- the chunk engine (core) -----------------------------------------------------------
    #: write units (shards) in flight at once; each holds its encoded chunks until written
    write_groups_in_flight: int = 2
    #: chunks per batch when every chunk is its own write unit (unsharded formats)
    write_batch_chunks: int = 16
    #: a write covering a whole shard of at least this many bytes (raw) streams it: chunks
    #: are encoded and written to the destination one by one, the index last, instead of
    #: the whole encoded shard being held in memory (``core/streaming.py``)
    stream_unit_bytes: int = 16 << 20
    #: encoded bytes a streamed shard write keeps in flight (at least two chunks per codec
    #: thread): its memory, beside the input, is about this much per shard in flight
    stream_window_bytes: int = 16 << 20
    #: read groups in flight; each holds its fetched (compressed) bytes until decoded
    read_groups_in_flight: int = 8
    #: reads of at most this many chunks are fetched whole before decoding starts
    small_read_chunks: int = 64
    #: chunks faster than this (seconds) stay on the calling thread (a hand-off costs as much)
    inline_item_seconds: float = 100e-6
    #: blocking reads use the codec pool for chunks slower than this each (seconds) ...
    thread_item_seconds: float = 150e-6
    #: ... when the rest of the read adds up to more than this (seconds) ...
    thread_work_seconds: float = 8e-3
    #: ... or this, when the decode is one long call without the GIL (gzip, zstd)
    slow_decode_work_seconds: float = 1e-3
    #: a chunk that waits longer than this (seconds) on its read makes a blocking read use
    #: ``io_reads_in_flight`` threads
    waiting_item_seconds: float = 0.2e-3
    #: reads of at least this much GIL-free work (seconds) use a second thread
    free_thread_work_seconds: float = 0.3e-3
    #: a read's copies out of the chunk cache share the native copy helper thread from this
    #: many bytes on (below it the helper's wake-up costs about what it copies meanwhile)
    thread_copy_bytes: int = 128 << 10
    #: file reads a blocking read keeps in flight when its chunks wait on the disk
    io_reads_in_flight: int = 8
    #: takes per thread of a blocking read (smaller takes balance the end better)
    feed_takes: int = 4
    #: threads that encode/decode chunks (None: the number of CPUs, at least 2)
    codec_threads: int | None = None
    #: threads for blocking file I/O
    io_threads: int = 32
    #: largest per-thread scratch buffer kept between decodes (bytes); also the largest
    #: per-thread buffer blocking reads keep for a chunk file's bytes (``get_transient_sync``)
    scratch_max_bytes: int = 8 << 20
    #: byte budget of the array's decoded-chunk cache (``core/chunk_cache.py``; 0: off, the
    #: default, as tensorstore's ``cache_pool``: a cache holds memory per handle and a Dask job
    #: opens many handles; repeated or overlapping box reads gain most from turning it on)
    chunk_cache_bytes: int = 0

    # -- native (C) paths --------------------------------------------------------------------
    #: use the C extension's read/write paths for the chunks they handle (False: always the
    #: generic Python path, e.g. for A/B comparisons)
    native: bool = True
    #: chunks larger than this (bytes) never take the native path
    native_max_chunk_bytes: int = 1 << 30
    #: read results of at least this many bytes are written by the native copies with
    #: streaming stores, which skip the CPU caches (and are allocated aligned to 64 bytes for
    #: them). Below about a quarter of the last-level cache normal stores are faster: 32 MiB
    #: here, where 4 MiB of cached chunks placed took 0.16 ms normally and 0.22 ms streamed,
    #: 8 MiB 0.51 / 0.43 ms, 16 MiB 2.3 / 0.9 ms
    streaming_copy_bytes: int = 8 << 20

    # -- stores and sharding adapters -----------------------------------------------------------
    #: backend requests ``get_many`` / ``set_many`` keep in flight (None: the store's own
    #: default, 16; 32 for S3). Applied to the stores built from a path or URL
    max_concurrency: int | None = None
    #: how often a conditional write that lost a race is re-read, re-merged and retried before
    #: ``ConflictError`` (None: the store's own default, 32). Applied to stores built from a
    #: path or URL
    retry_conflicts: int | None = None
    #: ``get_many`` merges byte ranges of one key closer than this many bytes into one request
    #: (None: the store's own, 64 KiB; 1 MiB for HTTP/S3; no merging for memory and local files)
    coalesce_max_gap: int | None = None
    #: ... up to this many bytes per merged request (None: the store's own, 64 MiB)
    coalesce_max_request: int | None = None
    #: how often a sharded read re-reads a shard that was replaced while it was read
    read_attempts: int = 32
    #: uint64-sharded (precomputed) minishard indexes up to this size (bytes) are read whole
    whole_index_max: int = 64 * 1024
    #: local files: a get_many spanning at most this many bytes runs on the calling thread
    local_inline_read_bytes: int = 8 << 20
    #: local files: ... and of at most this many requests
    local_inline_requests: int = 8
    #: local files: whole values of at most this many bytes are read and written on the
    #: calling thread (metadata documents: a create or open reads and writes several)
    local_inline_value_bytes: int = 64 << 10
    #: local files: concurrent file writes of one ``set_many``
    local_write_jobs: int = 4
    #: local files: trees of at least this many files are deleted by ``local_unlink_threads``
    local_parallel_unlink_files: int = 64
    local_unlink_threads: int = 4
    #: HTTP/S3: bodies of at least this many bytes are handed out without a copy
    zero_copy_min_bytes: int = 1 << 20
    #: a read-modify-write of a value up to this size (bytes) runs on the event loop thread
    inline_update_bytes: int = 1 << 20

    # -- serve (``shardstore serve`` / ``view``) ------------------------------------------------
    #: bodies longer than this (bytes) are sent in ``serve_stream_block_bytes`` pieces instead
    #: of read whole (a full GET of a multi-GiB shard must not be held in memory)
    serve_stream_threshold_bytes: int = 8 << 20
    serve_stream_block_bytes: int = 1 << 20
    #: dataset discovery stops listing a remote root after this many keys ...
    discover_max_listed_keys: int = 200_000
    #: ... and visits at most this many local directories
    discover_max_dirs: int = 5_000

    # -- verify / repair ---------------------------------------------------------------------
    #: chunks fetched per batch while scanning, at most ...
    verify_batch_chunks: int = 256
    #: ... and their decoded bytes, at most
    verify_batch_bytes: int = 256 << 20

    # -- formats ---------------------------------------------------------------------------
    #: N5 varlength blocks larger than this (bytes) are refused (a decompression-bomb guard)
    max_varlength_nbytes: int = 1 << 30
    #: bcolz: how long (seconds) a second writer waits for the first to flush before
    #: ``ConflictError``
    bcolz_writer_wait: float = 10.0

    # -- scale-out -----------------------------------------------------------------------------
    #: ``--scheduler`` runs (``ops.scaleout.run_tasks`` on Dask): fail with ``ShardStoreError``
    #: naming the pending tasks and their workers when no task has finished for this long
    #: (seconds; 0: wait forever). A task is one block or box, so an hour is a hang
    task_stall_seconds: float = 3600.0

    # -- process-wide side effects (opt-in) ----------------------------------------------------
    #: raise glibc's mmap/trim thresholds so chunk-sized buffers are reused instead of mapped
    #: and unmapped per read (process-wide, once; Linux/glibc only). Off unless asked for
    malloc_tuning: bool = False

    def __post_init__(self) -> None:
        for name, kind, allows_none, positive in _CHECKS:
            value = getattr(self, name)
            if value is None and allows_none:
                continue
            if kind is bool:
                if not isinstance(value, bool):
                    raise ConfigError(f"IOConfig.{name} must be True or False, got {value!r}")
            elif isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
                raise ConfigError(f"IOConfig.{name} must be a {kind.__name__}, got {value!r}")
            elif value < 0 or (value == 0 and positive):
                raise ConfigError(f"IOConfig.{name} must be {'positive' if positive else '>= 0'}, got {value!r}")

    def replace(self, **changes: Any) -> IOConfig:
        """A copy with ``changes`` (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)

    def __reduce__(self) -> tuple[Any, ...]:
        # only the fields that differ from the defaults travel: a pickled array carries its
        # config, and the whole dataclass would be most of the pickle
        changed = tuple(
            (f.name, getattr(self, f.name)) for f in dataclasses.fields(self) if getattr(self, f.name) != f.default
        )
        return (_from_changes, (changed,))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **base: Any) -> IOConfig:
        """The defaults (or ``base`` fields) overridden by the ``SHARDSTORE_<FIELD>`` variables
        present in ``environ`` (default: ``os.environ``)."""
        env = os.environ if environ is None else environ
        changes = dict(base)
        for f in dataclasses.fields(cls):
            raw = env.get(ENV_PREFIX + f.name.upper())
            if raw is not None:
                changes[f.name] = _parse(f, raw)
        return cls(**changes)


def _from_changes(changed: tuple[tuple[str, Any], ...]) -> IOConfig:
    """An ``IOConfig`` unpickled: the defaults with the fields that were changed."""
    return IOConfig(**dict(changed))


#: fields where 0 makes no sense (a pool of no threads, no attempts)
_POSITIVE = frozenset({
    "write_groups_in_flight", "write_batch_chunks", "read_groups_in_flight", "io_reads_in_flight",
    "feed_takes", "codec_threads", "io_threads", "max_concurrency", "read_attempts",
    "local_write_jobs", "local_unlink_threads", "serve_stream_block_bytes",
    "verify_batch_chunks",
})
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def _kind(f: dataclasses.Field[Any]) -> type:
    annotation = str(f.type)
    return bool if annotation.startswith("bool") else float if annotation.startswith("float") else int


def _allows_none(f: dataclasses.Field[Any]) -> bool:
    return "None" in str(f.type)


def _parse(f: dataclasses.Field[Any], raw: str) -> Any:
    name = ENV_PREFIX + f.name.upper()
    text = raw.strip().lower()
    if _allows_none(f) and text in ("", "none"):
        return None
    kind = _kind(f)
    try:
        if kind is bool:
            if text in _TRUE:
                return True
            if text in _FALSE:
                return False
            raise ValueError(raw)
        if kind is float:
            return float(text)
        return int(text.replace("_", ""), 0)
    except ValueError:
        want = "0 or 1" if kind is bool else f"a{'' if kind is int else ' decimal'} number"
        raise ConfigError(f"environment variable {name}={raw!r}: expected {want}") from None


#: each field's (name, kind, whether None is allowed, whether it must be positive), worked out
#: from the annotations once: an ``IOConfig`` is made at every open and create
_CHECKS: tuple[tuple[str, type, bool, bool], ...] = tuple(
    (f.name, _kind(f), _allows_none(f), f.name in _POSITIVE) for f in dataclasses.fields(IOConfig)
)

#: every environment variable ``IOConfig.from_env`` reads, with the field it sets
ENV_VARS: dict[str, str] = {ENV_PREFIX + f.name.upper(): f.name for f in dataclasses.fields(IOConfig)}


def default_config(config: IOConfig | None = None) -> IOConfig:
    """``config`` itself, or the environment's defaults (``IOConfig.from_env()``) for None."""
    if config is None:
        return _env_default()
    if not isinstance(config, IOConfig):
        raise TypeError(f"config must be an IOConfig, got {type(config).__name__}")
    return config


_env_defaults: dict[tuple[str | None, ...], IOConfig] = {}


def _env_default() -> IOConfig:
    """``IOConfig.from_env()``, made once per set of ``SHARDSTORE_*`` values (an ``IOConfig`` is
    immutable, so arrays opened under the same environment share one)."""
    environ = os.environ
    key = tuple(environ.get(name) for name in ENV_VARS)
    config = _env_defaults.get(key)
    if config is None:
        if len(_env_defaults) >= 16:  # (a process that keeps changing its environment)
            _env_defaults.clear()
        config = _env_defaults[key] = IOConfig.from_env()
    return config
