"""Neuroglancer precomputed: volumes (``open``, ``create``, ``add_scale``) and the sharded
uint64 key-value store (``open_kv``).

>>> import shardstore, numpy as np
>>> a = shardstore.precomputed.create("memory://", data_type="uint8",
...     scales=[{"size": [100, 80, 20], "chunk_size": [32, 32, 8], "resolution": [4, 4, 40]}])
>>> a[10:20, 5:6, 0] = 7      # [x, y, z, channel], relative to voxel_offset
>>> a.shape, int(np.asarray(a).sum())
((100, 80, 20, 1), 70)
"""

from .kv import open_kv
from .nodes import add_scale, create, open, read_info, remove_scales

__all__ = ["open", "create", "add_scale", "remove_scales", "read_info", "open_kv"]
