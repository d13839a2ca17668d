"""Zarr v3 arrays and groups: ``create``, ``open``, ``open_group``, ``create_group``."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..._sync import sync_on
from ...codecs.base import ChunkSpec
from ...codecs.pipeline import CodecPipeline
from ...codecs.registry import codec_from_config
from ...config import IOConfig, default_config
from ...core.array import Array, AsyncArray
from ...core.group import GroupBase
from ...errors import ContainsNodeError, MetadataError, NodeNotFoundError, NodeTypeError
from ...store.base import Store
from ...store.registry import store_from_url
from .._entry import CREATE_MODES, OPEN_MODES, check_mode, cleans_up
from .driver import Zarr3Driver, metadata_key
from .metadata import (
    ArrayMetadata,
    GroupMetadata,
    dtype_name,
    encode_json,
    parse_document,
    parse_dtype,
    parse_fill_value,
)

__all__ = ["create", "open", "open_group", "create_group", "Group", "DEFAULT_CODECS"]

#: inner codecs when ``codecs`` is not given: zstd level 3 is fast to decode and compresses
#: EM and segmentation data well (also what tensorstore users commonly pick). The zstd content
#: checksum (xxhash64 of the decoded chunk, 4 bytes a chunk) makes every chunk self-checking,
#: so damage anywhere in a chunk is a ChecksumError rather than wrong data, and ``verify``'s
#: OK means intact. It is chosen over a ``crc32c`` codec after the compressor because zstd
#: computes it inside its own (de)compression loop: no extra pass, no copy to append or strip
#: 4 bytes; tensorstore, zarr-python (numcodecs) and zstd itself read and check it.
DEFAULT_CODECS: list[dict[str, Any]] = [
    {"name": "bytes", "configuration": {"endian": "little"}},
    {"name": "zstd", "configuration": {"level": 3, "checksum": True}},
]
DEFAULT_INDEX_CODECS: list[dict[str, Any]] = [
    {"name": "bytes", "configuration": {"endian": "little"}},
    {"name": "crc32c"},
]

StoreLike = str | os.PathLike[str] | Store


def _resolve(
    store_like: StoreLike, path: str | None, mode: str, storage_options: dict[str, Any] | None = None,
    config: IOConfig | None = None,
) -> tuple[Store, str]:
    store = store_from_url(store_like, mode=mode, storage_options=storage_options, config=config)
    return store, (path or "").strip("/")


def _auto_chunks(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """About 1 MiB per chunk, the same edge on every axis, never larger than the array."""
    if not shape:
        return ()
    edge = max(1, int(round((2**20 / itemsize) ** (1 / len(shape)))))
    return tuple(max(1, min(s, edge)) for s in shape)


def _fill_scalar(fill_value: Any, dtype: np.dtype) -> Any:
    if isinstance(fill_value, (str, list)) or fill_value is None:
        return parse_fill_value(fill_value, dtype, "fill_value argument")
    return np.asarray(fill_value, dtype=dtype)[()]


def _with_bytes_codec(codecs: Sequence[Any]) -> list[Any]:
    """Let users list only compressors: add the ``bytes`` codec when no array->bytes codec is given."""
    codecs = list(codecs)
    kinds = [codec_from_config(c).kind for c in codecs]
    if "array_bytes" in kinds:
        return codecs
    n_aa = kinds.count("array_array")
    return codecs[:n_aa] + [{"name": "bytes", "configuration": {"endian": "little"}}] + codecs[n_aa:]


async def _exists(store: Store, path: str) -> bool:
    return await store.exists(metadata_key(path))


@cleans_up
def create(
    store: StoreLike,
    *,
    shape: Sequence[int],
    dtype: Any,
    chunks: Sequence[int] | None = None,
    shards: Sequence[int] | None = None,
    codecs: Sequence[Any] | None = None,
    fill_value: Any = 0,
    dimension_names: Sequence[str | None] | None = None,
    attributes: dict[str, Any] | None = None,
    index_location: str = "end",
    index_codecs: Sequence[Any] | None = None,
    chunk_key_encoding: dict[str, Any] | None = None,
    mode: str = "w-",
    path: str | None = None,
    storage_options: dict[str, Any] | None = None,
    config: IOConfig | None = None,
) -> Array:
    """Create a Zarr v3 array and return it open for writing.

    ``chunks`` is the read chunk (the inner chunk when ``shards`` is given); ``shards`` must be
    a multiple of it. ``codecs`` is the inner codec list in Zarr JSON form (default:
    ``bytes`` little-endian + ``zstd`` level 3); a list of compressors alone gets ``bytes``
    added. ``mode="w-"`` refuses to replace an existing node, ``"w"`` deletes what is there.
    ``config`` (an ``IOConfig``) tunes the array and the store built from a path or URL.
    """
    check_mode(mode, CREATE_MODES, "zarr3.create()")
    config = default_config(config)
    base, path = _resolve(store, path, "w", storage_options, config)
    shape = tuple(int(s) for s in shape)
    np_dtype = np.dtype(dtype)
    parse_dtype(dtype_name(np_dtype))
    np_dtype = np_dtype.newbyteorder("=") if np_dtype.byteorder not in "=|" else np_dtype
    chunks = tuple(int(c) for c in chunks) if chunks is not None else _auto_chunks(shape, np_dtype.itemsize)
    inner = _with_bytes_codec(codecs if codecs is not None else DEFAULT_CODECS)
    if shards is not None:
        shards = tuple(int(s) for s in shards)
        if len(shards) != len(shape) or any(s % c for s, c in zip(shards, chunks)):
            raise MetadataError(f"shards {list(shards)} must have the array's rank and be multiples of chunks {list(chunks)}")
        top_codecs: list[Any] = [{
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": list(chunks),
                "codecs": inner,
                "index_codecs": list(index_codecs) if index_codecs is not None else DEFAULT_INDEX_CODECS,
                "index_location": index_location,
            },
        }]
        grid_shape = shards
    else:
        top_codecs, grid_shape = inner, chunks
    cke = chunk_key_encoding or {"name": "default", "configuration": {"separator": "/"}}
    fill = _fill_scalar(fill_value, np_dtype)
    pipeline = CodecPipeline.from_config(top_codecs)
    try:
        # write complete codec objects (e.g. zstd without "level", blosc without "typesize"
        # are legal to pass here but tensorstore refuses to open them)
        top_codecs = pipeline.bind(ChunkSpec(grid_shape, np_dtype, fill)).canonical_config()
    except MetadataError as e:
        raise MetadataError(f"{metadata_key(path)}: {e}") from e
    meta: ArrayMetadata | GroupMetadata = ArrayMetadata(
        shape=shape,
        dtype=np_dtype,
        chunk_shape=grid_shape,
        key_encoding=cke.get("name", "default"),
        separator=cke.get("configuration", {}).get("separator", "/" if cke.get("name", "default") == "default" else "."),
        fill_value=fill,
        codecs=CodecPipeline.from_config(top_codecs),
        attributes=dict(attributes or {}),
        dimension_names=tuple(dimension_names) if dimension_names is not None else None,
    )
    doc = meta.to_dict()
    doc["chunk_key_encoding"] = cke
    meta = parse_document(encode_json(doc), metadata_key(path))  # what we write is what we read
    assert isinstance(meta, ArrayMetadata)
    driver = Zarr3Driver(base, path, meta)  # validates codecs against the chunk spec

    async def write() -> None:
        if mode == "w-" and await _exists(base, path):
            raise ContainsNodeError(f"a Zarr node already exists at {metadata_key(path)!r} in {base!r} (use mode='w' to replace it)")
        if mode == "w":
            await base.delete_prefix(f"{path}/" if path else "")
        await driver.save()

    sync_on(base, write())
    return Array(AsyncArray(driver, read_only=False, name=path or str(store), config=config))


async def _read_node(store: Store, path: str) -> ArrayMetadata | GroupMetadata | None:
    key = metadata_key(path)
    raw = await store.get(key)
    return None if raw is None else parse_document(raw, key)


@cleans_up
def open(
    store: StoreLike, mode: str = "r", *, path: str | None = None, storage_options: dict[str, Any] | None = None,
    config: IOConfig | None = None,
) -> Array | Group:
    """Open an existing Zarr v3 array or group (``mode``: "r", "r+" or "a"); ``config`` (an
    ``IOConfig``) tunes it."""
    check_mode(mode, OPEN_MODES, "zarr3.open()")
    config = default_config(config)
    base, path = _resolve(store, path, mode, storage_options, config)
    node = sync_on(base, _read_node(base, path))
    if node is None:
        raise NodeNotFoundError(f"no Zarr v3 array or group at {path or '/'!r} in {base!r} (no {metadata_key(path)!r})")
    return _wrap(base, path, node, read_only=mode == "r", config=config)


def _wrap(store: Store, path: str, node: ArrayMetadata | GroupMetadata, read_only: bool,
          config: IOConfig | None = None) -> Array | Group:
    if isinstance(node, GroupMetadata):
        return Group(store, path, node, read_only, config)
    return Array(AsyncArray(Zarr3Driver(store, path, node), read_only=read_only, name=path or repr(store),
                            config=config))


@cleans_up
def open_group(
    store: StoreLike, mode: str = "r", *, path: str | None = None, storage_options: dict[str, Any] | None = None,
    config: IOConfig | None = None,
) -> Group:
    """Open a group; with mode "a" create it if it does not exist. Its arrays open with
    ``config`` (an ``IOConfig``)."""
    check_mode(mode, OPEN_MODES, "zarr3.open_group()")
    config = default_config(config)
    base, path = _resolve(store, path, mode, storage_options, config)
    node = sync_on(base, _read_node(base, path))
    if node is None and mode == "a":
        return create_group(base, path=path, mode="w-", config=config)
    if node is None:
        raise NodeNotFoundError(f"no Zarr v3 group at {path or '/'!r} in {base!r} (no {metadata_key(path)!r})")
    if not isinstance(node, GroupMetadata):
        raise NodeTypeError(f"expected a Zarr v3 group at {metadata_key(path)!r} in {base!r}, found an array "
                            "(open it with shardstore.open or zarr3.open)")
    return Group(base, path, node, read_only=mode == "r", config=config)


@cleans_up
def create_group(
    store: StoreLike,
    *,
    attributes: dict[str, Any] | None = None,
    mode: str = "w-",
    path: str | None = None,
    storage_options: dict[str, Any] | None = None,
    config: IOConfig | None = None,
) -> Group:
    """Create a group (``zarr.json`` with ``node_type: group``). ``mode="w-"`` refuses an
    existing node; ``"w"`` replaces what is there, children included."""
    check_mode(mode, CREATE_MODES, "zarr3.create_group()")
    config = default_config(config)
    base, path = _resolve(store, path, "w", storage_options, config)
    meta = GroupMetadata(attributes=dict(attributes or {}))

    async def write() -> None:
        if mode == "w-" and await _exists(base, path):
            raise ContainsNodeError(f"a Zarr node already exists at {metadata_key(path)!r} in {base!r} "
                                    "(use mode='w' to replace it)")
        if mode == "w":  # a new group: the old one's children must not show through
            await base.delete_prefix(f"{path}/" if path else "")
        await base.set(metadata_key(path), encode_json(meta.to_dict()))

    sync_on(base, write())
    return Group(base, path, meta, read_only=False, config=config)


class _GroupDriver:
    """Attribute persistence for groups (the Attributes mapping talks to this)."""

    def __init__(self, store: Store, path: str, meta: GroupMetadata) -> None:
        self.store, self.path, self.meta = store, path, meta

    @property
    def attributes(self) -> dict[str, Any]:
        return dict(self.meta.attributes)

    async def set_attributes(self, attributes: dict[str, Any]) -> None:
        self.meta.attributes = dict(attributes)
        await self.store.set(metadata_key(self.path), encode_json(self.meta.to_dict()))


class Group(GroupBase):
    """A Zarr v3 group: attributes plus named children (arrays and groups)."""

    format_name = "zarr3"

    def __init__(self, store: Store, path: str, meta: GroupMetadata, read_only: bool,
                 config: IOConfig | None = None) -> None:
        super().__init__(store, path, _GroupDriver(store, path, meta), read_only, config)

    def __repr__(self) -> str:
        return f"<shardstore.Group zarr3 {self.path or '/'} in {self.store!r}>"

    def keys(self) -> list[str]:
        """Names of the children that have a ``zarr.json``, sorted."""

        async def children() -> list[str]:
            _, dirs = await self.store.list_dir(self.path)
            found = await self.store.get_many([(metadata_key(self._child(d)), None) for d in dirs])
            return [d for d, raw in zip(dirs, found) if raw is not None]

        return sync_on(self.store, children())

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and sync_on(self.store, self.store.exists(metadata_key(self._child(name))))

    def __getitem__(self, name: str) -> Array | Group:
        path = self._child(name)
        node = sync_on(self.store, _read_node(self.store, path))
        if node is None:
            raise KeyError(f"no child {name!r} in {self!r}")
        return _wrap(self.store, path, node, self.read_only, self.config)

    def arrays(self) -> list[tuple[str, Array]]:
        return [(k, v) for k in self.keys() if isinstance(v := self[k], Array)]

    def groups(self) -> list[tuple[str, Group]]:
        return [(k, v) for k in self.keys() if isinstance(v := self[k], Group)]

    def create_group(self, name: str, *, attributes: dict[str, Any] | None = None, mode: str = "w-") -> Group:
        return create_group(self.store, path=self._child(name), attributes=attributes, mode=mode, config=self.config)

    def create_array(self, name: str, **kwargs: Any) -> Array:
        return create(self.store, path=self._child(name), **{"config": self.config, **kwargs})

    def tree(self) -> str:
        """A text outline of the hierarchy below this group."""
        lines: list[str] = [self.path or "/"]

        def walk(group: Group, indent: str) -> None:
            for name in group.keys():
                child = group[name]
                if isinstance(child, Group):
                    lines.append(f"{indent}{name}/")
                    walk(child, indent + "  ")
                else:
                    lines.append(f"{indent}{name} {child.shape} {child.dtype}")

        walk(self, "  ")
        return "\n".join(lines)

