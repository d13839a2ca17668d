"""A value written as a stream of parts: how a whole shard reaches a store without being
held in memory at once.

A ``Streamed`` value is ``head_size`` reserved bytes, then the parts of ``body`` in order,
then a tail; ``finish()``, called once the body is consumed, gives the head (exactly
``head_size`` bytes, e.g. a shard index at the start of the file) and the tail (e.g. an index
at the end), or None when nothing is to be stored (the key is deleted).

Stores write it as they can: a local file streams the body into its temp file, writes the
head at offset 0 and renames it into place (``LocalStore.set_streamed_sync``); S3 streams a
value without a head larger than one part as a multipart upload, a smaller one as one PUT
(``S3Store.set_streamed``); every other store
collects the parts and writes them with one ``set`` (``collect`` / ``collect_async``).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..errors import StoreError

__all__ = ["Buffer", "Streamed", "SupportsUnitStreams", "checked_ends", "collect", "collect_async"]

#: one part of a streamed value
Buffer = bytes | bytearray | memoryview


@dataclass
class Streamed:
    """A value given as parts produced one after the other (see the module docstring)."""

    #: the parts between the head and the tail, in order, consumed once
    body: Iterable[Buffer] | AsyncIterable[Buffer]
    #: (head, tail) once ``body`` is consumed; None: store nothing (delete the key), which
    #: only a value whose body gave no part may answer (a store may have sent the parts)
    finish: Callable[[], tuple[bytes, bytes] | None]
    #: bytes reserved at the start for the head, which is known only at the end
    head_size: int = 0


def checked_ends(key: str, value: Streamed) -> tuple[bytes, bytes] | None:
    """``value.finish()``, with the head's size checked against the reservation."""
    ends = value.finish()
    if ends is not None and len(ends[0]) != value.head_size:
        raise StoreError(f"streamed value of {key!r}: a {len(ends[0])}-byte head for {value.head_size} reserved bytes")
    return ends


def collect(key: str, value: Streamed) -> list[Buffer] | None:
    """The parts of a value with a synchronous body, head first (None: store nothing)."""
    if not isinstance(value.body, Iterable):
        raise TypeError(f"streamed value of {key!r}: a synchronous body is needed here")
    body = list(value.body)
    ends = checked_ends(key, value)
    return None if ends is None else [ends[0], *body, ends[1]]


async def collect_async(key: str, value: Streamed) -> list[Buffer] | None:
    """``collect`` for a body that may also be asynchronous."""
    if isinstance(value.body, AsyncIterable):
        body = [part async for part in value.body]
        ends = checked_ends(key, value)
        return None if ends is None else [ends[0], *body, ends[1]]
    return collect(key, value)


class SupportsUnitStreams(Protocol):
    """Sharding adapters that write a whole unit (shard) from a stream of its values, laying
    each out as it arrives (``Store.unit_streams`` declares it)."""

    @property
    def streams_sync(self) -> bool:
        """Whether ``stream_unit_sync`` may be used (the base store writes from any thread)."""
        ...

    def stream_order(self, keys: Sequence[str]) -> list[str] | None:
        """``keys`` in the order the unit's layout takes them, when they are every key of
        one unit; None otherwise (the caller writes them the usual way)."""
        ...

    def stream_value(self, data: bytes) -> Buffer:
        """A value as stored in the unit (a data encoding the adapter applies), run by the
        caller's encoding threads rather than the writer."""
        ...

    def stream_unit_sync(self, keys: Sequence[str], values: Iterable[Buffer | None]) -> None:
        """Write the unit of ``keys`` (in ``stream_order``) from ``values`` (prepared by
        ``stream_value``; None: absent), consuming them one by one, on this thread."""
        ...

    async def stream_unit(self, keys: Sequence[str], values: AsyncIterable[Buffer | None]) -> None:
        """``stream_unit_sync`` with the values arriving asynchronously."""
        ...
