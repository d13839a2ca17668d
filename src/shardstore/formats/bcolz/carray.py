"""The user-facing bcolz ``carray``: a core ``Array`` with bcolz' names and semantics.

As in bcolz, ``append`` keeps the rows of the last, partial chunk in memory: ``flush()`` (or
``close()``, the end of a ``with`` block, any other read or write, garbage collection,
interpreter exit) writes them with ``meta/sizes`` (see ``buffered.py``). Writes, ``resize``
and ``trim`` are on disk (chunk files first, ``meta/sizes`` last) when they return. The files
always describe readable data: an interrupted write leaves the previous content readable.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..._reopen import NodeRecord
from ..._sync import sync
from ...config import IOConfig, default_config
from ...core.array import Array
from ...errors import CodecError, ContainsNodeError, ShardStoreError
from ...store.base import RangeBR, Store
from ...store.memory import MemoryStore
from ...store.registry import store_from_url
from .._entry import leave_nothing_behind
from .buffered import BcolzArray, FlushOnClose
from .driver import BcolzDriver, read_driver
from .metadata import SIZES_KEY, CParams, Sizes, Storage, calc_chunklen, dflt_from_json

__all__ = ["CArray", "carray", "open_carray", "create_carray", "iterblocks", "resolve_store"]

RootDir = str | os.PathLike[str] | Store | None


def resolve_store(rootdir: RootDir, mode: str, config: IOConfig | None = None) -> Store:
    """The store for a rootdir (a path, URL or Store; None = a new in-memory store)."""
    store = MemoryStore() if rootdir is None else store_from_url(rootdir, mode="r" if mode == "r" else "a")
    if config is not None and not isinstance(rootdir, Store):
        store.use_config(config)
    return store


def _is_fancy(selection: Any) -> bool:
    """Integer/boolean arrays (bcolz ``ca[[1, 5]]``, ``ca[mask]``) go to orthogonal indexing."""
    items = selection if isinstance(selection, tuple) else (selection,)
    return any(isinstance(s, (list, np.ndarray)) and not (isinstance(s, np.ndarray) and s.ndim == 0) for s in items)


class CArray(FlushOnClose, Array):
    """A bcolz carray on disk (or in memory): ``ca[sel]``, ``ca[sel] = v``, ``append``,
    ``resize``, ``trim``, ``flush``, ``attrs``, ``iterblocks``."""

    _async: BcolzArray

    def __init__(self, async_array: BcolzArray, rootdir: RootDir = None, mode: str = "a") -> None:
        super().__init__(async_array)
        self.rootdir = None if rootdir is None or isinstance(rootdir, Store) else os.fspath(rootdir)
        self.mode = mode
        self._lock = threading.Lock()  # appends from several threads go one at a time

    @property
    def driver(self) -> BcolzDriver:
        return self._async.driver

    def __repr__(self) -> str:
        return (
            f"<shardstore.bcolz.carray {self.rootdir or '(in memory)'} shape={self.shape} dtype={self.dtype} "
            f"chunklen={self.chunklen} cparams={self.cparams}>"
        )

    # -- bcolz properties ------------------------------------------------------------------
    @property
    def chunklen(self) -> int:
        """Rows per chunk file."""
        return self.driver.storage.chunklen

    @property
    def cparams(self) -> dict[str, Any]:
        return self.driver.storage.cparams.to_json()

    @property
    def dflt(self) -> Any:
        """The value rows added by ``resize`` get."""
        return self.driver.storage.dflt

    @property
    def expectedlen(self) -> int:
        return self.driver.storage.expectedlen

    @property
    def nchunks(self) -> int:
        """Full chunks (the leftover is not counted, as in bcolz)."""
        return len(self) // self.chunklen

    @property
    def nleftover(self) -> int:
        """Rows in the short last chunk file."""
        return len(self) % self.chunklen

    @property
    def cbytes(self) -> int:
        """As recorded in ``meta/sizes`` (measured by ``flush``)."""
        return self.driver.sizes.cbytes

    def __len__(self) -> int:
        return self.shape[0]

    # -- data ------------------------------------------------------------------------------
    def _full(self, selection: Any) -> tuple[Any, ...]:
        sel = selection if isinstance(selection, tuple) else (selection,)
        return tuple(np.asarray(s) if isinstance(s, list) else s for s in sel)

    def __getitem__(self, selection: Any) -> Any:
        if type(selection) is slice or type(selection) is int:
            small = self._small_read(selection)
            if small is not None:
                return small
        elif _is_fancy(selection):
            return self.oindex[self._full(selection)]
        return super().__getitem__(selection)

    def _small_read(self, selection: slice | int) -> Any:
        """``ca[a:b]`` / ``ca[i]`` inside one chunk file, straight from the codec's ranged
        partial decode (headers and the blosc blocks holding the rows): the random small
        read of bcolz workloads skips the indexer and the chunk loop, a quarter of its time.
        None (the caller takes the general path) for anything else, a store without
        synchronous reads, a missing file, or rows that are most of their chunk, and on a
        handle with a decoded-chunk cache: the general path copies the rows of a chunk the
        cache holds and keeps the chunk it decodes (a copy of cached rows is several times
        faster than a partial decode, and random slices of a carray hit the same chunks)."""
        layout = self.driver.layout
        reads = layout.store.sync_reads
        n = layout.spec.shape[0] if layout.spec.shape else 0
        if reads is None or not n or self._async.chunk_cache is not None:
            return None
        if isinstance(selection, int):  # (never a bool: __getitem__ passes exact ints and slices)
            if not -n <= selection < n:
                return None  # (the general path raises the IndexError)
            start = selection % n
            stop = start + 1
        else:
            start, stop, step = selection.indices(n)
            if step != 1 or stop <= start:
                return None
        chunklen = layout.grid.chunk_shape[0]
        k = start // chunklen
        if (stop - 1) // chunklen != k:
            return None
        self._async.flush_now()  # (appended rows in memory are written first)
        coords = (k,) + (0,) * (len(layout.spec.shape) - 1)
        key = layout.chunk_key(coords)
        local = (start - k * chunklen) if type(selection) is int else slice(start - k * chunklen, stop - k * chunklen)
        try:
            part = layout.pipeline.decode_region_from(lambda a, b: reads.get_sync(key, RangeBR(a, b)), layout.spec_for(coords), (local,))
        except CodecError as e:
            raise type(e)(f"{layout.describe_key(key)}: {e}") from e
        if part is None:
            return None
        if not isinstance(part, np.ndarray):  # ca[i] of a 1-D carray: a NumPy scalar
            return part
        return part[()] if part.ndim == 0 else part.copy()  # (a writable array of its own)

    def __setitem__(self, selection: Any, value: Any) -> None:
        if _is_fancy(selection):
            self.oindex[self._full(selection)] = value
            return
        super().__setitem__(selection, value)

    # bcolz' own signature, as its users call it (Array.append takes an axis, returns the shape)
    def append(self, array: Any) -> None:  # type: ignore[override]
        """Add rows at the end: fills the leftover chunk and writes the chunks that become
        full; the new leftover stays in memory until ``flush()`` (bcolz' behaviour; set
        ``autoflush = True`` to flush after every append)."""
        arr = np.asarray(array, dtype=self.dtype)
        if arr.shape == self.shape[1:]:  # a single row
            arr = arr.reshape((1, *arr.shape))
        if arr.ndim != self.ndim or arr.shape[1:] != self.shape[1:]:
            raise ValueError(f"cannot append an array of shape {arr.shape} to a carray of shape {self.shape}")
        if len(arr):
            with self._lock:
                self._async.append_now(arr)

    @property
    def autoflush(self) -> bool:
        """Flush after every ``append`` (each append is then on disk when it returns)."""
        return self._async.autoflush

    @autoflush.setter
    def autoflush(self, value: bool) -> None:
        self._async.autoflush = bool(value)

    def resize(self, nitems: Any) -> None:
        """New length; added rows get ``dflt``."""
        if isinstance(nitems, (tuple, list)):
            nitems = nitems[0]
        nitems = int(nitems)
        if nitems < 0:
            raise ValueError("`nitems` cannot be negative")
        if nitems != len(self):
            super().resize((nitems, *self.shape[1:]))

    def trim(self, nitems: int) -> None:
        """Remove the last ``nitems`` rows (a negative count grows the carray)."""
        nitems = int(nitems)
        if nitems > len(self):
            raise ValueError("`nitems` must be less than total length")
        self.resize(len(self) - nitems)

    def node_record(self) -> NodeRecord:
        from .nodes import reopen  # (nodes imports this module)

        record = super().node_record()
        return dataclasses.replace(record, opener=reopen, options=(("rootdir", self.rootdir),) if self.rootdir else ())

    def __reduce__(self) -> tuple[Any, ...]:
        self.flush()  # rows appended here and still in memory must reach the other process
        return super().__reduce__()

    def flush(self) -> None:
        """Write the appended rows still in memory (the leftover) and ``meta/sizes``."""
        if not self.read_only:
            with self._lock:
                self._async.flush_now(measure=True)

    def iterblocks(self, blen: int | None = None, start: int = 0, stop: int | None = None) -> Iterator[np.ndarray]:
        """Rows ``start:stop`` as NumPy blocks of ``blen`` rows (default: ``chunklen``)."""
        return iterblocks(self, blen, start, stop)

    def __iter__(self) -> Iterator[Any]:
        for block in self.iterblocks():
            yield from block

    def purge(self) -> None:
        """Delete the carray's files."""
        if self.read_only:
            raise ShardStoreError("cannot purge a carray opened read-only")
        self._async.discard_pending()
        path = self.driver.path
        sync(self.driver.store.delete_prefix(f"{path}/" if path else ""))


def iterblocks(obj: Any, blen: int | None = None, start: int = 0, stop: int | None = None) -> Iterator[np.ndarray]:
    """Blocks of ``blen`` rows of a carray or ctable (bcolz ``iterblocks``)."""
    n = len(obj)
    blen = int(blen or getattr(obj, "chunklen", 0) or 65536)
    if blen < 1:
        raise ValueError("blen must be positive")
    start, stop, _ = slice(start, stop).indices(n)
    for i in range(start, stop, blen):
        yield obj[i : min(i + blen, stop)]


# -- creation and opening ----------------------------------------------------------------------
async def _exists(store: Store, path: str) -> bool:
    prefix = f"{path}/" if path else ""
    async for _ in store.list_prefix(prefix):
        return True
    return False


async def create_carray(
    store: Store,
    path: str,
    *,
    shape_tail: tuple[int, ...],
    dtype: np.dtype,
    chunklen: int,
    expectedlen: int,
    cparams: CParams,
    dflt: Any,
    mode: str,
    attrs: dict[str, Any] | None = None,
) -> BcolzDriver:
    """Write the metadata of an empty carray; returns its driver."""
    if mode in ("w-", "a", "x") and await _exists(store, path):
        raise ContainsNodeError(f"{path or store!r} already exists (use mode='w' to replace it)")
    if mode == "w":
        await store.delete_prefix(f"{path}/" if path else "")
    rowbytes = int(np.prod(shape_tail, dtype=np.int64)) * dtype.itemsize
    storage = Storage(dtype, cparams, chunklen, expectedlen, dflt)
    sizes = Sizes((0, *shape_tail), 0, chunklen * rowbytes)
    driver = BcolzDriver(store, path, sizes, storage, dict(attrs or {}))  # validates before writing
    await driver.save_all()
    return driver


def carray(
    data: Any = None,
    *,
    rootdir: RootDir = None,
    dtype: Any = None,
    chunklen: int | None = None,
    expectedlen: int | None = None,
    cparams: Any = None,
    dflt: Any = None,
    mode: str = "a",
    path: str = "",
    config: IOConfig | None = None,
) -> CArray:
    """Create a carray from ``data`` (array-like, or None for an empty one).

    ``rootdir``: a directory (or URL / Store; None keeps it in memory). As in bcolz, the
    default ``mode="a"`` refuses an existing rootdir and ``mode="w"`` replaces it. ``chunklen``
    defaults to bcolz' choice for ``expectedlen`` (default ``len(data)``) rows;
    ``cparams`` defaults to ``{"clevel": 5, "shuffle": 1, "cname": "lz4"}``; ``dflt``
    (default zero) fills rows added by ``resize``. ``config`` (an ``IOConfig``) tunes it.
    """
    if mode not in ("w", "a", "w-"):
        raise ValueError(f"carray() creates: mode must be 'w' or 'a', got {mode!r}")
    if data is None:
        arr = np.empty(0, dtype=np.dtype(dtype) if dtype is not None else np.float64)
    else:
        arr = np.asarray(data, dtype=dtype)
        if arr.ndim == 0:
            raise ValueError("creating carrays from scalar objects is not supported")
    dt = arr.dtype
    if dt.byteorder == ">":
        dt = dt.newbyteorder("=")
        arr = arr.astype(dt)
    atomsize = int(np.prod(arr.shape[1:], dtype=np.int64)) * dt.itemsize
    expectedlen = len(arr) if expectedlen is None else int(expectedlen)
    chunklen = calc_chunklen(expectedlen, atomsize) if chunklen is None else int(chunklen)
    if chunklen < 1:
        raise ValueError("chunklen must be a positive integer")
    fill = np.zeros((), dtype=dt)[()] if dflt is None else dflt_from_json(dflt, dt, "dflt argument")
    config = default_config(config)
    with leave_nothing_behind(rootdir):
        store = resolve_store(rootdir, "w", config)
        driver = sync(
            create_carray(
                store,
                path.strip("/"),
                shape_tail=tuple(arr.shape[1:]),
                dtype=dt,
                chunklen=chunklen,
                expectedlen=expectedlen,
                cparams=CParams.from_any(cparams),
                dflt=fill,
                mode=mode,
            )
        )
    ca = CArray(BcolzArray(driver, read_only=False, name=str(rootdir or "memory"), config=config), rootdir, "a")
    ca.append(arr)
    ca.flush()
    return ca


def open_carray(store: Store, path: str = "", mode: str = "a", rootdir: RootDir = None,
                config: IOConfig | None = None) -> CArray:
    """Open the carray at ``path``; ``mode="w"`` empties it (as bcolz does)."""
    driver = sync(read_driver(store, path))
    if driver is None:
        raise ShardStoreError(f"no bcolz carray at {path or '/'!r} in {store!r} ({SIZES_KEY} is missing)")
    ca = CArray(BcolzArray(driver, read_only=mode == "r", name=str(rootdir or path or store), config=config), rootdir, mode)
    if mode == "w":
        ca.resize(0)
    return ca
