"""Zarr v3 ``crc32c`` codec: append a 4-byte little-endian CRC-32C; verify and strip on decode.

The ``crc32c`` package (when installed) hashes any buffer without a copy and releases the GIL
on large inputs; ``google-crc32c`` (a declared dependency) needs ``bytes``, so views are
copied for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ChecksumError, CodecError, MetadataError
from .base import BytesBytesCodec, ChunkSpec
from .registry import register_codec

__all__ = ["Crc32cCodec", "crc32c"]

Hash = Callable[[bytes | memoryview], int]
_hash: Hash | None = None


def _load_hash() -> Hash:
    """The hash function, imported on first use: importing the ``crc32c`` package also loads
    its command line (argparse, email), ~9 ms that every first array open would pay."""
    try:
        from crc32c import crc32c as hash_buffer

        return hash_buffer
    except ImportError:  # pragma: no cover - depends on the optional package
        import google_crc32c

        return lambda data: google_crc32c.value(data if isinstance(data, bytes) else bytes(data))


def crc32c(data: bytes | memoryview) -> int:
    """CRC-32C (Castagnoli) of ``data``."""
    global _hash
    if _hash is None:
        _hash = _load_hash()
    return _hash(data)


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

    def decode(self, data: bytes, spec: ChunkSpec, max_size: int) -> memoryview:
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
