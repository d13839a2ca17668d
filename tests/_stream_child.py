"""Child processes of ``test_streamed_writes.py``: one whole-shard write, measured or killed.

``python _stream_child.py rss DIR MIB STREAM`` writes one Zarr v3 shard of MIB MiB of random
uint8 (incompressible: the encoded shard is about the raw size) with streaming on (STREAM=1)
or off (0) and prints, as JSON, the peak RSS growth during the write: the peak resident size
(VmHWM, reset just before the write through /proc/self/clear_refs where allowed) minus the
resident size before it, which already holds the input array.

``python _stream_child.py stall DIR`` rewrites the existing shard of DIR with new data, and
after a few MiB have gone to the temp file prints "stalled" and sleeps: the parent kills it
there, in the middle of the shard.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

import shardstore
from shardstore.config import IOConfig

CHUNK = 64


def _status(field: str) -> int:
    """A /proc/self/status figure, in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
        return True
    except OSError:
        return False


def shard_shape(mib: int) -> tuple[int, int, int]:
    return (256, 256, mib * 16)  # 256 * 256 * 16 bytes = 1 MiB per unit of ``mib``


def random_volume(shape: tuple[int, ...], seed: int) -> np.ndarray:
    # from bytes: no temporary wider than the result
    return np.frombuffer(np.random.default_rng(seed).bytes(int(np.prod(shape))), dtype=np.uint8).reshape(shape)


def create(path: str, shape: tuple[int, ...], config: IOConfig) -> shardstore.Array:
    return shardstore.zarr3.create(path, shape=shape, dtype="uint8", chunks=(CHUNK,) * 3, shards=shape, mode="w",
                                   config=config)


def rss(path: str, mib: int, stream: bool) -> None:
    shape = shard_shape(mib)
    config = IOConfig(stream_unit_bytes=0 if stream else 1 << 62)
    data = random_volume(shape, 0)
    a = create(path, shape, config)
    a[:CHUNK, :CHUNK, :CHUNK] = data[:CHUNK, :CHUNK, :CHUNK]  # pools and codecs warmed up
    reset = _reset_peak()
    before = _status("VmRSS")
    start_peak = _status("VmHWM")
    a[...] = data
    peak = _status("VmHWM")
    growth = peak - (before if reset else max(before, start_peak))
    print(json.dumps({"growth": growth, "shard_bytes": data.nbytes, "reset": reset}))


def stall(path: str) -> None:
    from shardstore.store import _local_files

    written = [0]
    write_all = _local_files.write_all

    def slow_write_all(fd: int, value: object) -> None:
        write_all(fd, value)  # type: ignore[arg-type]
        written[0] += memoryview(value).nbytes if not isinstance(value, tuple) else 0  # type: ignore[arg-type]
        if written[0] >= 4 << 20:
            print("stalled", flush=True)
            time.sleep(3600)

    _local_files.write_all = slow_write_all
    a = shardstore.zarr3.open(path, mode="r+", config=IOConfig(stream_unit_bytes=0))
    a[...] = random_volume(a.shape, 2)


if __name__ == "__main__":
    if sys.argv[1] == "rss":
        rss(sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1")
    else:
        stall(sys.argv[2])
