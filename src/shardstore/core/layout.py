"""What a format driver hands the core: the chunk layout of one array, and the driver contract.

The core never looks at metadata documents. A driver translates its format into a
``ChunkLayout`` (grid, codec pipeline, chunk keys, data store) and implements ``FormatDriver``
for the few operations that change metadata (resize, attributes).
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

from ..codecs.base import ChunkSpec
from ..codecs.pipeline import CodecPipeline
from ..config import IOConfig
from ..store.base import Store
from .chunk_cache import ChunkCache
from .grid import RegularGrid

__all__ = ["ArraySpec", "ChunkLayout", "FormatDriver", "fill_mask"]


@dataclass(frozen=True)
class ArraySpec:
    """The array as the user sees it."""

    shape: tuple[int, ...]
    dtype: np.dtype  # native byte order
    fill_value: Any  # a numpy scalar of ``dtype``
    dimension_names: tuple[str | None, ...] | None = None


def fill_mask(chunk: np.ndarray, fill_value: Any) -> bool:
    """True when every element of ``chunk`` equals ``fill_value`` bit for bit (NaN-aware)."""
    if chunk.size and chunk.dtype.kind in "biu":
        # most chunks written hold data: a corner that differs answers without a full pass
        first = chunk[(0,) * chunk.ndim]
        last = chunk[tuple(n - 1 for n in chunk.shape)]
        if first != fill_value or last != fill_value:
            return False
    if chunk.dtype.kind in "fc":
        # compare raw bits so NaN fills match NaN data and -0.0 differs from 0.0
        width = chunk.dtype.itemsize // (2 if chunk.dtype.kind == "c" else 1)
        as_uint = np.dtype(f"u{width}")
        fill = np.array([fill_value], dtype=chunk.dtype).view(as_uint)
        # (memory order: a chunk of a Fortran-ordered input is read along its rows, not transposed)
        bits = chunk.ravel(order="K").view(as_uint).reshape(-1, len(fill))
        return bool((bits == fill).all())
    return bool((chunk == fill_value).all())


@dataclass
class ChunkLayout:
    """Everything the core needs to read and write an array's chunks."""

    spec: ArraySpec
    grid: RegularGrid  # the grid of read chunks (inner chunks when sharded)
    pipeline: CodecPipeline  # bound to the full chunk shape
    store: Store  # the data store: the base store, or a sharding adapter over it
    chunk_key: Callable[[tuple[int, ...]], str]
    #: chunks per write unit along each dim (a shard, in chunks); all ones when unsharded
    write_ratio: tuple[int, ...] = ()
    #: "padded": edge chunks are encoded at full chunk shape (zarr); "clipped": at their
    #: in-bounds shape (N5, precomputed)
    edge_chunks: Literal["padded", "clipped"] = "padded"
    #: memory order of the arrays reads return: "F" for formats whose chunks are stored
    #: first-axis fastest (precomputed [x, y, z, c]), so that placing a chunk is a plain copy
    #: instead of a transposing one (about half the time of an unaligned read)
    order: Literal["C", "F"] = "C"
    #: how error messages name a chunk key (sharded drivers add the shard key)
    describe_key: Callable[[str], str] = lambda key: f"chunk {key!r}"
    #: True: chunks equal to the fill value are stored like any other (bcolz has no holes);
    #: False: they become deletes and read back as the fill value
    store_fill_chunks: bool = False
    #: "fill": a missing chunk reads as the fill value; "error": ChunkNotFoundError naming it
    missing_chunks: Literal["fill", "error"] = "fill"
    #: the write unit of a chunk when it is not a box of ``write_ratio`` chunks (shards
    #: chosen by hash, as in sharded precomputed); overrides ``write_ratio``
    write_unit_of: Callable[[tuple[int, ...]], tuple[int, ...]] | None = None
    #: the tuning of this array (concurrency, thresholds, native switch), from open/create
    config: IOConfig = IOConfig()
    _specs: dict[tuple[int, ...], ChunkSpec] = field(default_factory=dict, repr=False)
    #: how the last blocking reads ran their chunks (``core/threads.py`` ``share_now``)
    threads_memo: dict = field(default_factory=dict, repr=False, compare=False)
    #: the array handle's decoded-chunk cache (``core/chunk_cache.py``); None: off
    chunk_cache: ChunkCache | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.write_ratio:
            self.write_ratio = (1,) * len(self.grid.shape)

    @functools.cached_property
    def chunk_spec(self) -> ChunkSpec:
        return ChunkSpec(self.grid.chunk_shape, self.spec.dtype, self.spec.fill_value)

    @functools.cached_property
    def _full_chunks(self) -> tuple[int, ...]:
        """Per dim, how many chunks lie wholly inside the array (the rest are edge chunks)."""
        return tuple(s // n for s, n in zip(self.grid.shape, self.grid.chunk_shape))

    def spec_for(self, coords: tuple[int, ...]) -> ChunkSpec:
        """The spec a chunk is encoded with (edge chunks may be clipped)."""
        if self.edge_chunks == "padded":
            return self.chunk_spec
        # (runs once per chunk of every read: plain comparisons before any region maths)
        if all(c < f for c, f in zip(coords, self._full_chunks)) and len(coords) == len(self._full_chunks):
            return self.chunk_spec
        region = self.grid.chunk_region(coords)
        shape = tuple(s.stop - s.start for s in region)
        if shape == self.grid.chunk_shape:
            return self.chunk_spec
        return self.chunk_spec.with_shape(shape)

    def write_unit(self, coords: tuple[int, ...]) -> tuple[int, ...]:
        if self.write_unit_of is not None:
            return self.write_unit_of(coords)
        return tuple(map(operator.floordiv, coords, self.write_ratio))  # (runs per chunk of every read)

    @functools.cached_property
    def one_chunk_units(self) -> bool:
        """Whether every chunk is its own write unit (unsharded): the core then batches units.
        (Asked on every read and write; ``write_ratio`` and ``write_unit_of`` are set once.)"""
        return self.write_unit_of is None and all(r == 1 for r in self.write_ratio)

    def with_shape(self, shape: tuple[int, ...]) -> ChunkLayout:
        """This layout for an array of ``shape`` (same chunks, keys and store).

        Used to write the chunks of a resize or append before the new shape is persisted, so
        an interrupted write leaves the old metadata describing readable data. Valid for
        drivers whose chunk keys do not depend on the shape (clipped-edge formats).
        """
        shape = tuple(int(s) for s in shape)
        return dataclasses.replace(
            self,
            spec=dataclasses.replace(self.spec, shape=shape),
            grid=RegularGrid(shape, self.grid.chunk_shape),
            _specs={},
        )



class FormatDriver(abc.ABC):
    """A format's translation of one array's metadata (implemented in ``formats/``)."""

    #: short format name, e.g. "zarr3"
    format_name: str
    #: the store the node's metadata lives in and its path there: with the format, what
    #: opens the array again (an array pickles as that, see ``shardstore._reopen``)
    store: Store
    path: str
    #: whether the format allows changing the shape (``resize`` / ``append``)
    resizable: bool = True
    #: the tuning its layouts (and sharding adapters) are built with; set by ``configure``
    config: IOConfig = IOConfig()
    #: the layout built for the current metadata and config (None: build it on next use)
    _layout: ChunkLayout | None = None

    def configure(self, config: IOConfig) -> None:
        """Build layouts with ``config`` from now on (the array passes what open/create got)."""
        if config != self.config:
            self._layout = None
        self.config = config

    @property
    @abc.abstractmethod
    def layout(self) -> ChunkLayout:
        """The chunk layout for the current metadata."""

    @property
    @abc.abstractmethod
    def attributes(self) -> dict[str, Any]:
        """User attributes (a copy)."""

    @abc.abstractmethod
    async def set_attributes(self, attributes: dict[str, Any]) -> None:
        """Replace the user attributes and persist them."""

    @abc.abstractmethod
    async def set_shape(self, shape: tuple[int, ...]) -> None:
        """Persist a new shape; afterwards ``layout`` describes it."""

    @property
    @abc.abstractmethod
    def metadata(self) -> dict[str, Any]:
        """The metadata document(s) as JSON-compatible data."""

    #: whether ``after_write`` does anything (declared, so that loop-free writes call it only then)
    has_after_write: ClassVar[bool] = False

    async def after_write(self) -> None:  # noqa: B027 (a no-op default, not abstract)
        """Called by the core after every write, resize or append has completed.

        Formats that keep derived metadata (bcolz ``meta/sizes``) refresh it here and set
        ``has_after_write``.
        """

    @property
    def read_chunk_shape(self) -> tuple[int, ...]:
        return self.layout.grid.chunk_shape

    @property
    def write_chunk_shape(self) -> tuple[int, ...] | None:
        """The shard shape when sharded, else None."""
        return None
