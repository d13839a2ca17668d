"""N5 ``attributes.json``: parse and dump dataset and group documents (spec: shared/specs/n5.md).

A document is one JSON object. In a dataset, ``dimensions``, ``blockSize``, ``dataType`` and
``compression`` (or the legacy ``compressionType`` string) are metadata; the root's ``n5``
version string is kept but hidden; everything else is a user attribute, preserved as written.
N5 lists axes x (fastest) first; the ``shape`` / ``chunk_shape`` properties give the NumPy
C-order view (reversed).
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...codecs.base import BytesBytesCodec
from ...codecs.n5_block import compression_from_n5
from ...core.grid import check_element_count
from ...errors import MetadataError, UnsupportedFeatureError

__all__ = [
    "ATTRIBUTES_KEY",
    "DTYPES",
    "N5_VERSION",
    "DatasetMetadata",
    "GroupMetadata",
    "attributes_key",
    "dtype_name",
    "encode_json",
    "parse_document",
]

ATTRIBUTES_KEY = "attributes.json"
#: the version shardstore writes at a container root (spec 4.0.0, as n5-java)
N5_VERSION = "4.0.0"
_MAX_MAJOR = 4
VERSION_KEY = "n5"
DTYPES: dict[str, np.dtype] = {
    name: np.dtype(name)
    for name in ["uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64", "float32", "float64"]
}
_DATASET_KEYS = ("dimensions", "blockSize", "dataType")
_COMPRESSION_KEYS = ("compression", "compressionType")
#: newer n5-java (N5 sharding) keys this implementation does not understand
_UNSUPPORTED_KEYS = ("codecs", "shardSize")
#: a block holds at most this many elements (its sizes are uint32 and block files < 2 GiB)
_MAX_BLOCK_ELEMENTS = 2**31


def attributes_key(path: str) -> str:
    return f"{path}/{ATTRIBUTES_KEY}" if path else ATTRIBUTES_KEY


def encode_json(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, indent=4, allow_nan=False).encode()


def dtype_name(dtype: Any) -> str:
    dtype = np.dtype(dtype)
    name = dtype.newbyteorder("=").name if dtype.byteorder not in "=|" else dtype.name
    if name not in DTYPES:
        raise UnsupportedFeatureError(
            f"N5 has no data type for {dtype} (supported: {', '.join(DTYPES)})"
        )
    return name


def _check_version(doc: dict[str, Any], key: str) -> None:
    version = doc.get(VERSION_KEY)
    if version is None:
        return
    if not isinstance(version, str):
        raise MetadataError(f"{key}: 'n5' version must be a string like \"4.0.0\", got {version!r}")
    major = version.split(".")[0]
    if not major.isdigit():
        raise MetadataError(f"{key}: malformed 'n5' version {version!r}")
    if int(major) > _MAX_MAJOR:
        raise UnsupportedFeatureError(
            f"{key}: N5 version {version} is newer than the {_MAX_MAJOR}.x shardstore reads"
        )


def _int_list(doc: dict[str, Any], member: str, key: str, minimum: int) -> tuple[int, ...]:
    value = doc[member]
    if not isinstance(value, list) or not value or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= minimum for v in value
    ):
        raise MetadataError(
            f"{key}: {member!r} must be a non-empty list of integers >= {minimum}, got {value!r}"
        )
    return tuple(value)


@dataclass
class GroupMetadata:
    """A group's ``attributes.json``: user attributes plus hidden members (the ``n5`` version)."""

    attributes: dict[str, Any] = field(default_factory=dict)
    hidden: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {**self.hidden, **copy.deepcopy(self.attributes)}


@dataclass
class DatasetMetadata:
    """A dataset's ``attributes.json``. ``dimensions`` / ``block_size`` are in N5 order."""

    dimensions: tuple[int, ...]
    block_size: tuple[int, ...]
    dtype: np.dtype
    compression: dict[str, Any] | str  # as written (a string for legacy ``compressionType``)
    attributes: dict[str, Any] = field(default_factory=dict)
    hidden: dict[str, Any] = field(default_factory=dict)
    key: str = ATTRIBUTES_KEY

    def __post_init__(self) -> None:
        if len(self.dimensions) != len(self.block_size):
            raise MetadataError(
                f"{self.key}: 'blockSize' {list(self.block_size)} and 'dimensions' "
                f"{list(self.dimensions)} differ in rank"
            )
        if math.prod(self.block_size) > _MAX_BLOCK_ELEMENTS:
            raise MetadataError(f"{self.key}: 'blockSize' {list(self.block_size)} is too large for N5 blocks")
        self.codec: BytesBytesCodec = compression_from_n5(self.compression, self.key)

    @property
    def shape(self) -> tuple[int, ...]:
        """The NumPy (C-order) shape: ``dimensions`` reversed."""
        return self.dimensions[::-1]

    @property
    def chunk_shape(self) -> tuple[int, ...]:
        """The NumPy (C-order) block shape: ``blockSize`` reversed."""
        return self.block_size[::-1]

    def to_dict(self) -> dict[str, Any]:
        doc = {**self.hidden, **copy.deepcopy(self.attributes)}
        doc["dimensions"] = list(self.dimensions)
        doc["blockSize"] = list(self.block_size)
        doc["dataType"] = dtype_name(self.dtype)
        if isinstance(self.compression, str):
            doc["compressionType"] = self.compression
        else:
            doc["compression"] = copy.deepcopy(self.compression)
        return doc


def is_dataset(doc: dict[str, Any]) -> bool:
    return all(k in doc for k in _DATASET_KEYS)


def parse_json(raw: bytes, key: str) -> dict[str, Any]:
    """The JSON object in ``raw``; MetadataError naming ``key`` otherwise."""
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as e:
        raise MetadataError(f"{key}: not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise MetadataError(f"{key}: expected a JSON object, got {type(doc).__name__}")
    return doc


def parse_document(raw: bytes | dict[str, Any], key: str = ATTRIBUTES_KEY) -> DatasetMetadata | GroupMetadata:
    """A dataset when the document has the dataset keys, else a group."""
    doc = parse_json(raw, key) if not isinstance(raw, dict) else raw
    _check_version(doc, key)
    hidden = {VERSION_KEY: doc[VERSION_KEY]} if VERSION_KEY in doc else {}
    if not is_dataset(doc):
        partial = [k for k in _DATASET_KEYS if k in doc]
        if partial:
            missing = [k for k in _DATASET_KEYS if k not in doc]
            raise MetadataError(f"{key}: has dataset member(s) {partial} but lacks {missing}")
        attrs = {k: v for k, v in doc.items() if k != VERSION_KEY}
        return GroupMetadata(attributes=attrs, hidden=hidden)
    for k in _UNSUPPORTED_KEYS:
        if k in doc:
            raise UnsupportedFeatureError(
                f"{key}: N5 datasets with {k!r} (N5 sharding / codecs, after spec 4.0.0) are not supported"
            )
    dims = _int_list(doc, "dimensions", key, 0)
    check_element_count(dims, key)
    blocks = _int_list(doc, "blockSize", key, 1)
    if any(b > 0xFFFFFFFF for b in blocks):
        raise MetadataError(f"{key}: 'blockSize' entries must fit uint32, got {list(blocks)}")
    dt = doc["dataType"]
    if not isinstance(dt, str) or dt not in DTYPES:
        raise UnsupportedFeatureError(
            f"{key}: unsupported dataType {dt!r} (supported: {', '.join(DTYPES)})"
        )
    if "compression" in doc:
        compression: dict[str, Any] | str = doc["compression"]
        if not isinstance(compression, dict):
            raise MetadataError(f"{key}: 'compression' must be an object, got {compression!r}")
    elif "compressionType" in doc:
        compression = doc["compressionType"]
        if not isinstance(compression, str):
            raise MetadataError(f"{key}: 'compressionType' must be a string, got {compression!r}")
    else:
        compression = {"type": "raw"}  # n5-java's default when neither is present
    attrs = {
        k: v for k, v in doc.items() if k not in (*_DATASET_KEYS, *_COMPRESSION_KEYS, VERSION_KEY)
    }
    return DatasetMetadata(
        dimensions=dims,
        block_size=blocks,
        dtype=DTYPES[dt],
        compression=copy.deepcopy(compression),
        attributes=attrs,
        hidden=hidden,
        key=key,
    )
