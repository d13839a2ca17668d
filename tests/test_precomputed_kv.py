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
