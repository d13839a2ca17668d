"""The native reader of chunk files (``shardstore._rawio`` via ``core/rawread.py``): N5 raw
blocks, and N5 gzip blocks inflated by libdeflate.

NumPy is the oracle, and every case is also read with the native reader switched off: both
paths must agree bit for bit, including edge blocks, missing blocks, integer indices, steps
and byte-swapped dtypes. The spy counts what the native reader took, so a test fails when the
fast path silently stops being used, not only when it reads wrongly.

The arrays under test are made with ``NATIVE`` (``native=True`` whatever the environment),
so that the file tests the kernel under ``SHARDSTORE_NATIVE=0`` too (CI runs it so).
"""

from __future__ import annotations

import gzip
import os
import zlib

import numpy as np
import pytest
from _helpers import examples, random_array
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardstore import n5
from shardstore.config import IOConfig
from shardstore.core import rawread
from shardstore.errors import CodecError

#: the environment's settings, but the native reader on (``SHARDSTORE_NATIVE=0`` turns the
#: default off; these tests are about that reader)
NATIVE = IOConfig.from_env().replace(native=True)


def test_native_module_is_built() -> None:
    """The install builds the C module where there is a compiler (CI has one and says so with
    SHARDSTORE_REQUIRE_NATIVE=1); without it raw reads are slower, and this test skips."""
    if not rawread.available() and os.environ.get("SHARDSTORE_REQUIRE_NATIVE") != "1":
        pytest.skip("built without a C compiler (SHARDSTORE_REQUIRE_NATIVE is not set)")
    import shardstore._rawio  # noqa: F401

    assert rawread.available()


class Spy:
    """Counts the jobs the native reader did and the ones it handed back."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.done = self.back = 0
        real = rawread._rawio

        class Module:
            set_libdeflate = staticmethod(real.set_libdeflate)

            @staticmethod
            def read_boxes(*args):
                status = real.read_boxes(*args)
                self.back += sum(1 for s in status if s)
                self.done += sum(1 for s in status if not s)
                return status

        monkeypatch.setattr(rawread, "_rawio", Module)


def _python_reader(root) -> n5.N5Array:
    """A second handle on the dataset that reads everything through the generic path."""
    return n5.open(str(root), mode="r", path="d", config=IOConfig(native=False))


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
    compression = draw(st.sampled_from(COMPRESSIONS))
    return shape, blocks, dtype, sels, holes, draw(st.integers(0, 2**16)), compression


#: what the native reader takes: raw blocks, and gzip blocks holding a gzip or a zlib stream
COMPRESSIONS = [
    {"type": "raw"},
    {"type": "gzip", "level": 1},
    {"type": "gzip", "level": 6, "useZlib": True},
]


def _native_layout(a):
    pipeline = a.driver.layout.pipeline
    return pipeline.raw_layout or pipeline.inflate_layout


@settings(max_examples=examples(90), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(cases())
def test_native_reads_match_numpy_and_the_python_path(tmp_path_factory, monkeypatch, case) -> None:
    shape, blocks, dtype, sels, holes, seed, compression = case
    root = tmp_path_factory.mktemp("native")
    a = n5.create(str(root / "c.n5"), "d", shape=shape, dtype=dtype, block_size=blocks,
                  compression=compression, mode="w", config=NATIVE)
    data = random_array(shape, dtype, seed)
    a[...] = data
    for _ in range(holes):  # an all-zero block is not stored: a missing file reads as zeros
        first_block = tuple(slice(0, min(b, n)) for b, n in zip(blocks, shape))
        a[first_block] = 0
        data[first_block] = 0
    spy = Spy(monkeypatch)
    python = _python_reader(root / "c.n5")
    for sel in sels + [...]:
        got = a[sel]
        np.testing.assert_array_equal(got, data[sel])
        assert got.dtype == data.dtype
        calls = spy.done + spy.back
        np.testing.assert_array_equal(got, python[sel])
        assert spy.done + spy.back == calls  # the reference really is the Python path
    # every full-size block file was read natively by the whole read (``...``) at least
    header = _native_layout(a)[0]
    files = [f for f in (root / "c.n5" / "d").rglob("*") if f.is_file() and f.name != "attributes.json"]
    assert spy.done >= sum(1 for f in files if f.read_bytes().startswith(header))
    assert spy.done + spy.back > 0 or not files


def _raw_dataset(tmp_path, shape=(40, 30, 20), blocks=(16, 16, 16), dtype="uint16"):
    a = n5.create(str(tmp_path / "c.n5"), "d", shape=shape, dtype=dtype, block_size=blocks,
                  compression={"type": "raw"}, mode="w", config=NATIVE)
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


def test_blocks_without_a_file_are_filled_without_asking_the_store_again(tmp_path, monkeypatch) -> None:
    """A local file store says a key without a file has no value: the chunks the kernel found
    no file for get the fill value at once (the generic path asked the store again, which
    made reads of a region never written 2.4x slower than without the native reader)."""
    from shardstore.store import LocalStore

    a = n5.create(str(tmp_path / "c.n5"), "d", shape=(40, 30, 20), dtype="uint16", block_size=(16, 16, 16),
                  compression={"type": "raw"}, mode="w", config=NATIVE)
    a[:16, :16, :16] = 7
    asked: list[str] = []
    real = LocalStore.get_transient_sync
    monkeypatch.setattr(LocalStore, "get_transient_sync", lambda self, key, keep: asked.append(key) or real(self, key, keep))
    spy = Spy(monkeypatch)
    expected = np.zeros((40, 30, 20), "uint16")
    expected[:16, :16, :16] = 7
    np.testing.assert_array_equal(a[:32, :32, :16], expected[:32, :32, :16])
    assert spy.done == 1 and spy.back == 3 and asked == []  # three blocks missing, none asked for
    # (names one of the missing blocks: which one first depends on the threads the read uses)
    with pytest.raises(Exception, match="0/1/0|0/0/1|0/1/1"):
        a.read((slice(0, 32), slice(0, 32), slice(0, 16)), strict=True)


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


# -- gzip blocks: inflated natively ---------------------------------------------------------


def _gzip_dataset(tmp_path, compression=None, shape=(40, 30, 20), blocks=(16, 16, 16), dtype="uint16"):
    a = n5.create(str(tmp_path / "c.n5"), "d", shape=shape, dtype=dtype, block_size=blocks,
                  compression=compression or {"type": "gzip", "level": 1}, mode="w", config=NATIVE)
    data = random_array(shape, dtype, 7)
    a[...] = data
    return a, data


def test_libdeflate_is_found() -> None:
    """imagecodecs (a dependency) ships libdeflate: gzip reads must not quietly lose the
    native path because the library was not found."""
    assert rawread.inflate_available()


@pytest.mark.parametrize("compression", COMPRESSIONS[1:])
def test_gzip_blocks_go_native_and_edge_blocks_fall_back(tmp_path, monkeypatch, compression) -> None:
    a, data = _gzip_dataset(tmp_path, compression)
    spy = Spy(monkeypatch)
    np.testing.assert_array_equal(a[...], data)
    assert spy.done == 2 and spy.back == 3 * 2 * 2 - 2  # as for raw blocks above
    spy.done = spy.back = 0
    np.testing.assert_array_equal(a[3:30, 1:15:2, 5], data[3:30, 1:15:2, 5])
    assert spy.done == 2 and spy.back == 0


def test_gzip_streams_the_kernel_does_not_take_still_read_or_raise(tmp_path, monkeypatch) -> None:
    """Several gzip members, zero padding, a flipped payload byte (CRC), a truncated stream,
    a stream that decodes short: the native reader hands each back, and the Python path
    reads it (members, padding) or raises naming the block."""
    a, data = _gzip_dataset(tmp_path)
    header = _native_layout(a)[0]
    path = tmp_path / "c.n5" / "d" / "0" / "0" / "0"
    payload = data[:16, :16, :16].astype(">u2").tobytes()
    gz = gzip.compress(payload)
    spy = Spy(monkeypatch)
    for stream in [gzip.compress(payload[:5000]) + gzip.compress(payload[5000:]), gz + bytes(16)]:
        path.write_bytes(header + stream)
        np.testing.assert_array_equal(a[:16, :16, :16], data[:16, :16, :16])
    assert spy.back == 2 and spy.done == 0
    flipped = bytearray(gz)
    flipped[len(gz) // 2] ^= 0x01
    for stream in [bytes(flipped), gz[:-9], gzip.compress(payload[:-2])]:
        path.write_bytes(header + stream)
        with pytest.raises(CodecError, match="0/0/0"):
            a[:16, :16, :16]
    assert spy.back == 5 and spy.done == 0


def test_kernel_inflates_gzip_and_zlib_and_reports_the_rest(tmp_path) -> None:
    import shardstore._rawio as rawio

    assert rawread.inflate_available()
    values = np.arange(64, dtype=np.uint8).reshape(8, 8)
    box = (0, 1, 8, 0, 0, 1, 8, 0)
    files = {
        "gzip": b"HD" + gzip.compress(values.tobytes()),
        "zlib": b"HD" + zlib.compress(values.tobytes()),
        "short": b"HD" + gzip.compress(values.tobytes()[:-1]),
        "long": b"HD" + gzip.compress(values.tobytes() + b"x"),
        "trailing": b"HD" + gzip.compress(values.tobytes()) + b"junk",
        "header": b"XX" + gzip.compress(values.tobytes()),
        "huge": b"HD" + bytes(64 + 64 // 8 + 4096),  # past any stream for 64 bytes: not read
        "empty": b"HD",
    }
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    for name in ["gzip", "zlib"]:
        out = np.zeros((8, 8), np.uint8)
        assert rawio.read_boxes(out, (8, 8), (0, 1), b"HD", 1, False, [(str(tmp_path / name), box)], True) == b"\0"
        np.testing.assert_array_equal(out, values)
    out = np.zeros((2, 3), np.uint8)  # a strided box out of an inflated chunk
    status = rawio.read_boxes(out, (8, 8), (0, 1), b"HD", 1, False, [(str(tmp_path / "gzip"), (5, 2, 2, 0, 1, 3, 3, 0))], True)
    assert status == b"\0" and out.tolist() == values[5:9:2, 1:9:3].tolist()
    out = np.full((8, 8), 9, np.uint8)
    rest = ["short", "long", "trailing", "header", "huge", "empty"]
    status = rawio.read_boxes(out, (8, 8), (0, 1), b"HD", 1, False, [(str(tmp_path / n), box) for n in rest + ["none"]], True)
    assert status == b"\x02" * len(rest) + b"\x01" and (out == 9).all()


def test_the_block_files_a_read_fetches_are_asked_of_a_cold_disk_at_once(tmp_path, monkeypatch) -> None:
    """On a cold disk (the page cache probe says so), the block files a read of several
    blocks fetches are all advised before the first is read, and a read the chunk cache
    serves but for one block advises that block's file before the cached blocks are copied;
    a read whose files are cached advises nothing. The values read are the volume's."""
    from shardstore.core import io as core_io
    from shardstore.store import open_values

    a, data = _raw_dataset(tmp_path, shape=(48, 48, 64))
    events: list[str] = []
    monkeypatch.setattr(open_values.os, "posix_fadvise",
                        lambda fd, offset, n, advice: events.append(f"advise {os.readlink(f'/proc/self/fd/{fd}')}"))
    real_place = core_io.place_hits

    def place(hits, *args):
        events.append(f"hits {len(hits)}")
        return real_place(hits, *args)

    def reader() -> n5.N5Array:
        return n5.open(str(tmp_path / "c.n5"), path="d", mode="r", config=IOConfig(native=True, chunk_cache_bytes=1 << 24))

    monkeypatch.setattr(core_io, "place_hits", place)
    np.testing.assert_array_equal(reader()[0:40, 0:40, 0:20], data[0:40, 0:40, 0:20])  # 3 x 3 x 2 blocks, just written
    assert events == []
    monkeypatch.setattr(open_values, "_uncached", lambda fd, offset: True)  # (as on a cold disk)
    b = reader()
    np.testing.assert_array_equal(b[0:40, 0:40, 0:20], data[0:40, 0:40, 0:20])
    assert len(events) == 18 and all(e.startswith("advise") for e in events)
    events.clear()
    np.testing.assert_array_equal(b[0:40, 0:40, 0:40], data[0:40, 0:40, 0:40])  # 9 blocks more, 18 cached
    assert [e.split()[0] for e in events] == ["advise"] * 9 + ["hits"] and events[-1] == "hits 18"
    events.clear()
    np.testing.assert_array_equal(b[0:40, 0:40, 10:40], data[0:40, 0:40, 10:40])  # all cached
    assert events == ["hits 27"]
    events.clear()
    np.testing.assert_array_equal(b[40:45, 40:45, 40:50], data[40:45, 40:45, 40:50])  # one cached, one not
    assert [e.split()[0] for e in events] == ["advise", "hits"] and events[-1] == "hits 1"
