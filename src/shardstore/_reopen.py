"""How a node is opened again: what an array, group or kv store pickles as.

A shardstore node is a handle on local state (an event loop, thread pools, locks, caches,
client sessions), none of which can travel to another process. What travels instead is a
``NodeRecord``: the format, the store (which pickles as the URL and storage options that open
it, see ``Store.__reduce__``), the path in it, the mode, and the opener's other keywords (a
precomputed scale, an ``IOConfig``). Unpickling opens the node again, reading its metadata
as it is then. Arrays in memory stores cannot be opened elsewhere: pickling them raises
``NotPicklableError``.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .store.base import Store

__all__ = ["NodeRecord", "reopen"]


@dataclass(frozen=True)
class NodeRecord:
    """Everything needed to open a node again, in this process or another one."""

    format: str  # "zarr3", "n5", "precomputed", "bcolz", "precomputed_kv"
    store: Store
    path: str
    mode: str  # "r" or "r+": a node that was created (or opened to write) reopens as "r+"
    #: further keywords for the opener, as (name, value) pairs
    options: tuple[tuple[str, Any], ...] = ()
    #: a module-level entry point ``opener(store, mode, path=..., **options)``; None means
    #: ``shardstore.open`` with ``format=``
    opener: Callable[..., Any] | None = None

    def open(self) -> Any:
        kwargs = dict(self.options)
        if self.opener is not None:
            return self.opener(self.store, self.mode, path=self.path or None, **kwargs)
        from .api import open as open_any

        return open_any(self.store, self.mode, format=self.format, path=self.path or None, **kwargs)

    def token(self) -> str:
        """A digest naming the node (the same for the same store, path, mode and options),
        e.g. for Dask task keys; raises ``NotPicklableError`` like pickling does."""
        import hashlib  # here, not at import: it loads OpenSSL, 3-4 MiB of every process's RSS

        return hashlib.sha256(pickle.dumps(self, protocol=4)).hexdigest()[:32]


def reopen(record: NodeRecord) -> Any:
    """What a pickled node becomes again (``record.open()``)."""
    return record.open()
