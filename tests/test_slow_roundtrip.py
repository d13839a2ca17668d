"""Long-running checks, excluded from the default run (``python -m pytest -m slow``)."""

from __future__ import annotations

import numpy as np
import pytest

import shardstore
from shardstore.demo import em_like_volume

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("codec", [{"name": "zstd", "configuration": {"level": 3, "checksum": False}},
                                   {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 1, "blocksize": 0}}])
def test_large_sharded_volume_both_ways_with_tensorstore(tmp_path, codec):
    """A 384^3 EM-like volume with edge shards: shardstore writes, tensorstore reads it and
    rewrites a region, shardstore reads everything back."""
    import tensorstore as ts

    vol = em_like_volume(384, seed=3)[:, :300, :]
    a = shardstore.zarr3.create(tmp_path / "v", shape=vol.shape, dtype="uint8", chunks=(64, 64, 64),
                                shards=(256, 256, 256), codecs=[codec])
    a[...] = vol
    t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path / "v")}}).result()
    assert np.array_equal(t.read().result(), vol)
    patch = np.full((100, 70, 90), 9, dtype="uint8")
    t[50:150, 200:270, 10:100].write(patch).result()
    vol[50:150, 200:270, 10:100] = patch
    assert np.array_equal(shardstore.open(tmp_path / "v")[...], vol)
