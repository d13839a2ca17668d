"""Zarr v3 ``zarr.json``: parse and dump array and group documents (spec: shared/specs/zarr3.md).

Parsing keeps the original document so that writing it back (after a resize or an attribute
change) preserves every member exactly as another implementation wrote it.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...codecs.base import parse_named_config
from ...codecs.pipeline import CodecPipeline
from ...core.grid import check_element_count
from ...errors import MetadataError, UnsupportedFeatureError

__all__ = [
    "ArrayMetadata",
    "GroupMetadata",
    "parse_document",
    "parse_dtype",
    "parse_fill_value",
    "dump_fill_value",
    "DTYPES",
]

DTYPES: dict[str, np.dtype] = {
    name: np.dtype(name)
    for name in (
        "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 "
        "float16 float32 float64 complex64 complex128"
    ).split()
}
_ARRAY_MEMBERS = {
    "zarr_format", "node_type", "shape", "data_type", "chunk_grid", "chunk_key_encoding",
    "fill_value", "codecs", "attributes", "dimension_names", "storage_transformers",
}
_GROUP_MEMBERS = {"zarr_format", "node_type", "attributes", "consolidated_metadata"}


def _err(key: str, msg: str) -> MetadataError:
    return MetadataError(f"{key}: {msg}")


def parse_dtype(value: Any, key: str = "zarr.json") -> np.dtype:
    if isinstance(value, str) and value in DTYPES:
        return DTYPES[value]
    if isinstance(value, str) and value.startswith("r") and value[1:].isdigit():
        bits = int(value[1:])
        if bits == 0 or bits % 8:
            raise _err(key, f"data_type {value!r}: raw types need a positive multiple of 8 bits")
        return np.dtype(f"V{bits // 8}")
    raise UnsupportedFeatureError(f"{key}: unsupported data_type {value!r} (supported: {', '.join(DTYPES)}, r<bits>)")


def dtype_name(dtype: np.dtype) -> str:
    dtype = np.dtype(dtype)
    if dtype.kind == "V":
        return f"r{dtype.itemsize * 8}"
    name = dtype.newbyteorder("=").name if dtype.byteorder not in "=|" else dtype.name
    if name not in DTYPES:
        raise UnsupportedFeatureError(f"dtype {dtype} has no Zarr v3 core data type")
    return name


def _parse_float(value: Any, dtype: np.dtype, key: str) -> Any:
    special = {"NaN": np.nan, "Infinity": np.inf, "-Infinity": -np.inf}
    if isinstance(value, str):
        if value in special:
            return dtype.type(special[value])
        if value.startswith("0x"):
            try:
                bits = int(value, 16)
            except ValueError:
                raise _err(key, f"fill_value {value!r} is not a valid hex string") from None
            width = dtype.itemsize
            if len(value) != 2 + 2 * width:
                # a hex spelling carries exactly the float's width; zarr-python would read
                # "0x7fc0" as a float16 NaN even for float32, so refuse rather than guess
                raise _err(key, f"fill_value {value!r} must have {2 * width} hex digits for {dtype.name}")
            if bits >= 1 << (8 * width):
                raise _err(key, f"fill_value {value!r} does not fit a {dtype.name}")
            return np.frombuffer(bits.to_bytes(width, "little"), dtype=dtype.newbyteorder("<"))[0].astype(dtype)
        raise _err(key, f"fill_value {value!r} is not a number, 'NaN', 'Infinity', '-Infinity' or hex")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _err(key, f"fill_value {value!r} is not valid for {dtype.name}")
    with np.errstate(over="ignore"):
        return dtype.type(value)


def parse_fill_value(value: Any, dtype: np.dtype, key: str = "zarr.json") -> Any:
    """A JSON fill value -> a numpy scalar of ``dtype`` (every spelling the spec allows)."""
    if value is None:
        raise _err(key, "fill_value must not be null for core data types")
    kind = dtype.kind
    if kind == "b":
        if not isinstance(value, bool):
            raise _err(key, f"fill_value for bool must be true or false, got {value!r}")
        return np.bool_(value)
    if kind in "iu":
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise _err(key, f"fill_value for {dtype.name} must be an integer, got {value!r}")
        info = np.iinfo(dtype)
        if not info.min <= value <= info.max:
            raise _err(key, f"fill_value {value} is out of range for {dtype.name}")
        return dtype.type(value)
    if kind == "f":
        return _parse_float(value, dtype, key)
    if kind == "c":
        if not isinstance(value, list) or len(value) != 2:
            raise _err(key, f"fill_value for {dtype.name} must be a [real, imag] pair, got {value!r}")
        part = np.dtype(f"f{dtype.itemsize // 2}")
        re, im = (_parse_float(v, part, key) for v in value)
        out = np.zeros((), dtype=dtype)
        out.real, out.imag = re, im
        return out[()]
    if kind == "V":
        if not isinstance(value, list) or len(value) != dtype.itemsize or not all(
            isinstance(b, int) and 0 <= b <= 255 for b in value
        ):
            raise _err(key, f"fill_value for r{dtype.itemsize * 8} must be {dtype.itemsize} bytes 0..255")
        return np.frombuffer(bytes(value), dtype=dtype)[0]
    raise UnsupportedFeatureError(f"{key}: no fill_value rule for {dtype}")


def _dump_float(x: Any) -> Any:
    x = float(x) if not isinstance(x, np.floating) else x
    if np.isnan(x):
        # canonical quiet NaN is spelled "NaN"; any other payload keeps its exact bits as hex
        arr = np.array([x])
        canonical = np.array([np.nan], dtype=arr.dtype)
        if arr.tobytes() == canonical.tobytes():
            return "NaN"
        return "0x" + arr.astype(arr.dtype.newbyteorder(">")).tobytes().hex()
    if np.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return float(x)


def dump_fill_value(value: Any, dtype: np.dtype) -> Any:
    value = np.asarray(value, dtype=dtype)[()]
    kind = dtype.kind
    if kind == "b":
        return bool(value)
    if kind in "iu":
        return int(value)
    if kind == "f":
        return _dump_float(value)
    if kind == "c":
        return [_dump_float(value.real), _dump_float(value.imag)]
    if kind == "V":
        return list(bytes(value))
    raise UnsupportedFeatureError(f"no fill_value JSON for {dtype}")


def _check_extensions(doc: dict[str, Any], allowed: set[str], key: str) -> None:
    for member, value in doc.items():
        if member in allowed:
            continue
        if isinstance(value, dict) and value.get("must_understand") is False:
            continue
        raise UnsupportedFeatureError(
            f"{key}: unknown member {member!r} (not marked \"must_understand\": false), so the "
            "node cannot be opened safely"
        )


def _int_list(value: Any, what: str, key: str, positive: bool) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise _err(key, f"{what} must be a list of integers, got {value!r}")
    if any(v <= 0 if positive else v < 0 for v in value):
        raise _err(key, f"{what} must hold {'positive' if positive else 'non-negative'} integers, got {value!r}")
    return tuple(value)


@dataclass
class GroupMetadata:
    attributes: dict[str, Any] = field(default_factory=dict)
    doc: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        doc = copy.deepcopy(self.doc) or {"zarr_format": 3, "node_type": "group"}
        doc["attributes"] = copy.deepcopy(self.attributes)
        return doc


@dataclass
class ArrayMetadata:
    shape: tuple[int, ...]
    dtype: np.dtype
    chunk_shape: tuple[int, ...]
    key_encoding: str  # "default" | "v2"
    separator: str
    fill_value: Any
    codecs: CodecPipeline
    attributes: dict[str, Any] = field(default_factory=dict)
    dimension_names: tuple[str | None, ...] | None = None
    doc: dict[str, Any] = field(default_factory=dict)  # the document as read (or as first dumped)

    def to_dict(self) -> dict[str, Any]:
        """The document to write: the original with shape and attributes brought up to date."""
        doc = copy.deepcopy(self.doc) if self.doc else self._fresh_doc()
        doc["shape"] = list(self.shape)
        if self.attributes or "attributes" in doc:
            doc["attributes"] = copy.deepcopy(self.attributes)
        return doc

    def _fresh_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "zarr_format": 3,
            "node_type": "array",
            "shape": list(self.shape),
            "data_type": dtype_name(self.dtype),
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(self.chunk_shape)}},
            "chunk_key_encoding": {"name": self.key_encoding, "configuration": {"separator": self.separator}},
            "fill_value": dump_fill_value(self.fill_value, self.dtype),
            "codecs": self.codecs.to_config(),
            "attributes": copy.deepcopy(self.attributes),
        }
        if self.dimension_names is not None:
            doc["dimension_names"] = list(self.dimension_names)
        return doc


def parse_document(raw: bytes, key: str) -> ArrayMetadata | GroupMetadata:
    """Parse the bytes of a ``zarr.json`` into array or group metadata."""
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _err(key, f"not valid JSON: {e}") from e
    if not isinstance(doc, dict):
        raise _err(key, "the document must be a JSON object")
    if doc.get("zarr_format") != 3:
        raise _err(key, f"zarr_format must be 3, got {doc.get('zarr_format')!r}")
    node_type = doc.get("node_type")
    if node_type == "group":
        _check_extensions(doc, _GROUP_MEMBERS, key)
        attrs = doc.get("attributes", {})
        if not isinstance(attrs, dict):
            raise _err(key, "attributes must be an object")
        return GroupMetadata(attributes=copy.deepcopy(attrs), doc=doc)
    if node_type != "array":
        raise _err(key, f"node_type must be 'array' or 'group', got {node_type!r}")
    return _parse_array(doc, key)


def _parse_array(doc: dict[str, Any], key: str) -> ArrayMetadata:
    _check_extensions(doc, _ARRAY_MEMBERS, key)
    for member in ("shape", "data_type", "chunk_grid", "chunk_key_encoding", "fill_value", "codecs"):
        if member not in doc:
            raise _err(key, f"array metadata lacks the required member {member!r}")
    shape = _int_list(doc["shape"], "shape", key, positive=False)
    check_element_count(shape, key)
    dtype = parse_dtype(doc["data_type"], key)

    name, conf, _ = parse_named_config(doc["chunk_grid"], f"{key}: chunk_grid")
    if name != "regular":
        raise UnsupportedFeatureError(f"{key}: chunk_grid {name!r} is not supported (only 'regular')")
    chunk_shape = _int_list(conf.get("chunk_shape"), "chunk_grid.configuration.chunk_shape", key, positive=True)
    check_element_count(chunk_shape, f"{key}: chunk_grid.configuration.chunk_shape")
    if len(chunk_shape) != len(shape):
        raise _err(key, f"chunk_shape {list(chunk_shape)} and shape {list(shape)} differ in rank")

    name, conf, _ = parse_named_config(doc["chunk_key_encoding"], f"{key}: chunk_key_encoding")
    if name not in ("default", "v2"):
        raise UnsupportedFeatureError(f"{key}: chunk_key_encoding {name!r} is not supported")
    separator = conf.get("separator", "/" if name == "default" else ".")
    if separator not in ("/", "."):
        raise _err(key, f"chunk_key_encoding separator must be '/' or '.', got {separator!r}")

    transformers = doc.get("storage_transformers") or []
    if not isinstance(transformers, list):
        raise _err(key, f"storage_transformers must be a list, got {transformers!r}")
    for transformer in transformers:
        tname, _, must = parse_named_config(transformer, f"{key}: storage_transformers")
        if must:
            raise UnsupportedFeatureError(f"{key}: storage transformer {tname!r} is not supported")

    dim_names = doc.get("dimension_names")
    if dim_names is not None:
        if not isinstance(dim_names, list) or len(dim_names) != len(shape) or not all(
            n is None or isinstance(n, str) for n in dim_names
        ):
            raise _err(key, f"dimension_names must be a list of {len(shape)} strings or nulls, got {dim_names!r}")
        dim_names = tuple(dim_names)
    attrs = doc.get("attributes", {})
    if not isinstance(attrs, dict):
        raise _err(key, "attributes must be an object")
    try:
        codecs = CodecPipeline.from_config(doc["codecs"])
    except MetadataError as e:
        raise _err(key, str(e)) from e
    except UnsupportedFeatureError as e:
        raise UnsupportedFeatureError(f"{key}: {e}") from e
    return ArrayMetadata(
        shape=shape,
        dtype=dtype,
        chunk_shape=chunk_shape,
        key_encoding=name,
        separator=separator,
        fill_value=parse_fill_value(doc["fill_value"], dtype, key),
        codecs=codecs,
        attributes=copy.deepcopy(attrs),
        dimension_names=dim_names,
        doc=doc,
    )


def chunk_key(meta: ArrayMetadata, coords: tuple[int, ...]) -> str:
    """The store key (relative to the array) of the chunk at grid ``coords``."""
    if meta.key_encoding == "default":
        return meta.separator.join(["c", *map(str, coords)])
    return meta.separator.join(map(str, coords)) if coords else "0"


def encode_json(doc: dict[str, Any]) -> bytes:
    # NaN/Infinity never reach here as floats: fill values are dumped as strings
    return json.dumps(doc, indent=2, allow_nan=False).encode()

