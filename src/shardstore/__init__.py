"""shardstore: fast, friendly chunked, compressed, sharded N-dimensional arrays.

>>> import shardstore, numpy as np
>>> a = shardstore.zarr3.create("memory://", shape=(100, 100), dtype="uint8",
...                             chunks=(10, 10), shards=(50, 50))
>>> a[10:20, ::2] = 7
>>> int(np.asarray(a).sum())
350
"""

from typing import TYPE_CHECKING, Any

from .config import IOConfig
from .errors import (
    ChecksumError,
    ChunkNotFoundError,
    CodecError,
    ConfigError,
    ContainsNodeError,
    MetadataError,
    NodeNotFoundError,
    ReadOnlyError,
    ShardStoreError,
    StoreError,
    UnsupportedFeatureError,
)

if TYPE_CHECKING:
    from . import bcolz, errors, n5, precomputed, zarr3
    from .api import create, open, open_group
    from .core.array import Array
    from .formats.zarr3 import Group
    from .ops.convert import convert
    from .store import LocalStore, MemoryStore, Store

#: the names imported on first use (PEP 562): a script that works with one format loads
#: neither the others nor the conversion tools (``import shardstore`` itself: 0.7 MiB over
#: NumPy's, 9.2 with every format; an N5 array's modules then add 4.1)
_LAZY: dict[str, tuple[str, str | None]] = {
    "bcolz": (".bcolz", None),
    "n5": (".n5", None),
    "precomputed": (".precomputed", None),
    "zarr3": (".zarr3", None),
    "create": (".api", "create"),
    "open": (".api", "open"),
    "open_group": (".api", "open_group"),
    "Array": (".core.array", "Array"),
    "Group": (".formats.zarr3", "Group"),
    "convert": (".ops.convert", "convert"),
    "LocalStore": (".store", "LocalStore"),
    "MemoryStore": (".store", "MemoryStore"),
    "Store": (".store", "Store"),
}


def __getattr__(name: str) -> Any:
    lazy = _LAZY.get(name)
    if lazy is None:
        raise AttributeError(f"module 'shardstore' has no attribute {name!r}")
    import importlib

    module = importlib.import_module(lazy[0], __name__)
    value = module if lazy[1] is None else getattr(module, lazy[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__version__ = "0.1.0"

__all__ = [
    "open",
    "create",
    "open_group",
    "convert",
    "Array",
    "IOConfig",
    "Group",
    "zarr3",
    "n5",
    "bcolz",
    "precomputed",
    "Store",
    "MemoryStore",
    "LocalStore",
    "errors",
    "ShardStoreError",
    "MetadataError",
    "UnsupportedFeatureError",
    "CodecError",
    "ChecksumError",
    "StoreError",
    "ChunkNotFoundError",
    "NodeNotFoundError",
    "ReadOnlyError",
    "ContainsNodeError",
    "ConfigError",
]
