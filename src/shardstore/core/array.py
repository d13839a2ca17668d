"""``AsyncArray`` (the logic) and ``Array`` (a thin synchronous facade over it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .._aio import run_inline
from .._malloc import tune_malloc
from .._reopen import NodeRecord, reopen
from .._sync import check_not_on_loop, loop_running_here, sync
from ..config import IOConfig, default_config
from ..errors import NotPicklableError, ReadOnlyError, UnsupportedFeatureError
from .attributes import Attributes
from .chunk_cache import ChunkCache
from .indexing import ChunkProjection, Indexer, basic_indexer, orthogonal_indexer
from .io import Asked, hits_now, read_into, read_into_now
from .layout import ChunkLayout, FormatDriver, fill_mask
from .placing import empty_result
from .streaming import stream_unit, streamed_unit
from .writes import UnitLocks, reshape_chunks, write_from, write_from_now, writes_now

if TYPE_CHECKING:
    import asyncio
else:
    from .._lazy import asyncio

__all__ = ["AsyncArray", "Array"]


def _as_value(value: Any, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """Cast and broadcast like NumPy assignment (Python ints out of range raise)."""
    if isinstance(value, np.ndarray):
        arr = value.astype(dtype, copy=False)
    else:
        arr = np.asarray(value, dtype=dtype)
    try:
        return np.broadcast_to(arr, shape)
    except ValueError:
        raise ValueError(
            f"could not broadcast a value of shape {arr.shape} into a selection of shape {shape}"
        ) from None


class AsyncArray:
    """An array over a format driver; all chunk work goes through ``core.io`` (reads) and ``core.writes``."""

    def __init__(self, driver: FormatDriver, *, read_only: bool, name: str = "", config: IOConfig | None = None) -> None:
        config = default_config(config)
        if config.malloc_tuning:
            tune_malloc()
        driver.configure(config)
        self.driver = driver
        self.read_only = read_only
        self.name = name
        self._locks = UnitLocks()
        self._chunk_cache: ChunkCache | None = None
        self.chunk_cache_bytes = config.chunk_cache_bytes

    @property
    def chunk_cache_bytes(self) -> int:
        """The decoded-chunk cache's byte budget (0: off, the default; ``core/chunk_cache.py``);
        set from ``IOConfig.chunk_cache_bytes`` at open, and settable on the handle."""
        return 0 if self._chunk_cache is None else self._chunk_cache.max_bytes

    @chunk_cache_bytes.setter
    def chunk_cache_bytes(self, nbytes: int) -> None:
        nbytes = int(nbytes)
        if nbytes < 0:
            raise ValueError(f"chunk_cache_bytes must be >= 0, got {nbytes}")
        self._chunk_cache = ChunkCache(nbytes) if nbytes else None

    @property
    def chunk_cache(self) -> ChunkCache | None:
        """The decoded-chunk cache shared by every thread reading through this handle."""
        return self._chunk_cache

    def _layout(self) -> ChunkLayout:
        """The driver's current layout, carrying this handle's chunk cache (a resize builds a
        new layout)."""
        layout = self.driver.layout
        if layout.chunk_cache is not self._chunk_cache:
            layout.chunk_cache = self._chunk_cache
        return layout

    @property
    def config(self) -> IOConfig:
        """The tuning this array runs with (given at open/create, else ``IOConfig.from_env()``)."""
        return self.driver.config

    @property
    def shape(self) -> tuple[int, ...]:
        return self.driver.layout.spec.shape

    @property
    def dtype(self) -> np.dtype:
        return self.driver.layout.spec.dtype

    def _check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyError(f"array {self.name or ''} was opened read-only (use mode='r+' or 'a' to write)")

    async def read(self, indexer: Indexer, *, strict: bool = False) -> np.ndarray:
        layout = self._layout()
        out = empty_result(indexer.shape, layout.spec.dtype, layout.order, layout.config)
        if out.size:
            await read_into(layout, indexer, out, strict=strict)
        return out

    def read_now(self, indexer: Indexer, *, strict: bool = False) -> np.ndarray | None:
        """``read`` for a blocking caller: on the calling thread (and the codec pool) without
        the event loop for stores that declare synchronous reads (``Store.sync_reads``); for
        remote stores whose chunk cache serves part of it, that part here and the rest on the
        loop (``hits_now``); None, having read nothing, for the others.

        Where what is left to fetch is one chunk and the store's reads can wait without a
        loop (``Store.reads_inline``: remote stores), that chunk is read here too with
        blocking requests (``_aio.run_inline``): its requests (a shard index, then the
        chunk) follow one another anyway, so a loop would overlap nothing, and it saves the
        loop's round trips and obstore's futures (about a third of the client CPU of a
        one-chunk read from S3). Reads of more chunks keep the loop's concurrent requests.
        With the chunk cache, units it holds whole are asked for their versions while the
        others' chunks are fetched (``hits_now``'s ``fetch``)."""
        layout = self._layout()
        out = empty_result(indexer.shape, layout.spec.dtype, layout.order, layout.config)
        if out.size == 0 or read_into_now(layout, indexer, out, strict=strict):
            return out
        # (listed only where a count decides something)
        listed = list(indexer) if layout.store.reads_inline and not loop_running_here() else None

        def fetch(asked: Asked) -> None:
            if not asked[0]:
                return
            coro = read_into(layout, (), out, strict=strict, asked=asked)
            if listed is not None and len(asked[0]) == 1:
                run_inline(coro)
            else:
                sync(coro, here=layout.store.runs_on_any_loop)

        asked = hits_now(layout, indexer if listed is None else listed, out, fetch)
        if asked is None:
            if listed is None or len(listed) != 1:
                return None
            run_inline(read_into(layout, listed, out, strict=strict))
            return out
        fetch(asked)
        return out

    async def write(self, indexer: Indexer, value: Any) -> None:
        self._check_writable()
        layout = self._layout()
        arr = _as_value(value, layout.spec.dtype, indexer.shape)
        if arr.size:
            await write_from(layout, indexer, arr, self._locks)
            await self.driver.after_write()

    def write_now(self, indexer: Indexer, value: Any) -> bool:
        """``write`` on the calling thread (and the I/O pool) without the event loop, where
        ``writes_now`` allows it; False, having written nothing, elsewhere."""
        self._check_writable()
        layout = self._layout()
        if not writes_now(layout):
            return False
        arr = _as_value(value, layout.spec.dtype, indexer.shape)
        if not arr.size:
            return True
        projections = list(indexer)
        check_not_on_loop()  # (a unit lock held by a write on that loop would never be released)
        release = self._locks.hold_now(layout.write_unit(p.coords) for p in projections)
        try:
            write_from_now(layout, projections, arr)
        finally:
            release()
        if self.driver.has_after_write:
            sync(self.driver.after_write())
        return True

    async def getitem(self, selection: Any) -> np.ndarray:
        return await self.read(basic_indexer(selection, self.driver.layout.grid))

    async def setitem(self, selection: Any, value: Any) -> None:
        await self.write(basic_indexer(selection, self.driver.layout.grid), value)

    def _checked_shape(self, shape: Any) -> tuple[int, ...]:
        self._check_writable()
        if not self.driver.resizable:
            raise UnsupportedFeatureError(
                f"{self.driver.format_name} array {self.name or ''}: the format does not allow a new shape"
            )
        shape = tuple(int(s) for s in shape)
        if len(shape) != len(self.shape):
            raise ValueError(f"resize cannot change the rank: {self.shape} -> {shape}")
        if any(s < 0 for s in shape):
            raise ValueError(f"resize to a negative shape {shape}")
        return shape

    async def resize(self, shape: tuple[int, ...]) -> None:
        """New shape; dropped data is gone, new elements read as the fill value."""
        shape = self._checked_shape(shape)
        old_shape = self.shape

        async def fill_added(layout: ChunkLayout) -> None:
            # formats that store fill chunks (bcolz) materialize the added elements
            if not layout.store_fill_chunks:
                return
            fill = layout.spec.fill_value
            for region in _added_regions(old_shape, shape):
                indexer = basic_indexer(region, layout.grid)
                await write_from(layout, indexer, _as_value(fill, layout.spec.dtype, indexer.shape), self._locks)

        await self._reshape(shape, fill_added)
        await self.driver.after_write()

    async def append(self, values: Any, axis: int = 0) -> tuple[int, ...]:
        """Grow along ``axis`` by ``values`` (matching the other dimensions); the new shape."""
        old_shape = self.shape
        ndim = len(old_shape)
        if not -ndim <= axis < ndim:
            raise ValueError(f"axis {axis} is out of range for a {ndim}-d array")
        axis %= ndim
        arr = np.asarray(values, dtype=self.dtype)
        if arr.ndim != ndim or any(a != s for i, (a, s) in enumerate(zip(arr.shape, old_shape)) if i != axis):
            raise ValueError(
                f"cannot append values of shape {arr.shape} along axis {axis} to an array of shape {old_shape}"
            )
        shape = list(old_shape)
        shape[axis] += arr.shape[axis]
        shape_t = self._checked_shape(shape)
        layout = self.driver.layout
        if layout.edge_chunks == "clipped":
            await self._append_clipped(arr, axis, shape_t)
        else:
            region = tuple(slice(old_shape[d], shape_t[d]) if d == axis else slice(None) for d in range(ndim))

            async def write_added(layout: ChunkLayout) -> None:
                if arr.size:
                    await write_from(layout, basic_indexer(region, layout.grid), arr, self._locks)

            await self._reshape(shape_t, write_added)
        await self.driver.after_write()
        return shape_t

    async def _append_clipped(self, arr: np.ndarray, axis: int, shape: tuple[int, ...]) -> None:
        """Append for clipped formats: each touched chunk is written once, whole.

        The chunks of the old edge along ``axis`` grow: their old rows are read once and
        written again together with the first new ones as complete chunks of the new shape
        (no re-encode at an intermediate shape, no read-merge). Metadata goes last, so an
        interruption leaves the old shape describing readable data.
        """
        old = self._layout()
        new = old.with_shape(shape)
        if self._chunk_cache is not None:
            self._chunk_cache.clear()  # edge chunks change shape (entries are per handle, not per layout)
        n = old.spec.shape[axis]
        start = n - n % old.grid.chunk_shape[axis]  # where the old edge chunk begins

        def along(lo: int, hi: int) -> tuple[slice, ...]:
            return tuple(slice(lo, hi) if d == axis else slice(None) for d in range(len(shape)))

        writes = []
        if start < n:  # the old edge chunk row: its rows and the first new ones (a small copy)
            head = await self.read(basic_indexer(along(start, n), old.grid))
            stop = min(start + old.grid.chunk_shape[axis], shape[axis])
            first = np.concatenate([head, arr[along(0, stop - n)]], axis=axis)
            writes.append(write_from(new, basic_indexer(along(start, stop), new.grid), first, self._locks))
            arr, start = arr[along(stop - n, arr.shape[axis])], stop
        if arr.size:  # whole chunks and the new edge, straight from the caller's array
            writes.append(write_from(new, basic_indexer(along(start, shape[axis]), new.grid), arr, self._locks))
        await asyncio.gather(*writes)
        await self.driver.set_shape(shape)

    async def _reshape(self, shape: tuple[int, ...], then: Any) -> None:
        """Adapt chunks and metadata to ``shape``, then ``then(layout)`` writes the added part.

        The order keeps what was readable readable if we are interrupted: when growing, the
        chunks are written first and the metadata last; when shrinking, the metadata first.
        Clipped formats write with a layout of the new shape before it is persisted (their
        chunk keys do not depend on it); padded ones (zarr: sharding adapters built for one
        shape) persist the shape before writing the added part.
        """
        old = self._layout()
        new = old.with_shape(shape)
        if self._chunk_cache is not None:
            self._chunk_cache.clear()  # edge chunks change shape (entries are per handle, not per layout)
        shrinking = any(n < o for n, o in zip(shape, old.spec.shape))
        if shrinking:
            await self.driver.set_shape(shape)
        await reshape_chunks(old, new, self._locks)
        if old.edge_chunks == "clipped":
            await then(new)
            if not shrinking:
                await self.driver.set_shape(shape)
        else:
            if not shrinking:
                await self.driver.set_shape(shape)
            await then(self.driver.layout)

    async def read_chunk_bytes(self, coords: tuple[int, ...]) -> bytes | None:
        """The stored (encoded) bytes of chunk ``coords``, or None when it is missing."""
        layout = self.driver.layout
        coords = tuple(int(c) for c in coords)
        layout.grid._check_coords(coords)
        return await layout.store.get(layout.chunk_key(coords))

    async def write_chunk_bytes(self, coords: tuple[int, ...], data: bytes | None) -> None:
        """Store already encoded bytes as chunk ``coords`` (None deletes it)."""
        self._check_writable()
        layout = self._layout()
        coords = tuple(int(c) for c in coords)
        layout.grid._check_coords(coords)
        async with self._locks.holding([layout.write_unit(coords)]):
            await layout.store.set_many([(layout.chunk_key(coords), data)])
        if self._chunk_cache is not None:
            self._chunk_cache.discard([layout.chunk_key(coords)])
        await self.driver.after_write()


    async def read_chunks_bytes(self, coords: list[tuple[int, ...]]) -> list[bytes | None]:
        """``read_chunk_bytes`` of many chunks in one batch (a shard adapter reads each shard
        index once and coalesces the byte ranges)."""
        layout = self.driver.layout
        for c in coords:
            layout.grid._check_coords(c)
        found = await layout.store.get_many([(layout.chunk_key(c), None) for c in coords])
        return [None if b is None else bytes(b) for b in found]

    async def write_chunks_bytes(self, items: list[tuple[tuple[int, ...], bytes | None]]) -> None:
        """``write_chunk_bytes`` of many chunks in one batch: each write unit (shard) is
        written once, under its lock."""
        self._check_writable()
        layout = self.driver.layout
        for c, _ in items:
            layout.grid._check_coords(c)
        async with self._locks.holding(layout.write_unit(c) for c, _ in items):
            await layout.store.set_many([(layout.chunk_key(c), data) for c, data in items])
        if self._chunk_cache is not None:
            self._chunk_cache.discard([layout.chunk_key(c) for c, _ in items])
        await self.driver.after_write()

    async def write_chunks(self, items: list[tuple[tuple[int, ...], np.ndarray]]) -> None:
        """Store chunks given as arrays (each as ``encode_chunk`` encodes it), each write unit
        once. The chunks of one whole shard of at least ``stream_unit_bytes`` are encoded as
        they are written (``core/streaming.py``) instead of all before the shard is."""
        self._check_writable()
        layout = self.driver.layout
        blocks = dict(items)
        for c in blocks:
            layout.grid._check_coords(c)
        unit = streamed_unit(layout, [ChunkProjection(c, (), (), True) for c in blocks])
        if unit is None:
            await self.write_chunks_bytes([(c, self.encode_chunk(c, b)) for c, b in blocks.items()])
            return
        async with self._locks.holding(layout.write_unit(c) for c in blocks):
            await stream_unit(layout, unit, lambda p, _key: self.encode_chunk(p.coords, blocks[p.coords]))
        if self._chunk_cache is not None:
            self._chunk_cache.discard([key for _, key in unit[1]])
        await self.driver.after_write()

    def encode_chunk(self, coords: tuple[int, ...], value: np.ndarray) -> bytes | None:
        """The stored bytes of chunk ``coords`` holding ``value`` (its in-bounds part, in the
        array's axis order), as a write would store them; None when the chunk would not be
        stored (all fill value)."""
        layout = self.driver.layout
        layout.grid._check_coords(coords)
        spec = layout.spec_for(coords)
        fill = layout.spec.fill_value
        value = np.asarray(value, dtype=layout.spec.dtype)
        if value.shape != spec.shape:  # a padded edge chunk: fill outside the array
            chunk = np.full(spec.shape, fill, dtype=spec.dtype, order=layout.order)
            chunk[tuple(slice(0, n) for n in value.shape)] = value
            value = chunk
        if not layout.store_fill_chunks and fill_mask(value, fill):
            return None
        return layout.pipeline.encode(value, spec)


def _added_regions(old: tuple[int, ...], new: tuple[int, ...]) -> list[tuple[slice, ...]]:
    """Disjoint boxes covering the elements of shape ``new`` outside shape ``old``."""
    kept = [min(o, n) for o, n in zip(old, new)]
    regions = []
    for dim, (k, n) in enumerate(zip(kept, new)):
        if n > k:
            regions.append(
                tuple(slice(0, new[d]) if d < dim else slice(k, n) if d == dim else slice(0, kept[d]) for d in range(len(new)))
            )
    return regions


class _OIndex:
    def __init__(self, array: Array) -> None:
        self._array = array

    def __getitem__(self, selection: Any) -> np.ndarray:
        a = self._array
        return _scalar_or_array(a._read(orthogonal_indexer(selection, a.driver.layout.grid)))

    def __setitem__(self, selection: Any, value: Any) -> None:
        a = self._array._async
        sync(a.write(orthogonal_indexer(selection, a.driver.layout.grid), value))


def _scalar_or_array(out: np.ndarray) -> Any:
    return out[()] if out.ndim == 0 else out


class Array:
    """A chunked, compressed, possibly sharded N-dimensional array with a NumPy-like API.

    ``a[10:20, ::2]`` reads, ``a[...] = v`` writes, ``a.oindex[[1, 5], :]`` selects
    orthogonally, ``np.asarray(a)`` reads everything. Missing chunks read as ``fill_value``.
    """

    def __init__(self, async_array: AsyncArray) -> None:
        self._async = async_array

    # -- description ------------------------------------------------------------------------
    @property
    def driver(self) -> FormatDriver:
        return self._async.driver

    @property
    def format(self) -> str:
        return self.driver.format_name

    @property
    def config(self) -> IOConfig:
        """The ``IOConfig`` this array runs with (``config=`` of open/create, else
        ``IOConfig.from_env()``); open again with ``config=a.config.replace(...)`` to change it."""
        return self._async.config

    @property
    def shape(self) -> tuple[int, ...]:
        return self._async.shape

    @property
    def dtype(self) -> np.dtype:
        return self._async.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def chunks(self) -> tuple[int, ...]:
        """The read chunk shape (the inner chunk shape when sharded)."""
        return self.driver.read_chunk_shape

    @property
    def shards(self) -> tuple[int, ...] | None:
        """The shard shape, or None when the array is not sharded."""
        return self.driver.write_chunk_shape

    @property
    def fill_value(self) -> Any:
        return self.driver.layout.spec.fill_value

    @property
    def dimension_names(self) -> tuple[str | None, ...] | None:
        return self.driver.layout.spec.dimension_names

    @property
    def attrs(self) -> Attributes:
        return Attributes(self, self.driver, self.read_only)

    @property
    def metadata(self) -> dict[str, Any]:
        return self.driver.metadata

    @property
    def read_only(self) -> bool:
        return self._async.read_only

    @property
    def chunk_cache_bytes(self) -> int:
        """Byte budget of this handle's decoded-chunk cache (0: off, the default). Worth
        setting for reads of boxes that overlap; see ``shardstore.core.chunk_cache``."""
        return self._async.chunk_cache_bytes

    @chunk_cache_bytes.setter
    def chunk_cache_bytes(self, nbytes: int) -> None:
        self._async.chunk_cache_bytes = nbytes

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    # -- pickling: an array travels as how to open it again -----------------------------------
    def node_record(self) -> NodeRecord:
        """How this array is opened again (what it pickles as): format, store, path, mode."""
        driver = self.driver
        return NodeRecord(driver.format_name, driver.store, driver.path,
                          "r" if self.read_only else "r+", self._reopen_options())

    def _reopen_options(self) -> tuple[tuple[str, Any], ...]:
        """Opener keywords beyond store, mode and path (format nodes add theirs)."""
        return (("config", self.config),)

    def __reduce__(self) -> tuple[Any, ...]:
        return (reopen, (self.node_record(),))

    def __dask_tokenize__(self) -> tuple[str, str]:
        # the same array opened twice gives the same token (and Dask keys); one that cannot
        # be reopened elsewhere (memory) is named by this object alone
        try:
            return (type(self).__name__, self.node_record().token())
        except NotPicklableError:
            return (type(self).__name__, f"local-{id(self):x}-{id(self._async):x}")

    def __repr__(self) -> str:
        shards = f", shards={self.shards}" if self.shards else ""
        return (
            f"<shardstore.Array {self.format} {self._async.name or ''} shape={self.shape} "
            f"dtype={self.dtype} chunks={self.chunks}{shards}>"
        )

    # -- data -------------------------------------------------------------------------------
    def _here(self) -> bool:
        """Whether reads may run on the calling thread's loop (see ``_sync``)."""
        return self.driver.layout.store.runs_on_any_loop

    def _read(self, indexer: Indexer, *, strict: bool = False) -> np.ndarray:
        # files and memory: straight on this thread and the codec pool, no event loop
        out = self._async.read_now(indexer, strict=strict)
        if out is None:
            out = sync(self._async.read(indexer, strict=strict), here=self._here())
        return out

    def __getitem__(self, selection: Any) -> Any:
        return _scalar_or_array(self._read(basic_indexer(selection, self.driver.layout.grid)))

    def __setitem__(self, selection: Any, value: Any) -> None:
        # files and memory: straight on this thread and the codec pool, no event loop
        if not self._async.write_now(basic_indexer(selection, self.driver.layout.grid), value):
            sync(self._async.setitem(selection, value))

    @property
    def oindex(self) -> _OIndex:
        """Orthogonal selection: integer or boolean arrays apply to each axis independently."""
        return _OIndex(self)

    def read(self, selection: Any = Ellipsis, *, strict: bool = False) -> np.ndarray:
        """Like ``a[selection]``; with ``strict=True`` a missing chunk raises ChunkNotFoundError."""
        return self._read(basic_indexer(selection, self.driver.layout.grid), strict=strict)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        out = self._read(basic_indexer(Ellipsis, self.driver.layout.grid))
        return out if dtype is None else out.astype(dtype, copy=False)

    def resize(self, *shape: Any) -> None:
        """Change the shape; data outside a smaller shape is dropped (reads as fill if regrown)."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        sync(self._async.resize(tuple(shape)))

    def append(self, values: Any, axis: int = 0) -> tuple[int, ...]:
        """Grow along ``axis`` by ``values``; returns the new shape."""
        return sync(self._async.append(values, axis))

    def read_chunk_bytes(self, coords: Any) -> bytes | None:
        """The stored (encoded) bytes of chunk ``coords`` (grid indices), or None when missing."""
        return sync(self._async.read_chunk_bytes(tuple(coords)), here=self._here())

    def write_chunk_bytes(self, coords: Any, data: bytes | None) -> None:
        """Store already encoded bytes as chunk ``coords`` (None deletes it); no validation."""
        sync(self._async.write_chunk_bytes(tuple(coords), data))

    def read_chunks_bytes(self, coords: Any) -> list[bytes | None]:
        """``read_chunk_bytes`` of many chunks in one batched request."""
        return sync(self._async.read_chunks_bytes([tuple(int(i) for i in c) for c in coords]), here=self._here())

    def write_chunks_bytes(self, items: Any) -> None:
        """Store many already encoded chunks ``[(coords, bytes | None), ...]``, each write
        unit (shard) once; no validation."""
        sync(self._async.write_chunks_bytes([(tuple(int(i) for i in c), d) for c, d in items]))

    def write_chunks(self, items: Any) -> None:
        """Store many chunks given as arrays ``[(coords, array), ...]`` (their in-bounds
        part, as ``encode_chunk`` takes them), each write unit (shard) once; a large whole
        shard is encoded chunk by chunk as it is written."""
        sync(self._async.write_chunks([(tuple(int(i) for i in c), v) for c, v in items]))

    def encode_chunk(self, coords: Any, value: Any) -> bytes | None:
        """What ``write_chunk_bytes`` would need to store ``value`` as chunk ``coords``."""
        return self._async.encode_chunk(tuple(int(c) for c in coords), value)
