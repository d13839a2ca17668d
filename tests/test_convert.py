"""``shardstore.convert`` / ``shardstore convert``: every direction, metadata mapping, codecs,
chunk-byte copies without decoding, overwrite, the summary (issue 19 points 2 and 5)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _convert_sources import KINDS, OFFSET_XYZ, RESOLUTION_XYZ, as_precomputed, make_source

import shardstore
from shardstore.cli import main
from shardstore.codecs.pipeline import CodecPipeline
from shardstore.config import IOConfig
from shardstore.ops.convert import MANIFEST_KEY, chunk_buffers_reserved

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _expected(canon: np.ndarray, to: str) -> np.ndarray:
    return as_precomputed(canon) if to == "precomputed" else canon


@pytest.mark.parametrize("to", ["zarr3", "n5", "precomputed"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_direction_is_exact(kind: str, to: str, tmp_path: Path) -> None:
    src, canon = make_source(kind, tmp_path)
    dst = tmp_path / f"out.{to}"
    r = shardstore.convert(src, dst, to=to)
    out = shardstore.open(dst)
    assert out.format == to
    np.testing.assert_array_equal(out[...], _expected(canon, to))
    assert r.chunks_written == r.chunks_verbatim + r.chunks_reencoded > 0
    assert r.bytes_in >= canon.nbytes and r.bytes_out and r.bytes_out > 0
    assert not (dst / MANIFEST_KEY).exists()  # removed at the end
    if to != "precomputed":
        names = (["c"] if canon.ndim == 4 else []) + ["z", "y", "x"]
        if to == "zarr3":
            assert list(out.dimension_names) == names
        else:
            assert out.attrs["axes"] == names[::-1]  # N5 lists axes x first, as its dimensions


def test_precomputed_segmentation_keeps_its_encoding_and_round_trips(tmp_path: Path) -> None:
    src, canon = make_source("precomputed-seg", tmp_path)
    shardstore.convert(src, tmp_path / "seg.zarr")
    back = shardstore.convert(tmp_path / "seg.zarr", tmp_path / "seg.precomputed", to="precomputed")
    info = json.loads((tmp_path / "seg.precomputed" / "info").read_text())
    assert info["type"] == "segmentation" and info["mesh"] == "mesh"
    assert info["scales"][0]["encoding"] == "compressed_segmentation"
    assert info["scales"][0]["resolution"] == RESOLUTION_XYZ and info["scales"][0]["voxel_offset"] == OFFSET_XYZ
    assert back.dropped == []
    np.testing.assert_array_equal(shardstore.open(tmp_path / "seg.precomputed")[...], as_precomputed(canon))


def test_precomputed_geometry_maps_to_ome_and_n5(tmp_path: Path) -> None:
    src, canon = make_source("precomputed-2ch", tmp_path)
    shardstore.convert(src, tmp_path / "ome.zarr", ome=True)
    group = json.loads((tmp_path / "ome.zarr" / "zarr.json").read_text())
    ms = group["attributes"]["ome"]["multiscales"][0]
    assert [a["name"] for a in ms["axes"]] == ["c", "z", "y", "x"]
    assert [a.get("type") for a in ms["axes"]] == ["channel", "space", "space", "space"]
    t = {x["type"]: x for x in ms["datasets"][0]["coordinateTransformations"]}
    assert ms["datasets"][0]["path"] == "0"
    assert t["scale"]["scale"] == [1.0, 40.0, 6.0, 4.0]
    assert t["translation"]["translation"] == [0.0, 30 * 40.0, 20 * 6.0, 10 * 4.0]
    np.testing.assert_array_equal(shardstore.open(tmp_path / "ome.zarr" / "0")[...], canon)

    # OME scale and translation come back as precomputed resolution and voxel offset
    shardstore.convert(tmp_path / "ome.zarr" / "0", tmp_path / "back.precomputed", to="precomputed")
    scale = json.loads((tmp_path / "back.precomputed" / "info").read_text())["scales"][0]
    assert scale["resolution"] == RESOLUTION_XYZ and scale["voxel_offset"] == OFFSET_XYZ

    n5 = shardstore.convert(src, tmp_path / "v.n5")
    attrs = json.loads((tmp_path / "v.n5" / "attributes.json").read_text())
    assert attrs["dimensions"] == [44, 36, 20, 2]  # N5 order: x, y, z, c
    assert attrs["resolution"] == [4.0, 6.0, 40.0, 1.0] and attrs["voxel_offset"] == [10, 20, 30, 0]
    assert attrs["pixelResolution"] == {"unit": "nanometer", "dimensions": [4.0, 6.0, 40.0, 1.0]}
    assert n5.dropped == []
    back = shardstore.convert(tmp_path / "v.n5", tmp_path / "n5back.precomputed", to="precomputed")
    scale = json.loads((tmp_path / "n5back.precomputed" / "info").read_text())["scales"][0]
    assert scale["resolution"] == RESOLUTION_XYZ and scale["voxel_offset"] == OFFSET_XYZ
    assert back.dropped == []


def test_what_does_not_fit_is_reported(tmp_path: Path) -> None:
    src, _ = make_source("zarr3", tmp_path)
    r = shardstore.convert(src, tmp_path / "p", to="precomputed")
    assert any("'note'" in d for d in r.dropped)  # a user attribute has no place in an info
    assert any("precomputed raw" in c for c in r.changed)
    z = shardstore.zarr3.create(tmp_path / "fill.zarr", shape=(8, 8, 8), dtype="u1", chunks=(4, 4, 4), fill_value=7)
    z[:4] = 1
    r = shardstore.convert(tmp_path / "fill.zarr", tmp_path / "fill.n5")
    assert any("fill_value 7 -> 0" in c for c in r.changed) and any("gzip" in c for c in r.changed)
    np.testing.assert_array_equal(shardstore.open(tmp_path / "fill.n5")[...], z[...])  # missing chunks written


def test_bcolz_ctable_becomes_a_group_and_keeps_shuffle(tmp_path: Path) -> None:
    n = 200_000
    cols = [np.arange(n, dtype="i8"), np.linspace(0, 1, n)]
    t = shardstore.bcolz.ctable(columns=cols, names=["i", "f"], rootdir=str(tmp_path / "t.bcolz"), mode="w",
                                cparams={"clevel": 5, "shuffle": 1, "cname": "lz4"})
    t.attrs["origin"] = "test"
    t.flush()
    r = shardstore.convert(tmp_path / "t.bcolz", tmp_path / "t.zarr")
    group = shardstore.open_group(tmp_path / "t.zarr")
    assert sorted(group.keys()) == ["f", "i"] and dict(group.attrs) == {"origin": "test"}
    for name, col in zip(["i", "f"], cols):
        a = shardstore.open(tmp_path / "t.zarr" / name)
        np.testing.assert_array_equal(a[:], col)
        blosc = a.metadata["codecs"][-1]
        assert blosc["name"] == "blosc" and blosc["configuration"]["shuffle"] == "shuffle"
    assert any("blosc" in c and "shuffle" in c for c in r.changed)
    # shuffle is what keeps the integer column small: without it lz4 grows it many times over
    src_bytes = sum(f.stat().st_size for f in (tmp_path / "t.bcolz" / "i").rglob("*.blp"))
    dst_bytes = sum(f.stat().st_size for f in (tmp_path / "t.zarr" / "i").rglob("*") if f.is_file())
    assert dst_bytes < 3 * src_bytes, (src_bytes, dst_bytes)


def test_refuses_existing_destination_unless_overwrite(tmp_path: Path) -> None:
    src, canon = make_source("zarr3", tmp_path)
    shardstore.convert(src, tmp_path / "d.zarr")
    with pytest.raises(shardstore.ContainsNodeError, match="--overwrite"):
        shardstore.convert(src, tmp_path / "d.zarr", chunks=(8, 8, 8))
    r = shardstore.convert(src, tmp_path / "d.zarr", chunks=(8, 8, 8), overwrite=True)
    assert shardstore.open(tmp_path / "d.zarr").chunks == (8, 8, 8) and r.chunks_written > 0
    with pytest.raises(shardstore.ShardStoreError, match="overlaps"):
        shardstore.convert(src, Path(src) / "inside")


def _count_decodes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts chunk decodes (of uint16 data; shard indexes are uint64 and not counted)."""
    calls = [0]
    for name in ("decode", "decode_into", "decode_transient", "decode_region", "decode_region_from"):
        original = getattr(CodecPipeline, name)

        def counted(self, *args, _original=original, **kwargs):  # type: ignore[no-untyped-def]
            calls[0] += args[1].dtype == np.uint16
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(CodecPipeline, name, counted)
    return calls


def test_reshard_copies_chunk_bytes_without_decoding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src, canon = make_source("zarr3-sharded", tmp_path)
    calls = _count_decodes(monkeypatch)
    r = shardstore.convert(src, tmp_path / "big.zarr", shards=(64, 64, 64))
    flat = shardstore.convert(src, tmp_path / "flat.zarr", shards="none")
    assert calls[0] == 0  # no chunk was decoded
    n_chunks = 2 * 3 * 3
    assert r.chunks_verbatim == flat.chunks_verbatim == n_chunks and r.chunks_reencoded == 0
    monkeypatch.undo()
    assert shardstore.open(tmp_path / "big.zarr").shards == (64, 64, 64)
    np.testing.assert_array_equal(shardstore.open(tmp_path / "big.zarr")[...], canon)
    np.testing.assert_array_equal(shardstore.open(tmp_path / "flat.zarr")[...], canon)
    # stored chunk bytes are the source's
    a, b = shardstore.open(src), shardstore.open(tmp_path / "flat.zarr")
    assert a.read_chunk_bytes((1, 2, 2)) == b.read_chunk_bytes((1, 2, 2))


def test_precomputed_raw_to_plain_zarr_copies_interior_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src, canon = make_source("precomputed-sharded", tmp_path)
    calls = _count_decodes(monkeypatch)
    r = shardstore.convert(src, tmp_path / "z.zarr", compression="none", shards="none")
    # 16^3 chunks of a 44 x 36 x 20 volume: 2 x 2 x 1 wholly inside, the other 14 on an edge
    assert r.chunks_verbatim == 4 and r.chunks_reencoded == 3 * 3 * 2 - 4
    assert calls[0] == 14  # only the edge chunks were decoded
    monkeypatch.undo()
    np.testing.assert_array_equal(shardstore.open(tmp_path / "z.zarr")[...], canon)
    back = shardstore.convert(tmp_path / "z.zarr", tmp_path / "p.precomputed", to="precomputed")
    assert back.chunks_verbatim == 4
    np.testing.assert_array_equal(shardstore.open(tmp_path / "p.precomputed")[...], as_precomputed(canon))


def test_verify_finds_a_difference(tmp_path: Path) -> None:
    src, _ = make_source("n5", tmp_path)
    r = shardstore.convert(src, tmp_path / "v.zarr", verify=True)
    assert r.verified


def test_cli_convert_prints_the_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, canon = make_source("precomputed", tmp_path)
    code = main(["convert", "--no-progress", src, str(tmp_path / "c.zarr"), "--chunks", "8", "--shards", "16",
                 "--compression", "zstd:5", "--verify"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "converted" in out and "re-encoded" in out and "verified" in out
    assert "changed: codecs: precomputed raw -> [bytes, zstd]" in out
    a = shardstore.open(tmp_path / "c.zarr")
    assert a.chunks == (8, 8, 8) and a.shards == (16, 16, 16)
    assert a.metadata["codecs"][0]["configuration"]["codecs"][1]["configuration"]["level"] == 5
    np.testing.assert_array_equal(a[...], canon)
    code = main(["copy", "--no-progress", str(tmp_path / "c.zarr"), str(tmp_path / "c.n5"), "--to", "n5",
                 "--compression", "zstd"])
    assert code == 0 and shardstore.open(tmp_path / "c.n5").metadata["compression"]["type"] == "zstd"
    code = main(["convert", "--no-progress", str(tmp_path / "c.zarr"), str(tmp_path / "x.n5"), "--shards", "16"])
    assert code == 2 and "sharding" in capsys.readouterr().err


def test_each_source_chunk_is_decoded_once_when_boxes_align(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Source chunks of 24 and destination shards of 16: tasks span 48 (their least common
    multiple), so no source chunk is read for two destination shards."""
    data = np.random.default_rng(1).integers(0, 9, size=(48, 96, 72), dtype=np.uint16)
    src = shardstore.zarr3.create(tmp_path / "s.zarr", shape=data.shape, dtype=data.dtype, chunks=(24, 24, 24))
    src[...] = data
    calls = _count_decodes(monkeypatch)
    r = shardstore.convert(tmp_path / "s.zarr", tmp_path / "d.zarr", chunks=(8, 8, 8), shards=(16, 16, 16),
                           # a task holds one 48^3 box, beside the chunk buffers of threads and reads in flight
                           max_memory=4 * 48**3 * 2 + chunk_buffers_reserved(IOConfig()) * 24**3 * 2)
    assert calls[0] == 2 * 4 * 3  # every source chunk once
    monkeypatch.undo()
    assert r.tasks == 1 * 2 * 2 and r.chunks_reencoded == 6 * 12 * 9
    np.testing.assert_array_equal(shardstore.open(tmp_path / "d.zarr")[...], data)


def test_progress_bar_shows_bytes_per_second(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, _ = make_source("n5", tmp_path)
    shardstore.convert(src, tmp_path / "p.zarr", progress=True)
    err = capsys.readouterr().err
    assert "converting" in err and "B/s" in err and "100%" in err
