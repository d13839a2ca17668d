"""The sync bridge: reads on the caller's thread, from many threads, and inside a running loop."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import shardstore
from shardstore import _sync


def _array(tmp_path):
    a = shardstore.zarr3.create(tmp_path / "a", shape=(64, 64), dtype="uint16", chunks=(8, 8), shards=(32, 32))
    data = np.arange(64 * 64, dtype="uint16").reshape(64, 64)
    a[...] = data
    return shardstore.open(tmp_path / "a"), data


def test_local_reads_need_no_event_loop(tmp_path, monkeypatch):
    """Files are read on the calling thread (and the codec pool), with no loop at all."""
    a, data = _array(tmp_path)
    loops = []
    original = _sync._thread_loop

    def spy():
        loops.append(threading.current_thread())
        return original()

    monkeypatch.setattr(_sync, "_thread_loop", spy)
    monkeypatch.setattr(_sync, "_ensure_loop", lambda: loops.append("background") or None)
    assert np.array_equal(a[3:40, ::3], data[3:40, ::3])
    assert np.array_equal(np.asarray(a), data)
    assert loops == []


def test_reads_from_many_threads_agree(tmp_path):
    a, data = _array(tmp_path)
    boxes = [(i % 50, (7 * i) % 50) for i in range(200)]

    def read(box):
        y, x = box
        return np.array_equal(a[y : y + 14, x : x + 14], data[y : y + 14, x : x + 14])

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(read, boxes))


def test_reads_inside_a_running_event_loop(tmp_path):
    """As in Jupyter: the caller's thread already runs a loop, so the background loop is used."""
    a, data = _array(tmp_path)

    async def main():
        return a[5:9, 5:9]

    assert np.array_equal(asyncio.run(main()), data[5:9, 5:9])


def test_writes_and_reads_interleaved_across_threads(tmp_path):
    a, _ = _array(tmp_path)
    w = shardstore.open(tmp_path / "a", mode="r+")

    def write(i):
        w[i, :] = i
        return i

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(write, range(64)))
    assert np.array_equal(a[...], np.repeat(np.arange(64, dtype="uint16")[:, None], 64, axis=1))
