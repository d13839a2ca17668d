"""The demo's synthetic data: an EM-like uint8 volume and a segmentation that matches it.

``em_like_volume(size, seed)`` and ``em_like_pair(size, seed)`` are public so that benchmarks
and tests use the same data. NumPy only; about 1 s per 100 MB on one core.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["LABEL_MULTIPLIER", "em_like_pair", "em_like_volume"]

# z-planes generated per step: bounds the float32 temporaries (size^2 * 4 B per plane) and
# fixes the order of noise draws, so a seed gives the same volume however it is consumed
_SLAB = 16
#: region numbers become spread-out uint64 ids (odd, so the map is one-to-one modulo 2^64),
#: as real segmentations use large ids; 0 stays 0 (membranes, unlabelled)
LABEL_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)


class _SmoothField:
    """A smooth random field: a coarse Gaussian grid, smoothstep-interpolated to full size,
    produced one z-plane at a time (the interpolation is separable)."""

    def __init__(self, rng: np.random.Generator, shape: tuple[int, ...], cell: int) -> None:
        self.cell = cell
        self.coarse = rng.standard_normal([s // cell + 2 for s in shape], dtype=np.float32)
        self.y = self._weights(shape[1])
        self.x = self._weights(shape[2])
        self._planes: dict[int, np.ndarray] = {}

    def _weights(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        pos = np.arange(n, dtype=np.float32) / self.cell
        i0 = np.floor(pos).astype(np.intp)
        f = pos - i0
        return i0, i0 + 1, f * f * (3 - 2 * f)  # smoothstep: no visible grid creases

    def _coarse_plane(self, k: int) -> np.ndarray:
        """Coarse z-plane ``k`` upsampled in y and x (the two most recent are kept)."""
        plane = self._planes.get(k)
        if plane is None:
            c = self.coarse[k]
            y0, y1, wy = self.y
            c = c[y0] * (1 - wy)[:, None] + c[y1] * wy[:, None]
            x0, x1, wx = self.x
            plane = c[:, x0] * (1 - wx) + c[:, x1] * wx
            if len(self._planes) >= 2:
                del self._planes[min(self._planes)]
            self._planes[k] = plane
        return plane

    def plane(self, z: int) -> np.ndarray:
        """The field at z-plane ``z`` (float32, shape (Y, X)); call with increasing ``z``."""
        pos = z / self.cell
        k = int(pos)
        f = pos - k
        w = np.float32(f * f * (3 - 2 * f))
        out = self._coarse_plane(k) * (1 - w)
        out += self._coarse_plane(k + 1) * w
        return out


def _shape(size: int | Sequence[int]) -> tuple[int, ...]:
    shape = (int(size),) * 3 if isinstance(size, (int, np.integer)) else tuple(int(s) for s in size)
    if len(shape) != 3 or any(s < 1 for s in shape):
        raise ValueError(f"em_like_volume needs a positive cube edge or 3-D shape, got {size!r}")
    return shape


def _generate(size: int | Sequence[int], seed: int, labels: bool) -> tuple[np.ndarray, np.ndarray | None]:
    shape = _shape(size)
    rng = np.random.default_rng(seed)
    large = _SmoothField(rng, shape, 48)   # slow brightness changes across the section
    texture = _SmoothField(rng, shape, 8)  # organelle-scale texture
    cells = _SmoothField(rng, shape, 24)   # membranes where this field crosses zero
    out = np.empty(shape, dtype=np.uint8)
    seg = np.empty(shape, dtype=np.uint64) if labels else None
    for z0 in range(0, shape[0], _SLAB):
        z1 = min(z0 + _SLAB, shape[0])
        noise = rng.standard_normal((z1 - z0,) + shape[1:], dtype=np.float32)
        noise *= 7
        for z in range(z0, z1):
            value = noise[z - z0]
            value += 150
            brightness = large.plane(z)
            value += 30 * brightness
            value += 18 * texture.plane(z)
            cell = cells.plane(z)
            membrane = np.abs(cell)
            membrane *= -6
            membrane += 1
            np.clip(membrane, 0, 1, out=membrane)
            value -= 90 * membrane
            np.clip(value, 0, 255, out=value)
            out[z] = value  # float -> uint8 truncates; values are already in range
            if seg is not None:
                # regions: the two sides of each membrane, cut further by bands of the
                # brightness field; the dark membrane core itself is unlabelled (0)
                band = np.clip((brightness + 2.5) * 3, 0, 15).astype(np.uint64)
                region = band * np.uint64(2) + (cell > 0).astype(np.uint64) + np.uint64(1)
                region[membrane > 0.5] = 0
                seg[z] = region * LABEL_MULTIPLIER
    return out, seg


def em_like_volume(size: int | Sequence[int], seed: int = 0) -> np.ndarray:
    """A deterministic uint8 volume that looks and compresses roughly like electron microscopy.

    Smooth random fields (trilinear-style upsampling of coarse random grids at two scales)
    give the slowly varying cytoplasm intensity, a third field's zero level set gives dark
    membrane-like sheets, and Gaussian noise gives the grain. NumPy only; about 1 s per
    100 MB on one core.

    ``size`` is the edge of a cube or a 3-tuple shape; the same ``seed`` gives the same data.
    """
    return _generate(size, seed, labels=False)[0]


def em_like_pair(size: int | Sequence[int], seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(volume, labels)``: ``em_like_volume(size, seed)`` and a uint64 segmentation of it
    whose region borders run along the volume's membranes (membrane cores are label 0)."""
    volume, seg = _generate(size, seed, labels=True)
    assert seg is not None
    return volume, seg
