"""bcolz entry points: ``open`` (carray or ctable, sniffed) and the hooks ``shardstore.open`` uses."""

from __future__ import annotations

from typing import Any

from ..._sync import sync
from ...config import IOConfig, default_config
from ...errors import NodeNotFoundError
from ...store.base import Store
from ...store.registry import store_from_url
from .._entry import cleans_up
from .carray import CArray, RootDir, carray, open_carray, resolve_store
from .ctable import CTable, ctable, open_ctable
from .metadata import ROOTDIRS_KEY, SIZES_KEY

__all__ = ["open", "open_node", "create"]


def _key(path: str, key: str) -> str:
    return f"{path}/{key}" if path else key


@cleans_up
def open(rootdir: RootDir, mode: str = "a", *, path: str = "", storage_options: dict[str, Any] | None = None,
         config: IOConfig | None = None) -> CArray | CTable:
    """Open a bcolz carray or ctable: ``mode`` "r" (read-only), "a" (read/write) or "w"
    (open and empty it, as bcolz does). ``config`` (an ``IOConfig``) tunes it."""
    if mode not in ("r", "a", "w", "r+"):
        raise ValueError(f"bcolz open(): mode must be 'r', 'a' or 'w', got {mode!r}")
    if rootdir is None:
        raise ValueError("bcolz open() needs a rootdir")
    store_mode = "r" if mode == "r" else "a"
    config = default_config(config)
    store = (resolve_store(rootdir, store_mode, config) if storage_options is None
             else store_from_url(rootdir, mode=store_mode, storage_options=storage_options, config=config))
    return _open(store, path.strip("/"), "a" if mode == "r+" else mode, rootdir, config)


def _open(store: Store, path: str, mode: str, rootdir: RootDir, config: IOConfig | None = None) -> CArray | CTable:
    is_table, is_array = sync(_sniff(store, path))
    if is_table:
        return open_ctable(store, path, mode, rootdir, config=config)
    if is_array:
        return open_carray(store, path, mode, rootdir, config=config)
    raise NodeNotFoundError(f"no bcolz carray or ctable at {path or '/'!r} in {store!r} (no {SIZES_KEY} or {ROOTDIRS_KEY})")


async def _sniff(store: Store, path: str) -> tuple[bool, bool]:
    return await store.exists(_key(path, ROOTDIRS_KEY)), await store.exists(_key(path, SIZES_KEY))


def open_node(store: Store, mode: str = "r", path: str = "", config: IOConfig | None = None) -> CArray | CTable:
    """``shardstore.open`` hook: modes "r", "r+" and "a" (the data is kept)."""
    return _open(store, (path or "").strip("/"), "r" if mode == "r" else "a", store, config)


def reopen(store: Store, mode: str = "r", *, path: str | None = None, rootdir: RootDir = None) -> CArray | CTable:
    """What a pickled carray or ctable opens as: ``open_node``, keeping the rootdir (path or
    URL) it shows in its repr."""
    return _open(store, (path or "").strip("/"), "r" if mode == "r" else "a", rootdir if rootdir is not None else store)


def create(store: RootDir, *, path: str = "", mode: str = "w-", storage_options: dict[str, Any] | None = None, **kwargs: Any) -> CArray | CTable:
    """``shardstore.create`` hook: ``columns=`` makes a ctable, otherwise ``data=`` (or
    ``dtype=``) a carray; the other keywords are those of ``carray`` / ``ctable``."""
    if storage_options is not None:  # a URL with options (s3://...): resolve it here
        if store is None:
            raise ValueError("storage_options configure the store of a URL; give the URL as rootdir")
        store = store_from_url(store, mode="w", storage_options=storage_options, config=kwargs.get("config"))
    if "columns" in kwargs:
        return ctable(kwargs.pop("columns"), rootdir=store, mode=mode, path=path, **kwargs)
    return carray(kwargs.pop("data", None), rootdir=store, mode=mode, path=path, **kwargs)
