"""Layer 1: key-value stores of bytes (see ``base`` for the interface)."""

from ._keys import validate_key
from .base import ByteRange, OffsetBR, RangeBR, Store, SuffixBR, slice_range
from .local import LocalStore
from .memory import MemoryStore
from .registry import store_from_url
from .sync_protocols import SupportsFilePath, SupportsGetSync, SupportsSetSync
from .wrappers import AsyncOnlyStore, PrefixStore, ReadOnlyStore, RecordingStore

__all__ = [
    "Store",
    "ByteRange",
    "RangeBR",
    "OffsetBR",
    "SuffixBR",
    "slice_range",
    "validate_key",
    "MemoryStore",
    "LocalStore",
    "PrefixStore",
    "ReadOnlyStore",
    "RecordingStore",
    "AsyncOnlyStore",
    "SupportsGetSync",
    "SupportsSetSync",
    "SupportsFilePath",
    "store_from_url",
]
