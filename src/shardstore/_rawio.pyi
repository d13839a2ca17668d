"""Types of the native ``shardstore._rawio`` extension (``_rawio.c``; see its docstrings)."""

from collections.abc import Sequence
from os import PathLike
from typing import Any

_Path = str | bytes | PathLike[str] | PathLike[bytes]

def read_boxes(
    out: Any,
    chunk_shape: Sequence[int],
    out_dims: Sequence[int],
    header: bytes | bytearray | memoryview,
    itemsize: int,
    swap: bool,
    jobs: Sequence[tuple[_Path, Sequence[int]]],
    inflate: bool = ...,
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
def set_libdeflate(alloc_decompressor: int, free_decompressor: int, gzip_decompress_ex: int, zlib_decompress_ex: int, /) -> None: ...
