"""What the commands share: printing, JSON layout, walking a node tree, parsing shapes and
codec lists, the I/O block of unsharded arrays."""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..core.array import Array
from ..errors import ShardStoreError
from ..formats.describe import children

#: adds a subcommand: ``add(name, help, description)`` -> its parser (``--debug`` included)
AddCommand = Callable[[str, str, str], argparse.ArgumentParser]

#: unsharded arrays are verified and copied in blocks of whole chunks up to about this size
BLOCK_BYTES = 64 * 2**20


class CommandFailed(Exception):
    """The command ran to the end and found a problem (exit code 1)."""


def out(*parts: Any) -> None:
    print(*parts, flush=True)


def local_dir(path: str) -> Path | None:
    """The local directory behind a path or ``file://`` URL, or None (memory, remote)."""
    if path.startswith("file://"):
        path = path[len("file://"):]
    elif "://" in path:
        return None
    p = Path(path).expanduser()
    return p if p.is_dir() else None


def shape(shape: Sequence[int] | None) -> str:
    return "none" if shape is None else str(tuple(int(s) for s in shape))


def json_text(value: Any, indent: int | None = 2, width: int = 80, _level: int = 0) -> str:
    """JSON, indented, but with any value that fits in ``width`` columns kept on one line."""
    flat = json.dumps(value, default=json_default)
    if indent is None or len(flat) + _level * indent <= width or not isinstance(value, (dict, list)) or not value:
        return flat
    pad, inner = " " * (indent * _level), " " * (indent * (_level + 1))
    if isinstance(value, dict):
        items = [f"{inner}{json.dumps(str(k))}: {json_text(v, indent, width, _level + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    items = [inner + json_text(v, indent, width, _level + 1) for v in value]
    return "[\n" + ",\n".join(items) + "\n" + pad + "]"


def json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


def fill_text(value: Any) -> str:
    return repr(value.item() if isinstance(value, np.generic) else value)


def is_group(node: Any) -> bool:
    """Not an array: a group, a bcolz ctable (its columns are arrays), a uint64 kv store."""
    return not isinstance(node, Array)


def walk(node: Any, name: str = "") -> Iterator[tuple[str, Any]]:
    """``(path, node)`` for ``node`` and everything below it (group members, ctable columns),
    depth first, sorted."""
    yield name, node
    for child_name, child in children(node):
        yield from walk(child, f"{name}/{child_name}" if name else child_name)


def parse_shape(text: str, ndim: int, what: str) -> tuple[int, ...]:
    """``"64"`` (every axis) or ``"64,64,32"``."""
    try:
        parts = [int(p) for p in text.replace("x", ",").split(",") if p.strip()]
    except ValueError:
        raise ShardStoreError(f"--{what} {text!r}: expected integers like 64 or 64,64,64") from None
    if len(parts) == 1:
        parts *= ndim
    if len(parts) != ndim or any(p < 1 for p in parts):
        raise ShardStoreError(f"--{what} {text!r}: expected {ndim} positive integers for a {ndim}-d array")
    return tuple(parts)


def parse_codecs(text: str) -> list[Any]:
    """A JSON codec list, inline or ``@file.json``."""
    source = "--codecs"
    if text.startswith("@"):
        source = text[1:]
        try:
            text = Path(source).expanduser().read_text()
        except OSError as e:
            raise ShardStoreError(f"--codecs: cannot read {source!r}: {e.strerror or e}") from e
    try:
        codecs = json.loads(text)
    except json.JSONDecodeError as e:
        raise ShardStoreError(f"{source}: not valid JSON ({e})") from None
    if isinstance(codecs, dict):
        codecs = [codecs]
    if not isinstance(codecs, list):
        raise ShardStoreError(f"{source}: expected a JSON list of codecs, got {type(codecs).__name__}")
    return codecs


def inner_codecs(array: Array) -> list[Any] | None:
    """The codecs of one (inner) chunk of a Zarr v3 array, or None for other formats."""
    if array.format != "zarr3":
        return None
    codecs = list(array.metadata.get("codecs", []))
    if len(codecs) == 1 and codecs[0].get("name") == "sharding_indexed":
        return list(codecs[0]["configuration"]["codecs"])
    return codecs


def summary(a: Array) -> str:
    shards = f" shards {shape(a.shards)}" if a.shards is not None else ""
    return f"{shape(a.shape)} {a.dtype} chunks {shape(a.chunks)}{shards}"


def io_block(shape: tuple[int, ...], chunks: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """Whole chunks, grown from the last axis backwards up to about ``BLOCK_BYTES``: the unit
    of reading / writing for unsharded arrays, few calls without much memory."""
    block = list(chunks)
    for axis in range(len(block) - 1, -1, -1):
        per = math.prod(block) * itemsize // block[axis]
        fits = max(1, BLOCK_BYTES // max(per, 1) // chunks[axis]) * chunks[axis]
        block[axis] = min(fits, max(1, -(-shape[axis] // chunks[axis])) * chunks[axis])
    return tuple(block)


