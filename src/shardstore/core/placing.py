"""Copies of chunks held in memory (the chunk cache's hits) into a read's result.

The hits go to ``_rawio.place_boxes``, one call per chunk shape and memory order without the
GIL, from ``IOConfig.thread_copy_bytes`` of copies on shared with the C module's helper
thread (``copies_shared``). A result of ``IOConfig.streaming_copy_bytes`` or more is written
with streaming stores that skip the CPU caches: such a result does not stay cached anyway,
and each line stored normally is read from memory first (a 256^3 uint8 result of cached 64^3
chunks: 0.9 ms against 2.3 ms on one thread). ``empty_result`` gives such results the
64-byte alignment that lets their rows be streamed whole; the native readers of files stream
into them too (``streams``).

Hits the kernel cannot take (a chunk of another dtype or layout, fancy indexing, the C
extension not built or ``IOConfig(native=False)``) are copied by NumPy, on the calling thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._assign import assign
from .chunk_cache import Hit
from .rawread import available, plan_boxes, reversed_boxes

if TYPE_CHECKING:
    from .. import _rawio
    from ..config import IOConfig
else:
    try:
        from .. import _rawio
    except ImportError:
        _rawio = None

__all__ = ["copies_shared", "empty_result", "place_chunk", "place_hits", "streams"]

#: the line size streaming stores write whole
_LINE = 64
#: kinds of dtype the kernel copies as plain bytes
_PLAIN_KINDS = frozenset("biufc")


def empty_result(shape: tuple[int, ...], dtype: np.dtype, order: str, config: IOConfig) -> np.ndarray:
    """``np.empty`` for a read's result, aligned to a cache line when it is large enough to
    be written with streaming stores (NumPy's own allocation is aligned to 16 bytes only, and
    the kernel streams only the lines a row covers whole: 64-byte rows at an odd offset would
    cover none)."""
    dtype = np.dtype(dtype)
    nbytes = dtype.itemsize
    for n in shape:
        nbytes *= n
    if not nbytes or not _streamed(nbytes, config):
        return np.empty(shape, dtype=dtype, order=order)  # type: ignore[call-overload]
    block = np.empty(nbytes + _LINE, dtype=np.uint8)
    start = -block.ctypes.data % _LINE
    flat = block[start : start + nbytes].view(dtype)
    return flat.reshape(shape[::-1]).T if order == "F" else flat.reshape(shape)


def streams(out: np.ndarray, config: IOConfig) -> bool:
    """Whether the native copies into ``out`` use streaming stores."""
    return _streamed(out.nbytes, config)


def _streamed(nbytes: int, config: IOConfig) -> bool:
    return nbytes >= config.streaming_copy_bytes and config.native and available()


def copies_shared(hits: Sequence[Hit], out: np.ndarray, config: IOConfig) -> bool:
    """Whether the hits' copies are worth the native copy helper thread (``_rawio.place_boxes``'s
    ``helper``): from ``config.thread_copy_bytes`` on. Measured (sharded Zarr v3, 64^3 uint8
    chunks, all hits, us per read of an n^3 box: NumPy's row copies / the kernel alone / with
    the helper): 40^3 43 / 30 / 28, 64^3 161 / 130 / 126, 100^3 467 / 417 / 328, 160^3 1,920 /
    1,669 / 1,200. (Copies shared with a Python pool thread instead cost more than they saved
    below ~200^3: its wake-up, the GIL passed around and a future waited on.)"""
    return bool(hits) and min(out.nbytes, len(hits) * hits[0][1].nbytes) >= config.thread_copy_bytes


def place_hits(hits: Sequence[Hit], out: np.ndarray, config: IOConfig) -> None:
    """Copy each hit's part into ``out``: natively where the kernel can (without the GIL, with
    the copy helper thread from ``config.thread_copy_bytes`` on, streamed into a large
    result), the rest by NumPy."""
    if hits and config.native and available():
        hits = _place_natively(hits, out, streams(out, config), copies_shared(hits, out, config))
    for p, chunk in hits:
        assign(out, p.out_selection, chunk[p.chunk_selection])


def place_chunk(hit: Hit, out: np.ndarray, stream: bool) -> None:
    """One decoded chunk's part into ``out`` (``hit``: its projection, the whole chunk): with
    ``stream`` (``streams``) by the kernel's streaming stores where it can."""
    if not stream or _place_natively([hit], out, True, False):
        p, chunk = hit
        assign(out, p.out_selection, chunk[p.chunk_selection])


def _place_natively(hits: Sequence[Hit], out: np.ndarray, stream: bool, helper: bool) -> Sequence[Hit]:
    """Places the hits ``_rawio.place_boxes`` can, in one call per chunk shape and memory
    order (``stream``: with streaming stores; ``helper``: with the copy helper thread);
    returns the others."""
    if out.dtype.kind not in _PLAIN_KINDS:
        return hits
    dtype = out.dtype
    groups: dict[tuple[tuple[int, ...], bool], list[Any]] = {}
    rest: list[Hit] = []
    for hit in hits:
        chunk = hit[1]
        flags = chunk.flags  # (NumPy makes a new flags object per access)
        if chunk.dtype is not dtype and chunk.dtype != dtype:
            rest.append(hit)
        elif flags.c_contiguous:
            groups.setdefault((chunk.shape, False), []).append(hit)
        elif flags.f_contiguous:  # (precomputed's chunks: the kernel copies their reversed view)
            groups.setdefault((chunk.shape, True), []).append(hit)
        else:
            rest.append(hit)
    for (shape, fortran), group in groups.items():
        boxes, taken, left, out_dims = plan_boxes(group, out.ndim)
        rest += left
        if taken and out_dims is not None:
            if fortran:
                boxes, out_dims = reversed_boxes(boxes, out_dims)
                shape = shape[::-1]
            jobs = [(hit[1], b) for hit, b in zip(taken, boxes)]
            _rawio.place_boxes(out, shape, out_dims, dtype.itemsize, jobs, stream, helper)
    return rest
