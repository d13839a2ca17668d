"""bcolz carrays and ctables: ``from shardstore import bcolz`` / ``import shardstore.bcolz``.

The public API of ``shardstore.formats.bcolz``, importable under the short name the docs use;
the implementation lives in the format package.
"""

from .formats import bcolz as _format
from .formats.bcolz import *

__all__ = list(_format.__all__)
