"""Neuroglancer really shows what shardstore writes: headless Chromium (the Debian package)
runs the Neuroglancer client bundled in the ``neuroglancer`` pip package, served with the data
by ``shardstore.serve.Server`` (what ``shardstore view`` runs), on the state that
``neuroglancer_state`` builds; a screenshot must show the known pattern at the known place.

Each volume holds four constant quadrants in x/y (the same on every z slice), so the centre
of the panel shows four known values in a known arrangement. The pyramid's coarse level has
different values from its base, so the zoomed-out view proves the coarse level is on screen.
A source that answers 404 must fail the same check (negative control).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import shardstore
from shardstore.serve import Server, neuroglancer_link, neuroglancer_state

pytest_plugins = ["_servers"]
pytestmark = pytest.mark.timeout(240)

CHROMIUM = "/usr/bin/chromium"
#: the flags that work on these machines (no GPU: WebGL2 in SwiftShader)
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--enable-unsafe-swiftshader"]
VIEWPORT = 800
#: the Neuroglancer top bar and layer bar above the cross-section panel (pixels)
TOP = 48
#: grey levels of the four quadrants (x low/high, y low/high); none near the UI greys
BASE = (40, 90, 170, 220)
COARSE = (70, 130, 200, 250)
#: label colours given to the segmentation's four labels
LABEL_COLOURS = {"1": "#ff0000", "2": "#00ff00", "3": "#0000ff", "4": "#ffff00"}
LABEL_RGB = ((255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0))
RENDER_TIMEOUT = 40.0
NEGATIVE_TIMEOUT = 6.0


def quadrants(nx: int, ny: int, nz: int, values: tuple[int, ...], dtype: Any = np.uint8) -> np.ndarray:
    """An ``[x, y, z]`` volume: values[0] at low x low y, [1] high x low y, [2] low x high y,
    [3] high x high y."""
    a = np.empty((nx, ny, nz), dtype)
    a[: nx // 2, : ny // 2] = values[0]
    a[nx // 2 :, : ny // 2] = values[1]
    a[: nx // 2, ny // 2 :] = values[2]
    a[nx // 2 :, ny // 2 :] = values[3]
    return a


SHARDING = {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 0, "hash": "identity",
            "minishard_bits": 1, "shard_bits": 1, "minishard_index_encoding": "gzip", "data_encoding": "gzip"}


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ngdata")
    xyz = quadrants(64, 64, 16, BASE)
    z = shardstore.zarr3.create(root / "em.zarr", shape=(16, 64, 64), dtype="uint8", chunks=(8, 16, 16),
                                shards=(16, 32, 32), dimension_names=["z", "y", "x"], mode="w")
    z[...] = xyz.transpose(2, 1, 0)
    n = shardstore.n5.create(root / "em.n5", shape=(16, 64, 64), dtype="uint8", block_size=(8, 16, 16),
                             mode="w", attributes={"resolution": [4, 4, 40], "units": ["nm", "nm", "nm"]})
    n[...] = xyz.transpose(2, 1, 0)
    img = shardstore.precomputed.create(root / "img", data_type="uint8", mode="w", scales=[
        {"size": [64, 64, 16], "chunk_size": [16, 16, 8], "resolution": [4, 4, 40], "sharding": SHARDING}])
    img[...] = xyz[..., None]
    seg = shardstore.precomputed.create(root / "seg", data_type="uint64", type="segmentation", mode="w", scales=[
        {"size": [64, 64, 16], "chunk_size": [16, 16, 8], "resolution": [4, 4, 40],
         "encoding": "compressed_segmentation"}])
    seg[...] = quadrants(64, 64, 16, (1, 2, 3, 4), np.uint64)[..., None]
    # a two-level pyramid (2x2x1, as for anisotropic EM); the coarse level's values are marked
    pyr = shardstore.precomputed.create(root / "pyr", data_type="uint8", mode="w", scales=[
        {"size": [512, 512, 4], "chunk_size": [128, 128, 4], "resolution": [4, 4, 40]}])
    pyr[...] = quadrants(512, 512, 4, BASE)[..., None]
    coarse = shardstore.precomputed.add_scale(root / "pyr", {"size": [256, 256, 4], "chunk_size": [128, 128, 4],
                                                             "resolution": [8, 8, 40]})
    coarse[...] = quadrants(256, 256, 4, COARSE)[..., None]
    # the same pyramid as OME-Zarr 0.5 (one Zarr v3 array per level) and as an n5-viewer
    # multiscale group (s0, s1 with downsamplingFactors)
    axes = [{"name": n, "type": "space", "unit": "nanometer"} for n in ("z", "y", "x")]
    levels = [{"path": str(i), "coordinateTransformations": [{"type": "scale", "scale": [40, 4 * 2**i, 4 * 2**i]}]}
              for i in range(2)]
    ome = shardstore.zarr3.create_group(root / "pyr.ome.zarr", mode="w", attributes={
        "ome": {"version": "0.5", "multiscales": [{"axes": axes, "datasets": levels}]}})
    n5 = shardstore.n5.create_group(root / "pyr.n5", mode="w", attributes={
        "scales": [[1, 1, 1], [2, 2, 1]], "resolution": [4, 4, 40], "units": ["nm", "nm", "nm"]})
    assert n5 is not None
    for i, (size, values) in enumerate(((512, BASE), (256, COARSE))):
        zyx = quadrants(size, size, 4, values).transpose(2, 1, 0)
        level = ome.create_array(str(i), shape=zyx.shape, dtype="uint8", chunks=(4, 128, 128),
                                 shards=(4, 256, 256), dimension_names=["z", "y", "x"])
        level[...] = zyx
        s = shardstore.n5.create(root / "pyr.n5", f"s{i}", shape=zyx.shape, dtype="uint8", block_size=(4, 128, 128),
                                 mode="w", attributes={"downsamplingFactors": [2**i, 2**i, 1]})
        s[...] = zyx
    return root


@pytest.fixture(scope="module")
def server(data_root: Path) -> Iterator[Server]:
    with Server(data_root, port=0, client=True) as s:
        yield s


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from _servers import unavailable

    if not os.path.exists(CHROMIUM) and shutil.which("chromium") is None:
        unavailable("no Chromium browser (apt-get install -y chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the playwright package is missing (pip install playwright; never `playwright install`)")
    tmp = tmp_path_factory.mktemp("chromium")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium"),
                               headless=True, args=CHROMIUM_FLAGS, env={**os.environ, "TMPDIR": str(tmp)})
        try:
            yield b
        finally:
            b.close()


# -- the screenshot check ----------------------------------------------------------------------
def quadrant_colours(shot: np.ndarray, offset: int, half: int = 6) -> list[tuple[int, ...]]:
    """Median colour of small windows ``offset`` pixels left/right and above/below the centre
    of the cross-section panel, in the order low-x low-y, high-x low-y, low-x high-y,
    high-x high-y (Neuroglancer draws x to the right, y downwards)."""
    h, w, _ = shot.shape
    cx, cy = w // 2, (h + TOP) // 2
    out = []
    for dy, dx in ((-offset, -offset), (-offset, offset), (offset, -offset), (offset, offset)):
        window = shot[cy + dy - half : cy + dy + half, cx + dx - half : cx + dx + half, :3]
        out.append(tuple(int(v) for v in np.median(window.reshape(-1, 3), axis=0)))
    return out


def shows(shot: np.ndarray, expected: tuple[Any, ...], offset: int, tolerance: int = 8) -> bool:
    """Whether the four quadrants show the expected greys (ints) or RGB colours."""
    for got, want in zip(quadrant_colours(shot, offset), expected):
        rgb = (want,) * 3 if isinstance(want, int) else want
        if any(abs(g - e) > tolerance for g, e in zip(got, rgb)):
            return False
    return True


def render_until(browser: Any, link: str, expected: tuple[Any, ...], offset: int, timeout: float,
                 save: Path | None = None, responses: list[tuple[int, str]] | None = None) -> tuple[bool, np.ndarray]:
    """Open ``link`` and take screenshots until the check passes or ``timeout`` seconds pass;
    ``responses`` collects (status, URL) of every reply the page received."""
    from io import BytesIO

    from PIL import Image

    page = browser.new_page(viewport={"width": VIEWPORT, "height": VIEWPORT})
    if responses is not None:
        page.on("response", lambda r: responses.append((r.status, r.url)))
    try:
        page.goto(link)
        deadline = time.monotonic() + timeout
        while True:
            shot = np.asarray(Image.open(BytesIO(page.screenshot())).convert("RGB")).astype(int)
            ok = shows(shot, expected, offset)
            if ok or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        page.close()
    if save is not None:
        Image.fromarray(shot.astype(np.uint8)).save(save)
    return ok, shot


def link_for(server: Server, path: str, **extra: Any) -> tuple[str, dict[str, Any]]:
    (dataset,) = [d for d in server.datasets if d.path == path]
    state = neuroglancer_state([dataset], server.url, extra=extra or None)
    return neuroglancer_link(state, server.client_url), state


# -- what Neuroglancer shows -------------------------------------------------------------------
#: (dataset, expected layer type); every one fitted into the panel by the state's zoom
CASES = [("em.zarr", "image"), ("em.n5", "image"), ("img", "image"), ("seg", "segmentation")]


@pytest.mark.parametrize("path, layer_type", CASES)
def test_neuroglancer_shows_the_pattern(browser: Any, server: Server, path: str, layer_type: str,
                                        tmp_path: Path) -> None:
    link, state = link_for(server, path)
    (layer,) = state["layers"]
    assert layer["type"] == layer_type
    expected: tuple[Any, ...] = BASE
    if layer_type == "segmentation":
        layer["segmentColors"] = LABEL_COLOURS  # fixed colours instead of hashed ones
        link = neuroglancer_link(state, server.client_url)
        expected = LABEL_RGB
    ok, shot = render_until(browser, link, expected, offset=120, timeout=RENDER_TIMEOUT, save=tmp_path / "shot.png")
    assert ok, f"{path}: quadrants show {quadrant_colours(shot, 120)}, expected {expected} (see {tmp_path / 'shot.png'})"


@pytest.mark.parametrize("path", ["pyr", pytest.param("pyr.ome.zarr", marks=pytest.mark.slow),
                                  pytest.param("pyr.n5", marks=pytest.mark.slow)])
def test_pyramid_base_level_zoomed_in_coarse_level_zoomed_out(browser: Any, server: Server, path: str,
                                                              tmp_path: Path) -> None:
    link, state = link_for(server, path)
    assert len(state["layers"]) == 1  # the pyramid is one layer, not one per level
    assert state["crossSectionScale"] < 1  # fitted: finer than one voxel per pixel -> base level
    ok, shot = render_until(browser, link, BASE, offset=120, timeout=RENDER_TIMEOUT, save=tmp_path / "in.png")
    assert ok, f"zoomed in: {quadrant_colours(shot, 120)}, expected the base level's {BASE}"
    # 3 base voxels per pixel: the 512-voxel volume spans ~170 px and Neuroglancer draws the
    # coarse level (2 base voxels each)
    link, _ = link_for(server, path, crossSectionScale=3)
    ok, shot = render_until(browser, link, COARSE, offset=40, timeout=RENDER_TIMEOUT, save=tmp_path / "out.png")
    assert ok, f"zoomed out: {quadrant_colours(shot, 40)}, expected the coarse level's {COARSE}"


def test_negative_control_a_missing_source_fails_the_check(browser: Any, server: Server) -> None:
    (dataset,) = [d for d in server.datasets if d.path == "img"]
    missing = dataclasses.replace(dataset, path="no-such-volume")
    link = neuroglancer_link(neuroglancer_state([missing], server.url), server.client_url)
    responses: list[tuple[int, str]] = []
    ok, _ = render_until(browser, link, BASE, offset=120, timeout=NEGATIVE_TIMEOUT, responses=responses)
    assert not ok, "the check passed for a source that answers 404: it proves nothing"
    # the client did run and ask: the check failed because the source is missing
    assert (404, f"{server.url}no-such-volume/info") in responses, responses
