"""The native reader of shard files (``shardstore._rawio.read_spans`` via ``core/spanread.py``):
Zarr v3 inner chunks stored raw or compressed with zstd, blosc or gzip, read, decoded and
placed in one call per shard file.

Every read runs three ways: natively, with ``IOConfig(native=False)`` and as if the extension
had not been built (a ``pip install`` without a compiler). NumPy is the oracle and the three
must agree, down to the wording of the ``CodecError`` a damaged chunk raises. A spy counts what
the native call took, so that a test fails when the fast path silently stops being used.
"""

from __future__ import annotations

import gzip
import os
import struct
import threading
from pathlib import Path
from typing import Any

import google_crc32c
import numpy as np
import pytest
import zstandard
from _helpers import examples, random_array
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardstore import precomputed, zarr3
from shardstore.config import IOConfig
from shardstore.core import rawread, spanread
from shardstore.errors import ChunkNotFoundError, CodecError

BYTES_LE = {"name": "bytes", "configuration": {"endian": "little"}}
BYTES_BE = {"name": "bytes", "configuration": {"endian": "big"}}
#: inner codec chains the native reader decodes itself
CODECS = {
    "raw": [BYTES_LE],
    "raw-big": [BYTES_BE],
    "zstd": [BYTES_LE, {"name": "zstd", "configuration": {"level": 3, "checksum": False}}],
    "zstd-checksum-big": [BYTES_BE, {"name": "zstd", "configuration": {"level": 1, "checksum": True}}],
    "blosc-lz4": [BYTES_LE, {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 1, "blocksize": 0}}],
    "blosc-zstd-bitshuffle": [BYTES_LE, {"name": "blosc", "configuration": {"cname": "zstd", "clevel": 3, "shuffle": "bitshuffle", "blocksize": 0}}],
    "gzip": [BYTES_LE, {"name": "gzip", "configuration": {"level": 1}}],
}
#: how a test reads: natively, through the generic path, or without the extension at all
MODES = ["native", "generic", "unbuilt"]


class Spy:
    """Counts the chunks the native call read and the ones it handed back."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.done = self.back = 0
        real = spanread._rawio

        class Module:
            set_decoders = staticmethod(real.set_decoders)
            decoders = staticmethod(real.decoders)

            @staticmethod
            def read_spans(*args):
                status = real.read_spans(*args)
                self.back += sum(1 for s in status if s)
                self.done += sum(1 for s in status if not s)
                return status

        monkeypatch.setattr(spanread, "_rawio", Module)


def _open(root: Path, mode: str, monkeypatch: pytest.MonkeyPatch):
    if mode == "unbuilt":  # as installed without a C compiler
        monkeypatch.setattr(spanread, "_rawio", None)
        monkeypatch.setattr(rawread, "_rawio", None)
    return zarr3.open(str(root), mode="r", config=IOConfig(native=mode == "native"))


def _create(root: Path, codecs: list, shape=(40, 36, 20), chunks=(8, 12, 10), shards=(16, 24, 20), dtype="uint16",
            index_location: str = "end"):
    return zarr3.create(str(root), shape=shape, dtype=dtype, chunks=chunks, shards=shards, codecs=codecs,
                        index_location=index_location, mode="w")


def test_the_decoders_are_loaded() -> None:
    """With the extension built, every decoder library is found (imagecodecs ships them)."""
    if not rawread.available():
        pytest.skip("built without a C compiler")
    assert spanread.loaded_codecs() == tuple(spanread.CODECS.values())


def test_ci_builds_the_extension() -> None:
    """CI (``.ci/run`` sets SHARDSTORE_REQUIRE_NATIVE=1) must have built the C module and found
    every decoder: else the native paths would silently go untested there."""
    if os.environ.get("SHARDSTORE_REQUIRE_NATIVE") != "1":
        pytest.skip("SHARDSTORE_REQUIRE_NATIVE is not set")
    import shardstore._rawio  # noqa: F401

    assert spanread.loaded_codecs() == tuple(spanread.CODECS.values())


@pytest.mark.parametrize("name", sorted(CODECS))
def test_the_pipeline_declares_what_goes_native(name: str, tmp_path: Path) -> None:
    a = _create(tmp_path, CODECS[name], dtype="int32")
    layout = a.driver.layout
    decoder, stored, order = layout.pipeline.native_layout(layout.chunk_spec)
    assert decoder == {"raw": None, "raw-big": None, "gzip": "gzip"}.get(name, name.split("-")[0])
    assert stored == np.dtype(">i4" if name.endswith("big") else "<i4") and order == "C"
    assert layout.store.file_spans is layout.store


@pytest.mark.parametrize("name", sorted(CODECS))
@pytest.mark.parametrize("index_location", ["end", "start"])
def test_reads_match_numpy_on_every_path(name: str, index_location: str, tmp_path: Path, monkeypatch) -> None:
    data = random_array((40, 36, 20), "uint16", 3)
    a = _create(tmp_path, CODECS[name], index_location=index_location)
    a[...] = data
    a[0:8, 0:12, 0:10] = 0  # an all-zero chunk is not stored: its index entry is empty
    data[0:8, 0:12, 0:10] = 0
    sels = [..., np.s_[3:37, 5:30, 1:19], np.s_[7, 2:35:3, :], np.s_[::3, 11, 4:16:2], np.s_[16:32, 24:36, 0:20]]
    results = {}
    for mode in MODES:
        with monkeypatch.context() as m:
            spy = Spy(m) if mode == "native" else None
            b = _open(tmp_path, mode, m)
            results[mode] = [b[sel] for sel in sels]
            # index arrays go the generic way, beside native reads of the other chunks
            np.testing.assert_array_equal(b.oindex[[1, 30, 9], 3:7, 5], data[[1, 30, 9], 3:7, 5])
            if spy is not None:  # every stored chunk of the whole read went native, none back
                assert spy.done >= 5 * 3 * 2 - 1 and spy.back == 0
    for mode, got in results.items():
        for sel, g in zip(sels, got):
            np.testing.assert_array_equal(g, data[sel], err_msg=f"{mode} {sel}")


@pytest.mark.parametrize("dtype", ["int8", "uint32", "float64", "complex64"])
def test_dtypes_and_byte_orders(dtype: str, tmp_path: Path, monkeypatch) -> None:
    data = random_array((20, 30), dtype, 5)
    for codecs in ([BYTES_BE, CODECS["zstd"][1]], [BYTES_LE, CODECS["blosc-lz4"][1]]):
        a = zarr3.create(str(tmp_path), shape=data.shape, dtype=dtype, chunks=(5, 10), shards=(10, 30), codecs=codecs,
                         mode="w")
        a[...] = data
        with monkeypatch.context() as m:
            spy = Spy(m)
            b = _open(tmp_path, "native", m)
            np.testing.assert_array_equal(b[...], data)
            np.testing.assert_array_equal(b[3:17, 2:29:4], data[3:17, 2:29:4])
            # big-endian complex goes the generic way (the kernel swaps whole items)
            big_complex = dtype.startswith("complex") and codecs[0] is BYTES_BE
            assert (spy.done == 0) == big_complex


def _rewrite_chunk(shard: Path, i: int, stored: bytes | None) -> None:
    """Replace inner chunk ``i`` of a shard whose index (``bytes`` + ``crc32c``) is at its
    end: ``stored`` appended before a new index that points at it (None: an empty entry)."""
    raw = shard.read_bytes()
    for n in range(1, len(raw) // 16 + 1):  # the index's length: where its checksum matches
        index, crc = raw[-16 * n - 4 : -4], raw[-4:]
        if struct.pack("<I", google_crc32c.value(index)) == crc:
            break
    data = raw[: -16 * n - 4]
    entries = list(struct.unpack(f"<{2 * n}Q", index))
    if stored is None:
        entries[2 * i : 2 * i + 2] = [2**64 - 1, 2**64 - 1]
    else:
        entries[2 * i : 2 * i + 2] = [len(data), len(stored)]
        data += stored
    index = struct.pack(f"<{2 * n}Q", *entries)
    shard.write_bytes(data + index + struct.pack("<I", google_crc32c.value(index)))


def _stored_chunk(shard: Path, i: int, n: int) -> bytes:
    raw = shard.read_bytes()
    off, size = struct.unpack("<QQ", raw[len(raw) - 4 - 16 * n + 16 * i :][:16])
    return raw[off : off + size]


#: damage to inner chunk 1 (grid position 0, 0, 1) of shard c/0/0/0, per codec: what the native reader must hand back
DAMAGE = {
    "zstd-truncated": ("zstd", lambda b: b[: len(b) // 2]),
    "zstd-other-size": ("zstd", lambda b: zstandard.ZstdCompressor().compress(b"\x01" * 100)),
    "zstd-garbage": ("zstd", lambda b: b"\x28\xb5\x2f\xfd" + b"\xff" * 40),
    "blosc-bad-header": ("blosc-lz4", lambda b: b"\x02\x01\x01\x01" + b[4:]),
    "blosc-huge-nbytes": ("blosc-lz4", lambda b: b[:4] + struct.pack("<I", 1 << 30) + b[8:]),
    "blosc-truncated": ("blosc-lz4", lambda b: b[: len(b) - 7]),
    # stored uncompressed (MEMCPYED) but the header's total size disagrees with the span's
    "blosc-memcpyed-cbytes": ("blosc-lz4", lambda b: b[:12] + struct.pack("<I", len(b) + 1) + b[16:]),
    "blosc-other-size": ("blosc-lz4", lambda b: bytes(__import__("numcodecs").Blosc("lz4").encode(b"\x00" * 64))),
    "gzip-bad-crc": ("gzip", lambda b: b[:-8] + bytes([b[-8] ^ 0xFF]) + b[-7:]),
    "gzip-other-size": ("gzip", lambda b: gzip.compress(b"\x00" * 10)),
    "gzip-not-gzip": ("gzip", lambda b: b"\x78\x9c" + b[2:]),
    "raw-short": ("raw", lambda b: b[:-2]),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_chunks_raise_the_same_codec_error_on_every_path(damage: str, tmp_path: Path, monkeypatch) -> None:
    name, damaged = DAMAGE[damage]
    data = random_array((40, 36, 20), "uint16", 9)
    a = _create(tmp_path, CODECS[name])
    a[...] = data
    shard = tmp_path / "c" / "0" / "0" / "0"
    _rewrite_chunk(shard, 1, damaged(_stored_chunk(shard, 1, 4)))
    messages = {}
    for mode in MODES:
        with monkeypatch.context() as m:
            spy = Spy(m) if mode == "native" else None
            b = _open(tmp_path, mode, m)
            np.testing.assert_array_equal(b[16:, 24:], data[16:, 24:])  # other shards read fine
            np.testing.assert_array_equal(b[0:8, 0:12, 0:10], data[0:8, 0:12, 0:10])  # and the chunk before
            with pytest.raises(CodecError) as e:
                b[0:16, 0:24, :]  # the damaged chunk's shard (a read of one chunk is not native)
            messages[mode] = str(e.value)
            with pytest.raises(CodecError):
                b[...]
            if spy is not None:
                assert spy.back >= 1 and spy.done >= 1  # refused natively, raised by Python
    assert len(set(messages.values())) == 1, messages
    assert "c/0/0/0" in messages["native"]


def test_blosc_chunks_stored_uncompressed_are_copied_out_natively(tmp_path: Path, monkeypatch) -> None:
    """Noise does not compress: c-blosc stores it verbatim (the MEMCPYED flag) and the native
    reader copies those bytes out without a decode; the result matches the generic path."""
    data = random_array((40, 36, 20), "uint16", 5)
    a = _create(tmp_path, CODECS["blosc-lz4"])
    a[...] = data
    stored = _stored_chunk(tmp_path / "c" / "0" / "0" / "0", 0, 4)
    assert stored[2] & 0x02 and len(stored) == 8 * 12 * 10 * 2 + 16  # verbatim after the header
    spy = Spy(monkeypatch)
    b = _open(tmp_path, "native", monkeypatch)
    np.testing.assert_array_equal(b[...], data)
    np.testing.assert_array_equal(b[3:37, 5:30, 1:19], data[3:37, 5:30, 1:19])
    assert spy.done >= 20 and spy.back == 0


def test_missing_chunks_and_shards_fill_or_raise_strictly(tmp_path: Path, monkeypatch) -> None:
    data = random_array((40, 36, 20), "uint16", 4)
    a = _create(tmp_path, CODECS["zstd"])
    a[...] = data
    _rewrite_chunk(tmp_path / "c" / "0" / "0" / "0", 3, None)  # chunk (0, 1, 1)
    (tmp_path / "c" / "1" / "1" / "0").unlink()  # a whole shard
    data[0:8, 12:24, 10:20] = 0
    data[16:32, 24:36] = 0
    for mode in MODES:
        with monkeypatch.context() as m:
            b = _open(tmp_path, mode, m)
            np.testing.assert_array_equal(b[...], data)
            with pytest.raises(ChunkNotFoundError):
                b.read(np.s_[0:8, 12:24, 10:20], strict=True)


def test_a_shard_replaced_during_the_native_read_is_read_as_opened(tmp_path: Path, monkeypatch) -> None:
    """The native call reads from the file the adapter opened and took the index from: a
    shard replaced meanwhile is read as it was (never its old index over the new bytes), by
    every piece of the read; the next read sees the new one."""
    old, new = random_array((16, 24, 20), "uint16", 1), random_array((16, 24, 20), "uint16", 2)
    _create(tmp_path / "new", CODECS["blosc-lz4"], shape=old.shape)[...] = new
    a = _create(tmp_path / "a", CODECS["blosc-lz4"], shape=old.shape)
    a[...] = old
    shard, replacement = tmp_path / "a" / "c" / "0" / "0" / "0", tmp_path / "new" / "c" / "0" / "0" / "0"
    b = _open(tmp_path / "a", "native", monkeypatch)
    np.testing.assert_array_equal(b[...], old)  # (its index is cached now)
    real = spanread._rawio.read_spans
    calls = []
    lock = threading.Lock()  # (the pieces of one shard may be read on two threads)

    def replacing(*args):
        with lock:
            if not calls:
                os.replace(replacement, shard)
            calls.append(args)
        return real(*args)

    spy = type("M", (), {"read_spans": staticmethod(replacing), "set_decoders": staticmethod(spanread._rawio.set_decoders),
                         "decoders": staticmethod(spanread._rawio.decoders)})
    monkeypatch.setattr(spanread, "_rawio", spy)
    got = b[...]
    assert len(calls) > 1  # (cut into pieces for the threads)
    # the pieces share the shard file the read's first piece opened: all of it is the version
    # opened before the replacement (pieces that opened the shard each were partly new)
    np.testing.assert_array_equal(got, old)
    np.testing.assert_array_equal(b[...], new)


@pytest.mark.parametrize("fmt", ["zarr3", "precomputed"])
def test_a_read_opens_each_shard_file_once_and_closes_it(fmt: str, tmp_path: Path, monkeypatch) -> None:
    """A read cut into pieces for the threads opens each shard file (and looks its index up)
    once, not once per piece, and closes it when the read is done."""
    from shardstore.store import local, open_values

    data = random_array((64, 64, 64), "uint16", 7)
    config = IOConfig(thread_item_seconds=0.0)  # (threads from the first read on)
    if fmt == "zarr3":
        _create(tmp_path, CODECS["zstd"], shape=(64, 64, 64), chunks=(8, 8, 8), shards=(32, 64, 64))[...] = data
        b = zarr3.open(str(tmp_path), mode="r", config=config)
    else:
        _precomputed(tmp_path, "raw", channels=1, size=(64, 64, 64))[..., 0] = data
        b = precomputed.open(str(tmp_path), mode="r", config=config)
    spy = Spy(monkeypatch)
    opened: list[str] = []
    real_open = local.open_version
    monkeypatch.setattr(local, "open_version", lambda path: (opened.append(path), real_open(path))[1])
    closed: list[int] = []
    real_close = open_values.FileVersion.close
    monkeypatch.setattr(open_values.FileVersion, "close", lambda self: (closed.append(1), real_close(self))[1])
    box = np.s_[4:60, 4:60, 4:60]
    np.testing.assert_array_equal(b[box] if fmt == "zarr3" else b[box + (0,)], data[box])
    assert spy.done > 8 and spy.back == 0  # (read natively, in pieces)
    assert len(opened) == len(set(opened)) == 2  # (two shard files)
    assert len(closed) == 2


def test_kernel_checks_its_arguments(tmp_path: Path) -> None:
    import shardstore._rawio as rawio

    spanread.loaded_codecs()
    elements = np.arange(16, dtype=np.uint8)
    f = tmp_path / "shard"
    z = zstandard.ZstdCompressor().compress(elements.tobytes())
    f.write_bytes(b"xx" + elements.tobytes() + z + b"tail")
    out = np.zeros((4, 4), np.uint8)
    whole = (0, 1, 4, 0, 0, 1, 4, 0)
    assert rawio.read_spans(out, (4, 4), (0, 1), 1, False, 0, str(f), 4, [(2, 16, whole)]) == b"\0"
    np.testing.assert_array_equal(out, elements.reshape(4, 4))
    out[...] = 0
    assert rawio.read_spans(out, (4, 4), (0, 1), 1, False, 1, str(f), 4, [(18, len(z), (1, 2, 2, 0, 0, 1, 4, 0))]) == b"\0"
    np.testing.assert_array_equal(out[:2], elements.reshape(4, 4)[1::2])
    # reported, not raised: into the tail, past the end, another size, a bad offset, no file
    out[...] = 7
    jobs = [(18, len(z) + 1, whole), (2, 16, whole), (-1, 16, whole), (2, 15, whole)]
    assert rawio.read_spans(out, (4, 4), (0, 1), 1, False, 1, str(f), 4, jobs) == b"\2" * 4
    assert rawio.read_spans(out, (4, 4), (0, 1), 1, False, 0, str(f), 10**6, [(2, 16, whole)]) == b"\2"
    assert rawio.read_spans(out, (4, 4), (0, 1), 1, False, 0, str(tmp_path / "none"), 0, [(2, 16, whole)]) == b"\2"
    assert (out == 7).all()  # nothing written for a chunk not read
    for box in [(0, 1, 5, 0, 0, 1, 4, 0), (0, 1, 4, 1, 0, 1, 4, 0), (0, 0, 1, 0, 0, 1, 1, 0)]:
        with pytest.raises(ValueError):
            rawio.read_spans(out, (4, 4), (0, 1), 1, False, 0, str(f), 0, [(2, 16, box)])
    with pytest.raises(ValueError):  # no such codec
        rawio.read_spans(out, (4, 4), (0, 1), 1, False, 9, str(f), 0, [])
    # a descriptor held open by the caller: read (the file's size from it), and left open
    fd = os.open(f, os.O_RDONLY)
    try:
        out[...] = 0
        assert rawio.read_spans(out, (4, 4), (0, 1), 1, False, 1, fd, 4, [(18, len(z), whole)]) == b"\0"
        np.testing.assert_array_equal(out, elements.reshape(4, 4))
        assert rawio.read_spans(out, (4, 4), (0, 1), 1, False, 0, fd, 10**6, [(2, 16, whole)]) == b"\2"
        assert os.fstat(fd).st_size == f.stat().st_size  # (still open)
    finally:
        os.close(fd)
    for bad in (-1, 2**40):
        with pytest.raises(ValueError):
            rawio.read_spans(out, (4, 4), (0, 1), 1, False, 0, bad, 0, [])


@st.composite
def cases(draw):
    ndim = draw(st.integers(1, 3))
    chunks = tuple(draw(st.integers(1, 6)) for _ in range(ndim))
    shards = tuple(c * draw(st.integers(1, 3)) for c in chunks)
    shape = tuple(draw(st.integers(1, 2 * s + 1)) for s in shards)
    sels = []
    for _ in range(3):
        sel = []
        for s in shape:
            if draw(st.booleans()):
                sel.append(draw(st.integers(0, s - 1)))
            else:
                start = draw(st.integers(0, s))
                sel.append(slice(start, draw(st.integers(start, s)), draw(st.sampled_from([1, 1, 2, 3]))))
        sels.append(tuple(sel))
    dtype = draw(st.sampled_from(["uint8", "int16", "float32", "uint64"]))
    return shape, chunks, shards, dtype, draw(st.sampled_from(sorted(CODECS))), sels, draw(st.integers(0, 2**16))


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(cases())
def test_native_reads_match_numpy_and_the_generic_path(tmp_path_factory, monkeypatch, case) -> None:
    shape, chunks, shards, dtype, name, sels, seed = case
    root = tmp_path_factory.mktemp("spans")
    data = random_array(shape, dtype, seed)
    data[tuple(slice(0, c) for c in chunks)] = 0  # the first chunk absent
    zarr3.create(str(root), shape=shape, dtype=dtype, chunks=chunks, shards=shards, codecs=CODECS[name], mode="w")[...] = data
    with monkeypatch.context() as m:
        spy = Spy(m)
        native = _open(root, "native", m)
        got = [native[sel] for sel in [*sels, ...]]
    generic = _open(root, "generic", monkeypatch)
    for sel, g in zip([*sels, ...], got):
        np.testing.assert_array_equal(g, data[sel])
        np.testing.assert_array_equal(g, generic[sel])
    # (a shard of one chunk is a unit of its own: the core reads such arrays as unsharded)
    assert spy.back == 0 and (spy.done > 0 or shards == chunks or not data.any())


# -- precomputed, sharded (neuroglancer_uint64_sharded_v1): raw chunks in Fortran order -------

def _precomputed(root: Path, data_encoding: str, dtype: str = "uint16", channels: int = 2, size=(50, 40, 30)):
    sharding = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0, "minishard_bits": 1,
                "shard_bits": 1, "minishard_index_encoding": "gzip", "data_encoding": data_encoding}
    return precomputed.create(str(root), data_type=dtype, num_channels=channels,
                              scales=[{"size": list(size), "chunk_sizes": [[16, 16, 8]], "encoding": "raw", "key": "s0",
                                       "sharding": sharding}])


def _open_precomputed(root: Path, mode: str, monkeypatch: pytest.MonkeyPatch):
    if mode == "unbuilt":
        monkeypatch.setattr(spanread, "_rawio", None)
        monkeypatch.setattr(rawread, "_rawio", None)
    return precomputed.open(str(root), mode="r", config=IOConfig(native=mode == "native"))


@pytest.mark.parametrize("data_encoding", ["raw", "gzip"])
@pytest.mark.parametrize("dtype, channels", [("uint8", 1), ("uint16", 2), ("float32", 1)])
def test_precomputed_sharded_reads_match_numpy_on_every_path(data_encoding: str, dtype: str, channels: int,
                                                             tmp_path: Path, monkeypatch) -> None:
    data = random_array((50, 40, 30, channels), dtype, 6)
    if dtype == "float32":
        data = np.nan_to_num(data)  # (NaN != NaN in the comparison below)
    a = _precomputed(tmp_path, data_encoding, dtype, channels)
    a[...] = data
    a[16:32, 0:16, 8:16] = 0  # a chunk of zeros is not stored
    data[16:32, 0:16, 8:16] = 0
    sels = [..., np.s_[3:47, 7:33, 1:29], np.s_[5, 3:40:3, :], np.s_[::2, 1, 2:30, 0], np.s_[16:48, 16:32, 8:24]]
    for mode in MODES:
        with monkeypatch.context() as m:
            spy = Spy(m) if mode == "native" else None
            b = _open_precomputed(tmp_path, mode, m)
            for sel in sels:
                np.testing.assert_array_equal(b[sel], data[sel], err_msg=f"{mode} {sel}")
            if spy is not None:  # the 3 x 2 x 3 full chunks of the whole read went native
                assert spy.done >= 3 * 2 * 3 - 1


def test_precomputed_damaged_gzip_value_raises_the_same_error_on_every_path(tmp_path: Path, monkeypatch) -> None:
    data = random_array((50, 40, 30, 1), "uint8", 8)
    a = _precomputed(tmp_path, "gzip", "uint8", 1)
    a[...] = data
    layout = a.driver.layout
    data_key, start, size = layout.store.sync_ids.locate(int(layout.chunk_key((0, 0, 0))))
    path = Path(layout.store.base.file_paths.file_path(data_key))
    raw = bytearray(path.read_bytes())
    raw[start + size - 6] ^= 0xFF  # the gzip member's CRC
    path.write_bytes(bytes(raw))
    messages = {}
    for mode in MODES:
        with monkeypatch.context() as m:
            spy = Spy(m) if mode == "native" else None
            b = _open_precomputed(tmp_path, mode, m)
            np.testing.assert_array_equal(b[16:48, 16:32], data[16:48, 16:32])
            with pytest.raises(CodecError) as e:
                b[0:32, 0:16, 0:8]  # the damaged chunk and the next one
            messages[mode] = str(e.value)
            if spy is not None:
                assert spy.back >= 1 and spy.done >= 1
    assert len(set(messages.values())) == 1, messages


def test_a_read_of_one_chunk_takes_the_generic_path(tmp_path: Path, monkeypatch) -> None:
    """(measured slower natively: see core/spanread.py) and still reads right."""
    data = random_array((40, 36, 20), "uint16", 12)
    _create(tmp_path, CODECS["zstd"])[...] = data
    spy = Spy(monkeypatch)
    b = _open(tmp_path, "native", monkeypatch)
    np.testing.assert_array_equal(b[8:16, 12:24, 10:20], data[8:16, 12:24, 10:20])
    np.testing.assert_array_equal(b[9, 13:20, 11], data[9, 13:20, 11])
    assert spy.done == spy.back == 0
    np.testing.assert_array_equal(b[8:17, 12:24, 10:20], data[8:17, 12:24, 10:20])  # two chunks
    assert spy.done == 2


def test_the_batch_timed_alone_is_one_chunk(tmp_path: Path) -> None:
    """``share_now`` runs the first batch alone to decide on threads: one chunk, so that a
    cold read of one large shard overlaps its file reads from the second chunk on (a
    quarter of a 16 MiB shard read alone first: 0.91x tensorstore cold, 1.01-1.07x now)."""
    from shardstore.core.indexing import basic_indexer
    from shardstore.core.spanread import span_units

    a = _create(tmp_path, CODECS["zstd"], shape=(64, 64, 64), chunks=(8, 8, 8), shards=(64, 64, 64))
    layout = a.driver.layout
    batches = span_units(layout, basic_indexer(np.s_[...], layout.grid))
    assert len(batches[0]) == 1 and sum(map(len, batches)) == 512
    assert {item[1] for b in batches for item in b} == {layout.chunk_key(c) for c in np.ndindex(8, 8, 8)}
    assert span_units(layout, basic_indexer(np.s_[:8, :8, :8], layout.grid))[0][0][1] == layout.chunk_key((0, 0, 0))
    assert span_units(layout, []) == []


def test_a_few_chunks_of_one_shard_are_one_piece_per_thread(tmp_path: Path) -> None:
    """A read of a few chunks within one shard (the misses of a 100^3 read beside the chunk
    cache's hits) is cut into one piece per codec thread, not into single chunks whose
    native calls and GIL hand-offs cost more than the balance gains; larger reads keep two
    pieces per thread after the one chunk ``share_now`` times alone."""
    from shardstore.core.indexing import basic_indexer
    from shardstore.core.spanread import span_units

    _create(tmp_path, CODECS["zstd"], shape=(64, 64, 64), chunks=(8, 8, 8), shards=(64, 64, 64))
    layout = zarr3.open(str(tmp_path), mode="r", config=IOConfig(codec_threads=2)).driver.layout

    def sizes(sel: tuple) -> list[int]:
        return [len(b) for b in span_units(layout, basic_indexer(sel, layout.grid))]

    assert sizes(np.s_[4:12, 4:12, 4:12]) == [4, 4]  # 8 chunks
    assert sizes(np.s_[4:12, 4:12, 0:8]) == [2, 2]
    assert sizes(np.s_[4:12, 0:8, 0:8]) == [1, 1]
    assert sizes(np.s_[4:20, 4:12, 0:8]) == [3, 3]  # 6 chunks
    assert sizes(np.s_[4:20, 4:20, 4:12]) == [1, 4, 5, 5, 3]  # 18 chunks: more than 4 a thread
    small = span_units(layout, basic_indexer(np.s_[4:12, 4:12, 4:12], layout.grid))
    assert {item[1] for b in small for item in b} == {layout.chunk_key(c) for c in np.ndindex(2, 2, 2)}


def test_a_cached_read_that_places_no_chunk_whole_reads_right(tmp_path: Path) -> None:
    """With the chunk cache, only the chunks a read places whole go native: a box inside
    chunks leaves none (span_units got no chunks; it raised IndexError)."""
    data = random_array((64, 64, 64), "uint16", 3)
    _create(tmp_path, CODECS["zstd"], shape=(64, 64, 64), chunks=(8, 8, 8), shards=(64, 64, 64))[...] = data
    b = zarr3.open(str(tmp_path), mode="r", config=IOConfig(chunk_cache_bytes=1 << 20))
    box = np.s_[3:13, 3:13, 3:13]  # 8 chunks, none whole
    np.testing.assert_array_equal(b[box], data[box])
    np.testing.assert_array_equal(b[box], data[box])



def test_minishard_indexes_of_a_native_read_are_asked_for_together(tmp_path: Path, monkeypatch) -> None:
    """A native read that needs several minishard indexes of a shard file reads them with one
    ``read_many`` of the open file, which asks the kernel for all of them (``posix_fadvise``)
    before reading the first when the first is not in the page cache: scattered through the
    file, they were read one after the other on a cold disk. The values read are those of
    the volume."""
    import os

    from shardstore.store import open_values

    calls: list[str] = []
    monkeypatch.setattr(open_values.os, "posix_fadvise",
                        lambda fd, offset, length, advice: calls.append(f"advise {offset}"))
    real_pread = os.pread
    monkeypatch.setattr(open_values.os, "pread", lambda fd, n, offset: (calls.append(f"read {offset}"), real_pread(fd, n, offset))[1])
    path = tmp_path / "f"
    path.write_bytes(bytes(range(256)) * 48)
    fd = os.open(path, os.O_RDONLY)
    version = open_values.FileVersion(fd, 1, 256 * 48)
    spans = [(0, 4), (300, 302), (9000, 9030)]
    want = [bytes(range(4)), bytes([44, 45]), bytes(range(40, 70))]
    try:
        assert version.read_many(spans) == want  # (just written: in the page cache, no advice)
        assert calls == ["read 0", "read 300", "read 9000"]
        calls.clear()
        monkeypatch.setattr(open_values, "_uncached", lambda fd, offset: True)  # (as on a cold disk)
        assert version.read_many(spans) == want
        # (spans within a page of each other share an advice: the kernel reads whole pages)
        assert calls == ["advise 0", "advise 9000", "read 0", "read 300", "read 9000"]
        if open_values._NOWAIT:  # the real question, asked of the page cache without waiting
            monkeypatch.undo()
            assert not open_values._uncached(fd, 0)
    finally:
        version.close()
    monkeypatch.setattr(open_values, "_uncached", lambda fd, offset: True)

    sharding = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0, "minishard_bits": 3,
                "shard_bits": 0, "minishard_index_encoding": "raw", "data_encoding": "raw"}
    a = precomputed.create(str(tmp_path / "v"), data_type="uint8", num_channels=1,
                           scales=[{"size": [32, 32, 32], "chunk_sizes": [[8, 8, 8]], "encoding": "raw", "key": "s0",
                                    "sharding": sharding}])
    data = random_array((32, 32, 32, 1), "uint8", 3)
    a[...] = data
    sizes: list[int] = []
    real_many = open_values.FileVersion.read_many
    monkeypatch.setattr(open_values.FileVersion, "read_many",
                        lambda self, spans, advise=True: (sizes.append(len(spans)), real_many(self, spans, advise=advise))[1])
    b = precomputed.open(str(tmp_path / "v"), mode="r", config=IOConfig(native=True))
    np.testing.assert_array_equal(b[...], data)
    assert max(sizes) >= 2  # several of the 8 minishard indexes in one call


@pytest.mark.parametrize("fmt", ["zarr3", "precomputed"])
def test_a_cold_native_read_asks_for_all_its_chunks_before_its_first_batch(fmt: str, tmp_path: Path,
                                                                            monkeypatch) -> None:
    """When a read's chunks are not in the page cache, the spans of all of them (every batch's,
    not only the batch a native call reads) are asked of the kernel at once before the first
    native call (``spanread.advise_ahead``), so that on a cold disk their reads overlap; a read
    whose chunks are cached asks nothing. The values read are the volume's."""
    from shardstore.store import open_values

    if fmt == "zarr3":
        data = random_array((40, 36, 20), "uint16", 5)
        _create(tmp_path, CODECS["zstd"])[...] = data
        b = _open(tmp_path, "native", monkeypatch)
        box = np.s_[3:37, 5:31, 2:19]  # 5 x 3 x 2 chunks in 3 x 2 shards
    else:
        data = random_array((50, 40, 30, 2), "uint16", 5)
        _precomputed(tmp_path, "gzip")[...] = data
        b = _open_precomputed(tmp_path, "native", monkeypatch)
        box = np.s_[3:47, 5:37, 2:29]
    events: list[tuple[str, Any]] = []
    monkeypatch.setattr(open_values.os, "posix_fadvise",
                        lambda fd, offset, n, advice: events.append(("advise", (fd, offset, offset + n))))
    real = spanread._rawio

    class Module:
        set_decoders = staticmethod(real.set_decoders)
        decoders = staticmethod(real.decoders)

        @staticmethod
        def read_spans(out, shape, dims, itemsize, swap, codec, fd, tail, jobs, *rest):
            events.append(("read", [(fd, job[0], job[0] + job[1]) for job in jobs]))
            return real.read_spans(out, shape, dims, itemsize, swap, codec, fd, tail, jobs, *rest)

    monkeypatch.setattr(spanread, "_rawio", Module)
    np.testing.assert_array_equal(b[box], data[box])  # (just written: cached, nothing advised)
    assert events and all(kind == "read" for kind, _ in events)
    events.clear()
    monkeypatch.setattr(open_values, "_uncached", lambda fd, offset: True)  # (as on a cold disk)
    np.testing.assert_array_equal(b[box], data[box])
    first = next(i for i, (kind, _) in enumerate(events) if kind == "read")
    advised = [span for kind, span in events[:first] if kind == "advise"]
    read = [span for kind, spans in events if kind == "read" for span in spans]
    assert len(read) > 4 and len({fd for fd, _, _ in read}) > 1
    assert all(any(fd == f and lo <= start and end <= hi for f, lo, hi in advised) for fd, start, end in read)
    assert not any(kind == "advise" for kind, _ in events[first:])
