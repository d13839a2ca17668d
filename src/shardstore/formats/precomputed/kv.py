"""``open_kv``: a Neuroglancer ``neuroglancer_uint64_sharded_v1`` map as a mapping of int -> bytes.

The same sharded format holds the chunks of sharded precomputed volumes and the meshes and
skeletons of segmentations; this is the stand-alone view of it (what tensorstore calls the
``neuroglancer_uint64_sharded`` kvstore). The sharding spec comes from the ``sharding``
argument or from an ``info`` file in the directory: either the spec itself (``@type``
``neuroglancer_uint64_sharded_v1``) or a mesh / skeleton ``info`` with a ``sharding`` member.

A synchronous facade over ``sharding.uint64.Uint64ShardedStore``; every batch method
(``get_many``, ``update``, ``delete_many``) is one batch of the adapter, so ``update`` rewrites
each touched shard once.
"""

from __future__ import annotations

import json
import operator
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from typing import Any, cast

from ..._reopen import NodeRecord, reopen
from ..._sync import sync
from ...config import IOConfig, default_config
from ...errors import ContainsNodeError, InvalidKeyError, MetadataError
from ...sharding.uint64 import SHARDING_TYPE, UINT64_MAX, CompleteShard, ShardingSpec, Uint64ShardedStore
from ...store.base import Store
from ...store.registry import MODES, store_from_url
from .._entry import cleans_up

__all__ = ["open_kv", "ShardedKV"]

INFO_KEY = "info"


#: ``operator.index`` typed for any object (it raises TypeError for non-integers); cast once
#: here, not per key: a bulk update converts every key
_index = cast("Callable[[object], int]", operator.index)


def _checked_batch(other: Mapping[int, bytes | None] | Iterable[tuple[int, bytes | None]]) -> list[tuple[int, bytes | None]]:
    """``(key, value)`` pairs with every key checked (``_checked_keys``); values are checked
    by the adapter."""
    if isinstance(other, Mapping):
        keys, values = list(other.keys()), list(other.values())
    else:
        pairs = list(other)
        keys, values = [k for k, _ in pairs], [v for _, v in pairs]
    return list(zip(_checked_keys(keys), values))


def _checked_keys(keys: list[Any]) -> list[int]:
    """``_key`` of each; plain ``int`` keys (a bulk load's or batch read's usual form) are
    checked by a type test and ``min``/``max`` over the list, without a call per key."""
    if keys and all(type(k) is int for k in keys) and 0 <= min(keys) and max(keys) <= UINT64_MAX:
        return keys
    return [_key(k) for k in keys]


def _key(key: object) -> int:
    """A uint64 key from an int-like value (numpy integers included; bool refused)."""
    if isinstance(key, bool):
        raise InvalidKeyError(f"keys are uint64 integers, got {key!r}")
    # operator.index, not isinstance(key, SupportsIndex): a runtime Protocol check walks the
    # protocol's members on every call and cost most of a bulk update's time
    try:
        k = _index(key)
    except TypeError:
        raise InvalidKeyError(f"keys are uint64 integers, got {type(key).__name__}: {key!r}") from None
    if not 0 <= k <= UINT64_MAX:
        raise InvalidKeyError(f"key {k} is outside the uint64 range [0, 2**64 - 1]")
    return k


class ShardedKV(MutableMapping[int, bytes]):
    """uint64 keys -> bytes values stored in ``neuroglancer_uint64_sharded_v1`` shards."""

    def __reduce__(self) -> tuple[Any, ...]:
        # reopened from the directory's store: no shard caches or locks travel
        return (reopen, (NodeRecord("precomputed_kv", self.store.base, "", "r" if self.read_only else "r+"),))

    def __init__(self, store: Uint64ShardedStore) -> None:
        self.store = store
        self._here = store.runs_on_any_loop  # reads may run on the caller's own loop

    @property
    def spec(self) -> ShardingSpec:
        return self.store.spec

    @property
    def read_only(self) -> bool:
        return self.store.read_only

    def __repr__(self) -> str:
        return f"ShardedKV({self.store!r})"

    # -- reads ------------------------------------------------------------------------------
    def _values(self, keys: list[int]) -> list[bytes | None]:
        # over files or memory the adapter reads without the event loop: one key is a stat
        # and a pread or three, a batch one multi-range read per shard file
        now = self.store.sync_ids
        if now is not None:
            if len(keys) == 1:
                return [now.get_id(keys[0])]
            return now.get_many_ids(keys)
        return sync(self.store.get_many_ids(keys), here=self._here)

    def __getitem__(self, key: int) -> bytes:
        (value,) = self._values([_key(key)])
        if value is None:
            raise KeyError(key)
        return value

    def get(self, key: int, default: Any = None) -> Any:
        (value,) = self._values([_key(key)])
        return default if value is None else value

    def __contains__(self, key: object) -> bool:
        try:
            k = _key(key)
        except InvalidKeyError:
            return False
        now = self.store.sync_ids
        if now is None:
            return sync(self.store.exists_id(k), here=self._here)
        return now.locate(k) is not None

    def get_many(self, keys: Iterable[int]) -> dict[int, bytes | None]:
        """Values of many keys in one batch: ``{key: value, or None when absent}``.

        Each shard's indexes are fetched once and the value ranges of a shard read together.
        """
        ks = _checked_keys(list(keys))
        return dict(zip(ks, self._values(ks))) if ks else {}

    def _all_keys(self) -> list[int]:
        async def collect() -> list[int]:
            return [int(k) async for k in self.store.list_prefix("")]

        return sync(collect(), here=self._here)

    def __iter__(self) -> Iterator[int]:
        """Every key, shard by shard (each shard's minishard indexes are read); ``keys()`` is
        the mapping view of the same."""
        return iter(self._all_keys())

    def __len__(self) -> int:
        return len(self._all_keys())

    # -- writes -----------------------------------------------------------------------------
    def __setitem__(self, key: int, value: bytes) -> None:
        self.update({key: value})

    def __delitem__(self, key: int) -> None:
        if key not in self:
            raise KeyError(key)
        self.delete_many([key])

    # (typeshed's MutableMapping.update also takes any object with keys() and __getitem__)
    def update(self, other: Mapping[int, bytes | None] | Iterable[tuple[int, bytes | None]] = (), **kw: Any) -> None:  # type: ignore[override]
        """Write many keys in one batch (each touched shard rewritten once); a None value deletes."""
        if kw:
            raise TypeError("ShardedKV keys are integers; keyword arguments are not keys")
        batch = _checked_batch(other)
        if not batch:
            return
        if self.store.sync_writes is not None:
            # files or memory: each shard's read-modify-write runs on this thread, without
            # the event loop's thread hops (``Uint64ShardedStore.set_many_ids_sync``)
            self.store.set_many_ids_sync(batch)
        else:
            sync(self.store.set_many_ids(batch))

    def delete_many(self, keys: Iterable[int]) -> None:
        """Remove many keys in one batch; absent keys are ignored."""
        self.update([(k, None) for k in keys])

    def invalidate(self) -> None:
        """Forget cached indexes (after another process changed the shards)."""
        self.store.invalidate()


def _spec_from_info(info: object, where: str) -> ShardingSpec:
    if isinstance(info, dict) and info.get("@type") == SHARDING_TYPE:
        return ShardingSpec.from_json(info, where)
    if isinstance(info, dict) and isinstance(info.get("sharding"), dict):
        return ShardingSpec.from_json(info["sharding"], f"{where} 'sharding'")
    if isinstance(info, dict) and "scales" in info:
        raise MetadataError(
            f"{where} describes a precomputed volume; open the sharded key-value store of one scale "
            "by its directory (the scale key) with the scale's 'sharding' spec"
        )
    raise MetadataError(
        f"{where} has no sharding spec: expected '@type': {SHARDING_TYPE!r} or a 'sharding' member"
    )


@cleans_up
def open_kv(
    path_or_store: str | os.PathLike[str] | Store,
    sharding: Mapping[str, Any] | ShardingSpec | None = None,
    mode: str = "r",
    *,
    storage_options: Mapping[str, Any] | None = None,
    complete_shard: CompleteShard | None = None,
    config: IOConfig | None = None,
) -> ShardedKV:
    """Open the sharded uint64 key-value store in a directory (path, URL or Store).

    ``sharding``: the spec (JSON dict or ShardingSpec); when None it is read from the ``info``
    file there. ``mode``: ``"r"`` read-only; ``"r+"`` read-write, must exist (an ``info``, or
    a ``sharding`` given); ``"a"`` read-write, creating an ``info`` holding the spec when
    there is none; ``"w"`` create, removing every shard file (and info) first; ``"w-"``
    create, failing if an ``info`` exists. A ``sharding`` that disagrees with an existing
    ``info`` is a MetadataError. ``config`` (an ``IOConfig``) tunes the store and adapter.
    """
    if isinstance(sharding, str) and sharding in MODES and mode == "r":  # open_kv(path, "r+"): a mode
        sharding, mode = None, sharding
    if mode not in MODES:
        raise ValueError(f"invalid mode {mode!r}; expected one of {list(MODES)}")
    config = default_config(config)
    store = store_from_url(path_or_store, mode=mode, storage_options=storage_options, config=config)
    where = f"{INFO_KEY!r} in {store!r}"
    raw = sync(store.get(INFO_KEY))
    if raw is not None and mode == "w-":
        raise ContainsNodeError(f"{where} already exists (mode='w-')")
    info_spec = None
    if raw is not None and mode != "w":
        try:
            info = json.loads(raw)
        except ValueError as e:
            raise MetadataError(f"{where} is not valid JSON: {e}") from e
        info_spec = _spec_from_info(info, where)
    given = sharding if isinstance(sharding, ShardingSpec) or sharding is None else ShardingSpec.from_json(sharding, "sharding argument")
    if given is not None and info_spec is not None and given != info_spec:
        raise MetadataError(f"the sharding argument {given.to_json()} disagrees with {where}: {info_spec.to_json()}")
    spec = given or info_spec
    if spec is None:
        raise MetadataError(f"no sharding spec: {where} is missing and no sharding argument was given")
    if mode == "w":
        adapter = Uint64ShardedStore(store, spec, config=config)
        stems = sync(adapter._shard_stems())
        sync(store.set_many([(f"{s}.{ext}", None) for s in stems for ext in ("shard", "index", "data")]))
    if mode in ("a", "w", "w-") and (info_spec is None):
        sync(store.set(INFO_KEY, json.dumps(spec.to_json(), indent=1).encode()))
    return ShardedKV(Uint64ShardedStore(store, spec, complete_shard=complete_shard, config=config))
