"""The native writer of uncompressed chunk files (``shardstore._rawio`` via ``core/rawwrite.py``).

NumPy is the oracle, and every case is also written with native code switched off
(``IOConfig(native=False)``) into a second container: both containers must then hold the same
files, byte for byte (all-zero blocks deleted, edge blocks clipped, no temp files left). The spy
counts what the native writer did, so a test fails when the fast path silently stops being
used, not only when it writes wrongly.
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

import numpy as np
import pytest
from _helpers import examples, random_array
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardstore import n5
from shardstore.config import IOConfig
from shardstore.core import rawwrite
from shardstore.errors import ReadOnlyError, StoreError
from shardstore.store.wrappers import PrefixStore, ReadOnlyStore

OK, FALLBACK, FILL, NODIR = 0, 2, 3, 4


def test_native_writer_is_built() -> None:
    """The install builds the C module with ``write_boxes`` (CI has a compiler)."""
    import shardstore._rawio as rawio

    assert hasattr(rawio, "write_boxes")
    assert rawwrite.available()


class Spy:
    """Records the status of every job the native writer ran, call by call."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[bytes] = []
        real = rawwrite._rawio

        class Module:
            read_boxes = staticmethod(real.read_boxes)

            @staticmethod
            def write_boxes(*args):
                status = real.write_boxes(*args)
                self.calls.append(status)
                return status

        monkeypatch.setattr(rawwrite, "_rawio", Module)

    def count(self, status: int | None = None) -> int:
        return sum(1 for call in self.calls for s in call if status is None or s == status)

    def reset(self) -> None:
        self.calls.clear()


def _files(root: Path) -> dict[str, bytes | None]:
    """Every entry under ``root``: file contents, None for directories."""
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))
    }


def _no_temp_files(root: Path) -> None:
    left = [str(p) for p in root.rglob(".*")]
    assert not left, f"temp files left behind: {left}"


#: the reference arrays: written through the generic path
GENERIC = IOConfig(native=False)
#: the arrays under test: the environment's settings, but the native writer on whatever
#: ``SHARDSTORE_NATIVE`` says (these tests are about that writer)
NATIVE = IOConfig.from_env().replace(native=True)


def _create(path: Path, shape, blocks, dtype, config: IOConfig | None = None) -> n5.N5Array:
    return n5.create(str(path), "d", shape=shape, dtype=dtype, block_size=blocks, compression={"type": "raw"}, mode="w",
                     config=config or NATIVE)


def _full_blocks(shape, blocks) -> int:
    return math.prod(s // b for s, b in zip(shape, blocks))


# -- property test: native and Python paths agree, byte for byte ---------------------------------
DTYPES = ["uint8", "int8", "int16", ">u2", "uint32", ">i4", "float32", ">f4", "int64", "uint64", "float64", ">f8"]
KINDS = ["c", "c", "zero", "scalar", "strided", "reversed", "fortran", "broadcast", "swapped"]


def _value(kind: str, shape: tuple[int, ...], dtype: np.dtype, seed: int):
    """A value for a selection of ``shape``, laid out as ``kind`` says."""
    nd = len(shape)
    if kind == "zero":
        return 0
    if kind == "scalar":  # broadcast: zero strides on every dimension
        return random_array((1,), dtype.str, seed)[0]
    if kind == "strided":  # every other element of a larger array
        big = random_array(tuple(2 * n + 1 for n in shape), dtype.str, seed)
        return big[(slice(1, None, 2),) * nd]
    if kind == "reversed":  # negative strides on every dimension
        return random_array(shape, dtype.str, seed)[(slice(None, None, -1),) * nd]
    if kind == "fortran":
        return np.asfortranarray(random_array(shape, dtype.str, seed))
    if kind == "broadcast":  # zero strides on some dimensions only
        part = random_array(shape, dtype.str, seed)
        return part[tuple(slice(0, 1) if d % 2 == 0 else slice(None) for d in range(nd))]
    if kind == "swapped":  # the other byte order: the array converts it first
        return random_array(shape, dtype.str, seed).astype(dtype.newbyteorder("S"))
    data = random_array(shape, dtype.str, seed)
    if data.size > 1 and seed % 3 == 0:
        data[(slice(0, max(1, shape[0] // 2)),) + (slice(None),) * (nd - 1)] = 0  # zero blocks
    return data


@st.composite
def write_cases(draw):
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 10), min_size=ndim, max_size=ndim)))
    blocks = tuple(draw(st.integers(1, s + 1)) for s in shape)
    dtype = draw(st.sampled_from(DTYPES))
    writes = [(..., draw(st.sampled_from(KINDS)), draw(st.integers(0, 2**16)))]
    for _ in range(draw(st.integers(0, 3))):
        sel = []
        for s in shape:
            start = draw(st.integers(0, s - 1))
            sel.append(slice(start, draw(st.integers(start + 1, s)), draw(st.sampled_from([1, 1, 1, 2]))))
        writes.append((tuple(sel), draw(st.sampled_from(KINDS)), draw(st.integers(0, 2**16))))
    return shape, blocks, dtype, writes


@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(write_cases())
def test_native_writes_match_numpy_and_the_python_path(tmp_path_factory, monkeypatch, case) -> None:
    shape, blocks, dtype, writes = case
    root = tmp_path_factory.mktemp("nw")
    a = _create(root / "native.n5", shape, blocks, dtype)
    b = _create(root / "python.n5", shape, blocks, dtype, GENERIC)
    expected = np.zeros(shape, a.dtype)
    spy = Spy(monkeypatch)
    for n, (sel, kind, seed) in enumerate(writes):
        value = _value(kind, expected[sel].shape, np.dtype(a.dtype), seed)
        expected[sel] = value
        spy.reset()
        a[sel] = value
        if n == 0:  # the whole array: every full-size block goes native (written or deleted;
            # Fortran order: each laid out in C order first, by the two-pass copy)
            assert spy.count(OK) + spy.count(FILL) == _full_blocks(shape, blocks)
            assert spy.count(FALLBACK) == 0
        calls = len(spy.calls)
        b[sel] = value
        assert len(spy.calls) == calls  # the reference really is the Python path
        got = a[...]
        assert got.dtype == expected.dtype
        assert got.tobytes() == expected.tobytes()  # bit for bit: NaN payloads, -0.0
    assert _files(root / "native.n5") == _files(root / "python.n5")
    _no_temp_files(root)


# -- which blocks go native --------------------------------------------------------------------
def _dataset(tmp_path: Path, shape=(40, 30, 20), blocks=(16, 16, 16), dtype="uint16", name="c.n5", config=None):
    a = _create(tmp_path / name, shape, blocks, dtype, config)
    data = random_array(shape, dtype, 7)
    return a, data


def test_whole_full_blocks_go_native_and_the_rest_falls_back(tmp_path, monkeypatch) -> None:
    a, data = _dataset(tmp_path)
    spy = Spy(monkeypatch)
    a[...] = data
    # 3 x 2 x 2 blocks, of which 2 x 1 x 1 full-size; the clipped edge blocks take the Python path
    assert spy.count(OK) == 2 and spy.count(FALLBACK) == spy.count(FILL) == 0
    np.testing.assert_array_equal(a[...], data)
    spy.reset()
    a[1:15, :, :] = 5  # no block written whole: read-modify-write in Python
    data[1:15] = 5
    assert spy.count() == 0
    spy.reset()
    a[16:32, 0:16, 0:16] = data[16:32, 0:16, 0:16][::-1]  # one whole block from a reversed source
    data[16:32, 0:16, 0:16] = data[16:32, 0:16, 0:16][::-1].copy()
    assert spy.calls == [b"\0"]
    np.testing.assert_array_equal(a[...], data)
    _no_temp_files(tmp_path)


def test_integer_indices_and_reversed_selections_fall_back(tmp_path, monkeypatch) -> None:
    a, data = _dataset(tmp_path, shape=(1, 32, 32), blocks=(1, 16, 16))
    a[...] = data
    spy = Spy(monkeypatch)
    a[0] = data[0] + 1  # an integer index drops an axis: the Python path
    a[:, ::-1, :] = data  # out selections of step -1: the Python path
    assert spy.count() == 0
    np.testing.assert_array_equal(a[...], data[:, ::-1, :])


def test_all_zero_blocks_delete_existing_files(tmp_path, monkeypatch) -> None:
    a, data = _dataset(tmp_path, shape=(32, 32), blocks=(16, 16), name="a.n5")
    b, _ = _dataset(tmp_path, shape=(32, 32), blocks=(16, 16), name="b.n5")
    b_python = n5.open(str(tmp_path / "b.n5"), mode="r+", path="d", config=GENERIC)
    a[...] = data
    b[...] = data
    block = tmp_path / "a.n5" / "d" / "0" / "1"  # N5 paths run x first: block (1, 0)
    assert block.is_file()
    spy = Spy(monkeypatch)
    a[16:32, 0:16] = 0
    assert spy.calls == [bytes([FILL])]
    assert not block.exists()
    b_python[16:32, 0:16] = 0
    data[16:32, 0:16] = 0
    np.testing.assert_array_equal(a[...], data)
    assert _files(tmp_path / "a.n5") == _files(tmp_path / "b.n5")
    # -0.0 is not the fill value's bits: such a block is stored
    f = _create(tmp_path / "f.n5", (4,), (4,), "float32")
    f[...] = -0.0
    assert (tmp_path / "f.n5" / "d" / "0").is_file()
    assert np.signbit(f[...]).all()


def test_missing_directories_are_made(tmp_path, monkeypatch) -> None:
    a, data = _dataset(tmp_path, shape=(32, 32, 32), blocks=(16, 16, 16))
    spy = Spy(monkeypatch)
    a[...] = data
    # the first try finds no block directories; they are made and the blocks written natively
    assert spy.count(NODIR) > 0 and spy.count(OK) == 8 and spy.count(FALLBACK) == 0
    np.testing.assert_array_equal(a[...], data)
    _no_temp_files(tmp_path)


# -- failures: the Python path words them ------------------------------------------------------
def _both_fail(tmp_path: Path, monkeypatch, obstacle) -> tuple[str, str]:
    """Write a whole volume natively and in Python over the same obstacle; the two errors."""
    messages = []
    for name, native in (("native.n5", True), ("python.n5", False)):
        a, data = _dataset(tmp_path, shape=(32, 32), blocks=(16, 16), name=name, config=IOConfig(native=native))
        obstacle(tmp_path / name / "d")
        with pytest.raises(StoreError) as e:
            a[...] = data
        messages.append(str(e.value).replace(str(tmp_path / name), "ROOT"))
    _no_temp_files(tmp_path)
    return messages[0], messages[1]


def test_a_directory_in_place_of_a_block_raises_the_python_paths_error(tmp_path, monkeypatch) -> None:
    def obstacle(d: Path) -> None:
        (d / "1" / "0").mkdir(parents=True)
        (d / "1" / "0" / "keep").write_bytes(b"x")

    spy = Spy(monkeypatch)
    native, python = _both_fail(tmp_path, monkeypatch, obstacle)
    assert spy.count(FALLBACK) >= 1  # the native writer met it and handed it back
    assert native == python and "key 'd/1/0'" in native
    assert (tmp_path / "native.n5" / "d" / "1" / "0" / "keep").read_bytes() == b"x"


def test_a_file_in_place_of_a_directory_raises_the_python_paths_error(tmp_path, monkeypatch) -> None:
    def obstacle(d: Path) -> None:
        (d / "1").write_bytes(b"not a directory")

    native, python = _both_fail(tmp_path, monkeypatch, obstacle)
    assert native == python and "key 'd/1/" in native


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes anywhere")
def test_a_read_only_directory_raises_the_python_paths_error_and_keeps_the_block(tmp_path, monkeypatch) -> None:
    a, data = _dataset(tmp_path, shape=(16, 16), blocks=(16, 16))
    a[...] = data
    block = tmp_path / "c.n5" / "d" / "0" / "0"
    old = block.read_bytes()
    os.chmod(block.parent, 0o555)
    try:
        with pytest.raises(StoreError, match="key 'd/0/0'"):
            a[...] = data + 1
        assert block.read_bytes() == old  # no torn block: the old one stays
    finally:
        os.chmod(block.parent, 0o755)
    _no_temp_files(tmp_path)


# -- the gate: stores and layouts the native writer must not touch -----------------------------
def test_read_only_stores_are_never_written(tmp_path, monkeypatch) -> None:
    a, data = _dataset(tmp_path, shape=(16, 16), blocks=(16, 16))
    a[...] = data
    layout = a.driver.layout
    value = np.ones((16, 16), np.uint16)
    assert rawwrite.raw_writer(layout, value) is not None
    for store in (ReadOnlyStore(layout.store), ReadOnlyStore(PrefixStore(layout.store, "d"))):
        assert store.file_paths is not None  # (it could: the gate must say no)
        assert rawwrite.raw_writer(dataclasses.replace(layout, store=store), value) is None
    r = n5.open(str(tmp_path / "c.n5"), mode="r", path="d", config=NATIVE)
    spy = Spy(monkeypatch)
    with pytest.raises(ReadOnlyError):
        r[...] = value
    assert spy.count() == 0
    np.testing.assert_array_equal(a[...], data)


def test_layouts_the_native_writer_declines(tmp_path, monkeypatch) -> None:
    a, _ = _dataset(tmp_path, shape=(16, 16), blocks=(8, 8), dtype="float32")
    layout = a.driver.layout
    value = np.ones((16, 16), np.float32)
    assert rawwrite.raw_writer(layout, value) is not None
    negative_zero = dataclasses.replace(layout.spec, fill_value=np.float32(-0.0))
    assert rawwrite.raw_writer(dataclasses.replace(layout, spec=negative_zero), value) is None
    nan = dataclasses.replace(layout.spec, fill_value=np.float32("nan"))
    assert rawwrite.raw_writer(dataclasses.replace(layout, spec=nan), value) is None
    assert rawwrite.raw_writer(dataclasses.replace(layout, store_fill_chunks=True), value) is None
    assert rawwrite.raw_writer(layout, value.astype(np.float64)) is None
    assert rawwrite.raw_writer(layout, value[0]) is None
    g = n5.create(str(tmp_path / "g.n5"), "d", shape=(16, 16), dtype="float32", block_size=(8, 8),
                  compression={"type": "gzip"}, mode="w", config=NATIVE)
    assert rawwrite.raw_writer(g.driver.layout, value) is None
    assert rawwrite.raw_writer(dataclasses.replace(layout, config=GENERIC), value) is None


# -- the kernel itself -------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["uint8", "int16", "uint32", "float64"])
def test_kernel_gathers_any_strides_and_swaps(tmp_path, dtype) -> None:
    import shardstore._rawio as rawio

    base = random_array((7, 9, 11), dtype, 3)
    sources = {
        "c": base,
        "reversed": base[::-1, :, ::-1],
        "strided": base[::2, 1::3, ::-2],
        "fortran": np.asfortranarray(base),
        "broadcast": np.broadcast_to(base[:1, :, :1], base.shape),
        "scalar": np.broadcast_to(base[1, 2, 3], base.shape),
    }
    for name, src in sources.items():
        for swap in (False, True):
            box = (2, 3, 2)
            origin = [s - b for s, b in zip(src.shape, box)]  # the last box: bounds are exact
            path = tmp_path / f"{name}-{swap}"
            status = rawio.write_boxes(src, box, b"HEAD", src.itemsize, swap, [(str(tmp_path / f".{name}.tmp"), str(path), origin)])
            part = src[tuple(slice(o, o + b) for o, b in zip(origin, box))]
            if not part.any():
                assert status == bytes([FILL]) and not path.exists()
                continue
            want = part.astype(part.dtype.newbyteorder("S") if swap else part.dtype).tobytes()
            assert status == b"\0" and path.read_bytes() == b"HEAD" + want, (name, swap)
    _no_temp_files(tmp_path)


def test_kernel_reports_failures_and_keeps_old_files(tmp_path) -> None:
    import shardstore._rawio as rawio

    src = np.arange(1, 17, dtype=np.uint8).reshape(4, 4)
    old = tmp_path / "old"
    old.write_bytes(b"old block")
    (tmp_path / "dir").mkdir()
    (tmp_path / ".taken.tmp").write_bytes(b"someone else's")
    status = rawio.write_boxes(src, (4, 4), b"", 1, False, [
        (str(tmp_path / "missing" / ".t.tmp"), str(old), (0, 0)),  # no directory for the temp file
        (str(tmp_path / ".d.tmp"), str(tmp_path / "dir"), (0, 0)),  # the target is a directory
        (str(tmp_path / ".taken.tmp"), str(old), (0, 0)),  # the temp name exists (O_EXCL)
        (str(tmp_path / ".z.tmp"), str(old), (0, 0)),  # written
    ])
    assert status == bytes([NODIR, FALLBACK, FALLBACK, OK])
    assert old.read_bytes() == src.tobytes()
    assert (tmp_path / ".taken.tmp").read_bytes() == b"someone else's"  # never removed
    assert sorted(p.name for p in tmp_path.iterdir()) == [".taken.tmp", "dir", "old"]
    assert not any((tmp_path / "dir").iterdir())


def test_kernel_refuses_misuse(tmp_path) -> None:
    import shardstore._rawio as rawio

    src = np.zeros((4, 4), np.uint16)
    t, p = str(tmp_path / ".t.tmp"), str(tmp_path / "p")
    assert rawio.write_boxes(src, (2, 2), b"", 2, True, []) == b""
    for origin in [(3, 0), (0, 3), (-1, 0), (0,), (0, 0, 0)]:
        with pytest.raises(ValueError):
            rawio.write_boxes(src, (2, 2), b"", 2, False, [(t, p, origin)])
    for shape in [(2,), (2, 2, 2), (0, 2), (5, 2)]:
        with pytest.raises(ValueError):
            rawio.write_boxes(src, shape, b"", 2, False, [(t, p, (0, 0))])
    with pytest.raises(ValueError):  # itemsize of another dtype
        rawio.write_boxes(src, (2, 2), b"", 4, False, [])
    with pytest.raises(TypeError):
        rawio.write_boxes(src, (2, 2), b"", 2, False, [(t, p)])
    with pytest.raises(TypeError):
        rawio.write_boxes(src, (2, 2), b"", 2, False, [(t, p, ("a", 0))])
    with pytest.raises(TypeError):
        rawio.write_boxes(src, (2, 2), "not bytes", 2, False, [])
    with pytest.raises(TypeError):
        rawio.write_boxes(object(), (2, 2), b"", 2, False, [])
    assert not list(tmp_path.iterdir())
