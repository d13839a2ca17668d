"""``shardstore demo``: write a synthetic EM-like volume, read it back, verify, report speed.

Needs no data and no servers. Each format joins the demo with one small ``create`` function
and one row in ``DEMO_FORMATS``; the writing, reading, verifying and reporting are shared.

``em_like_volume(size, seed)`` is public so that benchmarks and tests use the same data.
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
from .errors import ContainsNodeError, ShardStoreError

__all__ = [
    "em_like_volume",
    "DemoFormat",
    "DemoResult",
    "DEMO_FORMATS",
    "demo_grid",
    "run_demo",
    "write_blocks",
    "iter_blocks",
    "count_blocks",
    "directory_size",
    "format_bytes",
    "codecs_summary",
]

#: attribute marking an array the demo wrote, so re-running the demo may replace it
DEMO_MARKER = "shardstore_demo"


# --------------------------------------------------------------------------- the volume

# z-planes generated per step: bounds the float32 temporaries (size^2 * 4 B per plane) and
# fixes the order of noise draws, so a seed gives the same volume however it is consumed
_SLAB = 16


class _SmoothField:
    """A smooth random field: a coarse Gaussian grid, smoothstep-interpolated to full size,
    produced one z-plane at a time (the interpolation is separable)."""

    def __init__(self, rng: np.random.Generator, shape: tuple[int, ...], cell: int) -> None:
        self.cell = cell
        self.coarse = rng.standard_normal([s // cell + 2 for s in shape], dtype=np.float32)
        self.y = self._weights(shape[1])
        self.x = self._weights(shape[2])
        self._planes: dict[int, np.ndarray] = {}

    def _weights(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        pos = np.arange(n, dtype=np.float32) / self.cell
        i0 = np.floor(pos).astype(np.intp)
        f = pos - i0
        return i0, i0 + 1, f * f * (3 - 2 * f)  # smoothstep: no visible grid creases

    def _coarse_plane(self, k: int) -> np.ndarray:
        """Coarse z-plane ``k`` upsampled in y and x (the two most recent are kept)."""
        plane = self._planes.get(k)
        if plane is None:
            c = self.coarse[k]
            y0, y1, wy = self.y
            c = c[y0] * (1 - wy)[:, None] + c[y1] * wy[:, None]
            x0, x1, wx = self.x
            plane = c[:, x0] * (1 - wx) + c[:, x1] * wx
            if len(self._planes) >= 2:
                del self._planes[min(self._planes)]
            self._planes[k] = plane
        return plane

    def plane(self, z: int) -> np.ndarray:
        """The field at z-plane ``z`` (float32, shape (Y, X)); call with increasing ``z``."""
        pos = z / self.cell
        k = int(pos)
        f = pos - k
        w = np.float32(f * f * (3 - 2 * f))
        out = self._coarse_plane(k) * (1 - w)
        out += self._coarse_plane(k + 1) * w
        return out


def em_like_volume(size: int | Sequence[int], seed: int = 0) -> np.ndarray:
    """A deterministic uint8 volume that looks and compresses roughly like electron microscopy.

    Smooth random fields (trilinear-style upsampling of coarse random grids at two scales)
    give the slowly varying cytoplasm intensity, a third field's zero level set gives dark
    membrane-like sheets, and Gaussian noise gives the grain. NumPy only; about 1 s per
    100 MB on one core.

    ``size`` is the edge of a cube or a 3-tuple shape; the same ``seed`` gives the same data.
    """
    edges = [int(s) for s in np.ravel(size)]
    shape = tuple(edges * 3 if np.ndim(size) == 0 else edges)
    if len(shape) != 3 or any(s < 1 for s in shape):
        raise ValueError(f"em_like_volume needs a positive cube edge or 3-D shape, got {size!r}")
    rng = np.random.default_rng(seed)
    large = _SmoothField(rng, shape, 48)   # slow brightness changes across the section
    texture = _SmoothField(rng, shape, 8)  # organelle-scale texture
    cells = _SmoothField(rng, shape, 24)   # membranes where this field crosses zero
    out = np.empty(shape, dtype=np.uint8)
    for z0 in range(0, shape[0], _SLAB):
        z1 = min(z0 + _SLAB, shape[0])
        noise = rng.standard_normal((z1 - z0,) + shape[1:], dtype=np.float32)
        noise *= 7
        for z in range(z0, z1):
            value = noise[z - z0]
            value += 150
            value += 30 * large.plane(z)
            value += 18 * texture.plane(z)
            membrane = np.abs(cells.plane(z))
            membrane *= -6
            membrane += 1
            np.clip(membrane, 0, 1, out=membrane)
            value -= 90 * membrane
            np.clip(value, 0, 255, out=value)
            out[z] = value  # float -> uint8 truncates; values are already in range
    return out


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


# --------------------------------------------------------------------------- the formats

@dataclass(frozen=True)
class DemoGrid:
    """The demo's chunking for a volume: chunk edge 64 and shard edge 256, clipped to fit."""

    chunks: tuple[int, ...]
    shards: tuple[int, ...]


def demo_grid(shape: Sequence[int], chunk: int = 64, shard: int = 256) -> DemoGrid:
    """Chunks of ``chunk`` (at most the array's extent) and shards of ``shard`` (at most the
    array's extent rounded up to whole chunks), so small volumes still make sense."""
    chunks = tuple(max(1, min(chunk, s)) for s in shape)
    shards = tuple(min(shard - shard % c or c, -(-s // c) * c) for s, c in zip(shape, chunks))
    return DemoGrid(chunks, shards)


def _create_zarr3(path: Path, shape: tuple[int, ...], dtype: np.dtype, grid: DemoGrid) -> Array:
    from .formats import zarr3

    return zarr3.create(
        path, shape=shape, dtype=dtype, chunks=grid.chunks, shards=grid.shards,
        dimension_names=["z", "y", "x"],
        attributes={DEMO_MARKER: {"generator": "em_like_volume"}}, mode="w",
    )


@dataclass(frozen=True)
class DemoFormat:
    """One row of the demo: how to create an empty array of this format.

    ``create(path, shape, dtype, grid)`` returns the new, writable ``Array`` (replacing what
    is at ``path``) and must set the ``DEMO_MARKER`` attribute. Everything else is shared.
    """

    name: str
    title: str
    dirname: str
    create: Callable[[Path, tuple[int, ...], np.dtype, DemoGrid], Array]


#: add a format here (N5, Neuroglancer precomputed, bcolz join as they land)
DEMO_FORMATS: dict[str, DemoFormat] = {
    f.name: f
    for f in [
        DemoFormat("zarr3", "Zarr v3, sharding_indexed", "em_uint8.zarr", _create_zarr3),
    ]
}


# --------------------------------------------------------------------------- running it

@dataclass
class DemoResult:
    """What one format's demo run measured."""

    format: str
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


def demo_one(
    fmt: DemoFormat, directory: Path, volume: np.ndarray, *, progress: bool = True,
    out: TextIO | None = None,
) -> DemoResult:
    """Write ``volume`` in ``fmt`` below ``directory``, read it back, verify and report."""
    out = out or sys.stdout
    from .api import open as open_node

    path = directory / fmt.dirname
    _check_replaceable(path)
    print(f"\n[{fmt.name}] {fmt.title} -> {path}", file=out, flush=True)
    grid = demo_grid(volume.shape)

    array = fmt.create(path, volume.shape, volume.dtype, grid)
    t0 = time.perf_counter()
    write_blocks(array, lambda region: volume[region], progress=progress, desc=f"  writing {fmt.name}")
    write_seconds = time.perf_counter() - t0

    t0 = time.perf_counter()
    reopened = open_node(path, mode="r")
    back = np.asarray(reopened)
    read_seconds = time.perf_counter() - t0

    same = back.shape == volume.shape and back.dtype == volume.dtype
    mismatches = int(np.count_nonzero(back != volume)) if same else volume.size
    ok = same and mismatches == 0
    del back
    files, stored = directory_size(path)
    codecs = reopened.metadata.get("codecs", [])
    result = DemoResult(
        format=fmt.name, path=path, shape=tuple(reopened.shape), dtype=str(reopened.dtype),
        chunks=tuple(reopened.chunks), shards=reopened.shards, codecs=codecs_summary(codecs),
        files=files, stored_bytes=stored, nbytes=volume.nbytes, write_seconds=write_seconds,
        read_seconds=read_seconds, ok=ok, mismatches=mismatches,
    )
    _report(result, out)
    return result


def _report(r: DemoResult, out: TextIO) -> None:
    rows = [
        ("shape", _shape_text(r.shape)),
        ("dtype", r.dtype),
        ("chunks", _shape_text(r.chunks)),
        ("shards", _shape_text(r.shards)),
        ("codecs", r.codecs),
        ("size on disk", f"{format_bytes(r.stored_bytes)} in {r.files} files "
                         f"(data {format_bytes(r.nbytes)})"),
        ("compression", f"{r.ratio:.2f}x"),
        ("write", f"{r.write_mbps:.1f} MB/s ({r.write_seconds:.2f} s)"),
        ("read", f"{r.read_mbps:.1f} MB/s ({r.read_seconds:.2f} s, warm page cache)"),
    ]
    for label, value in rows:
        print(f"  {label:<13}{value}", file=out)
    if r.ok:
        print(f"  verified: OK, all {r.shape and math.prod(r.shape):,} voxels read back identical",
              file=out)
    else:
        print(f"  verified: FAILED, {r.mismatches:,} voxels differ from what was written", file=out)
    out.flush()


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
    directory.mkdir(parents=True, exist_ok=True)

    t0 = time.perf_counter()
    volume = em_like_volume(size, seed=seed)
    print(f"generated a {size}^3 uint8 EM-like volume ({format_bytes(volume.nbytes)}, seed {seed}) "
          f"in {time.perf_counter() - t0:.2f} s", file=out, flush=True)
    results = [demo_one(DEMO_FORMATS[n], directory, volume, progress=progress, out=out) for n in names]
    print("", file=out)
    for r in results:
        print(f"open it: python -c \"import shardstore; a = shardstore.open({str(r.path)!r}); "
              f"print(a, a[0, :4, :4])\"", file=out)
    out.flush()
    return results
