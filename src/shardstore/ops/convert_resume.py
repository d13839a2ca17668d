"""The progress manifest of a conversion: ``DST/.shardstore-convert.json``.

It records the arguments that fix the destination's bytes (source, target metadata, the task
boxes) and the tasks completed so far. A rerun with the same arguments skips those tasks; one
with other arguments is refused unless told to overwrite. ``convert`` removes the manifest
when it finishes. The name starts with a dot and holds no array metadata, so no format reads
it as a node or a chunk (format listings look for ``zarr.json``, ``attributes.json``,
``info``, chunk keys).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .._sync import sync
from ..store.base import Store

__all__ = ["MANIFEST_KEY", "Manifest", "load_manifest"]

MANIFEST_KEY = ".shardstore-convert.json"
_VERSION = 1


def digest(args: Any) -> str:
    import hashlib  # here, not at import: it loads OpenSSL, 3-4 MiB of every process's RSS

    return hashlib.sha256(json.dumps(args, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass
class Manifest:
    store: Store
    args: dict[str, Any]
    block: list[list[int]]  # per job, the box shape of its tasks
    done: set[int] = field(default_factory=set)

    def save(self) -> None:
        doc = {"version": _VERSION, "digest": digest(self.args), "args": self.args, "block": self.block,
               "done": sorted(self.done)}
        sync(self.store.set(MANIFEST_KEY, json.dumps(doc, default=str).encode()))

    def mark(self, tasks: Iterable[int]) -> None:
        self.done.update(tasks)
        self.save()

    def remove(self) -> None:
        sync(self.store.delete(MANIFEST_KEY))


def load_manifest(store: Store) -> tuple[str, list[list[int]], set[int]] | None:
    """(arguments digest, box shapes per job, completed tasks) of the manifest in ``store``, or None."""
    raw = sync(store.get(MANIFEST_KEY))
    if raw is None:
        return None
    try:
        doc = json.loads(bytes(raw))
        return str(doc["digest"]), [[int(b) for b in blk] for blk in doc.get("block", [])], {int(t) for t in doc["done"]}
    except (ValueError, KeyError, TypeError):
        return ("unreadable", [], set())
