"""Zarr v3 ``crc32c`` codec: append a 4-byte little-endian CRC-32C; verify and strip on decode.

The ``crc32c`` package (when installed) hashes any buffer without a copy and releases the GIL
on large inputs; ``google-crc32c`` (a declared dependency) needs ``bytes``, so views are
copied for it.
"""

from __future__ import annotations

from typing import Any

from ..errors import ChecksumError, CodecError, MetadataError
from .base import BytesBytesCodec, ChunkSpec
from .registry import register_codec

__all__ = ["Crc32cCodec", "crc32c"]

try:
    from crc32c import crc32c as _crc_buffer

    def crc32c(data: bytes | memoryview) -> int:
        """CRC-32C (Castagnoli) of ``data``."""
        return _crc_buffer(data)

except ImportError:  # pragma: no cover - depends on the optional package
    import google_crc32c

    def crc32c(data: bytes | memoryview) -> int:
        """CRC-32C (Castagnoli) of ``data``."""
        return google_crc32c.value(data if isinstance(data, bytes) else bytes(data))



@register_codec("crc32c")
class Crc32cCodec(BytesBytesCodec):
    """``crc32c``: no configuration."""

    light = True

    name = "crc32c"

    @classmethod
    def _from_configuration(cls, configuration: dict[str, Any]) -> Crc32cCodec:
        if configuration:
            raise MetadataError(
                f"codec 'crc32c': takes no configuration, got member(s) {sorted(configuration)}"
            )
        return cls()

    def _canonical_config(self) -> dict[str, Any]:
        return {"name": "crc32c"}

    def encoded_size(self, n: int) -> int:
        return n + 4

    def encode(self, data: bytes, spec: ChunkSpec) -> bytes:
        return b"".join((data, crc32c(data).to_bytes(4, "little")))

    def decode(self, data: bytes, spec: ChunkSpec, max_size: int) -> memoryview:  # type: ignore[override]
        """The payload as a read-only view of ``data`` (no copy)."""
        view = memoryview(data).cast("B")
        if view.nbytes < 4:
            raise CodecError(
                f"codec 'crc32c': {view.nbytes} bytes is too short to hold a 4-byte checksum"
            )
        if view.nbytes - 4 > max_size:
            raise CodecError(
                f"codec 'crc32c': payload of {view.nbytes - 4} bytes exceeds the {max_size} "
                "bytes expected"
            )
        payload = view[:-4].toreadonly()
        stored = int.from_bytes(view[-4:], "little")
        actual = crc32c(payload)
        if stored != actual:
            raise ChecksumError(
                f"codec 'crc32c': checksum mismatch over {len(payload)} bytes: stored "
                f"0x{stored:08x}, computed 0x{actual:08x}"
            )
        return payload
