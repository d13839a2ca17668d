"""Zarr v3 ``crc32c`` codec: append a 4-byte little-endian CRC-32C; verify and strip on decode.

``google-crc32c`` (a declared dependency, 3 ms to import) hashes ``bytes`` and copies of small
views: the shard indexes every sharded read and write checks. Large views (checksummed inner
chunks) go to the ``crc32c`` package when it is installed, which hashes any buffer without a
copy; it is imported only then, since importing it loads ``importlib.metadata`` (45 ms here,
once per process, which the first read of every sharded array paid).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ChecksumError, CodecError, MetadataError
from .base import BytesBytesCodec, ChunkSpec
from .registry import register_codec

__all__ = ["Crc32cCodec", "crc32c"]

Hash = Callable[[Any], int]
#: views up to this size are copied for google-crc32c (a shard index is a few KiB)
_COPIED_BYTES = 64 << 10
_bytes_hash: Hash | None = None
_view_hash: Hash | None = None


def _load_bytes_hash() -> Hash:
    import google_crc32c

    return google_crc32c.value


def _load_view_hash() -> Hash:
    """The hash of large views, imported on first use."""
    try:
        from crc32c import crc32c as hash_buffer

        return hash_buffer
    except ImportError:  # pragma: no cover - depends on the optional package
        hash_bytes = _load_bytes_hash()
        return lambda data: hash_bytes(bytes(data))


def crc32c(data: bytes | memoryview) -> int:
    """CRC-32C (Castagnoli) of ``data``."""
    global _bytes_hash, _view_hash
    if not isinstance(data, bytes) and data.nbytes <= _COPIED_BYTES:
        data = bytes(data)
    if isinstance(data, bytes):
        if _bytes_hash is None:
            _bytes_hash = _load_bytes_hash()
        return _bytes_hash(data)
    if _view_hash is None:
        _view_hash = _load_view_hash()
    return _view_hash(data)


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
