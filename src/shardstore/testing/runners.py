"""The two runners of the core, for tests: every chunk read and write runs on the blocking
runner (the calling thread and the codec pool, through the store's synchronous protocol) when
the store declares synchronous support, else on the async runner (the event loop, through
``get_many`` / ``update_many``). Tests parametrized over ``RUNNERS`` run one store both ways.
"""

from __future__ import annotations

from typing import Literal

from ..store.base import Store
from ..store.wrappers import AsyncOnlyStore

__all__ = ["RUNNERS", "Runner", "on_runner"]

Runner = Literal["blocking", "async"]
#: both runners, for ``pytest.mark.parametrize("runner", RUNNERS)``
RUNNERS: tuple[Runner, ...] = ("blocking", "async")


def on_runner(store: Store, runner: Runner) -> Store:
    """``store`` as the given runner sees it: itself for "blocking" (a store that declares
    synchronous reads and writes, e.g. memory or local files), wrapped in ``AsyncOnlyStore``
    (which declares none) for "async"."""
    if runner == "blocking":
        if store.sync_reads is None:
            raise ValueError(f"{store!r} declares no synchronous reads: it runs only on the async runner")
        return store
    if runner == "async":
        return AsyncOnlyStore(store)
    raise ValueError(f"unknown runner {runner!r}; expected one of {RUNNERS}")
