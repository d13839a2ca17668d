"""bcolz chunk files (``data/__N.blp``): a 16-byte bloscpack header + one Blosc-1 chunk.

Header (spec ``bcolz.md`` §2): ``b"blpk"``, format version 1 (uint8), 3 zero bytes, the number
of blosc chunks in the file as int64 LE (always 1 in bcolz 1.x). The blosc chunk is made and
read by ``codecs/blosc.py`` (numcodecs' c-blosc); this module adds the frame, the bcolz
typesize rule (``S`` -> 1, ``U`` -> 4) and the optional float quantization of ``cparams``.

The codec turns an array into its chunk file and back, for every dtype bcolz stores (bool,
ints, floats, complex, ``S``/``U``/``V``, datetime64/timedelta64), so it is the whole chain.

A leftover chunk (the array's last, short chunk) may decode to *more* rows than the metadata
says, up to ``chunklen``: that is what a write leaves when it is interrupted between the data
and ``meta/sizes`` (bcolz itself reads the leftover into a chunklen-sized buffer). The extra
rows are dropped. Any other size disagreement is a ``CodecError``.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np

from ..errors import CodecError, MetadataError
from .base import ArrayBytesCodec, ChunkSpec
from .blosc import SHUFFLES, BloscCodec, read_blosc_header
from .registry import register_codec

__all__ = ["BloscpackCodec", "bloscpack_header", "check_bloscpack_header", "HEADER_SIZE", "bcolz_typesize"]

MAGIC = b"blpk"
FORMAT_VERSION = 1
HEADER_SIZE = 16
_HEADER = struct.Struct("<4sB3sq")
_BLOSC_MAX_TYPESIZE = 255


def bloscpack_header(nchunks: int = 1) -> bytes:
    """The 16-byte bloscpack header bcolz writes before each chunk."""
    return _HEADER.pack(MAGIC, FORMAT_VERSION, b"\0\0\0", nchunks)


def check_bloscpack_header(data: bytes | memoryview) -> None:
    """Raise CodecError unless ``data`` starts with the exact header bcolz 1.x writes."""
    size = memoryview(data).nbytes
    if size < HEADER_SIZE:
        raise CodecError(f"bloscpack: {size} bytes is too short for the 16-byte bloscpack header")
    magic, version, reserved, nchunks = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CodecError(f"bloscpack: bad magic {bytes(magic)!r}, expected {MAGIC!r} (not a bcolz chunk file)")
    if version != FORMAT_VERSION:
        raise CodecError(f"bloscpack: format version {version} is not supported (bcolz 1.x writes {FORMAT_VERSION})")
    if reserved != b"\0\0\0":
        raise CodecError(f"bloscpack: reserved header bytes must be zero, got {bytes(reserved)!r}")
    if nchunks != 1:
        raise CodecError(f"bloscpack: the header declares {nchunks} blosc chunks; bcolz files hold exactly 1")


def bcolz_typesize(dtype: np.dtype) -> int:
    """The blosc typesize bcolz uses for ``dtype`` (shuffling works on units of this size)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "S":
        return 1
    if dtype.kind == "U":
        return 4
    if dtype.kind == "V" and dtype.itemsize > _BLOSC_MAX_TYPESIZE:
        return 1
    return dtype.itemsize


def quantize(data: np.ndarray, significant_digits: int) -> np.ndarray:
    """bcolz' lossy float rounding: keep ``significant_digits`` decimal digits (as bits)."""
    precision = 10.0**-significant_digits
    exp = math.log(precision, 10)
    exp = int(math.floor(exp)) if exp < 0 else int(math.ceil(exp))
    bits = math.ceil(math.log(10.0**-exp, 2))
    scale = 2.0**bits
    return (np.around(scale * data) / scale).astype(data.dtype, copy=False)


def _int(conf: dict[str, Any], member: str, lo: int, hi: int | None = None, default: Any = None) -> int:
    value = conf.get(member, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < lo or (hi is not None and value > hi):
        bounds = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise MetadataError(f"codec 'bloscpack': {member!r} must be an integer {bounds}, got {value!r}")
    return value


@register_codec("bloscpack", namespace="bcolz")
class BloscpackCodec(ArrayBytesCodec):
    """An array chunk <-> a bcolz ``.blp`` file.

    ``cname`` / ``clevel`` / ``shuffle`` (0 none, 1 byte, 2 bit) / ``quantize`` are bcolz'
    ``cparams``; ``chunklen`` (rows per full chunk) bounds what a leftover chunk may hold.
    """

    name = "bloscpack"

    def __init__(self, cname: str = "lz4", clevel: int = 5, shuffle: int = 1, quantize: int = 0, chunklen: int = 1) -> None:
        conf = {"clevel": clevel, "shuffle": shuffle, "quantize": quantize, "chunklen": chunklen}
        self.clevel = _int(conf, "clevel", 0, 9)
        self.shuffle = _int(conf, "shuffle", 0, 2)
        self.quantize = _int(conf, "quantize", 0)
        self.chunklen = _int(conf, "chunklen", 1)
        if not isinstance(cname, str):
            raise MetadataError(f"codec 'bloscpack': 'cname' must be a string, got {cname!r}")
        self.cname = cname
        # typesize is per dtype: bound in ``bind``; one instance per chunk spec dtype
        self._blosc = BloscCodec(cname=cname, clevel=self.clevel, shuffle=SHUFFLES[self.shuffle])

    @classmethod
    def _from_configuration(cls, configuration: dict[str, Any]) -> BloscpackCodec:
        extra = set(configuration) - {"cname", "clevel", "shuffle", "quantize", "chunklen"}
        if extra:
            raise MetadataError(f"codec 'bloscpack': unknown configuration member(s) {sorted(extra)}")
        return cls(**configuration)

    def _canonical_config(self) -> dict[str, Any]:
        return {
            "name": "bloscpack",
            "configuration": {
                "cname": self.cname,
                "clevel": self.clevel,
                "shuffle": self.shuffle,
                "quantize": self.quantize,
                "chunklen": self.chunklen,
            },
        }

    def validate(self, spec: ChunkSpec) -> None:
        dtype = np.dtype(spec.dtype)
        if dtype.hasobject or dtype.fields is not None:
            raise MetadataError(f"codec 'bloscpack': data type {dtype} is not supported (bcolz object/record dtypes)")
        if bcolz_typesize(dtype) > _BLOSC_MAX_TYPESIZE:
            raise MetadataError(f"codec 'bloscpack': data type {dtype} has a typesize above {_BLOSC_MAX_TYPESIZE}")
        if self.quantize and dtype.kind != "f":
            raise MetadataError(f"codec 'bloscpack': quantize applies only to floating point data, not {dtype}")

    def bind(self, spec: ChunkSpec) -> BloscpackCodec:
        bound = BloscpackCodec(self.cname, self.clevel, self.shuffle, self.quantize, self.chunklen)
        bound._blosc = BloscCodec(
            cname=self.cname, clevel=self.clevel, shuffle=SHUFFLES[self.shuffle], typesize=bcolz_typesize(spec.dtype)
        )
        bound._source = self._source
        return bound

    def encoded_size(self, spec: ChunkSpec) -> int | None:
        return None

    # -- transforms -------------------------------------------------------------------------
    def encode(self, array: np.ndarray, spec: ChunkSpec) -> bytes:
        if array.shape != spec.shape:
            raise CodecError(f"codec 'bloscpack': array of shape {array.shape}, expected {spec.shape}")
        if self.quantize:
            array = quantize(array, self.quantize)
        if array.dtype.byteorder == ">":  # bcolz files are little-endian
            array = array.astype(array.dtype.newbyteorder("<"))
        raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        return bloscpack_header() + self._blosc.encode(memoryview(raw), spec)

    def decode(self, data: bytes, spec: ChunkSpec) -> np.ndarray:
        check_bloscpack_header(data)
        body = memoryview(data)[HEADER_SIZE:]
        header = read_blosc_header(body)
        rows = spec.shape[0] if spec.shape else 1
        rowbytes = spec.nbytes // rows if rows else math.prod(spec.shape[1:]) * np.dtype(spec.dtype).itemsize
        expected = spec.nbytes
        if header.nbytes != expected:
            # only a leftover chunk may hold more rows than the metadata says (see module doc)
            stale_leftover = (
                rows < self.chunklen
                and rowbytes > 0
                and expected < header.nbytes <= self.chunklen * rowbytes
                and header.nbytes % rowbytes == 0
            )
            if not stale_leftover:
                raise CodecError(
                    f"blosc header declares {header.nbytes} uncompressed bytes, expected {expected} "
                    f"({rows} rows of {rowbytes} bytes)"
                )
        raw = self._blosc.decode(body, spec, max(expected, header.nbytes))
        dtype = np.dtype(spec.dtype)
        if dtype.kind == "b":
            flat = np.frombuffer(raw, dtype=np.uint8, count=expected) != 0
        else:
            flat = np.frombuffer(raw, dtype=dtype.newbyteorder("<") if dtype.itemsize > 1 else dtype, count=spec.size)
            if flat.dtype != dtype:
                flat = flat.astype(dtype)
        return flat.reshape(spec.shape)
