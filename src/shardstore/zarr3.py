"""Zarr v3 arrays and groups (with ``sharding_indexed``): ``import shardstore.zarr3``.

The public API of ``shardstore.formats.zarr3``, importable under the short name the docs use;
the implementation lives in the format package.
"""

from .formats import zarr3 as _format
from .formats.zarr3 import *  # noqa: F403 -- re-exports exactly the format package's __all__

__all__ = list(_format.__all__)
