"""PrecomputedDriver has identity semantics, as the other format drivers (issue 17 point 8).

It was a ``@dataclass`` without fields: every driver compared equal to every other one (all
scales, all volumes) and none was hashable, so drivers could not key a dict or a cache.
"""

from __future__ import annotations

from typing import Any

import shardstore
from shardstore.formats.precomputed.driver import PrecomputedDriver
from shardstore.store.memory import MemoryStore

pc = shardstore.precomputed


def _driver(array: Any) -> PrecomputedDriver:
    driver = array._async.driver  # the Array facade's driver (no public accessor)
    assert isinstance(driver, PrecomputedDriver)
    return driver


def test_drivers_of_different_scales_and_volumes_differ() -> None:
    store = MemoryStore()
    scales = [{"size": [8, 8, 8], "resolution": [1, 1, 1]}, {"size": [4, 4, 4], "resolution": [2, 2, 2]}]
    a = pc.create(store, data_type="uint8", scales=scales, path="one")
    b = pc.create(store, data_type="uint16", scales=scales[:1], path="two")
    s0, s1 = _driver(pc.open(store, scale=0, path="one")), _driver(pc.open(store, scale=1, path="one"))
    other = _driver(b)
    assert s0 != s1 and s0 != other and s1 != other
    assert s0 == s0
    # the same scale opened twice: two open states (layouts, caches), not one
    assert _driver(a) != s0
    assert len({s0, s1, other, _driver(a)}) == 4


def test_drivers_are_hashable_dict_keys() -> None:
    store = MemoryStore()
    a = pc.create(store, data_type="uint32", scales=[{"size": [4, 4, 4]}])
    d = _driver(a)
    seen = {d: "first"}
    assert seen[d] == "first"
    assert hash(d) == hash(d)
    assert _driver(pc.open(store)) not in seen
