"""From a request's raw URL path to a store key, refusing anything that could leave the root.

The raw path (before any decoding or normalisation) is split on ``/`` first and each segment
percent-decoded after, so ``%2e%2e`` is caught as ``..`` and an encoded ``%2F`` cannot smuggle
a separator into a segment. Empty segments (``a//b``) are merged away, as nginx does by
default (clients joining URLs send them); the key stays relative to the root either way, so
``//etc/passwd`` names ``etc/passwd`` below the root. What remains must pass the store's own
key rules.
"""

from __future__ import annotations

from urllib.parse import unquote

from ..errors import InvalidKeyError
from ..store.base import validate_key

__all__ = ["key_from_path"]


def key_from_path(raw_path: str, mount: str = "/") -> str:
    """The store key named by ``raw_path`` (a URL path below ``mount``, query removed).

    Raises ``InvalidKeyError`` for an empty key, ``.``/``..`` segments (plain or
    percent-encoded), encoded slashes or backslashes, NUL, and anything not below ``mount``.
    """
    path = raw_path.split("?", 1)[0].split("#", 1)[0]
    if not path.startswith(mount):
        raise InvalidKeyError(f"URL path {raw_path!r} is not below {mount!r}")
    decoded = []
    for raw in path[len(mount):].split("/"):
        if raw == "":
            continue
        seg = unquote(raw, errors="strict")
        if seg in (".", "..") or "/" in seg or "\\" in seg or "\x00" in seg:
            raise InvalidKeyError(f"URL path {raw_path!r} has an unsafe segment {raw!r}")
        decoded.append(seg)
    if not decoded:
        raise InvalidKeyError(f"URL path {raw_path!r} names no key")
    return validate_key("/".join(decoded))
