"""Format-independent entry points: ``open`` sniffs the format, ``create`` picks a driver."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ._sync import sync
from .core.array import Array
from .errors import ShardStoreError
from .formats import bcolz, zarr3
from .formats import precomputed as _precomputed
from .formats.detect import detect_format
from .formats.n5 import nodes as _n5_nodes
from .store.base import Store
from .store.registry import store_from_url

__all__ = ["open", "create", "open_group"]

_CREATORS: dict[str, Callable[..., Any]] = {"zarr3": zarr3.create, "bcolz": bcolz.create}
_CREATORS["n5"] = _n5_nodes.create_node
_OPENERS: dict[str, Callable[..., Any]] = {"zarr3": zarr3.open, "bcolz": bcolz.open_node}
_OPENERS["n5"] = _n5_nodes.open_node
_CREATORS["precomputed"] = _precomputed.create
_OPENERS["precomputed"] = _precomputed.open


def open(
    url_or_store: str | os.PathLike[str] | Store,
    mode: str = "r",
    *,
    format: str | None = None,
    path: str | None = None,
    storage_options: dict[str, Any] | None = None,
    **create_kwargs: Any,
) -> Any:
    """Open an array or group, sniffing the format from its metadata.

    Modes: ``"r"`` read-only; ``"r+"`` read/write, must exist; ``"a"`` read/write (with
    creation arguments, create it when missing); ``"w"`` create, replacing what is there;
    ``"w-"`` create, failing if something exists. Creating takes the keyword arguments of
    the format's ``create`` (``format`` defaults to ``"zarr3"``).
    """
    store = store_from_url(url_or_store, mode=mode, storage_options=storage_options)
    path = (path or "").strip("/")
    if mode in ("w", "w-"):
        return _create(store, format or "zarr3", path, mode, create_kwargs)
    if mode not in ("r", "r+", "a"):
        raise ValueError(f"invalid mode {mode!r}; expected 'r', 'r+', 'a', 'w' or 'w-'")
    found = format or sync(detect_format(store, path))
    if found is None:
        if mode == "a" and create_kwargs:
            return _create(store, "zarr3", path, "w-", create_kwargs)
        raise ShardStoreError(
            f"no array or group found at {path or '/'!r} in {store!r} (looked for the metadata "
            "of Zarr v3, bcolz, N5, precomputed)"
        )
    if create_kwargs:
        raise TypeError(f"unexpected arguments for opening an existing node: {sorted(create_kwargs)}")
    return _OPENERS[found](store, mode=mode, path=path)


def _create(store: Store, format: str, path: str, mode: str, kwargs: dict[str, Any]) -> Array:
    try:
        creator = _CREATORS[format]
    except KeyError:
        raise ValueError(f"unknown format {format!r}; known: {sorted(_CREATORS)}") from None
    return creator(store, path=path, mode=mode, **kwargs)


def create(url_or_store: str | os.PathLike[str] | Store, *, format: str = "zarr3", mode: str = "w-", **kwargs: Any) -> Array:
    """Create an array in ``format`` (default Zarr v3); see ``shardstore.zarr3.create``."""
    return open(url_or_store, mode=mode, format=format, **kwargs)


def open_group(url_or_store: str | os.PathLike[str] | Store, mode: str = "r", **kwargs: Any) -> zarr3.Group:
    """Open a Zarr v3 group (``mode="a"`` creates it when missing)."""
    return zarr3.open_group(url_or_store, mode=mode, **kwargs)
