"""N5 (spec 4.0.0): ``shardstore.n5.create`` / ``open`` / groups, in NumPy C order.

The array's shape is the N5 ``dimensions`` reversed (as z5py and zarr 2's N5 store show it),
so a block's bytes map to a C-contiguous NumPy block; block keys are ``<dataset>/x/y/z``.
"""

from .metadata import N5_VERSION
from .nodes import (
    DEFAULT_COMPRESSION,
    Group,
    N5Array,
    create,
    create_group,
    open,
    open_group,
)

__all__ = ["DEFAULT_COMPRESSION", "N5_VERSION", "Group", "N5Array", "create", "create_group", "open", "open_group"]
