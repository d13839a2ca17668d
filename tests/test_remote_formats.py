"""Every format on remote stores, against real servers: SeaweedFS (S3) and nginx (HTTP ranges).

Per format: a round trip through ``s3://`` URLs with ``storage_options`` (created by
``shardstore.<format>.create``, read back by ``shardstore.open``); request counts as the
server received them (a counting proxy in front of SeaweedFS; nginx's access log): a write
unit (shard, or chunk) in one PUT, cold and warm point reads, and for sharded formats ranged
GETs only and adjacent inner chunks in one ranged GET; interop with tensorstore's s3 kvstore
both ways; reads over nginx; and, for sharded formats, a conditional shard rewrite that loses
a race (ConflictError, or a retry when asked for). Besides the table: N5 compressions, bcolz
ctables and the precomputed uint64 sharded key-value store (``open_kv``).

Adding a format = one ``RemoteFormat`` entry in ``FORMATS`` (its writer, its tensorstore
driver specs, and its request budgets); the tests are parametrized over that table.
"""

from __future__ import annotations

import asyncio
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import shardstore
from shardstore.errors import ConflictError, StoreError
from shardstore.store import store_from_url

pytest_plugins = ["_servers"]
pytestmark = pytest.mark.timeout(180)

if TYPE_CHECKING:
    from _servers import CountingProxy, FaultyServer, Nginx, SeaweedFS

SHAPE, SHARD, CHUNK = 64, 32, 8  # 8 shards of 4x4x4 = 64 inner chunks
BLOCK = 2 * CHUNK  # chunk edge of the unsharded formats (64 chunks)


def _same(t: Any) -> Any:
    return t


@dataclass(frozen=True)
class RemoteFormat:
    """How a format is written and read in these tests (one entry per format)."""

    name: str
    #: create the array at ``url`` (a path or URL) with ``storage_options``; ``shape`` /
    #: ``shard`` / ``chunk`` are cubes' edges; returns the open Array
    create: Callable[..., Any]
    dtype: str = "uint16"
    #: the node's path below the URL (``shardstore.open(url, path=...)``)
    path: str = ""
    #: sharded: partial writes read-merge-write shards conditionally, reads are ranged
    sharded: bool = True
    #: the selection of one write unit (a whole shard, or a whole chunk)
    unit: tuple[slice, ...] = (slice(0, SHARD),) * 3
    #: the tensorstore spec opening the array over a kvstore dict (None: no interop test)
    ts_open: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    #: the tensorstore spec creating the array described by shardstore ``metadata``
    ts_create: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]] | None = None
    #: tensorstore's view of the array in shardstore's axis order
    ts_view: Callable[[Any], Any] = _same
    #: the test data (a cube) in the array's shape (precomputed adds the channel axis)
    expand: Callable[[np.ndarray], np.ndarray] = _same
    cold_gets: int = 2  # point read from a cold index cache
    warm_gets: int = 1  # ... and with the shard index cached


# -- zarr3 ------------------------------------------------------------------------------------
def _zarr3_create(url: Any, storage_options: dict | None, *, shape: int, shard: int, chunk: int, dtype: str) -> Any:
    return shardstore.open(url, mode="w", storage_options=storage_options, format="zarr3",
                           shape=(shape,) * 3, dtype=dtype, chunks=(chunk,) * 3, shards=(shard,) * 3)


# -- N5: a dataset in a container ---------------------------------------------------------------
N5_PATH = "vol/data"


def _n5_create(url: Any, storage_options: dict | None, *, shape: int, shard: int, chunk: int, dtype: str,
               compression: Any = "gzip") -> Any:
    return shardstore.n5.create(url, N5_PATH, shape=(shape,) * 3, dtype=dtype, block_size=(2 * chunk,) * 3,
                                compression=compression, storage_options=storage_options)


_N5_KEYS = ("dimensions", "blockSize", "dataType", "compression")


# -- precomputed -------------------------------------------------------------------------------
def _sharding(shape: int, shard: int, chunk: int) -> dict[str, Any]:
    """Identity-hashed shards holding ``shard``^3 aligned cubes, 8 minishards each."""
    per_shard_bits = 3 * (shard // chunk).bit_length() - 3  # log2 of chunks per shard
    grid_bits = 3 * (shape // chunk - 1).bit_length()
    return {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": per_shard_bits - 3,
            "minishard_bits": 3, "shard_bits": grid_bits - per_shard_bits,
            "minishard_index_encoding": "gzip", "data_encoding": "raw"}


def _precomputed(encoding: str, sharded: bool) -> Callable[..., Any]:
    def create(url: Any, storage_options: dict | None, *, shape: int, shard: int, chunk: int, dtype: str) -> Any:
        scale: dict[str, Any] = {"size": [shape] * 3, "chunk_size": [chunk if sharded else 2 * chunk] * 3,
                                 "resolution": [4, 4, 40], "encoding": encoding}
        if sharded:
            scale["sharding"] = _sharding(shape, shard, chunk)
        return shardstore.precomputed.create(url, data_type=dtype, scales=[scale], storage_options=storage_options)

    return create


def _ts_precomputed_create(kv: dict[str, Any], info: dict[str, Any]) -> dict[str, Any]:
    scale = dict(info["scales"][0])
    scale["chunk_size"] = scale.pop("chunk_sizes")[0]
    return {"driver": "neuroglancer_precomputed", "kvstore": kv,
            "multiscale_metadata": {k: info[k] for k in ("type", "data_type", "num_channels")},
            "scale_metadata": scale}


def _precomputed_format(name: str, encoding: str, sharded: bool, dtype: str = "uint16") -> RemoteFormat:
    return RemoteFormat(
        name, _precomputed(encoding, sharded), dtype=dtype, sharded=sharded,
        unit=(slice(0, SHARD if sharded else BLOCK),) * 3,
        ts_open=lambda kv: {"driver": "neuroglancer_precomputed", "kvstore": kv},
        ts_create=_ts_precomputed_create, expand=lambda d: d[..., None],
        cold_gets=3 if sharded else 1)  # sharded: shard index, minishard index, chunk


# -- bcolz carray ------------------------------------------------------------------------------
def _bcolz_create(url: Any, storage_options: dict | None, *, shape: int, shard: int, chunk: int, dtype: str) -> Any:
    return shardstore.bcolz.create(url, storage_options=storage_options, data=np.zeros((shape,) * 3, dtype),
                                   chunklen=2 * chunk)


FORMATS = {f.name: f for f in [
    RemoteFormat("zarr3", _zarr3_create, ts_open=lambda kv: {"driver": "zarr3", "kvstore": kv},
                 ts_create=lambda kv, meta: {"driver": "zarr3", "kvstore": kv, "metadata": meta}),
    RemoteFormat("n5", _n5_create, path=N5_PATH, sharded=False, unit=(slice(0, BLOCK),) * 3,
                 ts_open=lambda kv: {"driver": "n5", "kvstore": kv},
                 ts_create=lambda kv, meta: {"driver": "n5", "kvstore": kv, "metadata": {k: meta[k] for k in _N5_KEYS}},
                 ts_view=lambda t: t.T, cold_gets=1),  # tensorstore shows N5 in N5 (reversed) order
    _precomputed_format("precomputed", "raw", sharded=False),
    _precomputed_format("precomputed-png", "png", sharded=False),
    _precomputed_format("precomputed-sharded", "raw", sharded=True),
    _precomputed_format("precomputed-sharded-cseg", "compressed_segmentation", sharded=True, dtype="uint32"),
    RemoteFormat("bcolz", _bcolz_create, sharded=False, unit=(slice(0, BLOCK),), cold_gets=1),
]}
SHARDED = sorted(n for n, f in FORMATS.items() if f.sharded)
INTEROP = sorted(n for n, f in FORMATS.items() if f.ts_open is not None)


@pytest.fixture(params=sorted(FORMATS))
def fmt(request: pytest.FixtureRequest) -> RemoteFormat:
    return FORMATS[request.param]


@pytest.fixture(params=SHARDED)
def sharded_fmt(request: pytest.FixtureRequest) -> RemoteFormat:
    return FORMATS[request.param]


@pytest.fixture(params=INTEROP)
def interop_fmt(request: pytest.FixtureRequest) -> RemoteFormat:
    return FORMATS[request.param]


def _data(fmt: RemoteFormat, seed: int = 0, shape: int = SHAPE) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return fmt.expand(rng.integers(1, 60000, size=(shape,) * 3).astype(fmt.dtype))


def _new(fmt: RemoteFormat, url: Any, opts: dict | None) -> Any:
    return fmt.create(url, opts, shape=SHAPE, shard=SHARD, chunk=CHUNK, dtype=fmt.dtype)


def _url(server: SeaweedFS, name: str) -> str:
    return server.url(f"{name}-{uuid.uuid4().hex[:10]}")


def _gets(proxy: CountingProxy) -> list[tuple[str, str, str | None]]:
    return [r for r in proxy.requests if r[0] == "GET"]


# -- S3 round trip and request counts ----------------------------------------------------------
def test_roundtrip_over_s3_urls(seaweedfs: SeaweedFS, fmt: RemoteFormat) -> None:
    url, opts = _url(seaweedfs, fmt.name), seaweedfs.storage_options()
    data = _data(fmt)
    a = _new(fmt, url, opts)
    a[...] = data
    a[1:5, 3:40, 60:] = 7  # partial writes (sharded: read-merge-write with set_if)
    data[1:5, 3:40, 60:] = 7
    b = shardstore.open(url, path=fmt.path, storage_options=opts)
    assert b.read_only and type(b) is type(a)
    np.testing.assert_array_equal(b[...], data)
    np.testing.assert_array_equal(b[10:20, 33:35, 5], data[10:20, 33:35, 5])


def test_request_counts_at_the_server(seaweedfs_proxy: tuple[SeaweedFS, CountingProxy], fmt: RemoteFormat) -> None:
    server, proxy = seaweedfs_proxy
    url, opts = _url(server, fmt.name), server.storage_options()
    data = _data(fmt)
    a = _new(fmt, url, opts)
    proxy.reset()
    a[fmt.unit] = data[fmt.unit]  # exactly one whole shard (or chunk)
    assert proxy.count("PUT") == 1 and proxy.count() == 1, proxy.requests
    a[...] = data

    r = shardstore.open(url, path=fmt.path, storage_options=opts)
    proxy.reset()
    np.testing.assert_array_equal(r[:CHUNK, :CHUNK, :CHUNK], data[:CHUNK, :CHUNK, :CHUNK])
    cold = _gets(proxy)
    assert 1 <= len(cold) <= fmt.cold_gets and proxy.count() == len(cold), proxy.requests
    if fmt.sharded:
        assert all(rng is not None for _, _, rng in cold), cold  # ranged, never the whole shard

    proxy.reset()  # same shard (and minishard), another inner chunk
    np.testing.assert_array_equal(r[CHUNK : 2 * CHUNK, :CHUNK, :CHUNK], data[CHUNK : 2 * CHUNK, :CHUNK, :CHUNK])
    assert len(_gets(proxy)) == fmt.warm_gets and proxy.count() == fmt.warm_gets, proxy.requests
    if not fmt.sharded:
        return

    # inner chunks that sit next to each other in the shard
    r2 = shardstore.open(url, path=fmt.path, storage_options=opts)
    proxy.reset()
    sel = (slice(2 * CHUNK, 3 * CHUNK), slice(CHUNK, 2 * CHUNK), slice(0, SHARD))  # 4 chunks
    np.testing.assert_array_equal(r2[sel], data[sel])
    assert len(_gets(proxy)) <= fmt.cold_gets, proxy.requests
    proxy.reset()
    sel = (slice(3 * CHUNK, 4 * CHUNK), slice(0, 2 * CHUNK), slice(0, SHARD))  # 8 chunks, same (mini)shards
    np.testing.assert_array_equal(r2[sel], data[sel])
    assert len(_gets(proxy)) == 1, proxy.requests  # warm indexes: one coalesced ranged GET


def test_chunk_cache_over_s3_serves_hits_with_heads_and_sees_rewrites(
    seaweedfs_proxy: tuple[SeaweedFS, CountingProxy], fmt: RemoteFormat
) -> None:
    """Every format's chunk store over S3 tells its generations with a blocking HEAD
    (``Store.sync_checks``): a read the decoded-chunk cache serves makes HEADs only, and a
    rewrite by another handle is seen by the next read."""
    server, proxy = seaweedfs_proxy
    url, opts = _url(server, fmt.name), server.storage_options()
    data = _data(fmt)
    a = _new(fmt, url, opts)
    a[...] = data
    r = shardstore.open(url, path=fmt.path, storage_options=opts,
                        config=shardstore.IOConfig(chunk_cache_bytes=64 << 20))
    assert r.driver.layout.store.sync_checks is not None
    box = (slice(3, 40), slice(5, 37), slice(9, 50))
    np.testing.assert_array_equal(r[box], data[box])
    proxy.reset()
    np.testing.assert_array_equal(r[box], data[box])
    assert proxy.count() == proxy.count("HEAD") > 0, proxy.requests
    a[10:20, 10:20, 10:20] = 3
    data[10:20, 10:20, 10:20] = 3
    np.testing.assert_array_equal(r[box], data[box])


def test_one_chunk_reads_run_without_an_event_loop(
    seaweedfs_proxy: tuple[SeaweedFS, CountingProxy], fmt: RemoteFormat, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A blocking read that needs one chunk makes obstore's blocking requests on the
    caller's thread (``Store.reads_inline``), with no event loop run for it, with or without
    the decoded-chunk cache, cold (the shard index first) and warm, and a rewrite by another
    handle is still seen; a read of several chunks still runs on a loop (its requests
    overlap)."""
    from shardstore.core import array as core_array

    server, proxy = seaweedfs_proxy
    url, opts = _url(server, fmt.name), server.storage_options()
    data = _data(fmt)
    a = _new(fmt, url, opts)
    a[...] = data
    one = tuple(slice(0, CHUNK) for _ in range(data.ndim))
    edge = CHUNK if fmt.sharded else BLOCK  # (of a chunk along the first axis)
    other = (slice(edge, 2 * edge), *one[1:])  # the next chunk
    several = tuple(slice(0, 2 * BLOCK) for _ in range(data.ndim))
    plain = shardstore.open(url, path=fmt.path, storage_options=opts)
    cached = shardstore.open(url, path=fmt.path, storage_options=opts,
                             config=shardstore.IOConfig(chunk_cache_bytes=64 << 20))
    assert plain.driver.layout.store.reads_inline and cached.driver.layout.store.reads_inline
    looped: list[Any] = []

    def counting_sync(coro: Any, **kw: Any) -> Any:
        if "read" in coro.__qualname__:  # (a read through the loop: not the writes)
            looped.append(coro.__qualname__)
        return shardstore._sync.sync(coro, **kw)

    monkeypatch.setattr(core_array, "sync", counting_sync)
    proxy.reset()
    for r in (plain, cached):
        np.testing.assert_array_equal(r[one], data[one])  # cold: the index, then the chunk
        np.testing.assert_array_equal(r[other], data[other])
    assert proxy.count("GET") >= 4, proxy.requests
    proxy.reset()
    np.testing.assert_array_equal(cached[one], data[one])  # a hit, checked with a HEAD
    assert proxy.count() == proxy.count("HEAD") >= 1, proxy.requests
    a[one] = 5  # another handle rewrites it: the next reads see the new value
    np.testing.assert_array_equal(cached[one], np.full_like(data[one], 5))
    np.testing.assert_array_equal(plain[one], np.full_like(data[one], 5))
    assert looped == []
    data[one] = 5
    np.testing.assert_array_equal(plain[several], data[several])
    assert len(looped) == 1


def test_generations_of_held_units_are_asked_while_the_others_are_fetched(
    seaweedfs_proxy: tuple[SeaweedFS, CountingProxy], fmt: RemoteFormat, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cached read touching a unit (shard, or chunk) whose chunks the decoded-chunk cache
    holds and one it does not: the first one's HEAD goes out while the other's chunks are
    fetched (one round trip, not two), and a rewrite of the held unit by another handle is
    still seen (its chunks then fetched after all). Every format's store takes tagged reads
    over S3 (precomputed's uint64 shards: the tag of the reply their index came in)."""
    from shardstore.core import io as core_io

    server, proxy = seaweedfs_proxy
    url, opts = _url(server, fmt.name), server.storage_options()
    data = _data(fmt)
    a = _new(fmt, url, opts)
    a[...] = data
    unit = SHARD if fmt.sharded else BLOCK  # the first unit's edge along the first axis
    rest = tuple(slice(0, CHUNK) for _ in range(data.ndim - 1))
    held, both = (slice(0, unit), *rest), (slice(0, unit + CHUNK), *rest)
    overlapped: list[bool] = []
    asked_meanwhile = core_io._asked_meanwhile

    def counting(*args: Any, **kw: Any) -> Any:
        got = asked_meanwhile(*args, **kw)
        overlapped.append(len(args) > 8 and args[8] is not None and got is not None)  # (with a fetch)
        return got

    monkeypatch.setattr(core_io, "_asked_meanwhile", counting)
    for rewrite in (False, True):
        r = shardstore.open(url, path=fmt.path, storage_options=opts,
                            config=shardstore.IOConfig(chunk_cache_bytes=64 << 20))
        np.testing.assert_array_equal(r[held], data[held])  # the first unit's chunks, cached
        if rewrite:
            a[0:CHUNK] = 7  # (every format: the first unit's first rows)
            data[0:CHUNK] = 7
        overlapped.clear()
        proxy.reset()
        np.testing.assert_array_equal(r[both], data[both])
        assert r.driver.layout.store.tagged_reads is not None
        assert overlapped == [True]
        assert proxy.count("HEAD") == 1, proxy.requests  # the held unit's, and only that
        assert proxy.count("GET") >= 1 + rewrite, proxy.requests  # the other unit (and the rewritten one)


def test_cloudvolume_gz_chunk_files_over_s3_take_tagged_reads(seaweedfs: SeaweedFS) -> None:
    """Precomputed's chunk files (``<name>``, else CloudVolume's ``<name>.gz``) over S3 read
    with the ETags of their replies (``tagged_reads``), tagged as ``checked_generation`` tells
    (a ``.gz`` chunk: the pair of both files' tags), so the decoded-chunk cache keeps chunks
    it fetched without asking first; a rewritten ``.gz`` gets a new tag."""
    import gzip

    from shardstore._sync import sync
    from shardstore.formats.precomputed.gzfiles import GzipChunkFiles

    store = store_from_url(_url(seaweedfs, "gz"), mode="w", storage_options=seaweedfs.storage_options())
    files = GzipChunkFiles(store, max_size=1 << 20)
    assert files.tagged_reads is files
    sync(store.set_many([("a.gz", gzip.compress(b"from gz")), ("p", b"plain"), ("p.gz", gzip.compress(b"shadowed"))]))
    keys = ["a", "p", "none"]
    values, tags = sync(files.get_many_tagged(keys))
    assert values == [b"from gz", b"plain", None]
    assert tags == [sync(files.checked_generation(k)) for k in keys] and None not in tags
    sync(store.set("a.gz", gzip.compress(b"rewritten")))
    values, again = sync(files.get_many_tagged(["a"]))
    assert values == [b"rewritten"] and again[0] != tags[0] and again[0] == sync(files.checked_generation("a"))


def test_format_create_and_open_take_storage_options(seaweedfs: SeaweedFS) -> None:
    opts = seaweedfs.storage_options()
    value = np.arange(10, dtype="u1")
    url = _url(seaweedfs, "zarr3")
    shardstore.zarr3.create(url, storage_options=opts, shape=(10,), dtype="u1", chunks=(5,))[...] = value
    np.testing.assert_array_equal(shardstore.zarr3.open(url, storage_options=opts)[...], value)
    url = _url(seaweedfs, "n5")
    shardstore.n5.create(url, "d", storage_options=opts, shape=(10,), dtype="u1", block_size=(5,))[...] = value
    np.testing.assert_array_equal(shardstore.n5.open(url, "d", storage_options=opts)[...], value)
    assert shardstore.n5.open_group(url, storage_options=opts).arrays()[0][0] == "d"  # S3 lists
    url = _url(seaweedfs, "precomputed")
    a = shardstore.precomputed.create(url, storage_options=opts, data_type="uint8", scales=[{"size": [10, 1, 1]}])
    a[:, 0, 0, 0] = value
    np.testing.assert_array_equal(shardstore.precomputed.open(url, storage_options=opts)[:, 0, 0, 0], value)
    url = _url(seaweedfs, "bcolz")
    shardstore.bcolz.create(url, storage_options=opts, data=value)
    np.testing.assert_array_equal(shardstore.bcolz.open(url, mode="r", storage_options=opts)[:], value)


# -- conditional shard rewrites ------------------------------------------------------------------
def _race(seaweedfs: SeaweedFS, fmt: RemoteFormat, retry_conflicts: int) -> tuple[Any, np.ndarray, np.ndarray]:
    """Writer A merges into a shard while an interloper replaces that shard (once)."""
    url = _url(seaweedfs, fmt.name)
    opts = seaweedfs.storage_options()
    x, y = _data(fmt, seed=1), _data(fmt, seed=2)
    a = _new(fmt, url, opts)
    raw = store_from_url(url, mode="w", storage_options=opts)
    shard_keys = []

    async def keys() -> None:
        shard_keys.extend(sorted([k async for k in raw.list_prefix("") if not k.endswith(".json")
                                  and not k.startswith(("info", "attributes", "meta"))]))

    a[...] = x
    asyncio.run(keys())
    key = shard_keys[0]  # the shard holding chunk (0, 0, 0)
    x_shard = asyncio.run(raw.get(key))
    a[...] = y  # now the shard holds y's bytes; the interloper puts x's back

    writer = shardstore.open(url, mode="r+", path=fmt.path, storage_options={**opts, "retry_conflicts": retry_conflicts})
    s3 = writer.driver.layout.store  # find the S3Store under the format's adapters
    while not hasattr(s3, "bucket"):
        s3 = s3.base
    original = s3.set_if
    fired = []

    async def set_if_with_interloper(k: str, value: Any, generation: Any) -> None:
        if not fired:
            fired.append(k)
            await raw.set(key, x_shard)  # another writer replaced the shard meanwhile
        await original(k, value, generation)

    s3.set_if = set_if_with_interloper
    return writer, x, y


def test_lost_race_raises_conflict_naming_the_shard(seaweedfs: SeaweedFS, sharded_fmt: RemoteFormat) -> None:
    writer, x, _ = _race(seaweedfs, sharded_fmt, retry_conflicts=0)
    with pytest.raises(ConflictError, match="another writer") as info:
        writer[0, 0, 0:2] = 5  # a partial write into the first shard
    assert "shard" in str(info.value)
    # the interloper's shard is intact
    np.testing.assert_array_equal(writer[:SHARD, :SHARD, :SHARD], x[:SHARD, :SHARD, :SHARD])


def test_lost_race_retried_when_asked(seaweedfs: SeaweedFS, sharded_fmt: RemoteFormat) -> None:
    writer, x, _ = _race(seaweedfs, sharded_fmt, retry_conflicts=2)
    adapter = writer.driver.layout.store
    if not hasattr(adapter, "retry_conflicts"):  # core/io.py reads it from the layout's store
        pytest.xfail(f"{type(adapter).__name__} has no retry_conflicts property (see the remote-stores report)")
    writer[0:CHUNK, 0:CHUNK, 0:2] = 5  # part of an inner chunk: the core redoes the whole merge
    expected = x[:SHARD, :SHARD, :SHARD].copy()
    expected[0:CHUNK, 0:CHUNK, 0:2] = 5  # merged into the interloper's shard, not the stale one
    np.testing.assert_array_equal(writer[:SHARD, :SHARD, :SHARD], expected)


# -- interop with tensorstore's s3 kvstore ---------------------------------------------------------
@pytest.fixture
def aws_env(seaweedfs: SeaweedFS, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in seaweedfs.env().items():
        monkeypatch.setenv(name, value)


def _ts_kv(seaweedfs: SeaweedFS, prefix: str, fmt: RemoteFormat) -> dict[str, Any]:
    return seaweedfs.tensorstore_kvstore(f"{prefix}/{fmt.path}" if fmt.path else prefix)


def test_tensorstore_reads_what_shardstore_wrote(seaweedfs: SeaweedFS, interop_fmt: RemoteFormat, aws_env: None) -> None:
    import tensorstore as ts

    fmt = interop_fmt
    prefix = f"{fmt.name}-{uuid.uuid4().hex[:10]}"
    data = _data(fmt, seed=3)
    a = _new(fmt, seaweedfs.url(prefix), seaweedfs.storage_options())
    a[...] = data
    a[5:9, 0, :] = 0  # partly fill: some inner chunks stay absent
    data[5:9, 0, :] = 0
    t = ts.open(fmt.ts_open(_ts_kv(seaweedfs, prefix, fmt)), open=True, read=True).result()
    np.testing.assert_array_equal(fmt.ts_view(t).read().result(), data)


def test_shardstore_reads_what_tensorstore_wrote(seaweedfs: SeaweedFS, interop_fmt: RemoteFormat, aws_env: None, tmp_path: Any) -> None:
    import tensorstore as ts

    fmt = interop_fmt
    # the metadata comes from an array shardstore creates locally, so both describe the same
    local = _new(fmt, str(tmp_path / "m"), None)
    data = _data(fmt, seed=4)
    prefix = f"{fmt.name}-ts-{uuid.uuid4().hex[:10]}"
    t = ts.open(fmt.ts_create(_ts_kv(seaweedfs, prefix, fmt), local.metadata), create=True).result()
    view = fmt.ts_view(t)
    view[...] = data
    view[0:8, 0:8, 0:8] = 0  # an absent inner chunk
    data[0:8, 0:8, 0:8] = 0
    got = shardstore.open(seaweedfs.url(prefix), path=fmt.path, storage_options=seaweedfs.storage_options())
    np.testing.assert_array_equal(got[...], data)


# -- reads over nginx ----------------------------------------------------------------------------
def test_reads_over_nginx(nginx: Nginx, fmt: RemoteFormat) -> None:
    name = f"{fmt.name}-{uuid.uuid4().hex[:10]}"
    data = _data(fmt, seed=5)
    a = _new(fmt, str(nginx.root / name), None)
    a[...] = data
    a[0:8, 0:8, 0:8] = 0
    data[0:8, 0:8, 0:8] = 0
    r = shardstore.open(f"{nginx.url}/{name}", path=fmt.path)
    assert r.read_only and r.shape == a.shape
    before = len(nginx.requests())
    np.testing.assert_array_equal(r[32:40, 8:16, 16:24], data[32:40, 8:16, 16:24])
    cold = nginx.requests()[before:]
    assert 1 <= len(cold) <= fmt.cold_gets and all(m == "GET" for m, *_ in cold), cold
    if fmt.sharded:
        assert all(rng != "-" for _, _, rng, _ in cold), cold
    before = len(nginx.requests())  # the next chunk in the same shard and minishard
    np.testing.assert_array_equal(r[40:48, 8:16, 16:24], data[40:48, 8:16, 16:24])
    assert len(nginx.requests()) - before == fmt.warm_gets
    np.testing.assert_array_equal(r[...], data)


def test_wrong_content_range_never_gives_wrong_data(faulty_server: FaultyServer, sharded_fmt: RemoteFormat, tmp_path: Any) -> None:
    fmt = sharded_fmt
    a = _new(fmt, str(tmp_path / "a"), None)
    a[...] = _data(fmt, seed=6)
    for path in sorted(p for p in (tmp_path / "a").rglob("*") if p.is_file()):
        key = path.relative_to(tmp_path / "a").as_posix()
        faulty_server.files[key] = path.read_bytes()
        if not key.endswith(".json") and key not in ("info", "attributes"):
            faulty_server.modes[key] = "wrong-range"
    r = shardstore.open(faulty_server.url, storage_options={"max_retries": 1, "timeout": 2})
    with pytest.raises(StoreError, match="asked for|Requested|range"):
        r[0:8, 0:8, 0:8]


# -- N5 compressions --------------------------------------------------------------------------------
@pytest.mark.parametrize("compression", [
    {"type": "raw"}, {"type": "zstd", "level": 3}, {"type": "blosc", "cname": "zstd", "clevel": 5, "shuffle": 2},
    {"type": "lz4"}, {"type": "bzip2"}, {"type": "xz"}], ids=lambda c: c["type"])
def test_n5_compressions_over_s3_and_nginx(seaweedfs: SeaweedFS, nginx: Nginx, compression: dict[str, Any]) -> None:
    fmt = FORMATS["n5"]
    data = _data(fmt, seed=7, shape=32)
    kind = compression["type"]
    url, opts = _url(seaweedfs, f"n5-{kind}"), seaweedfs.storage_options()
    _n5_create(url, opts, shape=32, shard=0, chunk=CHUNK, dtype=fmt.dtype, compression=compression)[...] = data
    np.testing.assert_array_equal(shardstore.open(url, path=N5_PATH, storage_options=opts)[...], data)
    name = f"n5-{kind}-{uuid.uuid4().hex[:10]}"
    _n5_create(str(nginx.root / name), None, shape=32, shard=0, chunk=CHUNK, dtype=fmt.dtype,
               compression=compression)[...] = data
    r = shardstore.n5.open(f"{nginx.url}/{name}", N5_PATH)
    assert r.metadata["compression"]["type"] == kind
    np.testing.assert_array_equal(r[...], data)


# -- bcolz ctable ------------------------------------------------------------------------------------
def _columns(n: int = 1000) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(8)
    return {"i": np.arange(n, dtype="i8"), "f": rng.random(n), "s": rng.integers(0, 99, n).astype("S3"),
            "v": rng.integers(0, 9, (n, 3)).astype("u2")}


def _table(cols: dict[str, np.ndarray]) -> np.ndarray:
    out = np.empty(len(cols["i"]), dtype=[(k, v.dtype, v.shape[1:]) for k, v in cols.items()])
    for k, v in cols.items():
        out[k] = v
    return out


def test_bcolz_ctable_over_s3_and_nginx(seaweedfs: SeaweedFS, nginx: Nginx) -> None:
    cols, opts = _columns(), seaweedfs.storage_options()
    expected = _table(cols)
    url = _url(seaweedfs, "ctable")
    t = shardstore.bcolz.create(url, storage_options=opts, columns=cols, chunklen=128)
    t.append(expected[:10])
    t.flush()  # appends may be buffered until flush (as in bcolz)
    expected = np.concatenate([expected, expected[:10]])
    r = shardstore.open(url, storage_options=opts)
    assert r.names == list(cols) and len(r) == len(expected)
    np.testing.assert_array_equal(r[:], expected)
    np.testing.assert_array_equal(r["v"][500:700], expected["v"][500:700])

    name = f"ctable-{uuid.uuid4().hex[:10]}"
    shardstore.bcolz.ctable(cols, rootdir=str(nginx.root / name), chunklen=128)
    h = shardstore.open(f"{nginx.url}/{name}")
    np.testing.assert_array_equal(h[:], _table(cols))
    np.testing.assert_array_equal(shardstore.bcolz.open(f"{nginx.url}/{name}", mode="r")[["f", "s"]][3:9],
                                  _table(cols)[["f", "s"]][3:9])


# -- the precomputed uint64 sharded key-value store ---------------------------------------------------
KV_SHARDING = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "murmurhash3_x86_128", "preshift_bits": 1,
               "minishard_bits": 3, "shard_bits": 2, "minishard_index_encoding": "gzip", "data_encoding": "gzip"}


def _kv_items(n: int = 400) -> dict[int, bytes]:
    rng = np.random.default_rng(9)
    return {int(k): rng.bytes(int(rng.integers(0, 3000))) for k in rng.integers(0, 2**63, n, dtype=np.uint64)}


def _minishard_mates(kv: Any, keys: list[int]) -> tuple[int, int]:
    """Two keys stored in the same minishard of the same shard."""
    seen: dict[tuple[int, int], int] = {}
    for k in keys:
        where = kv.spec.locate(k)
        if where in seen:
            return seen[where], k
        seen[where] = k
    raise AssertionError("no two keys share a minishard")


def test_kv_over_s3_with_request_counts(seaweedfs_proxy: tuple[SeaweedFS, CountingProxy]) -> None:
    server, proxy = seaweedfs_proxy
    url, opts, items = _url(server, "kv"), server.storage_options(), _kv_items()
    kv = shardstore.precomputed.open_kv(url, KV_SHARDING, mode="w", storage_options=opts)
    kv.update(items)
    r = shardstore.precomputed.open_kv(url, storage_options=opts)  # the spec from its info
    assert r.read_only and r.spec == kv.spec
    first, mate = _minishard_mates(r, list(items))
    proxy.reset()
    assert r[first] == items[first]
    cold = _gets(proxy)
    assert len(cold) <= 3 and proxy.count() == len(cold) and all(rng for _, _, rng in cold), proxy.requests
    proxy.reset()
    assert r[mate] == items[mate]
    assert proxy.count("GET") == 1 and proxy.count() == 1, proxy.requests
    assert r.get_many(items) == items
    assert sorted(r) == sorted(items)


def test_kv_over_nginx_with_request_counts(nginx: Nginx) -> None:
    name, items = f"kv-{uuid.uuid4().hex[:10]}", _kv_items()
    shardstore.precomputed.open_kv(str(nginx.root / name), KV_SHARDING, mode="w").update(items)
    r = shardstore.precomputed.open_kv(f"{nginx.url}/{name}")
    first, mate = _minishard_mates(r, list(items))
    before = len(nginx.requests())
    assert r[first] == items[first]
    cold = nginx.requests()[before:]
    assert len(cold) <= 3 and all(m == "GET" and rng != "-" for m, _, rng, _ in cold), cold
    before = len(nginx.requests())
    assert r[mate] == items[mate] and len(nginx.requests()) - before == 1
    missing = next(k for k in range(1, 10**6) if k not in items)
    assert r.get(missing) is None
    assert r.get_many(items) == items


def test_kv_interop_with_tensorstore(seaweedfs: SeaweedFS, aws_env: None) -> None:
    import tensorstore as ts

    opts, items = seaweedfs.storage_options(), _kv_items(200)
    prefix = f"kv-{uuid.uuid4().hex[:10]}"
    shardstore.precomputed.open_kv(seaweedfs.url(prefix), KV_SHARDING, mode="w", storage_options=opts).update(items)
    spec = {"driver": "neuroglancer_uint64_sharded", "metadata": KV_SHARDING,
            "base": seaweedfs.tensorstore_kvstore(prefix)}
    t = ts.KvStore.open(spec).result()
    for k, v in items.items():  # tensorstore spells a uint64 key as 8 big-endian bytes
        assert t.read(struct.pack(">Q", k)).result().value == v

    prefix2 = f"kv-ts-{uuid.uuid4().hex[:10]}"
    t2 = ts.KvStore.open({**spec, "base": seaweedfs.tensorstore_kvstore(prefix2)}).result()
    with ts.Transaction() as txn:
        for k, v in items.items():
            t2.with_transaction(txn)[struct.pack(">Q", k)] = v
    got = shardstore.precomputed.open_kv(seaweedfs.url(prefix2), KV_SHARDING, storage_options=opts)
    assert got.get_many(items) == items
