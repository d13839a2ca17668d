"""The codec chain: array->array*, exactly one array->bytes, bytes->bytes*.

Encoding runs the chain front to back, decoding back to front. Decoding caps every
intermediate output so that corrupt or hostile input cannot allocate more than the chunk
allows (no decompression bombs).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Literal, cast

import numpy as np

from ..config import IOConfig
from ..errors import CodecError, MetadataError
from .base import ArrayArrayCodec, ArrayBytesCodec, BytesBytesCodec, ChunkSpec, Codec, NativeDecoder, decode_to_buffer, new_buffer, scratch_buffer
from .registry import codec_from_config
from .transpose import TransposeCodec

__all__ = ["CodecPipeline", "NativeLayout"]

#: ``CodecPipeline.native_layout``: (decoder, None: raw), stored dtype, memory order
NativeLayout = tuple[NativeDecoder | None, np.dtype, Literal["C", "F"]]


class CodecPipeline:
    """A validated codec chain; ``bind`` it to a chunk spec before encoding or decoding."""

    def __init__(self, codecs: Sequence[Codec]) -> None:
        codecs = list(codecs)
        aa = [c for c in codecs if isinstance(c, ArrayArrayCodec)]
        ab = [c for c in codecs if isinstance(c, ArrayBytesCodec)]
        bb = [c for c in codecs if isinstance(c, BytesBytesCodec)]
        if len(ab) != 1:
            raise MetadataError(
                f"a codec chain needs exactly one array->bytes codec (e.g. 'bytes'), got "
                f"{[c.name for c in ab] or 'none'} in {[c.name for c in codecs]}"
            )
        if codecs != [*aa, *ab, *bb]:
            raise MetadataError(
                "codecs must be ordered array->array, then array->bytes, then bytes->bytes; got "
                f"{[c.name for c in codecs]}"
            )
        self.codecs: tuple[Codec, ...] = tuple(codecs)
        self.array_array: tuple[ArrayArrayCodec, ...] = tuple(aa)
        self.array_bytes: ArrayBytesCodec = ab[0]
        self.bytes_bytes: tuple[BytesBytesCodec, ...] = tuple(bb)
        self._plans: dict[ChunkSpec, tuple[list[ChunkSpec], list[int]]] = {}
        self._last: tuple[ChunkSpec | None, tuple[list[ChunkSpec], list[int]]] = (None, ([], []))

    @classmethod
    def from_config(cls, configs: Sequence[Any], namespace: str = "zarr3") -> CodecPipeline:
        if not isinstance(configs, (list, tuple)) or not configs:
            raise MetadataError(f"'codecs' must be a non-empty list, got {configs!r}")
        return cls([codec_from_config(c, namespace) for c in configs])

    def to_config(self) -> list[Any]:
        return [c.to_config() for c in self.codecs]

    def canonical_config(self) -> list[dict[str, Any]]:
        """Every codec's complete JSON (bind first so spec-dependent defaults are filled)."""
        return [c.canonical_config() for c in self.codecs]

    def __repr__(self) -> str:
        return f"CodecPipeline({[c.name for c in self.codecs]})"

    # -- binding ----------------------------------------------------------------------------
    # (the codec capabilities below are asked on every chunk read: computed once, the codecs
    # of a pipeline never change)
    @functools.cached_property
    def light(self) -> bool:
        """Whether every codec is light (see ``Codec.light``): decode inline, not in threads."""
        return all(c.light for c in self.codecs)

    @functools.cached_property
    def slow_decode(self) -> bool:
        """Whether a codec's decode dominates a chunk read (see ``Codec.slow_decode``)."""
        return any(c.slow_decode for c in self.codecs)

    @functools.cached_property
    def holds_gil(self) -> bool:
        """Whether a codec's decode holds the GIL (see ``Codec.holds_gil``)."""
        return any(c.holds_gil for c in self.codecs)

    def specs(self, spec: ChunkSpec) -> list[ChunkSpec]:
        """The spec each codec receives, for the array->array codecs and the array->bytes one."""
        out = []
        for codec in self.array_array:
            out.append(spec)
            spec = codec.resolve(spec)
        out.append(spec)
        return out

    def bind(self, spec: ChunkSpec) -> CodecPipeline:
        """Validate against ``spec`` and fill spec-dependent defaults (blosc typesize, ...)."""
        bound: list[Codec] = []
        for codec, s in zip(self.codecs, self.specs(spec) + [self.specs(spec)[-1]] * len(self.bytes_bytes)):
            codec.validate(s)
            bound.append(codec.bind(s))
        return CodecPipeline(bound)

    def encoded_size(self, spec: ChunkSpec) -> int | None:
        """Byte size of every encoding of a chunk of ``spec`` if it is fixed, else None."""
        size = self.array_bytes.encoded_size(self.specs(spec)[-1])
        for codec in self.bytes_bytes:
            if size is None:
                return None
            size = codec.encoded_size(size)
        return size

    # -- transforms -------------------------------------------------------------------------
    def _plan(self, spec: ChunkSpec) -> tuple[list[ChunkSpec], list[int]]:
        """Per-codec specs and decode caps for ``spec``, computed once per distinct spec."""
        if spec is self._last[0]:  # the usual case, without hashing the spec
            return self._last[1]
        plan = self._plans.get(spec)
        if plan is None:
            specs = self.specs(spec)
            # caps: what each bytes->bytes decoder may produce, innermost (exact-ish) first
            cap = self.array_bytes.encoded_size(specs[-1])
            if cap is None:
                cap = specs[-1].nbytes + 4096  # variable-size array->bytes codecs (sharding)
            caps = []
            for codec in self.bytes_bytes:
                caps.append(cap)
                cap = codec.max_encoded_size(cap)
            plan = self._plans[spec] = (specs, caps)
        self._last = (spec, plan)
        return plan

    @functools.cached_property
    def stored_order(self) -> Literal["C", "F"]:
        """The memory order a chunk's elements are stored in: "F" when the array->array codecs
        reverse the axes (Zarr v3 ``transpose`` with order ``[n-1, ..., 0]``, as arrays
        converted from Zarr v2 ``order: "F"`` have), so that a Fortran-ordered result receives
        a decoded chunk by a plain copy and a Fortran-ordered input is encoded without a
        transpose; else "C" (another permutation: neither order is free)."""
        perm: tuple[int, ...] | None = None
        for codec in self.array_array:
            if not isinstance(codec, TransposeCodec):
                return "C"
            perm = codec.order if perm is None else tuple(perm[i] for i in codec.order)
        if perm is not None and len(perm) > 1 and perm == tuple(range(len(perm)))[::-1]:
            return "F"
        return "C"

    @functools.cached_property
    def _takes_strided(self) -> bool:
        """Whether the chain lays out an array of any strides itself: every array codec up to
        the array->bytes one does (a transpose codec's view reaches that one's single copy)."""
        return all(c.accepts_strided for c in (*self.array_array, self.array_bytes))

    def encode(self, array: np.ndarray, spec: ChunkSpec) -> bytes:
        """Encode ``array`` (any memory layout: made C-contiguous here unless the chain lays
        it out itself, see ``Codec.accepts_strided``)."""
        specs, _ = self._plan(spec)
        if not array.flags.c_contiguous and not self._takes_strided:
            array = array.copy(order="C")  # (np.ascontiguousarray would turn 0-d into 1-d)
        for codec, s in zip(self.array_array, specs):
            array = codec.encode(array, s)
        if not self.bytes_bytes:
            return self.array_bytes.encode(array, specs[-1])
        # the array->bytes step's output is only read by the first compressor
        laid = self.array_bytes.encode_transient(array, specs[-1])
        data = laid
        for bb in self.bytes_bytes:
            data = bb.encode(data, specs[-1])
        if data is laid or np.may_share_memory(np.frombuffer(data, np.uint8), np.frombuffer(laid, np.uint8)):
            data = bytes(data)  # a codec passed the scratch through: the result must outlive it
        return data

    def encode_transient(self, array: np.ndarray, spec: ChunkSpec) -> bytes | memoryview:
        """``encode`` for a caller that has written the result before this thread encodes
        again: a chain of one array->bytes codec may return it in one of the thread's scratch
        buffers (``ArrayBytesCodec.encode_transient``)."""
        if self._lone and array.flags.c_contiguous:
            return self.array_bytes.encode_transient(array, self._plan(spec)[0][-1])
        return self.encode(array, spec)

    def decode_region(self, data: bytes, spec: ChunkSpec, selection: tuple) -> np.ndarray | None:
        """``decode(data, spec)[selection]`` by a partial decode, or None when no codec of the
        chain can do better than decoding the whole chunk (then call ``decode``).

        Only a chain of a single array->bytes codec decodes partially: the regions a selection
        needs are lost once array->array or bytes->bytes codecs transform the data.
        """
        if not self.decodes_partially:
            return None
        return self.array_bytes.decode_partial(data, spec, selection)

    @property
    def _lone(self) -> bool:
        """Whether the chain is one array->bytes codec (the only chain whose stored bytes are
        that codec's: array->array and bytes->bytes codecs transform them)."""
        return not self.array_array and not self.bytes_bytes

    @functools.cached_property
    def decodes_partially(self) -> bool:
        """Whether ``decode_region`` can ever beat a whole decode (decided once, not per chunk)."""
        return self._lone and self.array_bytes.decodes_partially

    @functools.cached_property
    def reads_partially(self) -> bool:
        """Whether ``decode_region_from`` can ever avoid reading a whole chunk."""
        return self._lone and self.array_bytes.reads_partially

    def decode_region_from(self, read: Any, spec: ChunkSpec, selection: tuple) -> np.ndarray | None:
        """``decode_region`` reading only the bytes it needs through ``read(start, stop)``
        (see ``ArrayBytesCodec.decode_partial_from``); None: read the chunk whole instead."""
        if not self.reads_partially:
            return None
        return self.array_bytes.decode_partial_from(read, spec, selection)

    @functools.cached_property
    def raw_layout(self) -> tuple[bytes, np.dtype] | None:
        """The lone array->bytes codec's ``raw_layout`` (bound pipelines only), else None."""
        return None if self.array_array or self.bytes_bytes else self.array_bytes.raw_layout()

    @functools.cached_property
    def inflate_layout(self) -> tuple[bytes, np.dtype] | None:
        """The lone array->bytes codec's ``inflate_layout`` (bound pipelines only), else None."""
        return None if self.array_array or self.bytes_bytes else self.array_bytes.inflate_layout()

    def native_layout(self, spec: ChunkSpec) -> NativeLayout | None:
        """How the native reader (``_rawio.read_spans``) decodes chunks of ``spec`` itself:
        ``(decoder or None for raw bytes, stored dtype, order)`` for a chain of one plain
        array->bytes codec (``ArrayBytesCodec.plain_layout``: ``bytes``) and at most one
        compressor it has a decoder for (``BytesBytesCodec.native_decoder``); else None."""
        if self.array_array or len(self.bytes_bytes) > 1:
            return None
        plain = self.array_bytes.plain_layout(spec)
        if plain is None:
            return None
        if not self.bytes_bytes:
            return None, *plain
        decoder = self.bytes_bytes[0].native_decoder()
        return None if decoder is None else (decoder, *plain)

    def decodes_to_view(self, spec: ChunkSpec) -> bool:
        """Whether a chunk of ``spec`` decodes to a view of its stored bytes, all of them (a
        lone plain codec storing native-order values): a chunk cache keeps what was read
        as its entry, so a kept chunk is read into memory of its own rather than a reused
        buffer that the entry would copy."""
        layout = self.native_layout(spec)
        return layout is not None and layout[0] is None and layout[1].isnative

    @functools.cached_property
    def decodes_into(self) -> bool:
        """Whether ``decode_into`` can ever write a chunk straight into the caller's array."""
        return self._lone and self.array_bytes.decodes_into

    def decode_into(self, data: bytes, spec: ChunkSpec, out: np.ndarray) -> bool:
        """Decode the whole chunk into ``out`` (see ``ArrayBytesCodec.decode_into``); False,
        having written nothing, when the caller must ``decode`` and copy."""
        if not self.decodes_into:
            return False
        return self.array_bytes.decode_into(data, spec, out)

    @functools.cached_property
    def _innermost_decodes_to(self) -> bool:
        """Whether the last bytes->bytes decoder to run can decode into a buffer given to it."""
        return bool(self.bytes_bytes) and self.bytes_bytes[0].decodes_to

    def decode_transient(self, data: bytes, spec: ChunkSpec, scratch_max: int = IOConfig.scratch_max_bytes) -> np.ndarray:
        """``decode`` for callers that copy the result out at once (see
        ``ArrayBytesCodec.decode_transient``): the innermost decompression may go into this
        thread's scratch buffer (kept up to ``scratch_max`` bytes, the array's
        ``IOConfig.scratch_max_bytes``) instead of a fresh one."""
        if not self.array_array and not self.bytes_bytes:
            return self.array_bytes.decode_transient(data, spec, scratch_max)
        return self._decode(data, spec, (lambda n: scratch_buffer(n, scratch_max)) if self._innermost_decodes_to else None)

    def decode_kept(self, data: bytes, spec: ChunkSpec) -> np.ndarray:
        """``decode`` for a result that is kept (a chunk cache entry): the innermost
        decompression goes into a fresh buffer that the result views, not into a bytes
        object that the entry would have to copy to own its memory (a second fresh chunk,
        page faults and all); a codec that decodes into the caller's array (bloscpack)
        decodes into a new one."""
        if self.decodes_into:
            out = np.empty(spec.shape, spec.dtype)
            if self.array_bytes.decode_into(data, spec, out):
                return out
        return self._decode(data, spec, new_buffer if self._innermost_decodes_to else None)

    def decode(self, data: bytes, spec: ChunkSpec) -> np.ndarray:
        return self._decode(data, spec, None)

    def _decode(self, data: bytes, spec: ChunkSpec, buffer: Callable[[int], np.ndarray] | None) -> np.ndarray:
        """The chunk decoded; ``buffer(nbytes)``: where the innermost decompression may go."""
        specs, caps = self._plan(spec)
        ab_spec = specs[-1]
        steps = list(zip(self.bytes_bytes, caps))[::-1]  # in decoding order
        innermost = steps.pop() if buffer is not None else None
        for codec, limit in steps:
            data = codec.decode(data, ab_spec, limit)
        if innermost is not None and buffer is not None:
            size = self.array_bytes.encoded_size(ab_spec)
            codec, limit = innermost
            buf = None if size is None else decode_to_buffer(codec, data, ab_spec, size, buffer)
            # (a uint8 array, which the array->bytes codecs take as the bytes it holds)
            data = codec.decode(data, ab_spec, limit) if buf is None else cast(bytes, buf)
        array = self.array_bytes.decode(data, ab_spec)
        for aa, s in zip(reversed(self.array_array), reversed(specs[:-1])):
            array = aa.decode(array, s)
        if array.shape != spec.shape:
            raise CodecError(f"decoded chunk has shape {array.shape}, expected {spec.shape}")
        return array
