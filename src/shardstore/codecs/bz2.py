"""``bzip2`` compression (N5 ``{"type": "bzip2", "blockSize": 1-9}``): one or more bzip2 streams.

The N5 ``blockSize`` is bzip2's block size in units of 100 kB, i.e. its compression level.
Decoding streams the output with a cap, so a bomb costs at most the cap in memory.
"""

from __future__ import annotations

import bz2 as _bz2
from typing import Any

from ..errors import CodecError, MetadataError
from .base import BytesBytesCodec, ChunkSpec, N5Compression
from .registry import register_codec

__all__ = ["Bz2Codec", "bunzip2"]

_DEFAULT_BLOCK_SIZE = 9


def bunzip2(data: bytes | memoryview, max_size: int) -> bytes:
    """Decompress every bzip2 stream of ``data``; CodecError past ``max_size`` output bytes."""
    parts: list[bytes] = []
    total = 0
    rest: bytes | memoryview = data
    try:
        while True:
            d = _bz2.BZ2Decompressor()
            out = d.decompress(rest, max_size + 1 - total)
            total += len(out)
            if total > max_size:
                raise CodecError(
                    f"codec 'bzip2': data decompresses to more than the {max_size} bytes a "
                    "chunk can hold (corrupt data or a decompression bomb)"
                )
            parts.append(out)
            if not d.eof:
                raise CodecError(
                    f"codec 'bzip2': truncated bzip2 stream ({len(data)} bytes; {total} bytes "
                    "decompressed before it ended)"
                )
            rest = d.unused_data
            if not rest:
                break
    except CodecError:
        raise
    except (OSError, EOFError, ValueError) as e:
        raise CodecError(f"codec 'bzip2': corrupt bzip2 stream: {e}") from e
    return parts[0] if len(parts) == 1 else b"".join(parts)


@register_codec("bzip2", namespace="n5")
class Bz2Codec(N5Compression, BytesBytesCodec):
    """``bzip2``: ``block_size`` 1-9 (x 100 kB; the compression level)."""

    name = "bzip2"
    slow_decode = True

    def __init__(self, block_size: int = _DEFAULT_BLOCK_SIZE) -> None:
        if not isinstance(block_size, int) or isinstance(block_size, bool) or not 1 <= block_size <= 9:
            raise MetadataError(f"codec 'bzip2': 'blockSize' must be an integer 1-9, got {block_size!r}")
        self.block_size = block_size

    @classmethod
    def _from_configuration(cls, configuration: dict[str, Any]) -> Bz2Codec:
        return cls(configuration.get("level", _DEFAULT_BLOCK_SIZE))

    def _canonical_config(self) -> dict[str, Any]:
        return {"name": "bzip2", "configuration": {"level": self.block_size}}

    @classmethod
    def _from_n5(cls, config: dict[str, Any]) -> Bz2Codec:
        return cls(config.get("blockSize", _DEFAULT_BLOCK_SIZE))

    def _n5_members(self) -> dict[str, Any]:
        return {"type": "bzip2", "blockSize": self.block_size}

    def encode(self, data: bytes, spec: ChunkSpec) -> bytes:
        return _bz2.compress(data, self.block_size)

    def decode(self, data: bytes, spec: ChunkSpec, max_size: int) -> bytes:
        return bunzip2(data, max_size)
