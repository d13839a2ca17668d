"""Keep glibc from handing chunk-sized buffers back to the kernel after every read.

Each chunk read allocates and frees buffers of 100 KiB - 1 MiB (fetched bytes, decoded
chunks). With glibc's defaults those sizes cross the mmap and trim thresholds, so every
read maps fresh pages and page-faults them in. Raising the two thresholds makes the heap
reuse that memory (README, "Configuration", has the measured effect). Memory is still returned when
more than ``TRIM`` bytes sit free at the top of the heap, and blocks above ``MMAP`` (whole
arrays) are still mapped and unmapped directly.

Because the change is process-wide it is opt-in: it happens when an array is opened with
``IOConfig(malloc_tuning=True)`` (or ``SHARDSTORE_MALLOC_TUNING=1`` in the environment, which
sets that field of the default config), never on import.
"""

from __future__ import annotations

import ctypes
import sys

__all__ = ["tune_malloc"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP = 32 << 20
TRIM = 128 << 20
_done = False


def tune_malloc() -> bool:
    """Apply the thresholds once (glibc on Linux only); True if they were set."""
    global _done
    if _done or not sys.platform.startswith("linux"):
        return False
    _done = True
    try:
        # the process's own symbols (dlopen(NULL)) include the C library's: no lookup of
        # libc by name, which runs ``ldconfig -p`` in a subprocess (milliseconds per start)
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # musl and others have no mallopt: nothing to tune
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM))
