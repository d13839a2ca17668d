"""``shardstore demo``: the whole product on synthetic data, in under a minute.

It generates an EM-like uint8 volume and a matching uint64 segmentation (``demo_volume``),
writes both in Zarr v3 (sharded), N5 and Neuroglancer precomputed (sharded), and a ctable of
per-label statistics in bcolz (``demo_formats``); reads everything back and verifies it; builds
each array's multiscale pyramid with ``downsample`` (mean for the image, mode for the labels)
and checks every level against NumPy; prints a table of sizes and throughput per format; and
ends with the command that shows it all in Neuroglancer.

The helpers below (block iteration, sizes, codec summaries) are shared with other commands.
"""

from __future__ import annotations

import itertools
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from .core.array import Array
from .demo_formats import (
    DEMO_FORMATS,
    DEMO_MARKER,
    KINDS,
    DemoFormat,
    DemoGrid,
    demo_grid,
)
from .demo_volume import em_like_pair, em_like_volume
from .errors import ContainsNodeError, ShardStoreError

__all__ = [
    "DEMO_FORMATS",
    "DEMO_MARKER",
    "DemoFormat",
    "DemoGrid",
    "DemoResult",
    "codecs_summary",
    "count_blocks",
    "demo_grid",
    "directory_size",
    "em_like_pair",
    "em_like_volume",
    "format_bytes",
    "iter_blocks",
    "run_demo",
    "write_blocks",
]

#: the pyramid's levels go down to about this edge
PYRAMID_UNTIL = 32


# --------------------------------------------------------------------------- helpers

def format_bytes(n: float) -> str:
    """``1234567`` -> ``"1.2 MB"`` (decimal units, as throughput figures use)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def directory_size(path: str | os.PathLike[str], skip_names: Sequence[str] = ()) -> tuple[int, int]:
    """``(files, bytes)`` below a local directory, leaving out files named in ``skip_names``
    at its top level (metadata documents) and in-flight temporary files (``.*.tmp``)."""
    root = Path(path)
    files = total = 0
    for dirpath, _dirs, names in os.walk(root):
        top = Path(dirpath) == root
        for name in names:
            if (top and name in skip_names) or (name.startswith(".") and name.endswith(".tmp")):
                continue
            try:
                total += os.stat(os.path.join(dirpath, name)).st_size
            except FileNotFoundError:  # removed while we walked
                continue
            files += 1
    return files, total


def _codec_text(codec: Any) -> str:
    if isinstance(codec, str):
        return codec
    name = codec.get("name", "?")
    config = dict(codec.get("configuration") or {})
    if name == "sharding_indexed":
        inner = codecs_summary(config.get("codecs", []))
        index = codecs_summary(config.get("index_codecs", []))
        shape = "x".join(str(c) for c in config.get("chunk_shape", []))
        where = config.get("index_location", "end")
        return f"sharding_indexed(chunks {shape}: {inner}; index at {where}: {index})"
    if name == "bytes" and set(config) <= {"endian"}:
        return f"bytes({config['endian']})" if "endian" in config else "bytes"
    if not config:
        return name
    return f"{name}(" + ", ".join(f"{k}={v}" for k, v in config.items()) + ")"


def codecs_summary(codecs: Sequence[Any]) -> str:
    """A codec list in one line: ``bytes(little) > zstd(level=3, checksum=False)``."""
    return " > ".join(_codec_text(c) for c in codecs) or "(none)"


def iter_blocks(shape: Sequence[int], block: Sequence[int]) -> Iterator[tuple[slice, ...]]:
    """The regions of a regular grid of ``block``-shaped cells over ``shape``, in C order
    (clipped at the edges). A 0-d array is one empty region."""
    ranges = [range(0, s, b) for s, b in zip(shape, block)]
    for starts in itertools.product(*ranges):
        yield tuple(slice(o, min(o + b, s)) for o, b, s in zip(starts, block, shape))


def count_blocks(shape: Sequence[int], block: Sequence[int]) -> int:
    return math.prod(-(-s // b) for s, b in zip(shape, block))


def write_blocks(
    array: Array,
    source: Callable[[tuple[slice, ...]], Any],
    *,
    block: Sequence[int] | None = None,
    progress: bool = True,
    desc: str = "writing",
) -> int:
    """Write ``array`` one block at a time (default: one shard, or one chunk when unsharded),
    taking each block's values from ``source(region)``; a tqdm bar counts the blocks.

    Shard-aligned blocks mean every shard is written exactly once, without being read.
    Returns the number of blocks written.
    """
    from tqdm import tqdm

    block = tuple(block or array.shards or array.chunks)
    n = count_blocks(array.shape, block)
    unit = "shard" if array.shards is not None and tuple(block) == tuple(array.shards) else "block"
    with tqdm(total=n, desc=desc, unit=unit, disable=not progress, leave=True, dynamic_ncols=True) as bar:
        for region in iter_blocks(array.shape, block):
            array[region] = source(region)
            bar.update(1)
    return n


# --------------------------------------------------------------------------- running it

@dataclass
class DemoResult:
    """What the demo measured for one dataset of one format."""

    format: str
    dataset: str
    path: Path
    shape: tuple[int, ...]
    dtype: str
    chunks: tuple[int, ...]
    shards: tuple[int, ...] | None
    codecs: str
    files: int
    stored_bytes: int
    nbytes: int
    write_seconds: float
    read_seconds: float
    ok: bool
    mismatches: int
    pyramid: str = ""
    pyramid_seconds: float = 0.0
    pyramid_bytes: int = 0

    @property
    def ratio(self) -> float:
        return self.nbytes / self.stored_bytes if self.stored_bytes else math.inf

    @property
    def write_mbps(self) -> float:
        return self.nbytes / 1e6 / max(self.write_seconds, 1e-9)

    @property
    def read_mbps(self) -> float:
        return self.nbytes / 1e6 / max(self.read_seconds, 1e-9)


def _check_replaceable(path: Path) -> None:
    """Refuse to overwrite anything at ``path`` that an earlier demo did not write."""
    if not path.exists():
        return
    if path.is_dir() and not any(path.iterdir()):
        return
    from .api import open as open_node

    try:
        node = open_node(path, mode="r")
        marked = DEMO_MARKER in node.attrs
    except ShardStoreError:
        marked = False
    if not marked:
        raise ContainsNodeError(
            f"{str(path)!r} exists and was not written by `shardstore demo`; "
            "choose another directory (the demo only replaces its own output)"
        )


def _shape_text(shape: Sequence[int] | None) -> str:
    return "none" if shape is None else str(tuple(int(s) for s in shape))


@dataclass
class DemoData:
    """The volume, its labels and their pyramids' expected levels (z, y, x order)."""

    volume: np.ndarray
    labels: np.ndarray
    levels: int

    def values(self, kind: str) -> np.ndarray:
        return self.volume if kind == "image" else self.labels

    def pyramid(self, kind: str) -> list[np.ndarray]:
        """Every level as NumPy computes it: mean (rounded half to even) or mode."""
        from .ops.downsample_kernels import MeanState, reduce_level

        out: list[np.ndarray] = []
        if kind == "image":
            state = MeanState.from_base(self.volume, (0, 0, 0), self.volume.shape)
            for _ in range(self.levels):
                state = state.next((2, 2, 2))
                out.append(state.mean())
        else:
            level = self.labels
            for _ in range(self.levels):
                level = reduce_level(level, (2, 2, 2), "mode")
                out.append(level)
        return out


def _pyramid_levels(size: int) -> int:
    levels = 0
    while size > PYRAMID_UNTIL:
        size = -(-size // 2)
        levels += 1
    return max(levels, 1) if size > 1 else levels


def _as_zyx(values: np.ndarray, fmt: DemoFormat) -> np.ndarray:
    return values[..., 0].T if fmt.xyz else values


def _demo_array(fmt: DemoFormat, kind: str, directory: Path, data: DemoData, *, progress: bool) -> DemoResult:
    from .api import open as open_node
    from .ops.downsample import downsample

    assert fmt.create is not None
    values = data.values(kind)
    path = directory / fmt.base(kind)
    array = fmt.create(directory, kind, values.shape, values.dtype, demo_grid(values.shape))
    transposed = values.T  # [x, y, z] for precomputed: a view, no copy

    def source(region: tuple[slice, ...]) -> Any:
        return transposed[region[:3]][..., None] if fmt.xyz else values[region]

    grid = demo_grid(values.shape)
    # whole shards per write: precomputed arrays do not expose a shard shape, so give it
    block = grid.shards[::-1] + (1,) if fmt.xyz else None
    t0 = time.perf_counter()
    write_blocks(array, source, block=block, progress=progress, desc=f"  writing {fmt.name} {kind}")
    write_seconds = time.perf_counter() - t0

    t0 = time.perf_counter()
    reopened = open_node(path, mode="r")
    back = _as_zyx(np.asarray(reopened), fmt)
    read_seconds = time.perf_counter() - t0
    same = back.shape == values.shape and back.dtype == values.dtype
    mismatches = int(np.count_nonzero(back != values)) if same else values.size
    del back
    location = directory / fmt.pyramid[kind] if fmt.pyramid else path
    base_files, base_bytes = directory_size(location)

    pyramid = ""
    pyramid_seconds = 0.0
    if data.levels:
        t0 = time.perf_counter()
        result = downsample(location, (2, 2, 2), levels=data.levels)
        pyramid_seconds = time.perf_counter() - t0
        for level, want in zip(result.levels, data.pyramid(kind)):
            got = _as_zyx(np.asarray(level), fmt)
            mismatches += int(np.count_nonzero(got != want)) if got.shape == want.shape else want.size
        shapes = ", ".join(_shape_text(lv.shape[:3][::-1] if fmt.xyz else lv.shape) for lv in result.levels)
        pyramid = f"{result.method}, {len(result.levels)} levels {shapes}"
    _, total_bytes = directory_size(location)
    codecs = _codecs_text(reopened)
    return DemoResult(
        format=fmt.name, dataset=kind, path=path, shape=tuple(values.shape), dtype=str(values.dtype),
        chunks=tuple(reopened.chunks), shards=reopened.shards,
        codecs=codecs,
        files=base_files, stored_bytes=base_bytes, nbytes=values.nbytes, write_seconds=write_seconds,
        read_seconds=read_seconds, ok=same and mismatches == 0, mismatches=mismatches, pyramid=pyramid,
        pyramid_seconds=pyramid_seconds, pyramid_bytes=total_bytes - base_bytes,
    )


def _codecs_text(array: Array) -> str:
    meta = array.metadata
    if "codecs" in meta:
        return codecs_summary(meta["codecs"])
    if "compression" in meta:  # N5
        c = dict(meta["compression"])
        return _codec_text({"name": c.pop("type", "?"), "configuration": c})
    scale = meta.get("scales", [{}])[0]  # precomputed
    sharding = scale.get("sharding")
    text = scale.get("encoding", "?")
    if sharding:
        text += (f" in {sharding['@type']} (preshift {sharding['preshift_bits']}, minishard "
                 f"{sharding['minishard_bits']}, shard {sharding['shard_bits']} bits, {sharding['data_encoding']})")
    return text


def label_statistics(volume: np.ndarray, labels: np.ndarray) -> dict[str, np.ndarray]:
    """One row per label: voxel count, mean intensity, centroid (z, y, x), in label order."""
    ids, inverse = np.unique(labels, return_inverse=True)
    inverse = inverse.reshape(labels.shape)
    n = len(ids)
    sums = {k: np.zeros(n) for k in ("voxels", "intensity", "z", "y", "x")}
    yy, xx = np.indices(labels.shape[1:])
    for z in range(labels.shape[0]):  # one plane at a time: no full-size float temporaries
        inv = inverse[z].ravel()
        sums["voxels"] += np.bincount(inv, minlength=n)
        sums["intensity"] += np.bincount(inv, weights=volume[z].ravel(), minlength=n)
        sums["z"] += np.bincount(inv, minlength=n) * z
        sums["y"] += np.bincount(inv, weights=yy.ravel(), minlength=n)
        sums["x"] += np.bincount(inv, weights=xx.ravel(), minlength=n)
    count = sums["voxels"]
    return {
        "label": ids.astype(np.uint64),
        "voxels": count.astype(np.int64),
        "mean_intensity": (sums["intensity"] / count).astype(np.float32),
        "centroid_z": (sums["z"] / count).astype(np.float32),
        "centroid_y": (sums["y"] / count).astype(np.float32),
        "centroid_x": (sums["x"] / count).astype(np.float32),
    }


def _demo_table(fmt: DemoFormat, directory: Path, data: DemoData) -> DemoResult:
    from .api import open as open_node
    from .formats import bcolz

    path = directory / fmt.dirname
    stats = label_statistics(data.volume, data.labels)
    nbytes = sum(v.nbytes for v in stats.values())
    t0 = time.perf_counter()
    table = bcolz.ctable(stats, rootdir=str(path), mode="w")
    table.attrs[DEMO_MARKER] = {"generator": "label_statistics"}
    table.flush()
    write_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    back = open_node(path, mode="r")
    columns = {name: np.asarray(back[name]) for name in stats}
    read_seconds = time.perf_counter() - t0
    mismatches = sum(int(np.count_nonzero(columns[k] != v)) if columns[k].shape == v.shape else v.size
                     for k, v in stats.items())
    files, stored = directory_size(path)
    return DemoResult(
        format=fmt.name, dataset=f"table, {len(stats['label'])} labels", path=path,
        shape=(len(stats["label"]),), dtype=", ".join(f"{k} {v.dtype}" for k, v in stats.items()),
        chunks=(int(getattr(back, "chunklen", 0) or len(stats["label"])),), shards=None, codecs="blosc",
        files=files, stored_bytes=stored, nbytes=nbytes, write_seconds=write_seconds,
        read_seconds=read_seconds, ok=mismatches == 0, mismatches=mismatches,
    )


def demo_one(
    fmt: DemoFormat, directory: Path, data: DemoData, *, progress: bool = True, out: TextIO | None = None,
) -> list[DemoResult]:
    """Write, verify and report the demo data in ``fmt`` below ``directory``."""
    out = out or sys.stdout
    for container in fmt.containers:
        _check_replaceable(directory / container)
    print(f"\n[{fmt.name}] {fmt.title}", file=out, flush=True)
    if fmt.create is None:
        results = [_demo_table(fmt, directory, data)]
    else:
        results = [_demo_array(fmt, kind, directory, data, progress=progress) for kind in KINDS]
    for r in results:
        _report(r, out)
    return results


def _report(r: DemoResult, out: TextIO) -> None:
    print(f"  {r.dataset} -> {r.path}", file=out)
    rows = [
        ("shape", _shape_text(r.shape)),
        ("dtype", r.dtype),
        ("chunks", _shape_text(r.chunks)),
        ("shards", _shape_text(r.shards)),
        ("codecs", r.codecs),
        ("size on disk", f"{format_bytes(r.stored_bytes)} in {r.files} files (data {format_bytes(r.nbytes)})"),
        ("compression", f"{r.ratio:.2f}x"),
        ("write", f"{r.write_mbps:.1f} MB/s ({r.write_seconds:.2f} s)"),
        ("read", f"{r.read_mbps:.1f} MB/s ({r.read_seconds:.2f} s, warm page cache)"),
    ]
    if r.pyramid:
        rows.append(("pyramid", f"{r.pyramid}: {format_bytes(r.pyramid_bytes)}, {r.pyramid_seconds:.2f} s"))
    for label, value in rows:
        print(f"    {label:<13}{value}", file=out)
    if r.ok:
        levels = "; every pyramid level equal to NumPy's" if r.pyramid else ""
        print(f"    verified: OK, all {math.prod(r.shape):,} values read back identical{levels}", file=out)
    else:
        print(f"    verified: FAILED, {r.mismatches:,} values differ from what was written", file=out)
    out.flush()


def summary_table(results: Sequence[DemoResult]) -> str:
    """The closing table: one row per dataset."""
    header = ("format", "dataset", "on disk", "ratio", "write MB/s", "read MB/s", "pyramid s", "verified")
    rows = [header] + [(
        r.format, r.dataset.split(",")[0], format_bytes(r.stored_bytes + r.pyramid_bytes), f"{r.ratio:.1f}x",
        f"{r.write_mbps:.0f}", f"{r.read_mbps:.0f}", f"{r.pyramid_seconds:.2f}" if r.pyramid else "-",
        "OK" if r.ok else "FAILED") for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def run_demo(
    directory: str | os.PathLike[str],
    *,
    size: int = 256,
    formats: Sequence[str] | None = None,
    seed: int = 0,
    progress: bool = True,
    out: TextIO | None = None,
) -> list[DemoResult]:
    """Run the demo for ``formats`` (default: all) in ``directory``, printing to ``out``
    (default: stdout); see the module docstring."""
    out = out or sys.stdout
    names = list(formats or DEMO_FORMATS)
    unknown = [n for n in names if n not in DEMO_FORMATS]
    if unknown:
        raise ValueError(f"unknown demo format(s) {unknown}; known: {sorted(DEMO_FORMATS)}")
    if size < 1:
        raise ValueError(f"--size must be at least 1, got {size}")
    directory = Path(directory).expanduser().absolute()
    if directory.exists() and not directory.is_dir():
        raise ContainsNodeError(f"{str(directory)!r} exists and is not a directory")
    for name in names:  # refuse before writing anything
        for container in DEMO_FORMATS[name].containers:
            _check_replaceable(directory / container)
    directory.mkdir(parents=True, exist_ok=True)

    t_start = t0 = time.perf_counter()
    volume, labels = em_like_pair(size, seed=seed)
    print(f"generated a {size}^3 uint8 EM-like volume ({format_bytes(volume.nbytes)}, seed {seed}) and its "
          f"uint64 segmentation ({len(np.unique(labels[::4, ::4, ::4]))}+ labels) in {time.perf_counter() - t0:.2f} s",
          file=out, flush=True)
    data = DemoData(volume, labels, _pyramid_levels(size))
    results = [r for n in names for r in demo_one(DEMO_FORMATS[n], directory, data, progress=progress, out=out)]
    print(f"\nsummary ({time.perf_counter() - t_start:.1f} s in all; sizes include the pyramids):", file=out)
    print(summary_table(results), file=out)
    print(file=out)
    for r in results:
        print(f"open it: python -c \"import shardstore; a = shardstore.open({str(r.path)!r}); print(a)\"", file=out)
    print(f"\nsee it in Neuroglancer:\n  shardstore view {directory}", file=out)
    out.flush()
    return results
