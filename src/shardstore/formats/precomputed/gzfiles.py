"""CloudVolume's gzipped chunk files: ``<name>.gz`` read where ``<name>`` is missing.

CloudVolume writes the chunks of unsharded scales gzipped by default (``compress=True``), as
``<name>.gz`` beside where ``<name>`` would be; Neuroglancer gets them through HTTP
``Content-Encoding``, tensorstore does not read them. This wrapper of a scale's chunk store
reads ``<name>`` and, when it is missing, ``<name>.gz`` (inflated, at most ``max_size``
bytes: a corrupt file or a bomb is a CodecError naming it). Writes go to ``<name>``, which
then shadows an old ``.gz``; a delete removes both, so a chunk set to zero cannot come back
from a stale ``.gz``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Generator, Hashable, Sequence
from typing import TYPE_CHECKING, Any

from ...codecs.gzip import gunzip
from ...errors import CodecError
from ...store.base import MISSING, ByteRange, Parts, Store, Update, slice_range
from ...store.unit_checks import UnitChecks
from ...store.wrappers import _Wrapper

if TYPE_CHECKING:
    from ...store.sync_protocols import (
        SupportsGetManyTagged,
        SupportsGetSync,
        SupportsGetTransientSync,
        SupportsSetSync,
    )

__all__ = ["GzipChunkFiles"]

GZ = ".gz"


class GzipChunkFiles(UnitChecks, _Wrapper):
    """``base`` with each missing key read from ``key + ".gz"`` (gunzipped) when that exists."""

    forwards_sync = False
    # native reads take ``<name>`` and leave a missing one to the generic path, which reads the
    # ``.gz``; native writes need ``raw_layout`` (chunk files in C order after a header), which
    # precomputed's Fortran-ordered chunks never have, so every write comes through here
    forwards_file_paths = True

    @property
    def absent_without_file(self) -> bool:
        return False  # (the value may be in ``<name>.gz``: the generic path looks there)

    def __init__(self, base: Store, max_size: int) -> None:
        super().__init__(base)
        self.max_size = max_size
        self.accepts_parts = base.accepts_parts
        self._gz_reads = base.sync_reads
        self._gz_transient = base.transient_reads
        self._gz_writes = None if self.read_only else base.sync_writes

    def __repr__(self) -> str:
        return f"GzipChunkFiles({self.base!r})"

    def _inflate(self, key: str, data: bytes, byte_range: ByteRange | None) -> bytes:
        try:
            value = gunzip(data, self.max_size)
        except CodecError as e:
            raise CodecError(f"chunk file {key + GZ!r}: {e}") from e
        return value if byte_range is None else slice_range(value, byte_range)

    # -- reads -------------------------------------------------------------------------------
    async def _get(self, key: str, byte_range: ByteRange | None) -> bytes | None:
        return (await self.get_many([(key, byte_range)]))[0]

    async def get_many(self, requests: Sequence[tuple[str, ByteRange | None]]) -> list[bytes | None]:
        values = await self.base.get_many(requests)
        missing = [i for i, v in enumerate(values) if v is None]
        if missing:
            gzs = await self.base.get_many([(requests[i][0] + GZ, None) for i in missing])
            for i, gz in zip(missing, gzs):
                if gz is not None:
                    key, br = requests[i]
                    values[i] = self._inflate(key, gz, br)
        return values

    # Tagged reads (HTTP, S3: each value with the ETag of the reply that carried it), with the
    # generation ``checked_generation`` gives: ``<name>``'s tag, or for a chunk stored as
    # ``<name>.gz`` the pair (MISSING, the .gz's tag). (Not ``versions_in_replies``: no
    # adapter reads ranges of these values against a version.)
    versions_in_replies = False

    @property
    def tagged_reads(self) -> SupportsGetManyTagged | None:
        return self if self.base.tagged_reads is not None else None

    async def get_many_tagged(self, keys: Sequence[str]) -> tuple[list[bytes | None], list[Hashable | None]]:
        tagged = self.base.tagged_reads
        assert tagged is not None, "called only when tagged_reads is declared"
        values, tags = await tagged.get_many_tagged(keys)
        missing = [i for i, v in enumerate(values) if v is None]
        if missing:
            gzs, gz_tags = await tagged.get_many_tagged([keys[i] + GZ for i in missing])
            for i, gz, gz_tag in zip(missing, gzs, gz_tags):
                tags[i] = tags[i] if tags[i] != MISSING else _pair(tags[i], gz_tag)
                if gz is not None:
                    values[i] = self._inflate(keys[i], gz, None)
        return values, tags

    # -- synchronous reads and writes: its own (the base's would miss the .gz files, and a
    # delete must remove the .gz too)
    @property
    def sync_reads(self) -> SupportsGetSync | None:
        return None if self._gz_reads is None else self

    def get_sync(self, key: str, byte_range: ByteRange | None = None) -> bytes | None:
        read = self._gz_reads
        assert read is not None, "called only when sync_reads is declared"
        value = read.get_sync(key, byte_range)
        if value is None:
            gz = read.get_sync(key + GZ)
            if gz is not None:
                return self._inflate(key, gz, byte_range)
        return value

    @property
    def transient_reads(self) -> SupportsGetTransientSync | None:
        return None if self._gz_transient is None or self._gz_reads is None else self

    def get_transient_sync(self, key: str, keep_bytes: int) -> bytes | memoryview | None:
        transient, read = self._gz_transient, self._gz_reads
        assert transient is not None and read is not None, "called only when transient_reads is declared"
        value = transient.get_transient_sync(key, keep_bytes)
        if value is None:
            gz = read.get_sync(key + GZ)
            if gz is not None:
                return self._inflate(key, gz, None)
        return value

    def get_ranges_sync(self, key: str, ranges: Sequence[ByteRange | None]) -> list[bytes | None]:
        read = self._gz_reads
        assert read is not None, "called only when sync_reads is declared"
        values = read.get_ranges_sync(key, ranges)
        if values and values[0] is None:
            gz = read.get_sync(key + GZ)
            if gz is not None:
                return [self._inflate(key, gz, br) for br in ranges]
        return values

    # A value may live in either of two files, and reads take ``<name>`` when it exists: then
    # its token alone says which value a read gets; else the pair (MISSING, the .gz's token).
    # (One stat or HEAD per chunk instead of two, where chunks are stored plain.)
    def generation_sync(self, key: str) -> Hashable | None:
        read = self._gz_reads
        if read is None:
            return None
        return self.unit_generation(key, read.generation_sync)

    async def generation(self, key: str) -> Hashable | None:
        plain = await self.base.generation(key)
        return plain if plain != MISSING else _pair(plain, await self.base.generation(key + GZ))

    async def checked_generation(self, key: str) -> Hashable | None:
        plain = await self.base.checked_generation(key)
        return plain if plain != MISSING else _pair(plain, await self.base.checked_generation(key + GZ))

    def unit_generation(self, key: str, ask: Callable[[str], Hashable | None]) -> Hashable | None:
        plain = ask(key)
        return plain if plain != MISSING else _pair(plain, ask(key + GZ))

    async def exists(self, key: str) -> bool:
        return await self.base.exists(key) or await self.base.exists(key + GZ)

    async def _list_prefix(self, prefix: str) -> AsyncIterator[str]:
        seen: set[str] = set()
        async for key in self.base.list_prefix(prefix):
            name = key.removesuffix(GZ)
            if name not in seen:
                seen.add(name)
                yield name

    # -- writes ------------------------------------------------------------------------------
    async def _set(self, key: str, value: bytes) -> None:
        await self.base.set(key, value)

    async def set_many(self, items: Sequence[tuple[str, bytes | None]]) -> None:
        if items:
            self._check_writable(items[0][0], more=len(items) - 1)
        await self.base.set_many([*items, *((k + GZ, None) for k, v in items if v is None)])

    async def _delete(self, key: str) -> None:
        await self.base.set_many([(key, None), (key + GZ, None)])

    async def get_ranges_at(
        self, key: str, ranges: Sequence[ByteRange | None], generation: Hashable | None
    ) -> list[bytes | None] | None:
        return await self.get_many([(key, br) for br in ranges])  # (no generations here)

    @property
    def sync_writes(self) -> SupportsSetSync | None:
        return None if self._gz_writes is None or self._gz_reads is None else self

    def set_sync(self, key: str, value: bytes | Parts | None, atomic: bool = True) -> None:
        writes = self._gz_writes
        assert writes is not None, "called only when sync_writes is declared"
        self._check_writable(key)
        writes.set_sync(key, value, atomic)
        if value is None:
            writes.set_sync(key + GZ, None)

    async def update_many(self, items: Sequence[tuple[str, bytes | Parts | Update | None]]) -> None:
        steps = self._update_steps(items)
        step = next(steps, None)
        while step is not None:
            kind, arg = step
            try:
                result: Any = await (self.base.update_many(arg) if kind == "update" else
                                     self.base.get_many(arg) if kind == "get" else self.base.set_many(arg))
            except _NeedGz as e:
                step = steps.throw(e)
                continue
            step = _send(steps, result)

    def update_many_sync(self, items: Sequence[tuple[str, bytes | Parts | Update | None]]) -> None:
        writes, reads = self._gz_writes, self._gz_reads
        assert writes is not None and reads is not None, "called only when sync_writes is declared"
        steps = self._update_steps(items)
        step = next(steps, None)
        while step is not None:
            kind, arg = step
            result: Any = None
            try:
                if kind == "update":
                    writes.update_many_sync(arg)
                elif kind == "get":
                    result = [reads.get_sync(k, br) for k, br in arg]
                else:
                    for k, v in arg:
                        writes.set_sync(k, v)
            except _NeedGz as e:
                step = steps.throw(e)
                continue
            step = _send(steps, result)

    def _update_steps(
        self, items: Sequence[tuple[str, bytes | Parts | Update | None]]
    ) -> Generator[tuple[str, Any], Any, None]:
        """The one description of ``update_many`` (run by ``update_many`` and
        ``update_many_sync``, which only differ in how they wait): the base's
        read-modify-write of ``<name>``; an update of a chunk that only has a ``.gz`` starts
        from the inflated ``.gz`` (which shardstore never rewrites, so it may be read
        beforehand), and a chunk that becomes empty loses its ``.gz`` too. Yields
        ``("update", items)`` (the base's ``update_many``; a ``_NeedGz`` it raises is thrown
        back in), ``("get", requests)`` (values sent back) and ``("set", items)``.

        A ``.gz`` is fetched only for chunks found missing: their updates stop the batch,
        which is then run again knowing those ``.gz`` files (the core's updates are merges
        of a region: running one again gives the same chunk).
        """
        if items:
            self._check_writable(items[0][0], more=len(items) - 1)
        gz_old: dict[str, bytes | None] = {}
        need: list[str] = []
        emptied: list[str] = []

        def from_gz(key: str, update: Update) -> Update:
            def merged(old: bytes | None) -> bytes | Parts | None:
                if old is None:
                    if key not in gz_old:
                        need.append(key)
                        raise _NeedGz(key)
                    gz = gz_old[key]
                    old = None if gz is None else self._inflate(key, gz, None)
                new = update(old)
                if new is None and gz_old.get(key) is not None:
                    emptied.append(key)
                return new

            return merged

        out = [(k, from_gz(k, v) if callable(v) else v) for k, v in items]
        out += [(k + GZ, None) for k, v in items if v is None]
        while True:  # (each round learns the .gz of at least one more missing chunk)
            try:
                yield "update", out
                break
            except _NeedGz:
                keys = [k for k in dict.fromkeys(need) if k not in gz_old]
                if not keys:
                    raise
                gz_old.update(zip(keys, (yield "get", [(k + GZ, None) for k in keys])))
        if emptied:
            yield "set", [(k + GZ, None) for k in dict.fromkeys(emptied)]


def _send(steps: Generator[tuple[str, Any], Any, None], result: Any) -> tuple[str, Any] | None:
    """The next step of an ``_update_steps`` given the last one's result (None: done)."""
    try:
        return steps.send(result)
    except StopIteration:
        return None


def _pair(plain: Hashable | None, gz: Hashable | None) -> Hashable | None:
    """The generation of a chunk stored as ``<name>.gz`` (``plain``: MISSING): both files' tokens."""
    return None if plain is None or gz is None else (plain, gz)


class _NeedGz(Exception):
    """Raised inside an update of a missing chunk whose ``.gz`` has not been read yet."""
