"""The N5 block format: a big-endian header, then the compressed element bytes (array->bytes).

Header (all fields big-endian): ``mode`` uint16 (0 default, 1 varlength, 2 object); for modes 0
and 1 ``ndim`` uint16 and ``size[d]`` uint32 each, x (fastest axis) first; for mode 1 then
``numElements`` uint32. The payload, compressed by the dataset's ``compression``, holds the
elements big-endian with x fastest, i.e. a C-order array of shape ``size[::-1]``.

This codec works in NumPy C order: ``spec.shape`` is the reversed N5 block size. Decoding
accepts blocks smaller than the block size (edge blocks as n5-java and z5py write them) and
full-size edge blocks (as tensorstore writes them): what the header declares is checked against
the block size, then cropped or zero-padded to ``spec.shape``. The compressor is held inside
(not chained after this codec) because N5 compresses the payload only, never the header.

N5 ``compression`` objects map to codec classes registered in the codec registry under
namespace ``"n5"`` (``raw`` here; gzip, bzip2, xz, lz4, blosc, zstd in their own modules),
each with ``from_n5(config)`` / ``to_n5()``.
"""

from __future__ import annotations

import copy
import math
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._assign import assign
from ..config import IOConfig
from ..errors import CodecError, MetadataError, UnsupportedFeatureError
from .base import ArrayBytesCodec, BytesBytesCodec, ChunkSpec, N5Compression, decode_to_buffer, scratch_buffer
from .memory_order import copy_to_c_order, first_axis_fastest
from .registry import get_codec_class, loaded_codec_class, register_codec

__all__ = [
    "MODE_DEFAULT",
    "MODE_OBJECT",
    "MODE_VARLENGTH",
    "BlockHeader",
    "N5BlockCodec",
    "RawCompression",
    "compression_from_n5",
    "read_block_header",
]

MODE_DEFAULT, MODE_VARLENGTH, MODE_OBJECT = 0, 1, 2
_U16 = struct.Struct(">H")
_U16U16 = struct.Struct(">HH")
_U32 = struct.Struct(">I")


@dataclass(frozen=True)
class BlockHeader:
    """A parsed N5 block header; ``size`` is in N5 order (x first), empty for mode 2."""

    mode: int
    size: tuple[int, ...]
    num_elements: int
    offset: int  # where the payload starts

    @property
    def c_shape(self) -> tuple[int, ...]:
        """The block's shape in NumPy C order."""
        return self.size[::-1]


def read_block_header(data: bytes | memoryview) -> BlockHeader:
    """Parse the header at the start of ``data``; CodecError when short or of unknown mode."""
    view = memoryview(data).cast("B")
    n = len(view)
    if n < 2:
        raise CodecError(f"N5 block: {n} bytes is too short for a block header")
    (mode,) = _U16.unpack_from(view)
    if mode == MODE_OBJECT:
        if n < 6:
            raise CodecError(f"N5 block: {n} bytes is too short for a mode 2 block header")
        return BlockHeader(mode, (), _U32.unpack_from(view, 2)[0], 6)
    if mode not in (MODE_DEFAULT, MODE_VARLENGTH):
        raise CodecError(f"N5 block: unknown block mode {mode} (expected 0 default, 1 varlength or 2 object)")
    if n < 4:
        raise CodecError(f"N5 block: {n} bytes is too short for a block header")
    ndim = _U16.unpack_from(view, 2)[0]
    end = 4 + 4 * ndim + (4 if mode == MODE_VARLENGTH else 0)
    if n < end:
        raise CodecError(f"N5 block: truncated header ({n} bytes; a {ndim}-d mode {mode} header needs {end})")
    size = struct.unpack_from(f">{ndim}I", view, 4)
    num = _U32.unpack_from(view, end - 4)[0] if mode == MODE_VARLENGTH else math.prod(size)
    return BlockHeader(mode, tuple(size), num, end)


def _header_bytes(mode: int, c_shape: tuple[int, ...], num_elements: int | None = None) -> bytes:
    size = c_shape[::-1]
    head = _U16U16.pack(mode, len(size)) + struct.pack(f">{len(size)}I", *size)
    return head + _U32.pack(num_elements) if mode == MODE_VARLENGTH else head


@register_codec("raw", namespace="n5")
class RawCompression(N5Compression, BytesBytesCodec):
    """N5 ``{"type": "raw"}``: the payload is stored uncompressed."""

    name = "raw"

    @classmethod
    def _from_configuration(cls, configuration: dict[str, Any]) -> RawCompression:
        return cls()

    def _canonical_config(self) -> dict[str, Any]:
        return {"name": "raw"}

    @classmethod
    def _from_n5(cls, config: dict[str, Any]) -> RawCompression:
        return cls()

    def _n5_members(self) -> dict[str, Any]:
        return {"type": "raw"}

    def encode(self, data: bytes, spec: ChunkSpec) -> bytes:
        return data

    def decode(self, data: bytes, spec: ChunkSpec, max_size: int) -> bytes:
        if memoryview(data).nbytes > max_size:
            raise CodecError(f"N5 raw block payload of {memoryview(data).nbytes} bytes; at most {max_size} expected")
        return data


def compression_from_n5(config: Any, where: str = "attributes.json") -> BytesBytesCodec:
    """The codec for an N5 ``compression`` object (or a legacy ``compressionType`` string)."""
    if isinstance(config, str):  # pre-1.0 "compressionType": default parameters
        config = {"type": config}
    if not isinstance(config, dict) or not isinstance(config.get("type"), str):
        raise MetadataError(f"{where}: 'compression' must be an object with a 'type' string, got {config!r}")
    try:
        cls = get_codec_class(config["type"], "n5")
    except UnsupportedFeatureError:
        raise UnsupportedFeatureError(
            f"{where}: unsupported N5 compression type {config['type']!r} "
            "(shardstore knows: raw, gzip, bzip2, xz, lz4, blosc, zstd)"
        ) from None
    if not issubclass(cls, N5Compression):  # every codec of the "n5" namespace is one
        raise UnsupportedFeatureError(f"{where}: {config['type']!r} is not an N5 compression")
    try:
        return cls.from_n5(config)
    except (MetadataError, UnsupportedFeatureError) as e:
        raise type(e)(f"{where}: {e}") from e
    except (TypeError, ValueError) as e:
        raise MetadataError(f"{where}: invalid compression {config!r}: {e}") from e


def _n5_compression(codec: BytesBytesCodec) -> N5Compression:
    if not isinstance(codec, N5Compression):
        raise TypeError(f"{codec!r} is not an N5 compression")
    return codec


def compression_to_n5(codec: BytesBytesCodec) -> dict[str, Any]:
    """The N5 ``compression`` object of a codec built by ``compression_from_n5`` (as parsed)."""
    return _n5_compression(codec).to_n5()


def compression_defaults_n5(codec: BytesBytesCodec) -> dict[str, Any]:
    """The N5 ``compression`` object of ``codec`` with every member, defaults filled in (not
    the object it was parsed from)."""
    return _n5_compression(codec).n5_members()


class N5BlockCodec(ArrayBytesCodec):
    """Array <-> N5 block (header + compressed big-endian payload); see the module docstring.

    ``bind`` records the full block shape (C order) so that decoding can refuse blocks
    larger than it.
    """

    name = "n5_block"
    accepts_strided = True  # ``_block`` lays values out big-endian in C order in one copy

    def __init__(self, compression: BytesBytesCodec, block_shape: tuple[int, ...] | None = None) -> None:
        self.compression = compression
        self.block_shape = block_shape
        self._raw = isinstance(compression, RawCompression)
        self.slow_decode = compression.slow_decode  # the compression decides

    @classmethod
    def _from_configuration(cls, configuration: dict[str, Any]) -> N5BlockCodec:
        return cls(compression_from_n5(configuration.get("compression", {"type": "raw"})))

    def _canonical_config(self) -> dict[str, Any]:
        return {"name": self.name, "configuration": {"compression": compression_to_n5(self.compression)}}

    def bind(self, spec: ChunkSpec) -> N5BlockCodec:
        bound = copy.copy(self)
        bound.block_shape = tuple(spec.shape)
        bound.compression = self.compression.bind(spec)
        # the header of a full block, to skip parsing in the common case
        full = _header_bytes(MODE_DEFAULT, bound.block_shape)
        bound._full_header = BlockHeader(MODE_DEFAULT, bound.block_shape[::-1], math.prod(spec.shape), len(full)), full
        bound._dtype = np.dtype(spec.dtype)
        return bound

    def _full_block_layout(self, applies: bool) -> tuple[bytes, np.dtype] | None:
        """``(full block header, big-endian dtype)`` of a bound codec when ``applies``."""
        if not applies or self._full_header is None or self._dtype is None:
            return None
        return self._full_header[1], self._dtype.newbyteorder(">")

    def raw_layout(self) -> tuple[bytes, np.dtype] | None:
        return self._full_block_layout(self._raw)

    def inflate_layout(self) -> tuple[bytes, np.dtype] | None:
        # gzip blocks hold a gzip or a zlib stream (``useZlib``; readers take either)
        gzip = loaded_codec_class("gzip", "n5")
        return self._full_block_layout(gzip is not None and isinstance(self.compression, gzip))

    def validate(self, spec: ChunkSpec) -> None:
        dtype = np.dtype(spec.dtype)
        if dtype.kind not in "iuf" or dtype.fields is not None:
            raise MetadataError(f"N5 blocks hold integers or floats, not {dtype}")

    # -- encoding ----------------------------------------------------------------------------
    def _block(self, header: bytes, values: np.ndarray, spec: ChunkSpec) -> bytes | bytearray:
        """``header`` + the compressed big-endian C-order elements of ``values``."""
        stored = np.dtype(spec.dtype).newbyteorder(">")
        fortran = first_axis_fastest(values)  # a box of a Fortran-ordered input (see memory_order)
        if self._raw:  # one copy: swap bytes and lay out straight into the block buffer
            out = bytearray(len(header) + values.size * stored.itemsize)
            out[: len(header)] = header
            laid = np.frombuffer(out, dtype=stored, offset=len(header)).reshape(values.shape)
            if fortran:
                copy_to_c_order(values, laid)
            else:
                assign(laid, ..., values)
            return out
        if fortran or values.dtype != stored or not values.flags.c_contiguous:
            # one pass (swap + layout) into this thread's encode buffer: a fresh chunk-sized
            # copy per block, freed right after compressing, is mapped and unmapped again by
            # glibc's default allocator for every block (page faults on every write)
            flat = scratch_buffer(values.size * stored.itemsize, slot="encode_buf").view(stored)
            if fortran:
                copy_to_c_order(values, flat.reshape(values.shape))
            else:
                assign(flat.reshape(values.shape), ..., values)
        else:
            flat = values.reshape(-1)
        payload = self.compression.encode(flat.view(np.uint8).data.toreadonly(), spec)
        return b"".join((header, payload))

    def encode(self, array: np.ndarray, spec: ChunkSpec) -> bytes:
        """A mode 0 block of ``spec.shape`` (edge blocks get their clipped shape in the header)."""
        if array.shape != spec.shape:
            raise CodecError(f"N5 block: array of shape {array.shape}, expected {spec.shape}")
        return self._block(_header_bytes(MODE_DEFAULT, spec.shape), array, spec)

    def encode_varlength(self, values: np.ndarray, spec: ChunkSpec) -> bytes:
        """A mode 1 (varlength) block: header size ``spec.shape``, any number of elements."""
        values = np.asarray(values).reshape(-1)
        if values.size > 0xFFFFFFFF:
            raise CodecError(f"N5 block: {values.size} elements do not fit a varlength block")
        return bytes(self._block(_header_bytes(MODE_VARLENGTH, spec.shape, values.size), values, spec))

    # -- decoding ----------------------------------------------------------------------------
    def _decompress(self, data: bytes | memoryview, header: BlockHeader, nbytes: int, spec: ChunkSpec) -> bytes | memoryview:
        payload = memoryview(data)[header.offset :]
        out = payload if self._raw else self.compression.decode(payload, spec, nbytes)
        got = memoryview(out).nbytes
        if got != nbytes:
            raise CodecError(
                f"N5 block: payload holds {got} bytes, the header declares {nbytes} "
                f"({header.num_elements} elements of {np.dtype(spec.dtype)})"
            )
        return out

    def _check_header(self, header: BlockHeader, spec: ChunkSpec) -> None:
        ndim = len(spec.shape)
        if header.mode == MODE_OBJECT:
            raise CodecError("N5 block: mode 2 (object) blocks cannot be read as a numeric dataset")
        if len(header.size) != ndim:
            raise CodecError(f"N5 block: header has {len(header.size)} dimensions, the dataset has {ndim}")
        limit = self.block_shape or spec.shape
        if any(s > b for s, b in zip(header.c_shape, limit)):
            raise CodecError(
                f"N5 block: header size {list(header.size)} exceeds the block size {list(limit[::-1])}"
            )

    _full_header: tuple[BlockHeader, bytes] | None = None
    _dtype: np.dtype | None = None

    def decode(self, data: bytes, spec: ChunkSpec) -> np.ndarray:
        full = self._full_header
        if full is not None and data[: full[0].offset] == full[1]:
            header = full[0]  # a full-size mode 0 block (checked against the bound shape)
        else:
            header = read_block_header(data)
            self._check_header(header, spec)
        shape = header.c_shape
        if header.num_elements != math.prod(shape):
            raise CodecError(
                f"N5 block: varlength block of {header.num_elements} elements with size "
                f"{list(header.size)}; read it with read_varlength_block()"
            )
        dtype = np.dtype(spec.dtype)
        raw = self._decompress(data, header, math.prod(shape) * dtype.itemsize, spec)
        flat = np.frombuffer(raw, dtype=dtype.newbyteorder(">"))
        block = (flat if dtype.itemsize == 1 else flat.astype(dtype)).reshape(shape)
        if shape == tuple(spec.shape):
            return block
        # a full-size edge block (tensorstore) is cropped; a smaller one is zero-padded
        out = np.zeros(spec.shape, dtype=dtype)
        common = tuple(slice(0, min(a, b)) for a, b in zip(shape, spec.shape))
        out[common] = block[common]
        return out

    def decode_transient(self, data: bytes, spec: ChunkSpec, scratch_max: int = IOConfig.scratch_max_bytes) -> np.ndarray:
        """A full-size block decompressed into this thread's scratch buffer, as the stored
        big-endian dtype (the caller's copy swaps the bytes); anything else via ``decode``."""
        full = self._full_header
        if (
            self._raw
            or full is None
            or self._dtype is None
            or spec.shape != self.block_shape
            or data[: full[0].offset] != full[1]
        ):
            return self.decode(data, spec)
        stored = self._dtype.newbyteorder(">")
        nbytes = full[0].num_elements * stored.itemsize
        buf = decode_to_buffer(self.compression, memoryview(data)[full[0].offset :], spec, nbytes,
                               lambda n: scratch_buffer(n, scratch_max))
        if buf is None:
            return self.decode(data, spec)  # several gzip members, corrupt data: worded there
        return buf.view(stored).reshape(spec.shape)

    def decode_varlength(
        self, data: bytes, spec: ChunkSpec, max_nbytes: int = IOConfig.max_varlength_nbytes
    ) -> np.ndarray:
        """The elements of a mode 0 or 1 block as a 1-D array (x fastest), at most
        ``max_nbytes`` bytes (refused before anything is decompressed)."""
        header = read_block_header(data)
        self._check_header(header, spec)
        dtype = np.dtype(spec.dtype)
        nbytes = header.num_elements * dtype.itemsize
        if nbytes > max_nbytes:
            raise CodecError(
                f"N5 block: declares {header.num_elements} elements ({nbytes} bytes), more than "
                f"max_nbytes={max_nbytes}"
            )
        raw = self._decompress(data, header, nbytes, spec)
        return np.frombuffer(raw, dtype=dtype.newbyteorder(">")).astype(dtype)
