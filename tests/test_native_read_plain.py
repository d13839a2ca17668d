"""The native reader of chunk files that are the elements alone (``core/rawread.py`` with
``CodecPipeline.native_layout`` and no decoder): precomputed raw chunks, stored in Fortran
order, and uncompressed Zarr v3 chunks, in C order.

NumPy is the oracle and the generic path (``native=False``) the reference; the spy from
``test_native_read`` counts what the kernel read, so a test fails when the fast path stops
being used, not only when it reads wrongly.
"""

from __future__ import annotations

import gzip

import numpy as np
import pytest
from _helpers import random_array
from test_native_read import NATIVE, Spy

from shardstore import precomputed as pc
from shardstore import zarr3
from shardstore.config import IOConfig
from shardstore.errors import CodecError

SELECTIONS = [(slice(None),) * 4, (slice(3, 17), slice(1, 11, 2), 4, 0), (slice(5, 6), 2, slice(None), slice(None))]


def _precomputed(root, dtype: str, config: IOConfig):
    pc.create(root, data_type=dtype, num_channels=2,
              scales=[{"size": [19, 12, 9], "chunk_size": [8, 8, 4], "key": "s0", "encoding": "raw"}])
    a = pc.open(root, mode="r+", config=config)
    data = random_array((19, 12, 9, 2), dtype, 3)
    a[...] = data
    return a, data


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "float32", "uint64"])
def test_precomputed_raw_chunks_are_read_natively(tmp_path, monkeypatch, dtype) -> None:
    a, data = _precomputed(tmp_path, dtype, NATIVE)
    python = pc.open(tmp_path, config=IOConfig(native=False))
    spy = Spy(monkeypatch)
    for sel in SELECTIONS:
        got = a[sel]
        np.testing.assert_array_equal(got, data[sel])
        np.testing.assert_array_equal(python[sel], got)
    # the whole read: 3 x 2 x 3 chunks, of which those at the upper x, y or z edge are clipped
    # (the generic path reads them); the 2 x 1 x 2 full ones go native
    spy.done = spy.back = 0
    np.testing.assert_array_equal(a[...], data)
    assert spy.done == 2 * 1 * 2


def test_a_chunk_only_gzipped_falls_back_and_a_full_size_edge_chunk_is_refused(tmp_path, monkeypatch) -> None:
    a, data = _precomputed(tmp_path, "uint16", NATIVE)
    chunk = tmp_path / "s0" / "0-8_0-8_0-4"
    chunk.with_name(chunk.name + ".gz").write_bytes(gzip.compress(chunk.read_bytes()))
    chunk.unlink()  # as CloudVolume writes it: the .gz alone
    spy = Spy(monkeypatch)
    np.testing.assert_array_equal(a[0:8, 0:8, 0:4], data[0:8, 0:8, 0:4])
    assert spy.done == 0 and spy.back == 1  # (the kernel found no file, the generic path the .gz)
    np.testing.assert_array_equal(a[...], data)
    edge = tmp_path / "s0" / "16-19_0-8_0-4"
    edge.write_bytes(bytes(8 * 8 * 4 * 2 * 2))  # a clipped chunk stored at full size
    with pytest.raises(CodecError, match="16-19_0-8_0-4"):
        pc.open(tmp_path, config=NATIVE)[...]


@pytest.mark.parametrize("endian", ["little", "big"])
def test_uncompressed_zarr3_chunks_are_read_natively(tmp_path, monkeypatch, endian) -> None:
    a = zarr3.create(str(tmp_path / "z"), shape=(13, 10, 6), dtype="int32", chunks=(4, 5, 6),
                     codecs=[{"name": "bytes", "configuration": {"endian": endian}}], mode="w", config=NATIVE)
    data = random_array((13, 10, 6), "int32", 5)
    data[:4, :5] = 0  # a chunk of fill values is not stored: the generic path fills it
    a[...] = data
    spy = Spy(monkeypatch)
    np.testing.assert_array_equal(a[...], data)
    assert spy.done == 4 * 2 - 1 and spy.back == 1
    np.testing.assert_array_equal(a[2:11, 3, ::2], data[2:11, 3, ::2])
    python = zarr3.open(str(tmp_path / "z"), config=IOConfig(native=False))
    np.testing.assert_array_equal(python[2:11, 3, ::2], data[2:11, 3, ::2])
