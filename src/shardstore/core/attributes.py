"""The user attributes of a node (an array or a group), written through its format driver."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

from .._sync import sync
from ..errors import ReadOnlyError

__all__ = ["Attributes"]


class Attributes(MutableMapping[str, Any]):
    """User attributes; every change is written to the metadata document at once."""

    def __init__(self, array: Any, driver: Any, read_only: bool) -> None:
        self._driver = driver
        self._read_only = read_only

    def _save(self, attrs: dict[str, Any]) -> None:
        if self._read_only:
            raise ReadOnlyError("attributes of a node opened read-only cannot be changed")
        sync(self._driver.set_attributes(attrs))

    def __getitem__(self, key: str) -> Any:
        return self._driver.attributes[key]

    def __setitem__(self, key: str, value: Any) -> None:
        attrs = self._driver.attributes
        attrs[key] = value
        self._save(attrs)

    def __delitem__(self, key: str) -> None:
        attrs = self._driver.attributes
        del attrs[key]
        self._save(attrs)

    def update(self, *args: Any, **kwargs: Any) -> None:  # one write, not one per key
        attrs = self._driver.attributes
        attrs.update(*args, **kwargs)
        self._save(attrs)

    def __iter__(self) -> Iterator[str]:
        return iter(self._driver.attributes)

    def __len__(self) -> int:
        return len(self._driver.attributes)

    def asdict(self) -> dict[str, Any]:
        return self._driver.attributes

    def __repr__(self) -> str:
        return repr(self._driver.attributes)
