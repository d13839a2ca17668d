"""The precomputed ``info`` document: parse, validate, dump (shared/specs/precomputed.md §2).

Members shardstore does not model (``mesh``, ``skeletons``, ``hidden``, writer options such as
``jpeg_quality``, anything new) are kept and written back unchanged. Numbers keep their JSON
spelling (``resolution`` as ``4`` or ``4.0``) so that rewriting an ``info`` changes only what
was asked. Every error names the ``info`` file and the member.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...core.grid import check_element_count
from ...errors import MetadataError, UnsupportedFeatureError
from ...sharding.uint64 import ShardingSpec

__all__ = [
    "DATA_TYPES",
    "ENCODINGS",
    "Scale",
    "VolumeInfo",
    "parse_info",
    "parse_sharding",
    "encode_info",
    "default_key",
]

DATA_TYPES = ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "float32")
#: encodings shardstore reads and writes; neuroglancer also knows "compresso" and "jxl"
ENCODINGS = ("raw", "jpeg", "png", "compressed_segmentation")
_KNOWN_ENCODINGS = ENCODINGS + ("compresso", "jxl")
_VOLUME_TYPE = "neuroglancer_multiscale_volume"
#: a chunk is decoded whole; refuse metadata that would make one chunk absurdly large
MAX_CHUNK_BYTES = 1 << 32


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


def _triple(v: Any, where: str, *, minimum: int | None = None) -> tuple[int, int, int]:
    if not isinstance(v, list) or len(v) != 3 or not all(_is_int(x) for x in v):
        raise MetadataError(f"{where} must be a list of 3 integers, got {v!r}")
    if minimum is not None and any(x < minimum for x in v):
        raise MetadataError(f"{where} entries must be >= {minimum}, got {v!r}")
    return (v[0], v[1], v[2])


def default_key(resolution: Any) -> str:
    """tensorstore's scale key for a resolution: ``"4_4_40"`` (integers printed as such)."""
    return "_".join(str(int(r)) if float(r).is_integer() else str(r) for r in resolution)


def parse_sharding(spec: Any, where: str) -> dict[str, Any] | None:
    """Validate a ``neuroglancer_uint64_sharded_v1`` spec (None / null: unsharded)."""
    if spec is None:
        return None
    ShardingSpec.from_json(spec, where)  # raises MetadataError naming the member
    return dict(spec)


@dataclass
class Scale:
    """One entry of ``scales``: the parsed members plus the JSON it came from."""

    key: str
    size: tuple[int, int, int]
    voxel_offset: tuple[int, int, int]
    resolution: tuple[float, float, float]
    chunk_sizes: list[tuple[int, int, int]]
    encoding: str
    block_size: tuple[int, int, int] | None = None  # compressed_segmentation_block_size
    sharding: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def chunk_size(self) -> tuple[int, int, int]:
        return self.chunk_sizes[0]

    @property
    def grid_shape(self) -> tuple[int, int, int]:
        (sx, sy, sz), (cx, cy, cz) = self.size, self.chunk_size
        return -(-sx // cx), -(-sy // cy), -(-sz // cz)

    def to_dict(self) -> dict[str, Any]:
        out = copy.deepcopy(self.raw)
        out.update(
            key=self.key,
            size=list(self.size),
            voxel_offset=list(self.voxel_offset),
            chunk_sizes=[list(c) for c in self.chunk_sizes],
            encoding=self.encoding,
        )
        if "resolution" not in self.raw or [float(r) for r in self.raw["resolution"]] != list(self.resolution):
            out["resolution"] = list(self.resolution)
        if self.block_size is not None:
            out["compressed_segmentation_block_size"] = list(self.block_size)
        if self.sharding is not None:
            out["sharding"] = copy.deepcopy(self.sharding)
        else:
            out.pop("sharding", None)
        return out


@dataclass
class VolumeInfo:
    """The whole ``info``: volume-wide members and the scales (finest first)."""

    type: str
    data_type: str
    num_channels: int
    scales: list[Scale]
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.data_type)

    def to_dict(self) -> dict[str, Any]:
        out = copy.deepcopy(self.raw)
        out["@type"] = _VOLUME_TYPE
        out.update(
            type=self.type,
            data_type=self.data_type,
            num_channels=self.num_channels,
            scales=[s.to_dict() for s in self.scales],
        )
        return out

    def scale_index(self, scale: int | str, where: str) -> int:
        """The position of ``scale`` (an index or a key) in ``scales``."""
        if isinstance(scale, str):
            for i, s in enumerate(self.scales):
                if s.key == scale:
                    return i
            raise KeyError(f"{where}: no scale with key {scale!r} (keys: {[s.key for s in self.scales]})")
        if _is_int(scale) and -len(self.scales) <= scale < len(self.scales):
            return scale % len(self.scales)
        raise IndexError(f"{where}: scale {scale!r} out of range ({len(self.scales)} scales)")


def _parse_scale(doc: Any, i: int, info: VolumeInfo, where: str) -> Scale:
    at = f"{where}: scales[{i}]"
    if not isinstance(doc, dict):
        raise MetadataError(f"{at} must be an object, got {doc!r}")
    for name in ("key", "size", "resolution", "chunk_sizes", "encoding"):
        if name not in doc:
            raise MetadataError(f"{at} is missing the required member {name!r}")
    key = doc["key"]
    if not isinstance(key, str) or not key.strip("/"):
        raise MetadataError(f"{at}.key must be a non-empty string, got {key!r}")
    size = _triple(doc["size"], f"{at}.size", minimum=0)
    check_element_count(size, f"{at}.size")
    offset = _triple(doc.get("voxel_offset", [0, 0, 0]), f"{at}.voxel_offset")
    res = doc["resolution"]
    if not isinstance(res, list) or len(res) != 3 or not all(_is_number(r) and r > 0 for r in res):
        raise MetadataError(f"{at}.resolution must be a list of 3 positive numbers, got {res!r}")
    chunks = doc["chunk_sizes"]
    if not isinstance(chunks, list) or not chunks:
        raise MetadataError(f"{at}.chunk_sizes must be a non-empty list of [x, y, z], got {chunks!r}")
    chunk_sizes = [_triple(c, f"{at}.chunk_sizes[{j}]", minimum=1) for j, c in enumerate(chunks)]
    for j, c in enumerate(chunk_sizes):
        check_element_count(c, f"{at}.chunk_sizes[{j}]")
    encoding = doc["encoding"]
    if not isinstance(encoding, str) or encoding.lower() not in _KNOWN_ENCODINGS:
        raise MetadataError(f"{at}.encoding must be one of {list(_KNOWN_ENCODINGS)}, got {encoding!r}")
    encoding = encoding.lower()
    block = None
    if encoding == "compressed_segmentation":
        if "compressed_segmentation_block_size" not in doc:
            raise MetadataError(f"{at}: encoding 'compressed_segmentation' needs 'compressed_segmentation_block_size'")
        block = _triple(doc["compressed_segmentation_block_size"], f"{at}.compressed_segmentation_block_size", minimum=1)
        if info.data_type not in ("uint32", "uint64"):
            raise MetadataError(f"{at}: compressed_segmentation needs data_type uint32 or uint64, not {info.data_type}")
    elif encoding == "jpeg" and (info.data_type != "uint8" or info.num_channels not in (1, 3)):
        raise MetadataError(f"{at}: jpeg needs data_type uint8 and 1 or 3 channels, not {info.data_type} x {info.num_channels}")
    elif encoding == "png" and (info.data_type not in ("uint8", "uint16") or not 1 <= info.num_channels <= 4):
        raise MetadataError(f"{at}: png needs data_type uint8/uint16 and 1-4 channels, not {info.data_type} x {info.num_channels}")
    sharding = parse_sharding(doc.get("sharding"), f"{at}.sharding")
    if sharding is not None and len(chunk_sizes) != 1:
        raise MetadataError(f"{at}: a sharded scale must have exactly one chunk_sizes entry, got {len(chunk_sizes)}")
    for c in chunk_sizes:
        if math.prod(c) * info.num_channels * info.dtype.itemsize > MAX_CHUNK_BYTES:
            raise MetadataError(f"{at}.chunk_sizes {list(c)}: a chunk of more than {MAX_CHUNK_BYTES} bytes is not supported")
    if sharding is not None:
        bits = sum(max(g - 1, 0).bit_length() for g in (-(-s // c) for s, c in zip(size, chunk_sizes[0])))
        if bits > 64:
            raise MetadataError(f"{at}: the chunk grid needs {bits} bits of compressed Morton code (at most 64)")
    return Scale(
        key=key,
        size=size,
        voxel_offset=offset,
        resolution=(float(res[0]), float(res[1]), float(res[2])),
        chunk_sizes=chunk_sizes,
        encoding=encoding,
        block_size=block,
        sharding=sharding,
        raw=copy.deepcopy(doc),
    )


def parse_info(raw: bytes | str | dict[str, Any], where: str = "info") -> VolumeInfo:
    """Parse and validate an ``info`` document; ``where`` names it in errors."""
    if isinstance(raw, (bytes, bytearray, memoryview, str)):
        try:
            doc = json.loads(bytes(raw) if not isinstance(raw, str) else raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise MetadataError(f"{where}: not valid JSON: {e}") from e
    else:
        doc = raw
    if not isinstance(doc, dict):
        raise MetadataError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    if "@type" in doc and doc["@type"] != _VOLUME_TYPE:
        raise MetadataError(f"{where}: '@type' is {doc['@type']!r}, expected {_VOLUME_TYPE!r} (not a volume info)")
    for name in ("type", "data_type", "num_channels", "scales"):
        if name not in doc:
            raise MetadataError(f"{where}: missing the required member {name!r}")
    vtype = doc["type"]
    if vtype not in ("image", "segmentation"):
        raise MetadataError(f"{where}: 'type' must be 'image' or 'segmentation', got {vtype!r}")
    data_type = doc["data_type"]
    if not isinstance(data_type, str) or data_type.lower() not in DATA_TYPES:
        raise MetadataError(f"{where}: 'data_type' must be one of {list(DATA_TYPES)}, got {data_type!r}")
    nc = doc["num_channels"]
    if not _is_int(nc) or nc < 1:
        raise MetadataError(f"{where}: 'num_channels' must be a positive integer, got {nc!r}")
    if nc > 1 << 16:
        raise UnsupportedFeatureError(f"{where}: {nc} channels is more than shardstore supports (65536)")
    scales = doc["scales"]
    if not isinstance(scales, list) or not scales:
        raise MetadataError(f"{where}: 'scales' must be a non-empty list")
    info = VolumeInfo(type=vtype, data_type=data_type.lower(), num_channels=nc, scales=[], raw=copy.deepcopy(doc))
    info.scales = [_parse_scale(s, i, info, where) for i, s in enumerate(scales)]
    keys = [s.key for s in info.scales]
    if len(set(keys)) != len(keys):
        raise MetadataError(f"{where}: scale keys must be unique, got {keys}")
    return info


def encode_info(info: VolumeInfo) -> bytes:
    """The ``info`` JSON as written (compact, sorted keys, like tensorstore)."""
    return json.dumps(info.to_dict(), sort_keys=True, separators=(",", ":")).encode()
