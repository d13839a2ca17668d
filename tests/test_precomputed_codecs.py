"""The precomputed encodings as codecs: golden bytes from the spec, round trips, layouts."""

from __future__ import annotations

import numpy as np
import pytest
from _helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from shardstore.codecs.base import ChunkSpec
from shardstore.codecs.compressed_segmentation import CompressedSegmentationCodec
from shardstore.codecs.jpeg import JpegCodec, jpeg_frame
from shardstore.codecs.png import PngCodec, png_header
from shardstore.codecs.precomputed_raw import PrecomputedRawCodec
from shardstore.codecs.registry import get_codec_class
from shardstore.errors import CodecError, MetadataError


def spec(shape: tuple[int, ...], dtype: str) -> ChunkSpec:
    return ChunkSpec(shape, np.dtype(dtype), np.dtype(dtype).type(0))


def words(*w: int) -> bytes:
    return np.asarray(w, dtype="<u4").tobytes()


def test_registered_in_the_precomputed_namespace() -> None:
    for name, cls in [("raw", PrecomputedRawCodec), ("jpeg", JpegCodec), ("png", PngCodec),
                      ("compressed_segmentation", CompressedSegmentationCodec)]:
        assert get_codec_class(name, "precomputed") is cls


# -- raw ------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["uint8", "uint16", "int32", "float32", "uint64"])
@pytest.mark.parametrize("shape", [(3, 4, 5, 1), (3, 4, 5, 2), (1, 1, 1, 3), (64, 32, 8, 1)])
def test_raw_is_little_endian_fortran_order(dtype: str, shape: tuple[int, ...]) -> None:
    a = (np.random.default_rng(0).random(shape) * 100).astype(dtype)
    codec = PrecomputedRawCodec()
    enc = bytes(codec.encode(a, spec(shape, dtype)))
    assert enc == a.astype(np.dtype(dtype).newbyteorder("<")).tobytes(order="F")
    buf = np.frombuffer(enc, np.uint8)
    out = codec.decode(enc, spec(shape, dtype))
    # zero-copy: the [x, y, z, c] view of the stored bytes, first axis fastest (reads return
    # Fortran-ordered arrays, so placing it is a plain copy)
    assert np.shares_memory(out, buf) and out.flags.f_contiguous
    np.testing.assert_array_equal(out, a)
    # a decoded chunk changed (on a copy, as the core does) re-encodes to the stored order
    changed = out.copy()
    changed[0, 0, 0, 0] = 7
    a[0, 0, 0, 0] = 7
    assert bytes(codec.encode(changed, spec(shape, dtype))) == a.astype(np.dtype(dtype).newbyteorder("<")).tobytes(order="F")


@pytest.mark.parametrize("dtype", ["uint8", ">u2", "float32"])
@pytest.mark.parametrize("nc", [1, 3])
def test_raw_encodes_boxes_of_a_c_ordered_volume(dtype: str, nc: int) -> None:
    """Strided boxes of a C-ordered ``[x, y, z, c]`` volume (what ``a[...] = vol`` hands the
    codec) encode to the stored layout, one after another on one thread: the per-thread
    scratch of the transposition never leaks into an encoding returned earlier."""
    vol = (np.random.default_rng(1).random((20, 18, 16, nc)) * 1000).astype(dtype)
    codec = PrecomputedRawCodec()
    shape = (10, 9, 8, nc)
    boxes = [vol[x : x + 10, y : y + 9, z : z + 8] for x in (0, 10) for y in (0, 9) for z in (0, 8)]
    assert not any(b.flags.c_contiguous or b.flags.f_contiguous for b in boxes)
    encoded = [codec.encode(b, spec(shape, np.dtype(dtype).newbyteorder("=").str)) for b in boxes]
    for box, enc in zip(boxes, encoded):
        assert bytes(enc) == box.astype(np.dtype(dtype).newbyteorder("<")).tobytes(order="F")


def test_raw_wrong_size_is_a_codec_error() -> None:
    with pytest.raises(CodecError, match="119 bytes, expected 120"):
        PrecomputedRawCodec().decode(b"\0" * 119, spec((3, 4, 5, 2), "uint8"))


# -- compressed_segmentation ----------------------------------------------------------------
def test_cseg_worked_example_from_the_spec() -> None:
    data = words(1, 0x01000003, 2, 0x34, 5, 7)
    out = CompressedSegmentationCodec([4, 2, 1]).decode(data, spec((4, 2, 1, 1), "uint32"))
    np.testing.assert_array_equal(out[:, :, 0, 0].reshape(-1, order="F"), [5, 5, 7, 5, 7, 7, 5, 5])


def test_cseg_constant_uint64_block() -> None:
    data = words(1, 0x00000002, 2, 9, 0)
    out = CompressedSegmentationCodec([2, 2, 2]).decode(data, spec((2, 2, 2, 1), "uint64"))
    assert (out == 9).all() and out.dtype == np.uint64


def test_cseg_channel_offsets_are_per_channel() -> None:
    a = np.zeros((5, 3, 2, 2), dtype=np.uint64)
    a[..., 0] = 2**63 + 1
    a[1, 1, 1, 1] = 2**64 - 1
    codec = CompressedSegmentationCodec([4, 4, 4])
    enc = codec.encode(a, spec(a.shape, "uint64"))
    w = np.frombuffer(enc, "<u4")
    assert w[0] == 2 and w[1] > 2  # two channel offsets, channel 1 starts after channel 0
    np.testing.assert_array_equal(codec.decode(enc, spec(a.shape, "uint64")), a)


@settings(max_examples=examples(60), deadline=None)
@given(
    shape=st.tuples(st.integers(1, 13), st.integers(1, 13), st.integers(1, 9), st.integers(1, 3)),
    block=st.tuples(st.integers(1, 8), st.integers(1, 8), st.integers(1, 8)),
    nlabels=st.integers(1, 70),
    dtype=st.sampled_from(["uint32", "uint64"]),
    seed=st.integers(0, 1000),
)
def test_cseg_roundtrip_any_block_size(shape, block, nlabels, dtype, seed) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    top = 2**64 - 1 if dtype == "uint64" else 2**32 - 1
    labels = rng.integers(0, top, nlabels, dtype=np.uint64, endpoint=True).astype(dtype)
    a = labels[rng.integers(0, nlabels, shape)]
    codec = CompressedSegmentationCodec(list(block))
    np.testing.assert_array_equal(codec.decode(codec.encode(a, spec(shape, dtype)), spec(shape, dtype)), a)


def test_cseg_validates_block_size_and_dtype() -> None:
    with pytest.raises(MetadataError):
        CompressedSegmentationCodec([8, 0, 8])
    with pytest.raises(MetadataError):
        CompressedSegmentationCodec([8, 8, 8]).validate(spec((4, 4, 4, 1), "uint16"))


# -- jpeg / png -----------------------------------------------------------------------------
def test_jpeg_image_is_width_x_height_y_times_z_interleaved() -> None:
    a = np.zeros((16, 8, 3, 3), dtype=np.uint8)
    a[..., 0] = 200  # red everywhere: interleaved samples keep it in channel 0
    enc = JpegCodec(95).encode(a, spec(a.shape, "uint8"))
    assert jpeg_frame(enc) == (8, 16, 24, 3)
    out = JpegCodec().decode(enc, spec(a.shape, "uint8"))
    assert np.abs(out.astype(int) - a).max() <= 3


def test_jpeg_quality_changes_size_and_bounds() -> None:
    a = np.random.default_rng(0).integers(0, 255, (32, 32, 4, 1), dtype=np.uint8)
    low = JpegCodec(10).encode(a, spec(a.shape, "uint8"))
    high = JpegCodec(98).encode(a, spec(a.shape, "uint8"))
    assert len(low) < len(high)
    with pytest.raises(MetadataError):
        JpegCodec(0)
    with pytest.raises(MetadataError):
        JpegCodec().validate(spec((4, 4, 4, 2), "uint8"))


@pytest.mark.parametrize(("dtype", "nc"), [("uint8", 1), ("uint8", 2), ("uint8", 3), ("uint8", 4), ("uint16", 1), ("uint16", 4)])
def test_png_roundtrip_and_header(dtype: str, nc: int) -> None:
    a = np.random.default_rng(nc).integers(0, np.iinfo(dtype).max, (7, 5, 3, nc), dtype=dtype, endpoint=True)
    enc = PngCodec().encode(a, spec(a.shape, dtype))
    width, height, depth, channels = png_header(enc)
    assert (width, height, depth, channels) == (7, 15, 8 * np.dtype(dtype).itemsize, nc)
    np.testing.assert_array_equal(PngCodec().decode(enc, spec(a.shape, dtype)), a)


def test_image_of_the_wrong_size_is_refused_before_decoding() -> None:
    a = np.zeros((8, 8, 2, 1), dtype=np.uint8)
    for codec in (JpegCodec(), PngCodec()):
        enc = codec.encode(a, spec(a.shape, "uint8"))
        with pytest.raises(CodecError, match="cannot hold"):
            codec.decode(enc, spec((8, 8, 3, 1), "uint8"))
        with pytest.raises(CodecError):
            codec.decode(enc[: len(enc) // 2], spec(a.shape, "uint8"))
        with pytest.raises(CodecError):
            codec.decode(b"not an image at all, not at all", spec(a.shape, "uint8"))
