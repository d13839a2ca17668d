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

A selection of a few rows decodes only the blosc blocks holding them (``decode_partial``), and
chunks are written with blocks of at most ``BLOCK_BYTES`` for the fast codecs (see
``block_param``), so a 1000-row slice of a 1 MiB chunk decompresses 128 KiB, not all of it.
"""

from __future__ import annotations

import functools
import math
import struct
from typing import Any

import numcodecs.blosc as _blosc_lib
import numpy as np

from ..errors import CodecError, MetadataError
from .base import ArrayBytesCodec, ChunkSpec
from .blosc import HEADER_SIZE as _BLOSC_HEADER_SIZE
from .blosc import SHUFFLES, BloscCodec, BloscHeader, read_blosc_header
from .registry import register_codec

__all__ = [
    "BloscpackCodec",
    "bloscpack_header",
    "check_bloscpack_header",
    "HEADER_SIZE",
    "bcolz_typesize",
    "decode_blosc_range",
]

MAGIC = b"blpk"
FORMAT_VERSION = 1
HEADER_SIZE = 16
_HEADER = struct.Struct("<4sB3sq")
_BLOSC_HEADER = struct.Struct("<BBBBIII")
_BLOSC_MAX_TYPESIZE = 255
#: largest blosc block shardstore writes (see ``block_param``); None: c-blosc decides, as bcolz
BLOCK_BYTES: int | None = 128 * 1024
_RATIO_CODECS = frozenset({"zstd", "zlib", "lz4hc"})


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


@functools.lru_cache(maxsize=256)
def block_param(cname: str, clevel: int, shuffle: int, typesize: int, chunk_nbytes: int) -> int:
    """The c-blosc ``blocksize`` argument that keeps blosc blocks at most ``BLOCK_BYTES``.

    bcolz lets c-blosc choose, which for lz4/blosclz gives 512 KiB blocks for int32 (its
    level-5 size times the typesize): a 1000-row slice then decompresses half a chunk.
    Smaller blocks let a slice decompress only what it needs (``decode_partial``), compress
    faster, and for smooth data compress about as well; bcolz reads them like any other.
    c-blosc scales a requested size by the typesize when it splits blocks into byte streams
    (depending on codec and sizes), so each candidate is tried on a probe buffer and the
    first that gives blocks of at most ``BLOCK_BYTES`` wins; 0 (c-blosc's choice, as bcolz)
    when its own blocks are small enough already, and for the codecs chosen for their ratio
    (zstd, zlib, lz4hc), whose large blocks c-blosc picks on purpose.
    """
    if clevel == 0 or BLOCK_BYTES is None or cname in _RATIO_CODECS:
        return 0
    probe = bytes(max(min(chunk_nbytes, 4 * BLOCK_BYTES), 1))

    def blocks(param: int) -> int:
        chunk = _blosc_lib.compress(probe, cname.encode(), clevel, shuffle, param, typesize)
        return _BLOSC_HEADER.unpack_from(chunk)[5]

    try:
        if blocks(0) <= BLOCK_BYTES:
            return 0
        for param in (BLOCK_BYTES // typesize, BLOCK_BYTES):
            if param >= 128 and BLOCK_BYTES // 4 <= blocks(param) <= BLOCK_BYTES:
                return param
    except (RuntimeError, ValueError):  # unknown cname etc.: reported by encode itself
        pass
    return 0


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
        typesize = bcolz_typesize(spec.dtype)
        bound._blosc = BloscCodec(
            cname=self.cname,
            clevel=self.clevel,
            shuffle=SHUFFLES[self.shuffle],
            typesize=typesize,
            blocksize=block_param(self.cname, self.clevel, self.shuffle, typesize, spec.nbytes),
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

    def _checked(self, data: bytes, spec: ChunkSpec) -> tuple[memoryview, BloscHeader]:
        """The blosc chunk of a .blp file and its header, checked against ``spec``."""
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
        return body, header

    def decode(self, data: bytes, spec: ChunkSpec) -> np.ndarray:
        body, header = self._checked(data, spec)
        raw = self._blosc.decode(body, spec, max(spec.nbytes, header.nbytes))
        return _as_array(raw, spec.dtype, (spec.shape[0] if spec.shape else 1, *spec.shape[1:])).reshape(spec.shape)

    def decode_partial(self, data: bytes, spec: ChunkSpec, selection: tuple) -> np.ndarray | None:
        """``decode(data, spec)[selection]`` from only the blosc blocks holding the rows the
        selection's first (row) index needs; None when that would be (nearly) every block."""
        if not spec.shape or not selection or spec.nbytes == 0:
            return None
        rows = spec.shape[0]
        first = selection[0]
        if isinstance(first, slice):
            start, stop, step = first.indices(rows)
            if step < 1 or stop <= start:
                return None
            lo, hi = start, start + (stop - 1 - start) // step * step + 1
            local: Any = slice(0, hi - lo, step)
        elif isinstance(first, (int, np.integer)) and -rows <= first < rows:
            lo = int(first) % rows
            hi, local = lo + 1, 0
        else:  # index arrays: rare on this path, decode the whole chunk
            return None
        body, header = self._checked(data, spec)
        rowbytes = spec.nbytes // rows
        raw = decode_blosc_range(body, header, lo * rowbytes, hi * rowbytes)
        if raw is None:
            return None
        return _as_array(raw, spec.dtype, (hi - lo, *spec.shape[1:]))[(local, *selection[1:])]


def _as_array(raw: memoryview, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """Little-endian decompressed bytes as an array of ``shape`` in ``dtype`` (native order)."""
    dtype = np.dtype(dtype)
    count = math.prod(shape)
    if dtype.kind == "b":
        flat = np.frombuffer(raw, dtype=np.uint8, count=count) != 0
    else:
        flat = np.frombuffer(raw, dtype=dtype.newbyteorder("<") if dtype.itemsize > 1 else dtype, count=count)
        if flat.dtype != dtype:
            flat = flat.astype(dtype)
    return flat.reshape(shape)


def decode_blosc_range(chunk: memoryview, header: BloscHeader, start: int, stop: int) -> memoryview | None:
    """Bytes ``[start, stop)`` of a Blosc-1 chunk's decompressed data, decompressing only the
    blocks that hold them; None when those are all the blocks (a full decode costs the same).

    c-blosc compresses each block on its own (``bstarts`` gives where each begins), so the
    needed blocks are copied into a smaller, valid chunk with the same header flags, which
    c-blosc then decompresses: this works for every codec, shuffle and split mode c-blosc
    itself handles. c-blosc refuses a chunk smaller than one block, so a range inside the
    short last block takes the block before it too.
    """
    if header.memcpyed:  # stored uncompressed: the data itself
        return chunk[_BLOSC_HEADER_SIZE + start : _BLOSC_HEADER_SIZE + stop]
    bs = header.blocksize
    if bs <= 0:
        raise CodecError(f"blosc header declares a block size of {bs} bytes")
    nblocks = -(-header.nbytes // bs)
    first, last = start // bs, (stop - 1) // bs
    if min(header.nbytes, (last + 1) * bs) - first * bs < bs:
        first = max(first - 1, 0)
    if first == 0 and last >= nblocks - 1:
        return None
    table_end = _BLOSC_HEADER_SIZE + 4 * nblocks
    if table_end > header.cbytes:
        raise CodecError(f"blosc chunk of {header.cbytes} bytes is too short for its {nblocks} block offsets")
    bstarts = struct.unpack_from(f"<{nblocks}i", chunk, _BLOSC_HEADER_SIZE)
    # a block runs to the next block start above it (c-blosc with threads may store blocks
    # out of order); offsets must be distinct and inside the chunk
    order = sorted(bstarts)
    if order[0] < table_end or order[-1] >= header.cbytes or len(set(order)) != nblocks:
        raise CodecError("blosc block offsets are out of range or overlap (corrupt chunk)")
    ends = dict(zip(order, order[1:] + [header.cbytes]))
    spans = [(s, ends[s]) for s in bstarts[first : last + 1]]
    pos = _BLOSC_HEADER_SIZE + 4 * len(spans)
    offsets = []
    for s, e in spans:
        offsets.append(pos)
        pos += e - s
    nbytes = min(header.nbytes, (last + 1) * bs) - first * bs
    head = _BLOSC_HEADER.pack(header.version, header.versionlz, header.flags, header.typesize, nbytes, bs, pos)
    small = b"".join([head, struct.pack(f"<{len(offsets)}i", *offsets), *(chunk[s:e] for s, e in spans)])
    out = np.empty(nbytes, dtype=np.uint8)
    try:
        _blosc_lib.decompress(small, out)
    except (RuntimeError, ValueError) as e:
        raise CodecError(f"corrupt blosc chunk ({header.cbytes} bytes, blocks {first}..{last}): {e}") from e
    skip = start - first * bs
    return memoryview(out)[skip : skip + stop - start]
