"""``lz4`` compression for N5 (``{"type": "lz4", "blockSize": n}``), in both dialects found on disk.

* **lz4-java block stream** (what n5-java writes, via ``LZ4BlockOutputStream``): the input is
  cut into pieces of ``blockSize`` bytes; each becomes a frame of magic ``"LZ4Block"``, a token
  byte (method 0x10 stored / 0x20 LZ4, OR-ed with ``ceil(log2(blockSize)) - 10``), then int32
  little-endian compressed length, decompressed length and checksum (xxHash32 of the
  uncompressed piece, seed 0x9747B28C, masked to 28 bits), then the data. An empty frame ends
  the stream.
* **bare LZ4 block** (what z5py writes): no framing at all; the decoded size is what the N5
  block header declares. z5py stores its compression *level* under ``blockSize``.

Reading tells the two apart by the magic. Writing uses the lz4-java stream, except for a
``blockSize`` below 64: lz4-java refuses such sizes, so that configuration can only come from
z5py, and blocks are written as z5py reads them (a bare high-compression block at that level).
"""

from __future__ import annotations

import struct
from typing import Any

import lz4.block as _lz4
import xxhash

from ..errors import ChecksumError, CodecError, MetadataError
from .base import BytesBytesCodec, ChunkSpec, N5Compression
from .registry import register_codec

__all__ = ["MAGIC", "Lz4Codec", "lz4_block_stream_decode", "lz4_block_stream_encode"]

MAGIC = b"LZ4Block"
_FRAME = struct.Struct("<BIII")  # token, compressed length, decompressed length, checksum
_HEADER_SIZE = len(MAGIC) + _FRAME.size  # 21
_METHOD_RAW, _METHOD_LZ4 = 0x10, 0x20
_LEVEL_BASE = 10
_SEED = 0x9747B28C
_MIN_BLOCK_SIZE = 64  # lz4-java's minimum
_DEFAULT_BLOCK_SIZE = 65536
_MAX_BLOCK_SIZE = 1 << 25  # lz4-java's maximum (32 MiB)


def _checksum(data: bytes | memoryview) -> int:
    return xxhash.xxh32_intdigest(data, seed=_SEED) & 0x0FFFFFFF


def _level(block_size: int) -> int:
    return max(0, (block_size - 1).bit_length() - _LEVEL_BASE)


def lz4_block_stream_encode(data: bytes | memoryview, block_size: int = _DEFAULT_BLOCK_SIZE) -> bytes:
    """``data`` as an lz4-java ``LZ4BlockOutputStream`` would write it (incl. the end frame)."""
    view = memoryview(data).cast("B")
    level = _level(block_size)
    out: list[bytes | memoryview] = []
    for start in range(0, len(view), block_size):
        piece = view[start : start + block_size]
        packed = _lz4.compress(piece, store_size=False)
        if len(packed) >= len(piece):  # incompressible: stored, as lz4-java does
            method, payload = _METHOD_RAW, piece
        else:
            method, payload = _METHOD_LZ4, packed
        out += [MAGIC, _FRAME.pack(method | level, len(payload), len(piece), _checksum(piece)), payload]
    out += [MAGIC, _FRAME.pack(_METHOD_RAW | level, 0, 0, 0)]
    return b"".join(out)


def lz4_block_stream_decode(data: bytes | memoryview, max_size: int) -> bytes:
    """Decode an lz4-java block stream; CodecError (ChecksumError) on corrupt or oversize data."""
    view = memoryview(data).cast("B")
    parts: list[bytes | memoryview] = []
    total = pos = 0
    while True:
        if len(view) - pos < _HEADER_SIZE:
            raise CodecError(
                f"codec 'lz4': truncated lz4 block stream (frame header at byte {pos} of {len(view)})"
            )
        if view[pos : pos + len(MAGIC)] != MAGIC:
            raise CodecError(f"codec 'lz4': corrupt lz4 block stream (no 'LZ4Block' magic at byte {pos})")
        token, clen, dlen, check = _FRAME.unpack_from(view, pos + len(MAGIC))
        pos += _HEADER_SIZE
        method, level = token & 0xF0, token & 0x0F
        if method not in (_METHOD_RAW, _METHOD_LZ4) or dlen > 1 << (level + _LEVEL_BASE):
            raise CodecError(
                f"codec 'lz4': corrupt lz4 block frame (token 0x{token:02x}, {dlen} bytes declared)"
            )
        if dlen == 0:  # the end frame
            if clen != 0:
                raise CodecError("codec 'lz4': corrupt lz4 block stream (end frame with data)")
            break
        if total + dlen > max_size:
            raise CodecError(
                f"codec 'lz4': data decompresses to more than the {max_size} bytes a chunk can "
                "hold (corrupt data or a decompression bomb)"
            )
        if clen > len(view) - pos or (method == _METHOD_RAW and clen != dlen):
            raise CodecError(
                f"codec 'lz4': truncated or corrupt lz4 block frame ({clen} bytes declared at "
                f"byte {pos}, {len(view) - pos} left)"
            )
        payload = view[pos : pos + clen]
        pos += clen
        if method == _METHOD_RAW:
            piece: bytes | memoryview = payload
        else:
            try:
                piece = _lz4.decompress(payload, uncompressed_size=dlen)
            except _lz4.LZ4BlockError as e:
                raise CodecError(f"codec 'lz4': corrupt lz4 block: {e}") from e
            if len(piece) != dlen:
                raise CodecError(f"codec 'lz4': lz4 block decoded to {len(piece)} bytes, {dlen} declared")
        if _checksum(piece) != check:
            raise ChecksumError(f"codec 'lz4': checksum mismatch in the lz4 block frame ending at byte {pos}")
        parts.append(piece)
        total += dlen
    if pos != len(view):
        raise CodecError(f"codec 'lz4': {len(view) - pos} stray bytes after the lz4 block stream")
    return b"".join(parts)


def lz4_bare_decode(data: bytes | memoryview, size: int) -> bytes:
    """Decode one bare LZ4 block of exactly ``size`` bytes (z5py's dialect)."""
    try:
        out = _lz4.decompress(data, uncompressed_size=size)
    except _lz4.LZ4BlockError as e:
        raise CodecError(f"codec 'lz4': corrupt or truncated bare lz4 block: {e}") from e
    if len(out) != size:
        raise CodecError(f"codec 'lz4': bare lz4 block decoded to {len(out)} bytes, expected {size}")
    return out


@register_codec("lz4", namespace="n5")
class Lz4Codec(N5Compression, BytesBytesCodec):
    """``lz4``: ``block_size`` of the lz4-java stream (below 64: a z5py level, bare blocks)."""

    name = "lz4"

    def __init__(self, block_size: int = _DEFAULT_BLOCK_SIZE) -> None:
        if (
            not isinstance(block_size, int)
            or isinstance(block_size, bool)
            or not 0 <= block_size <= _MAX_BLOCK_SIZE
        ):
            raise MetadataError(
                f"codec 'lz4': 'blockSize' must be an integer 0-{_MAX_BLOCK_SIZE}, got {block_size!r}"
            )
        self.block_size = block_size

    @property
    def bare(self) -> bool:
        """Whether blocks are written in z5py's bare-block dialect."""
        return self.block_size < _MIN_BLOCK_SIZE

    @classmethod
    def _from_configuration(cls, configuration: dict[str, Any]) -> Lz4Codec:
        return cls(configuration.get("blockSize", _DEFAULT_BLOCK_SIZE))

    def _canonical_config(self) -> dict[str, Any]:
        return {"name": "lz4", "configuration": {"blockSize": self.block_size}}

    @classmethod
    def _from_n5(cls, config: dict[str, Any]) -> Lz4Codec:
        return cls(config.get("blockSize", _DEFAULT_BLOCK_SIZE))

    def _n5_members(self) -> dict[str, Any]:
        return {"type": "lz4", "blockSize": self.block_size}

    def encode(self, data: bytes, spec: ChunkSpec) -> bytes:
        if self.bare:
            level = min(max(self.block_size, 1), 12)  # z5py's level, as an LZ4-HC level
            return _lz4.compress(data, mode="high_compression", compression=level, store_size=False)
        return lz4_block_stream_encode(data, self.block_size)

    def decode(self, data: bytes, spec: ChunkSpec, max_size: int) -> bytes:
        """Either dialect. A bare block must decode to exactly ``max_size`` bytes (the caller
        passes the size the N5 block header declares)."""
        if memoryview(data)[: len(MAGIC)] == MAGIC:
            return lz4_block_stream_decode(data, max_size)
        return lz4_bare_decode(data, max_size)
