"""Zarr v3 (with ``sharding_indexed``): ``shardstore.zarr3.create`` / ``open`` / groups."""

from .nodes import DEFAULT_CODECS, Group, create, create_group, open, open_group

__all__ = ["create", "open", "open_group", "create_group", "Group", "DEFAULT_CODECS"]
