"""Zarr v3 ``gzip`` codec: one RFC 1952 gzip stream (readers accept several members).

ISA-L (python-isal) writes and reads the same gzip stream format as zlib, several times
faster to compress and faster to decompress (SIMD deflate). ISA-L has only levels 0-3, so
Zarr levels map 1-3 -> 1, 4-6 -> 2, 7-9 -> 3 (compression ratios measured within a few per cent
of zlib's at the same Zarr level); Zarr level 0 means "stored" and stays with zlib, whose level 0
does exactly that (ISA-L's level 0 still compresses). Without isal everything uses zlib.

Decoding into a buffer of known size (``decode_to``: chunk reads) uses libdeflate through
imagecodecs instead, which decodes faster still and writes straight into the caller's
buffer; ``decode`` (unknown sizes, several gzip members, error messages) stays with ISA-L.

Also N5 ``{"type": "gzip", "level", "useZlib"}`` (namespace "n5"): ``useZlib`` writes a zlib
(RFC 1950) stream instead; N5 readers accept either header, since writers disagree on it.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import CodecError, MetadataError
from .base import BytesBytesCodec, ChunkSpec, N5Compression, NativeDecoder
from .registry import register_codec

if TYPE_CHECKING:  # typed by isal's stubs; the code below still handles its absence
    from isal import isal_zlib as _isal
else:
    try:  # optional accelerator; same stream format
        from isal import isal_zlib as _isal
    except ImportError:  # pragma: no cover - exercised only without python-isal
        _isal = None

__all__ = ["GzipCodec"]

_GZIP_WBITS = 31  # 16 + MAX_WBITS: gzip header and trailer
_ZLIB_WBITS = 15  # MAX_WBITS: zlib header and trailer
_DEFAULT_LEVEL = 6
_ERRORS: tuple[type[BaseException], ...] = (zlib.error,)
if _isal:
    # isal_zlib.pyi declares ``error: Exception`` (an instance); it is the exception class
    _ERRORS += (_isal.error,)  # type: ignore[operator]


_libdeflate: tuple[Any, Any] | None = None  # (gzip_decode, zlib-format decode), on first use


def _libdeflate_decoders() -> tuple[Any, Any]:
    global _libdeflate
    if _libdeflate is None:
        try:
            from imagecodecs import deflate_decode, gzip_decode
        except ImportError:  # pragma: no cover - imagecodecs is a dependency
            _libdeflate = (None, None)
        else:
            _libdeflate = (gzip_decode, deflate_decode)
    return _libdeflate


def _isal_level(level: int) -> int:
    return (level + 2) // 3  # 1-3 -> 1, 4-6 -> 2, 7-9 -> 3


def _decompressobj(wbits: int = _GZIP_WBITS) -> Any:
    return (_isal or zlib).decompressobj(wbits=wbits)


def gunzip(data: bytes, max_size: int, wbits: int = _GZIP_WBITS) -> bytes:
    """Decompress every gzip member of ``data``; CodecError past ``max_size`` output bytes.

    The output limit is passed to the decompressor, so a bomb costs at most ``max_size + 1``
    bytes of memory before it is refused.
    """
    parts: list[bytes] = []
    total = 0
    rest: bytes | memoryview = memoryview(data)
    try:
        while True:
            d = _decompressobj(wbits)
            out = d.decompress(rest, max_size + 1 - total)
            total += len(out)
            if total > max_size:
                raise CodecError(
                    f"codec 'gzip': data decompresses to more than the {max_size} bytes "
                    "a chunk can hold (corrupt data or a decompression bomb)"
                )
            parts.append(out)
            if not d.eof:
                raise CodecError(
                    f"codec 'gzip': truncated gzip stream ({len(data)} bytes; "
                    f"{total} bytes decompressed before it ended)"
                )
            tail: bytes = d.unused_data
            # like gzip(1), tolerate zero padding after the last member
            if not tail or not tail.strip(b"\0"):
                break
            rest = tail
    except _ERRORS as e:
        raise CodecError(f"codec 'gzip': corrupt gzip stream: {e}") from e
    return parts[0] if len(parts) == 1 else b"".join(parts)


@register_codec("gzip", namespace="n5")
@register_codec("gzip")
class GzipCodec(N5Compression, BytesBytesCodec):
    """``gzip``: ``level`` 0 (stored) to 9 (smallest); ``use_zlib`` (N5 only): zlib framing."""

    name = "gzip"
    decodes_to = True
    slow_decode = True

    def __init__(self, level: int = _DEFAULT_LEVEL, use_zlib: bool = False) -> None:
        if not isinstance(level, int) or isinstance(level, bool) or not 0 <= level <= 9:
            raise MetadataError(f"codec 'gzip': 'level' must be an integer 0-9, got {level!r}")
        if not isinstance(use_zlib, bool):
            raise MetadataError(f"codec 'gzip': 'useZlib' must be a boolean, got {use_zlib!r}")
        self.level = level
        self.use_zlib = use_zlib

    @classmethod
    def _from_n5(cls, config: dict[str, Any]) -> GzipCodec:
        """From N5 ``{"type": "gzip", "level": -1..9, "useZlib": bool}`` (-1 = zlib's 6)."""
        level = config.get("level", -1)
        if isinstance(level, int) and not isinstance(level, bool) and level == -1:
            level = _DEFAULT_LEVEL
        return cls(level, config.get("useZlib", False))

    def _n5_members(self) -> dict[str, Any]:
        """The N5 compression object (as parsed, else complete with ``useZlib``)."""
        return {"type": "gzip", "level": self.level, "useZlib": self.use_zlib}

    @classmethod
    def _from_configuration(cls, configuration: dict[str, Any]) -> GzipCodec:
        extra = set(configuration) - {"level"}
        if extra:
            raise MetadataError(f"codec 'gzip': unknown configuration member(s) {sorted(extra)}")
        return cls(configuration.get("level", _DEFAULT_LEVEL))

    def _canonical_config(self) -> dict[str, Any]:
        return {"name": "gzip", "configuration": {"level": self.level}}

    def encode(self, data: bytes, spec: ChunkSpec) -> bytes:
        wbits = _ZLIB_WBITS if self.use_zlib else _GZIP_WBITS
        if self.level == 0 or _isal is None:
            return zlib.compress(data, self.level, wbits)
        return _isal.compress(data, _isal_level(self.level), wbits)

    max_ratio = 1032  # deflate never decodes one byte to more than ~1032 (its documented limit)

    def decode_to(self, data: bytes | memoryview, spec: ChunkSpec, out: np.ndarray) -> bool:
        gz = memoryview(data)[:2] == b"\x1f\x8b"
        if gz:
            # libdeflate decodes only the first member: the last member's trailer (ISIZE)
            # must be this one's, so several members or zero padding take ``decode``
            if int.from_bytes(memoryview(data)[-4:], "little") != out.nbytes & 0xFFFFFFFF:
                return False
        elif not (self._n5_source is not None or self.use_zlib):
            return False  # Zarr gzip is a gzip stream: ``decode`` words the error
        decoder = _libdeflate_decoders()[0 if gz else 1]
        if decoder is None:
            return False
        try:
            got = decoder(data, out=out)
        except Exception:  # imagecodecs.DeflateError: corrupt or too long; ``decode`` says which
            return False
        return len(got) == out.nbytes

    def native_decoder(self) -> NativeDecoder:
        # libdeflate, as ``decode_to``: N5 streams are gzip or zlib by their magic
        return "deflate" if self._n5_source is not None or self.use_zlib else "gzip"

    def decode(self, data: bytes, spec: ChunkSpec, max_size: int) -> bytes:
        if self._n5_source is not None or self.use_zlib:
            # N5 writers disagree on the header: pick it from the magic (ISA-L's own
            # auto-detection, wbits 47, decodes about half as fast)
            gz = memoryview(data)[:2] == b"\x1f\x8b"
            return gunzip(data, max_size, _GZIP_WBITS if gz else _ZLIB_WBITS)
        return gunzip(data, max_size)
