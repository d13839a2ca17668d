"""Neuroglancer viewer state for a set of datasets, and the link that opens it (pure code).

The state is what Neuroglancer reads from a ``#!{json}`` URL fragment: one layer per viewable
dataset, the right source scheme, image or segmentation by declared type and dtype, an
``invlerp`` contrast range that fits the dtype, and global dimensions carrying the voxel
size from the metadata (in metres when the unit is known, unitless otherwise).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import numpy as np

from .discover import Dataset

__all__ = ["UNIT_METRES", "contrast_range", "neuroglancer_link", "neuroglancer_state"]

#: length units Neuroglancer understands, as a factor to metres (OME and N5 spellings)
UNIT_METRES = {
    "m": 1.0, "meter": 1.0, "metre": 1.0,
    "mm": 1e-3, "millimeter": 1e-3,
    "um": 1e-6, "µm": 1e-6, "micrometer": 1e-6, "micron": 1e-6,
    "nm": 1e-9, "nanometer": 1e-9,
    "pm": 1e-12, "picometer": 1e-12,
    "angstrom": 1e-10,
}


def contrast_range(dtype: str) -> list[float]:
    """The ``invlerp`` range shown for an image of ``dtype``: the full integer range, or
    [0, 1] for floats (the usual range of normalised intensities)."""
    dt = np.dtype(dtype)
    if dt.kind in "ui":
        info = np.iinfo(dt)
        return [int(info.min), int(info.max)]
    return [0, 1]


def _dimension(size: float, unit: str) -> list[Any]:
    factor = UNIT_METRES.get(unit.strip().lower()) if unit else None
    if factor is None:
        return [size, ""]
    return [float(np.float64(size) * factor), "m"]


def _layer(dataset: Dataset, source: str) -> dict[str, Any]:
    layer: dict[str, Any] = {"type": dataset.layer_type, "source": source, "name": dataset.name}
    if dataset.layer_type == "image":
        layer["shader"] = "#uicontrol invlerp normalized\nvoid main() {\n  emitGrayscale(normalized());\n}\n"
        layer["shaderControls"] = {"normalized": {"range": contrast_range(dataset.dtype)}}
    return layer


def neuroglancer_state(
    datasets: Sequence[Dataset],
    base_url: str | Sequence[str],
    *,
    layout: str = "xy",
    viewport: int = 800,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The viewer state showing every viewable dataset served at ``base_url`` (one URL for
    all, or one per dataset).

    Layer names are the datasets' last path segments (made unique). The zoom
    (``crossSectionScale``: global units per screen pixel) fits the largest dataset's first
    two display axes into about ``viewport`` pixels. ``extra`` members (``position``,
    ``crossSectionScale``, ...) are merged in last.
    """
    layers: list[dict[str, Any]] = []
    dimensions: dict[str, list[Any]] = {}
    used: set[str] = set()
    urls = [base_url] * len(datasets) if isinstance(base_url, str) else list(base_url)
    if len(urls) != len(datasets):
        raise ValueError(f"got {len(urls)} base URLs for {len(datasets)} datasets")
    for d, url in zip(datasets, urls):
        source = d.source(url)
        if source is None:
            continue
        layer = _layer(d, source)
        name, n = layer["name"], 2
        while layer["name"] in used:
            layer["name"] = f"{name} ({n})"
            n += 1
        used.add(layer["name"])
        layers.append(layer)
        for dim, size, unit in zip(d.dims, d.voxel_size, d.units):
            dimensions.setdefault(dim, _dimension(size, unit))
    state: dict[str, Any] = {"dimensions": dimensions, "layers": layers, "layout": layout}
    extent = _extent(datasets, dimensions)
    if extent > 0:
        state["crossSectionScale"] = extent / viewport
    if layers:
        state["selectedLayer"] = {"layer": layers[0]["name"], "visible": False}
    state.update(extra or {})
    return state


def _extent(datasets: Sequence[Dataset], dimensions: dict[str, list[Any]]) -> float:
    """The largest size of a viewable dataset along its first two display axes, in units of
    the global dimensions (which may differ from its own voxel size)."""
    extent = 0.0
    for d in datasets:
        if not d.viewable:
            continue
        for dim, n, size, unit in list(zip(d.dims, d.shape, d.voxel_size, d.units))[:2]:
            own = _dimension(size, unit)[0]
            extent = max(extent, n * own / dimensions[dim][0] if dimensions[dim][0] else n)
    return extent


def neuroglancer_link(state: dict[str, Any], client_url: str) -> str:
    """``client_url`` with the state in its ``#!`` fragment (compact JSON, URL-quoted)."""
    text = json.dumps(state, separators=(",", ":"))
    return client_url.split("#", 1)[0] + "#!" + quote(text, safe="{}[],:\"'/@=+-_.~!*()")
