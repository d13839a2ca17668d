"""The single writes of a sharding adapter, as batches of one: an adapter rewrites a shard per
``update_many`` call, so ``set`` / ``delete`` / ``set_many`` all go through it."""

from __future__ import annotations

from collections.abc import Sequence

from ..store.base import Store

__all__ = ["BatchedWrites"]


class BatchedWrites(Store):
    """A store whose writes are all ``update_many`` batches (the sharding adapters)."""

    async def _set(self, key: str, value: bytes) -> None:
        await self.set_many([(key, value)])

    async def _delete(self, key: str) -> None:
        await self.set_many([(key, None)])

    async def set_many(self, items: Sequence[tuple[str, bytes | None]]) -> None:
        await self.update_many(items)
