"""Shared helpers for the Zarr v3 conformance and interop tests.

Everything here is independent of shardstore: hashing, deterministic data, codec-list
builders, and thin wrappers that let tensorstore and zarr-python write or read an array
described by an :class:`ArraySpec`.  The anchors must not go through shardstore, so that a
shardstore bug cannot hide on both sides of a comparison.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent

CORE_DTYPES = (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
)


# --------------------------------------------------------------------------- hypothesis

def examples(n: int) -> int:
    """A Hypothesis test's ``max_examples``: ``n`` in the default profile, scaled with the
    loaded profile's budget (the randomized profile of the slow run: 10x; see conftest.py).
    Call it at import time of the test module: conftest.py has loaded the profile by then."""
    from hypothesis import settings

    return max(1, n * settings.default.max_examples // 100)


# --------------------------------------------------------------------------- fixtures dir

def find_fixtures_dir() -> Path | None:
    """The shared conformance fixtures: $SHARDSTORE_FIXTURES, else <repo>/../shared/fixtures."""
    env = os.environ.get("SHARDSTORE_FIXTURES")
    candidates = [Path(env)] if env else []
    candidates.append(REPO_ROOT.parent / "shared" / "fixtures")
    for cand in candidates:
        if (cand / "MANIFEST.json").is_file():
            return cand.resolve()
    return None


def fixtures_missing_reason() -> str:
    env = os.environ.get("SHARDSTORE_FIXTURES")
    where = f"$SHARDSTORE_FIXTURES={env!r}" if env else "$SHARDSTORE_FIXTURES (unset)"
    return (f"conformance fixtures not found: looked for MANIFEST.json in {where} and "
            f"{REPO_ROOT.parent / 'shared' / 'fixtures'}")


def load_manifest(fixtures_dir: Path | None = None) -> dict | None:
    fixtures_dir = fixtures_dir or find_fixtures_dir()
    if fixtures_dir is None:
        return None
    return json.loads((fixtures_dir / "MANIFEST.json").read_text())


# --------------------------------------------------------------------------- hashing

def canonical_bytes(arr: np.ndarray) -> bytes:
    """C-order little-endian bytes (bool as one byte 0/1; complex real then imag)."""
    arr = np.asarray(arr)
    if arr.dtype == np.bool_:
        arr = arr.view(np.uint8)
    le = arr.dtype.newbyteorder("<") if arr.dtype.itemsize > 1 else arr.dtype
    return np.ascontiguousarray(arr, dtype=le).tobytes(order="C")


def sha256_le(arr: np.ndarray) -> str:
    """sha256 under the MANIFEST hash_convention (NaN payloads count, bit-exact)."""
    return hashlib.sha256(canonical_bytes(arr)).hexdigest()


def assert_bitexact(actual: Any, expected: np.ndarray, what: str = "") -> None:
    """Same shape, same dtype (ignoring byte order) and identical bits, NaNs included."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    prefix = f"{what}: " if what else ""
    assert actual.shape == expected.shape, f"{prefix}shape {actual.shape} != {expected.shape}"
    assert actual.dtype.newbyteorder("=") == expected.dtype.newbyteorder("="), (
        f"{prefix}dtype {actual.dtype} != {expected.dtype}")
    if canonical_bytes(actual) == canonical_bytes(expected):
        return
    if actual.dtype == np.bool_:
        a_bits, e_bits = actual.view(np.uint8), expected.view(np.uint8)
    else:
        width = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64, 16: np.uint64}[
            actual.dtype.itemsize]
        a_bits = np.ascontiguousarray(actual, actual.dtype.newbyteorder("=")).view(width)
        e_bits = np.ascontiguousarray(expected, expected.dtype.newbyteorder("=")).view(width)
    diff = np.argwhere(np.asarray(a_bits != e_bits).reshape(a_bits.shape))
    n_bad = len(diff)
    first = tuple(int(i) for i in diff[0]) if n_bad else ()
    if actual.dtype.itemsize == 16 and first:  # complex128 viewed as pairs of uint64
        first = first[:-1] + (first[-1] // 2,)
    a_val = actual[first] if first or actual.ndim == 0 else actual
    e_val = expected[first] if first or expected.ndim == 0 else expected
    raise AssertionError(
        f"{prefix}{n_bad} differing element words; first at {first}: got {a_val!r}, "
        f"expected {e_val!r}")


# --------------------------------------------------------------------------- fill values

def _float_from_json(value: Any, dtype: np.dtype) -> Any:
    if isinstance(value, str):
        if value == "NaN":
            return dtype.type(np.nan)
        if value == "Infinity":
            return dtype.type(np.inf)
        if value == "-Infinity":
            return dtype.type(-np.inf)
        if value.startswith("0x"):
            bits = {2: np.uint16, 4: np.uint32, 8: np.uint64}[dtype.itemsize]
            return np.array(int(value, 16), dtype=bits).view(dtype)[()]
        raise ValueError(f"bad float fill_value spelling {value!r}")
    return dtype.type(value)


def fill_from_json(data_type: str, value: Any) -> np.ndarray:
    """0-d array holding the fill value a Zarr v3 ``fill_value`` JSON denotes (own parser)."""
    dtype = np.dtype(data_type)
    if dtype.kind == "c":
        part = np.dtype(f"f{dtype.itemsize // 2}")
        if isinstance(value, str) and value.startswith("0x"):
            raw = int(value, 16).to_bytes(dtype.itemsize, "big")
            return np.frombuffer(raw, dtype.newbyteorder(">")).astype(dtype).reshape(())
        re_, im_ = (_float_from_json(v, part) for v in value)
        out = np.zeros((), dtype)
        out.real, out.imag = re_, im_  # keep NaN payloads exact
        return out
    if dtype.kind == "f":
        return np.array(_float_from_json(value, dtype), dtype=dtype)
    if dtype.kind == "b":
        if not isinstance(value, bool):
            raise ValueError(f"bool fill_value must be true/false, got {value!r}")
        return np.array(value, dtype=dtype)
    return np.array(int(value), dtype=dtype)


def _float_to_json(x: float) -> Any:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return float(x)


def fill_to_json(data_type: str, value: Any) -> Any:
    dtype = np.dtype(data_type)
    if dtype.kind == "c":
        v = complex(value)
        return [_float_to_json(v.real), _float_to_json(v.imag)]
    if dtype.kind == "f":
        return _float_to_json(float(value))
    if dtype.kind == "b":
        return bool(value)
    return int(value)


def fill_array(data_type: str, value: Any) -> np.ndarray:
    """0-d array of the python fill value (canonical NaNs)."""
    return fill_from_json(data_type, fill_to_json(data_type, value))


# --------------------------------------------------------------------------- codec builders

def bytes_codec(endian: str | None = "little") -> dict:
    if endian is None:
        return {"name": "bytes"}
    return {"name": "bytes", "configuration": {"endian": endian}}


def gzip_codec(level: int = 5) -> dict:
    return {"name": "gzip", "configuration": {"level": level}}


def zstd_codec(level: int = 3, checksum: bool = False) -> dict:
    return {"name": "zstd", "configuration": {"level": level, "checksum": checksum}}


def blosc_codec(cname: str, typesize: int, shuffle: str = "shuffle", clevel: int = 5) -> dict:
    return {"name": "blosc", "configuration": {
        "cname": cname, "clevel": clevel, "shuffle": shuffle, "typesize": typesize,
        "blocksize": 0}}


def crc32c_codec() -> dict:
    return {"name": "crc32c"}


def transpose_codec(order: list[int]) -> dict:
    return {"name": "transpose", "configuration": {"order": list(order)}}


def sharding_codec(chunk_shape, codecs: list[dict], index_codecs: list[dict] | None = None,
                   index_location: str = "end") -> dict:
    if index_codecs is None:
        index_codecs = [bytes_codec("little"), crc32c_codec()]
    return {"name": "sharding_indexed", "configuration": {
        "chunk_shape": list(chunk_shape), "codecs": codecs, "index_codecs": index_codecs,
        "index_location": index_location}}


_CODEC_DEFAULTS = {
    "bytes": {"endian": "little"},
    "zstd": {"checksum": False},
    "blosc": {"blocksize": 0},
    "sharding_indexed": {"index_location": "end"},
}


def normalize_codecs(codecs: list, itemsize: int = 8) -> list[dict]:
    """Codec list in one spelling (defaults filled, bare strings expanded) for comparisons."""
    out = []
    for codec in codecs:
        if isinstance(codec, str):
            codec = {"name": codec}
        name = codec["name"]
        config = dict(codec.get("configuration") or {})
        for key, default in _CODEC_DEFAULTS.get(name, {}).items():
            config.setdefault(key, default)
        if name == "bytes" and itemsize == 1:
            config.pop("endian", None)  # meaningless for 1-byte types; writers differ
        if name == "sharding_indexed":
            config["codecs"] = normalize_codecs(config["codecs"], itemsize)
            config["index_codecs"] = normalize_codecs(config["index_codecs"], 8)
            config["chunk_shape"] = list(config["chunk_shape"])
        if name == "blosc" and config.get("shuffle") == "noshuffle":
            config.pop("typesize", None)  # unused without shuffling; tensorstore drops it
        if name == "transpose":
            config["order"] = list(config["order"])
        out.append({"name": name, "configuration": config} if config else {"name": name})
    return out


# --------------------------------------------------------------------------- array specs

@dataclass
class ArraySpec:
    """A Zarr v3 array in anchor-library terms: the full top-level codec list."""

    id: str
    dtype: str
    shape: tuple[int, ...]
    chunk_shape: tuple[int, ...]          # regular grid = shard shape when sharded
    codecs: list[dict]
    fill_value: Any = 0
    chunk_key_encoding: dict | None = None
    dimension_names: list | None = None
    attributes: dict | None = None
    seed: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def sharded(self) -> bool:
        return self.codecs[-1]["name"] == "sharding_indexed" if self.codecs else False

    @property
    def cke(self) -> dict:
        return self.chunk_key_encoding or {"name": "default", "configuration": {"separator": "/"}}

    def innermost_chunk_shape(self) -> tuple[int, ...]:
        shape, codecs = self.chunk_shape, self.codecs
        while True:
            shard = [c for c in codecs if c["name"] == "sharding_indexed"]
            if not shard:
                return tuple(shape)
            shape = tuple(shard[0]["configuration"]["chunk_shape"])
            codecs = shard[0]["configuration"]["codecs"]

    def metadata(self) -> dict:
        md = {
            "zarr_format": 3, "node_type": "array", "shape": list(self.shape),
            "data_type": self.dtype,
            "chunk_grid": {"name": "regular",
                           "configuration": {"chunk_shape": list(self.chunk_shape)}},
            "chunk_key_encoding": self.cke,
            "fill_value": fill_to_json(self.dtype, self.fill_value),
            "codecs": self.codecs,
        }
        if self.dimension_names is not None:
            md["dimension_names"] = list(self.dimension_names)
        if self.attributes is not None:
            md["attributes"] = self.attributes
        return md

    def shardstore_kwargs(self) -> dict:
        """Keyword arguments for shardstore.zarr3.create describing the same array."""
        kw: dict[str, Any] = dict(shape=self.shape, dtype=self.dtype,
                                  fill_value=self.fill_value,
                                  chunk_key_encoding=self.cke, mode="w-")
        if self.sharded:
            if len(self.codecs) != 1:
                raise ValueError(f"{self.id}: codecs before sharding_indexed not expressible")
            cfg = self.codecs[0]["configuration"]
            kw.update(shards=tuple(self.chunk_shape), chunks=tuple(cfg["chunk_shape"]),
                      codecs=cfg["codecs"], index_codecs=cfg["index_codecs"],
                      index_location=cfg.get("index_location", "end"))
        else:
            kw.update(shards=None, chunks=tuple(self.chunk_shape), codecs=self.codecs)
        if self.dimension_names is not None:
            kw["dimension_names"] = list(self.dimension_names)
        if self.attributes is not None:
            kw["attributes"] = self.attributes
        return kw

    def shardstore_expressible(self) -> bool:
        return not self.sharded or len(self.codecs) == 1


# --------------------------------------------------------------------------- data

def random_array(shape, dtype: str, seed: int = 0) -> np.ndarray:
    """Deterministic data: ints over the full range; floats with NaN, +-inf, -0.0, extremes."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    shape = tuple(shape)
    if dt.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        out = rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
        flat = out.reshape(-1)
        if flat.size >= 2:
            flat[0], flat[-1] = info.min, info.max
        return out
    if dt.kind == "c":
        part = f"f{dt.itemsize // 2}"
        out = np.empty(shape, dt)
        out.real = random_array(shape, part, seed)
        out.imag = random_array(shape, part, seed + 7919)
        return out
    info = np.finfo(dt)
    mags = 10.0 ** rng.uniform(-3, 3, size=shape)
    vals = (rng.standard_normal(size=shape) * mags).astype(dt)
    flat = vals.reshape(-1)
    specials = np.array([np.nan, np.inf, -np.inf, -0.0, info.max, info.min,
                         info.smallest_subnormal], dtype=dt)
    if flat.size:
        n = max(len(specials), flat.size // 40)
        where = rng.choice(flat.size, size=min(n, flat.size), replace=False)
        flat[where] = specials[np.arange(len(where)) % len(specials)]
    return vals


def spec_data(spec: ArraySpec) -> np.ndarray:
    """Random data with fill-valued holes: the first innermost chunk (-> absent inner chunk)
    and the whole outer chunk at grid position (1, 1, ...) when it exists (-> absent shard)."""
    data = random_array(spec.shape, spec.dtype, spec.seed)
    if data.ndim == 0:
        return data
    fill = fill_array(spec.dtype, spec.fill_value)
    inner = spec.innermost_chunk_shape()
    data[tuple(slice(0, c) for c in inner)] = fill
    if all(s > c for s, c in zip(spec.shape, spec.chunk_shape)):
        data[tuple(slice(c, 2 * c) for c in spec.chunk_shape)] = fill
    return data


def sample_selections(shape) -> list:
    """A few selections including steps (positive and negative), ints and Ellipsis."""
    nd = len(shape)
    if nd == 0:
        return [(), Ellipsis]
    sels = [
        tuple(slice(1, max(2, s - 2)) for s in shape),
        tuple(slice(None, None, 3) for _ in shape),
        tuple(slice(s - 1, None, -2) for s in shape),
        (Ellipsis, shape[-1] // 2),
        (shape[0] - 1,) + tuple(slice(1, None, 4) for _ in shape[1:]),
    ]
    if nd >= 2:
        sels.append((slice(2, 3),) + tuple(slice(-7, None) for _ in shape[1:]))
    return sels


# --------------------------------------------------------------------------- anchors

def ts_spec(path: Path | str) -> dict:
    return {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}


def ts_write(path: Path | str, spec: ArraySpec, data: np.ndarray) -> None:
    import tensorstore as ts
    t = ts.open({**ts_spec(path), "metadata": spec.metadata(), "create": True,
                 "delete_existing": True}).result()
    t.write(data).result()


def ts_read(path: Path | str, selection: Any = None) -> np.ndarray:
    import tensorstore as ts
    t = ts.open(ts_spec(path), open=True, read=True).result()
    if selection is not None:
        t = t[selection]
    return np.asarray(t.read().result())


def ts_write_region(path: Path | str, selection: Any, values: np.ndarray) -> None:
    import tensorstore as ts
    t = ts.open(ts_spec(path), open=True, read=True, write=True).result()
    t[selection].write(values).result()


def ts_labels(path: Path | str) -> tuple[str, ...]:
    import tensorstore as ts
    return tuple(ts.open(ts_spec(path), open=True).result().domain.labels)


def zarr_write(path: Path | str, spec: ArraySpec, data: np.ndarray) -> None:
    import zarr
    cke = spec.cke
    arr = zarr.create(
        shape=spec.shape, chunks=spec.chunk_shape, dtype=spec.dtype, codecs=spec.codecs,
        fill_value=fill_array(spec.dtype, spec.fill_value)[()], zarr_format=3,
        store=str(path), overwrite=True,
        chunk_key_encoding=cke,
        dimension_names=spec.dimension_names, attributes=spec.attributes)
    arr[...] = data


def zarr_read(path: Path | str) -> np.ndarray:
    import zarr
    return np.asarray(zarr.open_array(str(path), mode="r")[...])


def write_with(library: str, path: Path | str, spec: ArraySpec, data: np.ndarray) -> None:
    {"tensorstore": ts_write, "zarr": zarr_write}[library](path, spec, data)


def read_with(library: str, path: Path | str) -> np.ndarray:
    return {"tensorstore": ts_read, "zarr": zarr_read}[library](path)
