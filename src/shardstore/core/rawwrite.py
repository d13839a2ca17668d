"""Writes of whole uncompressed chunk files through the native ``shardstore._rawio`` module.

The mirror of ``core/rawread.py``: for arrays whose chunks are stored uncompressed at a fixed
layout (``CodecPipeline.raw_layout``: N5 raw blocks) in plain files of a writable store
(``Store.file_paths`` and ``Store.sync_writes``), one native call gathers, swaps
and writes a whole batch of full-size chunks with the GIL released, each atomically (temp file
beside the target, then rename, as ``LocalStore`` writes). The per-chunk Python of the generic
path (encode into a new buffer, temp name, open, write, replace) drops out, and threads writing
chunks no longer hand the GIL around at every system call.

Only chunks a write replaces whole and at full size go native; partial chunks (read, merge,
write), clipped edge chunks (another header) and chunks the native call could not write (an
I/O error, say) go back to the generic path, which writes them or raises exactly as before.
A chunk of zero bytes only is deleted through the store, as the generic path deletes chunks
equal to the fill value; so native writes are used only where the fill value's bits are zero.

An array opened with ``IOConfig(native=False)`` (or ``SHARDSTORE_NATIVE=0`` in the environment,
which sets the default config) writes (and reads) everything through the generic path.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ..codecs.base import scratch_buffer
from ..codecs.memory_order import first_axis_fastest, rows_laid_out
from ..store.local import temp_path
from . import rawread
from .indexing import ChunkProjection
from .layout import ChunkLayout

if TYPE_CHECKING:  # typed by _rawio.pyi; the checks below still handle a missing module
    from .. import _rawio
else:
    try:
        from .. import _rawio
    except ImportError:  # built without a C compiler: everything takes the generic path
        _rawio = None

__all__ = ["available", "raw_writer"]

Items = list[tuple[ChunkProjection, str]]

# statuses of ``_rawio.write_boxes``, per job
ST_OK, ST_FALLBACK, ST_FILL, ST_NODIR = 0, 2, 3, 4


def available() -> bool:
    """Whether the native writer is built (a module built before it existed has no
    ``write_boxes``: then the generic path writes, as without a compiler); an array uses it
    unless its ``IOConfig.native`` is False."""
    return rawread.available() and hasattr(_rawio, "write_boxes")


def _zero_bits(fill_value: object, dtype: np.dtype) -> bool:
    """Whether the fill value is stored as zero bytes (not -0.0, not NaN)."""
    try:
        return not np.asarray(fill_value, dtype=dtype).tobytes().strip(b"\0")
    except (TypeError, ValueError, OverflowError):
        return False


def raw_writer(layout: ChunkLayout, value: np.ndarray) -> Callable[[Items], Items] | None:
    """``write(items) -> items left``: writes natively what it can of the chunks the items
    ``(projection, key)`` name, from ``value`` (the write's value, broadcast to the
    selection's shape), and returns the items the caller must write itself; None when
    nothing of this write can go native (compressed chunks, a store of no local files or a
    read-only one, another dtype, a fill value of nonzero bits, fill chunks kept, an
    ``IOConfig`` with ``native=False``)."""
    raw = layout.pipeline.raw_layout
    if raw is None or not layout.config.native or not available() or layout.store_fill_chunks:
        return None
    store = layout.store
    paths, writes = store.file_paths, store.sync_writes
    if paths is None or writes is None:  # not local files, or read-only: never written here
        return None
    path_of, write = paths.file_path, writes.set_sync
    header, stored = raw
    chunk_shape = tuple(layout.grid.chunk_shape)
    if (
        value.dtype != stored.newbyteorder("=")
        or value.ndim != len(chunk_shape)  # integer indices drop axes: not whole chunks
        or not _zero_bits(layout.spec.fill_value, value.dtype)
    ):
        return None
    swap = not stored.isnative
    itemsize = stored.itemsize
    write_boxes = _rawio.write_boxes
    # Fortran-ordered input: the kernel's element-by-element transposing copy walks the input
    # with power-of-two strides, a cache line and a page per element; the two-pass copy of
    # ``memory_order`` is about twice as fast. Its first pass lays each block out in this
    # thread's scratch (NumPy copies without the GIL) and the kernel's gather into the file
    # buffer is its last pass, strided but within the block (one buffer and copy fewer).
    fortran = first_axis_fastest(value)
    scratch_max = layout.config.scratch_max_bytes
    chunk_bytes = math.prod(chunk_shape) * itemsize
    zeros = [0] * len(chunk_shape)
    present: set[str] = set()  # directories seen to exist

    def write_laid_out(jobs: list[tuple[str, str, list[int]]]) -> bytes:
        status = []
        for tmp, path, starts in jobs:
            parent = os.path.dirname(path)
            if parent not in present:
                if not os.path.isdir(parent):  # (no copy for a block the kernel cannot write yet)
                    status.append(bytes((ST_NODIR,)))
                    continue
                present.add(parent)
            buf = scratch_buffer(chunk_bytes, scratch_max, slot="encode_buf").view(value.dtype)
            laid = rows_laid_out(value[tuple(slice(s, s + n) for s, n in zip(starts, chunk_shape))], buf)
            status.append(write_boxes(laid, chunk_shape, header, itemsize, swap, [(tmp, path, zeros)]))
        return b"".join(status)

    spec_for = layout.spec_for
    slice_ = slice

    def origin(p: ChunkProjection) -> list[int] | None:
        """Where the chunk's box starts in ``value``; None unless the chunk is written whole
        at full size (then its file is exactly ``header`` + the box)."""
        if not p.is_complete or len(p.chunk_selection) != len(chunk_shape) or len(p.out_selection) != len(chunk_shape):
            return None
        starts = []
        for s, o, n in zip(p.chunk_selection, p.out_selection, chunk_shape):
            if type(s) is not slice_ or type(o) is not slice_ or s.indices(n) != (0, n, 1):
                return None
            if o.step not in (None, 1) or o.stop - o.start != n:
                return None
            starts.append(o.start)
        if spec_for(p.coords).shape != chunk_shape:  # a clipped edge chunk: another header
            return None
        return starts

    def run(jobs: list[tuple[str, str, list[int]]], taken: Items, rest: Items, retry: bool) -> None:
        if fortran:
            status = write_laid_out(jobs)
        else:
            status = write_boxes(value, chunk_shape, header, itemsize, swap, jobs)
        again: list[int] = []
        for i, s in enumerate(status):
            if s == ST_OK:
                continue
            if s == ST_FILL:
                write(taken[i][1], None)  # all fill: the chunk is deleted, as in the generic path
            elif s == ST_NODIR and retry:
                again.append(i)
            else:
                rest.append(taken[i])
        if not again:
            return
        made: set[str] = set()
        ok: list[int] = []
        for i in again:
            parent = os.path.dirname(jobs[i][1])
            try:
                if parent not in made:
                    os.makedirs(parent, exist_ok=True)
                    made.add(parent)
                ok.append(i)
            except OSError:  # the generic path words the error
                rest.append(taken[i])
        if ok:
            # the temp file was never created (its directory was missing): its name is still free
            run([jobs[i] for i in ok], [taken[i] for i in ok], rest, False)

    def write_native(items: Items) -> Items:
        jobs: list[tuple[str, str, list[int]]] = []
        taken: Items = []
        rest: Items = []
        for item in items:
            starts = origin(item[0])
            if starts is None:
                rest.append(item)
                continue
            path = path_of(item[1])
            jobs.append((temp_path(path), path, starts))
            taken.append(item)
        if jobs:
            run(jobs, taken, rest, True)
        return rest

    return write_native
