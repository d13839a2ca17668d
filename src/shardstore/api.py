"""Format-independent entry points: ``open`` sniffs the format, ``create`` picks a driver."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._sync import sync
from .config import IOConfig, default_config
from .core.array import Array
from .errors import InvalidModeError, NodeNotFoundError, UnsupportedFeatureError
from .formats import bcolz, zarr3
from .formats import precomputed as _precomputed
from .formats._entry import cleans_up, local_path
from .formats.detect import FORMAT_NAMES, detect_format
from .formats.n5 import nodes as _n5_nodes
from .formats.precomputed.kv import open_kv
from .store.base import Store
from .store.registry import store_from_url
from .store.wrappers import PrefixStore

__all__ = ["create", "open", "open_group"]

_CREATORS: dict[str, Callable[..., Any]] = {"zarr3": zarr3.create, "bcolz": bcolz.create}
_CREATORS["n5"] = _n5_nodes.create_node
_OPENERS: dict[str, Callable[..., Any]] = {"zarr3": zarr3.open, "bcolz": bcolz.open_node}
_OPENERS["n5"] = _n5_nodes.open_node
_CREATORS["precomputed"] = _precomputed.create
_OPENERS["precomputed"] = _precomputed.open


def _open_kv(store: Store, mode: str = "r", path: str = "", config: IOConfig | None = None) -> Any:
    return open_kv(PrefixStore(store, path) if path else store, mode=mode, config=config)


_OPENERS["precomputed_kv"] = _open_kv
#: how far up ``shardstore.open`` looks for the N5 container of a group without attributes.json
_MAX_N5_DEPTH = 16


@cleans_up
def open(
    url_or_store: str | os.PathLike[str] | Store,
    mode: str = "r",
    *,
    format: str | None = None,
    path: str | None = None,
    scale: int | str | None = None,
    storage_options: dict[str, Any] | None = None,
    config: IOConfig | None = None,
    **create_kwargs: Any,
) -> Any:
    """Open an array or group, sniffing the format from its metadata.

    Modes: ``"r"`` read-only; ``"r+"`` read/write, must exist; ``"a"`` read/write (with
    creation arguments, create it when missing); ``"w"`` create, replacing what is there;
    ``"w-"`` create, failing if something exists. Creating takes the keyword arguments of
    the format's ``create`` (``format`` defaults to ``"zarr3"``). ``scale`` (an index or a
    key) picks the scale of a Neuroglancer precomputed volume (default: the first). A
    directory holding a sharded uint64 key-value store (its ``info`` is the sharding spec)
    opens as that mapping (``shardstore.precomputed.open_kv``).

    ``config`` (a ``shardstore.IOConfig``) sets concurrency limits, thresholds and switches of
    the array and of the store built from a path or URL; without it, ``IOConfig.from_env()``.
    """
    config = default_config(config)
    store = store_from_url(url_or_store, mode=mode, storage_options=storage_options, config=config)
    path = (path or "").strip("/")
    if mode in ("w", "w-"):
        return _create(store, format or "zarr3", path, mode, {"config": config, **create_kwargs})
    if mode not in ("r", "r+", "a"):
        raise InvalidModeError(f"invalid mode {mode!r}; expected 'r', 'r+', 'a', 'w' or 'w-'")
    found = format or sync(detect_format(store, path))
    if found is None and not path and mode == "r":
        inside = _inside_local_n5(url_or_store)
        if inside is not None:  # an N5 group without attributes.json, opened by its own path
            return _n5_nodes.open(inside[0], mode, path=inside[1], config=config)
    if found is None:
        if mode == "a" and create_kwargs:
            return _create(store, "zarr3", path, "w-", {"config": config, **create_kwargs})
        looked = ("zarr.json (Zarr v3), attributes.json (N5), meta/sizes or __rootdirs__ (bcolz), "
                  "info (Neuroglancer precomputed)")
        where = f"{path!r} in {store!r}" if path else repr(store)
        raise NodeNotFoundError(f"nothing shardstore can open at {where}: looked for {looked}")
    if create_kwargs:
        raise TypeError(f"unexpected arguments for opening an existing node: {sorted(create_kwargs)}")
    if scale is not None:
        if found != "precomputed":
            raise UnsupportedFeatureError(
                f"scale={scale!r}: only Neuroglancer precomputed volumes have scales; "
                f"{path or '/'!r} in {store!r} is {FORMAT_NAMES.get(found, found)}")
        return _precomputed.open(store, mode, path=path, scale=scale, config=config)
    return _OPENERS[found](store, mode=mode, path=path, config=config)


def _inside_local_n5(url_or_store: Any) -> tuple[Path, str] | None:
    """(container, path) when ``url_or_store`` is a local directory inside an N5 container
    (an ancestor's ``attributes.json`` has the ``n5`` version): N5 needs no attributes.json
    in groups, so such a directory is a group."""
    local = local_path(url_or_store)
    if local is None or not local.is_dir():
        return None
    local = local.resolve()
    for parent in list(local.parents)[:_MAX_N5_DEPTH]:
        if (parent / "attributes.json").is_file():
            try:
                doc = json.loads((parent / "attributes.json").read_text())
            except (OSError, ValueError):
                return None
            return (parent, local.relative_to(parent).as_posix()) if isinstance(doc, dict) and "n5" in doc else None
    return None


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
    store = url_or_store if isinstance(url_or_store, (str, Store)) else os.fspath(url_or_store)
    return zarr3.open_group(store, mode=mode, **kwargs)
