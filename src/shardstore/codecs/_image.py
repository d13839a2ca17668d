"""Shared helpers of the precomputed image codecs (jpeg, png): voxels <-> one 2-D image.

A precomputed chunk is a 4-D array ``[x, y, z, channel]``. Its image enumerates the voxels in
Fortran order (x fastest) row by row, with the channels of a voxel as the samples of a pixel
(interleaved). Writers (tensorstore, cloud-volume) use width ``sx`` and height ``sy * sz``;
readers accept any width x height with the right pixel count.
"""

from __future__ import annotations

import numpy as np

from ..errors import CodecError

__all__ = ["to_image", "from_image", "check_pixels"]


def to_image(array: np.ndarray) -> np.ndarray:
    """``[x, y, z, c]`` -> a C-contiguous ``(sy*sz, sx, c)`` image (one copy)."""
    sx, sy, sz, nc = array.shape
    return np.ascontiguousarray(array.transpose(2, 1, 0, 3)).reshape(sz * sy, sx, nc)


def from_image(pixels: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A decoded image (any width x height, samples last) -> the ``[x, y, z, c]`` view."""
    sx, sy, sz, nc = shape
    return pixels.reshape(sz, sy, sx, nc).transpose(2, 1, 0, 3)


def check_pixels(codec: str, width: int, height: int, channels: int, shape: tuple[int, ...]) -> None:
    """Refuse an image whose size does not match the chunk, before decoding it."""
    sx, sy, sz, nc = shape
    if width * height != sx * sy * sz or channels != nc:
        raise CodecError(
            f"codec {codec!r}: image of {width}x{height} pixels with {channels} channel(s) cannot "
            f"hold a chunk of {sx}x{sy}x{sz} voxels with {nc} channel(s)"
        )
