"""Neuroglancer precomputed ``raw`` encoding: little-endian values in Fortran order.

A chunk ``[x, y, z, c]`` is stored with x fastest and the channel slowest (a C array
``[c][z][y][x]``), no header. Decoding copies the stored values (or the selected box) once,
x rows at a time, into a buffer whose z planes are padded off multiples of 512 bytes, and
returns the ``[x, y, z, c]`` *view* of it: the core's copy into the C-ordered output then
does the transposition in the same pass that places the chunk. Read straight from the stored
bytes, that copy would walk z with a stride of a power of two (4096 bytes for 64^3 uint8
chunks), which maps every step to the same cache set: the one strided copy then costs
several times the two copies through the padded buffer.

Encoding takes the chunk in any memory layout (``accepts_strided``): a chunk cut out of an
``[x, y, z, c]`` array in Fortran order (what CloudVolume and tensorstore hand their users,
and what precomputed reads return) already runs x fastest, so it is laid out with one copy of
whole x rows (``fortran_copy``), no transposition; other layouts go through
``xyzc_to_fortran``.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from .._assign import assign
from ..errors import CodecError, MetadataError
from .base import ArrayBytesCodec, ChunkSpec, scratch_buffer
from .registry import register_codec

__all__ = ["PrecomputedRawCodec", "fortran_copy", "fortran_to_xyzc", "runs_x_fastest", "xyzc_to_fortran"]

#: this module's own per-thread scratch (``scratch_buffer``): the chunk being encoded may
#: itself be a transient decode in the thread's "buf" (a partial write's merge)
_SCRATCH_SLOT = "raw_transpose"


def fortran_to_xyzc(a: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``[c, z, y, x]`` (any strides, any byte order) -> ``[x, y, z, c]`` of ``dtype``, a fresh
    array: a transposed view of a padded copy for one channel (see the module docstring),
    C-contiguous for several (the channel is then the innermost axis of the output)."""
    nc, sz, sy, sx = a.shape
    plane = sy * sx
    # pad each z plane by one cache line when its size is a multiple of 512 bytes
    pitch = plane + (-(-64 // dtype.itemsize) if (plane * dtype.itemsize) % 512 == 0 and plane else 0)
    buf = np.empty((nc * sz, pitch), dtype=dtype)
    czyx = buf[:, :plane].reshape(nc, sz, sy, sx)
    czyx[...] = a  # whole x rows; converts the byte order on the way
    if nc == 1:
        return czyx.transpose(3, 2, 1, 0)
    out = np.empty((sx, sy, sz, nc), dtype=dtype)
    for c in range(nc):
        out[..., c] = czyx[c].transpose(2, 1, 0)
    return out


def runs_x_fastest(a: np.ndarray) -> bool:
    """Whether x is the innermost axis of ``a``'s memory (``[x, y, z, c]`` in Fortran order, or
    a box cut out of such an array): then the stored layout is a copy of whole x rows."""
    if a.shape[0] < 2:
        return False
    step = abs(a.strides[0])
    return all(n < 2 or abs(s) > step for n, s in zip(a.shape[1:], a.strides[1:]))


def fortran_copy(a: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``[x, y, z, c]`` whose x runs fastest (``runs_x_fastest``) -> a C-contiguous
    ``[c, z, y, x]`` of ``dtype``: one copy of whole x rows, converting the byte order on the
    way; none when ``a`` is that array already (a whole Fortran-contiguous chunk)."""
    czyx = a.transpose(3, 2, 1, 0)
    if czyx.flags.c_contiguous and czyx.dtype == dtype:
        return czyx
    out = np.empty(czyx.shape, dtype=dtype)
    assign(out, ..., czyx)
    return out


def xyzc_to_fortran(a: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``[x, y, z, c]`` -> a C-contiguous ``[c, z, y, x]`` of ``dtype``.

    A tall-to-wide 2-D transpose is several times cheaper than a wide-to-tall one, hence a
    different path from the inverse: channel first, swap x and y (row copies), then one
    ``(y*x, z) -> (z, y*x)`` transpose per channel, converting the byte order on the way.
    """
    sx, sy, sz, nc = a.shape
    czyx = a.transpose(3, 2, 1, 0)
    if czyx.flags.c_contiguous and czyx.dtype == dtype:
        return czyx  # decoded by this codec and modified in place: stored order already
    # the intermediate lives in this thread's scratch buffer: a fresh one per chunk costs a
    # page fault per 4 KiB page on first touch (the allocator hands chunk-sized blocks back
    # to the kernel), as much as the copy itself
    tmp = scratch_buffer(a.size * a.dtype.itemsize, slot=_SCRATCH_SLOT).view(a.dtype)
    cyxz = tmp.reshape(nc, sy, sx, sz)
    if nc == 1:
        cyxz[0] = a[..., 0].transpose(1, 0, 2)  # gathers a strided box in the same pass
    else:
        cxyz = np.ascontiguousarray(a.transpose(3, 0, 1, 2))
        cyxz[...] = cxyz.transpose(0, 2, 1, 3)
    out = np.empty((nc, sz, sy, sx), dtype=dtype)
    out.reshape(nc, sz, sy * sx)[...] = cyxz.reshape(nc, sy * sx, sz).transpose(0, 2, 1)
    return out


@register_codec("raw", namespace="precomputed")
class PrecomputedRawCodec(ArrayBytesCodec):
    """``raw``: no options."""

    name = "raw"
    #: ``encode`` lays out any strides itself, in one copy for inputs that run x fastest
    accepts_strided = True

    @classmethod
    def _from_configuration(cls, configuration: dict[str, Any]) -> PrecomputedRawCodec:
        if configuration:
            raise MetadataError(f"encoding 'raw' takes no options, got {sorted(configuration)}")
        return cls()

    def _canonical_config(self) -> dict[str, Any]:
        return {"name": "raw"}

    def validate(self, spec: ChunkSpec) -> None:
        dtype = np.dtype(spec.dtype)
        if len(spec.shape) != 4 or dtype.kind not in "uif":
            raise MetadataError(f"encoding 'raw' needs a [x, y, z, channel] chunk of numbers, got {spec.shape} {dtype}")

    def encoded_size(self, spec: ChunkSpec) -> int:
        return spec.nbytes

    def plain_layout(self, spec: ChunkSpec) -> tuple[np.dtype, Literal["C", "F"]]:
        """Little-endian values, x fastest: the ``[x, y, z, c]`` chunk in Fortran order."""
        return np.dtype(spec.dtype).newbyteorder("<"), "F"

    def encode(self, array: np.ndarray, spec: ChunkSpec) -> memoryview:
        if array.shape != spec.shape:
            raise CodecError(f"codec 'raw': array of shape {array.shape}, expected {spec.shape}")
        stored = np.dtype(spec.dtype).newbyteorder("<")
        if runs_x_fastest(array):
            out = fortran_copy(array, stored)
        else:
            # a box of a C-ordered array is gathered by the first of the two copies
            out = xyzc_to_fortran(array, stored)
        return out.reshape(-1).view(np.uint8).data

    def _stored(self, data: bytes, spec: ChunkSpec) -> np.ndarray:
        """The chunk as its ``[c, z, y, x]`` little-endian view (size checked)."""
        dtype = np.dtype(spec.dtype)
        got = memoryview(data).nbytes
        if got != spec.nbytes:
            raise CodecError(
                f"codec 'raw': {got} bytes, expected {spec.nbytes} for a chunk of {list(spec.shape[:3])} "
                f"voxels x {spec.shape[3]} channel(s) of {dtype}"
            )
        sx, sy, sz, nc = spec.shape
        return np.frombuffer(data, dtype=dtype.newbyteorder("<")).reshape(nc, sz, sy, sx)

    def decode(self, data: bytes, spec: ChunkSpec) -> np.ndarray:
        # zero-copy: the [x, y, z, c] view of the stored bytes; precomputed reads return
        # Fortran-ordered arrays (ChunkLayout.order), so placing it is a plain copy
        return self._stored(data, spec).transpose(3, 2, 1, 0)
