"""Memory order: inputs of any layout write the same values, and layouts that match the
stored order are encoded without an intermediate transpose.

Every format is written from C-ordered, Fortran-ordered, strided and negatively stepped
inputs on both runners and compared with NumPy; reads return the order each format stores
its chunks in (the table under "Memory order" in README.md). The spies below check the *how*:
an array->bytes codec receives a view of the caller's data (no copy by the core or the
pipeline before the codec's own single layout copy), and a Fortran-ordered write to
precomputed never goes through the transposing path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import shardstore
from shardstore import bcolz as sbz
from shardstore.codecs import bytes_, memory_order, n5_block, precomputed_raw
from shardstore.codecs.base import ArrayBytesCodec
from shardstore.codecs.bytes_ import BytesCodec
from shardstore.codecs.memory_order import copy_to_c_order, first_axis_fastest, rows_laid_out
from shardstore.codecs.n5_block import N5BlockCodec
from shardstore.codecs.precomputed_raw import PrecomputedRawCodec
from shardstore.core import rawwrite
from shardstore.store import LocalStore
from shardstore.testing.runners import RUNNERS, Runner, on_runner

SHAPE = (21, 19, 13)  # edge chunks along every axis
CHUNK = (8, 8, 8)
SHARDING = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0,
            "minishard_bits": 1, "shard_bits": 1, "minishard_index_encoding": "raw", "data_encoding": "raw"}
ZSTD = {"name": "zstd", "configuration": {"level": 1}}
BYTES = {"name": "bytes", "configuration": {"endian": "little"}}
REVERSED = {"name": "transpose", "configuration": {"order": [2, 1, 0]}}

#: format -> (create(store, shape) -> array, the order its reads return)
FORMATS: dict[str, tuple[Callable[[shardstore.Store, tuple[int, ...]], Any], str]] = {
    "zarr3": (lambda s, shape: shardstore.zarr3.create(s, shape=shape, dtype="uint32", chunks=CHUNK,
                                                       codecs=[BYTES, ZSTD]), "C"),
    "zarr3-sharded": (lambda s, shape: shardstore.zarr3.create(s, shape=shape, dtype="uint32", chunks=CHUNK,
                                                               shards=(16, 16, 16)), "C"),
    "zarr3-transposed": (lambda s, shape: shardstore.zarr3.create(s, shape=shape, dtype="uint32", chunks=CHUNK,
                                                                  codecs=[REVERSED, BYTES, ZSTD]), "F"),
    "n5-raw": (lambda s, shape: shardstore.n5.create(s, "d", shape=shape, dtype="uint32", block_size=CHUNK,
                                                     compression={"type": "raw"}), "C"),
    "n5-gzip": (lambda s, shape: shardstore.n5.create(s, "d", shape=shape, dtype="uint32", block_size=CHUNK,
                                                      compression={"type": "gzip", "level": 1}), "C"),
    "precomputed": (lambda s, shape: _precomputed(s, shape, None, "raw"), "F"),
    "precomputed-sharded": (lambda s, shape: _precomputed(s, shape, SHARDING, "raw"), "F"),
    "precomputed-cseg": (lambda s, shape: _precomputed(s, shape, None, "compressed_segmentation"), "F"),
    "bcolz": (lambda s, shape: sbz.carray(np.zeros(shape, dtype="uint32"), rootdir=s, chunklen=4), "C"),
}


def _precomputed(store: shardstore.Store, shape: tuple[int, ...], sharding: dict | None, encoding: str) -> Any:
    scale = {"size": list(shape[:3]), "chunk_size": list(CHUNK), "encoding": encoding, "sharding": sharding}
    return shardstore.precomputed.create(store, data_type="uint32", num_channels=shape[3], scales=[scale])


def _shape(fmt: str, channels: int = 1) -> tuple[int, ...]:
    return (*SHAPE, channels) if fmt.startswith("precomputed") else SHAPE


def _values(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(1, 1 << 20, shape, dtype=np.uint32)


def _layouts(x: np.ndarray) -> Iterator[tuple[str, np.ndarray]]:
    """``x``'s values in every memory layout a caller may hand over."""
    yield "C", np.ascontiguousarray(x)
    yield "F", np.asfortranarray(x)
    big = np.zeros(tuple(2 * n + 3 for n in x.shape), dtype=x.dtype)
    view = big[tuple(slice(1, 1 + 2 * n, 2) for n in x.shape)]
    view[...] = x
    yield "strided", view
    flip = tuple(slice(None, None, -1) if d % 2 == 0 else slice(None) for d in range(x.ndim))
    yield "negative C", np.ascontiguousarray(x[flip])[flip]
    yield "negative F", np.asfortranarray(x[flip])[flip]
    yield "strided F", np.asfortranarray(big)[tuple(slice(1, 1 + 2 * n, 2) for n in x.shape)]


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_input_layout_writes_what_numpy_holds(fmt: str, runner: Runner, tmp_path: Path) -> None:
    create, order = FORMATS[fmt]
    shape = _shape(fmt)
    box = (slice(3, 17), slice(5, None), slice(2, 12)) + ((slice(None),) if len(shape) == 4 else ())
    for n, (name, whole) in enumerate(_layouts(_values(shape, 1))):
        a = create(on_runner(LocalStore(tmp_path / f"{n}"), runner), shape)
        expected = np.array(whole)
        a[...] = whole  # complete chunks (and clipped or padded edges)
        partial = dict(_layouts(_values(expected[box].shape, 2)))[name]
        a[box] = partial  # partial chunks: read, merged, encoded again
        expected[box] = partial
        got = a[...]
        np.testing.assert_array_equal(got, expected, err_msg=f"{fmt}, {name} input")
        assert got.flags[f"{order}_CONTIGUOUS"], f"{fmt} reads return {order} order"


@pytest.mark.parametrize("runner", RUNNERS)
def test_several_channels_in_fortran_order(runner: Runner, tmp_path: Path) -> None:
    create, _ = FORMATS["precomputed-sharded"]
    shape = _shape("precomputed", channels=3)
    a = create(on_runner(LocalStore(tmp_path), runner), shape)
    for name, x in _layouts(_values(shape, 3)):
        a[...] = x
        np.testing.assert_array_equal(a[...], x, err_msg=name)
        np.testing.assert_array_equal(a[2:19, :7, 5:, 1:], x[2:19, :7, 5:, 1:], err_msg=name)


class _Spy:
    """Records what a codec class's ``encode`` (and its own ``encode_transient``, which the
    pipeline calls when a compressor follows) receives (``monkeypatch`` undoes it)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, cls: type[ArrayBytesCodec]) -> None:
        self.arrays: list[np.ndarray] = []
        for name in ("encode", "encode_transient"):
            if name == "encode" or name in vars(cls):
                self._spy(monkeypatch, cls, name)

    def _spy(self, monkeypatch: pytest.MonkeyPatch, cls: type[ArrayBytesCodec], name: str) -> None:
        real = getattr(cls, name)

        def encode(codec: Any, array: np.ndarray, spec: Any) -> Any:
            self.arrays.append(array)
            return real(codec, array, spec)

        monkeypatch.setattr(cls, name, encode)


def _forbid_transposed_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    def transposing(*args: object) -> None:
        raise AssertionError("a Fortran-ordered chunk went through the transposing layout")

    monkeypatch.setattr(precomputed_raw, "xyzc_to_fortran", transposing)


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("fmt", ["precomputed-sharded", "precomputed"])
def test_fortran_input_is_encoded_without_a_transpose(
    fmt: str, runner: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The regression guard of the F-order precomputed write: every chunk reaches the raw
    codec as a view of the caller's array that runs x fastest, and is laid out by a row copy."""
    spy = _Spy(monkeypatch, PrecomputedRawCodec)
    _forbid_transposed_layout(monkeypatch)
    shape = (32, 24, 16, 1)  # whole chunks only: each one a view of the input
    a = FORMATS[fmt][0](on_runner(LocalStore(tmp_path), runner), shape)
    x = np.asfortranarray(_values(shape, 4))
    a[...] = x
    assert len(spy.arrays) == 4 * 3 * 2
    for chunk in spy.arrays:
        assert np.shares_memory(chunk, x), "the chunk was copied before the codec"
        assert chunk.strides[0] == chunk.itemsize
    np.testing.assert_array_equal(a[...], x)
    # a read-merge-write keeps the stored order too: the merged chunk is Fortran-ordered
    spy.arrays.clear()
    a[1:5, 2:3, 3:9] = 7
    assert spy.arrays and all(c.flags.f_contiguous for c in spy.arrays)
    x[1:5, 2:3, 3:9] = 7
    np.testing.assert_array_equal(a[...], x)


def test_a_whole_fortran_chunk_is_encoded_without_a_copy() -> None:
    """A chunk that is Fortran-contiguous already is its own stored layout."""
    codec = PrecomputedRawCodec()
    spec = shardstore.codecs.base.ChunkSpec((8, 4, 2, 1), np.dtype("<u2"), np.uint16(0))
    chunk = np.asfortranarray(_values((8, 4, 2, 1), 5).astype("<u2"))
    encoded = codec.encode(chunk, spec)
    assert np.shares_memory(np.frombuffer(encoded, dtype=np.uint8), chunk)
    assert bytes(encoded) == chunk.tobytes(order="F")


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize(("fmt", "codec"), [("zarr3", BytesCodec), ("zarr3-transposed", BytesCodec),
                                            ("zarr3-sharded", BytesCodec), ("n5-gzip", N5BlockCodec)])
def test_zarr_and_n5_codecs_receive_views_of_the_input(
    fmt: str, codec: type[ArrayBytesCodec], order: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither the core nor the pipeline copies a chunk before the array->bytes codec, whose
    own copy is then the only one (none at all for a C-contiguous chunk)."""
    spy = _Spy(monkeypatch, codec)
    a = FORMATS[fmt][0](LocalStore(tmp_path), (16, 16, 16))
    x = np.asarray(_values((16, 16, 16), 6), order=order)
    a[...] = x
    chunks = [c for c in spy.arrays if c.shape == CHUNK]  # (not a shard's index)
    assert len(chunks) == 8
    assert all(np.shares_memory(c, x) for c in chunks)
    np.testing.assert_array_equal(a[...], x)


@pytest.mark.parametrize("shape", [(5, 7), (4, 6, 8), (3, 1, 5, 2), (8, 8, 8), (1, 9)])
@pytest.mark.parametrize("out_dtype", ["<u2", ">u2", "<f8"])
def test_copy_to_c_order_lays_out_fortran_boxes(shape: tuple[int, ...], out_dtype: str) -> None:
    x = np.random.default_rng(7).integers(0, 60000, shape).astype(np.uint16)
    for name, value in _layouts(x):
        out = np.empty(shape, dtype=out_dtype)
        if first_axis_fastest(value):
            copy_to_c_order(value, out)
        else:
            assert name not in ("F", "strided F") or sum(n > 1 for n in shape) < 2, name
            out[...] = value
        np.testing.assert_array_equal(out, x, err_msg=name)


@pytest.mark.parametrize("shape", [(5, 7), (4, 6, 8), (3, 1, 5, 2), (8, 8, 8), (1, 9)])
def test_rows_laid_out_is_a_view_of_the_values_in_the_buffer(shape: tuple[int, ...]) -> None:
    x = np.random.default_rng(8).integers(0, 60000, shape).astype(np.uint16)
    for name, value in _layouts(x):
        if not first_axis_fastest(value):
            continue
        buf = np.full(x.size, 1, np.uint16)
        laid = rows_laid_out(value, buf)
        assert laid.shape == x.shape and np.shares_memory(laid, buf) and not np.shares_memory(laid, value)
        np.testing.assert_array_equal(laid, x, err_msg=name)


def test_broadcast_and_c_ordered_values_are_not_fortran() -> None:
    assert not first_axis_fastest(np.zeros((4, 5)))
    assert not first_axis_fastest(np.broadcast_to(np.arange(5.0), (4, 5)).T)
    assert not first_axis_fastest(np.zeros(7))
    assert first_axis_fastest(np.zeros((4, 5), order="F")[::-1, ::2])


@pytest.mark.parametrize("fmt", ["zarr3", "n5-raw", "n5-gzip"])
def test_fortran_input_takes_the_two_pass_copy(fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Zarr v3 and N5 lay a Fortran-ordered chunk out by ``copy_to_c_order`` (not NumPy's
    element-by-element transposing copy, nor the native raw writer's: it gathers raw N5
    blocks from the first pass of it, ``rows_laid_out``)."""
    calls: list[tuple[int, ...]] = []
    real, real_rows = memory_order.copy_to_c_order, memory_order.rows_laid_out

    def counted(a: np.ndarray, out: np.ndarray) -> None:
        calls.append(a.shape)
        real(a, out)

    def counted_rows(a: np.ndarray, buf: np.ndarray) -> np.ndarray:
        calls.append(a.shape)
        return real_rows(a, buf)

    for module in (bytes_, n5_block):
        monkeypatch.setattr(module, "copy_to_c_order", counted)
    monkeypatch.setattr(rawwrite, "rows_laid_out", counted_rows)
    a = FORMATS[fmt][0](LocalStore(tmp_path), (16, 16, 16))
    x = np.asfortranarray(_values((16, 16, 16), 8))
    a[...] = x
    assert calls == [CHUNK] * 8
    np.testing.assert_array_equal(a[...], x)
