"""Layer 1: key-value stores of bytes (see ``base`` for the interface)."""

from .base import ByteRange, OffsetBR, RangeBR, Store, SuffixBR, slice_range, validate_key
from .local import LocalStore
from .memory import MemoryStore
from .registry import store_from_url
from .wrappers import PrefixStore, ReadOnlyStore, RecordingStore

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
    "store_from_url",
]
