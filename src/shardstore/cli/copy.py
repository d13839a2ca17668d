"""``shardstore copy``: the old name of ``shardstore convert`` (same arguments, same code)."""

from __future__ import annotations

from . import convert as _convert
from ._common import AddCommand

run = _convert.run


def add_parser(add: AddCommand) -> None:
    _convert.add_parser(add, "copy")
