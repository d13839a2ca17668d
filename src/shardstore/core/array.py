"""``AsyncArray`` (the logic) and ``Array`` (a thin synchronous facade over it)."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

import numpy as np

from .._sync import sync
from ..errors import ReadOnlyError
from .indexing import Indexer, basic_indexer, orthogonal_indexer
from .io import UnitLocks, clear_outside, read_into, write_from
from .layout import FormatDriver

__all__ = ["AsyncArray", "Array", "Attributes"]


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
    """An array over a format driver; all chunk work goes through ``core.io``."""

    def __init__(self, driver: FormatDriver, *, read_only: bool, name: str = "") -> None:
        self.driver = driver
        self.read_only = read_only
        self.name = name
        self._locks = UnitLocks()

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
        layout = self.driver.layout
        out = np.empty(indexer.shape, dtype=layout.spec.dtype)
        if out.size:
            await read_into(layout, indexer, out, strict=strict)
        return out

    async def write(self, indexer: Indexer, value: Any) -> None:
        self._check_writable()
        layout = self.driver.layout
        arr = _as_value(value, layout.spec.dtype, indexer.shape)
        if arr.size:
            await write_from(layout, indexer, arr, self._locks)

    async def getitem(self, selection: Any) -> np.ndarray:
        return await self.read(basic_indexer(selection, self.driver.layout.grid))

    async def setitem(self, selection: Any, value: Any) -> None:
        await self.write(basic_indexer(selection, self.driver.layout.grid), value)

    async def resize(self, shape: tuple[int, ...]) -> None:
        self._check_writable()
        shape = tuple(int(s) for s in shape)
        if len(shape) != len(self.shape):
            raise ValueError(f"resize cannot change the rank: {self.shape} -> {shape}")
        if any(s < 0 for s in shape):
            raise ValueError(f"resize to a negative shape {shape}")
        await clear_outside(self.driver.layout, shape, self._locks)
        await self.driver.set_shape(shape)


class Attributes(MutableMapping[str, Any]):
    """User attributes; every change is written to the metadata document at once."""

    def __init__(self, array: Array | Any, driver: Any, read_only: bool) -> None:
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


class _OIndex:
    def __init__(self, array: Array) -> None:
        self._array = array

    def __getitem__(self, selection: Any) -> np.ndarray:
        a = self._array._async
        return _scalar_or_array(sync(a.read(orthogonal_indexer(selection, a.driver.layout.grid)), here=self._array._here()))

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

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

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

    def __getitem__(self, selection: Any) -> Any:
        return _scalar_or_array(sync(self._async.getitem(selection), here=self._here()))

    def __setitem__(self, selection: Any, value: Any) -> None:
        sync(self._async.setitem(selection, value))

    @property
    def oindex(self) -> _OIndex:
        """Orthogonal selection: integer or boolean arrays apply to each axis independently."""
        return _OIndex(self)

    def read(self, selection: Any = Ellipsis, *, strict: bool = False) -> np.ndarray:
        """Like ``a[selection]``; with ``strict=True`` a missing chunk raises ChunkNotFoundError."""
        return sync(self._async.read(basic_indexer(selection, self.driver.layout.grid), strict=strict), here=self._here())

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        out = sync(self._async.getitem(Ellipsis), here=self._here())
        return out if dtype is None else out.astype(dtype, copy=False)

    def resize(self, *shape: Any) -> None:
        """Change the shape; data outside a smaller shape is dropped (reads as fill if regrown)."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        sync(self._async.resize(tuple(shape)))
