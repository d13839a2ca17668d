"""A unit's directory may be pruned by another writer (the last key of a directory went) while
this one creates it for a lock sidecar or a temp file: the open is retried, not failed.

Found by tests/test_zarr3_metadata.py (a write of all-fill shards next to a partial one): the
makedirs of one thread raced the rmdir of another and the read-modify-write raised StoreError.
"""

from __future__ import annotations

import os

import pytest

from shardstore.store import _filelock
from shardstore.store._filelock import open_making_dirs


def test_open_retries_when_a_parent_is_pruned_while_it_is_made(tmp_path, monkeypatch):
    target = tmp_path / "c" / "0" / ".1.lock"
    real_makedirs = os.makedirs
    pruned = {"n": 0}

    def makedirs_raced(path, exist_ok=False):
        if pruned["n"] < 2:  # another thread removed 'c' between makedirs' mkdir calls
            pruned["n"] += 1
            raise FileNotFoundError(2, "No such file or directory", str(path))
        real_makedirs(path, exist_ok=exist_ok)

    monkeypatch.setattr(_filelock.os, "makedirs", makedirs_raced)
    fd = open_making_dirs(str(target), os.O_RDWR)
    os.close(fd)
    assert target.exists() and pruned["n"] == 2


def test_open_gives_up_after_a_bounded_number_of_tries(tmp_path, monkeypatch):
    def makedirs_never(path, exist_ok=False):
        raise FileNotFoundError(2, "No such file or directory", str(path))

    monkeypatch.setattr(_filelock.os, "makedirs", makedirs_never)
    with pytest.raises(FileNotFoundError):
        open_making_dirs(str(tmp_path / "a" / "b" / "x"), os.O_RDWR)
