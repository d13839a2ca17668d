"""Hypothesis with NumPy as the oracle: N5 reads and partial writes over random shapes, block
sizes (edge blocks clipped on every axis), dtypes and compressions, in a memory store, on both
of the core's runners (blocking and async)."""

from __future__ import annotations

import numpy as np
import pytest
from _helpers import assert_bitexact, examples, random_array
from hypothesis import given, settings
from hypothesis import strategies as st

import shardstore
from shardstore import n5
from shardstore.testing import strategies as sst
from shardstore.testing.runners import RUNNERS, on_runner

DTYPES = ["uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64", "float32", "float64"]
SETTINGS = settings(max_examples=examples(40))


@st.composite
def datasets(draw):
    shape = draw(sst.shapes(1, 4, 0, 9))
    blocks = tuple(draw(st.integers(1, max(s, 1) + 1)) for s in shape)  # edge blocks clipped on every axis
    return shape, blocks, draw(st.sampled_from(DTYPES)), draw(sst.n5_compressions())


@st.composite
def cases(draw):
    shape, blocks, dtype, comp = draw(datasets())
    writes = [draw(sst.strided_boxes(shape)) for _ in range(draw(st.integers(1, 3)))]
    reads = [draw(sst.strided_boxes(shape)) for _ in range(2)]
    seed = draw(st.integers(0, 2**16))
    return shape, blocks, dtype, comp, writes, reads, seed


@pytest.mark.parametrize("runner", RUNNERS)
@SETTINGS
@given(cases())
def test_partial_writes_and_reads_match_numpy(runner, case) -> None:
    shape, blocks, dtype, comp, writes, reads, seed = case
    store = on_runner(shardstore.MemoryStore(), runner)
    a = n5.create(store, "ds", shape=shape, dtype=dtype, block_size=blocks, compression=comp)
    oracle = np.zeros(shape, dtype)
    for i, sel in enumerate(writes):
        value = random_array(oracle[sel].shape, dtype, seed + i)
        if i == 1:
            value = np.zeros_like(value)  # clearing a region may delete blocks
        a[sel] = value
        oracle[sel] = value
    for sel in reads:
        assert_bitexact(a[sel], oracle[sel], f"read {sel}")
    again = n5.open(store, path="ds")
    assert_bitexact(np.asarray(again), oracle)
    # every stored block has its clipped in-bounds size in the header
    import asyncio

    from shardstore.codecs.n5_block import read_block_header

    async def headers():
        keys = [k async for k in store.list_prefix("ds/") if not k.endswith("attributes.json")]
        return keys, await store.get_many([(k, None) for k in keys])

    keys, raws = asyncio.run(headers())
    for key, raw in zip(keys, raws):
        coords = tuple(int(c) for c in key.split("/")[1:])[::-1]
        expected = tuple(min(b, s - c * b) for c, b, s in zip(coords, blocks, shape))
        assert read_block_header(raw).c_shape == expected, key


@pytest.mark.parametrize("runner", RUNNERS)
@SETTINGS
@given(datasets(), st.data())
def test_resize_matches_numpy(runner, ds, data) -> None:
    shape, blocks, dtype, comp = ds
    store = on_runner(shardstore.MemoryStore(), runner)
    a = n5.create(store, "", shape=shape, dtype=dtype, block_size=blocks, compression=comp)
    oracle = random_array(shape, dtype, 1)
    a[...] = oracle
    new = tuple(data.draw(st.integers(0, 11)) for _ in shape)
    a.resize(new)
    expected = np.zeros(new, dtype)
    common = tuple(slice(0, min(o, n)) for o, n in zip(shape, new))
    expected[common] = oracle[common]
    assert_bitexact(np.asarray(n5.open(store)), expected)
