"""bcolz metadata documents: ``meta/sizes``, ``meta/storage``, ``__attrs__``, ``__rootdirs__``.

All are one line of JSON followed by ``"\\n"``, written as bcolz writes them
(``json.dumps(..., ensure_ascii=True)``, default separators), so a file we rewrite without
changes is byte-identical. Parse errors raise ``MetadataError`` naming the file.
"""

from __future__ import annotations

import datetime
import json
import math
import re
from dataclasses import dataclass, field
from keyword import iskeyword
from typing import Any

import numpy as np

from ...core.grid import check_element_count
from ...errors import MetadataError, UnsupportedFeatureError

__all__ = [
    "CParams",
    "Sizes",
    "Storage",
    "SIZES_KEY",
    "STORAGE_KEY",
    "ATTRS_KEY",
    "ROOTDIRS_KEY",
    "calc_chunklen",
    "parse_sizes",
    "parse_storage",
    "parse_json_object",
    "parse_rootdirs",
    "dump_json",
    "validate_column_name",
]

SIZES_KEY = "meta/sizes"
STORAGE_KEY = "meta/storage"
ATTRS_KEY = "__attrs__"
ROOTDIRS_KEY = "__rootdirs__"
CNAMES = ("blosclz", "lz4", "lz4hc", "snappy", "zlib", "zstd")
_MB = 1024 * 1024


def dump_json(obj: Any) -> bytes:
    """One JSON line as bcolz writes it."""
    return json.dumps(obj, ensure_ascii=True).encode("ascii") + b"\n"


def _load(raw: bytes, where: str) -> Any:
    try:
        return json.loads(bytes(raw).decode("ascii"))
    except (UnicodeDecodeError, ValueError) as e:
        raise MetadataError(f"{where}: not valid JSON: {e}") from None


def parse_json_object(raw: bytes, where: str) -> dict[str, Any]:
    """A JSON object document (``__attrs__``)."""
    doc = _load(raw, where)
    if not isinstance(doc, dict):
        raise MetadataError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    return doc


def _int(doc: dict[str, Any], member: str, where: str, lo: int = 0) -> int:
    value = doc.get(member)
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise MetadataError(f"{where}: {member!r} must be an integer >= {lo}, got {value!r}")
    return value


@dataclass(frozen=True)
class CParams:
    """bcolz compression parameters (``cparams``)."""

    clevel: int = 5
    shuffle: int = 1
    cname: str = "lz4"
    quantize: int = 0

    @classmethod
    def from_any(cls, value: Any, where: str = "cparams", default_cname: str = "lz4") -> CParams:
        """From a dict (bcolz JSON or user argument), a CParams or an object with attributes."""
        if isinstance(value, CParams):
            return value
        if value is None:
            return cls()
        if not isinstance(value, dict):  # e.g. a bcolz.cparams instance
            value = {k: getattr(value, k) for k in ("clevel", "shuffle", "cname", "quantize") if hasattr(value, k)}
        extra = set(value) - {"clevel", "shuffle", "cname", "quantize"}
        if extra:
            raise MetadataError(f"{where}: unknown member(s) {sorted(extra)}")
        conf: dict[str, Any] = {"clevel": 5, "shuffle": 1, "cname": default_cname, "quantize": 0}
        conf.update({k: v for k, v in value.items() if v is not None})
        for member, hi in (("clevel", 9), ("shuffle", 2)):
            v = conf[member]
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= hi:
                raise MetadataError(f"{where}: {member!r} must be an integer 0..{hi}, got {v!r}")
        if isinstance(conf["quantize"], bool) or not isinstance(conf["quantize"], int) or conf["quantize"] < 0:
            raise MetadataError(f"{where}: 'quantize' must be an integer >= 0, got {conf['quantize']!r}")
        if conf["cname"] not in CNAMES:
            raise MetadataError(f"{where}: 'cname' must be one of {list(CNAMES)}, got {conf['cname']!r}")
        return cls(conf["clevel"], conf["shuffle"], conf["cname"], conf["quantize"])

    def to_json(self) -> dict[str, Any]:
        return {"clevel": self.clevel, "shuffle": self.shuffle, "cname": self.cname, "quantize": self.quantize}


@dataclass
class Sizes:
    """``meta/sizes``: the full shape; ``cbytes`` is informational (never validated)."""

    shape: tuple[int, ...]
    nbytes: int
    cbytes: int

    def to_bytes(self) -> bytes:
        return dump_json({"shape": list(self.shape), "nbytes": self.nbytes, "cbytes": self.cbytes})


def parse_sizes(raw: bytes, where: str = SIZES_KEY) -> Sizes:
    doc = parse_json_object(raw, where)
    shape = doc.get("shape")
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = [shape]  # very old bcolz wrote a bare length
    if not isinstance(shape, list) or not shape or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in shape):
        raise MetadataError(f"{where}: 'shape' must be a non-empty list of integers >= 0, got {shape!r}")
    check_element_count(shape, where)
    return Sizes(tuple(shape), _int(doc, "nbytes", where), _int(doc, "cbytes", where))


def dflt_from_json(value: Any, dtype: np.dtype, where: str) -> Any:
    """The ``dflt`` member as a numpy scalar of ``dtype``."""
    try:
        if dtype.kind in "Mm" and isinstance(value, (int, float)):
            return np.asarray(value).astype(np.int64).view(dtype)[()]
        if dtype.kind == "S" and isinstance(value, str):
            value = value.encode("ascii")
        return np.asarray(value, dtype=dtype)[()]
    except (TypeError, ValueError, OverflowError, UnicodeEncodeError) as e:
        raise MetadataError(f"{where}: 'dflt' {value!r} is not a value of type {dtype}: {e}") from None


def dflt_to_json(value: Any, dtype: np.dtype) -> Any:
    """What bcolz writes for ``dflt``: ``tolist()``, bytes as ASCII str, dates as 0."""
    out = np.asarray(value, dtype=dtype)[()]
    if dtype.kind in "Mm":
        return 0
    py = out.tolist() if hasattr(out, "tolist") else out
    if isinstance(py, (datetime.datetime, datetime.date, datetime.time, datetime.timedelta)):
        return 0
    if isinstance(py, bytes):
        return py.decode("ascii", errors="replace")
    if isinstance(py, complex):
        raise MetadataError(f"dflt {value!r}: complex defaults cannot be stored as bcolz JSON")
    return py


@dataclass
class Storage:
    """``meta/storage``: base dtype, cparams, chunklen (rows), expectedlen, dflt."""

    dtype: np.dtype  # the base (scalar) dtype
    cparams: CParams
    chunklen: int
    expectedlen: int
    dflt: Any  # numpy scalar of dtype
    extra: dict[str, Any] = field(default_factory=dict)  # members we do not know, kept

    def to_bytes(self) -> bytes:
        doc = {
            "dtype": str(self.dtype),
            "cparams": self.cparams.to_json(),
            "chunklen": self.chunklen,
            "expectedlen": self.expectedlen,
            "dflt": dflt_to_json(self.dflt, self.dtype),
        }
        doc.update(self.extra)
        return dump_json(doc)


def parse_dtype(value: Any, where: str) -> np.dtype:
    if not isinstance(value, str):
        raise MetadataError(f"{where}: 'dtype' must be a string, got {value!r}")
    try:
        dtype = np.dtype(value)
    except (TypeError, ValueError) as e:
        raise MetadataError(f"{where}: 'dtype' {value!r} is not a NumPy data type: {e}") from None
    if dtype.hasobject:
        raise UnsupportedFeatureError(f"{where}: bcolz object arrays (pickled elements) are not supported")
    if dtype.fields is not None or dtype.shape:
        raise MetadataError(f"{where}: 'dtype' {value!r} must be a scalar type")
    return dtype.newbyteorder("=") if dtype.byteorder == ">" else dtype


def parse_storage(raw: bytes, where: str = STORAGE_KEY) -> Storage:
    doc = parse_json_object(raw, where)
    dtype = parse_dtype(doc.get("dtype"), where)
    cparams_doc = doc.get("cparams")
    if not isinstance(cparams_doc, dict):
        raise MetadataError(f"{where}: 'cparams' must be an object, got {cparams_doc!r}")
    cparams = CParams.from_any(cparams_doc, f"{where}: cparams", default_cname="blosclz")  # old files lack cname
    chunklen = _int(doc, "chunklen", where, lo=1)
    expectedlen = doc.get("expectedlen", 0)
    if isinstance(expectedlen, bool) or not isinstance(expectedlen, int):
        raise MetadataError(f"{where}: 'expectedlen' must be an integer, got {expectedlen!r}")
    dflt = dflt_from_json(doc.get("dflt", 0), dtype, where)
    known = {"dtype", "cparams", "chunklen", "expectedlen", "dflt"}
    return Storage(dtype, cparams, chunklen, expectedlen, dflt, {k: v for k, v in doc.items() if k not in known})


def parse_rootdirs(raw: bytes, where: str = ROOTDIRS_KEY) -> list[str]:
    doc = parse_json_object(raw, where)
    names = doc.get("names")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise MetadataError(f"{where}: 'names' must be a list of strings, got {names!r}")
    for n in names:
        validate_column_name(n, where)
    if len(set(names)) != len(names):
        raise MetadataError(f"{where}: duplicate column names in {names!r}")
    return names


_IDENT = re.compile(r"^[^\d\W]\w*$", re.UNICODE)


def validate_column_name(name: Any, where: str = "column name") -> str:
    """bcolz column names are Python identifiers (also safe as directory names)."""
    if not isinstance(name, str) or not _IDENT.match(name) or iskeyword(name):
        raise MetadataError(f"{where}: column name {name!r} must be a valid Python identifier (and not a keyword)")
    return name


def calc_chunklen(expectedlen: int, atomsize: int) -> int:
    """bcolz' default chunklen for ``expectedlen`` rows of ``atomsize`` bytes.

    The chunk size grows with the expected data size: 16 KiB for tiny data, 256 KiB at 1 MB,
    1 MiB at 100 MB, capped at 4 MiB from 10 GB (bcolz ``utils.calc_chunksize``). The same
    float arithmetic as bcolz, so the result matches it exactly.
    """
    atomsize = max(1, int(atomsize))
    size_mb = (int(expectedlen) * atomsize) / float(_MB)
    if size_mb < 1e-4:
        size_mb = 1e-4
    elif size_mb > 1e4:
        size_mb = 1e4
    zone = int(math.log10(size_mb))
    size_mb = 10**zone
    chunksize = 4 * 1024 * int(2 ** (math.log10(size_mb) + 6))
    chunksize = chunksize // atomsize * atomsize
    if chunksize < atomsize:
        chunksize = atomsize
    return chunksize // atomsize
