"""Dask arrays from and into shardstore arrays (``pip install 'shardstore[dask]'``).

- ``to_dask(a, chunks=None)``: a Dask array reading ``a``. Default blocks are ``a``'s read
  chunks; ``chunks="shards"`` gives one block per shard (per chunk where the array has no
  box-shaped shards); any Dask ``chunks`` value is accepted too.
- ``store(x, a)``: write Dask array ``x`` into ``a`` with one task per destination write unit
  (a shard; a chunk when unsharded), whatever ``x``'s chunks are: no two tasks touch the same
  stored object, so nothing depends on locks or on the multi-writer merge.
- ``to_shardstore(x, url, ...)``: create an array of ``x``'s shape and dtype at ``url``, then
  ``store``.

Arrays pickle as how to open them again (see ``shardstore._reopen``), so the same calls run
on ``dask.distributed`` worker processes; task names come from that record, so the same array
opened twice gives the same keys. ``da.from_array(a)`` and ``da.store(x, a, lock=False)`` work
as well (the latter is exact with any chunks: partial writes to one shard from several tasks
are merged under a file lock or a conditional PUT), but write each shard once per dask block
that touches it.

Axes are shardstore's own: a Neuroglancer precomputed scale is indexed ``[x, y, z, channel]``
(its ``info`` order), Zarr and N5 arrays in NumPy C order (N5's ``dimensions`` reversed). No
axis is reordered here; transpose the Dask array (``x.transpose(...)``) to convert.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Sequence
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.base import tokenize
from dask.delayed import Delayed

from .api import create
from .core.array import Array
from .errors import ReadOnlyError
from .store.base import Store

__all__ = ["to_dask", "store", "to_shardstore", "write_units"]

Region = tuple[slice, ...]


def _block_shape(a: Array, chunks: Any) -> Any:
    if chunks is None:
        return a.chunks
    if isinstance(chunks, str) and chunks == "shards":
        return a.shards or a.chunks
    return chunks


def to_dask(a: Array, chunks: Any = None, *, name: str | None = None) -> da.Array:
    """A Dask array reading ``a``: blocks of ``a.chunks`` (default), of ``a.shards``
    (``chunks="shards"``; the chunks when unsharded), or any Dask ``chunks`` value."""
    blocks = _block_shape(a, chunks)
    name = name or f"shardstore-read-{tokenize(a, blocks)}"
    meta = np.empty((0,) * a.ndim, dtype=a.dtype)
    return da.from_array(a, chunks=blocks, name=name, lock=False, asarray=False, fancy=False, meta=meta)


def _edges(n: int, step: int) -> list[int]:
    return [min(step, n - i) for i in range(0, n, step)] or [0]


def write_units(a: Array) -> list[list[Region]]:
    """The write units of ``a`` (shards; chunks when unsharded), each as the boxes it covers:
    one box for box-shaped units, one per chunk where units are chosen by hash (sharded
    precomputed), in a fixed order."""
    layout = a.driver.layout
    if layout.write_unit_of is None:  # units are boxes of whole chunks
        unit = a.shards or a.chunks
        axes = [list(range(0, n, u)) or [0] for n, u in zip(a.shape, unit)]
        return [[tuple(slice(s, min(s + u, n)) for s, u, n in zip(start, unit, a.shape))]
                for start in itertools.product(*axes)]
    units: dict[tuple[int, ...], list[Region]] = {}
    for coords in layout.grid.all_coords():
        units.setdefault(layout.write_unit(coords), []).append(layout.grid.chunk_region(coords))
    return list(units.values())


def _write(a: Array, regions: Sequence[Region], *blocks: np.ndarray) -> int:
    """One task: write the unit made of ``regions`` (one box, or its chunks)."""
    if len(regions) == 1:
        a[regions[0]] = blocks[0]
        return 1
    # the chunks of a hash-chosen shard (no box), stored in one batch, so the shard is
    # written once (a large one streamed, its chunks encoded as they are written)
    grid = a.driver.layout.grid
    coords = [tuple(r.start // c for r, c in zip(region, grid.chunk_shape)) for region in regions]
    a.write_chunks(list(zip(coords, blocks)))
    return 1


def _count(done: Sequence[int]) -> int:
    return sum(done)


def _unit_blocks(x: da.Array, a: Array, units: list[list[Region]]) -> Iterator[tuple[list[Region], list[Delayed]]]:
    """Each unit with the blocks of ``x`` (rechunked to the unit grid) that fill it."""
    layout = a.driver.layout
    step = a.shards or a.chunks if layout.write_unit_of is None else a.chunks
    rechunked = x.rechunk(tuple(_edges(n, s) for n, s in zip(x.shape, step)))
    blocks = rechunked.to_delayed(optimize_graph=False)
    for regions in units:
        yield regions, [blocks[tuple(r[d].start // step[d] for d in range(len(step)))] for r in regions]


def store(x: da.Array, a: Array, *, compute: bool = True, **compute_kwargs: Any) -> int | Delayed:
    """Write ``x`` into ``a`` (same shape), one task per write unit of ``a``.

    ``x`` is rechunked to ``a``'s shards (chunks when unsharded), so each shard is encoded and
    written by exactly one task. Returns the number of units written, or with
    ``compute=False`` a ``Delayed`` computing it. ``compute_kwargs`` go to ``dask.compute``
    (``scheduler=``, ...).
    """
    if tuple(x.shape) != tuple(a.shape):
        raise ValueError(f"cannot store a Dask array of shape {x.shape} into {a!r}: shapes differ")
    if a.read_only:
        raise ReadOnlyError(f"cannot store into {a!r}: it was opened read-only (use mode='r+')")
    token = tokenize(x.name, a)
    target = dask.delayed(a, name=f"shardstore-target-{token}")
    writes = [
        dask.delayed(_write, pure=True)(target, regions, *blocks, dask_key_name=f"shardstore-write-{token}-{i}")
        for i, (regions, blocks) in enumerate(_unit_blocks(x, a, write_units(a)))
    ]
    total = dask.delayed(_count, pure=True)(writes, dask_key_name=f"shardstore-store-{token}")
    return int(total.compute(**compute_kwargs)) if compute else total


def to_shardstore(
    x: da.Array,
    url: str | os.PathLike[str] | Store,
    *,
    chunks: Sequence[int] | None = None,
    shards: Sequence[int] | None = None,
    format: str = "zarr3",
    mode: str = "w-",
    storage_options: dict[str, Any] | None = None,
    **options: Any,
) -> Array:
    """Create an array of ``x``'s shape and dtype at ``url`` and ``store`` ``x`` into it.

    ``chunks`` / ``shards`` and ``options`` are the format's ``create`` keywords (Zarr v3:
    ``codecs``, ``fill_value``, ...; N5: ``block_size``, ``compression``); ``mode="w"``
    replaces what is there. Formats whose ``create`` takes no shape (precomputed, which
    describes scales in ``[x, y, z]`` plus channels) are created first with their own
    ``create``, then filled with ``store``. Returns the array, written (for a lazy write,
    ``create`` and ``store(x, a, compute=False)``).
    """
    kwargs = dict(options)
    if chunks is not None:
        kwargs["chunks"] = tuple(chunks)
    if shards is not None:
        kwargs["shards"] = tuple(shards)
    if storage_options is not None:
        kwargs["storage_options"] = storage_options
    a = create(url, format=format, mode=mode, shape=tuple(x.shape), dtype=x.dtype, **kwargs)
    store(x, a)
    return a
