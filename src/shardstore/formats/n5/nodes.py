"""N5 containers, groups and datasets: ``create``, ``open``, ``open_group``, ``create_group``.

Every directory is a group; a dataset is a group whose ``attributes.json`` holds the dataset
keys. Creating anything writes the ``n5`` version into the container root's
``attributes.json`` (the store root) when it is missing, as n5-java does.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..._sync import sync_on
from ...codecs.n5_block import compression_defaults_n5, compression_from_n5
from ...config import IOConfig, default_config
from ...core.array import Array, AsyncArray
from ...core.group import GroupBase
from ...errors import (
    ChunkNotFoundError,
    CodecError,
    ContainsNodeError,
    InvalidKeyError,
    MetadataError,
    NodeNotFoundError,
    NodeTypeError,
)
from ...store.base import Store
from ...store.registry import store_from_url
from .._entry import CREATE_MODES, OPEN_MODES, check_mode, cleans_up
from .driver import N5Driver, native
from .metadata import (
    N5_VERSION,
    VERSION_KEY,
    DatasetMetadata,
    GroupMetadata,
    attributes_key,
    dtype_name,
    encode_json,
    parse_document,
    parse_json,
)

__all__ = ["DEFAULT_COMPRESSION", "Group", "N5Array", "create", "create_group", "open", "open_group"]

DEFAULT_COMPRESSION: dict[str, Any] = {"type": "gzip", "level": 1}

StoreLike = str | os.PathLike[str] | Store


class N5Array(Array):
    """An N5 dataset in NumPy C order (shape = N5 ``dimensions`` reversed), plus access to
    variable-length (mode 1) blocks."""

    @property
    def _n5_driver(self) -> N5Driver:
        driver = self.driver
        if not isinstance(driver, N5Driver):  # an N5Array is made around one (see _array)
            raise TypeError(f"{self!r} is not backed by an N5 driver")
        return driver

    def _block(self, coords: Any) -> tuple[tuple[int, ...], str]:
        coords = tuple(int(c) for c in coords)
        layout = self.driver.layout
        if len(coords) != self.ndim:
            raise IndexError(f"block coords {list(coords)} need {self.ndim} entries")
        layout.grid._check_coords(coords)
        return coords, layout.chunk_key(coords)

    def read_varlength_block(self, coords: Any, *, max_nbytes: int | None = None) -> np.ndarray:
        """The elements of block ``coords`` (C-order grid indices) as a 1-D array, x fastest.

        Reads mode 1 (varlength) blocks with any number of elements, and mode 0 blocks. A
        missing block raises ``ChunkNotFoundError``; a block declaring more than
        ``max_nbytes`` bytes (default: ``IOConfig.max_varlength_nbytes`` of the array's config)
        is refused before decompression.
        """
        coords, key = self._block(coords)
        if max_nbytes is None:
            max_nbytes = self.config.max_varlength_nbytes
        raw = self.read_chunk_bytes(coords)
        if raw is None:
            raise ChunkNotFoundError(f"N5 block {key!r} is missing")
        driver = self._n5_driver
        try:
            return driver.block_codec.decode_varlength(raw, driver.layout.spec_for(coords), max_nbytes)
        except CodecError as e:
            raise type(e)(f"N5 block {key!r}: {e}") from e

    def write_varlength_block(self, coords: Any, data: Any) -> None:
        """Store ``data`` (flattened, cast to the dataset's dtype) as the varlength block
        ``coords``; its header size is the block's in-bounds shape."""
        coords, _ = self._block(coords)
        driver = self._n5_driver
        values = np.asarray(data, dtype=self.dtype).reshape(-1)
        encoded = driver.block_codec.encode_varlength(values, driver.layout.spec_for(coords))
        self.write_chunk_bytes(coords, encoded)


# -- helpers ---------------------------------------------------------------------------------
def _resolve(
    store_like: StoreLike, path: str | None, mode: str, storage_options: dict[str, Any] | None = None,
    config: IOConfig | None = None,
) -> tuple[Store, str]:
    path = (path or "").strip("/")
    if path and any(p in ("", ".", "..") for p in path.split("/")):
        raise InvalidKeyError(f"invalid N5 path {path!r}: empty, '.' and '..' parts would leave the container")
    return store_from_url(store_like, mode=mode, storage_options=storage_options, config=config), path


async def _read_doc(store: Store, path: str) -> dict[str, Any] | None:
    key = attributes_key(path)
    raw = await store.get(key)
    return None if raw is None else parse_json(raw, key)


async def _has_children(store: Store, path: str) -> bool:
    async for _ in store.list_prefix(f"{path}/" if path else ""):
        return True
    return False


async def _ensure_root_version(store: Store) -> None:
    """Write ``"n5": "4.0.0"`` into the root ``attributes.json`` unless a version is there."""
    doc = await _read_doc(store, "")
    if doc is None or VERSION_KEY not in doc:
        await store.set(attributes_key(""), encode_json({VERSION_KEY: N5_VERSION, **(doc or {})}))


def _auto_block(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """About 1 MiB per block, the same edge on every axis, never larger than the array."""
    edge = max(1, round((2**20 / itemsize) ** (1 / len(shape))))
    return tuple(max(1, min(s, edge)) for s in shape)


def _wrap(store: Store, path: str, meta: DatasetMetadata | GroupMetadata, read_only: bool,
          config: IOConfig | None = None) -> N5Array | Group:
    if isinstance(meta, GroupMetadata):
        return Group(store, path, meta, read_only, config)
    return N5Array(AsyncArray(N5Driver(store, path, meta), read_only=read_only, name=path or repr(store),
                              config=config))


def _mode_and_path(what: str, second: str | None, mode: str | None, path: str | None) -> tuple[str, str]:
    """The calling convention is ``open(container, mode="r", *, path=...)``; the older
    ``open(container, "dataset/path", mode=...)`` still works (with a DeprecationWarning) when
    the second argument is not a mode, so ``open(container, "r")`` always means mode "r"."""
    if second is not None and second in OPEN_MODES and mode is None:
        mode = second
    elif second is not None:
        if path is not None:
            raise TypeError(f"{what}: give the dataset path once, as path=")
        warnings.warn(f"{what[:-2]}(container, {second!r}): pass the path as path={second!r} (the second positional "
                      "argument is the mode)", DeprecationWarning, stacklevel=4)
        path = second
    return check_mode(mode or "r", OPEN_MODES, what), path or ""


# -- datasets --------------------------------------------------------------------------------
@cleans_up
def create(
    container: StoreLike,
    path: str = "",
    *,
    shape: Sequence[int],
    dtype: Any,
    block_size: Sequence[int] | None = None,
    compression: dict[str, Any] | str | None = None,
    mode: str = "w-",
    attributes: dict[str, Any] | None = None,
    storage_options: dict[str, Any] | None = None,
    config: IOConfig | None = None,
) -> N5Array:
    """Create an N5 dataset at ``path`` in ``container`` and return it for writing.

    ``shape`` and ``block_size`` are in NumPy C order (written reversed as N5 ``dimensions`` /
    ``blockSize``). ``compression`` is an N5 compression object (default gzip level 1), e.g.
    ``{"type": "zstd", "level": 3}``, ``{"type": "blosc", "cname": "lz4", "clevel": 5,
    "shuffle": 1}``, ``{"type": "raw"}``; defaults of the type are filled in. ``mode="w-"``
    refuses to replace an existing node, ``"w"`` deletes what is under ``path``.
    ``storage_options`` configure a URL's store (``s3://``: endpoint, credentials, ...);
    ``config`` (an ``IOConfig``) tunes the dataset and that store.
    """
    check_mode(mode, CREATE_MODES, "n5.create()")
    config = default_config(config)
    base, path = _resolve(container, path, "w", storage_options, config)
    shape_t = tuple(int(s) for s in shape)
    np_dtype = native(dtype)
    dtype_name(np_dtype)
    if not shape_t:
        raise MetadataError("N5 datasets need at least one dimension")
    blocks = tuple(int(b) for b in block_size) if block_size is not None else _auto_block(shape_t, np_dtype.itemsize)
    if len(blocks) != len(shape_t):
        raise MetadataError(f"block_size {list(blocks)} must have the rank of shape {list(shape_t)}")
    given = {"type": compression} if isinstance(compression, str) else dict(compression or DEFAULT_COMPRESSION)
    # the type's complete JSON (every member, defaults filled) with the user's members
    full = {**compression_defaults_n5(compression_from_n5(given, attributes_key(path))), **given}
    user = dict(attributes or {})
    doc: dict[str, Any] = {**user, "dimensions": list(shape_t[::-1]), "blockSize": list(blocks[::-1]),
                           "dataType": dtype_name(np_dtype), "compression": full}
    if not path:
        doc = {VERSION_KEY: N5_VERSION, **doc}
    meta = parse_document(encode_json(doc), attributes_key(path))  # what we write is what we read
    if not isinstance(meta, DatasetMetadata) or meta.attributes != user:
        raise MetadataError(f"{attributes_key(path)}: attributes must not use the N5 metadata keys")
    driver = N5Driver(base, path, meta)

    async def write() -> None:
        if mode == "w-":
            old = await _read_doc(base, path)
            if old is not None and set(old) - {VERSION_KEY}:
                raise ContainsNodeError(
                    f"an N5 node already exists at {attributes_key(path)!r} in {base!r} (use mode='w' to replace it)"
                )
        else:
            if path:
                await base.delete_prefix(f"{path}/")
            else:
                await base.delete_prefix("")
        await driver.save()
        if path:
            await _ensure_root_version(base)

    sync_on(base, write())
    return N5Array(AsyncArray(driver, read_only=False, name=path or str(container), config=config))


@cleans_up
def open(
    container: StoreLike,
    mode_or_path: str | None = None,
    mode: str | None = None,
    *,
    path: str | None = None,
    storage_options: dict[str, Any] | None = None,
    config: IOConfig | None = None,
) -> N5Array | Group:
    """Open an existing N5 dataset (or group) at ``path`` in ``container``: ``open(container,
    mode="r", *, path="")`` (``mode``: "r", "r+", "a"); ``config`` (an ``IOConfig``) tunes it."""
    mode, path = _mode_and_path("n5.open()", mode_or_path, mode, path)
    config = default_config(config)
    base, path = _resolve(container, path, mode, storage_options, config)
    return open_node(base, mode=mode, path=path, config=config)


def open_node(store: Store, mode: str = "r", path: str = "", config: IOConfig | None = None) -> N5Array | Group:
    """The dataset or group at ``path`` in ``store`` (the signature ``shardstore.open`` uses)."""
    meta = sync_on(store, _read_group(store, path))
    if meta is None:
        raise NodeNotFoundError(f"no N5 dataset or group at {path or '/'!r} in {store!r} "
                                f"(no {attributes_key(path)!r} and no sub-directories)")
    return _wrap(store, path, meta, read_only=mode == "r", config=config)


def create_node(store: Store, *, path: str = "", mode: str = "w-", **kwargs: Any) -> N5Array:
    """``create`` with the signature ``shardstore.create(format="n5")`` uses."""
    return create(store, path, mode=mode, **kwargs)


# -- groups ----------------------------------------------------------------------------------
@cleans_up
def open_group(
    container: StoreLike,
    mode_or_path: str | None = None,
    mode: str | None = None,
    *,
    path: str | None = None,
    storage_options: dict[str, Any] | None = None,
    config: IOConfig | None = None,
) -> Group:
    """Open the group at ``path`` (default: the container root): ``open_group(container,
    mode="r", *, path="")``; mode "a" creates it if missing. Its datasets open with ``config``."""
    mode, path = _mode_and_path("n5.open_group()", mode_or_path, mode, path)
    config = default_config(config)
    base, path = _resolve(container, path, mode, storage_options, config)
    node = sync_on(base, _read_group(base, path))
    if node is None:
        if mode == "a":
            return create_group(base, path, mode="w-", config=config)
        raise NodeNotFoundError(f"no N5 group at {path or '/'!r} in {base!r} (no {attributes_key(path)!r} "
                                "and no sub-directories)")
    if isinstance(node, DatasetMetadata):
        raise NodeTypeError(f"expected an N5 group at {attributes_key(path)!r} in {base!r}, found a dataset "
                            "(open it with n5.open or shardstore.open)")
    return Group(base, path, node, read_only=mode == "r", config=config)


async def _read_group(store: Store, path: str) -> DatasetMetadata | GroupMetadata | None:
    key = attributes_key(path)
    raw = await store.get(key)
    if raw is not None:
        return parse_document(raw, key)
    return GroupMetadata() if await _has_children(store, path) else None


@cleans_up
def create_group(
    container: StoreLike, path: str = "", *, attributes: dict[str, Any] | None = None, mode: str = "w-",
    storage_options: dict[str, Any] | None = None, config: IOConfig | None = None,
) -> Group:
    """Create a group (an ``attributes.json`` with the user ``attributes``). ``"w-"`` refuses
    an existing node with attributes; ``"w"`` replaces the group, children included."""
    check_mode(mode, CREATE_MODES, "n5.create_group()")
    config = default_config(config)
    base, path = _resolve(container, path, "w", storage_options, config)
    meta = GroupMetadata(attributes=dict(attributes or {}))
    if not path:
        meta.hidden = {VERSION_KEY: N5_VERSION}

    async def write() -> None:
        old = await _read_doc(base, path)
        if old is not None:
            node = parse_document(old, attributes_key(path))
            if mode == "w-" and (isinstance(node, DatasetMetadata) or node.attributes):
                raise ContainsNodeError(f"an N5 node already exists at {attributes_key(path)!r} in {base!r}")
            if isinstance(node, GroupMetadata):
                meta.hidden = {**node.hidden, **meta.hidden}
        if mode == "w":  # a new group: the old one's children must not show through
            await base.delete_prefix(f"{path}/" if path else "")
        await base.set(attributes_key(path), encode_json(meta.to_dict()))
        if path:
            await _ensure_root_version(base)

    sync_on(base, write())
    return Group(base, path, meta, read_only=False, config=config)


class _GroupDriver:
    """Attribute persistence for groups (the ``Attributes`` mapping talks to this)."""

    def __init__(self, store: Store, path: str, meta: GroupMetadata) -> None:
        self.store, self.path, self.meta = store, path, meta

    @property
    def attributes(self) -> dict[str, Any]:
        return dict(self.meta.attributes)

    async def set_attributes(self, attributes: dict[str, Any]) -> None:
        if VERSION_KEY in attributes:
            raise MetadataError(f"{attributes_key(self.path)}: 'n5' is the format version, not a user attribute")
        self.meta.attributes = dict(attributes)
        await self.store.set(attributes_key(self.path), encode_json(self.meta.to_dict()))


class Group(GroupBase):
    """An N5 group: attributes plus children (sub-directories: datasets and groups)."""

    format_name = "n5"

    def __init__(self, store: Store, path: str, meta: GroupMetadata, read_only: bool,
                 config: IOConfig | None = None) -> None:
        super().__init__(store, path, _GroupDriver(store, path, meta), read_only, config)

    def __repr__(self) -> str:
        return f"<shardstore.n5.Group {self.path or '/'} in {self.store!r}>"

    def keys(self) -> list[str]:
        """Names of the sub-directories (every directory is an N5 group or dataset), sorted."""
        _, dirs = sync_on(self.store, self.store.list_dir(self.path))
        return dirs

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and sync_on(self.store, _read_group(self.store, self._child(name))) is not None

    def __getitem__(self, name: str) -> N5Array | Group:
        path = self._child(name)
        node = sync_on(self.store, _read_group(self.store, path))
        if node is None:
            raise KeyError(f"no child {name!r} in {self!r}")
        return _wrap(self.store, path, node, self.read_only, self.config)

    def arrays(self) -> list[tuple[str, N5Array]]:
        return [(k, v) for k in self.keys() if isinstance(v := self[k], N5Array)]

    def groups(self) -> list[tuple[str, Group]]:
        return [(k, v) for k in self.keys() if isinstance(v := self[k], Group)]

    def create_group(self, name: str, *, attributes: dict[str, Any] | None = None, mode: str = "w-") -> Group:
        return create_group(self.store, self._child(name), attributes=attributes, mode=mode, config=self.config)

    def require_group(self, name: str) -> Group:
        """The child group ``name``, created when missing."""
        return open_group(self.store, "a", path=self._child(name), config=self.config)

    def create_dataset(self, name: str, **kwargs: Any) -> N5Array:
        """``shardstore.n5.create`` at ``name`` below this group."""
        return create(self.store, self._child(name), **{"config": self.config, **kwargs})

    def tree(self) -> str:
        """A text outline of the hierarchy below this group."""
        lines: list[str] = [self.path or "/"]

        def walk(group: Group, indent: str) -> None:
            for name in group:
                child = group[name]
                if isinstance(child, Group):
                    lines.append(f"{indent}{name}/")
                    walk(child, indent + "  ")
                else:
                    lines.append(f"{indent}{name} {child.shape} {child.dtype}")

        walk(self, "  ")
        return "\n".join(lines)
