"""Reads of chunk files through the native ``shardstore._rawio`` module.

For arrays whose chunks are stored uncompressed at a fixed layout (``CodecPipeline.raw_layout``:
N5 raw blocks; ``native_layout`` without a decoder: precomputed raw chunks, in Fortran order,
and uncompressed Zarr v3) in plain files (``Store.file_paths``), one native call reads a whole
batch of chunk boxes with the GIL released: two threads then really run in parallel, and the
per-chunk Python of the generic path (read, decode, scatter) drops out. Chunks it cannot take
(missing files, edge blocks of another size, damaged files, fancy indexing) go back to the
generic path, which fills, decodes or raises exactly as before.

Chunks that are a header and one deflate stream (``CodecPipeline.inflate_layout``: N5 gzip
blocks) go the same way when libdeflate can be found (imagecodecs ships it): the native call
then reads each whole file and inflates it with libdeflate, the decoder the generic path uses
too, so the two paths differ only in the Python around the decode.

An array opened with ``IOConfig(native=False)`` (or ``SHARDSTORE_NATIVE=0`` in the environment,
which sets the default config) reads everything through the generic path (A/B comparisons);
chunks larger than ``IOConfig.native_max_chunk_bytes`` always do.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from .._clibs import find_functions
from ..codecs.base import scratch_buffer
from ..store.open_values import ADVISE_MAX_BYTES, advise_files
from .chunk_cache import Generations, buffers_to_keep, keep_filled
from .indexing import ChunkProjection
from .layout import ChunkLayout

if TYPE_CHECKING:  # typed by _rawio.pyi; the checks below still handle a missing module
    from .. import _rawio
else:
    try:
        from .. import _rawio
    except ImportError:  # built without a C compiler: everything takes the generic path
        _rawio = None

__all__ = ["advise_files_of", "available", "inflate_available", "plan_boxes", "raw_reader", "reversed_boxes"]

#: a chunk of a read: its projection, its key, and None (the slot `_scatter` takes its bytes in)
Items = list[tuple[ChunkProjection, str, None]]
_T = TypeVar("_T", bound=tuple[Any, ...])
_LIBDEFLATE_FUNCTIONS = ("alloc_decompressor", "free_decompressor", "gzip_decompress_ex", "zlib_decompress_ex")
#: ``_rawio.read_boxes``' status of a job whose file does not exist
ST_MISSING = 1
_libdeflate: bool | None = None  # whether libdeflate was found and handed over (None: not looked for yet)


def available() -> bool:
    """Whether the native reader is built (an array uses it unless its ``IOConfig.native``
    is False)."""
    return _rawio is not None


def inflate_available() -> bool:
    """Whether the native reader can inflate: libdeflate found and handed to it (once)."""
    global _libdeflate
    if _libdeflate is None:
        _libdeflate = False
        fns = None
        if _rawio is not None:  # (not there, or too old for the _ex functions: None)
            fns = find_functions("libdeflate", "libdeflate.so.0", ["libdeflate_" + f for f in _LIBDEFLATE_FUNCTIONS])
        if fns is not None:
            _rawio.set_libdeflate(*(ctypes.cast(f, ctypes.c_void_p).value or 0 for f in fns))  # 0: refused
            _libdeflate = True
    return bool(_libdeflate)


def advise_files_of(layout: ChunkLayout, keys: Sequence[str]) -> None:
    """Before a read of the chunk files ``keys`` (a store of one file per chunk) starts: when
    they are not in the page cache, ask the kernel for all of them at once (``advise_files``),
    so that on a cold disk their reads overlap: the threads read one file after another, and
    a read's one or two files to fetch are read only once the cache's hits are copied.
    (Cold passes of 64 100^3 reads over 256^3 N5 raw with the cache, advised or not, in one
    process taking turns: 57-66 against 57-71 ms; the reads with chunks to fetch beside
    hits 11.7-13.4 against 12.1-15.0.) Not for reads of more than ``ADVISE_MAX_BYTES`` of
    chunks."""
    paths = layout.store.file_paths
    if paths is None or len(keys) * layout.chunk_spec.nbytes > ADVISE_MAX_BYTES:
        return
    advise_files([paths.file_path(key) for key in keys])


def raw_reader(
    layout: ChunkLayout, out: np.ndarray, strict: bool = False, stream: bool = False, gens: Generations | None = None
) -> Callable[[Items], Items] | None:
    """``read(items) -> items left``: copies what it can of each chunk's box into ``out``
    natively and returns the items the caller must read itself; None when nothing of this
    read can go native (other compressions, a store of no local files, another dtype, an
    ``IOConfig`` with ``native=False``). Chunks without a file get the fill value here
    when the store says that means no value (``absent_without_file``) and the read is not
    ``strict`` (which raises for them, on the generic path): asking the store again would
    cost more than the native attempt (N5 reads of a region never written ran at 0.4x).
    ``stream``: copy with streaming stores (``core/placing.py``). The chunks named in
    ``gens`` are read whole and kept in the chunk cache at that generation."""
    config = layout.config
    if not config.native:
        return None
    raw, inflate, fortran, plain_files = layout.pipeline.raw_layout, False, False, False
    if raw is None and (raw := layout.pipeline.inflate_layout) is not None:
        inflate = True
    if raw is None and (plain := layout.pipeline.native_layout(layout.chunk_spec)) is not None and plain[0] is None:
        # files of the elements alone, nothing before them (``bytes``: precomputed's raw
        # chunks in Fortran order, Zarr v3 without compression)
        raw, fortran, plain_files = (b"", plain[1]), plain[2] == "F", True
    if raw is None or not available() or (inflate and not inflate_available()):
        return None
    paths = layout.store.file_paths
    if paths is None:
        return None
    path_of = paths.file_path
    fills = not strict and paths.absent_without_file
    fill_value = layout.spec.fill_value
    header, stored = raw
    if out.dtype != stored.newbyteorder("=") or not out.flags.writeable or out.ndim > len(layout.grid.chunk_shape):
        return None
    chunk_shape = tuple(layout.grid.chunk_shape)
    kernel_shape = chunk_shape[::-1] if fortran else chunk_shape
    if math.prod(chunk_shape) * stored.itemsize > config.native_max_chunk_bytes:
        # the kernel sizes its buffer by the metadata's chunk, before it sees a file: a
        # corrupt blockSize must not become a multi-GiB allocation (the Python path sizes
        # by the block's own header, capped by the metadata)
        return None
    swap = not stored.isnative
    if (swap and stored.kind == "c") or not chunk_shape:  # (the kernel swaps whole items; takes 1-32 dims)
        return None
    read_boxes = _rawio.read_boxes
    spec_for = layout.spec_for
    file_bytes, scratch_max = len(header) + math.prod(chunk_shape) * stored.itemsize, config.scratch_max_bytes

    def read(items: Items) -> Items:
        rest: Items = []
        if plain_files:
            # with no header to tell, a clipped edge chunk (precomputed) that is stored at
            # full size would pass the kernel's size check: the generic path refuses it,
            # naming the file (and reads a properly clipped one)
            whole: Items = []
            for item in items:
                (whole if spec_for(item[0].coords).shape == chunk_shape else rest).append(item)
            items = whole
        boxes, taken, left, out_dims = plan_boxes(items, out.ndim)
        rest += left
        if taken and out_dims is not None:
            if fortran:
                boxes, out_dims = reversed_boxes(boxes, out_dims)
            keys = [item[1] for item in taken]
            keep = buffers_to_keep(layout, keys, gens, out.dtype, fortran)
            jobs = [(path_of(key), box, k) for key, box, k in zip(keys, boxes, keep)]
            # (the file's bytes go to this thread's reused buffer: a fresh one per call is
            # an allocation the size of a chunk, and page faults on its first touch)
            work = scratch_buffer(file_bytes, scratch_max)
            status = read_boxes(out, kernel_shape, out_dims, header, stored.itemsize, swap, jobs, inflate, work, stream)
            keep_filled(layout, keys, keep, [s == 0 for s in status], gens)
            for item, s in zip(taken, status):
                if s == ST_MISSING and fills:
                    out[item[0].out_selection] = fill_value
                elif s:
                    rest.append(item)
        return rest

    return read


def reversed_boxes(boxes: list[Box], out_dims: list[int]) -> tuple[list[Box], list[int]]:
    """``plan_boxes``' boxes and ``out_dims`` for a chunk stored in Fortran order, which the
    kernels copy as the C-ordered chunk of the reversed shape: its dimensions reversed."""
    return [box[::-1] for box in boxes], out_dims[::-1]


#: a box the native kernels copy (``_rawio.read_boxes`` / ``read_spans`` / ``place_boxes``):
#: ``(start, step, count, out_start)`` per chunk dimension
Box = Sequence[tuple[int, int, int, int]]


def plan_boxes(items: Sequence[_T], out_ndim: int) -> tuple[list[Box], list[_T], list[_T], list[int] | None]:
    """The boxes the native kernels copy for the items (tuples whose first element is the
    projection: a read's item, a chunk cache hit) whose projection is slices (positive steps,
    written forwards) and integers. Returns ``(boxes, the items they belong to, the other
    items, out_dims)``: ``out_dims`` gives the dimension of the output each chunk dimension
    fills (-1: an integer index), the same for every box (None when no item was taken).

    A projection of a basic selection brings its box (``ChunkProjection.box``, made once per
    dimension by the indexer); the others' are worked out here."""
    boxes: list[Box] = []
    taken: list[_T] = []
    rest: list[_T] = []
    out_dims: list[int] | None = None
    shared: tuple[int, ...] | None = None  # the box_dims that match out_dims
    slice_ = slice
    for item in items:
        p = item[0]
        given = p.box
        if given is not None:
            if p.box_dims is shared:
                boxes.append(given)
                taken.append(item)
                continue
            if out_dims is None and p.box_dims is not None and sum(d >= 0 for d in p.box_dims) == out_ndim:
                shared = p.box_dims
                out_dims = list(shared)
                boxes.append(given)
                taken.append(item)
                continue
        box: list[tuple[int, int, int, int]] = []
        dims: list[int] = []
        outs = iter(p.out_selection)
        n = 0
        for s in p.chunk_selection:
            if type(s) is slice_:
                o = next(outs, None)
                if type(o) is not slice_ or o.step not in (None, 1) or s.step is None or s.step < 1:
                    break
                box.append((s.start, s.step, o.stop - o.start, o.start))
                dims.append(n)
                n += 1
            elif type(s) is int:
                box.append((s, 1, 1, 0))
                dims.append(-1)
            else:
                break  # index arrays (oindex): the generic path
        else:
            if out_dims is None:
                out_dims = dims
            if dims == out_dims and n == out_ndim:
                boxes.append(box)
                taken.append(item)
                continue
        rest.append(item)
    return boxes, taken, rest, out_dims
