"""Types of the native ``shardstore._rawio`` extension (``_rawio.c``; see its docstrings)."""

from collections.abc import Sequence
from os import PathLike
from typing import Any

_Path = str | bytes | PathLike[str] | PathLike[bytes]
#: (start, step, count, out_start) per chunk dimension: one 4-sequence each, or flattened
_Box = Sequence[Sequence[int]] | Sequence[int]

def read_boxes(
    out: Any,
    chunk_shape: Sequence[int],
    out_dims: Sequence[int],
    header: bytes | bytearray | memoryview,
    itemsize: int,
    swap: bool,
    jobs: Sequence[tuple[_Path, _Box] | tuple[_Path, _Box, Any]],
    inflate: bool = ...,
    work: Any = ...,
    stream: bool = ...,
    /,
) -> bytes: ...
def write_boxes(
    src: Any,
    chunk_shape: Sequence[int],
    header: bytes | bytearray | memoryview,
    itemsize: int,
    swap: bool,
    jobs: Sequence[tuple[_Path, _Path, Sequence[int]]],
    /,
) -> bytes: ...
def place_boxes(
    out: Any,
    chunk_shape: Sequence[int],
    out_dims: Sequence[int],
    itemsize: int,
    jobs: Sequence[tuple[Any, _Box]],
    stream: bool,
    helper: bool = False,
    /,
) -> None: ...
def set_libdeflate(alloc_decompressor: int, free_decompressor: int, gzip_decompress_ex: int, zlib_decompress_ex: int, /) -> None: ...
def read_spans(
    out: Any,
    chunk_shape: Sequence[int],
    out_dims: Sequence[int],
    itemsize: int,
    swap: bool,
    codec: int,
    file: _Path | int,
    tail: int,
    jobs: Sequence[tuple[int, int, _Box] | tuple[int, int, _Box, Any]],
    work: Any = ...,
    stream: bool = ...,
    /,
) -> bytes: ...
def set_decoders(zstd_decompress: int, zstd_is_error: int, blosc_cbuffer_validate: int, blosc_decompress_ctx: int, /) -> None: ...
def decoders() -> tuple[int, ...]: ...
