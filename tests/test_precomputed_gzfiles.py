"""``GzipChunkFiles`` (CloudVolume's ``<chunk>.gz`` files) writes the same on both runners:
its read-modify-write is described once (``_update_steps``) and run by ``update_many`` and
``update_many_sync``, so unsharded precomputed writes take the core's blocking runner too."""

from __future__ import annotations

import asyncio
import gzip
from pathlib import Path

import pytest

from shardstore.errors import CodecError
from shardstore.formats.precomputed.gzfiles import GzipChunkFiles
from shardstore.store import LocalStore
from shardstore.store.wrappers import AsyncOnlyStore


def _files(tmp_path: Path, runner: str) -> GzipChunkFiles:
    (tmp_path / "a.gz").write_bytes(gzip.compress(b"from gz"))
    (tmp_path / "b.gz").write_bytes(gzip.compress(b"to be emptied"))
    (tmp_path / "e.gz").write_bytes(gzip.compress(b"shadowed"))
    base = LocalStore(tmp_path)
    return GzipChunkFiles(base if runner == "sync" else AsyncOnlyStore(base), max_size=1 << 20)


def _update(files: GzipChunkFiles, runner: str, items: list) -> None:
    if runner == "sync":
        assert files.sync_writes is files
        files.update_many_sync(items)
    else:
        assert files.sync_writes is None
        asyncio.run(files.update_many(items))


@pytest.mark.parametrize("runner", ["sync", "async"])
def test_updates_merge_with_gz_files_and_empty_chunks_lose_them(tmp_path: Path, runner: str) -> None:
    files = _files(tmp_path, runner)
    seen: dict[str, list[bytes | None]] = {}

    def merge(key: str):
        # like the core's merges of a region, running it again gives the same value (a batch
        # is run again once the .gz files of its missing chunks are known)
        def update(old: bytes | None) -> bytes:
            seen.setdefault(key, []).append(old)
            return (old or b"").ljust(7, b".")[:7] + b"+"

        return update

    _update(files, runner, [
        ("a", merge("a")),  # only a.gz: merged with its inflated value
        ("b", lambda old: None),  # becomes empty: b.gz goes too
        ("c", b"new"),  # a plain value
        ("d", merge("d")),  # neither file: starts from nothing
        ("e", None),  # a delete: e.gz goes too
    ])
    assert seen["a"][0] == b"from gz" and seen["d"][0] is None
    assert (tmp_path / "a").read_bytes() == b"from gz+" and (tmp_path / "a.gz").exists()  # shadowed, kept
    assert not (tmp_path / "b").exists() and not (tmp_path / "b.gz").exists()
    assert (tmp_path / "c").read_bytes() == b"new"
    assert (tmp_path / "d").read_bytes() == b".......+"
    assert not (tmp_path / "e.gz").exists()
    # the next merge starts from the plain file that now shadows a.gz
    seen.clear()
    _update(files, runner, [("a", merge("a"))])
    assert seen["a"] == [b"from gz+"] and (tmp_path / "a").read_bytes() == b"from gz+"


@pytest.mark.parametrize("runner", ["sync", "async"])
def test_a_corrupt_gz_file_fails_the_update_and_names_it(tmp_path: Path, runner: str) -> None:
    files = _files(tmp_path, runner)
    (tmp_path / "a.gz").write_bytes(b"\x1f\x8b not gzip")
    with pytest.raises(CodecError, match=r"a\.gz"):
        _update(files, runner, [("a", lambda old: b"x")])
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize("runner", ["sync", "async"])
def test_set_of_none_deletes_both_files(tmp_path: Path, runner: str) -> None:
    files = _files(tmp_path, runner)
    (tmp_path / "e").write_bytes(b"plain")
    if runner == "sync":
        files.set_sync("e", None)
    else:
        asyncio.run(files.set_many([("e", None)]))
    assert not (tmp_path / "e").exists() and not (tmp_path / "e.gz").exists()


@pytest.mark.parametrize("runner", ["sync", "async"])
def test_the_generation_follows_the_file_reads_take(tmp_path: Path, runner: str) -> None:
    """Reads take ``<name>`` when it exists, else ``<name>.gz``: the generation (what the chunk
    cache checks) must change exactly when the value a read gets can have changed."""
    files = GzipChunkFiles(LocalStore(tmp_path), max_size=1 << 20)

    def gen(key: str) -> object:
        return files.generation_sync(key) if runner == "sync" else asyncio.run(files.checked_generation(key))

    (tmp_path / "c.gz").write_bytes(gzip.compress(b"one"))
    first = gen("c")
    (tmp_path / "c.gz.tmp").write_bytes(gzip.compress(b"two"))
    (tmp_path / "c.gz.tmp").replace(tmp_path / "c.gz")  # a rewrite of the .gz read from
    second = gen("c")
    assert second != first
    (tmp_path / "c").write_bytes(b"plain")  # now shadows the .gz
    third = gen("c")
    assert third not in (first, second)
    (tmp_path / "c.gz.tmp").write_bytes(gzip.compress(b"three"))
    (tmp_path / "c.gz.tmp").replace(tmp_path / "c.gz")  # not what reads take: one stat suffices
    assert gen("c") == third
    (tmp_path / "c").unlink()
    assert gen("c") not in (first, second, third)
