"""Zarr v3 ``blosc`` codec: one Blosc-1 chunk (16-byte header + blocks), via numcodecs' c-blosc.

Decoding reads the header first and refuses, before decompressing anything, a chunk whose
declared sizes disagree with the data or exceed what the chunk may hold.

Threads, without a process-wide switch: every chunk is compressed and decompressed by
c-blosc's context functions (``blosc_compress_ctx`` / ``blosc_decompress_ctx``) with one
internal thread and the GIL released, through imagecodecs' ``blosc_encode`` /
``blosc_decode`` (imagecodecs is a dependency; the c-blosc 1.x in its wheels writes the same
bytes). The codec pool then decodes chunks in parallel from any thread, the caller's main
thread included. numcodecs' ``numcodecs.blosc.use_threads`` is left alone: with its default,
numcodecs sends main-thread calls through c-blosc's global context and its own threads under
a lock, which made warm whole-array reads of a blosc-lz4 array about half as fast (measured
with ``benchmarks/bench_zarr3.py --quick``). numcodecs remains the fallback (a c-blosc
build without a compressor, a typesize that does not divide the data).
"""

from __future__ import annotations

import copy
import struct
from typing import Any, Literal, NamedTuple

import numpy as np

from ..errors import CodecError, MetadataError, UnsupportedFeatureError
from .base import BytesBytesCodec, ChunkSpec, N5Compression, NativeDecoder
from .registry import register_codec

__all__ = [
    "BloscCodec", "BloscHeader", "MAX_BUFFERSIZE", "MAX_OVERHEAD", "available_compressors", "compress_chunk",
    "compress_chunk_into", "decompress_bytes", "decompress_into", "read_blosc_header",
]

Shuffle = Literal["noshuffle", "shuffle", "bitshuffle"]
SHUFFLES: tuple[Shuffle, ...] = ("noshuffle", "shuffle", "bitshuffle")  # index = c-blosc constant
CNAMES = ("blosclz", "lz4", "lz4hc", "zlib", "zstd", "snappy")  # the names Zarr v3 allows
_HEADER = struct.Struct("<BBBBIII")
HEADER_SIZE = _HEADER.size  # 16
_MEMCPYED = 0x02
# c-blosc ignores (treats as 1) typesizes above this
_MAX_TYPESIZE = 255


def _load_ctx_codecs() -> Any:
    """imagecodecs, or None when it has no blosc."""
    try:
        import imagecodecs
    except ImportError:  # pragma: no cover - imagecodecs is a dependency
        return None
    return imagecodecs if imagecodecs.BLOSC.available else None


# Loaded with this module, not on first use: the import takes a few milliseconds, which
# otherwise land in the middle of the first blosc write or read, under the import lock that
# every other codec thread then waits on. (``import shardstore`` loads imagecodecs anyway.)
_imagecodecs: Any = _load_ctx_codecs()


def _ctx_codecs() -> Any:
    """imagecodecs, or None without blosc."""
    return _imagecodecs


_numcodecs_blosc: Any = None


def _numcodecs() -> Any:
    """numcodecs.blosc, imported on first use: only for what imagecodecs' c-blosc cannot do
    (a typesize that does not divide the data, a compressor it lacks) and to ask which
    compressors are built in. Its import costs ~60 ms and ~5 MiB (numcodecs reads every
    installed package's entry points), which neither ``import shardstore`` nor opening an
    array of the usual compressors should pay."""
    global _numcodecs_blosc
    if _numcodecs_blosc is None:
        import numcodecs.blosc

        _numcodecs_blosc = numcodecs.blosc
    return _numcodecs_blosc


#: compressors that the c-blosc of every numcodecs and imagecodecs wheel is built with: a
#: codec naming one of these is made without asking numcodecs (snappy is optional in c-blosc)
_ALWAYS_BUILT = frozenset({"blosclz", "lz4", "lz4hc", "zlib", "zstd"})


def available_compressors() -> frozenset[str]:
    """The compressor names this c-blosc was built with (asks numcodecs)."""
    return frozenset(_numcodecs().list_compressors())


def _ctx_encode(data: bytes | memoryview, cname: str, clevel: int, shuffle: int, blocksize: int, typesize: int,
                out: np.ndarray | None = None) -> Any:
    """c-blosc's context API through imagecodecs (into ``out`` when given): the chunk as an
    array, or None where it cannot (no blosc in imagecodecs, a typesize that does not divide
    the data, a compressor this c-blosc build lacks, a header not saying the typesize)."""
    ic = _ctx_codecs()
    n = memoryview(data).nbytes
    if ic is None or not n or n % typesize:
        return None
    # imagecodecs takes the typesize from the buffer's item size (and, in older releases,
    # from ``typesize``): give both, and check the header says so
    items = np.frombuffer(data, dtype=f"V{typesize}") if typesize > 1 else data
    try:
        got = ic.blosc_encode(items, clevel, compressor=cname, shuffle=shuffle, typesize=typesize,
                              blocksize=blocksize, numthreads=1, out=out)
    except RuntimeError:  # e.g. a compressor this c-blosc build lacks: numcodecs may have it
        return None
    return got if got[3] == typesize else None


def compress_chunk(data: bytes, cname: str, clevel: int, shuffle: int, blocksize: int, typesize: int) -> bytes:
    """One Blosc-1 chunk, single-threaded through c-blosc's context API where possible."""
    got = _ctx_encode(data, cname, clevel, shuffle, blocksize, typesize)
    if got is not None:
        return bytes(got)
    return bytes(_numcodecs().compress(data, cname.encode(), clevel, shuffle, blocksize, typesize))


#: bytes c-blosc may add to the data it compresses (its ``BLOSC_MAX_OVERHEAD``)
MAX_OVERHEAD = 16
#: the most bytes one chunk holds (c-blosc's ``BLOSC_MAX_BUFFERSIZE``: INT_MAX less the overhead)
MAX_BUFFERSIZE = 2**31 - 1 - MAX_OVERHEAD


def compress_chunk_into(data: bytes | memoryview, cname: str, clevel: int, shuffle: int, blocksize: int, typesize: int,
                        out: np.ndarray) -> int:
    """``compress_chunk`` written into ``out`` (uint8, at least ``MAX_OVERHEAD`` bytes more
    than ``data``); the compressed length. For a caller that reuses ``out``: a fresh chunk
    per call is an allocation whose pages fault in as c-blosc first writes them."""
    got = _ctx_encode(data, cname, clevel, shuffle, blocksize, typesize, out)
    if got is not None and np.shares_memory(got, out):
        return len(got)
    chunk = compress_chunk(data, cname, clevel, shuffle, blocksize, typesize)
    out[: len(chunk)] = np.frombuffer(chunk, np.uint8)
    return len(chunk)


def decompress_into(data: bytes | memoryview, out: np.ndarray) -> None:
    """Decompress a Blosc-1 chunk into ``out`` (exactly its size), single-threaded."""
    ic = _ctx_codecs()
    if ic is not None:
        try:
            ic.blosc_decode(data, numthreads=1, out=out)
            return
        except RuntimeError:  # corrupt, or a compressor this build lacks: numcodecs decides
            pass
    _numcodecs().decompress(data, out)


def decompress_bytes(data: bytes) -> bytes:
    """A Blosc-1 chunk decompressed into new bytes, single-threaded."""
    ic = _ctx_codecs()
    if ic is not None:
        try:
            return bytes(ic.blosc_decode(data, numthreads=1))
        except RuntimeError:
            pass
    return bytes(_numcodecs().decompress(data))


class BloscHeader(NamedTuple):
    """The fields of a Blosc-1 chunk header (spec §5.1)."""

    version: int
    versionlz: int
    flags: int
    typesize: int
    nbytes: int
    blocksize: int
    cbytes: int

    @property
    def memcpyed(self) -> bool:
        return bool(self.flags & _MEMCPYED)


def read_blosc_header(data: bytes | memoryview) -> BloscHeader:
    """Parse and sanity-check the 16-byte header of a Blosc-1 chunk held entirely in ``data``."""
    size = memoryview(data).nbytes
    if size < HEADER_SIZE:
        raise CodecError(f"codec 'blosc': {size} bytes is too short for a 16-byte blosc header")
    header = BloscHeader._make(_HEADER.unpack_from(data))
    if header.cbytes != size:
        raise CodecError(
            f"codec 'blosc': header says the chunk is {header.cbytes} bytes, got {size} bytes "
            "(truncated or corrupt)"
        )
    if header.memcpyed and header.cbytes != header.nbytes + HEADER_SIZE:
        raise CodecError(
            f"codec 'blosc': stored-uncompressed chunk of {header.cbytes} bytes cannot hold the "
            f"{header.nbytes} bytes its header declares"
        )
    return header


def _check_int(value: Any, member: str, lo: int, hi: int | None = None) -> int:
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or value < lo
        or (hi is not None and value > hi)
    ):
        bounds = f"{lo}-{hi}" if hi is not None else f">= {lo}"
        raise MetadataError(f"codec 'blosc': {member!r} must be an integer {bounds}, got {value!r}")
    return value


@register_codec("blosc", namespace="n5")
@register_codec("blosc")
class BloscCodec(N5Compression, BytesBytesCodec):
    """``blosc``: ``cname``, ``clevel`` 0-9, ``shuffle``, ``typesize`` (filled from the dtype by
    ``bind`` when absent) and ``blocksize`` (0 = automatic)."""

    name = "blosc"

    def __init__(
        self,
        cname: str = "zstd",
        clevel: int = 5,
        shuffle: Shuffle = "shuffle",
        typesize: int | None = None,
        blocksize: int = 0,
    ) -> None:
        if cname not in CNAMES:
            raise MetadataError(
                f"codec 'blosc': 'cname' must be one of {list(CNAMES)}, got {cname!r}"
            )
        if cname not in _ALWAYS_BUILT and cname not in (available := available_compressors()):
            raise UnsupportedFeatureError(
                f"codec 'blosc': compressor {cname!r} is not built into this c-blosc "
                f"(available: {sorted(available)})"
            )
        if shuffle not in SHUFFLES:
            raise MetadataError(
                f"codec 'blosc': 'shuffle' must be one of {list(SHUFFLES)}, got {shuffle!r}"
            )
        self.cname = cname
        self.clevel = _check_int(clevel, "clevel", 0, 9)
        self.shuffle: Shuffle = shuffle
        self.typesize = None if typesize is None else _check_int(typesize, "typesize", 1)
        self.blocksize = _check_int(blocksize, "blocksize", 0)

    @classmethod
    def _from_configuration(cls, configuration: dict[str, Any]) -> BloscCodec:
        extra = set(configuration) - {"cname", "clevel", "shuffle", "typesize", "blocksize"}
        if extra:
            raise MetadataError(f"codec 'blosc': unknown configuration member(s) {sorted(extra)}")
        missing = {"cname", "clevel", "shuffle"} - set(configuration)
        if missing:
            raise MetadataError(f"codec 'blosc': missing configuration member(s) {sorted(missing)}")
        if "typesize" in configuration and configuration["typesize"] is None:
            raise MetadataError("codec 'blosc': 'typesize' must be a positive integer, got null")
        return cls(
            cname=configuration["cname"],
            clevel=configuration["clevel"],
            shuffle=configuration["shuffle"],
            typesize=configuration.get("typesize"),
            blocksize=configuration.get("blocksize", 0),
        )

    def _canonical_config(self) -> dict[str, Any]:
        # member order as zarr-python writes it; typesize only once known
        conf: dict[str, Any] = {} if self.typesize is None else {"typesize": self.typesize}
        conf.update(
            cname=self.cname, clevel=self.clevel, shuffle=self.shuffle, blocksize=self.blocksize
        )
        return {"name": "blosc", "configuration": conf}

    def bind(self, spec: ChunkSpec) -> BloscCodec:
        """Fill a missing ``typesize`` with the element size, as zarr-python and tensorstore do."""
        if self._n5_autoshuffle:
            bound = copy.copy(self)
            bound._n5_autoshuffle = False
            bound.shuffle = "bitshuffle" if np.dtype(spec.dtype).itemsize == 1 else "shuffle"
            return bound.bind(spec)
        if self.typesize is not None:
            return self
        bound = copy.copy(self)  # keeps _source: the stored JSON stays as it was written
        bound.typesize = np.dtype(spec.dtype).itemsize
        return bound

    # -- N5 (n5-blosc) ----------------------------------------------------------------------
    #: N5 ``shuffle: -1``: chosen from the element size by ``bind``
    _n5_autoshuffle: bool = False

    @classmethod
    def _from_n5(cls, config: dict[str, Any]) -> BloscCodec:
        """From N5 ``{"type": "blosc", "cname", "clevel", "shuffle": int, "blocksize"?,
        "typesize"?, "nthreads"?}``."""
        missing = {"cname", "clevel", "shuffle"} - set(config)
        if missing:
            raise MetadataError(f"compression 'blosc': missing member(s) {sorted(missing)}")
        shuffle = config["shuffle"]
        if not isinstance(shuffle, int) or isinstance(shuffle, bool) or not -1 <= shuffle <= 2:
            raise MetadataError(
                f"compression 'blosc': 'shuffle' must be -1 (auto), 0, 1 or 2, got {shuffle!r}"
            )
        typesize = config.get("typesize")
        if typesize is not None and _check_int(typesize, "typesize", 0) == 0:
            typesize = None  # n5-blosc: 0 = unset
        nthreads = config.get("nthreads", 1)
        _check_int(nthreads, "nthreads", 1)
        codec = cls(
            cname=config["cname"],
            clevel=config["clevel"],
            shuffle=SHUFFLES[max(shuffle, 0)],
            typesize=typesize,
            blocksize=config.get("blocksize", 0),
        )
        codec._n5_autoshuffle = shuffle == -1
        return codec

    def _n5_members(self) -> dict[str, Any]:
        """The N5 compression object (as parsed, else without ``nthreads``, which tensorstore
        refuses)."""
        conf: dict[str, Any] = {
            "type": "blosc", "cname": self.cname, "clevel": self.clevel,
            "shuffle": SHUFFLES.index(self.shuffle), "blocksize": self.blocksize,
        }
        if self.typesize is not None:
            conf["typesize"] = self.typesize
        return conf

    def _compress_args(self, data: bytes | memoryview, spec: ChunkSpec) -> tuple[int, int]:
        """(size of ``data``, the typesize to compress it with), or CodecError when too big."""
        n = memoryview(data).nbytes
        if n > MAX_BUFFERSIZE:
            raise CodecError(
                f"codec 'blosc': cannot compress {n} bytes; blosc chunks hold at most "
                f"{MAX_BUFFERSIZE} bytes (use smaller chunks)"
            )
        typesize = self.typesize if self.typesize is not None else np.dtype(spec.dtype).itemsize
        return n, 1 if typesize > _MAX_TYPESIZE else typesize

    def encode(self, data: bytes, spec: ChunkSpec) -> bytes:
        n, typesize = self._compress_args(data, spec)
        try:
            return compress_chunk(data, self.cname, self.clevel, SHUFFLES.index(self.shuffle), self.blocksize, typesize)
        except (RuntimeError, ValueError) as e:
            raise CodecError(f"codec 'blosc': cannot compress {n} bytes: {e}") from e

    def encode_into(self, data: bytes | memoryview, spec: ChunkSpec, out: np.ndarray) -> int:
        """``encode`` written into ``out`` (uint8, ``MAX_OVERHEAD`` bytes more than ``data``);
        the encoded length."""
        n, typesize = self._compress_args(data, spec)
        try:
            return compress_chunk_into(data, self.cname, self.clevel, SHUFFLES.index(self.shuffle), self.blocksize,
                                       typesize, out)
        except (RuntimeError, ValueError) as e:
            raise CodecError(f"codec 'blosc': cannot compress {n} bytes: {e}") from e

    def native_decoder(self) -> NativeDecoder:
        return "blosc"  # c-blosc's blosc_decompress_ctx, as ``decompress_into`` through imagecodecs

    def decode(self, data: bytes, spec: ChunkSpec, max_size: int) -> memoryview:
        """The decompressed bytes (a view of ``data`` for stored-uncompressed chunks)."""
        header = read_blosc_header(data)
        if header.nbytes > max_size:
            raise CodecError(
                f"codec 'blosc': header declares {header.nbytes} uncompressed bytes, more than "
                f"the {max_size} bytes a chunk can hold (corrupt data or a decompression bomb)"
            )
        if header.memcpyed:
            # stored uncompressed (and unshuffled): the payload is the data; no copy. Common
            # for noisy EM data with lz4, where compression does not pay.
            return memoryview(data)[HEADER_SIZE : HEADER_SIZE + header.nbytes]
        out = np.empty(header.nbytes, dtype=np.uint8)
        if header.nbytes:  # c-blosc reports an empty chunk as an error
            try:
                decompress_into(data, out)
            except (RuntimeError, ValueError) as e:
                raise CodecError(
                    f"codec 'blosc': corrupt blosc chunk ({header.cbytes} bytes, "
                    f"{header.nbytes} declared): {e}"
                ) from e
        return out.data
