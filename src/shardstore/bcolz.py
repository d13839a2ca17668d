"""bcolz carrays and ctables: ``from shardstore import bcolz`` / ``import shardstore.bcolz``.

The public API of ``shardstore.formats.bcolz``, importable under the short name the docs use;
the implementation lives in the format package.
"""

from .formats import bcolz as _format
from .formats.bcolz import *  # noqa: F403 -- re-exports exactly the format package's __all__

__all__ = list(_format.__all__)
