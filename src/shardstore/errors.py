"""The one exception tree of shardstore.

::

    ShardStoreError
     ├── MetadataError            invalid metadata document; names the document and field
     ├── UnsupportedFeatureError  valid input that shardstore does not implement
     │    └── NotPicklableError  a node or store that cannot be reopened in another process (also TypeError)
     ├── CodecError               encoding / decoding failed (corrupt or truncated data)
     │    └── ChecksumError       a checksum (crc32c, zstd) did not match
     ├── StoreError               a key-value backend failed (chained with ``raise ... from``)
     │    ├── InvalidKeyError     a key with ``..``, an absolute path, a backslash or NUL
     │    └── ConflictError       a conditional write lost: another writer changed the key
     ├── NodeNotFoundError        no array or group where one was looked for (also FileNotFoundError)
 ├── NodeTypeError            a group used as an array, or the other way round (also TypeError)
 ├── ScaleNotFoundError       a precomputed scale index or key that the volume does not have
 ├── SelectionError           an index that does not fit the array (also IndexError)
 ├── InvalidModeError         a mode an entry point does not take (also ValueError)
 ├── ConfigError              an IOConfig field or SHARDSTORE_* variable is invalid (also ValueError)
 ├── ChunkNotFoundError       a chunk is missing and the caller asked for strict reads
     ├── ReadOnlyError            a write to a store or array opened read-only
     └── ContainsNodeError        create(mode="w-") found something already there

Every message names the key, path or document concerned and what was expected.
"""

from __future__ import annotations

__all__ = [
    "ShardStoreError",
    "MetadataError",
    "UnsupportedFeatureError",
    "NotPicklableError",
    "CodecError",
    "ChecksumError",
    "StoreError",
    "InvalidKeyError",
    "ConflictError",
    "NodeNotFoundError",
    "NodeTypeError",
    "ScaleNotFoundError",
    "InvalidModeError",
    "ConfigError",
    "SelectionError",
    "ChunkNotFoundError",
    "ReadOnlyError",
    "ContainsNodeError",
]


class ShardStoreError(Exception):
    """Root of every error shardstore raises on purpose."""


class MetadataError(ShardStoreError, ValueError):
    """A metadata document is missing, malformed or inconsistent."""


class UnsupportedFeatureError(ShardStoreError, NotImplementedError):
    """The input is valid but uses something shardstore does not implement."""


class NotPicklableError(UnsupportedFeatureError, TypeError):
    """Pickling a node or store that cannot be opened again elsewhere (a memory store, a
    store built by hand instead of from a URL); a TypeError, as ``pickle`` raises for
    unpicklable objects."""


class CodecError(ShardStoreError, ValueError):
    """Encoding or decoding a chunk failed."""


class ChecksumError(CodecError):
    """A stored checksum did not match the data."""


class StoreError(ShardStoreError, OSError):
    """A key-value store backend failed."""


class InvalidKeyError(StoreError, ValueError):
    """A store key is not a safe relative key."""


class ConflictError(StoreError):
    """A conditional write found the key changed since it was read (another writer won)."""


class NodeNotFoundError(ShardStoreError, FileNotFoundError):
    """No array or group (or not the kind asked for) at the path opened.

    Also a ``FileNotFoundError``, so ``except FileNotFoundError`` works as for ``open()``;
    the message says what was looked for and where.
    """

    def __str__(self) -> str:  # OSError would format (errno, strerror); keep the message
        return str(self.args[0]) if self.args else ""


class NodeTypeError(ShardStoreError, TypeError):
    """A group was used as an array (e.g. indexed with slices), or an array as a group."""


class ScaleNotFoundError(ShardStoreError, KeyError, IndexError):
    """A precomputed volume has no scale with the index or key asked for (a key is looked up
    like a mapping's, an index like a list's: both built-in errors catch it)."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class SelectionError(ShardStoreError, IndexError):
    """A selection that does not fit the array (too many indices, out of bounds)."""


class InvalidModeError(ShardStoreError, ValueError):
    """An open/create mode the entry point does not take."""


class ChunkNotFoundError(ShardStoreError, KeyError):
    """A chunk is absent and the read was strict."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class ReadOnlyError(ShardStoreError, PermissionError):
    """A write was attempted on something opened read-only."""


class ContainsNodeError(ShardStoreError, FileExistsError):
    """Creation refused because a node already exists there."""


class ConfigError(ShardStoreError, ValueError):
    """An ``IOConfig`` field, or the environment variable that sets it, has an invalid value."""
