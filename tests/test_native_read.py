"""The native reader of uncompressed chunk files (``shardstore._rawio`` via ``core/rawread.py``).

NumPy is the oracle, and every case is also read with the native reader switched off: both
paths must agree bit for bit, including edge blocks, missing blocks, integer indices, steps
and byte-swapped dtypes. The spy counts what the native reader took, so a test fails when the
fast path silently stops being used, not only when it reads wrongly.
"""

from __future__ import annotations

import numpy as np
import pytest
from _helpers import random_array
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardstore import n5
from shardstore.core import rawread
from shardstore.errors import CodecError


def test_native_module_is_built() -> None:
    """The install builds the C module (CI has a compiler); without it raw reads are slower."""
    import shardstore._rawio  # noqa: F401

    assert rawread.available()


class Spy:
    """Counts the jobs the native reader did and the ones it handed back."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.done = self.back = 0
        real = rawread._rawio

        class Module:
            @staticmethod
            def read_boxes(*args):
                status = real.read_boxes(*args)
                self.back += sum(1 for s in status if s)
                self.done += sum(1 for s in status if not s)
                return status

        monkeypatch.setattr(rawread, "_rawio", Module)


def _python_read(a, sel, monkeypatch: pytest.MonkeyPatch) -> np.ndarray:
    with monkeypatch.context() as m:
        m.setenv("SHARDSTORE_NATIVE", "0")
        return a[sel]


@st.composite
def cases(draw):
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 12), min_size=ndim, max_size=ndim)))
    blocks = tuple(draw(st.integers(1, s + 1)) for s in shape)
    dtype = draw(st.sampled_from(["uint8", "int16", "uint32", "float32", "int64", "float64"]))
    sels = []
    for _ in range(3):
        sel = []
        for s in shape:
            if draw(st.booleans()) and s > 0:
                sel.append(draw(st.integers(0, s - 1)))
            else:
                start = draw(st.integers(0, s))
                sel.append(slice(start, draw(st.integers(start, s)), draw(st.sampled_from([1, 1, 2, 3]))))
        sels.append(tuple(sel))
    holes = draw(st.integers(0, 2))
    return shape, blocks, dtype, sels, holes, draw(st.integers(0, 2**16))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(cases())
def test_native_reads_match_numpy_and_the_python_path(tmp_path_factory, monkeypatch, case) -> None:
    shape, blocks, dtype, sels, holes, seed = case
    root = tmp_path_factory.mktemp("native")
    a = n5.create(str(root / "c.n5"), "d", shape=shape, dtype=dtype, block_size=blocks,
                  compression={"type": "raw"}, mode="w")
    data = random_array(shape, dtype, seed)
    a[...] = data
    for _ in range(holes):  # an all-zero block is not stored: a missing file reads as zeros
        first_block = tuple(slice(0, min(b, n)) for b, n in zip(blocks, shape))
        a[first_block] = 0
        data[first_block] = 0
    spy = Spy(monkeypatch)
    for sel in sels + [...]:
        got = a[sel]
        np.testing.assert_array_equal(got, data[sel])
        assert got.dtype == data.dtype
        np.testing.assert_array_equal(got, _python_read(a, sel, monkeypatch))
    # every full-size block file was read natively by the whole read (``...``) at least
    header, stored = a.driver.layout.pipeline.raw_layout
    full = len(header) + int(np.prod(blocks)) * stored.itemsize
    files = [f for f in (root / "c.n5" / "d").rglob("*") if f.is_file() and f.name != "attributes.json"]
    assert spy.done >= sum(1 for f in files if f.stat().st_size == full)
    assert spy.done + spy.back > 0 or not files


def _raw_dataset(tmp_path, shape=(40, 30, 20), blocks=(16, 16, 16), dtype="uint16"):
    a = n5.create(str(tmp_path / "c.n5"), "d", shape=shape, dtype=dtype, block_size=blocks,
                  compression={"type": "raw"}, mode="w")
    data = random_array(shape, dtype, 7)
    a[...] = data
    return a, data


def test_full_blocks_go_native_and_edge_blocks_fall_back(tmp_path, monkeypatch) -> None:
    a, data = _raw_dataset(tmp_path)
    spy = Spy(monkeypatch)
    np.testing.assert_array_equal(a[...], data)
    # 3 x 2 x 2 blocks; edge blocks (written truncated) on every axis but the first two rows
    assert spy.done == 2 * 1 * 1 and spy.back == 3 * 2 * 2 - 2
    spy.done = spy.back = 0
    np.testing.assert_array_equal(a[3:30, 1:15:2, 5], data[3:30, 1:15:2, 5])
    assert spy.done == 2 and spy.back == 0


def test_tensorstore_style_full_edge_blocks_are_read_natively(tmp_path, monkeypatch) -> None:
    """A full-size edge block (as tensorstore writes them) has the full header: it is read
    natively, and only its in-bounds part is copied."""
    a, data = _raw_dataset(tmp_path, shape=(20, 16, 16), blocks=(16, 16, 16), dtype="float32")
    header = a.driver.layout.pipeline.raw_layout[0]
    block = np.zeros((16, 16, 16), ">f4")
    block[:4] = data[16:20]
    block[4:] = 12345.0  # out of bounds: must not show up anywhere
    (tmp_path / "c.n5" / "d" / "0" / "0" / "1").write_bytes(header + block.tobytes())
    spy = Spy(monkeypatch)
    np.testing.assert_array_equal(a[...], data)
    np.testing.assert_array_equal(a[14:20, 3, :], data[14:20, 3, :])
    assert spy.done == 4 and spy.back == 0


def test_damaged_block_still_raises_naming_the_key(tmp_path) -> None:
    a, _ = _raw_dataset(tmp_path)
    path = tmp_path / "c.n5" / "d" / "0" / "0" / "0"
    raw = bytearray(path.read_bytes())
    raw[2:4] = (7).to_bytes(2, "big")  # ndim 7: the header disagrees with the dataset
    path.write_bytes(bytes(raw))
    with pytest.raises(CodecError, match="0/0/0"):
        a[...]
    path.write_bytes(bytes(raw[:100]))  # truncated
    with pytest.raises(CodecError, match="0/0/0"):
        a[0:5, 0:5, 0:5]


def test_a_directory_in_place_of_a_block_reads_as_missing(tmp_path) -> None:
    a, data = _raw_dataset(tmp_path)
    path = tmp_path / "c.n5" / "d" / "0" / "0" / "0"
    path.unlink()
    path.mkdir()
    data[:16, :16, :16] = 0
    np.testing.assert_array_equal(a[...], data)


def test_missing_blocks_honour_strict_reads(tmp_path) -> None:
    a, _ = _raw_dataset(tmp_path)
    (tmp_path / "c.n5" / "d" / "0" / "0" / "0").unlink()
    with pytest.raises(Exception, match="0/0/0"):
        a.read(..., strict=True)


def test_kernel_refuses_boxes_outside_the_chunk_or_the_output(tmp_path) -> None:
    import shardstore._rawio as rawio

    out = np.zeros((4, 4), np.uint8)
    f = tmp_path / "blk"
    f.write_bytes(b"H" + bytes(range(16)))
    ok = rawio.read_boxes(out, (4, 4), (0, 1), b"H", 1, False, [(str(f), (0, 1, 4, 0, 0, 1, 4, 0))])
    assert ok == b"\0" and out.tolist() == np.arange(16).reshape(4, 4).tolist()
    for box in [(0, 1, 5, 0, 0, 1, 4, 0), (2, 2, 2, 0, 0, 1, 4, 0), (0, 1, 4, 1, 0, 1, 4, 0), (-1, 1, 1, 0, 0, 1, 1, 0), (0, 0, 1, 0, 0, 1, 1, 0)]:
        with pytest.raises(ValueError):
            rawio.read_boxes(out, (4, 4), (0, 1), b"H", 1, False, [(str(f), box)])
    with pytest.raises(ValueError):
        rawio.read_boxes(out, (4, 4), (0, 1), b"H", 2, False, [])
    with pytest.raises(ValueError):  # a read-only result
        rawio.read_boxes(np.frombuffer(bytes(16), np.uint8).reshape(4, 4), (4, 4), (0, 1), b"H", 1, False, [])
    # another header, another size, no file: reported, out untouched
    out[...] = 9
    (tmp_path / "short").write_bytes(b"H" + bytes(15))
    (tmp_path / "other").write_bytes(b"X" + bytes(16))
    status = rawio.read_boxes(out, (4, 4), (0, 1), b"H", 1, False, [
        (str(tmp_path / "short"), (0, 1, 4, 0, 0, 1, 4, 0)),
        (str(tmp_path / "other"), (0, 1, 4, 0, 0, 1, 4, 0)),
        (str(tmp_path / "none"), (0, 1, 4, 0, 0, 1, 4, 0)),
    ])
    assert status == b"\x02\x02\x01" and (out == 9).all()


def test_byte_swapped_values(tmp_path) -> None:
    import shardstore._rawio as rawio

    values = np.arange(12, dtype=">u4").reshape(3, 4)
    f = tmp_path / "blk"
    f.write_bytes(values.tobytes())
    out = np.zeros((2, 2), "<u4")
    status = rawio.read_boxes(out, (3, 4), (0, 1), b"", 4, True, [(str(f), (1, 1, 2, 0, 1, 2, 2, 0))])
    assert status == b"\0" and out.tolist() == values.astype("<u4")[1:3, 1:4:2].tolist()
