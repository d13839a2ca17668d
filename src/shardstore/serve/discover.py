"""Find the datasets below a served root and describe them for Neuroglancer.

Walks directories (local) or one bounded key listing (S3) down to ``max_depth`` levels, opens
every node whose metadata is there through ``shardstore.open``, and describes each viewable
dataset: its Neuroglancer source string, layer type, dtype, axis names and voxel size. Arrays
are leaves; groups are descended into, except multiscale groups (OME-Zarr ``multiscales``, N5
``scales`` / ``downsamplingFactors``), which Neuroglancer shows as one pyramid.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .. import api
from ..config import IOConfig
from ..core.array import Array
from ..errors import ShardStoreError
from .source import LocalSource, Source

__all__ = ["MARKERS", "SCHEMES", "Dataset", "describe", "find_datasets"]

#: Neuroglancer's data source scheme per format (bcolz has none: it is listed, not viewable)
SCHEMES = {"zarr3": "zarr3", "n5": "n5", "precomputed": "precomputed"}
#: metadata keys that make a directory worth opening (as in ``formats.detect``)
MARKERS = ("zarr.json", "attributes.json", "info", "meta/sizes", "__rootdirs__")
#: dtypes shown as segmentations (Neuroglancer segmentations are uint32 / uint64 labels)
LABEL_DTYPES = ("uint32", "uint64")
#: Neuroglancer's names for N5 axes without an "axes" attribute
N5_AXES = ("x", "y", "z", "t", "c")


@dataclass(frozen=True)
class Dataset:
    """A dataset found below the root, described the way Neuroglancer will see it.

    ``dims`` are Neuroglancer's names of the spatial axes in display order (x-like first),
    ``voxel_size`` and ``units`` go with them ("" when the metadata gives no unit), ``shape``
    is the base level's size along them.
    """

    path: str
    format: str
    dtype: str
    layer_type: str
    dims: tuple[str, ...]
    voxel_size: tuple[float, ...]
    units: tuple[str, ...]
    shape: tuple[int, ...]
    levels: int = 1
    #: a name for the root dataset (whose path is "")
    title: str = ""

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1] or self.title or "data"

    @property
    def viewable(self) -> bool:
        return self.format in SCHEMES

    def source(self, base_url: str) -> str | None:
        """The Neuroglancer source string, e.g. ``zarr3://http://127.0.0.1:8000/a.zarr/``."""
        scheme = SCHEMES.get(self.format)
        if scheme is None:
            return None
        url = base_url.rstrip("/") + "/" + (self.path.strip("/") + "/" if self.path.strip("/") else "")
        return f"{scheme}://{url}"


# -- describing one node ---------------------------------------------------------------------
def _numbers(value: Any, n: int) -> list[float] | None:
    if isinstance(value, (list, tuple)) and len(value) == n and all(isinstance(v, (int, float)) for v in value):
        return [float(v) for v in value]
    return None


def _ome(attrs: dict[str, Any]) -> dict[str, Any] | None:
    """The first OME-Zarr multiscale (0.5 under ``ome``, 0.4 at the top level), or None."""
    ms = attrs.get("ome", {}).get("multiscales") if isinstance(attrs.get("ome"), dict) else None
    ms = ms or attrs.get("multiscales")
    if isinstance(ms, list) and ms and isinstance(ms[0], dict) and ms[0].get("datasets"):
        return ms[0]
    return None


def _ome_scale(multiscale: dict[str, Any]) -> list[float] | None:
    """The voxel size of the first level: its ``scale`` transform (times a global one)."""
    n = len(multiscale.get("axes", []))
    scale = None
    for t in multiscale["datasets"][0].get("coordinateTransformations", []):
        if isinstance(t, dict) and t.get("type") == "scale":
            scale = _numbers(t.get("scale"), n)
    for t in multiscale.get("coordinateTransformations", []) or []:
        outer = _numbers(t.get("scale"), n) if isinstance(t, dict) and t.get("type") == "scale" else None
        if outer and scale:
            scale = [a * b for a, b in zip(scale, outer)]
    return scale


def _order(names: Sequence[str]) -> list[int]:
    """Axis positions in display order: x, y, z first when named so, else the given order."""
    rank = {"x": 0, "y": 1, "z": 2}
    return sorted(range(len(names)), key=lambda i: (rank.get(names[i].lower(), 3), i))


def _layer_type(dtype: str, declared: str | None = None) -> str:
    if declared in ("image", "segmentation"):
        return declared
    return "segmentation" if dtype in LABEL_DTYPES else "image"


def _spatial(
    path: str, fmt: str, dtype: str, layer_type: str, names: Sequence[str], shape: Sequence[int],
    voxel: Sequence[float] | None, units: Sequence[str] | None, levels: int = 1,
) -> Dataset:
    n = len(names)
    voxel = list(voxel) if voxel is not None and len(voxel) == n else [1.0] * n
    units = list(units) if units is not None and len(units) == n else [""] * n
    order = _order(names)
    return Dataset(path, fmt, dtype, layer_type, tuple(names[i] for i in order),
                   tuple(float(voxel[i]) for i in order), tuple(str(units[i]) for i in order),
                   tuple(int(shape[i]) for i in order), levels)


def _describe_zarr3(path: str, node: Any) -> Dataset | None:
    if isinstance(node, Array):
        # unnamed axes: Neuroglancer's names for Zarr v3 ("dim_0", ...)
        names = [n or f"dim_{i}" for i, n in enumerate(node.dimension_names or [None] * node.ndim)]
        # C order: the last axis varies fastest, Neuroglancer shows it horizontally
        rev = list(range(node.ndim))[::-1] if not any(n in ("x", "y", "z") for n in names) else list(range(node.ndim))
        return _spatial(path, "zarr3", node.dtype.name, _layer_type(node.dtype.name),
                        [names[i] for i in rev], [node.shape[i] for i in rev], None, None)
    ms = _ome(dict(node.attrs))
    if ms is None:
        return None
    first = node[str(ms["datasets"][0]["path"])]
    if not isinstance(first, Array):
        return None
    axes = ms.get("axes") or [{"name": f"d{i}"} for i in range(first.ndim)]
    names = [a["name"] if isinstance(a, dict) else str(a) for a in axes]
    units = [a.get("unit", "") if isinstance(a, dict) else "" for a in axes]
    return _spatial(path, "zarr3", first.dtype.name, _layer_type(first.dtype.name), names, first.shape,
                    _ome_scale(ms), units, levels=len(ms["datasets"]))


def _n5_resolution(attrs: dict[str, Any], n: int) -> tuple[list[float] | None, list[str] | None]:
    """N5 voxel size and units in N5 axis order: ``resolution`` + ``units``, or the n5-viewer
    ``pixelResolution`` ``{"dimensions": [...], "unit": "nm"}``."""
    res = _numbers(attrs.get("resolution"), n)
    units = attrs.get("units") if isinstance(attrs.get("units"), list) and len(attrs["units"]) == n else None
    pr = attrs.get("pixelResolution")
    if res is None and isinstance(pr, dict):
        res = _numbers(pr.get("dimensions"), n)
        if res is not None and isinstance(pr.get("unit"), str):
            units = [pr["unit"]] * n
    elif res is None:
        res = _numbers(pr, n)
    return res, units


def _describe_n5(path: str, node: Any) -> Dataset | None:
    attrs = dict(node.attrs)
    levels = 1
    if isinstance(node, Array):
        array = node
    else:
        # an n5-viewer multiscale group: s0, s1, ... with "scales" or "downsamplingFactors"
        first = node["s0"] if "s0" in node else None  # noqa: SIM401 - groups have no .get()
        if not isinstance(first, Array) or not ("scales" in attrs or "downsamplingFactors" in dict(first.attrs)):
            return None
        array = first
        levels = sum(1 for k in node if k.startswith("s") and k[1:].isdigit())
        attrs = {**dict(array.attrs), **attrs}
    n = array.ndim
    # N5 lists axes fastest first (x, y, z): the reverse of the array's C-order shape
    shape = list(array.shape)[::-1]
    axes = attrs.get("axes") if isinstance(attrs.get("axes"), list) and len(attrs["axes"]) == n else None
    # without "axes" Neuroglancer names them x, y, z, t, c, d6, ...; without "units", nm
    names = [str(a) for a in axes] if axes else [N5_AXES[i] if i < len(N5_AXES) else f"d{i + 1}" for i in range(n)]
    res, units = _n5_resolution(attrs, n)
    units = units or ["nm"] * n
    return _spatial(path, "n5", array.dtype.name, _layer_type(array.dtype.name), names, shape, res, units, levels)


def _describe_precomputed(path: str, node: Any) -> Dataset:
    info = node.metadata
    scale = info["scales"][0]
    return _spatial(path, "precomputed", info["data_type"], _layer_type(info["data_type"], info.get("type")),
                    ["x", "y", "z"], scale["size"], scale["resolution"], ["nm"] * 3, levels=len(info["scales"]))


def describe(path: str, node: Any) -> Dataset | None:
    """The ``Dataset`` for an opened node, or None for a plain group (to descend into)."""
    fmt = node.format if isinstance(node, Array) else type(node).__module__.split(".")[-2]
    if fmt == "zarr3":
        return _describe_zarr3(path, node)
    if fmt == "n5":
        return _describe_n5(path, node)
    if fmt == "precomputed":
        return _describe_precomputed(path, node)
    if fmt == "bcolz":
        dtype = node.dtype.name if isinstance(node, Array) else "ctable"
        shape = tuple(node.shape) if isinstance(node, Array) else ()
        return Dataset(path, "bcolz", dtype, "none", (), (), (), shape)
    return None


# -- walking ---------------------------------------------------------------------------------
def _local_dirs(source: LocalSource, max_depth: int, max_dirs: int) -> Iterator[str]:
    """Key prefixes of directories (breadth first) that hold a metadata marker."""
    root = source.where
    queue: list[tuple[str, int]] = [("", 0)]
    visited = 0
    while queue and visited < max_dirs:
        rel, depth = queue.pop(0)
        visited += 1
        here = os.path.join(root, *rel.split("/")) if rel else root
        try:
            entries = sorted(os.scandir(here), key=lambda e: e.name)
        except OSError:
            continue
        names = {e.name for e in entries}
        if any(m.split("/")[0] in names for m in MARKERS):
            yield rel
        if depth >= max_depth:
            continue
        for e in entries:
            if e.name.startswith(".") or not e.is_dir():
                continue
            child = f"{rel}/{e.name}" if rel else e.name
            if source.resolve(child) is not None:  # no walking through symlinks leading out
                queue.append((child, depth + 1))


def _listed_dirs(source: Source, max_depth: int, max_keys: int) -> Iterator[str]:
    """Key prefixes holding a metadata marker, from one bounded listing (object stores)."""
    from .._sync import sync

    async def listing() -> set[str]:
        found: set[str] = set()
        count = 0
        async for key in source.store.list_prefix(""):
            count += 1
            for m in MARKERS:
                if key == m or key.endswith("/" + m):
                    prefix = key[: -len(m)].rstrip("/")
                    if prefix.count("/") + (1 if prefix else 0) <= max_depth:
                        found.add(prefix)
            if count >= max_keys:
                break
        return found

    try:
        found = sync(listing())
    except ShardStoreError:  # e.g. plain HTTP cannot list: look at the root only
        found = {""}
    yield from sorted(found, key=lambda p: (p.count("/") + (1 if p else 0), p))


def find_datasets(source: Source, max_depth: int = 4, *, max_listed_keys: int = IOConfig.discover_max_listed_keys,
                  max_dirs: int = IOConfig.discover_max_dirs) -> list[Dataset]:
    """Every dataset at most ``max_depth`` directories below the root, sorted by path; a
    remote root is listed up to ``max_listed_keys`` keys, a local one walked through at most
    ``max_dirs`` directories (discovery must stay cheap)."""
    if isinstance(source, LocalSource):
        dirs = _local_dirs(source, max_depth, max_dirs)
    else:
        dirs = _listed_dirs(source, max_depth, max_listed_keys)
    found: list[Dataset] = []
    taken: list[str] = []  # datasets' paths: nothing below them is another dataset
    for path in dirs:
        if any(path == t or path.startswith(t + "/") or not t for t in taken):
            continue
        try:
            node = api.open(source.store, path=path)
        except (ShardStoreError, KeyError, ValueError, TypeError):
            continue
        try:
            dataset = describe(path, node)
        except (ShardStoreError, KeyError, ValueError, TypeError):
            continue
        if dataset is not None:
            if not path:
                dataset = dataclasses.replace(dataset, title=source.where.rstrip("/").rsplit("/", 1)[-1])
            found.append(dataset)
            taken.append(path)
    return sorted(found, key=lambda d: d.path)
