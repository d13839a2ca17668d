"""bcolz appends: the leftover (the short last chunk) stays in memory until ``flush``.

bcolz keeps the rows of its last, partial chunk in a buffer: an ``append`` only writes the
chunks it fills, and ``flush`` writes the leftover file and ``meta/sizes``. Doing the same
saves, per append, re-reading and re-encoding the leftover, writing it again as a short file
and rewriting ``meta/sizes`` (measured: 2-3x faster appends of 1M rows to 1 MiB chunks).

The files always describe a readable carray: full chunk files are written before the
``meta/sizes`` that counts them, and the only file an append replaces is the old leftover,
whose first rows stay what they were (a leftover file with more rows than ``meta/sizes``
says reads its first rows). Until it is flushed, other handles see the length of the last
flush, as with bcolz. Pending rows are flushed by ``flush()``, ``close()``, the end of a
``with`` block, before any read or write through this handle that could see them, when the
handle is garbage-collected and at interpreter exit.

Stores with synchronous writes (``Store.sync_writes``: files, memory) are written from the
calling thread and the codec threads, each encoding a chunk and writing its file, with no
event-loop round trips.

One writer at a time: on local files a handle holds the rootdir's writer lease (an advisory
lock across processes, ``Store.lease``) from its first write until everything it wrote is
flushed. A second writing handle (this or another process) waits for that, up to
``IOConfig.bcolz_writer_wait`` seconds (10 by default), and then fails with ``ConflictError`` naming the rootdir; so appends
never interleave. A handle that gets the lease after another writer changed the carray
(``meta/sizes`` has another generation) first re-reads ``meta/sizes`` and continues from
there. Readers see a prefix: chunk files before the ``meta/sizes`` that counts them. Other
stores (S3) have no such lease: one writer per rootdir there.

A process forked while a handle has rows pending: those rows are the parent's, which holds
the lease and flushes them. The child's copy of the handle drops them at the fork and is
back at the last flush (its length, its tail), without the lease (``Store.lease`` is not
inherited): it never writes, nor flushes at exit, rows of the parent, and never releases the
parent's lease. A write through it in the child then takes the lease as any other handle
does (waiting for the parent to flush, then continuing after the parent's rows, or failing
with ``ConflictError`` after ``bcolz_writer_wait``). Waiting rather than always refusing:
the child's handle is then just another writer of the rootdir, as a handle the child opened
itself would be. Flush before forking when the rows should be on disk whatever the parent
does next (a parent that ends without flushing loses them, as on a crash).
"""

from __future__ import annotations

import atexit
import os
import threading
import warnings
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from ..._sync import codec_pool, sync
from ...config import IOConfig
from ...core.array import AsyncArray
from ...core.indexing import Indexer, basic_indexer
from ...core.threads import run_shared
from ...errors import ConflictError
from .driver import BcolzDriver, chunk_file_key
from .metadata import Sizes

if TYPE_CHECKING:
    import asyncio

    from ...store.sync_protocols import SupportsSetSync
else:
    from ..._lazy import asyncio

#: how long a writing handle waits for another one (of this or another process) to flush
#: the key whose lease is the rootdir's writer lock (a hidden ``.writer.lock`` file)
_WRITER_KEY = "writer"

__all__ = ["BcolzArray"]


_BLOSCPACK_HEADER = 16  # bytes before the blosc chunk in a .blp file


def _sync_writes(driver: BcolzDriver) -> SupportsSetSync | None:
    """The store's synchronous writes, when it declares them."""
    return driver.store.sync_writes


class _Pending:
    """What a handle has appended that is not on disk yet (shared with its finalizer)."""

    def __init__(self, disk: Sizes) -> None:
        self.tail: np.ndarray | None = None  # rows of the last partial chunk, when known
        # a chunk of rows that ``tail`` is the start of once an append has set it: appends
        # fill it in place (see ``BcolzArray._split``)
        self.buf: np.ndarray | None = None
        self.dirty = False  # the leftover file and meta/sizes lag behind ``tail`` / the shape
        self.disk = disk  # the meta/sizes on disk (as this handle last wrote or read it)
        self.lease: Any = None  # the rootdir's writer lease while this handle writes

    def visible(self, k: int, chunklen: int) -> bool:
        """Whether readers of the files look at chunk file ``k``: the others (beyond the
        length on disk) may be written in place, as bcolz writes every chunk."""
        return k < -(-self.disk.shape[0] // chunklen)

    def drop(self, driver: BcolzDriver) -> None:
        """Forget the pending rows and the lease (a forked child's copy: both are the
        parent's): back to the carray of the last flush."""
        self.lease = None  # (not released: the parent holds it; the child closed its copy)
        self.dirty = False
        self.tail = self.buf = None
        driver.set_sizes(self.disk)


def _leftover(driver: BcolzDriver, pending: _Pending) -> tuple[str, bytes] | None:
    """The leftover file to write at flush: (key, encoded rows), or None when there is none."""
    tail = pending.tail
    if tail is None or not len(tail):
        return None
    k = driver.sizes.shape[0] // driver.storage.chunklen
    layout = driver.layout
    return chunk_file_key(driver.path, k), layout.pipeline.encode(tail, layout.spec_for((k,) + (0,) * (tail.ndim - 1)))


async def _flush(driver: BcolzDriver, pending: _Pending) -> None:
    """Write the leftover file, then ``meta/sizes`` (which makes the appended rows visible)."""
    if not pending.dirty:
        return
    left = _leftover(driver, pending)
    if left is not None:
        await driver.store.set(*left)
    await driver.save_sizes()
    await driver.ensure_data_dir()
    pending.dirty = False
    pending.disk = driver.sizes


def _flush_now(driver: BcolzDriver, pending: _Pending) -> None:
    """``_flush`` from any thread, without the event loop when the store allows it."""
    if not pending.dirty:
        return
    writes = _sync_writes(driver)
    if writes is None:
        sync(_flush(driver, pending))
        return
    left = _leftover(driver, pending)
    if left is not None:
        k = driver.sizes.shape[0] // driver.storage.chunklen
        writes.set_sync(*left, atomic=pending.visible(k, driver.storage.chunklen))
    writes.set_sync(driver.sizes_key, driver.sizes.to_bytes())
    driver.ensure_data_dir_now()
    pending.dirty = False
    pending.disk = driver.sizes


#: the finalizers of live writable handles, run at interpreter exit (see ``_flush_at_exit``)
_LIVE: dict[int, weakref.finalize] = {}


def _flush_at_exit() -> None:
    """Flush every handle still open at exit. This runs when the interpreter starts shutting
    down threads, before ``concurrent.futures`` stops accepting work (which store writes may
    need): ``atexit`` and ``weakref.finalize`` alone would run too late."""
    for fin in list(_LIVE.values()):
        fin()


_register_exit = getattr(threading, "_register_atexit", None)  # (CPython >= 3.9)
try:
    (_register_exit or atexit.register)(_flush_at_exit)
except RuntimeError:  # imported during shutdown
    pass


def _after_fork_in_child() -> None:
    # every writable handle is in _LIVE; the copies of their finalizers stay registered, and
    # find nothing pending at the child's exit
    for fin in list(_LIVE.values()):
        alive = fin.peek()
        if alive is not None:
            driver, pending, _ = alive[2]
            pending.drop(driver)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _flush_on_own_loop(driver: BcolzDriver, pending: _Pending) -> None:
    """``_flush`` on a new event loop in a helper thread; re-raises its error here."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(_flush(driver, pending))
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            errors.append(e)

    worker = threading.Thread(target=run, name="shardstore-bcolz-flush")
    worker.start()
    worker.join()
    if errors:
        raise errors[0]


def _flush_abandoned(driver: BcolzDriver, pending: _Pending, key: int) -> None:
    """Finalizer: flush what a collected (or, at exit, still open) handle left pending."""
    _LIVE.pop(key, None)
    if not pending.dirty:
        _release(pending)
        return
    try:
        if threading.current_thread().name == "shardstore-loop" and _sync_writes(driver) is None:
            _flush_on_own_loop(driver, pending)  # (sync() cannot run on the loop's own thread)
        else:
            _flush_now(driver, pending)
    except Exception as e:  # noqa: BLE001 - a finalizer must not raise
        warnings.warn(
            f"bcolz carray {driver.where(driver.path or '.')}: rows appended since the last flush() "
            f"could not be written: {e}",
            RuntimeWarning,
            stacklevel=1,
        )
    finally:
        _release(pending)


def _release(pending: _Pending) -> None:
    lease, pending.lease = pending.lease, None
    if lease is not None:
        lease.release()


class BcolzArray(AsyncArray):
    """The core ``AsyncArray`` with bcolz' buffered appends (see the module doc).

    ``autoflush = True`` makes every ``append`` flush before it returns (then each append is
    on disk when it returns, at the cost of rewriting the leftover and ``meta/sizes``).
    """

    driver: BcolzDriver

    def __init__(self, driver: BcolzDriver, *, read_only: bool, name: str = "", config: IOConfig | None = None) -> None:
        super().__init__(driver, read_only=read_only, name=name, config=config)
        self.autoflush = False
        self._pending = _Pending(driver.sizes)
        self._seen = None if read_only else self._sizes_generation()
        if not read_only:
            key = id(self._pending)
            _LIVE[key] = weakref.finalize(self, _flush_abandoned, driver, self._pending, key)

    @property
    def dirty(self) -> bool:
        """Whether appended rows wait for ``flush``."""
        return self._pending.dirty

    # -- one writer at a time (see the module doc) -------------------------------------------
    def _sizes_generation(self) -> Any:
        reads = self.driver.store.sync_reads
        return None if reads is None else reads.generation_sync(self.driver.sizes_key)

    def _claim(self) -> None:
        """Before a write: take the rootdir's writer lease (waiting for another writer to
        flush) and check that nobody else changed the carray since this handle last looked."""
        self._check_writable()
        store = self.driver.store
        if self._pending.lease is not None or not store.leases:
            return
        key = f"{self.driver.path}/{_WRITER_KEY}" if self.driver.path else _WRITER_KEY
        wait = self.config.bcolz_writer_wait
        lease = store.lease(key, wait)
        where = self.driver.where(self.driver.path or ".")
        if lease is None:
            raise ConflictError(
                f"bcolz carray {where} is being written by another handle (of this or another process), "
                f"which did not flush within {wait} s; flush() or close() it first"
            )
        now = self._sizes_generation()
        if self._seen is not None and now != self._seen:
            # another writer appended or resized since this handle looked: continue from what
            # is on disk (nothing of ours is pending: we hold the lease while anything is)
            if self._pending.dirty or not self.driver.reload_sizes_now():
                lease.release()
                raise ConflictError(
                    f"bcolz carray {where} was changed by another writer since this handle read it; "
                    "open it again to write"
                )
            self._pending.tail = None
            self._pending.disk = self.driver.sizes
            self._seen = now
        self._pending.lease = lease

    def _settle(self) -> None:
        """After a write or flush: once nothing waits for ``flush``, note what is on disk and
        let another writer have the rootdir."""
        if self._pending.lease is None or self._pending.dirty:
            return
        self._seen = self._sizes_generation()
        _release(self._pending)

    async def flush(self, *, measure: bool = False) -> None:
        """Write the pending leftover and ``meta/sizes``; with ``measure`` (bcolz' ``flush()``)
        also measure ``cbytes`` first when writes other than appends made it stale."""
        if measure and not self.driver.cbytes_exact and not self.read_only:
            self._claim()
            await self.driver.measure()
            self._pending.dirty = True
        await _flush(self.driver, self._pending)
        self._settle()

    def flush_now(self, *, measure: bool = False) -> None:
        """``flush`` from synchronous code (a no-op when nothing is pending)."""
        if measure and not self.driver.cbytes_exact and not self.read_only:
            self._claim()
            sync(self.driver.measure())
            self._pending.dirty = True
        _flush_now(self.driver, self._pending)
        self._settle()

    def discard_pending(self) -> None:
        """Drop what waits for ``flush`` (the carray is being deleted, or a write failed)."""
        self._pending.dirty = False
        self._pending.tail = None
        _release(self._pending)

    def _changed(self) -> None:
        """After a write other than an append: the last chunk may differ, cbytes is stale."""
        self._pending.tail = None
        self.driver.cbytes_exact = False

    # -- everything but append sees the files: flush first -----------------------------------
    async def read(self, indexer: Indexer, *, strict: bool = False) -> np.ndarray:
        await self.flush()
        return await super().read(indexer, strict=strict)

    def read_now(self, indexer: Indexer, *, strict: bool = False) -> np.ndarray | None:
        self.flush_now()
        return super().read_now(indexer, strict=strict)

    async def write(self, indexer: Indexer, value: Any) -> None:
        self._claim()
        await self.flush()
        self._claim()
        self._changed()
        try:
            await super().write(indexer, value)
        finally:
            self._settle()

    def write_now(self, indexer: Indexer, value: Any) -> bool:
        self._claim()
        self.flush_now()
        self._claim()
        self._changed()
        try:
            return super().write_now(indexer, value)
        finally:
            self._settle()

    async def resize(self, shape: tuple[int, ...]) -> None:
        self._claim()
        await self.flush()
        self._claim()
        self._changed()
        try:
            await super().resize(shape)
            self._pending.disk = self.driver.sizes
        finally:
            self._settle()

    async def read_chunk_bytes(self, coords: tuple[int, ...]) -> bytes | None:
        await self.flush()
        return await super().read_chunk_bytes(coords)

    async def write_chunk_bytes(self, coords: tuple[int, ...], data: bytes | None) -> None:
        self._claim()
        await self.flush()
        self._claim()
        self._changed()
        try:
            await super().write_chunk_bytes(coords, data)
        finally:
            self._settle()

    # -- append ------------------------------------------------------------------------------
    def _rows(self, values: Any) -> np.ndarray:
        self._check_writable()
        arr = np.asarray(values, dtype=self.dtype)
        if arr.ndim != len(self.shape) or arr.shape[1:] != self.shape[1:]:
            raise ValueError(f"cannot append values of shape {arr.shape} to a carray of shape {self.shape}")
        return arr

    def _tail_indexer(self) -> Indexer:
        n, chunklen = self.driver.sizes.shape[0], self.driver.storage.chunklen
        return basic_indexer(slice(n - n % chunklen, n), self.driver.layout.grid)

    def _tail_buffer(self, tail: np.ndarray) -> np.ndarray:
        """The pending chunk buffer, ``tail`` at its start. Appends fill the rows after it in
        place: a chunk-sized array per append (the one a piece completes, then the new tail)
        is an allocation whose pages fault in as they are first written."""
        pending = self._pending
        if pending.buf is None:
            pending.buf = np.empty((self.driver.storage.chunklen, *self.shape[1:]), dtype=self.dtype)
        if tail.base is not pending.buf:  # (rows read from the file, or of an appended array)
            pending.buf[: len(tail)] = tail
        return pending.buf

    def _split(self, tail: np.ndarray, arr: np.ndarray) -> tuple[list[tuple[int, np.ndarray]], np.ndarray]:
        """The chunks ``arr`` after ``tail`` completes, as (chunk index, rows), and the new tail.

        The chunk ``tail`` starts is completed in the pending buffer, after ``tail`` (whose
        rows stay as they are if the write fails); the new tail is a view of ``arr``, which
        ``_appended`` copies into the buffer once the chunks are written."""
        chunklen = self.driver.storage.chunklen
        m = len(tail)
        if m + len(arr) < chunklen:
            buf = self._tail_buffer(tail)
            buf[m : m + len(arr)] = arr
            return [], buf[: m + len(arr)]
        k = self.driver.sizes.shape[0] // chunklen
        pos = chunklen - m
        if m:
            buf = self._tail_buffer(tail)
            buf[m:] = arr[:pos]
            jobs = [(k, buf)]
        else:
            jobs = [(k, arr[:pos])]
        while pos + chunklen <= len(arr):
            k += 1
            jobs.append((k, arr[pos : pos + chunklen]))
            pos += chunklen
        return jobs, arr[pos:]

    def _appended(self, rows: int, tail: np.ndarray, cbytes: int) -> None:
        self.driver.add_full_chunks(cbytes)
        self.driver.set_length(self.driver.sizes.shape[0] + rows)
        self._pending.tail = self._tail_buffer(tail)[: len(tail)]
        self._pending.dirty = True

    async def append(self, values: Any, axis: int = 0) -> tuple[int, ...]:
        """Add rows: the chunks they fill are encoded (in the codec threads) and written; the
        rows after the last full chunk stay in memory until ``flush`` (or at once with
        ``autoflush``)."""
        if axis not in (0, -len(self.shape)):
            raise ValueError("a bcolz carray grows along its first axis only")
        arr = self._rows(values)
        if len(arr):
            self._claim()
            try:
                if self._pending.tail is None:
                    self._pending.tail = await super().read(self._tail_indexer())
                jobs, tail = self._split(self._pending.tail, arr)
                cbytes = await self._write_chunks(jobs) if jobs else 0  # files first: meta/sizes at flush
                self._appended(len(arr), tail, cbytes)
                if self.autoflush:
                    await self.flush()
            finally:
                self._settle()
        return self.shape

    def append_now(self, values: Any) -> None:
        """``append`` from synchronous code: for stores with blocking reads and writes, on this
        thread and the codec threads, each encoding chunks and writing their files."""
        arr = self._rows(values)
        writes = _sync_writes(self.driver)
        if writes is None or not len(arr):
            sync(self.append(arr))
            return
        self._claim()
        try:
            if self._pending.tail is None:
                self._pending.tail = super().read_now(self._tail_indexer())
            if self._pending.tail is None:
                sync(self.append(arr))
                return
            jobs, tail = self._split(self._pending.tail, arr)
            cbytes = self._write_chunks_now(jobs, writes) if jobs else 0
            self._appended(len(arr), tail, cbytes)
            if self.autoflush:
                self.flush_now()
        finally:
            self._settle()

    def _encoder(self, transient: bool = False) -> Callable[[int, np.ndarray], tuple[str, bytes | memoryview]]:
        """``encode(k, rows) -> (key, data)``; ``transient``: data in the thread's scratch
        buffer, to be written before the thread encodes again (``Pipeline.encode_transient``)."""
        driver = self.driver
        layout = driver.layout
        spec = layout.chunk_spec
        encode = layout.pipeline.encode_transient if transient else layout.pipeline.encode
        return lambda k, rows: (chunk_file_key(driver.path, k), encode(rows, spec))

    def _write_chunks_now(self, jobs: list[tuple[int, np.ndarray]], writes: SupportsSetSync) -> int:
        """Encode and write full chunks here and in the codec threads (c-blosc and file writes
        release the GIL); their total blosc size. Only the old leftover is replaced
        atomically: files beyond the length on disk are written in place (no temp file and
        rename), as bcolz writes them, since no reader looks at them yet."""
        encode = self._encoder(transient=True)  # (set_sync is done with a value when it returns)
        pending, chunklen = self._pending, self.driver.storage.chunklen

        def job(k: int, rows: np.ndarray) -> int:
            key, data = encode(k, rows)
            writes.set_sync(key, data, atomic=pending.visible(k, chunklen))
            return len(data) - _BLOSCPACK_HEADER

        sizes: list[int] = []

        def batch(items: list[tuple[int, np.ndarray]]) -> None:
            sizes.extend(job(k, rows) for k, rows in items)

        # this thread and one codec thread per other core take chunks from one list (a helper
        # per chunk queued behind the codec pool left the cores idle at each append's end)
        run_shared(batch, jobs, (), "codec", None, (True, False, False, False), self.config)  # (writes, free, slow, gil)
        return sum(sizes)

    async def _write_chunks(self, jobs: list[tuple[int, np.ndarray]]) -> int:
        """Encode (in the codec threads) and write full chunks, each written as soon as it is
        encoded while the next ones encode; their total blosc size."""
        encode = self._encoder()
        store = self.driver.store
        loop = asyncio.get_running_loop()

        async def one(k: int, rows: np.ndarray) -> int:
            key, data = await loop.run_in_executor(codec_pool(self.config.codec_threads), encode, k, rows)
            await store.set(key, data)
            return len(data) - _BLOSCPACK_HEADER

        done = await asyncio.gather(*(one(k, rows) for k, rows in jobs), return_exceptions=True)
        sizes = []
        for r in done:
            if isinstance(r, BaseException):
                raise r
            sizes.append(r)
        return sum(sizes)


class FlushOnClose:
    """``close()`` and ``with`` exit flush what appends left in memory, as in bcolz (the
    handle stays usable); shared by carrays and ctables, which define ``flush``."""

    flush: Callable[[], None]

    def close(self) -> None:
        """Flush (the handle stays usable)."""
        self.flush()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.flush()
