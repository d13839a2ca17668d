"""Awaiting several coroutines at once, without a task when there is only one."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import TypeVar

__all__ = ["gather"]

T = TypeVar("T")


async def gather(aws: Iterable[Awaitable[T]]) -> list[T]:
    """``asyncio.gather`` of ``aws`` (their results in order, the first error raised), except
    that a single awaitable is awaited right here: no task and the event loop iterations it
    costs, on the path of the usual read of one chunk, one range or one shard."""
    todo = list(aws)
    if len(todo) == 1:
        return [await todo[0]]
    return list(await asyncio.gather(*todo))
