"""bcolz chunk files (``data/__N.blp``): a 16-byte bloscpack header + one Blosc-1 chunk.

Header (spec ``bcolz.md`` §2): ``b"blpk"``, format version 1 (uint8), 3 zero bytes, the number
of blosc chunks in the file as int64 LE (always 1 in bcolz 1.x). The blosc chunk is made and
read by ``codecs/blosc.py`` (c-blosc); this module adds the frame, the bcolz
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

import bisect
import functools
import math
import struct
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import CodecError, MetadataError
from .base import ArrayBytesCodec, ChunkSpec, scratch_buffer
from .blosc import HEADER_SIZE as _BLOSC_HEADER_SIZE
from .blosc import MAX_OVERHEAD, SHUFFLES, BloscCodec, BloscHeader, compress_chunk, decompress_bytes, decompress_into, read_blosc_header
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
BLOCK_BYTES: int | None = 64 * 1024
_RATIO_CODECS = frozenset({"zstd", "zlib", "lz4hc"})
#: first read of a ranged partial decode: both headers and the block offsets of any chunk
#: with up to 1016 blocks (one page; 1 MiB chunks of 64 KiB blocks have 16)
_HEAD_READ = 4096
_BLOSCPACK_HEADER = _HEADER.pack(MAGIC, FORMAT_VERSION, b"\0\0\0", 1)
_ENCODE_SLOT = "bloscpack_encode"  # (the thread's scratch buffer of ``encode_transient``)
_MEMCPYED = 0x02  # blosc header flag: stored uncompressed


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
        chunk = compress_chunk(probe, cname, clevel, shuffle, param, typesize)
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
    decodes_partially = True
    reads_partially = True
    decodes_into = True

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
        return bloscpack_header() + self._blosc.encode(raw.data, spec)

    def encode_transient(self, array: np.ndarray, spec: ChunkSpec) -> memoryview:
        """``encode`` compressed straight after the header in this thread's scratch buffer,
        valid until the thread's next transient encode (a caller that writes the file at
        once): bcolz appends write hundreds of chunk files, and a fresh result per chunk (then
        the header joined to it, a second one) costs allocations and page faults."""
        if array.shape != spec.shape or self.quantize:
            return memoryview(self.encode(array, spec))  # (the checks, and the copies they need)
        if array.dtype.byteorder == ">":
            array = array.astype(array.dtype.newbyteorder("<"))
        raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        out = scratch_buffer(HEADER_SIZE + raw.nbytes + MAX_OVERHEAD, slot=_ENCODE_SLOT)
        out[:HEADER_SIZE] = np.frombuffer(_BLOSCPACK_HEADER, np.uint8)
        n = self._blosc.encode_into(raw.data, spec, out[HEADER_SIZE:])
        return out[: HEADER_SIZE + n].data

    def _check_sizes(self, header: BloscHeader, spec: ChunkSpec) -> None:
        """Raise CodecError unless the blosc header's size fits ``spec`` (see module doc)."""
        expected = spec.nbytes
        if header.nbytes == expected:
            return
        rows = spec.shape[0] if spec.shape else 1
        rowbytes = expected // rows if rows else math.prod(spec.shape[1:]) * np.dtype(spec.dtype).itemsize
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

    def _checked(self, data: bytes, spec: ChunkSpec) -> tuple[memoryview, BloscHeader]:
        """The blosc chunk of a .blp file and its header, checked against ``spec``."""
        check_bloscpack_header(data)
        body = memoryview(data)[HEADER_SIZE:]
        header = read_blosc_header(body)
        self._check_sizes(header, spec)
        return body, header

    def decode(self, data: bytes, spec: ChunkSpec) -> np.ndarray:
        body, header = self._checked(data, spec)
        raw = self._blosc.decode(body, spec, max(spec.nbytes, header.nbytes))
        return _as_array(raw, spec.dtype, (spec.shape[0] if spec.shape else 1, *spec.shape[1:])).reshape(spec.shape)

    def decode_into(self, data: bytes, spec: ChunkSpec, out: np.ndarray) -> bool:
        """Decompress the chunk straight into ``out`` (C-contiguous, of ``spec``'s shape): no
        intermediate buffer and no copy. False, having written nothing, when the chunk or
        ``out`` needs the general path (bool data, a stale leftover, big-endian memory)."""
        if (
            out.shape != spec.shape
            or out.nbytes == 0
            or not out.flags.c_contiguous
            or not out.flags.writeable
            or not _raw_compatible(out.dtype)
        ):
            return False
        body, header = self._checked(data, spec)
        if header.nbytes != out.nbytes:
            return False
        dest = out.reshape(-1).view(np.uint8)
        if header.memcpyed:
            dest[:] = np.frombuffer(body, np.uint8, header.nbytes, _BLOSC_HEADER_SIZE)
            return True
        try:
            decompress_into(body, dest)
        except (RuntimeError, ValueError) as e:
            raise CodecError(f"corrupt blosc chunk ({header.cbytes} bytes, {header.nbytes} declared): {e}") from e
        return True

    def decode_partial(self, data: bytes, spec: ChunkSpec, selection: tuple) -> np.ndarray | None:
        """``decode(data, spec)[selection]`` from only the blosc blocks holding the rows the
        selection's first (row) index needs; None when that would be (nearly) every block."""
        rows = _row_span(spec, selection)
        if rows is None:
            return None
        lo, hi, local = rows
        body, header = self._checked(data, spec)
        rowbytes = spec.nbytes // spec.shape[0]
        raw = decode_blosc_range(body, header, lo * rowbytes, hi * rowbytes)
        if raw is None:
            return None
        return _as_array(raw, spec.dtype, (hi - lo, *spec.shape[1:]))[(local, *selection[1:])]

    def decode_partial_from(self, read: Callable[[int, int], bytes | None], spec: ChunkSpec, selection: tuple) -> np.ndarray | None:
        """``decode_partial`` reading only what it needs of the file through ``read(start, stop)``
        (bytes ``[start, stop)``, fewer at the end of the file, None when it is missing):
        the headers and block offsets (one small read), then the blocks holding the rows (one
        read). None (the caller then reads the file whole) when the file is missing, when the
        rows are most of the chunk, or when the pieces do not fit together, e.g. because the
        file was replaced between the two reads: the whole file then decodes, or names the
        damage. (This runs once per small read of a carray, so it is written out flat.)
        """
        span = _row_span(spec, selection)
        rows = spec.shape[0] if spec.shape else 0
        if span is None or 2 * (span[1] - span[0]) > rows:  # most of it: read it whole
            return None
        lo, hi, local = span
        head = read(0, _HEAD_READ)
        if head is None or len(head) < 2 * HEADER_SIZE:
            return None
        if head[:HEADER_SIZE] != _BLOSCPACK_HEADER:
            check_bloscpack_header(head)  # raises, naming what is wrong
        fields = _BLOSC_HEADER.unpack_from(head, HEADER_SIZE)
        flags, nbytes, bs, cbytes = fields[2], fields[4], fields[5], fields[6]
        if len(head) == HEADER_SIZE + cbytes:  # a small file: it is all here
            part = self.decode_partial(head, spec, selection)
            return self.decode(head, spec)[selection] if part is None else part
        expected = spec.nbytes
        if nbytes != expected:
            self._check_sizes(BloscHeader._make(fields), spec)  # raises unless a stale leftover
        rowbytes = expected // rows
        start, stop = lo * rowbytes, hi * rowbytes
        if flags & _MEMCPYED:
            base = HEADER_SIZE + _BLOSC_HEADER_SIZE
            raw: bytes | memoryview | None = read(base + start, base + stop)
            if raw is None or len(raw) != stop - start:
                return None
        else:
            if bs <= 0:
                raise CodecError(f"blosc header declares a block size of {bs} bytes")
            nblocks = -(-nbytes // bs)
            first, last = start // bs, (stop - 1) // bs
            if min(nbytes, (last + 1) * bs) - first * bs < bs:  # c-blosc needs a full block
                first = max(first - 1, 0)
            if first == 0 and last >= nblocks - 1:
                return None
            table_end = HEADER_SIZE + _BLOSC_HEADER_SIZE + 4 * nblocks
            if len(head) < table_end:
                head = read(0, table_end)
                if head is None or len(head) != table_end:
                    return None
            bstarts = _offsets(nblocks).unpack_from(head, HEADER_SIZE + _BLOSC_HEADER_SIZE)
            order = sorted(bstarts)
            if order[0] < table_end - HEADER_SIZE or order[-1] >= cbytes or len(set(order)) != nblocks:
                return None  # corrupt offsets: the whole read reports them
            order.append(cbytes)
            spans = [(b, order[bisect.bisect_right(order, b)]) for b in bstarts[first : last + 1]]
            begin, end = spans[0][0], spans[-1][1]
            if len(spans) > 1:  # (blocks stored out of order by a threaded writer)
                begin, end = min(b for b, _ in spans), max(e for _, e in spans)
            data = read(HEADER_SIZE + begin, HEADER_SIZE + end)
            if data is None or len(data) != end - begin:
                return None
            try:
                raw = _decompress_blocks(memoryview(data), begin, BloscHeader._make(fields), (first, last), spans, start, stop)
            except CodecError:
                return None
        part = _as_array(raw, spec.dtype, (hi - lo, *spec.shape[1:]))
        if len(selection) == 1 and type(local) is slice and local.step == 1:  # the rows, as they are
            return part
        return part[(local, *selection[1:])]


@functools.lru_cache(maxsize=64)
def _offsets(nblocks: int) -> struct.Struct:
    """The block offset table of a chunk with ``nblocks`` blocks."""
    return struct.Struct(f"<{nblocks}i")


def _raw_compatible(dtype: np.dtype) -> bool:
    """Whether decompressed (little-endian) bytes are ``dtype``'s memory as they are."""
    if dtype.kind == "b":  # bcolz bools may be any non-zero byte
        return False
    return dtype.itemsize == 1 or dtype.byteorder == "<" or (dtype.byteorder in "=|" and sys.byteorder == "little")


def _row_span(spec: ChunkSpec, selection: tuple) -> tuple[int, int, Any] | None:
    """(first row, stop row, selection of those rows) of a selection whose first index is an
    int or a slice; None for index arrays (rare on this path: decode the whole chunk)."""
    if not spec.shape or not selection or spec.nbytes == 0:
        return None
    rows = spec.shape[0]
    first = selection[0]
    if isinstance(first, slice):
        start, stop, step = first.indices(rows)
        if step < 1 or stop <= start:
            return None
        return start, start + (stop - 1 - start) // step * step + 1, slice(0, (stop - 1 - start) // step * step + 1, step)
    if isinstance(first, (int, np.integer)) and -rows <= first < rows:
        lo = int(first) % rows
        return lo, lo + 1, 0
    return None


@functools.lru_cache(maxsize=64)
def _stored(dtype: np.dtype) -> tuple[np.dtype, bool]:
    """The dtype of the stored (little-endian) bytes, and whether it differs from ``dtype``."""
    stored = dtype.newbyteorder("<") if dtype.itemsize > 1 else dtype
    return stored, stored != dtype


def _as_array(raw: bytes | memoryview, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """Little-endian decompressed bytes as an array of ``shape`` in ``dtype`` (native order)."""
    dtype = np.dtype(dtype)
    count = math.prod(shape)
    if dtype.kind == "b":
        flat = np.frombuffer(raw, dtype=np.uint8, count=count) != 0
    else:
        stored, swap = _stored(dtype)
        flat = np.frombuffer(raw, dtype=stored, count=count)
        if swap:
            flat = flat.astype(dtype)
    return flat.reshape(shape) if len(shape) > 1 else flat


def _nblocks(header: BloscHeader) -> int:
    if header.blocksize <= 0:
        raise CodecError(f"blosc header declares a block size of {header.blocksize} bytes")
    return -(-header.nbytes // header.blocksize)


def _needed_blocks(header: BloscHeader, start: int, stop: int) -> tuple[int, int] | None:
    """The blocks holding decompressed bytes ``[start, stop)`` (first, last), widened so that
    they make a chunk c-blosc accepts; None when that is every block."""
    bs = header.blocksize
    nblocks = _nblocks(header)
    first, last = start // bs, (stop - 1) // bs
    # c-blosc refuses a chunk smaller than one block: a range inside the short last block
    # takes the block before it too
    if min(header.nbytes, (last + 1) * bs) - first * bs < bs:
        first = max(first - 1, 0)
    if first == 0 and last >= nblocks - 1:
        return None
    return first, last


def _block_spans(chunk: memoryview, header: BloscHeader, first: int, last: int) -> list[tuple[int, int]]:
    """Where blocks ``first..last`` lie in the chunk, from its block offset table (``chunk``
    holds at least the header and the table)."""
    nblocks = _nblocks(header)
    table_end = _BLOSC_HEADER_SIZE + 4 * nblocks
    if table_end > header.cbytes:
        raise CodecError(f"blosc chunk of {header.cbytes} bytes is too short for its {nblocks} block offsets")
    bstarts = struct.unpack_from(f"<{nblocks}i", chunk, _BLOSC_HEADER_SIZE)
    # a block runs to the next block start above it (c-blosc with threads may store blocks
    # out of order); offsets must be distinct and inside the chunk
    order = sorted(bstarts)
    if order[0] < table_end or order[-1] >= header.cbytes or len(set(order)) != nblocks:
        raise CodecError("blosc block offsets are out of range or overlap (corrupt chunk)")
    order.append(header.cbytes)
    return [(s, order[bisect.bisect_right(order, s)]) for s in bstarts[first : last + 1]]


def _decompress_blocks(
    data: memoryview, offset: int, header: BloscHeader, blocks: tuple[int, int], spans: list[tuple[int, int]], start: int, stop: int
) -> memoryview:
    """Decompressed bytes ``[start, stop)`` from the compressed ``spans`` of blocks
    ``first..last``; ``data`` holds the chunk's bytes from ``offset`` on.

    The blocks are copied into a smaller, valid chunk with the same header flags, which
    c-blosc then decompresses: this works for every codec, shuffle and split mode c-blosc
    itself handles.
    """
    first, last = blocks
    bs = header.blocksize
    pos = _BLOSC_HEADER_SIZE + 4 * len(spans)
    offsets = []
    for s, e in spans:
        offsets.append(pos)
        pos += e - s
    nbytes = min(header.nbytes, (last + 1) * bs) - first * bs
    head = _BLOSC_HEADER.pack(header.version, header.versionlz, header.flags, header.typesize, nbytes, bs, pos)
    small = b"".join([head, struct.pack(f"<{len(offsets)}i", *offsets), *(data[s - offset : e - offset] for s, e in spans)])
    try:
        out = decompress_bytes(small)  # (returning bytes is cheaper than filling an array)
    except (RuntimeError, ValueError) as e:
        raise CodecError(f"corrupt blosc chunk ({header.cbytes} bytes, blocks {first}..{last}): {e}") from e
    if len(out) != nbytes:
        raise CodecError(f"corrupt blosc chunk ({header.cbytes} bytes): blocks {first}..{last} gave {len(out)} bytes, not {nbytes}")
    skip = start - first * bs
    return memoryview(out)[skip : skip + stop - start]


def decode_blosc_range(chunk: memoryview, header: BloscHeader, start: int, stop: int) -> memoryview | None:
    """Bytes ``[start, stop)`` of a Blosc-1 chunk's decompressed data, decompressing only the
    blocks that hold them; None when those are all the blocks (a full decode costs the same).

    c-blosc compresses each block on its own (``bstarts`` gives where each begins), so only
    those blocks need to be read and decompressed (see ``_decompress_blocks``).
    """
    if header.memcpyed:  # stored uncompressed: the data itself
        return chunk[_BLOSC_HEADER_SIZE + start : _BLOSC_HEADER_SIZE + stop]
    blocks = _needed_blocks(header, start, stop)
    if blocks is None:
        return None
    return _decompress_blocks(chunk, 0, header, blocks, _block_spans(chunk, header, *blocks), start, stop)
