"""How the chunk work of one blocking call is shared among threads.

``core/io.py`` and ``core/writes.py`` hand each read or write of local files or memory a list of items (chunks)
and a function that does a batch of them; ``share_now`` decides, from how long the first
item took and how much of that was waiting, whether the rest stays on the calling thread,
goes to one thread per core (decoding) or to more I/O threads (a cold disk), and feeds the
threads batches from one shared list.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from .._sync import codec_pool, codec_pool_size, io_pool
from ..config import IOConfig

try:  # (Linux: the blocks a thread had the file system read from storage; ``_blocks_read``)
    import resource

    _RUSAGE_THREAD: int | None = resource.RUSAGE_THREAD
except (ImportError, AttributeError):
    _RUSAGE_THREAD = None

__all__ = ["share_now", "Feed", "threads_for"]

# The thresholds below are ``IOConfig`` fields (``thread_item_seconds``, ``thread_work_seconds``,
# ``slow_decode_work_seconds``, ``waiting_item_seconds``, ``free_thread_work_seconds``,
# ``io_reads_in_flight``, ``feed_takes``); the measurements behind their defaults:
# - an item slower than ``thread_item_seconds`` may use the codec pool, and only when the rest
#   adds up to more than ``thread_work_seconds``: chunks whose time goes to many short calls
#   (file syscalls, copies, a fast decoder) hand the GIL back and forth, and a second thread
#   gains only on large reads (the ~17 partial chunks of a 100^3 read, ~250 us each, ran at
#   0.7x on two threads; sharded Zarr v3 blosc-lz4 100^3 reads, 2.1 ms on one thread, took
#   2.4 ms on two)
# - ``slow_decode_work_seconds`` when the decode is one long call without the GIL
#   (``Codec.slow_decode``: gzip, zstd): N5, 64^3 blocks, median ms per unaligned read with
#   8 ms -> 1 ms: gzip 64^3 4.7 -> 2.9, 100^3 5.9 -> 4.4; zstd 64^3 1.9 -> 1.3, 100^3 3.2 -> 1.9
# - an item waiting longer than ``waiting_item_seconds`` (a disk read) gets
#   ``io_reads_in_flight`` threads; a cold 256 KiB file read waits well under 1 ms, so with
#   1 ms cold N5 reads stayed on two threads (410 -> 620 MB/s, tensorstore 650)
# - batches that run without the GIL (``core/rawread.py``) use a second thread from
#   ``free_thread_work_seconds`` of work on (100^3 reads of raw N5, ~0.8 ms, gain from it)


def _blocks_read() -> int | None:
    """How many blocks the file system has read from storage for this thread so far (None
    where the system does not say)."""
    return None if _RUSAGE_THREAD is None else resource.getrusage(_RUSAGE_THREAD).ru_inblock


def _timed(fn: Callable[..., Any], batch: list, args: tuple) -> tuple[float, float, int | None]:
    """``fn(batch, *args)`` here: (seconds it took, seconds of them on the CPU, blocks it had
    read from storage; None: not known)."""
    started, cpu, blocks = time.perf_counter(), time.thread_time(), _blocks_read()
    fn(batch, *args)
    took, on_cpu, after = time.perf_counter() - started, time.thread_time() - cpu, _blocks_read()
    return took, on_cpu, None if blocks is None or after is None else after - blocks


def _storage_wait(took: float, cpu: float, read: int | None, writes: bool) -> float:
    """How much of ``took`` seconds, ``cpu`` of them on the CPU, a read that fetched ``read``
    blocks from storage (None: not known) waited on storage. Where the system counts them
    (Linux), a read off the CPU with none fetched waited for a core (beside a convert's
    encoders, or among 8 I/O threads on 2 cores) or for the GIL: counted as a disk wait, it
    started the I/O threads for warm data, whose malloc arenas then kept a few MiB each (a
    convert's peak RSS outgrew its budget). A network file system's reads are not counted
    either, so there a read gets the codec threads (one per core), not ``io_reads_in_flight``.
    Writes dirty the page cache whatever the disk does, so theirs all counts (``threads_for``
    weighs it)."""
    if read == 0 and not writes:
        return 0.0
    return took - cpu


class Feed:
    """Items handed out to the threads of one call, a share of what is left at each take
    (``takes`` shares per worker, ``IOConfig.feed_takes``): large batches while much is left, single items at
    the end, so that a thread slowed down (by another process on this shared machine, say)
    holds up the others by one item at most, not by a fixed eighth of the call. A slow thread,
    or one that starts late, takes fewer. Stops everyone after the first error.

    The feed holds the call's work (``fn`` and its arguments: the output array, the value
    written) for the threads, and ``release`` drops it when the call is done: a helper
    cancelled before it started stays queued in its pool until a thread picks it up, and
    must not keep the output alive meanwhile. (Freed late, by another thread, outputs
    pile up at the top of the heap, and glibc's default trim threshold then hands that
    memory back to the kernel: every read page-faulted its fresh output in again, a third
    of the CPU time of an unaligned 100^3 raw N5 read.)"""

    def __init__(self, items: list, workers: int, takes: int, fn: Callable[..., Any], args: tuple,
                 collect: bool = False) -> None:
        self._items, self._shares, self._next = items, takes * max(1, workers), 0
        self._work: tuple[Callable[..., Any], tuple] | None = (fn, args)
        self._lock = threading.Lock()
        self.failed = False
        #: with ``collect``: what ``fn`` returned for each batch, by the batch's first item
        self._results: dict[int, Any] | None = {} if collect else None

    def take(self) -> list:
        return self._take()[1]

    def _take(self) -> tuple[int, list]:
        with self._lock:
            if self.failed:
                return 0, []
            i = self._next
            n = max(1, (len(self._items) - i) // self._shares)
            self._next = i + n
        return i, self._items[i : i + n]

    def drain(self) -> None:
        work = self._work
        if work is None:
            return
        fn, args = work
        results = self._results
        try:
            while True:
                i, batch = self._take()
                if not batch:
                    break
                done = fn(batch, *args)
                if results is not None:
                    results[i] = done
        except BaseException:
            self.failed = True
            raise

    def results(self) -> list:
        """The lists ``fn`` returned (``collect``), concatenated in the order of the items."""
        results = self._results or {}
        return [r for i in sorted(results) for r in results[i]]

    def release(self) -> None:
        """Drop the items and the work (no thread runs ``drain`` any more)."""
        with self._lock:
            self._work = None
            self._items = []
            self._next = 0


def threads_for(
    config: IOConfig, took: float, waited: float, n_rest: int, writes: bool, free: bool, slow: bool = False, gil: bool = False
) -> str:
    """How to run ``n_rest`` more items like one that took ``took`` seconds, ``waited`` of
    them off the CPU: "inline" (this thread alone), "codec" (one thread per core) or "io"
    (``config.io_reads_in_flight`` threads). ``slow``: the items are mostly a slow decode
    without the GIL (``config.slow_decode_work_seconds``). ``gil``: the decode holds the GIL
    (``Codec.holds_gil``): threads only pay off while the items wait on the disk."""
    # an item that spent long enough off the CPU to be a disk read (a cold cache) is mostly
    # waiting: more reads in flight then overlap on the device, as tensorstore's file I/O
    # threads do; a slow decoder (gzip) instead gets one thread per core, if there is enough
    # of it: a thread that waits for the GIL behind one running Python can lose whole switch
    # intervals, more than a few milliseconds of work gains. A write counts as waiting only
    # when most of its time was: writes into the page cache are CPU (system time), a short
    # journal wait is no slow disk, and an encoder per I/O thread on few cores is slower than
    # one per core and keeps a malloc arena of buffers per thread
    waiting = waited > config.waiting_item_seconds and (not writes or 2 * waited > took)
    if gil and not waiting:
        # measured (precomputed compressed_segmentation, 64^3 uint64 chunks): 100^3 reads
        # 13.5 ms on two threads, 10.3 ms on one; whole 256^3 reads level (79 / 78 ms)
        return "inline"
    if free and not waiting:
        inline = took * n_rest < config.free_thread_work_seconds
    else:
        work = config.slow_decode_work_seconds if slow else config.thread_work_seconds
        inline = took < config.thread_item_seconds or (not waiting and took * n_rest < work)
    if inline or n_rest < 2:
        return "inline"
    return "io" if waiting else "codec"


def _hint(config: IOConfig, took: float, waited: float, n_rest: int, kinds: tuple[bool, ...]) -> str:
    """What a call's first item says the next call's items should run on (``share_now``'s
    ``memo``): as for a call with at least two more items like it. A call with one more
    item keeps it inline only because there is nothing to share; remembered as "inline",
    it made the next call of a few 1 ms zstd chunks beside the cache's hits decode its
    first chunk alone before any thread helped (a 100^3 read with 3 of 27 chunks missing:
    3.8 ms, tensorstore 2.5)."""
    return threads_for(config, took, waited, max(n_rest, 2), *kinds)


def share_now(
    fn: Callable[..., Any],
    items: list,
    *args: Any,
    config: IOConfig,
    writes: bool = False,
    free: bool = False,
    slow: bool = False,
    gil: bool = False,
    memo: dict | None = None,
    meanwhile: Callable[[], Any] | None = None,
) -> None:
    """``fn(batch, *args)`` over ``items`` on this thread and, when items are slow enough to be
    worth a hand-off, the codec pool's threads too (file reads, numpy copies and the C codecs
    release the GIL). The first item is timed here: a pool hop and the GIL hand-offs it causes
    cost more than a memcpy-sized item. ``writes``: the items write files: they get the I/O
    threads only when the first spent most of its time waiting (a slow file system).
    ``free``: ``fn`` holds the GIL only to start each batch (native reads): a second thread
    pays off from ``config.free_thread_work_seconds`` of work on, as it would in C. ``slow``: the
    items are mostly a slow decode that runs without the GIL (``Codec.slow_decode``): a
    second thread pays off from ``config.slow_decode_work_seconds`` on. ``gil``: the decode holds
    the GIL (``Codec.holds_gil``): only a cold disk makes threads worth it.

    ``config``: the array's ``IOConfig`` (thresholds, pool sizes), read once per call.
    ``memo`` (kept per array by the caller) remembers the choice: when the last call chose
    the codec threads (or, for ``free`` items, there was no last call), they start at once
    and the first item is timed while they work (for the next call), instead of running
    alone first (measured: 7 % of a 100^3 gzip read).

    ``meanwhile``: other work of the call for this thread (a read's chunks the cache holds,
    copied out), done while the threads started at once work on the items, else first.
    """
    last = None if memo is None else memo.get(fn)
    if last is None and memo is not None and free and not writes:
        # a handle's first GIL-free read: the codec threads start at once (its first batch
        # timed meanwhile, the I/O threads added if that waited on the disk), instead of
        # one item alone first: on a cold open that item's read and decode held up the
        # rest (first two 100^3 reads of a cold sharded Zarr v3 zstd array: 16.5 -> 15.3 ms)
        last = "codec"
    # two GIL-free batches worth threads (the last call's, or a handle's first read): each on
    # its own thread at once (``spanread.span_units`` cuts a small read into one per thread;
    # timing the first alone ran both on this thread, a cold first 100^3 read of 8 Zarr v3
    # zstd chunks in 9.7 ms where tensorstore takes 6.8)
    pair = free and last == "codec"
    kinds = (writes, free, slow, gil)
    if len(items) <= 1:
        if items and meanwhile is not None and not writes and (last in ("io", "codec") or (last is None and slow)):
            # (the last call waited on the disk, or its items were worth a thread, or this is
            # a slow decode: it goes on in a pool thread while ``meanwhile`` runs here)
            run_shared(fn, items, args, last or "codec", None, kinds, config, meanwhile)
            return
    elif (len(items) > 2 or meanwhile is not None or pair) and (
        last == "codec" or (last == "io" and not writes and _RUSAGE_THREAD is not None)
    ):
        # the threads the last call chose start at once (its first batch timed meanwhile, for
        # the next call); the I/O threads only for reads where the system counts a thread's
        # blocks read from storage, which ``run_shared`` needs to tell a disk from the cores
        run_shared(fn, items, args, last, memo, kinds, config, meanwhile)
        return
    if meanwhile is not None:
        meanwhile()
    if len(items) <= 1:
        fn(items, *args)
        return
    took, cpu, read = _timed(fn, items[:1], args)
    rest = items[1:]
    waited = _storage_wait(took, cpu, read, writes)
    how = threads_for(config, took, waited, len(rest), *kinds)
    if memo is not None:
        memo[fn] = _hint(config, took, waited, len(rest), kinds)
    if how == "inline":
        fn(rest, *args)
        return
    run_shared(fn, rest, args, how, None, kinds, config)


def run_shared(
    fn: Callable[..., Any], items: list, args: tuple, how: str, memo: dict | None, kinds: tuple[bool, ...], config: IOConfig,
    meanwhile: Callable[[], Any] | None = None,
) -> None:
    """``fn`` over ``items`` on this thread and pool threads ("codec" or "io", see
    ``threads_for``); with ``memo``, this thread's first batch is timed to update it.
    ``kinds``: ``(writes, free, slow, gil)`` as given to ``share_now``; ``meanwhile``: run
    here once the pool threads are started."""
    waiting = how == "io"
    io_reads = config.io_reads_in_flight
    # (without ``memo`` this thread runs ``meanwhile`` before it takes any item: one more
    # pool thread then, so that every item can start at once)
    ahead = meanwhile is not None and memo is None
    workers = min(io_reads if waiting else codec_pool_size(config.codec_threads), len(items) + ahead)
    pool = io_pool(config.io_threads) if waiting else codec_pool(config.codec_threads)
    feed = Feed(items, workers, config.feed_takes, fn, args)
    futures = [pool.submit(feed.drain) for _ in range(workers - 1)]
    try:
        # (this thread's first batch is taken before ``meanwhile``, so that there is one to time)
        first = feed.take() if memo is not None else []
        if meanwhile is not None:
            meanwhile()
        if first and memo is not None:
            took, cpu, read = _timed(fn, first, args)
            waited = _storage_wait(took, cpu, read, writes=kinds[0]) / len(first)
            memo[fn] = now = _hint(config, took / len(first), waited, len(items) - 1, kinds)
            if now == "io" and not waiting:  # the data went cold since: more reads in flight
                futures += [io_pool(config.io_threads).submit(feed.drain) for _ in range(io_reads - workers)]
        feed.drain()
    finally:
        # a helper that has not started has nothing left to do: cancelled, it cannot keep
        # this thread waiting for a free pool thread (a busy pool of such waiters would hang)
        for f in futures:
            f.cancel()
        # waits for the running ones: none writes into ``out`` later
        errors = [f.exception() for f in futures if not f.cancelled()]
        feed.release()
    for e in errors:
        if e is not None:
            raise e
