"""Inputs for the fuzz harness: valid datasets built from their specs, and mutations of them.

A fuzz *case* is a small dataset (a dict of store keys to bytes) plus how to open it and which
key was changed. Valid cases come from three sources:

- the reference fixtures (``$SHARDSTORE_FIXTURES`` or ``<repo>/../shared/fixtures``), written
  by tensorstore, zarr-python, z5py, bcolz and CloudVolume;
- builders that lay out containers byte by byte from the specs, independently of shardstore's
  encoders: a Zarr v3 shard (inner chunks in any order with gaps and empty entries, index at
  the start or end, with or without crc32c), a neuroglancer uint64 shard (shard index,
  delta-coded minishard indexes, raw or gzip), N5 blocks (default and varlength headers);
- builders that let shardstore write a random small dataset (bcolz bloscpack frames,
  precomputed raw / jpeg / png / compressed_segmentation, N5 compressors), which the interop
  tests prove readable by the reference libraries.

Every builder draws its choices from a ``Draw``: ``RandomDraw`` (a seeded ``random.Random``,
for the fast long run) or ``HypothesisDraw`` (``st.data()``, so failures shrink). Mutations
are structure-aware (overwrite a header field or index entry with an interesting integer,
replace a JSON member with a hostile value) or plain byte-level (flip, set, insert, delete,
truncate, extend, splice).
"""

from __future__ import annotations

import bz2
import gzip
import itertools
import json
import lzma
import math
import random
import struct
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

__all__ = [
    "BUILDERS",
    "INTERESTING_INTS",
    "Case",
    "Draw",
    "HypothesisDraw",
    "RandomDraw",
    "find_fixtures",
    "fixture_cases",
    "mutate_bytes",
    "mutate_case",
    "mutate_json",
]

T = TypeVar("T")

#: integers that break length and offset arithmetic
INTERESTING_INTS = (
    0, 1, 2, 3, 7, 8, 15, 16, 127, 128, 255, 256, 1023, 4096, 65535, 65536,
    2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**40, 2**48, 2**63 - 1, 2**63, 2**64 - 1,
)


class Draw(Protocol):
    """Where a builder or mutator gets its choices from."""

    def integer(self, lo: int, hi: int) -> int: ...
    def choice(self, seq: Sequence[T]) -> T: ...
    def bytes(self, n: int) -> bytes: ...


class RandomDraw:
    """Choices from a seeded ``random.Random``: cheap and reproducible from the seed."""

    def __init__(self, seed: int | str) -> None:
        self.rng = random.Random(seed)

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def choice(self, seq: Sequence[T]) -> T:
        return seq[self.rng.randrange(len(seq))]

    def bytes(self, n: int) -> bytes:
        return self.rng.randbytes(n)


class HypothesisDraw:
    """Choices from Hypothesis (``st.data()``), so that a failing case shrinks."""

    def __init__(self, data: Any) -> None:
        from hypothesis import strategies as st

        self._st = st
        self._data = data

    def integer(self, lo: int, hi: int) -> int:
        return int(self._data.draw(self._st.integers(lo, hi)))

    def choice(self, seq: Sequence[T]) -> T:
        return seq[self.integer(0, len(seq) - 1)]

    def bytes(self, n: int) -> bytes:
        return bytes(self._data.draw(self._st.binary(min_size=n, max_size=n)))


@dataclass(frozen=True)
class Case:
    """A dataset as store keys -> bytes, how to open it, and the key a mutation changed.

    ``kind``: "zarr3", "n5", "precomputed", "bcolz" (opened with ``shardstore.open`` at each of
    ``paths``) or "kv" (the uint64 sharded key-value store, spec in ``kv_spec``).
    ``fields``: key -> byte offsets of integer fields (offset, size) a structure-aware
    mutation may overwrite (shard index entries, header fields).
    """

    name: str
    kind: str
    files: dict[str, bytes]
    paths: tuple[str, ...] = ("",)
    kv_spec: dict[str, Any] | None = None
    mutated: str | None = None
    fields: dict[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    #: local files only (the C extension reads files by path)
    local: bool = False

    def with_file(self, key: str, value: bytes) -> Case:
        files = dict(self.files)
        files[key] = value
        return replace(self, files=files, mutated=key)


# -- fixtures ---------------------------------------------------------------------------------

def find_fixtures() -> Path | None:
    """The reference fixtures, located as the tests do."""
    import os

    env = os.environ.get("SHARDSTORE_FIXTURES")
    cands = [Path(env)] if env else []
    cands.append(Path(__file__).resolve().parents[3].parent / "shared" / "fixtures")
    for c in cands:
        if (c / "MANIFEST.json").is_file():
            return c.resolve()
    return None


def fixture_cases(root: Path | None = None) -> list[Case]:
    """One Case per fixture of the manifest (every file of its directory)."""
    root = root or find_fixtures()
    if root is None:
        return []
    manifest = json.loads((root / "MANIFEST.json").read_text())
    out = []
    for c in manifest["cases"]:
        d = root / c["path"]
        files = {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}
        if c["format"] == "uint64_sharded":
            spec = json.loads(files.pop("sharding.json"))
            out.append(Case(c["id"], "kv", files, kv_spec=spec))
        elif c["format"] == "precomputed":
            out.append(Case(c["id"], "precomputed", files, paths=tuple(c["arrays"])))
        else:
            out.append(Case(c["id"], c["format"], files, paths=tuple(c["arrays"]) or ("",)))
    return out


# -- byte-level and structure-aware mutation --------------------------------------------------

def mutate_bytes(d: Draw, data: bytes, fields: Sequence[tuple[int, int]] = (), donor: bytes = b"") -> bytes:
    """One to four edits of ``data``; ``fields`` (offset, size) are integer fields to target."""
    buf = bytearray(data)
    for _ in range(d.integer(1, 4)):
        op = d.integer(0, 9)
        n = len(buf)
        if op <= 1 and fields:  # overwrite a known integer field with an interesting value
            off, size = d.choice(fields)
            if off + size <= n:
                v = d.choice(INTERESTING_INTS) if d.integer(0, 3) else n + d.integer(-8, 8)
                v &= (1 << (8 * size)) - 1
                buf[off : off + size] = v.to_bytes(size, "big" if d.integer(0, 4) == 0 else "little")
                continue
        if n == 0 or op == 2:
            buf[d.integer(0, n) : d.integer(0, n)] = d.bytes(d.integer(1, 16))
        elif op == 3:  # flip a bit
            i = d.integer(0, n - 1)
            buf[i] ^= 1 << d.integer(0, 7)
        elif op == 4:  # interesting integer at any offset
            size = d.choice((1, 2, 4, 8))
            i = d.integer(0, max(n - size, 0))
            v = d.choice(INTERESTING_INTS) & ((1 << (8 * size)) - 1)
            buf[i : i + size] = v.to_bytes(size, "big" if d.integer(0, 1) else "little")
        elif op == 5:  # truncate
            del buf[d.integer(0, n - 1) :]
        elif op == 6:  # delete a run
            i = d.integer(0, n - 1)
            del buf[i : i + d.integer(1, 64)]
        elif op == 7:  # extend
            buf += d.bytes(d.integer(1, 64)) if d.integer(0, 1) else bytes(d.integer(1, 4096))
        elif op == 8:  # random bytes over a run
            i = d.integer(0, n - 1)
            k = d.integer(1, 8)
            buf[i : i + k] = d.bytes(k)
        else:  # splice from another file of the dataset
            if donor:
                i, j = d.integer(0, len(donor) - 1), d.integer(0, n - 1)
                k = d.integer(1, 256)
                buf[j : j + k] = donor[i : i + k]
            else:
                buf[d.integer(0, n - 1)] = d.integer(0, 255)
    return bytes(buf)


#: JSON values that break metadata parsers (types, ranges, paths)
HOSTILE_JSON: tuple[Any, ...] = (
    None, True, False, 0, -1, 1, 2**31, 2**40, 2**63, 2**64, -(2**63), 1e308, -0.0, 0.5, float("inf"),
    "", "x", "../x", "/etc", "..", "a/../../b", "NaN", "\x00", "é" * 3, [], [0], [-1], [2**40, 2**40, 2**40],
    [1] * 40, {}, {"name": "x"}, [[0, 1]], {"": None},
)


def _hostile(d: Draw) -> Any:
    return json.loads(json.dumps(d.choice(HOSTILE_JSON)))  # a fresh copy: never aliased


def _json_paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _json_paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:16]):
            out += _json_paths(v, (*prefix, i))
    return out


def mutate_json(d: Draw, doc: Any) -> Any:
    """One to three edits of a parsed JSON document: replace, delete or add a member."""
    doc = json.loads(json.dumps(doc))
    for _ in range(d.integer(1, 3)):
        paths = _json_paths(doc)
        path = d.choice(paths)
        if not path:
            if d.integer(0, 3) == 0:
                doc = _hostile(d)
            continue
        parent = doc
        for p in path[:-1]:
            parent = parent[p]
        last = path[-1]
        op = d.integer(0, 5)
        old = parent[last]
        if op == 0:
            if isinstance(parent, dict):
                del parent[last]
            else:
                del parent[last]
        elif op == 1 and isinstance(old, int) and not isinstance(old, bool):
            parent[last] = old + d.choice((-1, 1, -old, old, 2**32, -(2**31)))
        elif op == 2 and isinstance(parent, list):
            parent.append(_hostile(d))
        elif op == 3 and isinstance(parent, dict):
            parent[d.choice(("extra", "path", "key", "name", "dimensions"))] = _hostile(d)
        else:
            parent[last] = _hostile(d)
    return doc


#: file names that hold JSON metadata documents
_JSON_NAMES = ("zarr.json", "attributes.json", "info", "sizes", "storage", "__attrs__", ".zgroup")


def is_json_key(key: str) -> bool:
    return key.rsplit("/", 1)[-1] in _JSON_NAMES


def mutate_case(d: Draw, case: Case) -> Case:
    """The case with one of its files mutated (metadata documents a quarter of the time)."""
    keys = sorted(case.files)
    meta = [k for k in keys if is_json_key(k)]
    data = [k for k in keys if k not in meta] or keys
    if case.fields and d.integer(0, 1):
        key = d.choice(sorted(case.fields))
    elif meta and d.integer(0, 3) == 0:
        key = d.choice(meta)
    else:
        key = d.choice(data)
    value = case.files[key]
    if is_json_key(key) and d.integer(0, 2):
        try:
            doc = json.loads(value)
        except ValueError:
            doc = None
        if doc is not None:
            text = json.dumps(mutate_json(d, doc), allow_nan=True)
            return case.with_file(key, text.encode())
    donor = case.files[d.choice(keys)]
    return case.with_file(key, mutate_bytes(d, value, case.fields.get(key, ()), donor))


# -- builders: containers laid out from the specs ---------------------------------------------

_DTYPES = ("uint8", "uint16", "int32", "float32", "uint64")


def _payload(d: Draw, n: int, dtype: str) -> np.ndarray:
    arr = np.frombuffer(d.bytes(n * np.dtype(dtype).itemsize), dtype=dtype).copy()
    if d.integer(0, 1):  # compressible
        arr = (np.arange(n) % d.integer(1, 7)).astype(dtype)
    return arr


def build_zarr3_shard(d: Draw, comps: Sequence[str] = ("raw", "gzip", "zstd")) -> Case:
    """One Zarr v3 shard laid out by hand: inner chunks in a random order with gaps, some
    absent (index entry 2^64-1 twice), the index at the start or end, crc32c or not."""
    import google_crc32c

    ndim = d.integer(1, 2)
    inner = tuple(d.integer(1, 6) for _ in range(ndim))
    per = tuple(d.integer(1, 3) for _ in range(ndim))
    shard = tuple(i * p for i, p in zip(inner, per))
    dtype = d.choice(_DTYPES)
    comp = d.choice(comps)
    crc = bool(d.integer(0, 1))
    at_start = bool(d.integer(0, 1))
    n = math.prod(per)
    chunks: list[bytes | None] = []
    for _ in range(n):
        if d.integer(0, 4) == 0:
            chunks.append(None)
            continue
        raw = _payload(d, math.prod(inner), dtype).astype("<" + np.dtype(dtype).str[1:]).tobytes()
        if comp == "gzip":
            raw = gzip.compress(raw, compresslevel=1, mtime=0)
        elif comp == "zstd":
            import zstandard

            raw = zstandard.ZstdCompressor(level=1).compress(raw)
        elif comp == "blosc":
            import numcodecs

            raw = bytes(numcodecs.Blosc("lz4", 1, numcodecs.Blosc.SHUFFLE).encode(raw))
        chunks.append(raw)
    index_size = 16 * n + (4 if crc else 0)
    order = list(range(n))
    random.Random(d.integer(0, 2**32)).shuffle(order)
    body = bytearray()
    base = index_size if at_start else 0
    entries = [(2**64 - 1, 2**64 - 1)] * n
    for i in order:
        c = chunks[i]
        if c is None:
            continue
        body += bytes(d.integer(0, 3) * d.integer(0, 1))  # a gap
        entries[i] = (base + len(body), len(c))
        body += c
    index = b"".join(struct.pack("<QQ", *e) for e in entries)
    if crc:
        index += struct.pack("<I", google_crc32c.value(index))
    shard_bytes = index + bytes(body) if at_start else bytes(body) + index
    index_off = 0 if at_start else len(body)
    fields = tuple((index_off + 8 * j, 8) for j in range(2 * n))
    codecs: list[Any] = [{"name": "bytes", "configuration": {"endian": "little"}}]
    confs: dict[str, dict[str, Any]] = {"gzip": {"level": 1}, "zstd": {"level": 1, "checksum": False},
                                        "blosc": {"cname": "lz4", "clevel": 1, "shuffle": "shuffle",
                                                  "typesize": np.dtype(dtype).itemsize, "blocksize": 0}}
    if comp != "raw":
        codecs.append({"name": comp, "configuration": confs[comp]})
    index_codecs: list[Any] = [{"name": "bytes", "configuration": {"endian": "little"}}]
    if crc:
        index_codecs.append({"name": "crc32c"})
    meta = {
        "zarr_format": 3, "node_type": "array", "shape": list(shard), "data_type": dtype,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(shard)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": list(inner), "codecs": codecs, "index_codecs": index_codecs,
            "index_location": "start" if at_start else "end"}}],
    }
    key = "c/" + "/".join("0" * 1 for _ in range(ndim))
    return Case("built/zarr3_shard", "zarr3", {"zarr.json": json.dumps(meta).encode(), key: shard_bytes},
                fields={key: fields})


def build_uint64_shard(d: Draw) -> Case:
    """A neuroglancer_uint64_sharded_v1 shard laid out by hand: shard index, values, and a
    delta-coded minishard index per minishard (raw or gzip), identity hash, one shard."""
    mbits = d.integer(0, 3)
    index_enc = d.choice(("raw", "gzip"))
    data_enc = d.choice(("raw", "gzip"))
    nmini = 1 << mbits
    nkeys = d.integer(0, 12)
    keys = sorted({d.integer(0, 2**20) for _ in range(nkeys)} | ({2**64 - 1} if d.integer(0, 5) == 0 else set()))
    by_mini: dict[int, list[int]] = {}
    for k in keys:
        by_mini.setdefault(k & (nmini - 1), []).append(k)
    shard_index_end = 16 * nmini
    body = bytearray()
    ranges = [(0, 0)] * nmini
    fields: list[tuple[int, int]] = [(8 * j, 8) for j in range(2 * nmini)]
    for m in range(nmini):
        ids = by_mini.get(m, [])
        if not ids:
            continue
        starts, sizes = [], []
        for _k in ids:
            v = d.bytes(d.integer(0, 40))
            if data_enc == "gzip":
                v = gzip.compress(v, mtime=0)
            starts.append(len(body))
            sizes.append(len(v))
            body += v
        deltas_id = [ids[0]] + [b - a for a, b in itertools.pairwise(ids)]
        deltas_off = [starts[0]] + [starts[i] - (starts[i - 1] + sizes[i - 1]) for i in range(1, len(ids))]
        raw_index = np.array([deltas_id, deltas_off, sizes], dtype="<u8").tobytes()
        if index_enc == "raw":
            fields += [(shard_index_end + len(body) + 8 * j, 8) for j in range(3 * len(ids))]
        enc = gzip.compress(raw_index, mtime=0) if index_enc == "gzip" else raw_index
        ranges[m] = (len(body), len(body) + len(enc))
        body += enc
    index = b"".join(struct.pack("<QQ", *r) for r in ranges)
    spec = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0,
            "minishard_bits": mbits, "shard_bits": 0, "minishard_index_encoding": index_enc,
            "data_encoding": data_enc}
    return Case("built/uint64_shard", "kv", {"0.shard": index + bytes(body)}, kv_spec=spec,
                fields={"0.shard": tuple(fields)})


_N5_TYPES = ("uint8", "uint16", "int32", "float32", "float64", "uint64")


def build_n5_blocks(d: Draw, compression: str | None = None) -> Case:
    """An N5 dataset whose blocks (full, clipped edge, varlength) are written by hand."""
    ndim = d.integer(1, 3)
    block = tuple(d.integer(1, 5) for _ in range(ndim))
    dims = tuple(d.integer(1, 9) for _ in range(ndim))  # N5 order (x first)
    dtype = d.choice(_N5_TYPES)
    comp = compression or d.choice(("raw", "gzip", "zlib", "bzip2", "xz", "zstd"))
    docs: dict[str, dict[str, Any]] = {"raw": {"type": "raw"}, "gzip": {"type": "gzip", "level": 1},
                                       "zlib": {"type": "gzip", "level": 1, "useZlib": True},
                                       "bzip2": {"type": "bzip2", "blockSize": 9},
                                       "xz": {"type": "xz", "preset": 1},
                                       "zstd": {"type": "zstd", "level": 1}}
    compression_doc = docs[comp]
    attrs = {"dimensions": list(dims), "blockSize": list(block), "dataType": dtype, "compression": compression_doc}
    files = {"attributes.json": json.dumps(attrs).encode()}
    fields: dict[str, tuple[tuple[int, int], ...]] = {}
    grid = [math.ceil(n / b) for n, b in zip(dims, block)]
    for coords in np.ndindex(*grid):
        if d.integer(0, 3) == 0:
            continue
        shape = tuple(min(b, n - c * b) for b, n, c in zip(block, dims, coords))
        if d.integer(0, 3) == 0:
            shape = block  # full-size edge block (as tensorstore writes them)
        count = math.prod(shape)
        varlength = comp == "raw" and d.integer(0, 5) == 0
        header = struct.pack(">HH", 1 if varlength else 0, ndim) + struct.pack(f">{ndim}I", *shape)
        if varlength:
            header += struct.pack(">I", count)
        data = _payload(d, count, dtype).astype(">" + np.dtype(dtype).str[1:]).tobytes()
        if comp == "gzip":
            data = gzip.compress(data, compresslevel=1, mtime=0)
        elif comp == "zlib":
            data = zlib.compress(data, 1)
        elif comp == "bzip2":
            data = bz2.compress(data, 9)
        elif comp == "xz":
            data = lzma.compress(data, preset=1)
        elif comp == "zstd":
            import zstandard

            data = zstandard.ZstdCompressor(level=1).compress(data)
        key = "/".join(str(c) for c in coords)
        files[key] = header + data
        fields[key] = ((0, 2), (2, 2), *((4 + 4 * i, 4) for i in range(ndim + (1 if varlength else 0))))
    return Case(f"built/n5_{comp}", "n5", files, fields=fields)


def build_n5_native(d: Draw) -> Case:
    """raw, gzip and zlib N5 blocks on local files: what ``_rawio.read_boxes`` reads (with
    ``inflate=True`` for gzip / zlib)."""
    case = build_n5_blocks(d, d.choice(("gzip", "zlib", "raw")))
    return replace(case, name="built/n5_rawio", local=True)


def build_zarr3_native(d: Draw) -> Case:
    """A hand-laid Zarr v3 shard (raw, gzip, zstd or blosc inner chunks) on local files: what
    ``_rawio.read_spans`` reads, decodes and places."""
    case = build_zarr3_shard(d, ("raw", "gzip", "zstd", "blosc"))
    return replace(case, name="built/zarr3_spans", local=True)


# -- builders: small random datasets written by shardstore ------------------------------------

def _memory_case(name: str, kind: str, write: Callable[[Any], None], paths: tuple[str, ...] = ("",)) -> Case:
    from ..store import MemoryStore

    data: dict[str, bytes] = {}
    write(MemoryStore(data))
    return Case(name, kind, {k: bytes(v) for k, v in data.items()}, paths=paths)


def build_bcolz(d: Draw) -> Case:
    """A bcolz carray or ctable (bloscpack frames around blosc chunks) with random cparams."""
    from ..formats import bcolz

    dtype = d.choice(("uint8", "int16", "int32", "float64", "S3", "bool"))
    n = d.integer(0, 300)
    chunklen = d.integer(1, 64)
    cparams = {"clevel": d.integer(0, 9), "shuffle": d.integer(0, 2),
               "cname": d.choice(("blosclz", "lz4", "lz4hc", "zlib", "zstd"))}
    values = np.frombuffer(d.bytes(n * np.dtype(dtype).itemsize), dtype=np.dtype(dtype).newbyteorder("="))
    if dtype == "bool":
        values = values.view("uint8") & 1
        values = values.astype(bool)
    table = d.integer(0, 3) == 0

    def write(store: Any) -> None:
        if table:
            bcolz.create(store, columns={"a": values, "b": np.arange(n, dtype="int32")}, chunklen=chunklen, cparams=cparams)
        else:
            bcolz.create(store, data=values, chunklen=chunklen, cparams=cparams)

    case = _memory_case("built/bcolz", "bcolz", write, ("a", "b") if table else ("",))
    # bloscpack header (16 bytes) then the blosc header: nbytes, blocksize, cbytes
    fields = ((8, 8), (4, 1), (16, 1), (17, 1), (18, 1), (19, 1), (20, 4), (24, 4), (28, 4), (32, 4))
    return replace(case, fields={k: fields for k in case.files if k.endswith(".blp")})


def build_precomputed(d: Draw) -> Case:
    """A precomputed volume (raw, jpeg, png or compressed_segmentation; sharded or not)."""
    from ..formats import precomputed

    enc = d.choice(("raw", "jpeg", "png", "compressed_segmentation"))
    dtype = {"jpeg": "uint8", "png": d.choice(("uint8", "uint16")),
             "compressed_segmentation": d.choice(("uint32", "uint64"))}.get(enc, d.choice(("uint8", "uint32", "float32")))
    channels = d.choice((1, 3)) if enc == "jpeg" else 1
    size = [d.integer(1, 20), d.integer(1, 20), d.integer(1, 8)]
    chunk = [d.integer(4, 16), d.integer(4, 16), d.integer(1, 8)]
    sharded = enc != "jpeg" and d.integer(0, 2) == 0
    kw: dict[str, Any] = {}
    if enc == "compressed_segmentation":
        kw["compressed_segmentation_block_size"] = [d.integer(1, 8) for _ in range(3)]
    if sharded:
        kw["sharding"] = {"@type": "neuroglancer_uint64_sharded_v1", "hash": d.choice(("identity", "murmurhash3_x86_128")),
                          "preshift_bits": 0, "minishard_bits": d.integer(0, 2), "shard_bits": d.integer(0, 1),
                          "minishard_index_encoding": d.choice(("raw", "gzip")), "data_encoding": d.choice(("raw", "gzip"))}
    vals = np.frombuffer(d.bytes(math.prod(size) * channels), dtype="uint8").reshape(*size, channels)
    data = (vals % d.integer(1, 5)).astype(dtype)

    def write(store: Any) -> None:
        scale = {"size": size, "chunk_sizes": [chunk], "encoding": enc, "key": "s0", **kw}
        a = precomputed.create(store, data_type=dtype, num_channels=channels, scales=[scale])
        a[...] = data

    return _memory_case(f"built/precomputed_{enc}", "precomputed", write, ("s0",))


def build_metadata_only(d: Draw) -> Case:
    """One of the four metadata documents of a small valid array (no chunks): exercises the
    parsers and what they let through to the core (shapes, chunk sizes, fill values, keys)."""
    kind = d.choice(("zarr3", "n5", "precomputed", "bcolz"))
    from .. import create
    from ..formats import precomputed

    def write(store: Any) -> None:
        if kind == "precomputed":
            a = precomputed.create(store, data_type="uint8", scales=[{"size": [8, 8, 4], "chunk_sizes": [[4, 4, 2]], "key": "s0"}])
            a[...] = 3
        elif kind == "bcolz":
            create(store, format="bcolz", data=np.arange(10, dtype="int16"), chunklen=4)
        else:
            size: dict[str, Any] = {"block_size" if kind == "n5" else "chunks": (4, 4)}
            a = create(store, format=kind, shape=(6, 5), dtype="uint16", **size)
            a[...] = 7

    return _memory_case(f"built/meta_{kind}", kind, write, ("s0",) if kind == "precomputed" else ("",))


#: name -> builder of a valid case
BUILDERS: dict[str, Callable[[Draw], Case]] = {
    "zarr3_shard": build_zarr3_shard,
    "uint64_shard": build_uint64_shard,
    "n5_block": build_n5_blocks,
    "n5_rawio": build_n5_native,
    "zarr3_spans": build_zarr3_native,
    "bcolz": build_bcolz,
    "precomputed": build_precomputed,
    "metadata": build_metadata_only,
}
