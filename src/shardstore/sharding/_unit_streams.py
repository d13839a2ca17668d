"""A sharding adapter's streamed whole-shard write, described once for both adapters: each
value placed in the shard's layout as it arrives (a ``ShardBuilder``), the bytes to write
passed on to the base store's ``set_streamed`` (``store.streamed``), the index last.

``positions[n]`` says where the n-th value goes (an inner chunk's index, a (key, minishard)
pair); ``place(position, value)`` records it and returns the bytes to write next.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Sequence
from typing import TypeVar

from ..store.base import Store
from ..store.streamed import Buffer, Streamed

__all__ = ["stream_shard", "stream_shard_sync"]

P = TypeVar("P")

#: records a value at its position; returns the bytes to write next (possibly none)
Place = Callable[[P, "Buffer | None"], Iterable[Buffer]]
#: (head, tail) once every value is placed (None: no value, the shard is not stored)
Finish = Callable[[], "tuple[bytes, bytes] | None"]


def stream_shard_sync(
    base: Store, key: str, head_size: int, place: Place[P], finish: Finish, positions: Sequence[P],
    values: Iterable[Buffer | None],
) -> None:
    """Write shard ``key`` of ``base`` from ``values``, consumed one by one on this thread."""

    def body() -> Iterator[Buffer]:
        for position, data in zip(positions, values):
            yield from place(position, data)

    base.set_streamed_sync(key, Streamed(body(), finish, head_size))


async def stream_shard(
    base: Store, key: str, head_size: int, place: Place[P], finish: Finish, positions: Sequence[P],
    values: AsyncIterable[Buffer | None],
) -> None:
    """``stream_shard_sync`` with the values arriving asynchronously."""

    async def body() -> AsyncIterator[Buffer]:
        where = iter(positions)
        async for data in values:
            for part in place(next(where), data):
                yield part

    await base.set_streamed(key, Streamed(body(), finish, head_size))
