"""bcolz 1.x carrays and ctables on disk: ``shardstore.bcolz.open`` / ``carray`` / ``ctable``."""

from .carray import CArray, carray, iterblocks
from .ctable import CTable, ctable
from .nodes import create, open, open_node

__all__ = ["open", "carray", "ctable", "CArray", "CTable", "iterblocks", "create", "open_node"]
