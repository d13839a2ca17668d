"""Open a Store from a URL or a path: a table of URL schemes to store factories.

Factories import their backend lazily, so a backend's optional dependencies are only needed
when its scheme is used. A new backend registers itself with ``register_scheme``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from ..config import IOConfig
from ..errors import UnsupportedFeatureError
from .base import Store

__all__ = ["store_from_url", "register_scheme", "reopen_store", "MODES"]

#: the open modes every layer understands; only "r" opens a store read-only
MODES = ("r", "r+", "a", "w", "w-")

#: factory(url, read_only, storage_options) -> Store
StoreFactory = Callable[[str, bool, Mapping[str, Any]], Store]

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def _file_factory(url: str, read_only: bool, options: Mapping[str, Any]) -> Store:
    from .local import LocalStore

    path = url
    if _SCHEME_RE.match(url):
        from urllib.parse import unquote  # (here: 0.3 MiB of modules most processes never need)

        path = unquote(url[len("file://") :])
        if path.startswith("localhost/"):
            path = path[len("localhost") :]
    unknown = set(options) - {"create"}
    if unknown:
        raise ValueError(f"unknown storage options for a local store: {sorted(unknown)} (known: ['create'])")
    return LocalStore(os.path.expanduser(path), read_only=read_only, **options)  # "~/data" works


def _memory_factory(url: str, read_only: bool, options: Mapping[str, Any]) -> Store:
    from .memory import MemoryStore

    if options:
        raise ValueError(f"a memory store takes no storage options, got {sorted(options)}")
    return MemoryStore(read_only=read_only)


def _gs_factory(url: str, read_only: bool, options: Mapping[str, Any]) -> Store:
    bucket_path = url.split("://", 1)[1]
    raise UnsupportedFeatureError(
        f"cannot open {url!r}: there is no gs:// (Google Cloud Storage) store. What works: a public "
        f"bucket reads over HTTP as 'https://storage.googleapis.com/{bucket_path}'; s3:// works with "
        "S3-compatible servers (AWS, MinIO, SeaweedFS); GCS's own S3-compatible endpoint is untested"
    )


def _http_factory(url: str, read_only: bool, options: Mapping[str, Any]) -> Store:
    from .http import HTTPStore

    if not read_only:
        raise UnsupportedFeatureError(f"cannot open {url!r} for writing: HTTP stores are read-only (use s3:// to write)")
    known = {"timeout", "connect_timeout", "max_retries", "retry_timeout", "max_concurrency", "headers",
             "client_options", "cache_bytes", "body_retries"}
    unknown = set(options) - known
    if unknown:
        raise ValueError(f"unknown storage options for an HTTP store: {sorted(unknown)} (known: {sorted(known)})")
    return HTTPStore(url, **options)


def _s3_factory(url: str, read_only: bool, options: Mapping[str, Any]) -> Store:
    from .s3 import s3_store_from_url

    return s3_store_from_url(url, read_only, options)


_FACTORIES: dict[str, StoreFactory] = {
    "file": _file_factory,
    "memory": _memory_factory,
    "s3": _s3_factory,
    "http": _http_factory,
    "https": _http_factory,
    "gs": _gs_factory,
}


def register_scheme(scheme: str, factory: StoreFactory) -> None:
    """Make ``scheme://`` URLs open through ``factory(url, read_only, storage_options)``."""
    _FACTORIES[scheme.lower()] = factory


def store_from_url(
    url_or_path: str | os.PathLike[str] | Store,
    *,
    mode: str = "r",
    storage_options: Mapping[str, Any] | None = None,
    config: IOConfig | None = None,
) -> Store:
    """The Store for a path, a URL or a Store.

    - a Store instance is returned unchanged;
    - a plain path, a ``pathlib.Path`` or a ``file://`` URL gives a ``LocalStore``;
    - ``memory://`` gives a new, empty ``MemoryStore``;
    - ``http://`` / ``https://`` give a read-only ``HTTPStore`` (options: ``timeout``,
      ``connect_timeout``, ``max_retries``, ``retry_timeout``, ``max_concurrency``, ``headers``,
      ``cache_bytes``);
    - ``s3://bucket/prefix`` gives an ``S3Store`` (options: ``endpoint``, ``region``,
      ``credentials`` or ``access_key_id`` / ``secret_access_key`` / ``session_token``,
      ``anonymous``, ``retry_conflicts``, ... see ``S3Store``; the standard ``AWS_*``
      environment variables fill what is not given).

    Remote schemes need the ``obstore`` package (``pip install 'shardstore[remote]'``).

    ``config`` (an ``IOConfig``) sets the store-level fields (``max_concurrency``,
    ``retry_conflicts``, thresholds) of a store built here (``Store.use_config``); a Store
    passed in keeps its own settings, and ``storage_options`` given explicitly win.

    ``mode="r"`` opens the store read-only; the other modes (``"r+"``, ``"a"``, ``"w"``,
    ``"w-"``) open it writable (a local root directory is created when missing). What a mode
    means for the data (overwrite, refuse existing) is decided by the layers above.
    """
    if isinstance(url_or_path, Store):
        return url_or_path
    store = _build_store(url_or_path, mode, dict(storage_options or {}))
    if config is not None:
        explicit = {name for name in ("max_concurrency", "retry_conflicts") if name in (storage_options or {})}
        store.use_config(config.replace(**dict.fromkeys(explicit)))
    return store


def _build_store(url_or_path: str | os.PathLike[str], mode: str, options: dict[str, Any]) -> Store:
    if mode not in MODES:
        raise ValueError(f"invalid mode {mode!r}; expected one of {list(MODES)}")
    read_only = mode == "r"
    if isinstance(url_or_path, os.PathLike):
        return _file_factory(os.fspath(url_or_path), read_only, options)
    if not isinstance(url_or_path, str):
        raise TypeError(f"expected a path, a URL or a Store, got {type(url_or_path).__name__}: {url_or_path!r}")
    match = _SCHEME_RE.match(url_or_path)
    if match is None:
        return _file_factory(url_or_path, read_only, options)
    scheme = match.group(1).lower()
    factory = _FACTORIES.get(scheme)
    if factory is None:
        known = ", ".join(f"{s}://" for s in sorted(_FACTORIES))
        raise UnsupportedFeatureError(f"cannot open {url_or_path!r}: unknown URL scheme {scheme!r} (known: {known})")
    store = factory(url_or_path, read_only, options)
    store.reopen_spec = (url_or_path, read_only, options)
    return store


def reopen_store(url: str, read_only: bool, storage_options: Mapping[str, Any]) -> Store:
    """What a pickled store (``Store.reopen_spec``) becomes again: ``store_from_url`` with
    the same URL, options and writability."""
    return store_from_url(url, mode="r" if read_only else "r+", storage_options=storage_options)
