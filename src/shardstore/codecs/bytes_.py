"""Zarr v3 ``bytes`` codec: an array as its C-order element bytes in a given byte order.

No needless copies: encoding a native-order, C-contiguous array returns a read-only
``memoryview`` over the array's memory; decoding native-order data returns a view of the input
buffer (read-only when the input is ``bytes``). Only a byte swap, a layout change or bool
normalisation costs a copy, and then exactly one; a box of a Fortran-ordered input is laid
out by ``memory_order.copy_to_c_order`` (a cache-friendly transpose in three passes).
"""

from __future__ import annotations

import math
import sys
from typing import Any, Literal

import numpy as np

from .._assign import assign
from ..errors import CodecError, MetadataError
from .base import ArrayBytesCodec, ChunkSpec, scratch_buffer
from .memory_order import copy_to_c_order, first_axis_fastest
from .registry import register_codec

#: this module's per-thread scratch (``scratch_buffer``) for ``encode_transient``: not "buf",
#: where the chunk being encoded may itself be a transient decode (a partial write's merge)
_SCRATCH_SLOT = "bytes_layout"

__all__ = ["BytesCodec"]

Endian = Literal["little", "big"]
_ENDIAN_CHAR: dict[str, Literal["<", ">"]] = {"little": "<", "big": ">"}
_NATIVE: Endian = "little" if sys.byteorder == "little" else "big"
# numeric kinds with a byte order; 'V' (raw r<bits>) and 1-byte types have none
_SUPPORTED_KINDS = frozenset("biufcV")


@register_codec("bytes")
class BytesCodec(ArrayBytesCodec):
    """``bytes``: ``endian`` is ``"little"`` or ``"big"``; it may be omitted (``None``) only
    for dtypes whose elements are one byte (bool, int8, uint8) or raw."""

    light = True
    accepts_strided = True

    name = "bytes"

    def __init__(self, endian: Endian | None = "little") -> None:
        if endian is not None and endian not in _ENDIAN_CHAR:
            raise MetadataError(
                f"codec 'bytes': 'endian' must be \"little\" or \"big\", got {endian!r}"
            )
        self.endian: Endian | None = endian

    @classmethod
    def _from_configuration(cls, configuration: dict[str, Any]) -> BytesCodec:
        extra = set(configuration) - {"endian"}
        if extra:
            raise MetadataError(f"codec 'bytes': unknown configuration member(s) {sorted(extra)}")
        if "endian" in configuration and configuration["endian"] is None:
            raise MetadataError("codec 'bytes': 'endian' must be \"little\" or \"big\", got null")
        return cls(configuration.get("endian"))

    def _canonical_config(self) -> dict[str, Any]:
        # tensorstore and zarr-python both write the bare {"name": "bytes"} when endian is unset
        if self.endian is None:
            return {"name": "bytes"}
        return {"name": "bytes", "configuration": {"endian": self.endian}}

    # -- checks -----------------------------------------------------------------------------
    def validate(self, spec: ChunkSpec) -> None:
        dtype = np.dtype(spec.dtype)
        if dtype.kind not in _SUPPORTED_KINDS or dtype.fields is not None:
            raise MetadataError(f"codec 'bytes': cannot encode data type {dtype}")
        if self.endian is None and dtype.itemsize > 1 and dtype.kind != "V":
            raise MetadataError(
                f"codec 'bytes': 'endian' is required for data type {dtype} "
                f"({dtype.itemsize}-byte elements)"
            )

    def encoded_size(self, spec: ChunkSpec) -> int:
        return spec.nbytes

    def plain_layout(self, spec: ChunkSpec) -> tuple[np.dtype, Literal["C", "F"]] | None:
        """The stored dtype in C order; None for bool, whose stored bytes decode to 0/1."""
        dtype = np.dtype(spec.dtype)
        if dtype.kind == "b" or dtype.fields is not None:
            return None
        return self._stored_dtype(dtype), "C"

    def _stored_dtype(self, dtype: np.dtype) -> np.dtype:
        """The dtype whose memory layout is the encoding (bool is stored as 0/1 bytes)."""
        if dtype.kind == "b":
            return np.dtype(np.uint8)
        if dtype.itemsize == 1 or dtype.kind == "V" or self.endian is None:
            return dtype
        return dtype.newbyteorder(_ENDIAN_CHAR[self.endian])

    # -- transforms -------------------------------------------------------------------------
    def encode(self, array: np.ndarray, spec: ChunkSpec) -> memoryview:
        """C-order bytes in the configured byte order (zero-copy when already laid out so)."""
        return self._laid_out(array, spec, transient=False)

    def encode_transient(self, array: np.ndarray, spec: ChunkSpec) -> memoryview:
        """``encode``, a strided chunk laid out in this thread's scratch buffer: a fresh
        chunk-sized buffer per chunk costs a page fault per 4 KiB page, about as much as the
        copy itself, when the next codec (blosc, zstd...) only reads it once."""
        return self._laid_out(array, spec, transient=True)

    def _laid_out(self, array: np.ndarray, spec: ChunkSpec, transient: bool) -> memoryview:
        if array.shape != spec.shape:
            raise CodecError(f"codec 'bytes': array of shape {array.shape}, expected {spec.shape}")
        if array.dtype.newbyteorder("=") != np.dtype(spec.dtype).newbyteorder("="):
            raise CodecError(f"codec 'bytes': array of dtype {array.dtype}, expected {spec.dtype}")
        stored = self._stored_dtype(np.dtype(spec.dtype))
        if array.dtype.kind == "b":
            array = array.view(np.uint8) if array.flags.c_contiguous else array.astype(np.uint8)
        if first_axis_fastest(array):  # a box of a Fortran-ordered input (see memory_order)
            laid = self._layout_buffer(array.shape, stored, transient)
            copy_to_c_order(array, laid)
            array = laid
        elif not array.flags.c_contiguous and array.dtype == stored:
            laid = self._layout_buffer(array.shape, stored, transient)
            assign(laid, ..., array)  # row-wise: about twice as fast as NumPy's own copy
            array = laid
        else:  # one pass at most: reorders to C order and swaps bytes together
            array = np.asarray(array, dtype=stored, order="C")
        return array.reshape(-1).view(np.uint8).data.toreadonly()

    @staticmethod
    def _layout_buffer(shape: tuple[int, ...], dtype: np.dtype, transient: bool) -> np.ndarray:
        if not transient:
            return np.empty(shape, dtype=dtype)
        n = math.prod(shape)
        return scratch_buffer(n * dtype.itemsize, slot=_SCRATCH_SLOT).view(dtype).reshape(shape)

    def decode(self, data: bytes, spec: ChunkSpec) -> np.ndarray:
        """An array of ``spec.shape`` / native ``spec.dtype``, at most one copy.

        The result may be a read-only view of ``data``: readers only copy out of it, and
        writers that merge into a chunk copy it first (saves a copy on every read).
        """
        dtype = np.dtype(spec.dtype)
        expected = spec.nbytes
        got = memoryview(data).nbytes
        if got != expected:
            raise CodecError(
                f"codec 'bytes': expected {expected} bytes for a chunk of shape {spec.shape} "
                f"and dtype {dtype}, got {got}"
            )
        stored = self._stored_dtype(dtype)
        flat = np.frombuffer(data, dtype=stored)
        if dtype.kind == "b":
            out = flat != 0  # the copy; also normalises stray non-0/1 bytes
        elif stored != dtype:
            out = flat.astype(dtype)  # copy and byte-swap in one pass
        else:
            out = flat  # zero-copy view
        return out.reshape(spec.shape)
