"""``xz`` compression (N5 ``{"type": "xz", "preset": 0-9}``): xz container streams (LZMA2).

Decoding streams the output with a cap and bounds the decoder's own memory (``memlimit``), so
neither a bomb nor a header asking for a huge dictionary can allocate much.
"""

from __future__ import annotations

import lzma
from typing import Any

from ..errors import CodecError, MetadataError
from .base import BytesBytesCodec, ChunkSpec, N5Compression
from .registry import register_codec

__all__ = ["XzCodec", "unxz"]

_DEFAULT_PRESET = 6
#: decoder memory cap; preset 9 (64 MiB dictionary) needs ~65 MiB
_MEMLIMIT = 256 * 2**20


def unxz(data: bytes | memoryview, max_size: int) -> bytes:
    """Decompress every xz stream of ``data``; CodecError past ``max_size`` output bytes."""
    parts: list[bytes] = []
    total = 0
    rest: bytes | memoryview = data
    try:
        while True:
            d = lzma.LZMADecompressor(lzma.FORMAT_XZ, memlimit=_MEMLIMIT)
            out = d.decompress(rest, max_size + 1 - total)
            total += len(out)
            if total > max_size:
                raise CodecError(
                    f"codec 'xz': data decompresses to more than the {max_size} bytes a chunk "
                    "can hold (corrupt data or a decompression bomb)"
                )
            parts.append(out)
            if not d.eof:
                raise CodecError(
                    f"codec 'xz': truncated xz stream ({len(data)} bytes; {total} bytes "
                    "decompressed before it ended)"
                )
            rest = d.unused_data
            # xz allows zero padding (a multiple of 4 bytes) between and after streams
            if not rest or not rest.strip(b"\0"):
                break
            rest = rest.lstrip(b"\0")
    except (lzma.LZMAError, EOFError) as e:
        raise CodecError(f"codec 'xz': corrupt xz stream: {e}") from e
    return parts[0] if len(parts) == 1 else b"".join(parts)


@register_codec("xz", namespace="n5")
class XzCodec(N5Compression, BytesBytesCodec):
    """``xz``: ``preset`` 0 (fast) to 9 (smallest), CRC64 check, as n5-java and z5 write."""

    name = "xz"
    slow_decode = True

    def __init__(self, preset: int = _DEFAULT_PRESET) -> None:
        if not isinstance(preset, int) or isinstance(preset, bool) or not 0 <= preset <= 9:
            raise MetadataError(f"codec 'xz': 'preset' must be an integer 0-9, got {preset!r}")
        self.preset = preset

    @classmethod
    def _from_configuration(cls, configuration: dict[str, Any]) -> XzCodec:
        return cls(configuration.get("preset", _DEFAULT_PRESET))

    def _canonical_config(self) -> dict[str, Any]:
        return {"name": "xz", "configuration": {"preset": self.preset}}

    @classmethod
    def _from_n5(cls, config: dict[str, Any]) -> XzCodec:
        return cls(config.get("preset", _DEFAULT_PRESET))

    def _n5_members(self) -> dict[str, Any]:
        return {"type": "xz", "preset": self.preset}

    def encode(self, data: bytes, spec: ChunkSpec) -> bytes:
        return lzma.compress(data, lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=self.preset)

    def decode(self, data: bytes, spec: ChunkSpec, max_size: int) -> bytes:
        return unxz(data, max_size)
