"""Hypothesis strategies for property tests of chunked arrays (needs ``hypothesis``).

One place for what the format test suites draw: dtypes, shapes, chunk and shard shapes, codec
chains, ``neuroglancer_uint64_sharded_v1`` specs, fill values, and selections (basic,
orthogonal, boxes). NumPy is the oracle the tests compare against; these only draw inputs.

>>> from hypothesis import given
>>> from shardstore.testing import strategies as sst
>>> @given(sst.shapes(max_rank=3, max_side=20).flatmap(sst.basic_selections))
... def test_reads(sel): ...
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from hypothesis import strategies as st

__all__ = [
    "CORE_DTYPES",
    "N5_COMPRESSIONS",
    "basic_selections",
    "bcolz_steps",
    "boxes",
    "chunk_shapes",
    "dtypes",
    "fill_values",
    "n5_compressions",
    "orthogonal_selections",
    "shapes",
    "shard_shapes",
    "strided_boxes",
    "uint64_keys",
    "uint64_sharding_specs",
    "zarr3_codec_chains",
]

#: the dtypes every format of the core handles (bool, ints, floats, complex)
CORE_DTYPES = ("bool", "int8", "uint16", "int32", "uint64", "float16", "float32", "float64", "complex64")

#: one N5 compression of each kind and variant (small block sizes: many lz4 / blosc blocks)
N5_COMPRESSIONS: tuple[dict[str, Any], ...] = (
    {"type": "raw"},
    {"type": "gzip", "level": 1},
    {"type": "gzip", "level": 1, "useZlib": True},
    {"type": "bzip2", "blockSize": 1},
    {"type": "xz", "preset": 0},
    {"type": "lz4", "blockSize": 64},
    {"type": "lz4", "blockSize": 6},
    {"type": "blosc", "cname": "lz4", "clevel": 5, "shuffle": -1},
    {"type": "zstd", "level": 1},
)


# -- dtypes, shapes, chunkings --------------------------------------------------------------------
def dtypes(names: Sequence[str] = CORE_DTYPES) -> st.SearchStrategy[np.dtype]:
    """One of ``names`` as a NumPy dtype."""
    return st.sampled_from([np.dtype(n) for n in names])


def shapes(min_rank: int = 1, max_rank: int = 3, min_side: int = 0, max_side: int = 20) -> st.SearchStrategy[tuple[int, ...]]:
    """Array shapes of ``min_rank..max_rank`` dimensions, each ``min_side..max_side``."""
    return st.integers(min_rank, max_rank).flatmap(
        lambda rank: st.tuples(*[st.integers(min_side, max_side)] * rank)
    )


def chunk_shapes(rank: int, min_side: int = 1, max_side: int = 10) -> st.SearchStrategy[tuple[int, ...]]:
    """Chunk (or N5 block) shapes of ``rank`` dimensions, each ``min_side..max_side``."""
    return st.tuples(*[st.integers(min_side, max_side)] * rank)


@st.composite
def shard_shapes(draw: st.DrawFn, chunks: tuple[int, ...], max_chunks_per_side: int = 3) -> tuple[int, ...] | None:
    """None (unsharded) or a Zarr v3 shard shape: a whole number of ``chunks`` per side."""
    if not draw(st.booleans()):
        return None
    return tuple(c * draw(st.integers(1, max_chunks_per_side)) for c in chunks)


# -- fill values ------------------------------------------------------------------------------
_FLOAT_WIDTHS: dict[int, Literal[16, 32, 64]] = {2: 16, 4: 32, 8: 64}


def _canonical_float(x: float, dtype: np.dtype) -> float:
    """Canonical NaN, no negative zero, representable in ``dtype``."""
    if math.isnan(x):
        return float("nan")
    v = float(np.asarray(x).astype(dtype))
    return 0.0 if v == 0 else v


@st.composite
def fill_values(draw: st.DrawFn, dtype: np.dtype) -> Any:
    """A fill value of ``dtype``: the extremes and 0 often, NaN and infinities for floats."""
    if dtype.kind == "b":
        return draw(st.booleans())
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return draw(st.sampled_from([0, int(info.min), int(info.max)]) | st.integers(int(info.min), int(info.max)))
    fdt = dtype if dtype.kind == "f" else np.dtype(f"f{dtype.itemsize // 2}")  # complex: its parts
    width = _FLOAT_WIDTHS[fdt.itemsize]
    comp = st.floats(width=width, allow_nan=True, allow_infinity=True).map(lambda x: _canonical_float(x, fdt))
    special = st.sampled_from([0.0, float("nan"), float("inf"), -float("inf"), 1.0])
    if dtype.kind == "f":
        return draw(special | comp)
    return complex(draw(special | comp), draw(special | comp))


# -- codecs and sharding specs ------------------------------------------------------------------
@st.composite
def zarr3_codec_chains(draw: st.DrawFn, dtype: np.dtype, rank: int) -> list[dict[str, Any]]:
    """A Zarr v3 ``codecs`` list: optional transpose, bytes (either endian), optional gzip /
    zstd / blosc, optional crc32c."""
    chain: list[dict[str, Any]] = []
    if draw(st.booleans()):
        order = draw(st.permutations(list(range(rank))))
        chain.append({"name": "transpose", "configuration": {"order": list(order)}})
    if dtype.itemsize == 1 and draw(st.booleans()):
        chain.append({"name": "bytes"})  # endian may be omitted for 1-byte types
    else:
        chain.append({"name": "bytes", "configuration": {"endian": draw(st.sampled_from(["little", "big"]))}})
    comp = draw(st.sampled_from([None, "gzip", "zstd", "blosc"]))
    if comp == "gzip":
        chain.append({"name": "gzip", "configuration": {"level": draw(st.integers(0, 9))}})
    elif comp == "zstd":
        chain.append({"name": "zstd", "configuration": {"level": draw(st.integers(-3, 9)), "checksum": draw(st.booleans())}})
    elif comp == "blosc":
        chain.append({
            "name": "blosc",
            "configuration": {
                "cname": draw(st.sampled_from(["lz4", "lz4hc", "zstd", "blosclz", "zlib"])),
                "clevel": draw(st.integers(0, 9)),
                "shuffle": draw(st.sampled_from(["noshuffle", "shuffle", "bitshuffle"])),
                "typesize": dtype.itemsize,
                "blocksize": 0,
            },
        })
    if draw(st.booleans()):
        chain.append({"name": "crc32c"})
    return chain


def n5_compressions() -> st.SearchStrategy[dict[str, Any]]:
    """One of ``N5_COMPRESSIONS`` (an N5 ``compression`` member)."""
    return st.sampled_from(N5_COMPRESSIONS)


def uint64_sharding_specs(
    max_bits: int = 3, encodings: Sequence[str] = ("raw", "gzip")
) -> st.SearchStrategy[dict[str, Any]]:
    """``neuroglancer_uint64_sharded_v1`` specs (JSON) of small geometries: both hashes,
    preshift / minishard / shard bits ``0..max_bits``, each index / data encoding."""
    bits = st.integers(0, max_bits)
    return st.builds(
        lambda h, pre, mb, sb, ie, de: {
            "@type": "neuroglancer_uint64_sharded_v1", "hash": h, "preshift_bits": pre, "minishard_bits": mb,
            "shard_bits": sb, "minishard_index_encoding": ie, "data_encoding": de,
        },
        st.sampled_from(["identity", "murmurhash3_x86_128"]), bits, bits, bits,
        st.sampled_from(list(encodings)), st.sampled_from(list(encodings)),
    )


def uint64_keys() -> st.SearchStrategy[int]:
    """uint64 keys: mostly a small range (keys share shards and minishards), plus the extremes."""
    return st.one_of(st.integers(0, 40), st.sampled_from([2**64 - 1, 2**63, 2**32 + 1]), st.integers(0, 2**64 - 1))


# -- selections -------------------------------------------------------------------------------
@st.composite
def basic_selections(draw: st.DrawFn, shape: tuple[int, ...]) -> Any:
    """A NumPy basic selection of ``shape``: ints (negative too), slices with any steps and
    out-of-range bounds, an Ellipsis or fewer items than dimensions, sometimes unwrapped."""
    items: list[Any] = []
    for n in shape:
        kinds = ["slice", "slice", "int", "full"] if n > 0 else ["slice", "full"]
        kind = draw(st.sampled_from(kinds))
        if kind == "int":
            items.append(draw(st.integers(-n, n - 1)))
        elif kind == "full":
            items.append(slice(None))
        else:
            bound = st.none() | st.integers(-n - 3, n + 3)
            step = draw(st.sampled_from([None, 1, 2, 3, -1, -2, -3]))
            items.append(slice(draw(bound), draw(bound), step))
    mode = draw(st.sampled_from(["plain", "plain", "ellipsis", "truncate"]))
    if mode == "ellipsis":
        i = draw(st.integers(0, len(items)))
        j = draw(st.integers(i, len(items)))
        items = items[:i] + [Ellipsis] + items[j:]
    elif mode == "truncate":
        items = items[: draw(st.integers(0, len(items)))] or [Ellipsis]
    if len(items) == 1 and draw(st.booleans()):
        return items[0]
    return tuple(items)


@st.composite
def orthogonal_selections(draw: st.DrawFn, shape: tuple[int, ...], unique: bool = False) -> tuple[Any, ...]:
    """Per dimension an int, a slice, an int array (negative ok) or a bool mask (``a.oindex``).
    ``unique``: no index twice in an int array (a write through it would be ambiguous)."""
    sel: list[Any] = []
    for n in shape:
        kinds = ["slice", "intarray", "boolarray", "int"] if n > 0 else ["slice", "intarray", "boolarray"]
        kind = draw(st.sampled_from(kinds))
        if kind == "int":
            sel.append(draw(st.integers(-n, n - 1)))
        elif kind == "slice":
            bound = st.none() | st.integers(-n - 2, n + 2)
            sel.append(slice(draw(bound), draw(bound), draw(st.sampled_from([None, 1, 2, -1, -3]))))
        elif kind == "boolarray":
            sel.append(np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool))
        else:
            vals = draw(st.lists(st.integers(-n, n - 1), max_size=6)) if n > 0 else []
            if unique:
                seen: dict[int, int] = {}
                for v in vals:
                    seen.setdefault(v % n, v)
                vals = list(seen.values())
            sel.append(np.array(vals, dtype=np.intp))
    return tuple(sel)


@st.composite
def boxes(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[slice, ...]:
    """A non-empty box ``[a, b)`` per dimension of ``shape`` (every side at least 1)."""
    out = []
    for n in shape:
        a = draw(st.integers(0, n - 1))
        b = draw(st.integers(a + 1, n))
        out.append(slice(a, b))
    return tuple(out)


@st.composite
def strided_boxes(draw: st.DrawFn, shape: tuple[int, ...], steps: Sequence[int] = (1, 1, 2, 3)) -> tuple[slice, ...]:
    """A possibly empty box per dimension with a positive step from ``steps``."""
    sel = []
    for n in shape:
        start = draw(st.integers(0, n))
        stop = draw(st.integers(start, n))
        sel.append(slice(start, stop, draw(st.sampled_from(list(steps)))))
    return tuple(sel)


# -- operation sequences ----------------------------------------------------------------------
def bcolz_steps(max_len: int = 200, max_steps: int = 10) -> st.SearchStrategy[list[tuple[Any, ...]]]:
    """Steps on a 1-d appendable array of up to about ``max_len`` rows: ``("append", n)``,
    ``("resize", n)``, ``("trim", n)``, ``("write", start, stop, step)``, ``("fancy", [i, ...])``."""
    return st.lists(
        st.one_of(
            st.tuples(st.just("append"), st.integers(0, max_len * 9 // 20)),
            st.tuples(st.just("resize"), st.integers(0, max_len)),
            st.tuples(st.just("trim"), st.integers(0, max_len * 3 // 10)),
            st.tuples(st.just("write"), st.integers(0, max_len), st.integers(0, max_len), st.integers(1, 5)),
            st.tuples(st.just("fancy"), st.lists(st.integers(0, max_len - 1), max_size=8)),
        ),
        max_size=max_steps,
    )
