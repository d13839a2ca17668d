"""Neuroglancer precomputed ``raw`` encoding: little-endian values in Fortran order.

A chunk ``[x, y, z, c]`` is stored with x fastest and the channel slowest (a C array
``[c][z][y][x]``), no header. That is ``transpose(3, 2, 1, 0)`` + ``bytes``, but the core would
then copy a reversed-stride view into C-ordered output, and NumPy copies such views element by
element across pages (about 2 ms for a 64^3 uint8 chunk). This codec reorders in steps that
each move one axis with good locality (row copies, then a 2-D transpose), 3-5x faster, and
returns a C-contiguous ``[x, y, z, c]`` chunk that the core copies at memory speed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import CodecError, MetadataError
from .base import ArrayBytesCodec, ChunkSpec
from .registry import register_codec

__all__ = ["PrecomputedRawCodec", "fortran_to_xyzc", "xyzc_to_fortran"]


def fortran_to_xyzc(a: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``[c, z, y, x]`` (any byte order) -> a C-contiguous ``[x, y, z, c]`` of ``dtype``."""
    nc, sz, sy, sx = a.shape
    # 1. swap z and y: copies whole x rows (fast), converting the byte order on the way
    cyzx = np.empty((nc, sy, sz, sx), dtype=dtype)
    cyzx[...] = a.transpose(0, 2, 1, 3)
    # 2. move x before (y, z): one 2-D transpose per channel
    cxyz = np.ascontiguousarray(cyzx.reshape(nc, sy * sz, sx).transpose(0, 2, 1))
    # 3. channel last (nothing to do for one channel)
    if nc == 1:
        return cxyz.reshape(sx, sy, sz, 1)
    return np.ascontiguousarray(cxyz.reshape(nc, sx * sy * sz).T).reshape(sx, sy, sz, nc)


def xyzc_to_fortran(a: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``[x, y, z, c]`` -> a C-contiguous ``[c, z, y, x]`` of ``dtype``.

    Tall-to-wide 2-D transposes measured 4x faster than wide-to-tall ones here, hence a
    different path from the inverse: channel first, swap x and y (row copies), then one
    ``(y*x, z) -> (z, y*x)`` transpose per channel, converting the byte order on the way.
    """
    sx, sy, sz, nc = a.shape
    if nc == 1:
        cyxz = np.ascontiguousarray(a[..., 0].transpose(1, 0, 2)).reshape(1, sy * sx, sz)
    else:
        cxyz = np.ascontiguousarray(a.transpose(3, 0, 1, 2))
        cyxz = np.ascontiguousarray(cxyz.transpose(0, 2, 1, 3)).reshape(nc, sy * sx, sz)
    out = np.empty((nc, sz, sy, sx), dtype=dtype)
    out.reshape(nc, sz, sy * sx)[...] = cyxz.transpose(0, 2, 1)
    return out


@register_codec("raw", namespace="precomputed")
class PrecomputedRawCodec(ArrayBytesCodec):
    """``raw``: no options."""

    name = "raw"

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

    def encode(self, array: np.ndarray, spec: ChunkSpec) -> memoryview:  # type: ignore[override]
        if array.shape != spec.shape:
            raise CodecError(f"codec 'raw': array of shape {array.shape}, expected {spec.shape}")
        out = xyzc_to_fortran(array, np.dtype(spec.dtype).newbyteorder("<"))
        return memoryview(out.reshape(-1).view(np.uint8))

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
        return fortran_to_xyzc(self._stored(data, spec), np.dtype(spec.dtype).newbyteorder("="))

    def decode_partial(self, data: bytes, spec: ChunkSpec, selection: tuple) -> np.ndarray | None:
        """Reorder only the selected box (a 100^3 read touching 8 chunks of 64^3 reorders
        100^3 voxels, not 8 * 64^3). Slices and ints only; index arrays decode whole."""
        if len(selection) != 4:
            return None
        box: list[slice] = []
        drop: list[int] = []
        for dim, (sel, n) in enumerate(zip(selection, spec.shape)):
            if isinstance(sel, slice):
                box.append(slice(*sel.indices(n)))
            elif isinstance(sel, (int, np.integer)) and -n <= sel < n:
                i = int(sel) % n
                box.append(slice(i, i + 1))
                drop.append(dim)
            else:
                return None
        stored = self._stored(data, spec)[box[3], box[2], box[1], box[0]]
        out = fortran_to_xyzc(stored, np.dtype(spec.dtype).newbyteorder("="))
        return out[tuple(0 if d in drop else slice(None) for d in range(4))]
