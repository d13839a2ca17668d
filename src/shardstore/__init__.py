"""shardstore: fast, friendly chunked, compressed, sharded N-dimensional arrays.

>>> import shardstore, numpy as np
>>> a = shardstore.zarr3.create("memory://", shape=(100, 100), dtype="uint8",
...                             chunks=(10, 10), shards=(50, 50))
>>> a[10:20, ::2] = 7
>>> int(np.asarray(a).sum())
350
"""

from . import (  # importable modules: import shardstore.n5
    bcolz,
    errors,
    n5,
    precomputed,
    zarr3,
)
from .api import create, open, open_group
from .config import IOConfig
from .core.array import Array
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
from .formats.zarr3 import Group
from .ops.convert import convert
from .store import LocalStore, MemoryStore, Store

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
