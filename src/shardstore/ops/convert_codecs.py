"""Codec choices of a conversion: ``--compression`` shorthands for Zarr v3 and N5, the Zarr blosc
codec that keeps a bcolz column's shuffle, and short descriptions of a source's codecs for the
``changed`` list of a conversion."""

from __future__ import annotations

from typing import Any

from ..core.array import Array
from ..errors import ShardStoreError

__all__ = ["BCOLZ_SHUFFLE", "inner_zarr_codecs", "n5_compression", "parse_compression", "source_codecs_text",
           "zarr_compressor"]


def parse_compression(text: str) -> tuple[str, list[Any]]:
    """``zstd``, ``zstd:5``, ``gzip:6``, ``blosc``, ``blosc:zstd:5``, ``none``: (name, parameters)."""
    parts = text.strip().lower().split(":")
    name, params = parts[0], parts[1:]
    if name in ("raw", "none", ""):
        return "none", []
    if name not in ("zstd", "gzip", "blosc", "lz4", "bz2", "xz"):
        raise ShardStoreError(f"--compression {text!r}: expected zstd[:LEVEL], gzip[:LEVEL], blosc[:CNAME[:LEVEL]] or none")
    return name, params


def zarr_compressor(name: str, params: list[Any], itemsize: int) -> list[dict[str, Any]]:
    if name == "none":
        return []
    if name == "blosc":
        cname = params[0] if params else "lz4"
        clevel = int(params[1]) if len(params) > 1 else 5
        return [{"name": "blosc", "configuration": {"cname": cname, "clevel": clevel, "shuffle": "shuffle",
                                                     "typesize": itemsize, "blocksize": 0}}]
    if name in ("zstd", "gzip"):
        level = int(params[0]) if params else (3 if name == "zstd" else 5)
        conf: dict[str, Any] = {"level": level}
        if name == "zstd":
            conf["checksum"] = False
        return [{"name": name, "configuration": conf}]
    raise ShardStoreError(f"--compression {name}: not a Zarr v3 codec (zstd, gzip, blosc or none)")


def n5_compression(name: str, params: list[Any]) -> dict[str, Any]:
    if name == "none":
        return {"type": "raw"}
    if name == "blosc":
        return {"type": "blosc", "cname": params[0] if params else "lz4",
                "clevel": int(params[1]) if len(params) > 1 else 5, "shuffle": 1}
    if name in ("gzip", "zstd", "bzip2", "xz", "lz4"):
        return {"type": name, **({"level": int(params[0])} if params else {})}
    if name == "bz2":
        return {"type": "bzip2", **({"blockSize": int(params[0])} if params else {})}
    raise ShardStoreError(f"--compression {name}: not an N5 compression")


BCOLZ_SHUFFLE = {0: "noshuffle", 1: "shuffle", 2: "bitshuffle"}


def source_codecs_text(a: Array) -> str:
    """A short description of the source's compression, for ``changed``."""
    if a.format == "zarr3":
        codecs = a.metadata.get("codecs", [])
        if codecs and codecs[0].get("name") == "sharding_indexed":
            codecs = codecs[0]["configuration"]["codecs"]
        return "[" + ", ".join(c["name"] for c in codecs) + "]"
    if a.format == "n5":
        return f"n5 {a.metadata.get('compression', {}).get('type', 'raw')}"
    if a.format == "precomputed":
        return f"precomputed {a.metadata['scales'][getattr(a.driver, 'index', 0)].get('encoding')}"
    return f"bcolz {getattr(a, 'cparams', {})}"


def inner_zarr_codecs(a: Array) -> list[dict[str, Any]]:
    codecs = list(a.metadata.get("codecs", []))
    if codecs and codecs[0].get("name") == "sharding_indexed":
        codecs = list(codecs[0]["configuration"]["codecs"])
    return codecs
