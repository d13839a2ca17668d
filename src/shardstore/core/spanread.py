"""Reads of shard files through the native ``shardstore._rawio.read_spans``.

For sharded arrays in plain local files (the store declares ``Store.file_spans``) whose inner
chunks are their elements as is or compressed once by a decoder the C module has
(``CodecPipeline.native_layout``: ``bytes``, alone or followed by zstd, blosc or gzip), one
native call per shard file reads each wanted chunk's byte range, decodes it and copies its
box into the output, with the GIL released: no bytes object, decoded array or NumPy copy per
chunk, and two threads really run in parallel. The sharding adapter finds the spans in the
shard index, for all of a batch's chunks of a shard at once, in a shard file that the read's
batches share.

The decoders are the libraries imagecodecs ships and the Python path decodes with (libzstd,
c-blosc, libdeflate), loaded here with ctypes and handed to the C module by address, so
building the module needs none of their headers. Chunks the native call does not read exactly
(missing ones, damaged ones, another decoded size) go back to the
generic path, which fills, decodes or raises the proper ``CodecError`` naming the key.

``IOConfig(native=False)`` (or ``SHARDSTORE_NATIVE=0``) reads everything through the generic
path: the same results, which the tests compare. Reads of a single chunk take the generic path
too: the fixed cost of the native call (the spans planned, the GIL released and taken back) is
shared by no other chunk there, and measured slower on this 2-core machine (warm aligned 64^3
reads of sharded precomputed raw chunks at 0.4-0.7x, Zarr v3 blosc 0.65-0.9x, zstd 1.0x), while
reads of many chunks gain 1.2-5x.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import numpy as np

from .._clibs import find_functions
from .._sync import codec_pool_size
from ..codecs.base import expansion_bound, scratch_buffer
from ..store.open_values import ADVISE_MAX_BYTES, HeldFiles, advise_spans
from .chunk_cache import Generations, buffers_to_keep, keep_filled
from .indexing import ChunkProjection
from .layout import ChunkLayout
from .rawread import Items, inflate_available, plan_boxes, reversed_boxes

if TYPE_CHECKING:  # typed by _rawio.pyi; the checks below still handle a missing module
    from .. import _rawio
else:
    try:
        from .. import _rawio
    except ImportError:  # built without a C compiler: everything takes the generic path
        _rawio = None

__all__ = ["CODECS", "advise_ahead", "loaded_codecs", "span_reader", "span_units"]

#: ``read_spans``' number for each decoder (None: raw elements)
CODECS: dict[str | None, int] = {None: 0, "zstd": 1, "blosc": 2, "gzip": 3, "zlib": 4, "deflate": 5}
# (imagecodecs' codec whose extension loads the library, the library's file name prefix in
# imagecodecs.libs, the system's soname, the functions set_decoders takes)
_LIBRARIES = (
    ("ZSTD", "libzstd", "libzstd.so.1", ("ZSTD_decompress", "ZSTD_isError")),
    ("BLOSC", "libblosc-", "libblosc.so.1", ("blosc_cbuffer_validate", "blosc_decompress_ctx")),
)
_loaded: tuple[int, ...] | None = None


def loaded_codecs() -> tuple[int, ...]:
    """The ``read_spans`` codec numbers the C module can decode (found and handed over once)."""
    global _loaded
    if _loaded is None:
        if _rawio is None:
            _loaded = ()
            return _loaded
        addresses: list[int] = []
        for codec, prefix, soname, functions in _LIBRARIES:
            # (not there, or too old: blosc_cbuffer_validate came with c-blosc 1.16)
            fns = find_functions(prefix, soname, functions, extension=codec) or []
            addresses += [ctypes.cast(f, ctypes.c_void_p).value or 0 for f in fns] or [0] * len(functions)
        _rawio.set_decoders(*addresses)
        inflate_available()  # libdeflate, for gzip and zlib
        _loaded = tuple(_rawio.decoders())
    return _loaded


#: a read of at most this many chunks per codec thread within fewer shards than threads is
#: cut into one piece per thread (``span_units``)
_SMALL_READ_CHUNKS_PER_THREAD = 4


def span_units(layout: ChunkLayout, projections: Iterable[ChunkProjection]) -> list[Items]:
    """A read's chunks as ``(projection, key, None)`` items in batches for ``share_now``: one
    per shard (a native call's unit: one open file, its index and chunks read from it), and
    with few shards, shards cut into pieces so that every codec thread has
    chunks to decode: one piece per thread for a few chunks, two for more."""
    units: dict[tuple[int, ...], Items] = {}
    for p in projections:
        units.setdefault(layout.write_unit(p.coords), []).append((p, layout.chunk_key(p.coords), None))
    batches = list(units.values())
    threads = codec_pool_size(layout.config.codec_threads)
    total = sum(map(len, batches))
    # a few chunks of one shard (the misses of a 100^3 read beside the cache's hits): one
    # piece per thread, all started at once. Cut smaller, every piece's native call and its
    # GIL hand-offs cost more than the balance gained (Zarr v3 zstd 64^3 chunks, 100^3 reads
    # with 4 / 8 of 8 chunks missing, two runs: 2.6-2.9 -> 2.4-2.7 / 5.3-5.6 -> 4.2-4.3 ms,
    # tensorstore with its cache 2.2-2.5 / 5.2-5.3). A larger read within one shard, or two,
    # is cut into two pieces per thread
    small = len(batches) < threads and total <= _SMALL_READ_CHUNKS_PER_THREAD * threads
    want = threads if small else 2 * threads
    if 1 < want and len(batches) < want:
        n = max(1, -(-total // want))
        batches = [unit[i : i + n] for unit in batches for i in range(0, len(unit), n)]
    if not small and batches and len(batches[0]) > 1:
        # the batch ``share_now`` times alone, before any thread helps: one chunk, so that a
        # cold read of one large shard overlaps its file reads from the second chunk on
        batches[:1] = [batches[0][:1], batches[0][1:]]
    return batches


def advise_ahead(layout: ChunkLayout, units: list[Items], held: HeldFiles) -> None:
    """Before a read's batches (``span_units``) start: when its chunks are not in the page
    cache, ask the kernel for all of them at once (``advise_spans``, per shard file held in
    ``held``). Each native call advises its own batch's chunks too, but the batches a thread
    takes later would only be asked for then, and the first is one chunk; tensorstore has its
    reads in flight side by side from the start. Measured on a cold 256^3 Zarr v3 zstd volume
    (one shard, 64^3 chunks): the first 100^3 read of a pass (18 chunks) 16.8 -> 12.5 ms
    (medians of 18), the first 8 reads 34.5-51.8 -> 31.5-45.6 ms (advice toggled in one
    process; see benchmarks/README for what the later reads of such a pass lose). Costs a
    page-cache probe or three per shard file when the chunks are cached. Files of which the
    read wants more than ``ADVISE_MAX_BYTES`` are left to the kernel's readahead (see there)."""
    spans = layout.store.file_spans
    if spans is None:
        return

    def advise(fd: int, which: list[int], offsets: list[int], lengths: list[int], tail: int) -> list[bool]:
        if sum(lengths) <= ADVISE_MAX_BYTES:
            advise_spans(fd, sorted((offset, offset + n) for offset, n in zip(offsets, lengths)))
        return [False] * len(which)  # (nothing read)

    spans.read_spans_sync([item[1] for unit in units for item in unit], advise, held)


def span_reader(
    layout: ChunkLayout, out: np.ndarray, stream: bool = False, gens: Generations | None = None,
    held: HeldFiles | None = None,
) -> Callable[[list[Items]], Items] | None:
    """``read(batches) -> items left``: reads, decodes and copies what it can of the box of
    each chunk of ``batches`` (``span_units``) into ``out`` natively, one call per shard
    file, and returns the items the caller must read itself; None when nothing of this read
    can go native (a store of no local shard files, other codecs, another dtype,
    ``IOConfig(native=False)``). ``stream``: copy with streaming stores (``core/placing.py``).
    The chunks named in ``gens`` are decoded whole and kept in the chunk cache at that
    generation. ``held``: the shard files the read's calls share (``HeldFiles``: each opened
    and its index looked up once per read, not once per batch), which the caller closes."""
    config = layout.config
    if not config.native or _rawio is None:
        return None
    spans = layout.store.file_spans
    if spans is None:
        return None
    native = layout.pipeline.native_layout(layout.chunk_spec)
    if native is None:
        return None
    decoder, stored, order = native
    codec = CODECS[decoder]
    if spans.value_encoding is not None:  # (precomputed's gzip data_encoding): one decoder
        if decoder is not None or spans.value_encoding != "gzip":
            return None
        codec = CODECS["gzip"]
    if codec not in loaded_codecs():
        return None
    # (clipped edge chunks are smaller: the kernel refuses them by size, the generic path reads them)
    chunk_shape = tuple(layout.grid.chunk_shape)
    # a Fortran-ordered chunk is the C-ordered one of the reversed shape: its boxes reversed too
    fortran = order == "F"
    kernel_shape = chunk_shape[::-1] if fortran else chunk_shape
    swap = not stored.isnative and stored.itemsize > 1
    if (
        out.dtype != stored.newbyteorder("=")
        or not out.flags.writeable
        or out.ndim > len(chunk_shape)
        or (swap and stored.kind == "c")  # (the kernel swaps whole items, not each part)
        or math.prod(chunk_shape) * stored.itemsize > config.native_max_chunk_bytes
    ):
        return None
    itemsize = stored.itemsize
    read_spans = _rawio.read_spans
    nbytes = math.prod(chunk_shape) * itemsize
    decoded = 0 if codec == CODECS[None] else nbytes
    bound = nbytes if codec == CODECS[None] else expansion_bound(nbytes)  # (the kernel's own limit)
    scratch_max = config.scratch_max_bytes

    def read(units: list[Items]) -> Items:
        boxes, taken, rest, out_dims = plan_boxes([item for unit in units for item in unit], out.ndim)
        if not taken or out_dims is None:
            return rest
        dims = out_dims
        if fortran:
            boxes, dims = reversed_boxes(boxes, dims)
        keys = [item[1] for item in taken]
        keep = buffers_to_keep(layout, keys, gens, out.dtype, fortran)

        def read_file(fd: int, which: list[int], offsets: list[int], lengths: list[int], tail: int) -> list[bool]:
            # in file order: runs of adjacent chunks are read sequentially (the kernel's readahead)
            order = sorted(range(len(offsets)), key=offsets.__getitem__)
            jobs = [(offsets[j], lengths[j], boxes[which[j]], keep[which[j]]) for j in order]
            # this thread's reused buffer (a fresh one per call costs page faults): the decoded
            # chunk, then the largest stored span (a bigger one is sized by the kernel itself), and
            # room to put both at 64-byte boundaries
            work = scratch_buffer(decoded + min(max(lengths), bound) + 128, scratch_max)
            status = read_spans(out, kernel_shape, dims, itemsize, swap, codec, fd, tail, jobs, work, stream)
            done = [False] * len(order)
            for j, s in zip(order, status):
                done[j] = s == 0
            return done

        done = spans.read_spans_sync(keys, read_file, held)
        keep_filled(layout, keys, keep, done, gens)
        rest += [item for item, d in zip(taken, done) if not d]
        return rest

    return read
