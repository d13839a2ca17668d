"""Neuroglancer ``compressed_segmentation`` encoding: uint32 / uint64 label chunks.

Each channel of the chunk ``[x, y, z, c]`` is cut into blocks of ``block_size``; a block stores
a lookup table of its distinct labels and 0-32-bit indices into it (format in
shared/specs/precomputed.md section 4). The ``compressed-segmentation`` package (C++) encodes
and decodes. Its decoder trusts every offset in the data and segfaults on corrupt input, so
``check_encoded`` first proves, with vectorised NumPy over the block headers, that every read
the decoder will make stays inside the buffer: header table, value words, and the LUT entries
the indices actually address (computed exactly for the few blocks whose LUT ends near the end
of the buffer, where a bound from the bit width alone would be too strict).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import CodecError, MetadataError
from .base import ArrayBytesCodec, ChunkSpec
from .registry import register_codec

__all__ = ["CompressedSegmentationCodec", "check_encoded"]

_BITS = (0, 1, 2, 4, 8, 16, 32)


def _max_indices(words: np.ndarray, starts: np.ndarray, bits: int, nvox: int) -> np.ndarray:
    """Largest LUT index each block (value words at ``starts``) uses; all have ``bits``."""
    per_word = 32 // bits
    nwords = -(-nvox // per_word)
    # one block at a time would be a Python loop over possibly 10^5 blocks: gather them all,
    # a slab of blocks at a time to bound the temporary
    out = np.empty(len(starts), dtype=np.int64)
    slab = max(1, (1 << 22) // max(nwords * per_word, 1))
    shifts = (np.arange(per_word, dtype=np.uint32) * bits).astype(np.uint32)
    mask = np.uint32((1 << bits) - 1) if bits < 32 else np.uint32(0xFFFFFFFF)
    for i in range(0, len(starts), slab):
        s = starts[i : i + slab]
        w = words[s[:, None] + np.arange(nwords)]  # (k, nwords)
        idx = ((w[:, :, None] >> shifts) & mask).reshape(len(s), -1)[:, :nvox]
        out[i : i + slab] = idx.max(axis=1)
    return out


def check_encoded(words: np.ndarray, shape: tuple[int, ...], block: tuple[int, ...], wpv: int) -> None:
    """Raise CodecError unless decoding ``words`` as a chunk of ``shape`` reads only inside it.

    ``shape`` is ``(sx, sy, sz, nc)``; ``wpv`` is 1 (uint32) or 2 (uint64) words per label.
    """
    total = len(words)
    nc = shape[3]
    grid = [-(-s // b) for s, b in zip(shape[:3], block)]
    nblocks = grid[0] * grid[1] * grid[2]
    nvox = block[0] * block[1] * block[2]
    if nvox >= 2**32:  # larger than any chunk; and nvox * bits below must fit int64
        raise CodecError(f"codec 'compressed_segmentation': block size {list(block)} holds {nvox} voxels (at most 2**32)")
    if total < nc:
        raise CodecError(f"codec 'compressed_segmentation': {total * 4} bytes cannot hold the {nc} channel offsets")
    for c in range(nc):
        base = int(words[c])
        if base + 2 * nblocks > total:
            raise CodecError(
                f"codec 'compressed_segmentation': channel {c} block headers at word {base} run past "
                f"the end of the data ({total} words)"
            )
        if nblocks == 0:
            continue
        head = words[base : base + 2 * nblocks].reshape(nblocks, 2).astype(np.int64)
        lut = base + (head[:, 0] & 0xFFFFFF)
        bits = head[:, 0] >> 24
        values = base + head[:, 1]
        bad = ~np.isin(bits, _BITS)
        if bad.any():
            raise CodecError(
                f"codec 'compressed_segmentation': channel {c} block {int(np.argmax(bad))} has "
                f"{int(bits[bad][0])} encoded bits (allowed: {list(_BITS)})"
            )
        nvalue_words = -(-(nvox * bits) // 32)
        over = (bits > 0) & (values + nvalue_words > total)
        if over.any():
            raise CodecError(
                f"codec 'compressed_segmentation': channel {c} block {int(np.argmax(over))} has its "
                f"values past the end of the data ({total} words)"
            )
        # a LUT large enough for every index the bit width allows is surely inside; the rest
        # (typically the last LUT of the buffer) is checked against the indices really used
        bound = np.where(bits < 32, np.left_shift(1, np.minimum(bits, 31)), 1 << 32)
        doubt = lut + wpv * bound > total
        for b in _BITS:
            sel = doubt & (bits == b)
            if not sel.any():
                continue
            used = np.zeros(int(sel.sum()), dtype=np.int64) if b == 0 else _max_indices(words, values[sel], b, nvox)
            past = lut[sel] + wpv * (used + 1) > total
            if past.any():
                raise CodecError(
                    f"codec 'compressed_segmentation': channel {c} has a block whose lookup table "
                    f"runs past the end of the data ({total} words)"
                )


@register_codec("compressed_segmentation", namespace="precomputed")
class CompressedSegmentationCodec(ArrayBytesCodec):
    """``compressed_segmentation`` with ``block_size`` ``[bx, by, bz]`` (from the ``info``)."""

    name = "compressed_segmentation"
    #: the per-channel ``np.asfortranarray`` lays any strides out in one copy (a row copy for Fortran-ordered input)
    accepts_strided = True
    # compressed_segmentation.decompress holds the GIL for the whole decode: threads would
    # only take turns (and pay the hand-offs), so the core decodes these on one thread
    holds_gil = True

    def __init__(self, block_size: Any = (8, 8, 8)) -> None:
        if (
            not isinstance(block_size, (list, tuple))
            or len(block_size) != 3
            or not all(isinstance(b, int) and not isinstance(b, bool) and b >= 1 for b in block_size)
        ):
            raise MetadataError(
                f"compressed_segmentation_block_size must be 3 positive integers, got {block_size!r}"
            )
        self.block_size: tuple[int, int, int] = tuple(block_size)

    @classmethod
    def _from_configuration(cls, configuration: dict[str, Any]) -> CompressedSegmentationCodec:
        extra = set(configuration) - {"block_size"}
        if extra:
            raise MetadataError(f"encoding 'compressed_segmentation': unknown option(s) {sorted(extra)}")
        return cls(configuration.get("block_size", (8, 8, 8)))

    def _canonical_config(self) -> dict[str, Any]:
        return {"name": "compressed_segmentation", "configuration": {"block_size": list(self.block_size)}}

    def validate(self, spec: ChunkSpec) -> None:
        dtype = np.dtype(spec.dtype)
        if dtype not in (np.uint32, np.uint64) or len(spec.shape) != 4:
            raise MetadataError(f"encoding 'compressed_segmentation' needs uint32 or uint64 data, got {dtype}")

    def encode(self, array: np.ndarray, spec: ChunkSpec) -> bytes:
        import compressed_segmentation as cseg

        if array.shape != spec.shape:
            raise CodecError(f"codec 'compressed_segmentation': array of shape {array.shape}, expected {spec.shape}")
        # order="F" means x fastest, which the library only honours for Fortran memory; it
        # crashes on 4-D input with several channels, so channels are encoded one by one and
        # put behind our own channel-offset words
        nc = spec.shape[3]
        parts = []
        for c in range(nc):
            channel = np.asfortranarray(array[..., c], dtype=np.dtype(spec.dtype))
            if not channel.flags.writeable:  # the library takes writable buffers only
                channel = channel.copy(order="F")
            parts.append(cseg.compress(channel, block_size=self.block_size, order="F"))
        if nc == 1:
            return parts[0]
        offsets, pos = [], nc
        for p in parts:  # each part starts with its own 1-word header (offset 1): dropped
            offsets.append(pos)
            pos += len(p) // 4 - 1
        return np.asarray(offsets, dtype="<u4").tobytes() + b"".join(memoryview(p)[4:] for p in parts)

    def decode(self, data: bytes, spec: ChunkSpec) -> np.ndarray:
        import compressed_segmentation as cseg

        dtype = np.dtype(spec.dtype)
        raw = memoryview(data)
        if raw.nbytes % 4:
            raise CodecError(f"codec 'compressed_segmentation': {raw.nbytes} bytes is not a whole number of 32-bit words")
        words = np.frombuffer(raw, dtype="<u4")
        check_encoded(words, spec.shape, self.block_size, dtype.itemsize // 4)
        sx, sy, sz, nc = spec.shape
        out = np.empty(spec.shape, dtype=dtype, order="F")
        for c in range(nc):
            # a one-channel stream: header word 1, then everything from this channel's start
            # (block offsets are relative to it and may reach into later channels' words)
            one = raw if nc == 1 else b"\x01\x00\x00\x00" + raw[4 * int(words[c]) :].tobytes()
            try:
                out[..., c] = cseg.decompress(bytes(one), (sx, sy, sz), dtype, self.block_size, order="F")
            except Exception as e:  # the library's DecodeError and friends
                raise CodecError(f"codec 'compressed_segmentation': corrupt data in channel {c}: {e}") from e
        return out
