"""Zarr v3 ``zstd`` codec (zarr-extensions): one Zstandard frame, optional content checksum.

Compressor and decompressor contexts are expensive to create and not thread-safe, so each
thread keeps its own (``threading.local``), keyed by level and checksum flag.

Also N5 ``{"type": "zstd", "level"}`` (n5-zstandard, namespace "n5"); other members written by
n5-zstandard are kept for the JSON round trip and ignored.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import zstandard

from .._clibs import find_functions
from ..errors import ChecksumError, CodecError, MetadataError
from .base import BytesBytesCodec, ChunkSpec, N5Compression, NativeDecoder
from .registry import register_codec

__all__ = ["ZstdCodec", "unzstd"]

_MIN_LEVEL, _MAX_LEVEL = -131072, 22
_local = threading.local()


def _load_decompress() -> Callable[[int, int, int, int], int] | None:
    """libzstd's ``ZSTD_decompress(dst, capacity, src, size)`` through ctypes (which releases
    the GIL around it), or None without the library: zstandard's one-shot decoder returns a
    fresh bytes object and cannot decode into a given buffer. The copy imagecodecs ships comes
    first, as for the native span reader. Loaded at import: done on a chunk's first decode it
    showed up in a read's timing."""
    found = find_functions("libzstd", "libzstd.so.1", ["ZSTD_decompress"])
    if found is None:
        return None
    fn = found[0]
    fn.restype = ctypes.c_size_t
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t]
    return fn


try:
    _decompress_to = _load_decompress()
except Exception:  # pragma: no cover - an odd install: ``decode`` still works
    _decompress_to = None


def _compressor(level: int, checksum: bool) -> zstandard.ZstdCompressor:
    cache: dict[tuple[int, bool], zstandard.ZstdCompressor] | None = getattr(_local, "cctx", None)
    if cache is None:
        cache = _local.cctx = {}
    cctx = cache.get((level, checksum))
    if cctx is None:
        cctx = cache[(level, checksum)] = zstandard.ZstdCompressor(
            level=level, write_checksum=checksum, write_content_size=True
        )
    return cctx


def _decompressor() -> zstandard.ZstdDecompressor:
    dctx = getattr(_local, "dctx", None)
    if dctx is None:
        dctx = _local.dctx = zstandard.ZstdDecompressor()
    return dctx


def _error(e: Exception, what: str) -> CodecError:
    msg = str(e)
    if "checksum" in msg.lower():
        return ChecksumError(f"codec 'zstd': {what}: checksum mismatch ({msg})")
    return CodecError(f"codec 'zstd': {what}: {msg}")


def _frame_size(view: memoryview, has_checksum: bool) -> int:
    """Compressed size of the frame at the start of ``view``, from its block headers (RFC 8878
    §3.1.1.2); needed because zstandard's one-shot decoder stops silently after one frame."""
    pos = zstandard.frame_header_size(view)
    while True:
        if pos + 3 > len(view):
            raise CodecError(f"codec 'zstd': truncated frame ({len(view)} bytes)")
        header = int.from_bytes(view[pos : pos + 3], "little")
        block_type = (header >> 1) & 3
        if block_type == 3:
            raise CodecError(f"codec 'zstd': corrupt frame (reserved block type at byte {pos})")
        pos += 3 + (1 if block_type == 1 else header >> 3)  # an RLE block stores one byte
        if header & 1:  # last block
            break
    return pos + (4 if has_checksum else 0)


def unzstd(data: bytes, max_size: int) -> bytes:
    """Decompress zstd frame(s), refusing output beyond ``max_size`` bytes before allocating it."""
    view = memoryview(data).cast("B")
    parts: list[bytes] = []
    total = 0
    while True:
        try:
            params = zstandard.get_frame_parameters(view)
            size = params.content_size
            if size == zstandard.CONTENTSIZE_UNKNOWN:
                end = _frame_size(view, params.has_checksum)
            else:
                if size > max_size - total:
                    raise CodecError(
                        f"codec 'zstd': frame declares {size} bytes of content, more than the "
                        f"{max_size} bytes a chunk can hold (corrupt data or a decompression bomb)"
                    )
                end = len(view)  # usual case: one frame with its size; else ZstdError below
            try:
                # max_output_size bounds the one allocation when the header has no size (0
                # would mean "unbounded" to zstandard, hence max(..., 1) and the check below)
                out = _decompressor().decompress(
                    view[:end], max_output_size=max(max_size - total, 1), allow_extra_data=False
                )
            except zstandard.ZstdError as e:
                if "unused data" not in str(e):
                    raise
                end = _frame_size(view, params.has_checksum)  # several frames: one at a time
                out = _decompressor().decompress(view[:end], allow_extra_data=False)
        except zstandard.ZstdError as e:
            raise _error(e, f"cannot decompress {len(data)} bytes") from e
        total += len(out)
        if total > max_size:
            raise CodecError(
                f"codec 'zstd': data decompresses to more than the {max_size} bytes a chunk "
                "can hold"
            )
        parts.append(out)
        view = view[end:]
        if not view:
            return parts[0] if len(parts) == 1 else b"".join(parts)


@register_codec("zstd", namespace="n5")
@register_codec("zstd")
class ZstdCodec(N5Compression, BytesBytesCodec):
    """``zstd``: ``level`` -131072..22 (0 = library default, 3), ``checksum`` (XXH64 in frame)."""

    name = "zstd"
    slow_decode = True
    decodes_to = _decompress_to is not None
    #: a block decodes to at most 128 KiB and takes at least 4 bytes (an RLE block: a 3-byte
    #: header and its byte), so a chunk claiming more is refused before a buffer is allocated
    max_ratio = 32768

    def __init__(self, level: int = 0, checksum: bool = False) -> None:
        if (
            not isinstance(level, int)
            or isinstance(level, bool)
            or not _MIN_LEVEL <= level <= _MAX_LEVEL
        ):
            raise MetadataError(
                f"codec 'zstd': 'level' must be an integer {_MIN_LEVEL}..{_MAX_LEVEL}, "
                f"got {level!r}"
            )
        if not isinstance(checksum, bool):
            raise MetadataError(f"codec 'zstd': 'checksum' must be a boolean, got {checksum!r}")
        self.level = level
        self.checksum = checksum

    @classmethod
    def _from_configuration(cls, configuration: dict[str, Any]) -> ZstdCodec:
        extra = set(configuration) - {"level", "checksum"}
        if extra:
            raise MetadataError(f"codec 'zstd': unknown configuration member(s) {sorted(extra)}")
        return cls(configuration.get("level", 0), configuration.get("checksum", False))

    def _canonical_config(self) -> dict[str, Any]:
        # both reference writers spell checksum out, even when false
        return {"name": "zstd", "configuration": {"level": self.level, "checksum": self.checksum}}


    @classmethod
    def _from_n5(cls, config: dict[str, Any]) -> ZstdCodec:
        """From N5 ``{"type": "zstd", "level": int}`` (0 = zstd's default, 3)."""
        return cls(config.get("level", 3))

    def _n5_members(self) -> dict[str, Any]:
        return {"type": "zstd", "level": self.level}

    def encode(self, data: bytes, spec: ChunkSpec) -> bytes:
        try:
            return _compressor(self.level, self.checksum).compress(data)
        except zstandard.ZstdError as e:
            raise CodecError(f"codec 'zstd': cannot compress {len(data)} bytes: {e}") from e

    def decode(self, data: bytes, spec: ChunkSpec, max_size: int) -> bytes:
        return unzstd(data, max_size)

    def decode_to(self, data: bytes | memoryview, spec: ChunkSpec, out: np.ndarray) -> bool:
        """Every frame into ``out`` (the pipeline's scratch buffer: no fresh bytes object per
        chunk), checksums checked, as ``unzstd``; anything else (an error, another size) is
        left to ``decode``, which words it."""
        src = np.frombuffer(data, np.uint8)
        if _decompress_to is None or not src.nbytes or not out.flags.c_contiguous:
            return False
        # an error is a size_t near 2**64 (ZSTD_isError), never the size expected
        return bool(_decompress_to(out.ctypes.data, out.nbytes, src.ctypes.data, src.nbytes) == out.nbytes)

    def native_decoder(self) -> NativeDecoder:
        return "zstd"  # ZSTD_decompress: every frame, checksums checked, as ``unzstd``
