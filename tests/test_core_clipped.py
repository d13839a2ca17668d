"""Core behaviour for clipped-edge layouts (N5, precomputed, bcolz) with a minimal test driver.

The driver stores chunks with the zarr3 ``bytes`` codec at their clipped shape and keeps its
shape in a JSON key, so the tests can see what the core writes and in which order.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from _helpers import examples
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from shardstore._sync import sync
from shardstore.codecs.base import ChunkSpec
from shardstore.codecs.pipeline import CodecPipeline
from shardstore.core.array import Array, AsyncArray
from shardstore.core.grid import RegularGrid
from shardstore.core.layout import ArraySpec, ChunkLayout, FormatDriver
from shardstore.errors import ChunkNotFoundError, UnsupportedFeatureError
from shardstore.store.memory import MemoryStore
from shardstore.store.wrappers import RecordingStore

BYTES = [{"name": "bytes", "configuration": {"endian": "little"}}]


class ClippedDriver(FormatDriver):
    format_name = "clipped-test"

    def __init__(self, store, shape, chunks, dtype="int16", fill=0, store_fill=False, missing="fill"):
        self.store = store
        self.shape = tuple(shape)
        self.chunks = tuple(chunks)
        self.dtype = np.dtype(dtype)
        self.fill = self.dtype.type(fill)
        self.store_fill = store_fill
        self.missing = missing
        self.after_writes = 0
        self._layout = None

    @property
    def layout(self) -> ChunkLayout:
        if self._layout is None:
            spec = ArraySpec(self.shape, self.dtype, self.fill)
            pipeline = CodecPipeline.from_config(BYTES).bind(ChunkSpec(self.chunks, self.dtype, self.fill))
            self._layout = ChunkLayout(
                spec=spec,
                grid=RegularGrid(self.shape, self.chunks),
                pipeline=pipeline,
                store=self.store,
                chunk_key=lambda c: "c/" + ".".join(map(str, c)),
                edge_chunks="clipped",
                store_fill_chunks=self.store_fill,
                missing_chunks=self.missing,
            )
        return self._layout

    @property
    def attributes(self) -> dict[str, Any]:
        return {}

    async def set_attributes(self, attributes: dict[str, Any]) -> None:
        pass

    async def set_shape(self, shape: tuple[int, ...]) -> None:
        await self.store.set("meta.json", json.dumps(list(shape)).encode())
        self.shape = tuple(shape)
        self._layout = None

    @property
    def metadata(self) -> dict[str, Any]:
        return {"shape": list(self.shape)}

    async def after_write(self) -> None:
        self.after_writes += 1


def make(shape=(10, 7), chunks=(4, 3), **kw) -> tuple[Array, ClippedDriver, MemoryStore]:
    store = MemoryStore()
    driver = ClippedDriver(store, shape, chunks, **kw)
    return Array(AsyncArray(driver, read_only=False)), driver, store


def test_edge_chunks_are_stored_at_their_clipped_shape():
    a, d, store = make()
    a[...] = np.arange(70, dtype="int16").reshape(10, 7) + 1
    # chunk (2, 2) covers rows 8..10 and columns 6..7: 2 x 1 elements
    assert len(sync(store.get("c/2.2"))) == 2 * 1 * 2
    assert len(sync(store.get("c/0.0"))) == 4 * 3 * 2
    np.testing.assert_array_equal(a[...], np.arange(70).reshape(10, 7) + 1)


@pytest.mark.parametrize("new_shape", [(13, 7), (10, 9), (5, 7), (10, 2), (3, 11), (0, 7), (16, 12)])
def test_resize_reencodes_edges_at_the_new_clipped_shape(new_shape):
    a, d, store = make()
    ref = np.arange(70, dtype="int16").reshape(10, 7) + 1
    a[...] = ref
    a.resize(new_shape)
    want = np.zeros(new_shape, "int16")
    overlap = tuple(slice(0, min(x, y)) for x, y in zip(ref.shape, new_shape))
    want[overlap] = ref[overlap]
    np.testing.assert_array_equal(a[...], want)
    grid = RegularGrid(new_shape, (4, 3))
    for coords in grid.all_coords():
        data = sync(store.get("c/" + ".".join(map(str, coords))))
        region = grid.chunk_region(coords)
        n = int(np.prod([s.stop - s.start for s in region]))
        if data is not None:
            assert len(data) == 2 * n, (coords, len(data), n)
    # nothing is left beyond the new shape
    keys = sync(_keys(store))
    for key in keys:
        coords = tuple(int(x) for x in key[2:].split("."))
        assert all(c * n < s for c, n, s in zip(coords, (4, 3), new_shape)), key


async def _keys(store):
    return [k async for k in store.list_prefix("c/")]


def test_append_writes_chunks_before_metadata():
    base = MemoryStore()
    rec = RecordingStore(base)
    driver = ClippedDriver(rec, (5, 3), (4, 3))
    a = Array(AsyncArray(driver, read_only=False))
    a[...] = 1
    rec.reset()
    assert a.append(np.full((6, 3), 2, "int16")) == (11, 3)
    ops = [(r.op, r.key) for r in rec.requests if r.op == "set"]
    assert ops[-1] == ("set", "meta.json")  # metadata last: chunks first
    assert {k for _, k in ops[:-1]} == {"c/1.0", "c/2.0"}
    want = np.concatenate([np.full((5, 3), 1), np.full((6, 3), 2)])
    np.testing.assert_array_equal(a[...], want)
    assert driver.after_writes == 2


def test_shrink_writes_metadata_first():
    rec = RecordingStore(MemoryStore())
    a = Array(AsyncArray(ClippedDriver(rec, (11, 3), (4, 3)), read_only=False))
    a[...] = 3
    rec.reset()
    a.resize(6, 3)
    assert rec.requests[0].key == "meta.json"
    np.testing.assert_array_equal(a[...], np.full((6, 3), 3))


def test_store_fill_chunks_materializes_every_chunk():
    a, d, store = make((9,), (4,), store_fill=True, missing="error", fill=7)
    a[...] = 7  # all-fill data is still stored
    assert sorted(sync(_keys(store))) == ["c/0", "c/1", "c/2"]
    a.resize(14)  # the added rows are written with the fill value
    assert sorted(sync(_keys(store))) == ["c/0", "c/1", "c/2", "c/3"]
    assert len(sync(store.get("c/3"))) == 2 * 2
    np.testing.assert_array_equal(a[...], np.full(14, 7))


def test_missing_chunk_is_an_error_when_the_layout_says_so():
    a, d, store = make((9,), (4,), store_fill=True, missing="error")
    a[...] = np.arange(9)
    sync(store.delete("c/1"))
    with pytest.raises(ChunkNotFoundError, match="c/1"):
        a[...]
    np.testing.assert_array_equal(a[0:4], np.arange(4))


def test_chunk_bytes_round_trip():
    a, d, store = make()
    a[...] = 5
    raw = a.read_chunk_bytes((2, 2))
    assert raw == np.full((2, 1), 5, "<i2").tobytes()
    a.write_chunk_bytes((2, 2), np.array([[8], [9]], "<i2").tobytes())
    assert a[8:10, 6].tolist() == [8, 9]
    a.write_chunk_bytes((2, 2), None)
    assert a.read_chunk_bytes((2, 2)) is None
    with pytest.raises(IndexError, match="outside the grid"):
        a.read_chunk_bytes((3, 0))


def test_not_resizable_formats_refuse_before_touching_chunks():
    a, d, store = make()
    a[...] = 1
    d.resizable = False
    before = dict(store._data) if hasattr(store, "_data") else None
    with pytest.raises(UnsupportedFeatureError):
        a.resize(3, 3)
    with pytest.raises(UnsupportedFeatureError):
        a.append(np.ones((1, 7)))
    np.testing.assert_array_equal(a[...], np.ones((10, 7)))
    if before is not None:
        assert dict(store._data) == before


def test_append_validates_the_shape():
    a, d, store = make()
    with pytest.raises(ValueError, match="cannot append"):
        a.append(np.ones((2, 6)))
    with pytest.raises(ValueError, match="out of range"):
        a.append(np.ones((2, 7)), axis=2)
    assert a.append(np.ones((10, 2)), axis=1) == (10, 9)
    assert a.append(np.ones((10, 2)), axis=-1) == (10, 11)


class ClippedMachine(RuleBasedStateMachine):
    """Writes, resizes and appends on a clipped layout against a NumPy oracle."""

    @initialize(
        chunks=st.tuples(st.integers(1, 5), st.integers(1, 5)),
        shape=st.tuples(st.integers(0, 12), st.integers(0, 12)),
        store_fill=st.booleans(),
    )
    def setup(self, chunks, shape, store_fill):
        self.array, self.driver, self.store = make(shape, chunks, store_fill=store_fill, fill=0)
        self.ref = np.zeros(shape, "int16")
        self.counter = 1

    @precondition(lambda self: self.ref.size > 0)
    @rule(data=st.data())
    def write(self, data):
        sel = tuple(
            slice(data.draw(st.integers(0, n - 1)), data.draw(st.integers(1, n)) + 0) for n in self.ref.shape
        )
        sel = tuple(slice(min(s.start, s.stop - 1), s.stop) if s.start >= s.stop else s for s in sel)
        self.counter += 1
        self.array[sel] = self.counter
        self.ref[sel] = self.counter

    @rule(shape=st.tuples(st.integers(0, 14), st.integers(0, 14)))
    def resize(self, shape):
        self.array.resize(shape)
        new = np.zeros(shape, "int16")
        overlap = tuple(slice(0, min(a, b)) for a, b in zip(self.ref.shape, shape))
        new[overlap] = self.ref[overlap]
        self.ref = new

    @rule(n=st.integers(0, 6), axis=st.integers(0, 1))
    def append(self, n, axis):
        shape = list(self.ref.shape)
        shape[axis] = n
        self.counter += 1
        values = np.full(shape, self.counter, "int16")
        self.array.append(values, axis)
        self.ref = np.concatenate([self.ref, values], axis=axis)

    @invariant()
    def matches(self):
        if hasattr(self, "ref"):
            assert self.array.shape == self.ref.shape
            np.testing.assert_array_equal(self.array[...], self.ref)


TestClippedMachine = ClippedMachine.TestCase
TestClippedMachine.settings = settings(
    max_examples=examples(40), stateful_step_count=12, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@pytest.mark.parametrize("shards", [None, (8, 6)])
def test_append_on_a_padded_zarr_array(shards):
    import shardstore

    a = shardstore.zarr3.create(MemoryStore(), shape=(5, 6), dtype="int32", chunks=(4, 3), shards=shards)
    a[...] = 1
    assert a.append(np.full((7, 6), 2)) == (12, 6)
    assert a.append(np.full((12, 1), 3), axis=1) == (12, 7)
    want = np.concatenate([np.full((5, 6), 1), np.full((7, 6), 2)])
    want = np.concatenate([want, np.full((12, 1), 3)], axis=1)
    np.testing.assert_array_equal(a[...], want)
