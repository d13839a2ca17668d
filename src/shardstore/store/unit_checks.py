"""``Store.sync_checks`` for adapters whose values live in units of their base store.

A sharding adapter's inner chunk lives in a shard object, a precomputed chunk in ``<name>`` or
``<name>.gz``: its generation is the base's generation of that unit. Such an adapter declares
blocking checks when its base does (HTTP, S3) and says only how a key maps to its unit's
generation (``unit_generation``), for any way of asking the base.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import Store
    from .sync_protocols import SupportsCheckedGenerationSync

__all__ = ["UnitChecks"]


class UnitChecks:
    """A mixin (before the ``Store`` base) declaring ``sync_checks`` when ``self.base`` does."""

    base: Store

    @property
    def sync_checks(self) -> SupportsCheckedGenerationSync | None:
        return None if self.base.sync_checks is None else self

    def checked_generation_sync(self, key: str) -> Hashable | None:
        checks = self.base.sync_checks
        assert checks is not None, "called only when sync_checks is declared"
        return self.unit_generation(key, checks.checked_generation_sync)

    def unit_generation(self, key: str, ask: Callable[[str], Hashable | None]) -> Hashable | None:
        """The generation of ``key``'s unit, ``ask`` being a blocking generation of the base."""
        raise NotImplementedError
