"""``StoreTests``: the shared pytest battery every Store (and every sharding adapter) passes.

Use it by subclassing in a test module (the class name must start with ``Test`` so that pytest
collects it) and providing a ``store`` fixture that returns a fresh, empty, writable Store::

    import pytest
    from shardstore.store import LocalStore
    from shardstore.testing import StoreTests

    class TestLocalStore(StoreTests):
        @pytest.fixture
        def store(self, tmp_path):
            return LocalStore(tmp_path / "root")

        # optional: how to view the same data read-only (default: ReadOnlyStore(store))
        def make_read_only(self, store):
            return LocalStore(store.root, read_only=True)

Stores with a restricted key space, such as a sharding adapter whose keys are inner-chunk
coordinates, override ``sample_keys`` (at least 3 distinct valid keys; keys with ``/`` in them
let the listing tests cover directories). ``supports_listing = False`` skips the listing and
``delete_prefix`` tests; ``supports_conditional_writes = False`` skips the tests that expect
``set_if`` to raise ``ConflictError``; ``supports_concurrent_writes = False`` skips the test that writes and
deletes different keys concurrently from separate calls (which a shard read-modify-write
without a per-shard lock can lose)::

    class TestZarrSharding(StoreTests):
        supports_listing = False

        @pytest.fixture
        def store(self):
            return ZarrShardingStore(MemoryStore(), layout)

        def sample_keys(self):
            return ["0.0", "0.1", "1.0", "3.2"]

Tests are plain synchronous functions that run their body with ``asyncio.run`` (no
pytest-asyncio needed); the ``store`` fixture is built outside that loop, so a store must not
bind itself to an event loop in ``__init__``. Values are generated deterministically.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest

from ..errors import ConflictError, InvalidKeyError, ReadOnlyError, StoreError
from ..store.base import MISSING, ByteRange, OffsetBR, RangeBR, Store, SuffixBR, slice_range
from ..store.streamed import Streamed
from ..store.wrappers import ReadOnlyStore

__all__ = ["StoreTests", "async_test", "BYTE_RANGES", "INVALID_KEYS"]

#: keys every store must refuse with InvalidKeyError
INVALID_KEYS = ["../x", "/abs", "a\\b", "a\x00b", "a//b", "", "a/../b", "./a", "a/"]

#: byte ranges checked against ``slice_range`` on a 1000-byte value (and on b"")
BYTE_RANGES: list[ByteRange | None] = [
    None,
    RangeBR(0, 10),
    RangeBR(10, 20),
    RangeBR(0, 1000),
    RangeBR(990, 2000),  # clipped at the end
    RangeBR(1000, 1010),  # starts at the end
    RangeBR(5000, 6000),  # entirely past the end
    RangeBR(7, 7),  # empty
    RangeBR(0, 0),
    OffsetBR(0),
    OffsetBR(123),
    OffsetBR(999),
    OffsetBR(1000),
    OffsetBR(10_000),
    SuffixBR(0),
    SuffixBR(1),
    SuffixBR(100),
    SuffixBR(1000),
    SuffixBR(5000),  # longer than the value: all of it
]


def async_test(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Turn ``async def test_x(self, store)`` into a sync test that runs it with asyncio.run."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(fn(*args, **kwargs))

    return wrapper


def _value(i: int, size: int = 100) -> bytes:
    return random.Random(i).randbytes(size)


class StoreTests:
    """Subclass and provide a ``store`` fixture; see the module docstring."""

    #: set False for stores that cannot list (the listing tests are then skipped)
    supports_listing: bool = True
    #: set False when concurrent writes of different keys may clobber each other (e.g. keys
    #: that share a shard and are read-modified-written by separate calls)
    supports_concurrent_writes: bool = True
    #: set False when ``set_if`` cannot notice a concurrent writer (the conflict tests are
    #: then skipped; ``get_versioned`` / ``set_if`` must still read and write)
    supports_conditional_writes: bool = True

    def sample_keys(self) -> list[str]:
        """Valid, distinct keys of this store's key space (at least 3)."""
        return ["a", "b/c", "b/d/e", "zarr.json", "c/0/0"]

    def make_read_only(self, store: Store) -> Store:
        """A read-only view of the same data as ``store``."""
        return ReadOnlyStore(store)

    def _need_listing(self) -> None:
        if not self.supports_listing:
            pytest.skip("this store does not support listing")

    # -- basic reads and writes ------------------------------------------------------------
    @async_test
    async def test_is_writable(self, store: Store) -> None:
        assert store.read_only is False
        assert repr(store)

    @async_test
    async def test_set_get_roundtrip(self, store: Store) -> None:
        keys = self.sample_keys()
        for i, key in enumerate(keys):
            await store.set(key, _value(i, 50 + i))
        for i, key in enumerate(keys):
            got = await store.get(key)
            assert type(got) is bytes
            assert got == _value(i, 50 + i), key

    @async_test
    async def test_missing_is_none(self, store: Store) -> None:
        keys = self.sample_keys()
        await store.set(keys[0], b"x")
        for key in keys[1:]:
            assert await store.get(key) is None
            for br in BYTE_RANGES:
                assert await store.get(key, br) is None, (key, br)
            assert await store.exists(key) is False
        assert await store.get_many([(k, None) for k in keys[1:]]) == [None] * (len(keys) - 1)

    @async_test
    async def test_byte_ranges(self, store: Store) -> None:
        key = self.sample_keys()[0]
        value = bytes(range(250)) * 4
        await store.set(key, value)
        for br in BYTE_RANGES:
            got = await store.get(key, br)
            assert type(got) is bytes, br
            assert got == slice_range(value, br), br
        assert await store.get(key, RangeBR(990, 2000)) == value[990:]
        assert await store.get(key, RangeBR(5000, 6000)) == b""
        assert await store.get(key, SuffixBR(5000)) == value
        assert await store.get(key, OffsetBR(10_000)) == b""

    @async_test
    async def test_empty_value(self, store: Store) -> None:
        key = self.sample_keys()[1]
        await store.set(key, b"")
        assert await store.exists(key) is True
        for br in BYTE_RANGES:
            assert await store.get(key, br) == b"", br  # present but empty, never None
        assert await store.get_many([(key, None), (key, RangeBR(0, 5)), (key, SuffixBR(3))]) == [b""] * 3

    @async_test
    async def test_bytes_like_values(self, store: Store) -> None:
        k1, k2 = self.sample_keys()[:2]
        await store.set(k1, bytearray(b"hello"))
        await store.set(k2, memoryview(b"world!")[1:])
        assert await store.get(k1) == b"hello"
        assert await store.get(k2) == b"orld!"

    @async_test
    async def test_overwrite(self, store: Store) -> None:
        key = self.sample_keys()[2]
        await store.set(key, _value(1, 500))
        await store.set(key, b"short")  # a shorter value must not keep the old tail
        assert await store.get(key) == b"short"
        await store.set(key, _value(2, 800))
        assert await store.get(key) == _value(2, 800)

    @async_test
    async def test_large_value(self, store: Store) -> None:
        key = self.sample_keys()[0]
        value = _value(7, 3 * 1024 * 1024 + 17)
        await store.set(key, value)
        assert await store.get(key) == value
        assert await store.get(key, SuffixBR(100)) == value[-100:]
        assert await store.get(key, RangeBR(1 << 20, (1 << 20) + 12345)) == value[1 << 20 : (1 << 20) + 12345]
        ranges = [RangeBR(i * 300_000, i * 300_000 + 5000) for i in range(11)]
        assert await store.get_many([(key, r) for r in ranges]) == [slice_range(value, r) for r in ranges]

    # -- batches ---------------------------------------------------------------------------
    @async_test
    async def test_get_many_order_mixed_missing_duplicates(self, store: Store) -> None:
        keys = self.sample_keys()
        present = keys[::2]
        values = {k: _value(i, 1000) for i, k in enumerate(keys) if k in present}
        for k, v in values.items():
            await store.set(k, v)
        requests: list[tuple[str, ByteRange | None]] = []
        for i, br in enumerate(BYTE_RANGES * 2):  # every range twice: duplicates
            requests.append((keys[i % len(keys)], br))
        requests += [(keys[0], RangeBR(3, 9)), (keys[0], RangeBR(3, 9)), (keys[1], None)]
        got = await store.get_many(requests)
        expected = [None if k not in values else slice_range(values[k], br) for k, br in requests]
        assert got == expected
        assert await store.get_many([]) == []

    @async_test
    async def test_get_many_many_ranges_one_key(self, store: Store) -> None:
        key = self.sample_keys()[1]
        value = _value(3, 300_000)
        await store.set(key, value)
        rng = random.Random(0)
        ranges: list[ByteRange] = []
        for _ in range(150):  # adjacent, overlapping, nested and far-apart ranges
            start = rng.randrange(0, 310_000)
            ranges.append(RangeBR(start, start + rng.choice([0, 1, 10, 1000, 70_000])))
        ranges += [RangeBR(0, 100), RangeBR(100, 200), RangeBR(50, 150), OffsetBR(299_990), SuffixBR(7)]
        got = await store.get_many([(key, r) for r in ranges])
        assert got == [slice_range(value, r) for r in ranges]
        # the whole value asked for in the same batch as ranges of it
        got = await store.get_many([(key, RangeBR(5, 9)), (key, None), (key, SuffixBR(2))])
        assert got == [value[5:9], value, value[-2:]]

    @async_test
    async def test_set_many_and_deletes(self, store: Store) -> None:
        keys = self.sample_keys()
        await store.set_many([(k, _value(i)) for i, k in enumerate(keys)])
        assert [await store.get(k) for k in keys] == [_value(i) for i in range(len(keys))]
        # None deletes; the other items overwrite
        await store.set_many([(k, None if i % 2 else b"new" + k.encode()) for i, k in enumerate(keys)])
        for i, k in enumerate(keys):
            assert await store.get(k) == (None if i % 2 else b"new" + k.encode()), k
        # a key given twice: the last item wins
        await store.set_many([(keys[0], b"first"), (keys[1], b"x"), (keys[0], b"last")])
        assert await store.get(keys[0]) == b"last"
        await store.set_many([(keys[1], b"again"), (keys[1], None)])
        assert await store.get(keys[1]) is None
        await store.set_many([])

    @async_test
    async def test_delete_idempotent(self, store: Store) -> None:
        keys = self.sample_keys()
        await store.set(keys[0], b"v")
        await store.set(keys[1], b"w")
        await store.delete(keys[0])
        assert await store.get(keys[0]) is None
        assert await store.exists(keys[0]) is False
        await store.delete(keys[0])  # again: fine
        await store.delete(keys[2])  # never existed: fine
        assert await store.get(keys[1]) == b"w"

    @async_test
    async def test_exists(self, store: Store) -> None:
        keys = self.sample_keys()
        assert not any([await store.exists(k) for k in keys])
        await store.set(keys[-1], b"1")
        assert [await store.exists(k) for k in keys] == [False] * (len(keys) - 1) + [True]

    @async_test
    async def test_concurrent_set_and_delete(self, store: Store) -> None:
        if not self.supports_concurrent_writes:
            pytest.skip("this store does not support concurrent writes of neighbouring keys")
        keys = self.sample_keys()
        for round_ in range(8):  # writers and deleters of neighbouring keys race each other
            await asyncio.gather(*(store.set(k, _value(round_ + i)) for i, k in enumerate(keys)))
            doomed = keys[round_ % 2 :: 2]
            await asyncio.gather(
                *(store.delete(k) for k in doomed),
                *(store.set(k, b"r%d" % round_) for k in keys if k not in doomed),
            )
            for k in keys:
                assert await store.get(k) == (None if k in doomed else b"r%d" % round_), (round_, k)

    # -- key validation and read-only ------------------------------------------------------
    @pytest.mark.parametrize("bad", INVALID_KEYS)
    @async_test
    async def test_invalid_keys(self, store: Store, bad: str) -> None:
        calls = [
            lambda: store.get(bad),
            lambda: store.get(bad, RangeBR(0, 1)),
            lambda: store.exists(bad),
            lambda: store.set(bad, b"x"),
            lambda: store.delete(bad),
            lambda: store.get_many([(self.sample_keys()[0], None), (bad, None)]),
            lambda: store.set_many([(self.sample_keys()[0], b"x"), (bad, b"x")]),
        ]
        for call in calls:
            with pytest.raises(InvalidKeyError):
                await call()

    @async_test
    async def test_read_only_refuses_writes(self, store: Store) -> None:
        keys = self.sample_keys()
        await store.set(keys[0], b"kept")
        ro = self.make_read_only(store)
        assert ro.read_only is True
        assert await ro.get(keys[0]) == b"kept"
        assert await ro.get_many([(keys[0], RangeBR(1, 3))]) == [b"ep"]
        assert await ro.exists(keys[0]) is True
        writes = [
            (keys[0], lambda: ro.set(keys[0], b"changed")),
            (keys[1], lambda: ro.set(keys[1], b"new")),
            (keys[0], lambda: ro.delete(keys[0])),
            (keys[1], lambda: ro.set_many([(keys[1], b"new"), (keys[0], None)])),
        ]
        for key, call in writes:
            with pytest.raises(ReadOnlyError) as info:
                await call()
            assert repr(key) in str(info.value), str(info.value)
        if self.supports_listing:
            with pytest.raises(ReadOnlyError):
                await ro.delete_prefix("")
        assert await store.get(keys[0]) == b"kept"
        assert await store.get(keys[1]) is None

    # -- listing ---------------------------------------------------------------------------
    @async_test
    async def test_list_prefix(self, store: Store) -> None:
        self._need_listing()
        keys = self.sample_keys()
        assert [k async for k in store.list_prefix("")] == []
        await store.set_many([(k, b"v") for k in keys])
        prefixes = {""} | {k[:i] for k in keys for i in range(1, len(k) + 1)}
        for prefix in sorted(prefixes):
            got = sorted([k async for k in store.list_prefix(prefix)])
            assert got == sorted(k for k in keys if k.startswith(prefix)), prefix
        assert [k async for k in store.list_prefix("nonexistent/")] == []

    @async_test
    async def test_list_dir(self, store: Store) -> None:
        self._need_listing()
        keys = self.sample_keys()
        await store.set_many([(k, b"v") for k in keys])
        dir_prefixes = {""} | {k[: i + 1] for k in keys for i, c in enumerate(k) if c == "/"}
        for prefix in sorted(dir_prefixes):
            rests = [k[len(prefix) :] for k in keys if k.startswith(prefix)]
            expected_keys = sorted(r for r in rests if "/" not in r)
            expected_dirs = sorted({r.split("/")[0] for r in rests if "/" in r})
            assert await store.list_dir(prefix) == (expected_keys, expected_dirs), prefix
            if prefix:  # the trailing '/' is optional
                assert await store.list_dir(prefix[:-1]) == (expected_keys, expected_dirs), prefix

    @async_test
    async def test_delete_prefix(self, store: Store) -> None:
        self._need_listing()
        keys = self.sample_keys()
        await store.set_many([(k, b"v") for k in keys])
        nested = [k for k in keys if "/" in k]
        if nested:
            prefix = nested[0].split("/")[0] + "/"
            await store.delete_prefix(prefix)
            for k in keys:
                assert await store.exists(k) is (not k.startswith(prefix)), k
            assert sorted([k async for k in store.list_prefix("")]) == sorted(
                k for k in keys if not k.startswith(prefix)
            )
        await store.delete_prefix("")
        assert [k async for k in store.list_prefix("")] == []
        for k in keys:
            assert await store.get(k) is None
        await store.set(keys[0], b"after")  # still usable
        assert await store.get(keys[0]) == b"after"

    # -- versioned reads and conditional writes --------------------------------------------
    @async_test
    async def test_sync_reads_agree_with_get(self, store: Store) -> None:
        """Stores that declare synchronous reads (files, memory, adapters over them) must
        read exactly what ``get`` reads, ranges and missing keys included, and their
        synchronous generation must follow writes as ``generation`` does."""
        reads = store.sync_reads
        if reads is None:
            return
        keys = self.sample_keys()
        value = bytes(range(250)) * 4
        await store.set(keys[0], value)
        await store.set(keys[1], b"")
        assert reads.get_sync(keys[0]) == await store.get(keys[0]) == value
        assert reads.get_sync(keys[1]) == b""
        for br in BYTE_RANGES:
            assert reads.get_sync(keys[0], br) == await store.get(keys[0], br), br
            assert reads.get_sync(keys[2], br) is None, br
        assert reads.get_sync(keys[2]) is None
        assert reads.get_ranges_sync(keys[0], list(BYTE_RANGES)) == [await store.get(keys[0], br) for br in BYTE_RANGES]
        assert reads.get_ranges_sync(keys[2], [None, BYTE_RANGES[0]]) == [None, None]
        unit_reads = store.sync_unit_reads
        if unit_reads is not None:
            many = [keys[2], keys[0], keys[1], keys[0]]
            assert unit_reads.get_many_sync(many) == await store.get_many([(k, None) for k in many])
            units = unit_reads.open_units_sync(many)
            try:
                assert [units.get_sync(k) for k in many] == await store.get_many([(k, None) for k in many])
                assert bytes(units.get_transient_sync(keys[0], 1 << 20) or b"") == value
                for br in BYTE_RANGES:
                    assert units.get_sync(keys[0], br) == await store.get(keys[0], br), br
            finally:
                units.close()
        opens = store.sync_opens
        if opens is not None:
            opened = opens.open_sync(keys[0])
            assert opened is not None and opens.open_sync(keys[2]) is None
            try:
                assert opened.size == len(value) and opened.read(0, opened.size) == value
                assert bytes(opened.read_transient(10, 20, 1 << 20)) == value[10:20]
                assert opened.generation == reads.generation_sync(keys[0])
                fd = opened.fileno()  # the open file a native reader reads (-1: none)
                if fd >= 0:
                    assert not hasattr(os, "pread") or os.pread(fd, len(value), 0) == value
                else:
                    assert store.file_paths is None
            finally:
                opened.close()
        before = reads.generation_sync(keys[0])
        if before is not None:
            assert before == await store.generation(keys[0])
            await store.set(keys[0], b"changed")
            assert reads.get_sync(keys[0]) == b"changed"
            assert reads.generation_sync(keys[0]) == await store.generation(keys[0]) != before

    @async_test
    async def test_tagged_reads_agree_with_get_and_checked_generation(self, store: Store) -> None:
        """Stores that declare tagged reads (HTTP, S3, the Zarr sharding adapter over them)
        read what ``get_many`` reads, each value tagged with the generation
        ``checked_generation`` tells while nothing changes (``MISSING`` for a missing key),
        and a new tag after a rewrite: the decoded-chunk cache keeps chunks under them."""
        tagged = store.tagged_reads
        if tagged is None:
            return
        keys = self.sample_keys()
        await store.set(keys[0], b"first value")
        many = [keys[0], keys[2], keys[0]]
        values, tags = await tagged.get_many_tagged(many)
        assert values == await store.get_many([(k, None) for k in many])
        before = await store.checked_generation(keys[0])
        assert tags == [before, MISSING, before] and before is not None
        await store.set(keys[0], b"rewritten")
        values, tags = await tagged.get_many_tagged(keys[:1])
        assert values == [b"rewritten"] and tags[0] == await store.checked_generation(keys[0]) != before

    @async_test
    async def test_sync_writes_agree_with_set(self, store: Store) -> None:
        """Stores that declare synchronous writes store, delete and read-modify-write exactly
        as ``set`` / ``delete`` / ``update_many`` do; read-only stores declare none."""
        writes = store.sync_writes
        if writes is None:
            return
        assert not store.read_only
        keys = self.sample_keys()
        writes.set_sync(keys[0], b"first")
        writes.set_sync(keys[0], b"second")  # replaces
        writes.set_sync(keys[1], b"")
        assert await store.get(keys[0]) == b"second" and await store.get(keys[1]) == b""
        writes.set_sync(keys[2], b"in place", atomic=False)  # (may skip the temp file)
        writes.set_sync(keys[2], b"again", atomic=False)
        assert await store.get(keys[2]) == b"again"
        writes.set_sync(keys[1], None)
        writes.set_sync(keys[2], None)  # deleting a missing key is fine
        assert await store.get(keys[1]) is None and await store.get(keys[2]) is None
        with pytest.raises(InvalidKeyError):
            writes.set_sync("../escape", b"x")
        seen: list[bytes | None] = []

        def append(old: bytes | None) -> bytes:
            seen.append(old)
            return (old or b"") + b"+"

        writes.update_many_sync([(keys[0], append), (keys[1], append), (keys[2], b"plain")])
        assert seen == [b"second", None]
        assert [await store.get(k) for k in keys[:3]] == [b"second+", b"+", b"plain"]

    @async_test
    async def test_set_streamed(self, store: Store) -> None:
        """A value given as a stream (``store.streamed``): head written last into its
        reserved bytes, the body's parts, the tail; ``finish`` None deletes the key."""
        keys = self.sample_keys()

        def streamed(body: Any, head: bytes = b"HEAD", tail: bytes = b"|tail") -> Streamed:
            return Streamed(body, lambda: (head, tail), len(head))

        async def parts() -> AsyncIterator[bytes]:
            for part in (b"as", b"", b"ync"):
                yield part

        await store.set_streamed(keys[0], streamed(iter([b"one", b"-", b"two"])))
        await store.set_streamed(keys[1], streamed(parts(), b"", b""))
        assert await store.get(keys[0]) == b"HEADone-two|tail"
        assert await store.get(keys[1]) == b"async"
        await store.set_streamed(keys[0], Streamed(iter([]), lambda: None))  # nothing: deleted
        assert await store.get(keys[0]) is None
        with pytest.raises(StoreError, match="reserved"):  # a head of another size than reserved
            await store.set_streamed(keys[1], Streamed(iter([b"x"]), lambda: (b"12", b""), 3))
        assert await store.get(keys[1]) == b"async"  # (the old value stays)
        writes = store.sync_writes
        if writes is not None:
            await asyncio.to_thread(store.set_streamed_sync, keys[2], streamed(iter([b"s", b"ync"])))
            assert await store.get(keys[2]) == b"HEADsync|tail"

    @async_test
    async def test_get_versioned_and_set_if(self, store: Store) -> None:
        key = self.sample_keys()[0]
        value, gen = await store.get_versioned(key)
        assert value is None
        assert gen is None or gen == MISSING
        await store.set_if(key, b"first", gen)  # created only if still missing
        value, gen = await store.get_versioned(key)
        assert value == b"first"
        assert gen != MISSING
        part, gen2 = await store.get_versioned(key, RangeBR(1, 3))
        assert part == b"ir"
        assert gen2 == gen  # a ranged read sees the same version
        await store.set_if(key, b"second", gen)
        assert await store.get(key) == b"second"
        _, gen = await store.get_versioned(key)
        await store.set_if(key, None, gen)  # a conditional delete
        assert await store.get(key) is None
        await store.set_if(key, b"anyway", None)  # None: unconditional
        assert await store.get(key) == b"anyway"

    @async_test
    async def test_set_if_conflicts(self, store: Store) -> None:
        if not self.supports_conditional_writes:
            pytest.skip("this store cannot notice concurrent writers")
        k0, k1 = self.sample_keys()[:2]
        _, missing = await store.get_versioned(k0)
        await store.set(k0, b"another writer")  # between our read and our write
        with pytest.raises(ConflictError) as info:
            await store.set_if(k0, b"mine", missing)
        assert k0 in str(info.value) and isinstance(info.value, StoreError)  # names the key
        assert await store.get(k0) == b"another writer"
        _, gen = await store.get_versioned(k0)
        await store.set(k0, b"changed again")
        for value in (b"stale", None):  # stale writes and stale deletes both lose
            with pytest.raises(ConflictError):
                await store.set_if(k0, value, gen)
        assert await store.get(k0) == b"changed again"
        _, gen1 = await store.get_versioned(k1)
        results = await asyncio.gather(
            *(store.set_if(k1, b"w%d" % i, gen1) for i in range(4)), return_exceptions=True
        )
        winners = [i for i, r in enumerate(results) if r is None]
        assert len(winners) == 1, results  # exactly one of the racing creators wins
        assert all(isinstance(r, ConflictError) for r in results if r is not None), results
        assert await store.get(k1) == b"w%d" % winners[0]

    @async_test
    async def test_set_if_read_only(self, store: Store) -> None:
        key = self.sample_keys()[0]
        ro = self.make_read_only(store)
        with pytest.raises(ReadOnlyError):
            await ro.set_if(key, b"x", None)
        with pytest.raises(InvalidKeyError):
            await store.set_if("../x", b"x", None)

    # -- what remote backends get wrong ----------------------------------------------------
    @async_test
    async def test_many_keys_in_one_batch(self, store: Store) -> None:
        keys = self.sample_keys()
        base = keys[-1]
        await store.set(base, _value(5, 70_000))
        # more requests than any store keeps in flight; ranges near, far, overlapping
        requests: list[tuple[str, ByteRange | None]] = [
            (k, RangeBR(i * 97 % 60_000, i * 97 % 60_000 + 300)) for i, k in enumerate([base] * 120 + keys[:-1] * 20)
        ]
        got = await store.get_many(requests)
        value = _value(5, 70_000)
        assert got == [slice_range(value, br) if k == base else None for k, br in requests]

    @async_test
    async def test_unusual_key_characters(self, store: Store) -> None:
        if self.sample_keys() != StoreTests.sample_keys(self):
            pytest.skip("this store has a restricted key space")
        keys = ["sp ace", "per%20cent", "plus+sign", "uni-\u00fc\u00df", "q=1&r", "dir name/x y", "a.b..c"]
        for i, k in enumerate(keys):
            await store.set(k, _value(i, 30))
        for i, k in enumerate(keys):
            assert await store.get(k) == _value(i, 30), k
            assert await store.get(k, SuffixBR(4)) == _value(i, 30)[-4:], k
        assert await store.get("per cent") is None  # no decoding of '%20' anywhere
        if self.supports_listing:
            assert sorted([k async for k in store.list_prefix("")]) == sorted(keys)
