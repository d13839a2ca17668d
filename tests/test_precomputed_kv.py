"""The uint64 kv mapping's key checks (ShardedKV): what is a key, and what is refused."""

from __future__ import annotations

import numpy as np
import pytest

import shardstore.precomputed
from shardstore.errors import InvalidKeyError


@pytest.mark.parametrize("bad", ["a", 1.5, True, None, b"\x01"])
def test_non_integer_keys_are_refused_by_name(tmp_path, bad):
    kv = shardstore.precomputed.open_kv(tmp_path / "kv", sharding={
        "@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0,
        "minishard_bits": 0, "shard_bits": 0, "minishard_index_encoding": "raw", "data_encoding": "raw"}, mode="w")
    kv[np.uint64(3)] = b"x"  # numpy integers are keys
    with pytest.raises(InvalidKeyError, match="uint64 integers"):
        kv[bad] = b"y"
    assert dict(kv) == {3: b"x"}


@pytest.mark.parametrize("hash_", ["identity", "murmurhash3_x86_128"])
def test_bulk_update_groups_keys_by_shard(tmp_path, hash_):
    """A bulk update of plain int keys and bytes values (grouped by shard with NumPy): every
    key lands, a key given twice keeps its last value, and a later batch with one bad key
    (bool, negative, beyond uint64) is refused whole."""
    kv = shardstore.precomputed.open_kv(tmp_path / "kv", sharding={
        "@type": "neuroglancer_uint64_sharded_v1", "hash": hash_, "preshift_bits": 1,
        "minishard_bits": 2, "shard_bits": 3, "minishard_index_encoding": "gzip", "data_encoding": "raw"}, mode="w")
    rng = np.random.default_rng(5)
    keys = [int(k) for k in rng.integers(0, 2**63, 700, dtype=np.uint64)] + [2**64 - 1, 0]
    pairs = [(k, f"v{i}".encode()) for i, k in enumerate(keys)]
    pairs.append((keys[10], b"last"))
    kv.update(pairs)
    expected = dict(pairs)
    assert dict(kv) == expected
    assert len({kv.store.spec.locate(k)[0] for k in keys}) > 1
    for bad in (True, -1, 2**64):
        with pytest.raises(InvalidKeyError):
            kv.update([*((k, b"z") for k in keys[:300]), (bad, b"z")])
    assert dict(kv) == expected
