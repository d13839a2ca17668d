"""``shardstore.convert``: copy an array into another format, chunking or codecs, larger than memory.

Sources: Zarr v3 (sharded or not), N5, precomputed (sharded or not), bcolz carray / ctable (a
ctable becomes a Zarr group with one 1-D array per column); local, ``s3://``, ``http(s)://``.
Destinations: Zarr v3, N5, precomputed; local or ``s3://``.

The destination is written in shard order by tasks that each own whole destination shards
(``convert_plan``), run here, on local processes (``workers``) or on a Dask scheduler
(``ops.scaleout``). Chunks whose stored bytes are valid in the destination are copied as they
are (``verbatim``); the rest are decoded, reordered (``convert_meta`` maps the axes) and
re-encoded. ``DST/.shardstore-convert.json`` records finished tasks, so a killed run resumes
(``convert_resume``).
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import json
import math
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .._sync import sync
from ..config import IOConfig
from ..core.array import Array
from ..errors import ContainsNodeError, NodeTypeError, ShardStoreError
from ..store.base import Store
from ..store.registry import store_from_url
from .convert_meta import Target, describe_source, ome_attributes, plan_target
from .convert_plan import DEFAULT_TASK_BYTES, MEMORY_FACTOR, Box, Endpoint, Job, plan_boxes
from .convert_resume import MANIFEST_KEY, Manifest, digest, load_manifest
from .convert_task import Arrays, SourceData, TaskStats, compare_box, copy_box, read_box
from .downsample import parse_size
from .scaleout import run_tasks, threads_per_worker
from .verbatim import verbatim_mode

__all__ = ["ConvertResult", "convert", "default_max_memory", "MANIFEST_KEY"]

#: a box read ahead (``_run_read_ahead``) holds about this multiple of its uncompressed bytes
#: (the block, the decode buffers in flight) beside the ``MEMORY_FACTOR`` of the box being written
READ_AHEAD_FACTOR = 2
#: the default memory budget: this fraction of the machine's RAM, at most ``_MAX_DEFAULT``
_RAM_FRACTION = 4
_MAX_DEFAULT = 16 << 30


@dataclass
class ConvertResult:
    """What a conversion did. ``bytes_in``: uncompressed bytes read from the source;
    ``bytes_out``: bytes stored in the destination (None when it is not local)."""

    chunks_written: int
    chunks_verbatim: int
    chunks_reencoded: int
    bytes_in: int
    bytes_out: int | None
    seconds: float
    dropped: list[str] = field(default_factory=list)  # metadata that did not carry over
    changed: list[str] = field(default_factory=list)  # codec, encoding and fill-value changes
    tasks: int = 0
    tasks_resumed: int = 0  # tasks a previous, interrupted run had finished
    verified: bool = False
    oversize: bool = False  # a destination shard is larger than the memory budget


@dataclass(frozen=True)
class _RunOptions:
    """How a planned conversion runs (none of these change the destination's bytes)."""

    budget: int
    workers: int
    #: how this process opens the arrays (every CPU it may use)
    config: IOConfig
    #: how worker processes open the arrays (their share of the codec threads)
    worker_config: IOConfig | None
    scheduler: str | None
    resume: bool
    overwrite: bool
    verify: bool
    progress: bool


#: chunk-sized buffers a reading or encoding thread may hold besides the boxes (the stored
#: bytes, the decoded chunk, an encoder's input copy and its output: some kept for reuse)
THREAD_CHUNK_BUFFERS = 4
#: ... and each read in flight on an I/O thread (the stored bytes and the decoded chunk): when
#: reads wait (a cold disk, a loaded machine) ``IOConfig.io_reads_in_flight`` of them overlap
IO_READ_CHUNK_BUFFERS = 2


def chunk_buffers_reserved(config: IOConfig, workers: int = 1) -> int:
    """How many chunk-sized buffers the planner sets aside in each of ``workers`` processes
    opened with ``config``: ``THREAD_CHUNK_BUFFERS`` per codec thread and the calling one,
    ``IO_READ_CHUNK_BUFFERS`` per read in flight."""
    threads = (config.codec_threads or threads_per_worker(workers)) + 1
    return threads * THREAD_CHUNK_BUFFERS + config.io_reads_in_flight * IO_READ_CHUNK_BUFFERS


def _box_budget(run: _RunOptions, arrays: list[Array]) -> int:
    """The part of ``run.budget`` the boxes may use (``MEMORY_FACTOR`` per box, plus a box
    read ahead): what is left after every process holds its chunk buffers
    (``chunk_buffers_reserved`` of the largest chunk, source or destination). At least half
    of the budget, so that a budget too small for the threads still makes progress."""
    chunk = max((math.prod(a.chunks) * a.dtype.itemsize for a in arrays), default=0)
    config = run.worker_config if run.workers > 1 and run.worker_config is not None else run.config
    reserve = run.workers * chunk_buffers_reserved(config, run.workers) * chunk
    return max(run.budget - reserve, run.budget // 2)


def default_max_memory() -> int:
    """A quarter of the machine's RAM, at most 16 GiB (4 GiB where RAM cannot be read)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 4 << 30
    return int(min(total // _RAM_FRACTION, _MAX_DEFAULT))


def _infer_format(dst: Any) -> str:
    text = str(dst).rstrip("/").lower()
    if text.endswith(".n5"):
        return "n5"
    if text.endswith(".precomputed") or "precomputed" in Path(text).name:
        return "precomputed"
    return "zarr3"


def _shape_arg(value: Any, what: str) -> tuple[int, ...] | None | str:
    if value is None:
        return None
    if isinstance(value, str):
        if value.strip().lower() == "none":
            return "none"
        value = [v for v in value.replace("x", ",").split(",") if v.strip()]
    try:
        return tuple(int(v) for v in value)
    except (TypeError, ValueError):
        raise ShardStoreError(f"{what} {value!r}: expected integers, e.g. 64,64,64") from None


def _local_path(where: Any) -> Path | None:
    """The local path a path or ``file://`` URL names, else None (stores, remote URLs)."""
    if isinstance(where, os.PathLike):
        return Path(os.fspath(where)).expanduser()
    if not isinstance(where, str):
        return None
    if where.startswith("file://"):
        return Path(where[len("file://"):]).expanduser()
    return None if "://" in where else Path(where).expanduser()


def _same_place(src: Any, dst: Any) -> bool:
    a, b = _local_path(src), _local_path(dst)
    if a is None or b is None:
        return False
    a, b = a.resolve(), b.resolve()
    return a == b or a in b.parents or b in a.parents


def _open_source(src: Any, storage: dict[str, Any] | None, config: IOConfig) -> Any:
    from ..api import open as open_node

    return open_node(src, mode="r", storage_options=_options(src, storage), config=config)


def _process_config(workers: int) -> IOConfig:
    """The configuration one of ``workers`` local processes opens the arrays with: the defaults
    (and ``SHARDSTORE_*`` overrides), with the process's share of the CPUs as codec threads
    unless ``SHARDSTORE_CODEC_THREADS`` says otherwise."""
    config = IOConfig.from_env()
    if config.codec_threads is None:
        config = config.replace(codec_threads=threads_per_worker(workers))
    return config


def _options(where: Any, storage: dict[str, Any] | None) -> dict[str, Any] | None:
    """``storage_options`` for a remote URL; None for local paths and Store objects."""
    if not storage or isinstance(where, Store) or _local_path(where) is not None:
        return None
    return storage


def convert(  # noqa: C901 - the steps of one conversion, in order
    src: Any,
    dst: Any,
    *,
    to: str | None = None,
    chunks: Sequence[int] | str | None = None,
    shards: Sequence[int] | str | None = None,
    codecs: list[Any] | None = None,
    compression: str | None = None,
    encoding: str | None = None,
    ome: bool = False,
    overwrite: bool = False,
    max_memory: int | str | None = None,
    workers: int = 1,
    scheduler: str | None = None,
    resume: bool = True,
    verify: bool = False,
    progress: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> ConvertResult:
    """Convert the array (or bcolz ctable) ``src`` into a new array ``dst``.

    ``to``: ``"zarr3"``, ``"n5"`` or ``"precomputed"`` (default from DST's suffix, else
    Zarr v3). ``chunks`` / ``shards`` in destination axis order (``shards="none"``: not
    sharded; precomputed: ``shards`` sets the shard size). Codecs: ``codecs`` (a Zarr v3 inner
    codec list), ``compression`` (``"zstd:5"``, ``"gzip"``, ``"blosc:lz4:5"``, ``"none"``; for
    Zarr v3 and N5) or ``encoding`` (precomputed); defaults keep the source's where the format
    can, else zstd (Zarr v3), gzip (N5), raw or compressed_segmentation (precomputed).
    ``ome``: write an OME-Zarr 0.5 image group (the array is ``DST/0``). ``max_memory``: bytes (or
    ``"2G"``) the conversion may hold (default a quarter of RAM, at most 16 GiB). ``resume``: continue an
    interrupted conversion with the same arguments. ``verify``: compare every element after
    the copy. ``storage_options`` configure both URLs' stores. See ``convert_meta`` for how
    axes, resolution and offsets map.
    """
    t0 = time.perf_counter()
    storage = dict(storage_options or {})
    to = to or _infer_format(dst)
    if workers < 1:
        raise ShardStoreError(f"workers must be at least 1, not {workers}")
    if _same_place(src, dst):
        raise ShardStoreError(f"convert: {str(dst)!r} overlaps the source {str(src)!r}; choose another DST")
    budget = parse_size(max_memory) if max_memory is not None else default_max_memory()
    chunk_arg, shard_arg = _shape_arg(chunks, "--chunks"), _shape_arg(shards, "--shards")
    if isinstance(chunk_arg, str):
        raise ShardStoreError("--chunks none: give a chunk shape")
    here = _process_config(1)  # this process: every CPU it may use
    node = _open_source(src, storage, here)
    sources = _sources(node, src)
    targets: list[tuple[str, str, Array, Target]] = []  # (src path, dst path, source, target)
    for sub, a in sources:
        geo = describe_source(a, f"{src}/{sub}" if sub else str(src), {"storage_options": _options(src, storage)}
                              if _options(src, storage) else {})
        t = plan_target(a, geo, to, chunks=chunk_arg, shards=shard_arg, codecs=codecs,
                        compression=compression, encoding=encoding, ome=ome)
        targets.append((sub, sub or ("0" if ome else ""), a, t))
    group_attrs = _group_attributes(node, targets, ome)
    args = {"src": str(src), "to": to, "group": group_attrs,
            "targets": [[d, t.create] for _, d, _, t in targets]}
    local = _local_path(dst)
    fresh = local is not None and (not local.exists() or (local.is_dir() and not any(local.iterdir())))
    try:
        dst_store = store_from_url(dst, mode="w", storage_options=_options(dst, storage))
        # worker processes share the CPUs; Dask workers keep their own defaults
        worker_config = _process_config(workers) if scheduler is None else None
        run = _RunOptions(budget, workers, here, worker_config, scheduler, resume, overwrite, verify, progress)
        return _convert_into(dst_store, src, dst, to, targets, group_attrs, args, storage, run, t0)
    except BaseException:
        if fresh and local is not None and not _made_progress(local):
            shutil.rmtree(local, ignore_errors=True)  # a failed conversion leaves nothing behind
        raise


def _convert_into(dst_store: Store, src: Any, dst: Any, to: str, targets: list[tuple[str, str, Array, Target]],
                  group_attrs: dict[str, Any] | None, args: dict[str, Any], storage: dict[str, Any],
                  run: _RunOptions, t0: float) -> ConvertResult:
    resume, overwrite, workers, scheduler = run.resume, run.overwrite, run.workers, run.scheduler
    local = _local_path(dst)
    old = load_manifest(dst_store)
    resuming = old is not None and resume and not overwrite and old[0] == digest(args)
    if old is not None and not resuming and not overwrite:
        why = "other arguments" if resume else "resume=False"
        raise ContainsNodeError(f"{str(dst)!r} holds an unfinished conversion with {why}; rerun it with the "
                                "same arguments to resume, or use --overwrite to start again")
    if old is None and not overwrite and _has_keys(dst_store):
        raise ContainsNodeError(f"{str(dst)!r} already holds data (use --overwrite to replace it)")
    done: set[int] = set(old[2]) if resuming and old is not None else set()
    if not resuming:
        if overwrite:
            sync(dst_store.delete_prefix(""))
        _create(dst_store, to, targets, group_attrs, storage)
    dsts = [_open_dst(dst_store, d, run.config) for _, d, _, _ in targets]
    run = replace(run, budget=_box_budget(run, [a for _, _, a, _ in targets] + dsts))
    jobs, items, blocks, oversize, parallel = _jobs(src, dst, dst_store, targets, dsts, storage, run,
                                                    old[1] if resuming and old else None)
    manifest = Manifest(dst_store, args, blocks, set(done))
    if not resuming:
        manifest.save()
    arrays = Arrays(jobs, {(i, "src"): a for i, (_, _, a, _) in enumerate(targets)}
                    | {(i, "dst"): d for i, d in enumerate(dsts)})
    todo = [it for it in items if it[2] not in done]
    if not parallel:  # boxes share write units: one process
        workers, scheduler = 1, None
    # in this process, read the next box while this one is encoded, where the budget holds both
    read_ahead = workers == 1 and scheduler is None and len(todo) > 1 and (
        (MEMORY_FACTOR + READ_AHEAD_FACTOR) * max(_box_bytes(it[1], dsts[it[0]]) for it in todo) <= run.budget)
    stats = _run(arrays, todo, manifest, workers, scheduler, run.progress,
                 sum(_box_bytes(it[1], dsts[it[0]]) for it in items), read_ahead)
    mismatches = 0
    if run.verify:
        mismatches = sum(run_tasks(functools.partial(compare_box, arrays), items, workers=workers, scheduler=scheduler))
        if mismatches:
            raise ShardStoreError(f"verify: {mismatches} element(s) of {str(dst)!r} differ from the source "
                                  "(the progress manifest is kept; rerun with --overwrite)")
    manifest.remove()
    dropped = [x for _, _, _, t in targets for x in t.dropped]
    changed = sorted({x for _, _, _, t in targets for x in t.changed})
    bytes_out = _dir_bytes(local) if local is not None else None
    return ConvertResult(
        chunks_written=stats.chunks_verbatim + stats.chunks_reencoded, chunks_verbatim=stats.chunks_verbatim,
        chunks_reencoded=stats.chunks_reencoded, bytes_in=stats.bytes_in, bytes_out=bytes_out,
        seconds=time.perf_counter() - t0, dropped=dropped, changed=changed, tasks=len(items),
        tasks_resumed=len(done & {it[2] for it in items}) if resuming else 0, verified=run.verify, oversize=oversize,
    )


def _sources(node: Any, src: Any) -> list[tuple[str, Array]]:
    """(sub path, array) per array to convert: the array itself, or a ctable's columns."""
    if isinstance(node, Array):
        return [("", node)]
    cols = getattr(node, "cols", None)
    if isinstance(cols, dict) and cols:
        return [(name, cols[name]) for name in node.names]
    from ..formats.describe import node_label

    raise NodeTypeError(f"convert: {str(src)!r} is a {node_label(node)}; convert takes one array (e.g. {src}/NAME) "
                        "or a bcolz ctable")


def _group_attributes(node: Any, targets: list[tuple[str, str, Array, Target]], ome: bool) -> dict[str, Any] | None:
    """The attributes of the Zarr group DST when there is one (ctable columns, OME image)."""
    if not isinstance(node, Array):
        return dict(getattr(node, "attrs", {}) or {})
    if ome:
        return ome_attributes(targets[0][3], "0")
    return None


def _create(store: Store, to: str, targets: list[tuple[str, str, Array, Target]], group_attrs: dict[str, Any] | None,
            storage: dict[str, Any]) -> None:
    from ..formats import n5, precomputed, zarr3

    if group_attrs is not None:
        zarr3.create_group(store, attributes=group_attrs, mode="w-")
    for _, path, _, t in targets:
        kw = dict(t.create)
        if to == "zarr3":
            zarr3.create(store, path=path, mode="w-", **kw)
        elif to == "n5":
            n5.create(store, path, mode="w-", **kw)
        else:
            precomputed.create(store, path=path, mode="w-", **kw)


def _open_dst(store: Store, path: str, config: IOConfig) -> Array:
    from ..api import open as open_node

    a = open_node(store, mode="r+", path=path or None, config=config)
    if not isinstance(a, Array):
        raise NodeTypeError(f"convert: expected an array at {path!r} of the destination")
    return a


def _jobs(src: Any, dst: Any, dst_store: Store, targets: list[tuple[str, str, Array, Target]], dsts: list[Array],
          storage: dict[str, Any], run: _RunOptions, blocks: list[list[int]] | None,
          ) -> tuple[list[Job], list[tuple[int, Box, int]], list[list[int]], bool, bool]:
    budget, workers = run.budget, run.workers
    src_opts = tuple(sorted((_options(src, storage) or {}).items()))
    dst_opts = tuple(sorted((_options(dst, storage) or {}).items()))
    per_task = max(1, min(DEFAULT_TASK_BYTES, budget // (MEMORY_FACTOR * workers)))
    jobs: list[Job] = []
    items: list[tuple[int, Box, int]] = []
    used: list[list[int]] = []
    oversize = False
    parallel = True
    for i, ((sub, path, a, t), d) in enumerate(zip(targets, dsts)):
        src_ep = Endpoint(src, sub, src_opts, run.worker_config)
        dst_ep = Endpoint(dst if isinstance(dst, (str, os.PathLike)) else dst_store, path, dst_opts, run.worker_config)
        jobs.append(Job(src_ep, dst_ep, t.axis_map, verbatim_mode(a, d, t.axis_map)))
        src_chunks = tuple(a.chunks[m] if m is not None else 1 for m in t.axis_map)
        reuse = blocks[i] if blocks and i < len(blocks) and blocks[i] else None
        plan = plan_boxes(d, src_chunks, per_task, min_tasks=4 * workers if workers > 1 else 1, block=reuse)
        used.append(list(plan.block))
        oversize |= plan.oversize
        parallel &= plan.parallel
        first = len(items)
        items.extend((i, box, first + k) for k, box in enumerate(plan.boxes))
    return jobs, items, used, oversize, parallel


def _box_bytes(box: Box, a: Array) -> int:
    return math.prod(b - lo for lo, b in box) * a.dtype.itemsize


def _run(arrays: Arrays, items: list[tuple[int, Box, int]], manifest: Manifest, workers: int, scheduler: str | None,
         progress: bool, total: int, read_ahead: bool) -> TaskStats:
    from tqdm.auto import tqdm

    stats = TaskStats()
    bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="converting", disable=not progress,
               dynamic_ncols=True)
    bar.update(total - sum(_box_bytes(box, arrays.get(job, "dst")) for job, box, _ in items))

    def done(item: tuple[int, Box, int], r: TaskStats) -> None:
        stats.chunks_verbatim += r.chunks_verbatim
        stats.chunks_reencoded += r.chunks_reencoded
        stats.bytes_in += r.bytes_in
        stats.bytes_verbatim += r.bytes_verbatim
        manifest.mark([item[2]])
        bar.update(_box_bytes(item[1], arrays.get(item[0], "dst")))

    try:
        if read_ahead:
            _run_read_ahead(arrays, items, done)
        else:
            run_tasks(functools.partial(copy_box, arrays), items, workers=workers, scheduler=scheduler, on_done=done)
    finally:
        bar.close()
    return stats


def _run_read_ahead(arrays: Arrays, items: list[tuple[int, Box, int]],
                    done: Callable[[tuple[int, Box, int], TaskStats], None]) -> None:
    """The tasks in order, in this process, each box's source read on a helper thread while the
    box before it is encoded and written. A task's read and write each leave CPU time unused
    (a decoder that is fast next to the file reads, shard assembly and writes between encode
    batches, a store adapter that decodes on its calling thread); overlapped, they fill it."""
    with cf.ThreadPoolExecutor(1, thread_name_prefix="shardstore-convert-read") as reader:
        ahead: cf.Future[SourceData] = reader.submit(read_box, arrays, items[0])
        try:
            for k, item in enumerate(items):
                data = ahead.result()
                if k + 1 < len(items):
                    ahead = reader.submit(read_box, arrays, items[k + 1])
                r = copy_box(arrays, item, data)
                del data  # the block is not held while the next one is read
                done(item, r)
        except BaseException:
            ahead.cancel()
            raise


def _has_keys(store: Store) -> bool:
    async def first() -> bool:
        async for _ in store.list_prefix(""):
            return True
        return False

    return bool(sync(first()))


def _made_progress(local: Path) -> bool:
    """Whether a manifest in the local directory records finished tasks (kept for a resume)."""
    try:
        doc = json.loads((local / MANIFEST_KEY).read_text())
    except (OSError, ValueError):
        return False
    return bool(isinstance(doc, dict) and doc.get("done"))


def _dir_bytes(path: Path) -> int:
    total = 0
    for dirpath, _dirs, names in os.walk(path):
        for name in names:
            if name != MANIFEST_KEY:
                try:
                    total += os.stat(os.path.join(dirpath, name)).st_size
                except FileNotFoundError:
                    continue
    return total
