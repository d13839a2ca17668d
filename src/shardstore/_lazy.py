"""``asyncio``, imported on first use.

Importing asyncio costs about 6.5 MiB of memory and 25 ms (it brings ssl, socket and
subprocess with it). A process that creates, writes and reads local or in-memory arrays
through the blocking API never needs an event loop (``_sync.sync_on``, the blocking
runners), so shardstore's modules reach asyncio through this stand-in, which imports it the
first time one of its names is used (a write child of the N5 benchmarks peaked 7.5 MiB above
z5py's, all of it imports). Type checkers see the real module (``if TYPE_CHECKING``).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

__all__ = ["asyncio", "asyncio_imported"]


class _LazyModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        module = importlib.import_module(self.__name__)
        # later lookups find the names here, as in the module itself
        self.__dict__.update({k: v for k, v in vars(module).items() if not k.startswith("__")})
        return getattr(module, name)


asyncio = _LazyModule("asyncio")


def asyncio_imported() -> bool:
    """Whether asyncio was imported in this process (by anyone): with it not, no event loop
    can be running."""
    return "asyncio" in sys.modules
