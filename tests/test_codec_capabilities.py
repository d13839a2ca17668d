"""Codecs declare what they can do beyond ``decode`` as class attributes, and the pipeline
combines those declarations (no probing of which methods a subclass overrides)."""

from __future__ import annotations

import numpy as np
import pytest

from shardstore.codecs import registry
from shardstore.codecs.base import ArrayBytesCodec, BytesBytesCodec, ChunkSpec
from shardstore.codecs.pipeline import CodecPipeline

# (declared attribute, the method it promises, the base class that has both)
CAPABILITIES = [
    ("decodes_partially", "decode_partial", ArrayBytesCodec),
    ("reads_partially", "decode_partial_from", ArrayBytesCodec),
    ("decodes_into", "decode_into", ArrayBytesCodec),
    ("decodes_to", "decode_to", BytesBytesCodec),
]


def _all_codec_classes() -> list[type]:
    registry._load_builtins()
    return sorted({c for names in registry._REGISTRY.values() for c in names.values()}, key=lambda c: c.__qualname__)


@pytest.mark.parametrize("attr, method, base", CAPABILITIES)
def test_every_declaration_matches_an_implementation(attr: str, method: str, base: type) -> None:
    # a codec that implements a capability declares it, and declares none it lacks
    classes = [c for c in _all_codec_classes() if issubclass(c, base)]
    assert classes
    for cls in classes:
        implemented = getattr(cls, method) is not getattr(base, method)
        assert getattr(cls, attr) == implemented, (cls.__qualname__, attr)


def test_known_declarations() -> None:
    bloscpack = registry.get_codec_class("bloscpack", "bcolz")
    assert bloscpack.decodes_partially and bloscpack.reads_partially and bloscpack.decodes_into
    assert registry.get_codec_class("gzip").decodes_to
    assert registry.get_codec_class("zstd").decodes_to  # (libzstd: imagecodecs ships it)


class _Plain(ArrayBytesCodec):
    """An array->bytes codec that implements ``decode_into`` but does not declare it."""

    name = "plain-test"
    calls: list[int] = []

    @classmethod
    def _from_configuration(cls, configuration):  # type: ignore[no-untyped-def]
        return cls()

    def _canonical_config(self):  # type: ignore[no-untyped-def]
        return {"name": self.name}

    def encode(self, array, spec):  # type: ignore[no-untyped-def]
        return np.ascontiguousarray(array).tobytes()

    def decode(self, data, spec):  # type: ignore[no-untyped-def]
        return np.frombuffer(data, spec.dtype).reshape(spec.shape)

    def decode_into(self, data, spec, out):  # type: ignore[no-untyped-def]
        self.calls.append(1)
        out[...] = self.decode(data, spec)
        return True


def test_the_pipeline_follows_declarations_not_overrides() -> None:
    spec = ChunkSpec((2, 3), np.dtype("u1"), 0)
    data = bytes(range(6))
    out = np.zeros((2, 3), "u1")
    pipeline = CodecPipeline([_Plain()])
    assert not pipeline.decodes_into and not pipeline.decode_into(data, spec, out)
    assert not _Plain.calls

    class Declared(_Plain):
        decodes_into = True

    pipeline = CodecPipeline([Declared()])
    assert pipeline.decodes_into and pipeline.decode_into(data, spec, out)
    assert len(_Plain.calls) == 1 and out.tolist() == [[0, 1, 2], [3, 4, 5]]
    # a chain with a bytes->bytes codec after it stores other bytes: no decode into
    gzip = registry.get_codec_class("gzip").from_config({"name": "gzip", "configuration": {"level": 1}})
    assert not CodecPipeline([Declared(), gzip]).decodes_into


def test_native_reader_declarations() -> None:
    """What the native shard reader decodes itself (``CodecPipeline.native_layout``): chunks
    that are plain elements (``plain_layout``), compressed at most once by a compressor it
    has a decoder for (``native_decoder``); every other chain goes the Python way."""
    spec = ChunkSpec((4, 6), np.dtype("uint16"), 0)

    def layout(*configs):  # type: ignore[no-untyped-def]
        return CodecPipeline.from_config(list(configs)).bind(spec).native_layout(spec)

    little = {"name": "bytes", "configuration": {"endian": "little"}}
    big = {"name": "bytes", "configuration": {"endian": "big"}}
    assert layout(little) == (None, np.dtype("<u2"), "C")
    assert layout(big, {"name": "zstd", "configuration": {"level": 1}}) == ("zstd", np.dtype(">u2"), "C")
    assert layout(little, {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 1, "shuffle": "shuffle"}})[0] == "blosc"
    assert layout(little, {"name": "gzip", "configuration": {"level": 1}})[0] == "gzip"
    # chains it does not decode: other compressors, two of them, a transpose, a checksum
    assert layout(little, {"name": "crc32c"}) is None
    assert layout(little, {"name": "gzip", "configuration": {"level": 1}}, {"name": "zstd", "configuration": {"level": 1}}) is None
    assert layout({"name": "transpose", "configuration": {"order": [1, 0]}}, little) is None
    bool_spec = ChunkSpec((4,), np.dtype("bool"), False)
    assert CodecPipeline.from_config([little]).native_layout(bool_spec) is None  # (decoded to 0/1)
    # N5 gzip blocks may hold a gzip or a zlib stream: told apart by their magic
    assert registry.get_codec_class("gzip", "n5").from_n5({"type": "gzip"}).native_decoder() == "deflate"
    # precomputed raw: little-endian, x fastest
    raw = registry.get_codec_class("raw", "precomputed")()
    xyzc = ChunkSpec((4, 5, 6, 1), np.dtype("uint16"), 0)
    assert CodecPipeline([raw]).native_layout(xyzc) == (None, np.dtype("<u2"), "F")
