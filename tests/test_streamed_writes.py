"""Whole-shard writes streamed chunk by chunk (issue 21, point 4).

A write covering a whole shard of at least ``stream_unit_bytes`` encodes its chunks a bounded
window at a time and the sharding adapter writes them to the destination as they arrive, the
index last: peak memory beside the input stays far below the shard's size (measured in a
child process), the output is byte-identical to the shard built in memory, a writer killed in
the middle of a shard leaves the old shard readable, and S3 receives it as a multipart upload.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import shardstore
from shardstore.config import IOConfig
from shardstore.core import array as core_array
from shardstore.core import writes as core_writes
from shardstore.errors import CodecError
from shardstore.ops.integrity import scan
from shardstore.store.local import LocalStore, is_temp_name
from shardstore.store.memory import MemoryStore
from shardstore.store.wrappers import RecordingStore

if TYPE_CHECKING:
    from _servers import CountingProxy, SeaweedFS

CHILD = str(Path(__file__).with_name("_stream_child.py"))
STREAM = IOConfig(stream_unit_bytes=0, stream_window_bytes=0)  # every whole shard, smallest window
BUFFER = IOConfig(stream_unit_bytes=1 << 62)  # never: the whole shard built in memory


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}


def _files(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*")) if p.is_file()
    }


def _same_files(a: Path, b: Path, sharding: dict | None = None) -> None:
    """Assert the trees hold the same bytes; for precomputed shards that differ, the message
    lists how (the entries of each: key, stored size, value digest) so a rare difference can
    be told apart from the log alone."""
    fa, fb = _files(a), _files(b)
    if fa == fb:
        return
    lines = [f"only in one: {sorted(set(fa) ^ set(fb))}"]
    if sharding is not None:
        from shardstore.sharding._uint64_format import ShardingSpec, shard_entries

        spec = ShardingSpec.from_json(sharding)
        for name in sorted(k for k in set(fa) & set(fb) if fa[k] != fb[k] and k.endswith(".shard")):
            ea, eb = (shard_entries((root / name).read_bytes(), spec, name) for root in (a, b))
            lines.append(f"{name}: sizes {(a / name).stat().st_size} / {(b / name).stat().st_size}, "
                         f"keys only in one {sorted(set(ea) ^ set(eb))}, differing values "
                         f"{sorted(k for k in set(ea) & set(eb) if bytes(ea[k]) != bytes(eb[k]))}, "
                         f"order {list(ea)[:8]} / {list(eb)[:8]}")
    lines += [f"{k}: differs" for k in sorted(set(fa) & set(fb)) if fa[k] != fb[k]]
    raise AssertionError("\n".join(lines))


@pytest.fixture
def streamed_units(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the shards the core streams (so a test cannot pass on the buffered path)."""
    calls: list[int] = []
    real = core_writes.stream_unit

    async def counted(layout: Any, unit: Any, encode: Any) -> None:
        calls.append(len(unit[1]))
        await real(layout, unit, encode)

    real_now = core_writes.stream_unit_now

    def counted_now(layout: Any, unit: Any, encode: Any) -> None:
        calls.append(len(unit[1]))
        real_now(layout, unit, encode)

    monkeypatch.setattr(core_writes, "stream_unit", counted)  # (region writes, async runner)
    monkeypatch.setattr(core_writes, "stream_unit_now", counted_now)  # (region writes, blocking runner)
    monkeypatch.setattr(core_array, "stream_unit", counted)  # (``Array.write_chunks``)
    return calls


def _volume(seed: int = 0, shape: tuple[int, ...] = (64, 48, 40)) -> np.ndarray:
    data = np.random.default_rng(seed).integers(0, 255, shape, dtype=np.uint8)
    data[:32, :16, :8] = 0  # fill chunks: absent from the shard
    return data


def _zarr(path: Path, config: IOConfig, location: str, codecs: list | None = None) -> Any:
    return shardstore.zarr3.create(str(path), shape=(64, 48, 40), dtype="uint8", chunks=(8, 8, 8),
                                   shards=(32, 16, 16), index_location=location, codecs=codecs, config=config)


@pytest.mark.parametrize("location", ["end", "start"])
@pytest.mark.parametrize("codecs", [None, [{"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle"}}]],
                         ids=["zstd", "blosc"])
def test_zarr3_streamed_shards_are_byte_identical(tmp_path: Path, location: str, codecs: list | None,
                                                  streamed_units: list[int]) -> None:
    data = _volume()
    for name, config in (("buffered", BUFFER), ("streamed", STREAM)):
        a = _zarr(tmp_path / name, config, location, codecs)
        a[...] = data
        np.testing.assert_array_equal(a[...], data)
    assert len(streamed_units) == 2 * 3 * 3  # every shard of the streamed array (2x3x3 shards)
    assert _files(tmp_path / "buffered") == _files(tmp_path / "streamed")


@pytest.mark.parametrize("gz", [False, True], ids=["raw", "gzip"])
def test_precomputed_streamed_shards_are_byte_identical(tmp_path: Path, gz: bool, streamed_units: list[int]) -> None:
    sharding = {
        "@type": "neuroglancer_uint64_sharded_v1", "hash": "murmurhash3_x86_128", "preshift_bits": 1,
        "minishard_bits": 2, "shard_bits": 1, "minishard_index_encoding": "gzip" if gz else "raw",
        "data_encoding": "gzip" if gz else "raw",
    }
    data = _volume()[..., None]
    for name, config in (("buffered", BUFFER), ("streamed", STREAM)):
        a = shardstore.precomputed.create(str(tmp_path / name), data_type="uint8", config=config, scales=[
            {"size": list(data.shape[:3]), "chunk_size": [8, 8, 8], "sharding": sharding}])
        a[...] = data
        np.testing.assert_array_equal(a[...], data)
    assert len(streamed_units) == 2  # shard_bits=1: both shards streamed
    assert _files(tmp_path / "buffered") == _files(tmp_path / "streamed")


@pytest.mark.parametrize("kind", ["zarr3", "precomputed-by-hash"])
def test_dask_writes_stream_whole_shards(tmp_path: Path, kind: str, streamed_units: list[int]) -> None:
    """``shardstore.dask.store``: a box-shaped shard (a region write) and the scattered chunks
    of a hash-chosen precomputed shard (``Array.write_chunks``) both stream, same bytes."""
    da = pytest.importorskip("dask.array")
    import dask

    from shardstore.dask import store, write_units

    data = _volume()
    sharding = {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 1, "hash": "murmurhash3_x86_128",
                "minishard_bits": 1, "shard_bits": 2, "minishard_index_encoding": "gzip", "data_encoding": "raw"}
    for name, config in (("buffered", BUFFER), ("streamed", STREAM)):
        if kind == "zarr3":
            a = _zarr(tmp_path / name, config, "end")
        else:
            a = shardstore.precomputed.create(str(tmp_path / name), data_type="uint8", config=config, scales=[
                {"size": list(data.shape), "chunk_size": [8, 8, 8], "sharding": sharding}])
        value = data if kind == "zarr3" else data[..., None]
        with dask.config.set(scheduler="synchronous"):
            store(da.from_array(value, chunks=(16, 16, 16) + value.shape[3:]), a)
        np.testing.assert_array_equal(a[...], value)
    assert len(streamed_units) == len(write_units(a))
    _same_files(tmp_path / "buffered", tmp_path / "streamed", None if kind == "zarr3" else sharding)


def test_streamed_shard_through_a_store_without_streaming_is_one_put(streamed_units: list[int]) -> None:
    """A memory store collects the stream (one set per shard, no read), with the same bytes."""
    data = _volume()
    stores = {}
    for name, config in (("buffered", BUFFER), ("streamed", STREAM)):
        rec = RecordingStore(MemoryStore())
        a = shardstore.zarr3.create(rec, shape=data.shape, dtype="uint8", chunks=(8, 8, 8), shards=(32, 16, 16),
                                    config=config)
        rec.reset()
        a[...] = data
        assert [r.op for r in rec.requests] == ["set"] * 18, rec.requests
        stores[name] = rec.base
    assert len(streamed_units) == 18 and sum(streamed_units) == 8 * 6 * 5  # every chunk of every shard
    buffered, streamed = (s._data for s in stores.values())  # type: ignore[attr-defined]
    assert {k: bytes(v) for k, v in buffered.items()} == {k: bytes(v) for k, v in streamed.items()}


def test_an_all_fill_streamed_shard_deletes_the_stored_one(tmp_path: Path, streamed_units: list[int]) -> None:
    a = _zarr(tmp_path, STREAM, "end")
    a[...] = _volume()
    shard = tmp_path / "c" / "0" / "0" / "0"
    assert shard.exists()
    a[:32, :16, :16] = 0
    assert not shard.exists()
    assert not [p for p in tmp_path.rglob("*") if is_temp_name(p.name)]
    np.testing.assert_array_equal(a[:32, :16, :16], 0)


def test_an_encoder_error_mid_shard_leaves_the_old_shard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         streamed_units: list[int]) -> None:
    a = _zarr(tmp_path, STREAM, "end")
    old = _volume(0)
    a[...] = old
    before = _files(tmp_path)
    real, calls = core_writes._encode, [0]

    def failing(*args: Any) -> Any:
        calls[0] += 1
        if calls[0] == 10:  # (of the shard's 16 chunks)
            raise CodecError("injected encoder failure")
        return real(*args)

    monkeypatch.setattr(core_writes, "_encode", failing)
    with pytest.raises(CodecError, match="injected"):
        a[:32, :16, :16] = _volume(1)[:32, :16, :16]
    assert _files(tmp_path) == before  # no temp file left, the old shard in place
    np.testing.assert_array_equal(a[...], old)


def test_a_writer_killed_mid_shard_leaves_the_old_shard_readable(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(CHILD).parent))
    from _stream_child import create, random_volume

    shape = (128, 128, 1024)  # one 16 MiB shard
    old = random_volume(shape, 1)
    create(str(tmp_path), shape, BUFFER)[...] = old
    shard = tmp_path / "c" / "0" / "0" / "0"
    shard_bytes = shard.read_bytes()
    proc = subprocess.Popen([sys.executable, CHILD, "stall", str(tmp_path)], stdout=subprocess.PIPE, text=True, env=_env())
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "stalled"
        temps = [p for p in shard.parent.iterdir() if is_temp_name(p.name)]
        assert len(temps) == 1 and temps[0].stat().st_size >= 4 << 20  # mid-shard
        assert shard.read_bytes() == shard_bytes  # readers see the old shard meanwhile
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert shard.read_bytes() == shard_bytes
    np.testing.assert_array_equal(shardstore.zarr3.open(str(tmp_path))[...], old)
    report = scan(str(tmp_path))
    assert report.problems == []  # every stored unit decodes
    assert [Path(t.path).name for t in report.temps] == [temps[0].name]  # the dead writer's, for repair


def _growth(tmp_path: Path, mib: int, stream: bool) -> dict[str, Any]:
    res = subprocess.run([sys.executable, CHILD, "rss", str(tmp_path / f"s{int(stream)}"), str(mib), str(int(stream))],
                         capture_output=True, text=True, env=_env(), timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads VmHWM from /proc")
def test_streamed_shard_write_peak_memory(tmp_path: Path) -> None:
    """One 256 MiB shard of random data: peak RSS growth during the write (the input array
    excluded) at most 0.25x the shard (the buffered path needs about 1x)."""
    got = _growth(tmp_path, 256, True)
    assert got["growth"] <= 0.25 * got["shard_bytes"], got


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads VmHWM from /proc")
def test_streamed_2gib_shard_write_peak_memory(tmp_path: Path) -> None:
    got = _growth(tmp_path, 2048, True)
    assert got["growth"] <= 0.25 * got["shard_bytes"], got
    buffered = _growth(tmp_path, 2048, False)  # what the measurement would see without streaming
    assert buffered["growth"] > 0.9 * buffered["shard_bytes"], buffered


def test_streamed_shard_on_s3_is_a_multipart_upload(seaweedfs: SeaweedFS, tmp_path: Path,
                                                    streamed_units: list[int]) -> None:
    from test_store_s3 import make_s3

    shape = (128, 128, 1024)  # one 16 MiB shard of random bytes: four 5 MiB parts
    data = np.frombuffer(np.random.default_rng(3).bytes(int(np.prod(shape))), dtype=np.uint8).reshape(shape)
    local = shardstore.zarr3.create(str(tmp_path), shape=shape, dtype="uint8", chunks=(64, 64, 64), shards=shape,
                                    config=BUFFER)
    local[...] = data
    s3 = make_s3(seaweedfs, multipart_threshold=1 << 40, multipart_chunk_size=5 << 20)  # (only a stream is multipart)
    a = shardstore.zarr3.create(s3, shape=shape, dtype="uint8", chunks=(64, 64, 64), shards=shape, config=STREAM)
    a[...] = data
    assert streamed_units == [64]
    np.testing.assert_array_equal(shardstore.zarr3.open(s3)[...], data)
    stored = shardstore._sync.sync(s3.get("c/0/0/0"))
    assert stored == (tmp_path / "c" / "0" / "0" / "0").read_bytes()
    etag = shardstore._sync.sync(s3.checked_generation("c/0/0/0"))
    assert str(etag).strip('"').endswith("-4"), etag  # a multipart upload's ETag: 4 parts



def test_streamed_shard_on_s3_that_fits_one_part_is_one_put(seaweedfs_proxy: tuple[SeaweedFS, CountingProxy],
                                                             streamed_units: list[int]) -> None:
    """A multipart upload costs two round trips more (create, complete) than a PUT."""
    from test_store_s3 import make_s3

    server, proxy = seaweedfs_proxy
    shape = (128, 128, 128)  # 2 MiB of random bytes: less than one 5 MiB part
    data = np.frombuffer(np.random.default_rng(4).bytes(int(np.prod(shape))), dtype=np.uint8).reshape(shape)
    s3 = make_s3(server, multipart_threshold=1 << 40, multipart_chunk_size=5 << 20)
    a = shardstore.zarr3.create(s3, shape=shape, dtype="uint8", chunks=(64, 64, 64), shards=shape, config=STREAM)
    proxy.reset()
    a[...] = data
    assert streamed_units == [8]
    assert proxy.count() == proxy.count("PUT") == 1
    np.testing.assert_array_equal(shardstore.zarr3.open(s3)[...], data)

pytest_plugins = ["_servers"]
_ = LocalStore  # (the store the local tests write through)
