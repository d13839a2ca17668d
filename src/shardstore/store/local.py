"""Local filesystem store: one file per key under a root directory.

Writes are atomic: the value goes to a temporary file next to its target, which then replaces
the target with ``os.replace``, so a reader sees the old value or the new one, never a torn
one, and a failed write leaves the old value in place. A read-modify-write (``update_many``)
holds an advisory lock across processes on the unit (``_filelock``), so concurrent writers in
other processes never lose each other's merges. Blocking file I/O runs in the event
loop's default executor; ``get_many`` reads every range of one file in a single thread call.
The blocking operations themselves are in ``_local_files`` (the file of one key) and
``_local_tree`` (listing, pruning and removing directories).
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import AsyncIterator, Hashable, Iterable, Sequence
from typing import TYPE_CHECKING, cast

from .._aio import gather, to_thread
from ..config import IOConfig
from ..errors import ConflictError, StoreError
from ._fileio import pread, pread_transient
from ._filelock import Lease, lock_path, locked
from ._keys import validate_key, validate_prefix
from ._local_files import (
    NOT_INLINE,
    describe,
    open_version,
    read_if_cached,
    read_parts,
    read_versioned,
    span,
    write_in_place,
    write_replacing,
    write_streamed,
)
from ._local_tree import list_batch, prune, remove_dirs

# (re-exported: writers that bypass LocalStore and the repair scanner use these names)
from ._tempfiles import is_temp_name as is_temp_name
from ._tempfiles import temp_path as temp_path
from .base import (
    MISSING,
    ByteRange,
    Parts,
    RangeBR,
    Store,
    SuffixBR,
    Update,
    _check_value,
    joined,
    resolve_range,
)

if TYPE_CHECKING:
    import asyncio
    from pathlib import Path

    from .open_values import FileVersion
    from .streamed import Streamed
    from .sync_protocols import SupportsFilePath, SupportsGetSync, SupportsGetTransientSync, SupportsOpenSync, SupportsSetSync
else:
    from .._lazy import asyncio

__all__ = ["LocalStore", "is_temp_name", "temp_path"]


def _nothing_at(path: str, contents: bool) -> bool:
    """Whether ``path`` does not exist (``contents``: or is an empty directory)."""
    if not contents:
        return not os.path.lexists(path)
    try:
        with os.scandir(path) as entries:
            return next(entries, None) is None
    except (FileNotFoundError, NotADirectoryError):
        return True


class LocalStore(Store):
    """Keys as files under ``root`` (``"c/0/1"`` is ``root/c/0/1``).

    ``create``: make ``root`` (and its parents) if it does not exist; otherwise a missing root
    is a ``StoreError``. A read-only store never creates anything: a missing root reads as an
    empty store.
    """

    runs_on_any_loop = True
    answers_inline = True

    # ranges of one file are all read in one thread call, so merging them would only add copies
    coalesce_max_gap = None
    accepts_parts = True

    def __init__(self, root: str | os.PathLike[str], *, read_only: bool = False, create: bool = True) -> None:
        super().__init__(read_only=read_only)
        self.use_config(IOConfig())
        # (a string, not a pathlib.Path: pathlib and the urllib modules it imports are 0.8 MiB
        # of a process that needs no Path; ``root`` makes one when asked)
        self._root = os.path.abspath(os.fspath(root))
        # "root/" where keys can be appended as paths directly (POSIX), else "" (use _path)
        self._fast_root = str(self._root).rstrip("/") + "/" if os.sep == "/" else ""
        if os.path.exists(self._root):
            if not os.path.isdir(self._root):
                raise StoreError(f"store root {str(self._root)!r} exists and is not a directory")
        elif not read_only:
            if not create:
                raise StoreError(f"store root {str(self._root)!r} does not exist (create=False)")
            try:
                os.makedirs(self._root, exist_ok=True)
            except OSError as e:
                raise StoreError(f"cannot create store root {str(self._root)!r}: {describe(e)}") from e

    def use_config(self, config: IOConfig) -> None:
        super().use_config(config)
        # ranged reads up to this many bytes in total run inline on the event loop. Measured
        # on random 100^3 reads of a sharded array: a worker-thread read costs two thread
        # hops, and its buffers come from the worker's malloc arena but are freed on the loop
        # thread, which made ~8x more page faults per read; inline, it was 1.7x faster overall
        self.inline_read_bytes = config.local_inline_read_bytes
        #: ``get_many`` calls of at most this many small ranges are read inline, unplanned
        self.inline_requests = config.local_inline_requests
        #: whole values of at most this many bytes (metadata documents, small chunks) are read
        #: (from the page cache) and written inline: a thread hop each way costs more
        self.inline_value_bytes = config.local_inline_value_bytes
        #: thread jobs a set_many is split into (file writes release the GIL)
        self.write_jobs = config.local_write_jobs
        #: trees of at least this many files are deleted by ``unlink_threads`` threads
        self.parallel_unlink_files = config.local_parallel_unlink_files
        self.unlink_threads = config.local_unlink_threads
        #: the size of the I/O pool those threads come from (``IOConfig.io_threads``)
        self.io_threads = config.io_threads

    @property
    def root(self) -> Path:
        """The directory holding the keys (absolute)."""
        from pathlib import Path

        return Path(self._root)

    def __reduce__(self) -> tuple:
        # the absolute root: a worker process may run in another directory
        from .registry import reopen_store

        return (reopen_store, (str(self._root), self.read_only, {}))

    def __repr__(self) -> str:
        flag = ", read_only=True" if self.read_only else ""
        return f"LocalStore({str(self._root)!r}{flag})"

    def _path(self, key: str) -> str:
        return os.path.join(self._root, *key.split("/"))

    # -- reads -------------------------------------------------------------------------------
    def _read_parts(self, key: str, parts: Sequence[ByteRange | None]) -> list[bytes | None]:
        """Blocking: read byte ranges of one file; ``None`` for each when it is missing."""
        path = self._path(key)
        try:
            return read_parts(path, parts)
        except OSError as e:
            raise StoreError(f"cannot read key {key!r} from {path!r}: {describe(e)}") from e

    async def _get(self, key: str, byte_range: ByteRange | None) -> bytes | None:
        if byte_range is None:
            # a missing key or a small file in the page cache (a metadata document) is
            # answered inline: cheaper than the two thread hops (a create or open reads
            # several), and no disk wait holds up the loop
            got = read_if_cached(self._path(key), self.inline_value_bytes)
            if got is not NOT_INLINE:
                return cast("bytes | None", got)
        return (await to_thread(self._read_parts, key, [byte_range]))[0]

    async def get_many(self, requests: Sequence[tuple[str, ByteRange | None]]) -> list[bytes | None]:
        if len(requests) <= self.inline_requests and all(isinstance(br, (RangeBR, SuffixBR)) for _, br in requests):
            if span([br for _, br in requests]) <= self.inline_read_bytes:
                # a few small ranges (a shard index, a minishard index, one value): read them
                # right here; the general path's planning and tasks cost ~4x the reads
                by_key: dict[str, list[int]] = {}
                for pos, (key, _) in enumerate(requests):
                    by_key.setdefault(validate_key(key), []).append(pos)
                out: list[bytes | None] = [None] * len(requests)
                for key, positions in by_key.items():
                    for pos, value in zip(positions, self._read_parts(key, [requests[p][1] for p in positions])):
                        out[pos] = value
                return out
        return await super().get_many(requests)

    async def _get_parts(
        self, key: str, parts: Sequence[ByteRange | None], limit: asyncio.Semaphore
    ) -> list[bytes | None]:
        if all(isinstance(br, (RangeBR, SuffixBR)) for br in parts) and span(parts) <= self.inline_read_bytes:
            # ranged reads of a shard (its index, some inner chunks) are cheaper here than in
            # a worker thread (see inline_read_bytes); whole values may be large and cold: thread
            return self._read_parts(key, parts)
        async with limit:
            return await to_thread(self._read_parts, key, parts)

    # -- synchronous reads and writes (declared: ``sync_protocols``) -------------------------
    @property
    def sync_reads(self) -> SupportsGetSync:
        return self

    @property
    def sync_opens(self) -> SupportsOpenSync:
        return self

    def open_sync(self, key: str) -> FileVersion | None:
        """The file of ``key`` held open: its generation from ``fstat`` of the descriptor (the
        token ``generation_sync`` gives), its reads ``pread`` of it (``OpenValue``)."""
        root = self._fast_root
        path = root + key if root else self._path(key)
        try:
            return open_version(path)
        except OSError as e:
            raise StoreError(f"cannot read key {key!r} from {path!r}: {describe(e)}") from e

    @property
    def sync_writes(self) -> SupportsSetSync | None:
        return None if self.read_only else self

    @property
    def file_paths(self) -> SupportsFilePath | None:
        return self if self._fast_root else None  # (Windows: keys are not paths as they stand)

    def file_path(self, key: str) -> str:
        return self._fast_root + key

    #: (``SupportsFilePath``) a key is its file: no file, no value
    absent_without_file = True

    @property
    def transient_reads(self) -> SupportsGetTransientSync | None:
        return self if self._fast_root else None

    def get_sync(self, key: str, byte_range: ByteRange | None = None) -> bytes | None:
        # (with keep_bytes 0 the read is a plain ``pread``: bytes)
        return cast("bytes | None", self._get_fast(key, byte_range, 0))

    def get_transient_sync(self, key: str, keep_bytes: int) -> bytes | memoryview | None:
        return self._get_fast(key, None, keep_bytes)

    def _get_fast(self, key: str, byte_range: ByteRange | None, keep_bytes: int) -> bytes | memoryview | None:
        # the core calls this once per chunk of every read: whole files and plain ranges
        # (partial decodes) take a lean path (a few system calls, no path objects)
        root = self._fast_root
        if not root or (byte_range is not None and type(byte_range) is not RangeBR):
            return self._read_parts(key, [byte_range])[0]
        try:
            fd = os.open(root + key, os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        except OSError:
            return self._read_parts(key, [byte_range])[0]  # (the general path words the error)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return None
            if byte_range is not None:  # part of a file (partial decodes, shard indexes)
                start, end = resolve_range(byte_range, st.st_size)
                return pread(fd, end - start, start)
            return pread_transient(fd, st.st_size, 0, keep_bytes)
        except OSError as e:
            raise StoreError(f"cannot read key {key!r} from {root + key!r}: {describe(e)}") from e
        finally:
            os.close(fd)

    def get_ranges_sync(self, key: str, ranges: Sequence[ByteRange | None]) -> list[bytes | None]:
        return self._read_parts(key, ranges)

    def generation_sync(self, key: str) -> Hashable:
        # one stat: an atomic replace changes the inode (runs per chunk of sharded reads:
        # the plain joined path where the platform allows, not the general _path)
        path = self._fast_root + validate_key(key) if self._fast_root else self._path(validate_key(key))
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return MISSING
        except OSError as e:
            raise StoreError(f"cannot stat key {key!r}: {describe(e)}") from e
        if not stat.S_ISREG(st.st_mode):
            return MISSING
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def set_sync(self, key: str, value: bytes | Parts | None, atomic: bool = True) -> None:
        self._check_writable(key)
        validate_key(key)
        if value is None:
            self._remove(key)
        else:
            _check_value(key, value)
            if atomic:
                self._write(key, value)
            else:
                self._write_in_place(key, joined(value))

    def update_many_sync(self, items: Sequence[tuple[str, bytes | Parts | Update | None]]) -> None:
        """``update_many`` on this thread: the same locked read-modify-write per key."""
        for key, value in self._checked_updates(items).items():
            if callable(value):
                self._update_locked(key, value)
            elif value is None:
                self._remove(key)
            else:
                self._write(key, value)

    def _read_versioned(self, key: str, byte_range: ByteRange | None) -> tuple[bytes | None, Hashable]:
        """Blocking: a value (or range) and the generation of the very file it came from."""
        path = self._path(key)
        try:
            return read_versioned(path, byte_range)
        except OSError as e:
            raise StoreError(f"cannot read key {key!r} from {path!r}: {describe(e)}") from e

    async def get_versioned(self, key: str, byte_range: ByteRange | None = None) -> tuple[bytes | None, Hashable | None]:
        validate_key(key)
        if isinstance(byte_range, (RangeBR, SuffixBR)) and span([byte_range]) <= self.inline_read_bytes:
            return self._read_versioned(key, byte_range)  # (a shard index: inline, see inline_read_bytes)
        return await to_thread(self._read_versioned, key, byte_range)

    async def generation(self, key: str) -> Hashable | None:
        return self.generation_sync(key)  # inline: cheaper than a thread hop

    async def exists(self, key: str) -> bool:
        return os.path.isfile(self._path(validate_key(key)))  # inline: a stat costs less than a thread hop

    # -- writes ------------------------------------------------------------------------------
    def _write(self, key: str, value: bytes | Parts) -> None:
        """Blocking: write ``value`` to a temp file beside the target, then rename it into place.

        Runs once per chunk of every unsharded write, so it is lean: the directory is made
        only when missing (``_local_files.write_replacing``) and the value goes out with ``os.write``.
        """
        path = self._path(key)
        try:
            write_replacing(path, value)
        except OSError as e:
            raise StoreError(f"cannot write key {key!r} to {path!r}: {describe(e)}") from e

    def _write_in_place(self, key: str, value: bytes) -> None:
        """Blocking: write ``value`` straight into the target file: no temp file and rename,
        but not atomic (a reader may see it partly written); for keys no reader looks at yet."""
        path = self._path(key)
        try:
            write_in_place(path, value)
        except OSError as e:
            raise StoreError(f"cannot write key {key!r} to {path!r}: {describe(e)}") from e

    async def _set(self, key: str, value: bytes) -> None:
        if not isinstance(value, Parts) and memoryview(value).nbytes <= self.inline_value_bytes:
            self._write(key, value)  # (a metadata document: see inline_value_bytes)
            return
        await to_thread(self._write, key, value)

    def set_streamed_sync(self, key: str, value: Streamed) -> None:
        """Blocking: stream ``value`` into a temp file beside the target (the head's bytes
        left as a hole, written at offset 0 once known), then rename it into place: as with
        ``_write``, a reader or a crash sees the old value or the new one, never a part."""
        self._check_writable(key)
        validate_key(key)
        path = self._path(key)
        try:
            if not write_streamed(key, path, value):  # nothing to store: the key goes
                self._remove(key)
        except OSError as e:
            raise StoreError(f"cannot write key {key!r} to {path!r}: {describe(e)}") from e

    async def set_streamed(self, key: str, value: Streamed) -> None:
        if isinstance(value.body, Iterable):
            await to_thread(self.set_streamed_sync, key, value)
        else:
            await super().set_streamed(key, value)

    def _update_locked(self, key: str, update: Update) -> None:
        """Blocking: one read-modify-write of ``key`` under its lock across processes.

        Writers through ``update_many`` wait on each other, so none loses another's merge. A
        plain (whole-value) write takes no lock; one that lands while we merge is noticed by
        comparing the generation again just before the rename, and the merge is redone on
        top of it (a plain write in the last microseconds before the rename can still be
        replaced: whole values follow "last writer wins").
        """
        path = self._path(key)
        try:
            with locked(path):
                for _ in range(self.retry_conflicts + 1):
                    old, gen = self._read_versioned(key, None)
                    new = update(old)
                    if self.generation_sync(key) != gen:
                        continue  # a plain write replaced it meanwhile: merge again on top of it
                    if new is not None:
                        self._write(key, new)
                        return
                    self._remove(key)
                    break
                else:
                    raise ConflictError(f"{key!r} at {path!r} kept changing under plain writes during a read-modify-write")
        except OSError as e:
            raise StoreError(f"cannot lock key {key!r} at {path!r} for a read-modify-write: {describe(e)}") from e
        prune(str(self._root), os.path.dirname(path))  # (now that the lock file is gone too)

    leases = True

    def lease(self, key: str, timeout: float) -> Lease | None:
        validate_key(key)
        if self.read_only:
            return None
        return Lease.acquire(lock_path(self._path(key)), timeout)

    async def update_many(self, items: Sequence[tuple[str, bytes | Parts | Update | None]]) -> None:
        """``Store.update_many`` with each read-modify-write done in a thread under the unit's
        advisory lock (``_filelock``): writers in other processes wait instead of conflicting."""
        final = self._checked_updates(items)
        plain = [(k, v) for k, v in final.items() if not callable(v)]
        updates = [(k, v) for k, v in final.items() if callable(v)]
        jobs = [to_thread(self._update_locked, k, u) for k, u in updates]
        if plain:  # (Parts values are bytes-like: written without joining)
            jobs.append(self.set_many(cast("list[tuple[str, bytes | None]]", plain)))
        # every job finishes before an error is raised (see set_many)
        done = await gather(jobs, return_exceptions=True)
        for result in done:
            if isinstance(result, BaseException):
                raise result

    async def set_many(self, items: Sequence[tuple[str, bytes | None]]) -> None:
        """Like ``Store.set_many``, but a few thread jobs each write a share of the files.

        A thread hop per file cost about as much as writing a 256 KiB chunk (measured on
        N5 blocks: 0.8 ms a file through the store, 0.15 ms written directly).
        """
        if not items:
            return
        final = self._checked_batch(items)
        work = list(final.items())

        def run(batch: list[tuple[str, bytes | None]]) -> None:
            for key, value in batch:
                if value is None:
                    self._remove(key)
                else:
                    self._write(key, value)

        n = min(len(work), self.write_jobs)
        size = -(-len(work) // n)
        # every thread finishes before an error is raised: a caller that sees the error must
        # not have files of this batch still being written afterwards
        done = await gather(
            (to_thread(run, work[i : i + size]) for i in range(0, len(work), size)), return_exceptions=True
        )
        for result in done:
            if isinstance(result, BaseException):
                raise result

    def _remove(self, key: str) -> None:
        path = self._path(key)
        try:
            os.unlink(path)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return  # missing, or a directory, which is not a key
        except PermissionError:
            if os.path.isdir(path):  # some platforms refuse unlink() on a directory this way
                return
            raise StoreError(f"cannot delete key {key!r} at {path!r}: permission denied") from None
        except OSError as e:
            raise StoreError(f"cannot delete key {key!r} at {path!r}: {describe(e)}") from e
        prune(str(self._root), os.path.dirname(path))

    async def _delete(self, key: str) -> None:
        await to_thread(self._remove, key)

    async def delete_prefix(self, prefix: str) -> None:
        """Remove every key under ``prefix``; a directory prefix goes in one tree removal."""
        self._check_writable(prefix)
        validate_prefix(prefix)
        if prefix and not prefix.endswith("/"):
            await super().delete_prefix(prefix)  # a partial name: only matching keys go
            return
        try:
            directory = self._path(prefix[:-1]) if prefix else None
            remove = functools.partial(remove_dirs, str(self._root), directory, parallel_files=self.parallel_unlink_files,
                                       threads=self.unlink_threads, io_threads=self.io_threads)
            if _nothing_at(directory if directory is not None else str(self._root), directory is None):
                remove()  # nothing to remove (a create's mode="w"): a stat and a prune, inline
            else:
                await to_thread(remove)
        except OSError as e:
            raise StoreError(f"cannot delete prefix {prefix!r} under {str(self._root)!r}: {describe(e)}") from e

    # -- listing -----------------------------------------------------------------------------
    async def _list_prefix(self, prefix: str) -> AsyncIterator[str]:
        # start in the deepest directory the prefix names; its last segment filters names there
        head, _, name_filter = prefix.rpartition("/")
        start = self._path(head) if head else str(self._root)
        stack = [(start, f"{head}/" if head else "", name_filter)]
        while stack:
            for key in await to_thread(list_batch, stack, self):
                yield key
