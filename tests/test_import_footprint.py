"""What a process loads: ``import shardstore`` loads no format, an array loads its own
format's and codecs' modules only, and a process that only creates, writes, reopens and
reads local or in-memory arrays through the blocking API never imports asyncio (``_lazy``:
6.5 MiB and 25 ms, ssl among it); the coroutine runner it uses instead
(``_aio.run_inline``) behaves as the event loop would for work that answers at once. (The
N5 benchmarks' write figures include the import: z5py's process peaked 7.5 MiB lower.)"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import shardstore
from shardstore._aio import gather, inline_now, run_inline, sleep, to_thread


def _fresh(script: str) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_import_shardstore_loads_no_format_until_one_is_used() -> None:
    got = _fresh("""
        import sys
        import shardstore
        formats = ("shardstore.n5", "shardstore.zarr3", "shardstore.precomputed", "shardstore.bcolz",
                   "shardstore.ops.convert", "shardstore.core.array", "asyncio", "zstandard", "lz4")
        assert not [m for m in formats if m in sys.modules], [m for m in formats if m in sys.modules]
        assert {"n5", "zarr3", "convert", "Array", "open"} <= set(dir(shardstore))
        from shardstore import *  # noqa: F403
        assert shardstore.n5.create is shardstore.formats.n5.create and Array is shardstore.core.array.Array
        assert isinstance(shardstore.IOConfig(), shardstore.IOConfig)
        try:
            shardstore.no_such_name
        except AttributeError as e:
            print(e)
    """)
    assert got == "module 'shardstore' has no attribute 'no_such_name'"


def test_an_n5_array_loads_only_its_own_compression(tmp_path: Path) -> None:
    got = _fresh(f"""
        import sys
        import numpy
        stdlib = [m for m in ("pathlib", "shutil", "urllib.parse", "random") if m not in sys.modules]
        import shardstore
        a = shardstore.n5.create({str(tmp_path / "a.n5")!r}, "d", shape=(64, 64), dtype="uint8", block_size=(16, 16),
                                 compression={{"type": "gzip"}})
        a[...] = 3
        assert int(shardstore.n5.open({str(tmp_path / "a.n5")!r}, path="d")[...].sum()) == 3 * 64 * 64
        others = ("blosc", "bz2", "lz4", "xz", "zstd", "crc32c", "sharding_indexed")
        print([m for m in others if "shardstore.codecs." + m in sys.modules], "shardstore.codecs.gzip" in sys.modules,
              [m for m in stdlib if m in sys.modules])
    """)
    # (nor the standard modules it needs only on rarer paths: pathlib with urllib is 0.8 MiB)
    assert got == "[] True []"


def test_local_and_memory_arrays_of_every_format_never_import_asyncio(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import sys
        import numpy as np
        import shardstore
        import shardstore._sync as s
        from shardstore.store.memory import MemoryStore
        assert "asyncio" not in sys.modules, "import shardstore imported asyncio"
        root = {str(tmp_path)!r}
        v = np.arange(64 * 48, dtype="uint16").reshape(64, 48)
        for comp in ("raw", "gzip"):
            a = shardstore.n5.create(root + "/a.n5", "d" + comp, shape=v.shape, dtype="uint16", block_size=(16, 16),
                                     compression={{"type": comp}})
            a[...] = v
            assert (shardstore.n5.open(root + "/a.n5", path="d" + comp)[...] == v).all()
        a = shardstore.n5.create(root + "/a.n5", "draw", shape=v.shape, dtype="uint16", block_size=(8, 8), mode="w")
        a[:8] = 1  # (mode "w" over the old array: its blocks deleted first)
        assert int(shardstore.n5.open(root + "/a.n5", path="draw")[...].sum()) == 8 * 48
        assert sorted(shardstore.n5.open_group(root + "/a.n5").keys()) == ["dgzip", "draw"]
        for store in (root + "/z.zarr", MemoryStore()):
            z = shardstore.zarr3.create(store, shape=v.shape, dtype="uint16", chunks=(8, 8), shards=(32, 16))
            z[...] = v
            z[3:40, 5:9] = 1
            assert (shardstore.zarr3.open(store)[:3] == v[:3]).all()
        for sharding in (None, {{"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 0, "hash": "identity",
                                "minishard_bits": 1, "shard_bits": 1, "minishard_index_encoding": "gzip",
                                "data_encoding": "gzip"}}):
            scale = {{"size": [16, 16, 16], "chunk_size": [8, 8, 8]}}
            if sharding:
                scale["sharding"] = sharding
            p = shardstore.precomputed.create(root + "/p" + str(bool(sharding)), data_type="uint8", scales=[scale])
            p[...] = 5
            assert int(shardstore.precomputed.open(root + "/p" + str(bool(sharding)))[...].sum()) == 5 * 16 ** 3
        print(sorted(m for m in ("asyncio", "ssl") if m in sys.modules), s._thread is None)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[] True", out.stdout


def test_a_create_from_inside_a_running_loop_still_runs_on_the_loop_thread(tmp_path: Path) -> None:
    """(as in Jupyter: the blocking API called from a coroutine cannot block that loop, nor
    run the metadata inline while it runs)"""

    async def main() -> np.ndarray:
        a = shardstore.n5.create(str(tmp_path / "a.n5"), "d", shape=(8, 8), dtype="uint8", block_size=(4, 4))
        a[...] = 3
        return shardstore.n5.open(str(tmp_path / "a.n5"), path="d")[...]

    assert int(asyncio.run(main()).sum()) == 3 * 64


def test_run_inline_runs_to_thread_and_gather_here_in_order() -> None:
    seen: list[tuple[str, int]] = []

    def work(n: int) -> int:
        seen.append((threading.current_thread().name, n))
        return n * 10

    async def one(n: int) -> int:
        await asyncio.sleep(0)  # (a bare yield: the runner goes on)
        return await to_thread(work, n)

    async def main() -> list[int]:
        return await gather(one(n) for n in range(4))

    assert run_inline(main()) == [0, 10, 20, 30]
    assert seen == [(threading.current_thread().name, n) for n in range(4)]


def test_run_inline_gather_raises_the_first_error_or_returns_them_all() -> None:
    async def ok() -> int:
        return 1

    async def bad() -> int:
        raise ValueError("bad")

    async def first() -> list[int]:
        return await gather([ok(), bad(), ok()])

    async def every() -> list[object]:
        return await gather([ok(), bad(), ok()], return_exceptions=True)

    with pytest.raises(ValueError, match="bad"):
        run_inline(first())
    got = run_inline(every())
    assert got[0] == 1 and isinstance(got[1], ValueError) and got[2] == 1


def test_run_inline_refuses_a_coroutine_that_waits_for_a_loop() -> None:
    async def waits() -> None:
        await asyncio.sleep(0.01)  # (needs a running loop)

    with pytest.raises(RuntimeError):
        run_inline(waits())

    async def awaits_a_future() -> None:
        await asyncio.get_event_loop_policy().new_event_loop().create_future()

    with pytest.raises(RuntimeError, match="without an event loop"):
        run_inline(awaits_a_future())


def test_run_inline_sleeps_block_and_say_where_they_run() -> None:
    """A remote store's retry backoff (``_aio.sleep``) blocks under ``run_inline``; its
    requests ask ``inline_now`` whether to make blocking calls."""
    import time

    async def backoff() -> tuple[bool, float]:
        t0 = time.perf_counter()
        await sleep(0.02)
        return inline_now(), time.perf_counter() - t0

    here, waited = run_inline(backoff())
    assert here and waited >= 0.02
    assert asyncio.run(backoff())[0] is False and not inline_now()


def test_outside_run_inline_the_helpers_use_the_event_loop() -> None:
    async def main() -> tuple[str, list[int]]:
        name = await to_thread(lambda: threading.current_thread().name)
        return name, await gather([asyncio.sleep(0, 1), asyncio.sleep(0, 2)])

    name, got = asyncio.run(main())
    assert name != threading.current_thread().name and got == [1, 2]
