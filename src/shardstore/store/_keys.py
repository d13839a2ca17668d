"""What a store key and a listing prefix may be: relative ``/``-separated paths that cannot
escape a store's root or confuse a backend (the one check, applied by ``Store``'s public
methods and by every backend that takes keys directly)."""

from __future__ import annotations

from ..errors import InvalidKeyError

__all__ = ["validate_key", "validate_prefix"]


def validate_key(key: str) -> str:
    """Refuse keys that could escape the store's root or confuse a backend."""
    if not isinstance(key, str):
        raise InvalidKeyError(f"store key must be a str, got {type(key).__name__}: {key!r}")
    if key == "":
        raise InvalidKeyError("store key must not be empty: ''")
    if "\x00" in key:
        raise InvalidKeyError(f"store key contains a NUL character: {key!r}")
    if "\\" in key:
        raise InvalidKeyError(f"store key contains a backslash: {key!r}")
    if key.startswith("/"):
        raise InvalidKeyError(f"store key must be relative, not absolute: {key!r}")
    parts = key.split("/")
    if "" in parts or "." in parts or ".." in parts:
        raise InvalidKeyError(f"store key has an empty, '.' or '..' path segment: {key!r}")
    return key


def validate_prefix(prefix: str) -> str:
    """A listing prefix: '' (everything), or complete segments and then a partial last one.

    ``"c/0/"`` and ``"c/0"`` (which also matches ``"c/01"``) are both prefixes; the complete
    segments follow the key rules, the partial last one may be anything a key segment may
    start with.
    """
    if not isinstance(prefix, str):
        raise InvalidKeyError(f"listing prefix must be a str, got {type(prefix).__name__}: {prefix!r}")
    if prefix == "":
        return prefix
    head, sep, last = prefix.rpartition("/")
    if "\x00" in last or "\\" in last or (sep and not head):
        raise InvalidKeyError(f"invalid listing prefix {prefix!r}")
    if head:
        try:
            validate_key(head)
        except InvalidKeyError as e:
            raise InvalidKeyError(f"invalid listing prefix {prefix!r}: {e}") from None
    return prefix
