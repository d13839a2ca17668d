"""Zarr v3 ``transpose`` codec: permute the axes of a chunk before it is serialised.

Encoding returns a view (``array.transpose(order)``); the array->bytes codec that follows
makes the single C-order copy. Decoding is the inverse permutation, again a view.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import CodecError, MetadataError
from .base import ArrayArrayCodec, ChunkSpec
from .registry import register_codec

__all__ = ["TransposeCodec"]


def _parse_order(order: Any) -> tuple[int, ...]:
    if not isinstance(order, (list, tuple)) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in order
    ):
        raise MetadataError(
            f"codec 'transpose': 'order' must be a list of integers, got {order!r}"
        )
    if sorted(order) != list(range(len(order))):
        raise MetadataError(
            f"codec 'transpose': 'order' must be a permutation of 0..{len(order) - 1}, "
            f"got {list(order)}"
        )
    return tuple(order)


@register_codec("transpose")
class TransposeCodec(ArrayArrayCodec):
    """``transpose``: ``order[i]`` is the input axis that becomes output axis ``i``."""

    light = True
    #: ``encode`` returns a view of any input; the array->bytes codec after it lays it out
    #: (the pipeline copies first only if that one does not take strides either)
    accepts_strided = True

    name = "transpose"

    def __init__(self, order: Sequence[int]) -> None:
        if isinstance(order, np.ndarray):
            order = order.tolist()
        elif isinstance(order, (list, tuple)):
            order = [int(i) if isinstance(i, np.integer) else i for i in order]
        self.order: tuple[int, ...] = _parse_order(order)
        self.inverse: tuple[int, ...] = tuple(int(i) for i in np.argsort(self.order))

    @classmethod
    def _from_configuration(cls, configuration: dict[str, Any]) -> TransposeCodec:
        extra = set(configuration) - {"order"}
        if extra:
            raise MetadataError(
                f"codec 'transpose': unknown configuration member(s) {sorted(extra)}"
            )
        if "order" not in configuration:
            raise MetadataError("codec 'transpose': configuration member 'order' is required")
        return cls(configuration["order"])

    def _canonical_config(self) -> dict[str, Any]:
        return {"name": "transpose", "configuration": {"order": list(self.order)}}

    def validate(self, spec: ChunkSpec) -> None:
        if len(self.order) != len(spec.shape):
            raise MetadataError(
                f"codec 'transpose': 'order' {list(self.order)} has {len(self.order)} entries "
                f"but the chunk has rank {len(spec.shape)}"
            )

    def resolve(self, spec: ChunkSpec) -> ChunkSpec:
        self.validate(spec)
        return spec.with_shape(tuple(spec.shape[i] for i in self.order))

    def encode(self, array: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        if array.ndim != len(self.order):
            raise CodecError(
                f"codec 'transpose': array of rank {array.ndim}, 'order' has {len(self.order)}"
            )
        return array.transpose(self.order)

    def decode(self, array: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        if array.ndim != len(self.order):
            raise CodecError(
                f"codec 'transpose': array of rank {array.ndim}, 'order' has {len(self.order)}"
            )
        return array.transpose(self.inverse)
