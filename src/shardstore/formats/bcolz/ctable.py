"""bcolz ``ctable``: named carray columns under one rootdir, listed in ``__rootdirs__``.

Reads and appends run the columns concurrently (each column is an independent carray).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..._reopen import NodeRecord, reopen
from ..._sync import sync
from ...config import IOConfig, default_config
from ...core.attributes import Attributes
from ...errors import ContainsNodeError, MetadataError, ReadOnlyError, ShardStoreError
from ...store.base import Store
from .._entry import leave_nothing_behind
from .buffered import BcolzArray, FlushOnClose
from .carray import CArray, RootDir, _exists, _is_fancy, create_carray, iterblocks, open_carray, resolve_store
from .driver import describe_file
from .metadata import ATTRS_KEY, ROOTDIRS_KEY, CParams, calc_chunklen, dflt_from_json, dump_json, parse_json_object, parse_rootdirs, validate_column_name

if TYPE_CHECKING:
    import asyncio
else:
    from ..._lazy import asyncio

__all__ = ["CTable", "ctable", "open_ctable"]


def _key(path: str, key: str) -> str:
    return f"{path}/{key}" if path else key


class _TableAttrs:
    """Persistence of the table's ``__attrs__`` (the Attributes mapping talks to this)."""

    def __init__(self, store: Store, path: str, attrs: dict[str, Any]) -> None:
        self.store, self.path, self._attrs = store, path, attrs

    @property
    def attributes(self) -> dict[str, Any]:
        return copy.deepcopy(self._attrs)

    async def set_attributes(self, attributes: dict[str, Any]) -> None:
        data = dump_json(attributes)
        self._attrs = copy.deepcopy(attributes)
        await self.store.set(_key(self.path, ATTRS_KEY), data)


def _columns_of(columns: Any, names: list[str] | None) -> tuple[list[str], list[Any]]:
    """(names, column data) from a structured array, a dict, or a list of arrays."""
    if isinstance(columns, np.ndarray) and columns.dtype.names:
        if columns.ndim != 1:
            raise ValueError("only one-dimensional structured arrays make a ctable")
        return list(names or columns.dtype.names), [columns[n] for n in columns.dtype.names]
    if isinstance(columns, Mapping):
        return list(names or columns.keys()), list(columns.values())
    if isinstance(columns, CTable):
        return list(names or columns.names), [columns[n][:] for n in columns.names]
    if isinstance(columns, (list, tuple)):
        cols = list(columns)
        return list(names or [f"f{i}" for i in range(len(cols))]), cols
    raise ValueError(f"ctable columns must be a structured array, a dict or a list of arrays, got {type(columns).__name__}")


class CTable(FlushOnClose):
    """A bcolz ctable: ``t["col"]`` (a carray), ``t[10:20]`` (a structured array), ``append``,
    ``addcol``, ``delcol``, ``names``, ``dtype``, ``len``, ``attrs``."""

    def __init__(self, store: Store, path: str, names: list[str], cols: dict[str, CArray], attrs: dict[str, Any], mode: str,
                 rootdir: RootDir = None, config: IOConfig | None = None) -> None:
        self.store = store
        #: the ``IOConfig`` of its columns (new ones too)
        self.config = config
        self.path = path
        self._names = list(names)
        self.cols = cols
        self._attrs = _TableAttrs(store, path, attrs)
        self.mode = mode
        self.rootdir = rootdir
        self.read_only = mode == "r"
        lengths = {len(c) for c in cols.values()}
        self._len = min(lengths) if lengths else 0
        if len(lengths) > 1 and not self.read_only:
            self._resize_columns(self._len)  # repair an interrupted append: drop the partial rows

    # -- description -----------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return list(self._names)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype([(n, self.cols[n].dtype, self.cols[n].shape[1:]) for n in self._names])

    @property
    def shape(self) -> tuple[int]:
        return (self._len,)

    @property
    def ndim(self) -> int:
        return 1

    def __len__(self) -> int:
        return self._len

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.cols.values())

    @property
    def cbytes(self) -> int:
        return sum(c.cbytes for c in self.cols.values())

    @property
    def attrs(self) -> Attributes:
        return Attributes(self, self._attrs, self.read_only)

    def __repr__(self) -> str:
        return f"<shardstore.bcolz.ctable {self.rootdir or '(in memory)'} len={self._len} dtype={self.dtype}>"

    def _check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyError(f"ctable {self.rootdir or self.path!r} was opened read-only")

    # -- reading ---------------------------------------------------------------------------
    def _read(self, selection: Any) -> np.ndarray:
        names = self._names

        async def run() -> list[np.ndarray]:
            from ...core.indexing import basic_indexer, orthogonal_indexer

            jobs = []
            for n in names:
                a = self.cols[n]._async
                full = (selection,) + (slice(None),) * (a.driver.layout.grid.ndim - 1)
                if _is_fancy(selection):
                    sel = tuple(np.asarray(s) if isinstance(s, list) else s for s in full)
                    jobs.append(a.read(orthogonal_indexer(sel, a.driver.layout.grid)))
                else:
                    jobs.append(a.read(basic_indexer(full, a.driver.layout.grid)))
            return list(await asyncio.gather(*jobs))

        parts = sync(run())
        n_rows = parts[0].shape[0] if parts and parts[0].ndim else None
        out = np.empty(() if n_rows is None else (n_rows,), dtype=self.dtype)
        for n, part in zip(names, parts):
            out[n] = part
        return out

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            if key not in self.cols:
                raise KeyError(f"no column {key!r} in ctable (columns: {self._names})")
            return self.cols[key]
        if isinstance(key, (int, np.integer)):
            i = int(key)
            if not -self._len <= i < self._len:
                raise IndexError(f"index {i} is out of bounds for a ctable of length {self._len}")
            return self._read(slice(i % self._len, i % self._len + 1))[0]
        if isinstance(key, list) and key and all(isinstance(k, str) for k in key):
            return self._read_names(key)
        return self._read(key)

    def _read_names(self, names: list[str]) -> np.ndarray:
        out = np.empty(self._len, dtype=[(n, self.cols[n].dtype, self.cols[n].shape[1:]) for n in names])
        for n in names:
            out[n] = self.cols[n][:]
        return out

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        out = self._read(slice(None))
        return out if dtype is None else out.astype(dtype)

    def iterblocks(self, blen: int | None = None, start: int = 0, stop: int | None = None) -> Iterator[np.ndarray]:
        """Rows as structured blocks of ``blen`` rows (default: the first column's chunklen)."""
        default = self.cols[self._names[0]].chunklen if self._names else 1
        return iterblocks(self, blen or default, start, stop)

    def __iter__(self) -> Iterator[Any]:
        for block in self.iterblocks():
            yield from block

    # -- writing ---------------------------------------------------------------------------
    def __setitem__(self, key: Any, value: Any) -> None:
        self._check_writable()
        if isinstance(key, str):
            raise ValueError("replace a column with delcol + addcol")
        value = np.asarray(value, dtype=self.dtype) if not isinstance(value, np.ndarray) or value.dtype.names is None else value
        for n in self._names:
            self.cols[n][key] = value[n]

    def _rows_to_columns(self, rows: Any) -> list[np.ndarray]:
        names = self._names
        if isinstance(rows, CTable):
            rows = {n: rows[n][:] for n in names}
        if isinstance(rows, (np.ndarray, np.void)) and rows.dtype.names:
            cols = [np.atleast_1d(np.asarray(rows[n])) if rows.ndim == 0 else rows[n] for n in names]
        elif isinstance(rows, Mapping):
            missing = set(names) - set(rows)
            if missing:
                raise ValueError(f"append: no values for column(s) {sorted(missing)}")
            cols = [rows[n] for n in names]
        elif isinstance(rows, (list, tuple)) and len(rows) == len(names):
            cols = list(rows)
        else:
            raise ValueError("append takes a structured array, a dict of columns or a list with one entry per column")
        out = []
        for n, c in zip(names, cols):
            arr = np.asarray(c, dtype=self.cols[n].dtype)
            if arr.shape == self.cols[n].shape[1:]:
                arr = arr.reshape((1, *arr.shape))
            out.append(arr)
        if len({len(a) for a in out}) > 1:
            raise ValueError("all columns appended must have the same length")
        return out

    def append(self, rows: Any) -> None:
        """Add rows (structured array / record, dict of columns, list of columns)."""
        self._check_writable()
        cols = self._rows_to_columns(rows)
        if not cols or not len(cols[0]):
            return

        async def run() -> None:
            await asyncio.gather(*(self.cols[n]._async.append(a, 0) for n, a in zip(self._names, cols)))

        sync(run())
        self._len += len(cols[0])

    def _resize_columns(self, nitems: int) -> None:
        async def run() -> None:
            await asyncio.gather(
                *(c._async.resize((nitems, *c.shape[1:])) for c in self.cols.values() if len(c) != nitems)
            )

        sync(run())
        self._len = nitems

    def resize(self, nitems: int) -> None:
        """New length; added rows get each column's ``dflt``."""
        self._check_writable()
        if int(nitems) < 0:
            raise ValueError("`nitems` cannot be negative")
        self._resize_columns(int(nitems))

    def trim(self, nitems: int) -> None:
        """Remove the last ``nitems`` rows."""
        if int(nitems) > self._len:
            raise ValueError("`nitems` must be less than total length")
        self.resize(self._len - int(nitems))

    def node_record(self) -> NodeRecord:
        """How this table is opened again (what it pickles as)."""
        from .nodes import reopen as opener  # (nodes imports this module)

        named = self.rootdir is not None and not isinstance(self.rootdir, Store)
        return NodeRecord("bcolz", self.store, self.path, "r" if self.read_only else "r+",
                          (("rootdir", self.rootdir),) if named else (), opener)

    def __reduce__(self) -> tuple[Any, ...]:
        self.flush()  # rows appended here and still in memory must reach the other process
        return (reopen, (self.node_record(),))

    def flush(self) -> None:
        """Write what appends left in memory (each column's leftover and ``meta/sizes``)."""
        if not self.read_only:
            for c in self.cols.values():
                c.flush()

    async def _save_rootdirs(self) -> None:
        await self.store.set(_key(self.path, ROOTDIRS_KEY), dump_json({"names": self._names}))

    def addcol(self, newcol: Any, name: str | None = None, pos: int | None = None, **kwargs: Any) -> None:
        """Add a column (array-like of this table's length) at ``pos`` (default: last).

        ``kwargs`` are ``carray`` arguments (``dtype``, ``cparams``, ``chunklen``, ``dflt``).
        """
        self._check_writable()
        pos = len(self._names) if pos is None else int(pos)
        if not 0 <= pos <= len(self._names):
            raise ValueError("`pos` must be >= 0 and <= len(self.cols)")
        name = validate_column_name(f"f{pos}" if name is None else name)
        if name in self.cols:
            raise ValueError(f"{name!r} column already exists")
        data = newcol[:] if isinstance(newcol, CArray) else newcol
        arr = np.asarray(data, dtype=kwargs.pop("dtype", None))
        if len(arr) != self._len:
            raise ValueError("`newcol` must have the same length than ctable")
        col = _new_column(self.store, _key(self.path, name), arr, mode="w-", config=self.config, **kwargs)
        self._names.insert(pos, name)
        self.cols[name] = col
        sync(self._save_rootdirs())

    def delcol(self, name: str | None = None, pos: int | None = None, keep: bool = False) -> None:
        """Remove a column (by ``name`` or ``pos``); its files go too unless ``keep``."""
        self._check_writable()
        if (name is None) == (pos is None):
            raise ValueError("specify either a `name` or a `pos`")
        if pos is not None:  # (then name is None)
            name = self._names[int(pos)]
        if name not in self.cols:
            raise ValueError(f"`name` {name!r} not found in columns")
        self._names.remove(name)
        col = self.cols.pop(name)
        sync(self._save_rootdirs())  # first: a crash leaves an orphan directory, not a dangling name
        if not keep:
            col.purge()


def _new_column(store: Store, path: str, arr: np.ndarray, *, mode: str, chunklen: int | None = None, expectedlen: int | None = None,
                cparams: Any = None, dflt: Any = None, config: IOConfig | None = None) -> CArray:
    dt = arr.dtype.newbyteorder("=") if arr.dtype.byteorder == ">" else arr.dtype
    if dt.names is not None or dt.hasobject:
        raise MetadataError(f"column {path!r}: data type {dt} cannot be a bcolz column")
    atomsize = int(np.prod(arr.shape[1:], dtype=np.int64)) * dt.itemsize
    expectedlen = len(arr) if expectedlen is None else int(expectedlen)
    chunklen = calc_chunklen(expectedlen, atomsize) if chunklen is None else int(chunklen)
    fill = np.zeros((), dtype=dt)[()] if dflt is None else dflt_from_json(dflt, dt, "dflt argument")
    driver = sync(
        create_carray(store, path, shape_tail=tuple(arr.shape[1:]), dtype=dt, chunklen=chunklen, expectedlen=expectedlen,
                      cparams=CParams.from_any(cparams), dflt=fill, mode=mode)
    )
    col = CArray(BcolzArray(driver, read_only=False, name=path, config=config), None, "a")
    col.append(arr.astype(dt, copy=False))
    col.flush()
    return col


async def _prepare(store: Store, path: str, mode: str, rootdir: RootDir) -> None:
    if mode in ("a", "w-") and await _exists(store, path):
        raise ContainsNodeError(f"{rootdir or path!r} already exists (use mode='w' to replace it)")
    if mode == "w":
        await store.delete_prefix(f"{path}/" if path else "")


def ctable(
    columns: Any = None,
    names: list[str] | None = None,
    *,
    rootdir: RootDir = None,
    mode: str = "a",
    chunklen: int | None = None,
    expectedlen: int | None = None,
    cparams: Any = None,
    path: str = "",
    config: IOConfig | None = None,
) -> CTable:
    """Create a ctable from a structured array, a dict of columns or a list of arrays
    (with ``names``). Each column is a carray in ``rootdir/<name>``. As in bcolz, the default
    ``mode="a"`` refuses an existing rootdir and ``mode="w"`` replaces it. ``config`` (an
    ``IOConfig``) tunes its columns."""
    if mode not in ("w", "a", "w-"):
        raise ValueError(f"ctable() creates: mode must be 'w' or 'a', got {mode!r}")
    if columns is None:
        raise ValueError("ctable() needs columns (use shardstore.bcolz.open to open one)")
    col_names, datas = _columns_of(columns, names)
    if len(col_names) != len(datas):
        raise ValueError("`columns` and `names` must have the same length")
    for n in col_names:
        validate_column_name(n)
    if len(set(col_names)) != len(col_names):
        raise ValueError(f"duplicate column names {col_names}")
    arrays = [np.asarray(d) for d in datas]
    if len({len(a) for a in arrays}) > 1:
        raise ValueError("all `columns` must have the same length")
    config = default_config(config)
    with leave_nothing_behind(rootdir):
        store = resolve_store(rootdir, "w", config)
        sync(_prepare(store, path.strip("/"), mode, rootdir))
    path = path.strip("/")

    cols: dict[str, CArray] = {}
    table = CTable(store, path, [], cols, {}, "a", rootdir, config)
    for n, arr in zip(col_names, arrays):
        cols[n] = _new_column(store, _key(path, n), arr, mode="w", chunklen=chunklen, expectedlen=expectedlen, cparams=cparams,
                              config=config)
        table._names.append(n)
        sync(table._save_rootdirs())  # as bcolz: after each column
    table._len = len(arrays[0]) if arrays else 0
    sync(table._attrs.set_attributes({}))
    return table


def open_ctable(store: Store, path: str = "", mode: str = "a", rootdir: RootDir = None,
                config: IOConfig | None = None) -> CTable:
    """Open the ctable at ``path`` (``mode="w"`` empties it)."""
    key = _key(path, ROOTDIRS_KEY)
    raw_names, raw_attrs = sync(store.get_many([(key, None), (_key(path, ATTRS_KEY), None)]))
    if raw_names is None:
        raise ShardStoreError(f"no bcolz ctable at {describe_file(store, key)} (__rootdirs__ is missing)")
    names = parse_rootdirs(raw_names, describe_file(store, key))
    attrs = {} if raw_attrs is None or not bytes(raw_attrs).strip() else parse_json_object(raw_attrs, describe_file(store, _key(path, ATTRS_KEY)))
    config = default_config(config)
    cols = {n: open_carray(store, _key(path, n), "r" if mode == "r" else "a", config=config) for n in names}
    table = CTable(store, path, names, cols, attrs, "r" if mode == "r" else "a", rootdir, config)
    if mode == "w":
        table.resize(0)
    return table
