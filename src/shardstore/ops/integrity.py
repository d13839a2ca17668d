"""Integrity scanning shared by ``shardstore verify`` and ``shardstore repair``.

One implementation walks a dataset of any format and

- decodes every stored unit (chunk, inner chunk of a shard, uint64 key-value value, bcolz
  chunk file), naming the key of each one that fails and the unit that holds it;
- says, per array, whether the content was checked against checksums stored with it (which
  codec) or only decoded, so that a clean result is never more than it is;
- finds the temporary files that killed writers left behind (local stores only: S3 writes are
  single PUTs and leave no temporary objects), and the column directories of a bcolz ctable
  that its ``__rootdirs__`` does not list (a killed ``addcol`` or ``delcol``).

``repair`` removes the temporary files no live writer holds and, when asked, the units that
fail to decode, so they read as the fill value again.

Which temporary files are stale: the local store names them ``.{name}.{32 hex}.tmp`` without
the writer's pid (the name is shared with the native writer), so age decides: a live writer
writes its temp file in one go and renames it at once, so its modification time is seconds
old; one untouched for ``grace`` seconds (default 10 minutes) belongs to a dead writer. On
Linux a file some process on this machine still holds open (seen in ``/proc/*/fd``) is kept
whatever its age.
"""

from __future__ import annotations

import itertools
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._sync import codec_pool, sync
from ..codecs.base import Codec
from ..codecs.crc32c import Crc32cCodec
from ..codecs.gzip import GzipCodec
from ..codecs.n5_block import N5BlockCodec
from ..codecs.zstd import ZstdCodec
from ..config import IOConfig
from ..core.array import Array
from ..core.layout import ChunkLayout
from ..errors import ShardStoreError
from ..formats.bcolz.ctable import CTable
from ..sharding.uint64 import Uint64ShardedStore, gzip_decompress, shard_entries
from ..sharding.zarr3 import ZarrShardingStore, parse_inner_key
from ..store.base import Store
from ..store.local import LocalStore, is_temp_name
from ..store.registry import store_from_url
from ..store.wrappers import PrefixStore

__all__ = [
    "DEFAULT_GRACE",
    "NodeReport",
    "OrphanColumn",
    "Problem",
    "ScanReport",
    "TempFile",
    "content_checks",
    "find_temp_files",
    "repair",
    "scan",
    "walk",
]

#: seconds a temp file must be left untouched before ``repair`` removes it
DEFAULT_GRACE = 600.0


@dataclass
class Problem:
    """One unit that fails to read or decode."""

    key: str  # the unit's key in the data store of its node (a chunk, an inner chunk, a uint64 key)
    where: str  # the key described for people (shard file included)
    error: str  # "ErrorType: message"
    #: what ``repair --drop-corrupt`` does: "delete" the key, "delete-unit" (the whole shard
    #: file, when its index is unreadable), "fill" (bcolz: rewrite the chunk as dflt rows),
    #: "keep" (nothing: dropping would not be a repair)
    action: str = "delete"
    coords: tuple[int, ...] | None = None  # the chunk's grid coordinates (arrays)
    region: str = ""  # the chunk's region of the array, "[0:64, 64:128]" (arrays)
    dropped: bool = False


@dataclass
class NodeReport:
    """What the scan found in one array or key-value store."""

    name: str
    format: str
    units: int = 0  # stored units decoded
    #: what verified the content against stored checksums (empty: only decoded)
    checks: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    nbytes: int = 0

    @property
    def checksummed(self) -> bool:
        return bool(self.checks)

    def check_text(self) -> str:
        if self.checks:
            return "checked against checksums (" + ", ".join(self.checks) + ")"
        return "decoded, content not checksummed"


@dataclass
class TempFile:
    path: str
    age: float  # seconds since the last modification
    held: bool  # open in a live process of this machine
    removed: bool = False

    def stale(self, grace: float) -> bool:
        """Whether ``repair`` removes it: untouched for ``grace`` seconds and held by no one."""
        return self.age >= grace and not self.held


@dataclass
class OrphanColumn:
    """A bcolz ctable column directory that ``__rootdirs__`` does not list: what a killed
    ``addcol`` (files written, name not yet listed) or ``delcol`` (name unlisted, files not yet
    removed) leaves. Never read, but it makes a retried ``addcol`` of that name fail."""

    prefix: str  # the directory's prefix in the dataset's store ("col/")
    age: float | None  # seconds since its newest file changed (None: not a local directory)
    removed: bool = False

    def stale(self, grace: float) -> bool:
        """Whether ``repair`` removes it: a local directory untouched for ``grace`` seconds; a
        remote one (whose age the store does not tell) only when ``grace`` is 0."""
        return self.age >= grace if self.age is not None else grace == 0


@dataclass
class ScanReport:
    url: str
    nodes: list[NodeReport] = field(default_factory=list)
    temps: list[TempFile] = field(default_factory=list)
    orphans: list[OrphanColumn] = field(default_factory=list)
    #: why temp files were not looked for (e.g. a remote store), or None
    temps_note: str | None = None

    @property
    def problems(self) -> list[Problem]:
        return [p for n in self.nodes for p in n.problems]


# -- what checks the content ---------------------------------------------------------------
def _codec_checks(codec: Codec) -> list[str]:
    if isinstance(codec, Crc32cCodec):
        return ["crc32c codec"]
    if isinstance(codec, ZstdCodec):
        return ["zstd content checksum"] if codec.checksum else []
    if isinstance(codec, GzipCodec):
        # zlib and libdeflate verify the trailer of every stream they inflate
        return ["zlib Adler-32" if codec.use_zlib else "gzip CRC-32"]
    if isinstance(codec, N5BlockCodec):
        return _codec_checks(codec.compression)
    return []


def content_checks(layout: ChunkLayout) -> list[str]:
    """What verifies a chunk's content when it is decoded (empty: nothing, only decoding).

    blosc (Zarr v3, bcolz) and lz4/bz2/xz/raw carry no checksum a decoder verifies; a Zarr v3
    shard index has a crc32c, which protects the index, not the chunks.
    """
    checks = [c for codec in layout.pipeline.codecs for c in _codec_checks(codec)]
    store = layout.store
    if isinstance(store, Uint64ShardedStore) and store.spec.data_encoding == "gzip":
        checks.append("gzip CRC-32 of the shard data_encoding")
    return checks


# -- units of a data store -----------------------------------------------------------------
def _unit_of(store: Store, key: str) -> tuple[Store, str]:
    """The (store, key) of the file holding chunk ``key``: the shard file for sharded data."""
    if isinstance(store, ZarrShardingStore):
        shard, _ = store.layout.locate(parse_inner_key(key, len(store.layout.inner_grid_shape)))
        return store.base, store.layout.shard_key(shard)
    if isinstance(store, Uint64ShardedStore):
        return store.base, store.shard_file(int(key))
    return store, key


def _index_readable(store: Store, key: str) -> bool:
    """Whether a sharding adapter can locate ``key`` (its shard's indexes decode)."""
    try:
        sync(store.exists(key))
    except ShardStoreError:
        return False
    return True


def _region_text(layout: ChunkLayout, coords: tuple[int, ...]) -> str:
    return "[" + ", ".join(f"{r.start}:{r.stop}" for r in layout.grid.chunk_region(coords)) + "]"


def _describe_error(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


def _scan_array(a: Array, name: str, progress: Callable[[int], None] | None) -> NodeReport:
    layout = a.driver.layout
    store, pipeline = layout.store, layout.pipeline
    report = NodeReport(name, a.format, checks=content_checks(layout), nbytes=a.nbytes)
    fill_chunks = layout.missing_chunks == "error"  # bcolz: no holes, a chunk is replaced
    broken_units: set[tuple[int, str]] = set()

    def decode(item: tuple[tuple[int, ...], str, bytes]) -> Problem | None:
        coords, key, data = item
        try:
            pipeline.decode(data, layout.spec_for(coords))
        except ShardStoreError as err:
            return Problem(key, layout.describe_key(key), _describe_error(err), "fill" if fill_chunks else "delete",
                           coords, _region_text(layout, coords))
        return None

    coords_iter = itertools.product(*(range(n) for n in layout.grid.grid_shape))
    chunk_bytes = layout.chunk_spec.dtype.itemsize * math.prod(layout.grid.chunk_shape)
    # chunks per batch: ``IOConfig.verify_batch_chunks``, fewer when their decoded bytes would
    # pass ``verify_batch_bytes``
    per_batch = max(1, min(a.config.verify_batch_chunks, a.config.verify_batch_bytes // max(1, chunk_bytes)))
    while batch := list(itertools.islice(coords_iter, per_batch)):
        keys = [layout.chunk_key(c) for c in batch]
        try:
            values: list[bytes | None | BaseException] = list(sync(store.get_many([(k, None) for k in keys])))
        except ShardStoreError:
            values = []  # narrow it down: one key at a time
            for k in keys:
                unit = _unit_of(store, k)
                if (id(unit[0]), unit[1]) in broken_units:
                    values.append(None)
                    continue
                try:
                    values.append(sync(store.get(k)))
                except ShardStoreError as err:
                    values.append(err)
                    if unit[1] != k:  # a shard whose index is unreadable: reported once
                        broken_units.add((id(unit[0]), unit[1]))
        todo = []
        for c, k, v in zip(batch, keys, values):
            if isinstance(v, BaseException):
                _, unit_key = _unit_of(store, k)
                if unit_key == k:
                    action = "fill" if fill_chunks else "delete"
                elif _index_readable(store, k):  # the value itself is bad (e.g. its gzip encoding)
                    action, unit_key = "delete", k
                else:
                    action = "delete-unit"
                report.problems.append(Problem(unit_key, layout.describe_key(k), _describe_error(v), action, c,
                                               _region_text(layout, c)))
            elif v is None:
                if fill_chunks:
                    report.problems.append(Problem(k, layout.describe_key(k), "missing chunk file", "fill", c,
                                                   _region_text(layout, c)))
            else:
                todo.append((c, k, v))
        report.units += len(todo)
        report.problems += [p for p in codec_pool(a.config.codec_threads).map(decode, todo) if p is not None]
        if progress is not None:
            progress(len(batch))
    return report


def _kv_shard_bytes(base: Store, stem: str, names: set[str]) -> tuple[str, bytes | None]:
    """(unit key, whole shard bytes) of shard ``stem``: its ``.shard`` file, or the legacy
    ``.index`` + ``.data`` pair (the data file is the shard without its index)."""
    if f"{stem}.shard" in names:
        return f"{stem}.shard", sync(base.get(f"{stem}.shard"))
    index, data = sync(base.get_many([(f"{stem}.index", None), (f"{stem}.data", None)]))
    return f"{stem}.index", None if index is None else bytes(index) + bytes(data or b"")


def _scan_kv(kv: Any, name: str) -> NodeReport:
    """Every value of a uint64 sharded key-value store, shard file by shard file."""
    adapter: Uint64ShardedStore = kv.store
    spec = adapter.spec
    checks = ["gzip CRC-32 of the data_encoding"] if spec.data_encoding == "gzip" else []
    report = NodeReport(name, "uint64 kv", checks=checks)
    files, _ = sync(adapter.base.list_dir(""))
    names = set(files)
    stems = {f.partition(".")[0] for f in files if f.partition(".")[2] in ("shard", "index")}
    for stem in sorted(stems):
        shard = spec.parse_shard_name(stem)
        if shard is None:
            continue
        unit, data = _kv_shard_bytes(adapter.base, stem, names)
        if data is None:
            continue
        report.nbytes += len(data)
        try:
            entries = shard_entries(data, spec, unit)
        except ShardStoreError as err:
            report.problems.append(Problem(unit, f"shard file {unit!r}", _describe_error(err), "delete-unit"))
            continue
        for key, value in entries.items():
            report.units += 1
            where = f"key {key} in shard file {unit!r}"
            if spec.locate(key)[0] != shard:
                # unreachable, but more likely a sharding spec that does not match the files
                # than damage: reported, never dropped
                report.problems.append(Problem(str(key), where, f"key {key} belongs in shard "
                                               f"{spec.shard_name(spec.locate(key)[0])}", "keep"))
            elif spec.data_encoding == "gzip":
                try:
                    gzip_decompress(value, f"shard {unit!r}, key {key}")
                except ShardStoreError as err:
                    report.problems.append(Problem(str(key), where, _describe_error(err)))
    return report


# -- walking a dataset ---------------------------------------------------------------------
def _open(url: str | os.PathLike[str] | Store, storage_options: dict[str, Any] | None, mode: str = "r",
          config: IOConfig | None = None) -> Any:
    """The node at ``url``: an array, a group, a bcolz ctable, or a uint64 key-value store."""
    from ..api import open as open_node
    from ..formats.precomputed import open_kv

    try:
        return open_node(url, mode=mode, storage_options=storage_options, config=config)
    except ShardStoreError as first:
        try:  # (until ``open`` recognizes a kv directory itself)
            return open_kv(url, mode=mode, storage_options=storage_options, config=config)
        except ShardStoreError:
            raise first from None


def walk(
    url: str | os.PathLike[str] | Store, *, mode: str = "r", storage_options: dict[str, Any] | None = None,
    config: IOConfig | None = None,
) -> Iterator[tuple[str, Any]]:
    """``(name, node)`` of every array and uint64 key-value store the scan looks at: an array,
    the members of a group (Zarr v3, N5), the columns of a bcolz ctable, every scale of a
    precomputed volume, or a key-value store; ``mode`` ``"r+"`` opens them writable."""
    return _nodes(_open(url, storage_options, mode, config), "", mode)


def _nodes(node: Any, name: str, mode: str) -> Iterator[tuple[str, Any]]:
    """(name, array or kv) for everything below ``node``: group members, ctable columns and
    every scale of a precomputed volume."""
    from ..formats.precomputed import open as open_scale
    from ..formats.precomputed import read_info
    from ..formats.precomputed.kv import ShardedKV

    if isinstance(node, ShardedKV):
        yield name, node
    elif isinstance(node, Array) and node.format == "precomputed":
        driver = node.driver
        info = read_info(driver.store, path=driver.path)
        for i, scale in enumerate(info["scales"]):
            a = node if i == driver.index else open_scale(driver.store, path=driver.path, scale=i, mode=mode)  # type: ignore[attr-defined]
            yield f"{name}/{scale['key']}" if name else str(scale["key"]), a
    elif isinstance(node, Array):
        yield name, node
    elif isinstance(node, CTable):
        for col in node.names:
            yield from _nodes(node[col], f"{name}/{col}" if name else col, mode)
    elif hasattr(node, "keys"):
        for child in sorted(node.keys()):
            yield from _nodes(node[child], f"{name}/{child}" if name else child, mode)


def _local_root(url: str | os.PathLike[str] | Store) -> Path | None:
    """The directory of a local dataset, or None for other stores."""
    if isinstance(url, LocalStore):
        return url.root
    if isinstance(url, PrefixStore) and isinstance(url.base, LocalStore):
        return url.base.root / url.prefix
    if isinstance(url, Store):
        return None
    text = os.fspath(url)
    if text.startswith("file://"):
        text = text[len("file://") :]
    elif "://" in text:
        return None
    return Path(text).expanduser()


def _open_files() -> set[tuple[int, int]] | None:
    """(device, inode) of every file open in a process whose descriptors we may read, or
    None where ``/proc`` does not tell (not Linux)."""
    proc = Path("/proc")
    if not (proc / "self" / "fd").is_dir():
        return None
    held: set[tuple[int, int]] = set()
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            fds = list((pid_dir / "fd").iterdir())
        except OSError:  # another user's process, or gone
            continue
        for fd in fds:
            try:
                st = fd.stat()
            except OSError:
                continue
            held.add((st.st_dev, st.st_ino))
    return held


def find_temp_files(root: Path, now: float | None = None) -> list[TempFile]:
    """Temp files of in-flight or killed writes below ``root`` (never listed as keys)."""
    now = time.time() if now is None else now
    found: list[tuple[str, os.stat_result]] = []
    for directory, _dirs, files in os.walk(root):
        for f in files:
            if is_temp_name(f):
                path = os.path.join(directory, f)
                try:
                    found.append((path, os.stat(path)))
                except FileNotFoundError:  # renamed into place meanwhile
                    continue
    held = _open_files() if found else set()
    return [
        TempFile(path, max(0.0, now - st.st_mtime), held is not None and (st.st_dev, st.st_ino) in held)
        for path, st in sorted(found)
    ]


def _newest_mtime(directory: Path) -> float:
    newest = directory.stat().st_mtime
    for d, _, files in os.walk(directory):
        for f in files:
            try:
                newest = max(newest, os.stat(os.path.join(d, f)).st_mtime)
            except FileNotFoundError:
                continue
    return newest


def _orphan_columns(table: CTable, root: Path | None) -> list[OrphanColumn]:
    """Column directories of ``table`` that its ``__rootdirs__`` does not name."""
    base = f"{table.path}/" if table.path else ""
    _, dirs = sync(table.store.list_dir(base))
    listed = set(table.names)
    now = time.time()
    out = []
    for d in dirs:
        if d in listed:
            continue
        local = root / table.path / d if root is not None else None
        age = now - _newest_mtime(local) if local is not None and local.is_dir() else None
        out.append(OrphanColumn(f"{base}{d}/", age))
    return out


def scan(
    url: str | os.PathLike[str] | Store,
    *,
    storage_options: dict[str, Any] | None = None,
    progress: Callable[[str, int], Callable[[int], None] | None] | None = None,
    config: IOConfig | None = None,
) -> ScanReport:
    """Decode every stored unit of the dataset at ``url`` and look for leftover temp files.

    ``progress(name, total_units)`` may return a callback taking the number of units done;
    ``config`` (an ``IOConfig``) is what the arrays are opened with (batch sizes among it).
    """
    report = ScanReport(str(url))
    root = _local_root(url)
    if root is not None and root.is_dir():
        report.temps = find_temp_files(root)
    elif root is None:
        report.temps_note = "not a local directory: remote writes leave no temporary objects"
    node = _open(url, storage_options, config=config)
    if isinstance(node, CTable):
        report.orphans = _orphan_columns(node, root)
    for name, item in _nodes(node, "", "r"):
        if isinstance(item, Array):
            tick = progress(name, item.driver.layout.grid.nchunks) if progress is not None else None
            report.nodes.append(_scan_array(item, name, tick))
        else:
            report.nodes.append(_scan_kv(item, name))
    return report


# -- repair --------------------------------------------------------------------------------
def _drop(node: Any, problem: Problem) -> None:
    if problem.action == "keep":
        return
    if isinstance(node, Array):
        layout = node.driver.layout
        store = layout.store
        sharded = isinstance(store, (ZarrShardingStore, Uint64ShardedStore))
        if problem.action == "delete" and sharded:
            try:  # the shard rewritten without the chunk
                sync(store.delete(problem.key))
            except ShardStoreError:  # the shard cannot be rewritten: it goes as a whole
                problem.action, problem.key = "delete-unit", _unit_of(store, problem.key)[1]
        if problem.action == "delete-unit":
            if isinstance(store, (ZarrShardingStore, Uint64ShardedStore)):
                sync(store.base.delete(problem.key))
                store.invalidate()
            else:
                sync(store.delete(problem.key))
        elif problem.action == "fill":  # bcolz: every chunk is stored; rewrite it as dflt rows
            spec = layout.spec_for(problem.coords or ())
            fill = np.full(spec.shape, layout.spec.fill_value, dtype=layout.spec.dtype)
            sync(store.set(problem.key, layout.pipeline.encode(fill, spec)))
        elif problem.action == "delete" and not sharded:
            sync(store.delete(problem.key))
    else:  # a uint64 key-value store
        adapter: Uint64ShardedStore = node.store
        if problem.action == "delete":
            try:  # the shard rewritten without the key
                sync(adapter.set_many_ids([(int(problem.key), None)]))
            except ShardStoreError:  # the shard cannot be rewritten: it goes as a whole
                problem.action, problem.key = "delete-unit", adapter.shard_file(int(problem.key))
        if problem.action == "delete-unit":
            stem, _, ext = problem.key.partition(".")
            sync(adapter.base.set_many([(f"{stem}.{e}", None) for e in (("index", "data") if ext == "index" else (ext,))]))
            adapter.invalidate()
    problem.dropped = True


def repair(
    url: str | os.PathLike[str] | Store,
    *,
    dry_run: bool = False,
    drop_corrupt: bool = False,
    grace: float = DEFAULT_GRACE,
    storage_options: dict[str, Any] | None = None,
    progress: Callable[[str, int], Callable[[int], None] | None] | None = None,
    config: IOConfig | None = None,
) -> ScanReport:
    """Scan, then remove stale temp files and (``drop_corrupt``) the units that fail to
    decode; ``dry_run`` changes nothing. Returns the scan with ``removed`` / ``dropped`` set."""
    report = scan(url, storage_options=storage_options, progress=progress, config=config)
    for t in report.temps:
        if t.stale(grace) and not dry_run:
            try:
                os.unlink(t.path)
                t.removed = True
            except FileNotFoundError:  # renamed into place or removed meanwhile
                pass
    if report.orphans and not dry_run:
        store = store_from_url(url, mode="r+", storage_options=storage_options)
        for o in report.orphans:
            if o.stale(grace):
                sync(store.delete_prefix(o.prefix))
                o.removed = True
    if drop_corrupt and not dry_run and report.problems:
        nodes = dict(walk(url, mode="r+", storage_options=storage_options, config=config))
        for n in report.nodes:
            for p in n.problems:
                _drop(nodes[n.name], p)
    return report
