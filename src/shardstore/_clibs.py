"""The C libraries imagecodecs' wheels carry beside the package (libzstd, libblosc,
libdeflate), found for ctypes in one place: the native readers hand their functions to
``_rawio`` by address, and the zstd codec decodes into given buffers with libzstd. The
system's copy (by soname) is the fallback.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["find_functions"]

# loaded libraries stay loaded: their functions are called for the life of the process
_kept: list[ctypes.CDLL] = []


def _candidates(prefix: str, soname: str, extension: str | None) -> Iterator[str]:
    try:
        import imagecodecs
    except ImportError:  # pragma: no cover - imagecodecs is a dependency
        pass
    else:
        if extension is not None:
            # loaded by imagecodecs' own extension first: a library's dependencies (libblosc's
            # liblz4, ...) are found by their sonames only once something loaded them
            with contextlib.suppress(Exception):  # (a build without it: the system's, if any)
                getattr(imagecodecs, extension).available  # noqa: B018 (the attribute imports the extension)
        # (os.path and glob, not pathlib: this runs on a process's first native codec use,
        # and pathlib with the urllib modules it imports is 0.8 MiB)
        libs = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(imagecodecs.__file__))), "imagecodecs.libs")
        yield from sorted(glob.glob(os.path.join(glob.escape(libs), prefix + "*.so*")))
    yield soname


def find_functions(prefix: str, soname: str, functions: Sequence[str], extension: str | None = None) -> list[Any] | None:
    """The ctypes functions named ``functions`` of the first library that has them all:
    imagecodecs' files named ``prefix*.so*`` (after its codec ``extension`` is imported, when
    given), then ``soname``; None when none has them (absent, or too old)."""
    for name in _candidates(prefix, soname, extension):
        try:
            lib = ctypes.CDLL(name)
            found = [getattr(lib, f) for f in functions]
        except (OSError, AttributeError):
            continue
        _kept.append(lib)
        return found
    return None
