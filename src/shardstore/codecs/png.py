"""Neuroglancer precomputed ``png`` encoding: uint8 / uint16 chunks, 1-4 channels (lossless).

The chunk ``[x, y, z, c]`` becomes one PNG (see ``_image``): gray, gray+alpha, RGB or RGBA for
1-4 channels, the channels of a voxel interleaved; 16-bit samples are big-endian inside the PNG
(the PNG codec handles it). imagecodecs (libpng / zlib-ng) encodes and decodes every
combination, including 16-bit multi-channel images that Pillow cannot write. The IHDR header is
checked against the chunk before anything is decoded.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from ..errors import CodecError, MetadataError
from ._image import check_pixels, from_image, to_image
from .base import ArrayBytesCodec, ChunkSpec
from .registry import register_codec

__all__ = ["PngCodec", "png_header"]

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_CHANNELS = {0: 1, 4: 2, 2: 3, 6: 4}  # PNG colour type -> samples per pixel (no palettes)


def png_header(data: bytes | memoryview) -> tuple[int, int, int, int]:
    """(width, height, bit depth, channels) from the IHDR chunk; CodecError if unusable."""
    buf = bytes(memoryview(data)[:33])
    if len(buf) < 33 or buf[:8] != _SIGNATURE or buf[12:16] != b"IHDR":
        raise CodecError("codec 'png': not a PNG stream (no signature or IHDR)")
    width, height, depth, colour = struct.unpack_from(">IIBB", buf, 16)
    if colour not in _CHANNELS:
        raise CodecError(f"codec 'png': unsupported PNG colour type {colour} (palette images are not volume data)")
    return width, height, depth, _CHANNELS[colour]


@register_codec("png", namespace="precomputed")
class PngCodec(ArrayBytesCodec):
    """``png``: ``level`` 0-9 is the zlib effort (writer option; None = the library default)."""

    name = "png"
    #: ``to_image`` lays any strides out in one copy (a row copy for Fortran-ordered input)
    accepts_strided = True

    def __init__(self, level: int | None = None) -> None:
        if level is not None and (not isinstance(level, int) or isinstance(level, bool) or not 0 <= level <= 9):
            raise MetadataError(f"encoding 'png': 'level' must be an integer 0-9, got {level!r}")
        self.level = level

    @classmethod
    def _from_configuration(cls, configuration: dict[str, Any]) -> PngCodec:
        extra = set(configuration) - {"level"}
        if extra:
            raise MetadataError(f"encoding 'png': unknown option(s) {sorted(extra)}")
        return cls(configuration.get("level"))

    def _canonical_config(self) -> dict[str, Any]:
        return {"name": "png", "configuration": {} if self.level is None else {"level": self.level}}

    def validate(self, spec: ChunkSpec) -> None:
        dtype = np.dtype(spec.dtype)
        if dtype not in (np.uint8, np.uint16) or len(spec.shape) != 4 or not 1 <= spec.shape[3] <= 4:
            raise MetadataError(
                f"encoding 'png' needs uint8 or uint16 data with 1-4 channels, got {dtype} with "
                f"{spec.shape[3] if len(spec.shape) == 4 else '?'} channel(s)"
            )

    def encode(self, array: np.ndarray, spec: ChunkSpec) -> bytes:
        import imagecodecs

        if array.shape != spec.shape:
            raise CodecError(f"codec 'png': array of shape {array.shape}, expected {spec.shape}")
        image = to_image(array.astype(np.dtype(spec.dtype), copy=False))
        if image.shape[2] == 1:
            image = image[:, :, 0]
        return bytes(imagecodecs.png_encode(image, level=self.level))

    def decode(self, data: bytes, spec: ChunkSpec) -> np.ndarray:
        import imagecodecs

        width, height, depth, channels = png_header(data)
        dtype = np.dtype(spec.dtype)
        if depth != 8 * dtype.itemsize:
            raise CodecError(f"codec 'png': {depth}-bit PNG samples, expected {8 * dtype.itemsize} for {dtype}")
        check_pixels("png", width, height, channels, spec.shape)
        try:
            pixels = imagecodecs.png_decode(data)
        except Exception as e:  # imagecodecs.PngError: libpng refused the stream
            raise CodecError(f"codec 'png': corrupt PNG stream: {e}") from e
        if pixels.dtype != dtype or pixels.size != spec.size:
            raise CodecError(f"codec 'png': decoded {pixels.shape} {pixels.dtype}, expected {spec.size} {dtype} samples")
        return from_image(pixels, spec.shape)
