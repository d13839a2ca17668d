"""Small datasets of every format for the verify / repair tests, local or on S3.

``DATASETS[name].make(url, storage_options)`` writes one and returns what each node holds
(``{node name: ndarray}``, or ``{key: bytes}`` for the key-value store), named as
``shardstore.ops.integrity.walk`` names them; ``read`` reads it back the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import shardstore
from shardstore._sync import sync
from shardstore.formats.precomputed import open_kv
from shardstore.ops.integrity import walk
from shardstore.store.registry import store_from_url

Content = dict[str, Any]
#: metadata documents: never corrupted by ``data_keys`` users
METADATA = {"zarr.json", "attributes.json", "info", "sizes", "storage", "__attrs__", "__rootdirs__"}

ZSTD_CHECKSUM = [{"name": "bytes", "configuration": {"endian": "little"}},
                 {"name": "zstd", "configuration": {"level": 1, "checksum": True}}]
ZSTD_PLAIN = [{"name": "bytes", "configuration": {"endian": "little"}},
              {"name": "zstd", "configuration": {"level": 1, "checksum": False}}]
CRC32C = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]
SHARDING = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 1,
            "minishard_bits": 1, "shard_bits": 1, "minishard_index_encoding": "gzip", "data_encoding": "gzip"}


def data(shape: tuple[int, ...], dtype: str = "uint16", seed: int = 0) -> np.ndarray:
    """Random values above 0, so that a unit dropped to the fill value 0 shows."""
    return np.random.default_rng(seed).integers(1, 60000, size=shape).astype(dtype)


@dataclass(frozen=True)
class Dataset:
    make: Callable[[str, dict[str, Any] | None], Content]
    #: what verify says of its content: the checks (a substring) or None for "decoded" only
    checks: str | None
    fill: Any = 0


def _zarr3(codecs: list[Any], shards: tuple[int, ...] | None) -> Callable[..., Content]:
    def make(url: str, opts: dict[str, Any] | None) -> Content:
        x = data((40, 40))
        a = shardstore.open(url, mode="w", format="zarr3", storage_options=opts, shape=x.shape, dtype=x.dtype,
                            chunks=(10, 10), shards=shards, codecs=codecs)
        a[...] = x
        return {"": x}

    return make


def _zarr3_group(url: str, opts: dict[str, Any] | None) -> Content:
    g = shardstore.zarr3.create_group(url, mode="w", storage_options=opts)
    x, y = data((30, 20)), data((16,), "uint32", 1)
    g.create_array("raw", shape=x.shape, dtype=x.dtype, chunks=(10, 10), codecs=CRC32C)[...] = x
    g.create_group("labels").create_array("cells", shape=y.shape, dtype=y.dtype, chunks=(4,), shards=(8,),
                                          codecs=CRC32C)[...] = y
    return {"labels/cells": y, "raw": x}


def _n5(compression: str) -> Callable[..., Content]:
    def make(url: str, opts: dict[str, Any] | None) -> Content:
        x = data((30, 40))
        a = shardstore.n5.create(url, "arr", shape=x.shape, dtype=x.dtype, block_size=(10, 10),
                                 compression={"type": compression}, storage_options=opts, mode="w")
        a[...] = x
        return {"arr": x}

    return make


def _precomputed(sharded: bool) -> Callable[..., Content]:
    def make(url: str, opts: dict[str, Any] | None) -> Content:
        x = data((32, 32, 8, 1))
        scale: dict[str, Any] = {"size": [32, 32, 8], "chunk_size": [8, 8, 8]}
        if sharded:
            scale["sharding"] = SHARDING
        a = shardstore.precomputed.create(url, data_type="uint16", scales=[scale], storage_options=opts, mode="w")
        a[...] = x
        return {"1_1_1": x}

    return make


def _kv(url: str, opts: dict[str, Any] | None) -> Content:
    kv = open_kv(url, sharding={**SHARDING, "hash": "murmurhash3_x86_128", "minishard_bits": 2}, mode="w",
                 storage_options=opts)
    values = {k: data((k % 5 + 20,), "uint16", k).tobytes() for k in range(40)}
    kv.update(values)
    return {"": values}


def _carray(url: str, opts: dict[str, Any] | None) -> Content:
    x = data((5000,), "int32")
    shardstore.bcolz.create(url, storage_options=opts, data=x, chunklen=1024, dflt=0, mode="w").flush()
    return {"": x}


def _ctable(url: str, opts: dict[str, Any] | None) -> Content:
    a, b = data((3000,), "int64"), data((3000,), "float64", 1)
    t = shardstore.bcolz.create(url, storage_options=opts, columns=[a, b], names=["a", "b"], chunklen=512, mode="w")
    t.flush()
    return {"a": a, "b": b}


DATASETS: dict[str, Dataset] = {
    "zarr3-crc32c": Dataset(_zarr3(CRC32C, None), "crc32c codec"),
    "zarr3-sharded-zstd-checksum": Dataset(_zarr3(ZSTD_CHECKSUM, (20, 20)), "zstd content checksum"),
    "zarr3-sharded-zstd": Dataset(_zarr3(ZSTD_PLAIN, (20, 20)), None),
    "zarr3-group": Dataset(_zarr3_group, "crc32c codec"),
    "n5-gzip": Dataset(_n5("gzip"), "gzip CRC-32"),
    "n5-raw": Dataset(_n5("raw"), None),
    "precomputed": Dataset(_precomputed(False), None),
    "precomputed-sharded": Dataset(_precomputed(True), "gzip CRC-32"),
    "kv": Dataset(_kv, "gzip CRC-32"),
    "bcolz-carray": Dataset(_carray, None),
    "bcolz-ctable": Dataset(_ctable, None),
}


def read(url: str, opts: dict[str, Any] | None = None) -> Content:
    """What every node holds now (arrays read whole, the key-value store key by key)."""
    out: Content = {}
    for name, node in walk(url, storage_options=opts):
        out[name] = {k: node[k] for k in node} if hasattr(node, "get_many") else np.asarray(node[...])
    return out


def data_keys(url: str, opts: dict[str, Any] | None = None) -> list[str]:
    """The stored data units (chunk, shard and block files), sorted."""
    store = store_from_url(url, mode="r", storage_options=opts)

    async def keys() -> list[str]:
        return [k async for k in store.list_prefix("")]

    return sorted(k for k in sync(keys()) if k.rsplit("/", 1)[-1] not in METADATA)


def damage(url: str, key: str, how: str, opts: dict[str, Any] | None = None) -> None:
    """``truncate`` a stored unit to half its size, or ``flip`` 4 bytes in its middle."""
    store = store_from_url(url, mode="r+", storage_options=opts)
    value = bytearray(sync(store.get(key)) or b"")
    if how == "truncate":
        value = value[: len(value) // 2]
    else:
        mid = len(value) // 2
        value[mid : mid + 4] = bytes(v ^ 0xFF for v in value[mid : mid + 4])
    sync(store.set(key, bytes(value)))
