"""bcolz carray driver: ``meta/*`` -> a ``ChunkLayout`` for the core. No chunk loops.

The grid is 1-D along axis 0 in ``chunklen`` rows (a multidimensional carray's chunk holds
whole rows). The last chunk is the "leftover": its own file holding only the rows present
(``edge_chunks="clipped"``). bcolz has no holes: every chunk is stored, even all-``dflt`` ones,
and a missing chunk file is an error.
"""

from __future__ import annotations

import copy
import json
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from ...codecs.base import ChunkSpec
from ...codecs.bloscpack import HEADER_SIZE, BloscpackCodec
from ...codecs.pipeline import CodecPipeline
from ...core.grid import RegularGrid
from ...core.layout import ArraySpec, ChunkLayout, FormatDriver
from ...errors import MetadataError
from ...store.base import RangeBR, Store
from .metadata import (
    ATTRS_KEY,
    SIZES_KEY,
    STORAGE_KEY,
    Sizes,
    Storage,
    dump_json,
    parse_json_object,
    parse_sizes,
    parse_storage,
)

if TYPE_CHECKING:
    import asyncio
else:
    from ..._lazy import asyncio

__all__ = ["BcolzDriver", "read_driver"]


def _key(path: str, key: str) -> str:
    return f"{path}/{key}" if path else key


def describe_file(store: Store, key: str) -> str:
    """A file named for error messages (the full path for local stores)."""
    paths = store.file_paths
    return paths.file_path(key) if paths is not None else f"{key!r} in {store!r}"


def chunk_file_key(path: str, n: int) -> str:
    return _key(path, f"data/__{n}.blp")


class BcolzDriver(FormatDriver):
    """One carray rootdir at ``path`` in ``store``."""

    format_name = "bcolz"

    def __init__(self, store: Store, path: str, sizes: Sizes, storage: Storage, attrs: dict[str, Any]) -> None:
        self.store = store
        self.path = path.strip("/")
        self.sizes = sizes
        self.storage = storage
        self._attrs = attrs
        self._layout: ChunkLayout | None = None
        #: ``sizes.cbytes`` follows the chunk files (as bcolz keeps it: appends add the full
        #: chunks they write); False after other writes, then ``flush`` measures it
        self.cbytes_exact = True
        _ = self.layout  # validate now (dtype vs codec), not at first read

    # -- derived ---------------------------------------------------------------------------
    @property
    def rowbytes(self) -> int:
        """Bytes per row (bcolz' ``atomsize``)."""
        return int(np.prod(self.sizes.shape[1:], dtype=np.int64)) * self.storage.dtype.itemsize

    def where(self, key: str) -> str:
        return describe_file(self.store, key)

    @property
    def layout(self) -> ChunkLayout:
        if self._layout is None:
            self._layout = self._build_layout()
        return self._layout

    def _build_layout(self) -> ChunkLayout:
        shape = self.sizes.shape
        st = self.storage
        c = st.cparams
        chunk_shape = (st.chunklen, *(max(1, s) for s in shape[1:]))
        spec = ArraySpec(shape, st.dtype, st.dflt)
        codec = BloscpackCodec(c.cname, c.clevel, c.shuffle, c.quantize, st.chunklen)
        try:
            pipeline = CodecPipeline([codec]).bind(ChunkSpec(chunk_shape, st.dtype, st.dflt))
        except MetadataError as e:
            raise MetadataError(f"{self.where(_key(self.path, STORAGE_KEY))}: {e}") from e
        path = self.path
        return ChunkLayout(
            config=self.config,
            spec=spec,
            grid=RegularGrid(shape, chunk_shape),
            pipeline=pipeline,
            store=self.store,
            chunk_key=lambda coords: chunk_file_key(path, coords[0]),
            edge_chunks="clipped",
            describe_key=lambda key: f"bcolz chunk file {self.where(key)}",
            store_fill_chunks=True,
            missing_chunks="error",
        )

    # -- FormatDriver ----------------------------------------------------------------------
    @property
    def attributes(self) -> dict[str, Any]:
        return copy.deepcopy(self._attrs)

    async def set_attributes(self, attributes: dict[str, Any]) -> None:
        data = dump_json(attributes)  # fails (TypeError) before anything changes
        self._attrs = copy.deepcopy(attributes)
        await self.store.set(_key(self.path, ATTRS_KEY), data)

    async def set_shape(self, shape: tuple[int, ...]) -> None:
        shape = tuple(int(s) for s in shape)
        if shape[1:] != self.sizes.shape[1:]:
            raise ValueError(f"a bcolz carray only changes its length; shape {self.sizes.shape} -> {shape}")
        old = self.sizes
        nbytes = shape[0] * self.rowbytes
        # cbytes is informational; keep the old compression ratio until flush() measures it
        ratio = (old.cbytes / old.nbytes) if old.nbytes else 1.0
        self.sizes = Sizes(shape, nbytes, int(nbytes * ratio))
        self._layout = None
        await self.save_sizes()

    def set_length(self, rows: int) -> None:
        """The new row count in memory only (appends; ``meta/sizes`` is written at flush)."""
        shape = (rows, *self.sizes.shape[1:])
        self.sizes = Sizes(shape, rows * self.rowbytes, self.sizes.cbytes)
        if self._layout is not None:  # same chunks, keys and codecs: no rebuild
            self._layout = self._layout.with_shape(shape)

    def add_full_chunks(self, cbytes: int) -> None:
        """Count the blosc sizes of full chunks an append wrote in ``cbytes`` (bcolz does)."""
        self.sizes = Sizes(self.sizes.shape, self.sizes.nbytes, self.sizes.cbytes + cbytes)

    has_after_write = True

    async def after_write(self) -> None:
        await self.ensure_data_dir()

    @property
    def metadata(self) -> dict[str, Any]:
        return {
            SIZES_KEY: json.loads(self.sizes.to_bytes()),
            STORAGE_KEY: json.loads(self.storage.to_bytes()),
            ATTRS_KEY: self.attributes,
        }

    # -- persistence -----------------------------------------------------------------------
    @property
    def sizes_key(self) -> str:
        return _key(self.path, SIZES_KEY)

    def reload_sizes_now(self) -> bool:
        """Re-read ``meta/sizes`` (another writer appended or resized), synchronously where
        the store reads so; False when it cannot be read that way."""
        reads = self.store.sync_reads
        raw = None if reads is None else reads.get_sync(self.sizes_key)
        if raw is None:
            return False
        self.set_sizes(parse_sizes(raw, self.where(self.sizes_key)))
        return True

    def set_sizes(self, sizes: Sizes) -> None:
        """Take ``sizes`` as the carray's, in memory (its layout follows the shape)."""
        self.sizes = sizes
        self._layout = None

    async def save_sizes(self) -> None:
        await self.store.set(self.sizes_key, self.sizes.to_bytes())

    async def save_all(self) -> None:
        """Write every metadata document (creation)."""
        await self.store.set(_key(self.path, STORAGE_KEY), self.storage.to_bytes())
        await self.store.set(_key(self.path, ATTRS_KEY), dump_json(self._attrs))
        await self.save_sizes()
        await self.ensure_data_dir()

    def _data_dir(self) -> str | None:
        """The local ``data/`` directory, for stores of plain files (``Store.file_paths``)."""
        paths = self.store.file_paths
        if paths is None or self.store.read_only:
            return None
        return os.path.dirname(paths.file_path(chunk_file_key(self.path, 0)))

    async def ensure_data_dir(self) -> None:
        """bcolz refuses to open a carray without ``data/``; key-value stores have no empty
        directories, so a local one is made explicitly (empty carrays, trims to 0)."""
        d = self._data_dir()
        if d is not None and not os.path.isdir(d):
            await asyncio.to_thread(os.makedirs, d, exist_ok=True)

    def ensure_data_dir_now(self) -> None:
        """``ensure_data_dir`` from synchronous code."""
        d = self._data_dir()
        if d is not None:
            os.makedirs(d, exist_ok=True)

    async def measure_cbytes(self) -> int:
        """bcolz' ``cbytes``: the blosc sizes of the full chunks plus one uncompressed chunk
        (the in-memory leftover buffer), read from the chunk headers."""
        nfull = self.sizes.shape[0] // self.storage.chunklen
        keys = [chunk_file_key(self.path, n) for n in range(nfull)]
        heads = await self.store.get_many([(k, RangeBR(HEADER_SIZE, 2 * HEADER_SIZE)) for k in keys]) if keys else []
        total = 0
        for head in heads:
            if head is not None and len(head) == HEADER_SIZE:  # reads report bad chunks, not this
                total += int.from_bytes(bytes(head[12:16]), "little")  # the blosc header's cbytes
        return total + self.storage.chunklen * self.rowbytes

    async def measure(self) -> None:
        """Measure ``cbytes`` from the chunk files (in memory; ``save_sizes`` writes it)."""
        self.sizes = Sizes(self.sizes.shape, self.sizes.nbytes, await self.measure_cbytes())
        self.cbytes_exact = True


async def read_driver(store: Store, path: str) -> BcolzDriver | None:
    """The driver of the carray at ``path``, or None when ``meta/sizes`` is absent."""
    keys = [_key(path, k) for k in (SIZES_KEY, STORAGE_KEY, ATTRS_KEY)]
    raw_sizes, raw_storage, raw_attrs = await store.get_many([(k, None) for k in keys])
    if raw_sizes is None:
        return None
    where = [describe_file(store, k) for k in keys]
    if raw_storage is None:
        raise MetadataError(f"{where[1]}: missing (a bcolz carray needs meta/storage)")
    sizes = parse_sizes(raw_sizes, where[0])
    storage = parse_storage(raw_storage, where[1])
    # bcolz writes an empty line when it (re)creates a missing __attrs__
    attrs = {} if raw_attrs is None or not bytes(raw_attrs).strip() else parse_json_object(raw_attrs, where[2])
    return BcolzDriver(store, path, sizes, storage, attrs)
