"""Codec registry: one implementation per algorithm, found by the name a format uses.

Zarr v3 names are the primary names. Other formats (N5 ``compression.type``, precomputed
``encoding``) register aliases in their own namespace that point at the same classes.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import MetadataError, UnsupportedFeatureError
from .base import Codec, parse_named_config

__all__ = ["register_codec", "get_codec_class", "codec_from_config", "loaded_codec_class", "registered_codecs"]

# namespace -> name -> class
_REGISTRY: dict[str, dict[str, type[Codec]]] = {}
#: (namespace, name) -> the built-in module that registers that codec, imported on its first
#: use: an array loads its own codecs' modules and libraries, not every one (an N5 gzip
#: array none of blosc, lz4, xz, bzip2 and zstd: ~1 MiB of a process's memory)
_HOMES: dict[tuple[str, str], str] = {
    ("zarr3", "bytes"): "bytes_",
    ("zarr3", "transpose"): "transpose",
    ("zarr3", "gzip"): "gzip",
    ("zarr3", "zstd"): "zstd",
    ("zarr3", "blosc"): "blosc",
    ("zarr3", "crc32c"): "crc32c",
    ("zarr3", "sharding_indexed"): "sharding_indexed",
    ("n5", "raw"): "n5_block",
    ("n5", "gzip"): "gzip",
    ("n5", "bzip2"): "bz2",
    ("n5", "xz"): "xz",
    ("n5", "lz4"): "lz4",
    ("n5", "blosc"): "blosc",
    ("n5", "zstd"): "zstd",
}
_BUILTIN_MODULES = tuple(dict.fromkeys(_HOMES.values()))
_loaded = False


_C = TypeVar("_C", bound="type[Codec]")


def register_codec(name: str, namespace: str = "zarr3") -> Callable[[_C], _C]:
    """Class decorator: make ``cls`` available as ``name`` in ``namespace``."""

    def deco(cls: _C) -> _C:
        _REGISTRY.setdefault(namespace, {})[name] = cls
        return cls

    return deco


def _load_builtins() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for mod in _BUILTIN_MODULES:
            importlib.import_module(f"{__package__}.{mod}")


def registered_codecs(namespace: str = "zarr3") -> list[str]:
    _load_builtins()
    return sorted(_REGISTRY.get(namespace, {}))


def loaded_codec_class(name: str, namespace: str = "zarr3") -> type[Codec] | None:
    """The codec's class if its module is loaded already, else None (loads nothing: an
    instance of a codec whose module was never loaded cannot exist)."""
    return _REGISTRY.get(namespace, {}).get(name)


def get_codec_class(name: str, namespace: str = "zarr3") -> type[Codec]:
    # a codec whose module is loaded already needs none of the others (an N5 raw or gzip
    # array's first create skipped ~0.5-1 ms of imports: bytes, crc32c and google-crc32c)
    cls = loaded_codec_class(name, namespace)
    if cls is None and (home := _HOMES.get((namespace, name))) is not None:
        importlib.import_module(f"{__package__}.{home}")
        cls = loaded_codec_class(name, namespace)
    if cls is not None:
        return cls
    _load_builtins()
    try:
        return _REGISTRY[namespace][name]
    except KeyError:
        known = ", ".join(registered_codecs(namespace))
        raise UnsupportedFeatureError(
            f"unknown codec {name!r} (shardstore knows: {known})"
        ) from None


def codec_from_config(config: dict[str, Any] | str, namespace: str = "zarr3") -> Codec:
    """Build a codec from its JSON object; errors name the codec and the bad field."""
    name, _, _ = parse_named_config(config)
    cls = get_codec_class(name, namespace)
    try:
        return cls.from_config(config)
    except (MetadataError, UnsupportedFeatureError):
        raise
    except (TypeError, ValueError, KeyError) as e:
        raise MetadataError(f"codec {name!r}: invalid configuration {config!r}: {e}") from e
