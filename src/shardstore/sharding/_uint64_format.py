"""``neuroglancer_uint64_sharded_v1``: the sharding spec, key hashing and reading the shard byte
layout (``_uint64_assemble.py`` lays shards out).

Pure functions, no I/O (``uint64.py`` does the reading and writing). Facts from
``shared/specs/precomputed.md`` section 5:

- a uint64 key ``k`` is shifted right by ``preshift_bits``, hashed (identity, or the low 64 bits
  of MurmurHash3_x86_128 of its 8 little-endian bytes, seed 0) and split into a minishard
  number (low ``minishard_bits``) and a shard number (the next ``shard_bits``);
- a shard file starts with ``2**minishard_bits`` ``(start, end)`` uint64 LE pairs locating each
  minishard index, relative to the end of that shard index;
- a minishard index is a ``[3, n]`` uint64 LE array (optionally gzipped): delta-coded ids,
  delta-coded value offsets (relative to the end of the previous value), value sizes.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import mmh3
import numpy as np

from ..codecs.gzip import gunzip
from ..errors import CodecError, InvalidKeyError, MetadataError

__all__ = [
    "SHARDING_TYPE",
    "UINT64_MAX",
    "ShardingSpec",
    "MinishardIndex",
    "decode_minishard_index",
    "decode_minishard_indexes",
    "check_index_entry",
    "shard_entries",
    "parse_uint64_key",
    "gzip_compress",
    "gzip_decompress",
    "murmurhash3_x86_128_low64",
]

SHARDING_TYPE = "neuroglancer_uint64_sharded_v1"
UINT64_MAX = (1 << 64) - 1
_HASHES = ("identity", "murmurhash3_x86_128")
_ENCODINGS = ("raw", "gzip")
_PACK_Q = struct.Struct("<Q").pack
# deflate cannot expand more than ~1032:1, so this bound never refuses a valid stream and
# keeps a hostile one from allocating more than ~1 KiB per stored byte
_GZIP_MAX_RATIO = 1100


if TYPE_CHECKING:  # typed by isal's stubs; gzip_compress still handles its absence
    from isal.isal_zlib import compress as _isal_compress
else:
    try:  # same stream format as zlib, several times faster
        from isal.isal_zlib import compress as _isal_compress
    except ImportError:  # pragma: no cover - only without python-isal
        _isal_compress = None


def gzip_compress(data: bytes | memoryview) -> bytes:
    """One gzip member (ISA-L level 2 when available: zlib-6-like ratio, much faster)."""
    if _isal_compress is not None:
        return _isal_compress(data, 2, 31)  # wbits 31: gzip header and trailer
    return zlib.compress(data, 6, 31)


def gzip_decompress(data: bytes | memoryview, what: str) -> bytes:
    """Gunzip ``data``; a corrupt stream is a CodecError naming ``what``."""
    try:
        return gunzip(data, len(data) * _GZIP_MAX_RATIO + 1024)
    except CodecError as e:
        raise CodecError(f"{what}: {e}") from e


def parse_uint64_key(key: object) -> int:
    """The uint64 a store key names; anything but a canonical decimal uint64 is InvalidKeyError."""
    if not isinstance(key, str):
        raise InvalidKeyError(f"store key must be a str, got {type(key).__name__}: {key!r}")
    if not (key.isascii() and key.isdigit()) or (len(key) > 1 and key[0] == "0") or len(key) > 20:
        raise InvalidKeyError(f"not a uint64 key (a decimal integer without leading zeros): {key!r}")
    k = int(key)
    if k > UINT64_MAX:
        raise InvalidKeyError(f"key {key!r} is larger than 2**64 - 1")
    return k


def _int_member(obj: Mapping[str, Any], name: str, where: str) -> int:
    v = obj.get(name)
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= 64:
        raise MetadataError(f"{where}: {name!r} must be an integer 0-64, got {v!r}")
    return v


def _fmix32(h: np.ndarray) -> np.ndarray:
    h ^= h >> np.uint32(16)
    h *= np.uint32(0x85EBCA6B)
    h ^= h >> np.uint32(13)
    h *= np.uint32(0xC2B2AE35)
    h ^= h >> np.uint32(16)
    return h


def _rotl32(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def murmurhash3_x86_128_low64(values: np.ndarray) -> np.ndarray:
    """Low 64 bits of MurmurHash3_x86_128 (seed 0) of each uint64 as 8 little-endian bytes.

    The hash of an 8-byte input is only its tail step and the finalization, so it vectorizes
    in uint32 arithmetic (wrapping, as the reference); checked against mmh3 in the tests.
    """
    v = np.asarray(values, dtype=np.uint64)
    k1 = (v & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    k2 = (v >> np.uint64(32)).astype(np.uint32)
    k1 *= np.uint32(0x239B961B)
    k1 = _rotl32(k1, 15)
    k1 *= np.uint32(0xAB0E9789)
    k2 *= np.uint32(0xAB0E9789)
    k2 = _rotl32(k2, 16)
    k2 *= np.uint32(0x38B34AE5)
    length = np.uint32(8)
    h1, h2 = k1 ^ length, k2 ^ length  # h3 = h4 = 0 ^ length
    h1 = h1 + h2 + length + length
    h2 = h2 + h1
    h3 = h1 + length
    h1, h2, h3 = _fmix32(h1), _fmix32(h2), _fmix32(h3)
    h1 = h1 + h2 + h3 + h3  # h4 == h3 at this point
    h2 = h2 + h1
    return h1.astype(np.uint64) | (h2.astype(np.uint64) << np.uint64(32))


@dataclass(frozen=True)
class ShardingSpec:
    """A parsed ``neuroglancer_uint64_sharded_v1`` sharding spec."""

    preshift_bits: int
    hash: str
    minishard_bits: int
    shard_bits: int
    minishard_index_encoding: str = "raw"
    data_encoding: str = "raw"

    @classmethod
    def from_json(cls, obj: object, where: str = "sharding spec") -> ShardingSpec:
        """Parse and validate a sharding JSON object; MetadataError names ``where`` and the field."""
        if not isinstance(obj, Mapping):
            raise MetadataError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        if obj.get("@type") != SHARDING_TYPE:
            raise MetadataError(f"{where}: '@type' must be {SHARDING_TYPE!r}, got {obj.get('@type')!r}")
        known = {"@type", "preshift_bits", "hash", "minishard_bits", "shard_bits",
                 "minishard_index_encoding", "data_encoding"}
        extra = set(obj) - known
        if extra:
            raise MetadataError(f"{where}: unknown member(s) {sorted(extra)}")
        h = obj.get("hash")
        if h not in _HASHES:
            raise MetadataError(f"{where}: 'hash' must be one of {list(_HASHES)}, got {h!r}")
        encodings = {}
        for name in ("minishard_index_encoding", "data_encoding"):
            enc = obj.get(name, "raw")
            if enc not in _ENCODINGS:
                raise MetadataError(f"{where}: {name!r} must be one of {list(_ENCODINGS)}, got {enc!r}")
            encodings[name] = enc
        return cls(
            preshift_bits=_int_member(obj, "preshift_bits", where),
            hash=h,
            minishard_bits=_int_member(obj, "minishard_bits", where),
            shard_bits=_int_member(obj, "shard_bits", where),
            **encodings,
        )

    def to_json(self) -> dict[str, Any]:
        """The spec as JSON (every member written, as tensorstore does)."""
        return {
            "@type": SHARDING_TYPE,
            "preshift_bits": self.preshift_bits,
            "hash": self.hash,
            "minishard_bits": self.minishard_bits,
            "shard_bits": self.shard_bits,
            "minishard_index_encoding": self.minishard_index_encoding,
            "data_encoding": self.data_encoding,
        }

    @property
    def num_minishards(self) -> int:
        return 1 << self.minishard_bits

    @property
    def index_size(self) -> int:
        """Bytes of the shard index at the start of every shard file."""
        return 16 << self.minishard_bits

    def hash_key(self, key: int) -> int:
        """The 64-bit hash of a key (after the preshift)."""
        h = key >> self.preshift_bits
        if self.hash == "identity":
            return h
        return mmh3.hash128(_PACK_Q(h), 0, False, False) & UINT64_MAX

    def locate(self, key: int) -> tuple[int, int]:
        """``(shard number, minishard number)`` of a key."""
        h = self.hash_key(key)
        return (h >> self.minishard_bits) & ((1 << self.shard_bits) - 1), h & ((1 << self.minishard_bits) - 1)

    def locate_arrays(self, keys: Sequence[int]) -> tuple[np.ndarray, np.ndarray] | None:
        """``(shard numbers, minishard numbers)`` of many keys as NumPy arrays, or None when
        this spec's bit layout is not vectorizable (then use ``locate``)."""
        pre, mb, sb = self.preshift_bits, self.minishard_bits, self.shard_bits
        if not (pre < 64 and mb < 64 and mb + sb <= 64):
            return None
        h = np.array(keys, dtype=np.uint64) >> np.uint64(pre)
        if self.hash != "identity":
            h = murmurhash3_x86_128_low64(h)
        return (h >> np.uint64(mb)) & np.uint64((1 << sb) - 1), h & np.uint64((1 << mb) - 1)

    def locate_many(self, keys: Sequence[int]) -> list[tuple[int, int]]:
        """``locate`` of many keys (vectorized with NumPy for large batches)."""
        pre, mb, sb = self.preshift_bits, self.minishard_bits, self.shard_bits
        located = self.locate_arrays(keys) if len(keys) >= 32 else None
        if located is not None:
            return list(zip(located[0].tolist(), located[1].tolist()))
        mmask, smask = (1 << mb) - 1, (1 << sb) - 1
        if self.hash == "identity":
            hashes: Iterable[int] = (k >> pre for k in keys)
        else:
            h128, pack, m64 = mmh3.hash128, _PACK_Q, UINT64_MAX
            hashes = (h128(pack(k >> pre), 0, False, False) & m64 for k in keys)
        return [((h >> mb) & smask, h & mmask) for h in hashes]

    def shard_name(self, shard: int) -> str:
        """The shard's hex name without extension: lowercase, zero-padded to ceil(bits/4) digits."""
        return format(shard, "x").zfill(-(-self.shard_bits // 4))

    def parse_shard_name(self, stem: str) -> int | None:
        """The shard number a file stem names, or None if it is not this spec's spelling."""
        if not stem or any(c not in "0123456789abcdef" for c in stem):
            return None
        shard = int(stem, 16)
        if shard >> self.shard_bits or self.shard_name(shard) != stem:
            return None
        return shard


@dataclass(frozen=True, slots=True)
class MinishardIndex:
    """A decoded minishard index: sorted keys and each value's absolute start and stored size.

    NumPy arrays (24 bytes per entry, built without a Python loop); lookups bisect the keys.
    """

    keys: np.ndarray  # uint64, ascending
    starts: np.ndarray  # uint64, absolute offsets in the shard file
    sizes: np.ndarray  # uint64

    def __len__(self) -> int:
        return len(self.keys)

    def lookup(self, key: int) -> tuple[int, int] | None:
        """``(start, size)`` of ``key``, or None when it is not in this minishard."""
        keys = self.keys
        # (array methods and .item(): 3x cheaper than np.searchsorted and numpy scalars)
        i = int(keys.searchsorted(np.uint64(key)))
        if i < len(keys) and keys.item(i) == key:
            return self.starts.item(i), self.sizes.item(i)
        return None

    def items(self) -> Iterator[tuple[int, int, int]]:
        """Every ``(key, start, size)``."""
        return zip(self.keys.tolist(), self.starts.tolist(), self.sizes.tolist())


_EMPTY_U64 = np.zeros(0, dtype=np.uint64)


def value_spans(
    found: Mapping[int, MinishardIndex], reqs: Sequence[tuple[int, int, int]], delta: int
) -> list[tuple[int, int, int]]:
    """``(position, start + delta, end + delta)`` of each ``(position, key, minishard)`` request
    whose key is in its minishard's index (``found``; a minishard not in it is empty), in
    file order. All of them in one vectorized bisection of the minishards' keys laid end to
    end: a batch has 1-3 keys per minishard, and a NumPy search per minishard cost ~12 us."""
    reqs = [r for r in reqs if r[2] in found]
    if len(reqs) <= 2:  # (a plain bisect per key is cheaper than the arrays)
        spans = []
        for pos, key, m in reqs:
            hit = found[m].lookup(key)
            if hit is not None:
                spans.append((pos, hit[0] + delta, hit[0] + hit[1] + delta))
        spans.sort(key=lambda span: span[1])
        return spans
    minis = sorted({m for _, _, m in reqs})
    slot = {m: i for i, m in enumerate(minis)}
    indexes = [found[m] for m in minis]
    bounds = np.zeros(len(minis) + 1, dtype=np.int64)
    np.cumsum([len(mi.keys) for mi in indexes], out=bounds[1:])
    keys = np.concatenate([mi.keys for mi in indexes])
    which = np.array([slot[m] for _, _, m in reqs], dtype=np.int64)
    want = np.array([key for _, key, _ in reqs], dtype=np.uint64)
    lo, end = bounds[which], bounds[which + 1]
    hi = end.copy()
    last = max(len(keys) - 1, 0)
    while True:  # bisect_left of each key within its minishard's stretch
        active = lo < hi
        if not active.any():
            break
        mid = (lo + hi) >> 1
        less = keys[np.minimum(mid, last)] < want
        lo = np.where(active & less, mid + 1, lo)
        hi = np.where(active & ~less, mid, hi)
    at = np.minimum(lo, last)
    ok = (lo < end) & (keys[at] == want) if len(keys) else np.zeros(len(reqs), dtype=bool)
    pick = at[ok]
    # (int64: the decoder refused offsets and sizes from 2**62 on)
    starts = np.concatenate([mi.starts for mi in indexes])[pick].astype(np.int64) + delta
    sizes = np.concatenate([mi.sizes for mi in indexes])[pick].astype(np.int64)
    positions = np.array([pos for pos, _, _ in reqs], dtype=np.int64)[ok]
    order = np.argsort(starts, kind="stable")
    return list(zip(positions[order].tolist(), starts[order].tolist(), (starts + sizes)[order].tolist()))


def decode_minishard_index(
    data: bytes | memoryview, spec: ShardingSpec, shard_file: str, minishard: int
) -> MinishardIndex:
    """Decode one minishard index (``minishard_index_encoding`` applied) to absolute ranges."""
    what = f"shard {shard_file!r}, minishard {minishard}"
    if spec.minishard_index_encoding == "gzip":
        data = gzip_decompress(data, f"{what}: minishard index")
    if len(data) % 24:
        raise CodecError(f"{what}: minishard index of {len(data)} bytes is not a multiple of 24")
    n = len(data) // 24
    if n == 0:
        return MinishardIndex(_EMPTY_U64, _EMPTY_U64, _EMPTY_U64)
    if n <= _FEW_ENTRIES:
        return _few_entries(struct.unpack(f"<{3 * n}Q", data), n, spec.index_size, what)
    a = np.frombuffer(data, dtype="<u8").reshape(3, n)
    keys = np.cumsum(a[0], dtype=np.uint64)
    # a uint64 sum that wraps shows as a decrease (each addend is below 2**64)
    if n > 1 and (keys[1:] < keys[:-1]).any():
        raise CodecError(f"{what}: minishard index key deltas overflow uint64")
    # offsets and sizes: their float sums tell (cheaply) whether the uint64 sums stay far
    # below any possible file size; past 2**62 nothing valid remains to read
    if a[1].sum(dtype=np.float64) >= 2.0**62 or a[2].sum(dtype=np.float64) >= 2.0**62:
        raise CodecError(f"{what}: minishard index points beyond any possible shard size")
    sizes = a[2]
    starts = np.cumsum(a[1], dtype=np.uint64)
    starts += np.cumsum(sizes, dtype=np.uint64) - sizes  # sizes of the values before each
    starts += np.uint64(spec.index_size)
    return MinishardIndex(keys, starts, sizes.copy())


#: minishard indexes of at most this many entries are summed with Python ints: NumPy's calls
#: (three cumsums, two sums) cost ~33 us where these take ~9 (a minishard per chunk, as fine
#: minishard bits give, makes every chunk read of a cold shard decode one)
_FEW_ENTRIES = 8


def _few_entries(words: Sequence[int], n: int, index_size: int, what: str) -> MinishardIndex:
    """``decode_minishard_index`` of ``n`` entries unpacked to ``words`` (the same checks)."""
    offsets, sizes = words[n : 2 * n], words[2 * n :]
    keys, starts = [], []
    key = end = 0
    for delta, offset, size in zip(words[:n], offsets, sizes):
        key += delta
        if key > UINT64_MAX:
            raise CodecError(f"{what}: minishard index key deltas overflow uint64")
        keys.append(key)
        starts.append(end + offset + index_size)
        end += offset + size
    if sum(offsets) >= 2**62 or sum(sizes) >= 2**62:
        raise CodecError(f"{what}: minishard index points beyond any possible shard size")
    return MinishardIndex(np.array(keys, np.uint64), np.array(starts, np.uint64), np.array(sizes, np.uint64))


def decode_minishard_indexes(
    blobs: Sequence[bytes | memoryview], spec: ShardingSpec, shard_file: str, minishards: Sequence[int]
) -> list[MinishardIndex]:
    """``decode_minishard_index`` of several minishards of one shard, vectorized across them."""
    if len(blobs) < 4:
        return [decode_minishard_index(b, spec, shard_file, m) for b, m in zip(blobs, minishards)]
    raws: Sequence[bytes | memoryview] = blobs
    if spec.minishard_index_encoding == "gzip":
        try:
            raws = [gunzip(data, len(data) * _GZIP_MAX_RATIO + 1024) for data in blobs]
        except CodecError:  # the single decoder names the minishard
            return [decode_minishard_index(b, spec, shard_file, m) for b, m in zip(blobs, minishards)]
    ns = [len(r) // 24 for r in raws]
    if any(len(r) % 24 for r in raws):  # the single decoder words the error
        return [decode_minishard_index(b, spec, shard_file, m) for b, m in zip(blobs, minishards)]
    # each minishard's index is 3 rows of n words (key deltas, offset deltas, sizes): all of
    # them read as one array and gathered into 3 rows of all the entries side by side
    words = np.frombuffer(b"".join(raws), dtype="<u8")
    counts = np.array(ns, dtype=np.int64)
    starts_at = np.zeros(len(ns), dtype=np.int64)
    np.cumsum(counts[:-1], out=starts_at[1:])
    row = np.repeat(counts, counts)  # each entry's row length
    first = np.arange(len(row), dtype=np.int64) + np.repeat(2 * starts_at, counts)  # its word in row 0
    a = np.stack([words[first], words[first + row], words[first + 2 * row]])
    # per-minishard running sums: one cumsum over all, minus the total before each minishard
    # (uint64 arithmetic wraps consistently, so the differences are exact modulo 2**64)
    c = np.cumsum(a, axis=1, dtype=np.uint64)
    before = np.zeros((3, len(ns)), dtype=np.uint64)
    later = starts_at > 0
    before[:, later] = c[:, starts_at[later] - 1]
    c -= np.repeat(before, ns, axis=1)
    keys = c[0]
    drops = keys[1:] < keys[:-1]
    seams = starts_at[1:] - 1  # a new minishard may start lower than the last key before it
    drops[seams[(seams >= 0) & (seams < len(drops))]] = False
    if drops.any() or a[1].sum(dtype=np.float64) >= 2.0**62 or a[2].sum(dtype=np.float64) >= 2.0**62:
        # something is off: decode one by one so the error names the minishard
        return [decode_minishard_index(r, _RAW_INDEX[spec], shard_file, m) for r, m in zip(raws, minishards)]
    sizes = a[2]
    starts = c[1] + (c[2] - sizes) + np.uint64(spec.index_size)
    out = []
    for s0, n in zip(starts_at.tolist(), ns):
        out.append(MinishardIndex(keys[s0 : s0 + n], starts[s0 : s0 + n], sizes[s0 : s0 + n]))
    return out


class _RawIndexSpecs(dict):
    """The same spec with a raw minishard index encoding (for re-decoding inflated indexes)."""

    def __missing__(self, spec: ShardingSpec) -> ShardingSpec:
        raw = ShardingSpec(spec.preshift_bits, spec.hash, spec.minishard_bits, spec.shard_bits, "raw", spec.data_encoding)
        self[spec] = raw
        return raw


_RAW_INDEX = _RawIndexSpecs()


def check_index_entry(start: int, end: int, spec: ShardingSpec, shard_file: str, minishard: int) -> None:
    """Refuse a shard index entry whose range is inverted or absurd (before reading it)."""
    if end < start:
        raise CodecError(
            f"shard {shard_file!r}: shard index entry of minishard {minishard} is inverted ([{start}, {end}))"
        )
    if end > UINT64_MAX - spec.index_size:
        raise CodecError(
            f"shard {shard_file!r}: minishard index range of minishard {minishard} is out of bounds ([{start}, {end}))"
        )


def shard_entries(
    shard: bytes | memoryview, spec: ShardingSpec, shard_file: str, minishard_of: dict[int, int] | None = None
) -> dict[int, bytes | memoryview]:
    """Every ``key -> stored value`` of a whole shard file (values are views into ``shard``);
    ``minishard_of``, when given, receives each key's minishard number.

    Used before a shard is rewritten; every range is checked against the file's length.
    """
    view = memoryview(shard)
    total = len(view)
    isz = spec.index_size
    if total < isz:
        raise CodecError(f"shard {shard_file!r} is truncated: {total} bytes, shorter than its {isz}-byte shard index")
    index = np.frombuffer(view[:isz], dtype="<u8").reshape(-1, 2)
    nonempty = np.flatnonzero(index[:, 0] != index[:, 1]).tolist()
    out: dict[int, bytes | memoryview] = {}  # views; callers add bytes to the same dict
    for m in nonempty:
        start, end = int(index[m, 0]), int(index[m, 1])
        check_index_entry(start, end, spec, shard_file, m)
        if isz + end > total:
            raise CodecError(
                f"shard {shard_file!r}: minishard index range of minishard {m} [{isz + start}, {isz + end}) "
                f"is out of bounds of the {total}-byte shard"
            )
        mi = decode_minishard_index(view[isz + start : isz + end], spec, shard_file, m)
        for key, vstart, size in mi.items():
            if vstart + size > total:
                raise CodecError(
                    f"shard {shard_file!r}: value of key {key} at [{vstart}, {vstart + size}) is out of "
                    f"bounds of the {total}-byte shard"
                )
            out[key] = view[vstart : vstart + size]
            if minishard_of is not None:
                minishard_of[key] = m
    return out
