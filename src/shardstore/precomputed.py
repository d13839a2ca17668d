"""Neuroglancer precomputed volumes and the sharded uint64 key-value store: ``import shardstore.precomputed``.

The public API of ``shardstore.formats.precomputed``, importable under the short name the docs use;
the implementation lives in the format package.
"""

from .formats import precomputed as _format
from .formats.precomputed import *  # noqa: F403 -- re-exports exactly the format package's __all__

__all__ = list(_format.__all__)
