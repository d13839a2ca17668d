"""Layer 2: codec interfaces. Pure transforms: no I/O, never imports store/ or formats/.

A codec is built from its JSON object (``from_config``) and gives it back exactly
(``to_config``). ``encode`` / ``decode`` are synchronous and pure so that the core can run them
in a thread pool; the C libraries behind them release the GIL.
"""

from __future__ import annotations

import abc
import copy
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal, Self

import numpy as np

from ..config import IOConfig
from ..errors import MetadataError

__all__ = [
    "ChunkSpec",
    "Codec",
    "ArrayArrayCodec",
    "ArrayBytesCodec",
    "BytesBytesCodec",
    "parse_named_config",
    "expansion_bound",
    "scratch_buffer",
    "decode_to_buffer",
    "new_buffer",
]

CodecKind = Literal["array_array", "array_bytes", "bytes_bytes"]

_scratch = threading.local()


def scratch_buffer(nbytes: int, max_bytes: int = IOConfig.scratch_max_bytes, slot: str = "buf") -> np.ndarray:
    """``nbytes`` of uint8 owned by the calling thread and reused by its next call, for
    ``decode_transient`` results that are copied out at once. Decompressing into a fresh
    buffer per chunk costs an allocation and, on first touch, a page fault per 4 KiB page,
    a real share of a read from the page cache; a buffer larger than ``max_bytes`` is not
    kept (a few dozen threads each keep one). ``slot``: which of the thread's buffers
    ("buf" for decodes; "encode_buf" for an encoder's input copy, which a transient decode
    result of the same thread may outlive)."""
    if nbytes > max_bytes:
        return np.empty(nbytes, np.uint8)
    buf = getattr(_scratch, slot, None)
    if buf is None or buf.nbytes < nbytes:
        buf = np.empty(nbytes, np.uint8)
        setattr(_scratch, slot, buf)
    return buf[:nbytes]


def new_buffer(nbytes: int) -> np.ndarray:
    """``nbytes`` of fresh uint8 (a buffer for ``decode_to_buffer`` that the result keeps)."""
    return np.empty(nbytes, np.uint8)


def decode_to_buffer(
    codec: BytesBytesCodec, data: bytes | memoryview, spec: ChunkSpec, nbytes: int, buffer: Callable[[int], np.ndarray]
) -> np.ndarray | None:
    """``codec``'s decoding of ``data`` into ``buffer(nbytes)`` (this thread's
    ``scratch_buffer``, or ``new_buffer``) when it is exactly ``nbytes`` long and the codec
    decodes in place; None otherwise (the caller then uses ``decode``, which also words any
    error)."""
    ratio = codec.max_ratio
    if ratio is not None and nbytes > len(data) * ratio + 1024:
        return None  # cannot decode to nbytes: no buffer of a size only a corrupt spec claims
    buf = buffer(nbytes)
    return buf if codec.decode_to(data, spec, buf) else None


@dataclass(frozen=True)
class ChunkSpec:
    """What a codec sees: the shape, native-order dtype and fill value of one chunk."""

    shape: tuple[int, ...]
    dtype: np.dtype
    fill_value: Any = None

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def with_shape(self, shape: tuple[int, ...]) -> ChunkSpec:
        return replace(self, shape=tuple(shape))


def parse_named_config(
    config: Any, where: str = "codec"
) -> tuple[str, dict[str, Any], bool]:
    """Split an extension object into ``(name, configuration, must_understand)``.

    Accepts the short form (a bare string) and ``{"name", "configuration"?,
    "must_understand"?}``.
    """
    if isinstance(config, str):
        return config, {}, True
    if not isinstance(config, dict) or not isinstance(config.get("name"), str):
        raise MetadataError(f"{where}: expected a name string or an object with 'name', got {config!r}")
    extra = set(config) - {"name", "configuration", "must_understand"}
    if extra:
        raise MetadataError(f"{where} {config['name']!r}: unexpected members {sorted(extra)}")
    conf = config.get("configuration", {})
    if not isinstance(conf, dict):
        raise MetadataError(f"{where} {config['name']!r}: 'configuration' must be an object")
    must = config.get("must_understand", True)
    if not isinstance(must, bool):
        raise MetadataError(f"{where} {config['name']!r}: 'must_understand' must be a boolean")
    return config["name"], conf, must


def expansion_bound(n: int) -> int:
    """Upper bound on what any compressor can turn ``n`` bytes into (worst-case expansion).

    Used to cap intermediate outputs when decoding chains of several compressors.
    """
    return n + n // 8 + 4096


#: the decoders of the native reader (``_rawio.read_spans``); "deflate": gzip or zlib by magic
NativeDecoder = Literal["zstd", "blosc", "gzip", "zlib", "deflate"]


class Codec(abc.ABC):
    """Base of every codec. Subclasses set ``name`` and ``kind``."""

    name: ClassVar[str]
    kind: ClassVar[CodecKind]
    #: decoding costs about a memory copy (bytes, transpose, crc32c): the core then decodes
    #: on the calling thread, because handing such work to threads costs more in GIL
    #: hand-offs than it saves
    light: ClassVar[bool] = False
    #: decoding is one long call without the GIL that costs far more than reading and copying
    #: the chunk (gzip, zstd, bzip2, xz, jpeg): the core then shares even a few such chunks among
    #: threads (``IOConfig.slow_decode_work_seconds``); per instance where the
    #: codec wraps another (an N5 block's compression)
    slow_decode: bool = False
    #: decoding holds the GIL for most of its time (a C++ decoder called without releasing it:
    #: compressed_segmentation): a second thread would only queue behind it, so reads of warm
    #: chunks stay on the calling thread (``core/threads.py``)
    holds_gil: ClassVar[bool] = False
    #: ``encode`` takes arrays in any memory layout (it lays them out itself, in one copy):
    #: the core then hands it a view of the user's data instead of a C-ordered copy first
    accepts_strided: ClassVar[bool] = False
    #: the JSON object this codec was parsed from, returned verbatim by ``to_config``
    _source: dict[str, Any] | str | None = None

    @classmethod
    def from_config(cls, config: dict[str, Any] | str) -> Codec:
        """Parse and validate a codec JSON object (or its bare-string short form)."""
        name, conf, _ = parse_named_config(config)
        codec = cls._from_configuration(conf)
        codec._source = copy.deepcopy(config)
        return codec

    @classmethod
    @abc.abstractmethod
    def _from_configuration(cls, configuration: dict[str, Any]) -> Codec:
        """Build from the ``configuration`` member (already known to be a dict)."""

    def to_config(self) -> dict[str, Any] | str:
        """The JSON object: exactly what was parsed, or the canonical form if built in code."""
        if self._source is not None:
            return copy.deepcopy(self._source)
        return self._canonical_config()

    @abc.abstractmethod
    def _canonical_config(self) -> dict[str, Any]: ...

    def canonical_config(self) -> dict[str, Any]:
        """The complete JSON object with every default spelled out (what shardstore writes
        for codecs a user gave in short form, so that every reader accepts them)."""
        return self._canonical_config()

    def resolve(self, spec: ChunkSpec) -> ChunkSpec:
        """The spec the next codec in the chain sees (array->array codecs change it)."""
        return spec

    def bind(self, spec: ChunkSpec) -> Self:
        """A copy with defaults that depend on the chunk filled in (e.g. blosc typesize)."""
        return self

    def validate(self, spec: ChunkSpec) -> None:  # noqa: B027 (a no-op default, not abstract)
        """Raise MetadataError if this codec cannot handle chunks of ``spec``."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._canonical_config().get('configuration', {})})"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._canonical_config() == other._canonical_config()

    def __hash__(self) -> int:
        return hash((type(self), repr(self)))


class ArrayArrayCodec(Codec):
    kind = "array_array"

    @abc.abstractmethod
    def encode(self, array: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        """``spec`` describes the input array."""

    @abc.abstractmethod
    def decode(self, array: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        """``spec`` describes the *decoded* (input-side) array."""


class ArrayBytesCodec(Codec):
    kind = "array_bytes"

    # what this codec can do beyond ``decode``, declared (the pipeline combines these
    # declarations; it never probes which methods a subclass overrides):
    #: ``decode_partial`` can decode part of a chunk (e.g. only the blosc blocks it needs)
    decodes_partially: ClassVar[bool] = False
    #: ``decode_partial_from`` can read only the byte ranges a partial decode needs
    reads_partially: ClassVar[bool] = False
    #: ``decode_into`` can decode a whole chunk straight into the caller's array
    decodes_into: ClassVar[bool] = False

    @abc.abstractmethod
    def encode(self, array: np.ndarray, spec: ChunkSpec) -> bytes: ...

    def encode_transient(self, array: np.ndarray, spec: ChunkSpec) -> bytes | memoryview:
        """``encode`` for a caller that is done with the result before this thread encodes
        again (a bytes->bytes codec compresses it at once): it may live in one of this
        thread's scratch buffers."""
        return self.encode(array, spec)

    @abc.abstractmethod
    def decode(self, data: bytes, spec: ChunkSpec) -> np.ndarray:
        """Must return an array of exactly ``spec.shape`` / ``spec.dtype`` or raise CodecError."""

    def decode_partial(self, data: bytes, spec: ChunkSpec, selection: tuple) -> np.ndarray | None:
        """``decode(data, spec)[selection]`` decoding only part of ``data`` (e.g. the blosc
        blocks a small selection needs), or None when this codec cannot do better than a full
        decode. ``selection`` is a tuple of ints / slices / index arrays, one per dimension."""
        return None

    def decode_partial_from(
        self, read: Callable[[int, int], bytes | None], spec: ChunkSpec, selection: tuple
    ) -> np.ndarray | None:
        """``decode_partial`` fetching only the bytes it needs: ``read(start, stop)`` gives
        bytes ``[start, stop)`` of the stored chunk (fewer at its end; None when it is
        missing). None when the caller should read the chunk whole and decode it as usual
        (also when it is missing: the caller reports that)."""
        return None

    def decode_transient(self, data: bytes, spec: ChunkSpec, scratch_max: int = IOConfig.scratch_max_bytes) -> np.ndarray:
        """``decode`` for a caller that copies the result out before this thread decodes
        again: it may live in this thread's ``scratch_buffer`` (kept up to ``scratch_max``
        bytes) and be of the stored byte order (the values are ``decode``'s)."""
        return self.decode(data, spec)

    def decode_into(self, data: bytes, spec: ChunkSpec, out: np.ndarray) -> bool:
        """Decode the whole chunk straight into ``out`` (an array of ``spec``'s shape and
        dtype, e.g. a view of the caller's result), saving a buffer and a copy. False,
        having written nothing, when the caller should ``decode`` and copy instead."""
        return False

    def raw_layout(self) -> tuple[bytes, np.dtype] | None:
        """``(header, stored dtype)`` when every full-size chunk this bound codec writes is
        ``header`` followed by the elements uncompressed in C order (so a native reader may
        copy boxes straight out of the file), else None. Other chunks (edge blocks of
        another size, say) must still decode through ``decode``."""
        return None

    def inflate_layout(self) -> tuple[bytes, np.dtype] | None:
        """As ``raw_layout``, for chunks that are ``header`` followed by one gzip or zlib
        stream of the elements in C order (N5 gzip blocks), else None."""
        return None

    def plain_layout(self, spec: ChunkSpec) -> tuple[np.dtype, Literal["C", "F"]] | None:
        """``(stored dtype, order)`` when every chunk of ``spec`` this codec writes is exactly
        its elements of that dtype in that memory order, nothing before or after (``bytes``), so
        that a native reader may decode a chunk's bytes (``BytesBytesCodec.native_decoder``)
        and copy boxes out of them itself; else None."""
        return None

    def encoded_size(self, spec: ChunkSpec) -> int | None:
        """Size of the encoding when it does not depend on the data, else None."""
        return None


class BytesBytesCodec(Codec):
    kind = "bytes_bytes"

    @abc.abstractmethod
    def encode(self, data: bytes, spec: ChunkSpec) -> bytes: ...

    @abc.abstractmethod
    def decode(self, data: bytes, spec: ChunkSpec, max_size: int) -> bytes:
        """Decode; raise CodecError rather than produce more than ``max_size`` bytes."""

    #: the most bytes one input byte can decode to (deflate: 1032), or None when unbounded
    max_ratio: ClassVar[int | None] = None
    #: ``decode_to`` can decode into a given buffer (declared: the pipeline then decodes the
    #: innermost bytes->bytes step into a scratch buffer)
    decodes_to: ClassVar[bool] = False

    def decode_to(self, data: bytes | memoryview, spec: ChunkSpec, out: np.ndarray) -> bool:
        """Decode into ``out`` (uint8, exactly the size the decoded data must have); False
        when the data does not decode to exactly that or this codec cannot decode in place:
        the caller then uses ``decode``, which also words any error. ``out`` may have been
        written to either way."""
        return False

    def native_decoder(self) -> NativeDecoder | None:
        """The native reader's decoder of what this bound codec writes (``_rawio.read_spans``:
        the same library as ``decode``), or None when only ``decode`` can."""
        return None

    def encoded_size(self, n: int) -> int | None:
        """Encoded size for an input of ``n`` bytes when fixed (checksums), else None."""
        return None

    def max_encoded_size(self, n: int) -> int:
        """An upper bound on the encoded size of ``n`` input bytes."""
        fixed = self.encoded_size(n)
        return fixed if fixed is not None else expansion_bound(n)


class N5Compression:
    """Mixin: a codec's N5 ``compression`` object, read and written back verbatim.

    N5 writers add members others do not know (n5-blosc's ``nthreads``), so what was parsed is
    kept and written back as it was; a codec made in code writes ``_n5_members()``.
    """

    #: the N5 JSON this codec was parsed from (kept verbatim), see ``from_n5``
    _n5_source: dict[str, Any] | None = None

    @classmethod
    def from_n5(cls, config: dict[str, Any]) -> Any:
        codec = cls._from_n5(config)
        codec._n5_source = dict(config)
        return codec

    def to_n5(self) -> dict[str, Any]:
        return dict(self._n5_source) if self._n5_source is not None else self._n5_members()

    def n5_members(self) -> dict[str, Any]:
        """Every member of this codec's N5 ``compression`` object (defaults filled in),
        whatever it was parsed from."""
        return self._n5_members()

    @classmethod
    def _from_n5(cls, config: dict[str, Any]) -> Any:
        raise NotImplementedError

    def _n5_members(self) -> dict[str, Any]:
        raise NotImplementedError
