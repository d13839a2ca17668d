"""What every format's group shares: its store and path, attributes, and child paths."""

from __future__ import annotations

from typing import Any

from .._reopen import NodeRecord, reopen
from ..config import IOConfig
from ..errors import InvalidKeyError, NodeTypeError, ShardStoreError
from ..store.base import Store
from .attributes import Attributes

__all__ = ["GroupBase"]


class GroupBase:
    """A group node; ``driver`` persists its attributes (``attributes`` / ``set_attributes``)."""

    #: the format's name for ``shardstore.open(format=...)``
    format_name: str = ""

    def __reduce__(self) -> tuple[Any, ...]:
        # reopened from its store and path: children are opened from there on demand
        options = (("config", self.config),) if self.config is not None else ()
        record = NodeRecord(self.format_name, self.store, self.path, "r" if self.read_only else "r+", options)
        return (reopen, (record,))

    def __init__(self, store: Store, path: str, driver: Any, read_only: bool, config: IOConfig | None = None) -> None:
        self.store = store
        self.path = path
        self.read_only = read_only
        #: the ``IOConfig`` the group was opened with; its children open with it too
        self.config = config
        self._driver = driver

    @property
    def attrs(self) -> Attributes:
        return Attributes(self, self._driver, self.read_only)

    def keys(self) -> list[str]:
        """The names of the children (each format lists them its own way)."""
        raise NotImplementedError

    def _child(self, name: str) -> str:
        """The path of child ``name`` (which may hold '/'), refusing empty, '.' and '..' parts."""
        if not isinstance(name, str):  # g[0:10], g[...]: a group is not an array
            try:
                children = ", ".join(repr(c) for c in self.keys()) or "none"
            except ShardStoreError:  # a store that cannot list (HTTP)
                children = "not listable"
            raise NodeTypeError(
                f"{self!r} is a group, not an array: index it by a child's name, e.g. "
                f"g[\"name\"] (children: {children}), not with {name!r}")
        name = name.strip("/")
        if not name or any(p in ("", ".", "..") for p in name.split("/")):
            raise InvalidKeyError(
                f"invalid child name {name!r} of group {self.path or '/'!r}: empty, '.' and '..' parts "
                "would leave the group (or the store's root)"
            )
        return f"{self.path}/{name}" if self.path else name
