"""N5 containers, groups and datasets: ``from shardstore.n5 import create, open``.

The public API of ``shardstore.formats.n5``, importable under the short name the docs use;
the implementation lives in the format package.
"""

from .formats import n5 as _format
from .formats.n5 import *  # noqa: F403 -- re-exports exactly the format package's __all__

__all__ = list(_format.__all__)
