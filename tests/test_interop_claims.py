"""Every interop claim of README.md has tests, and under CI they can run (no silent skips).

The interop tests skip when a reference library is missing (``pytest.importorskip``), which
is right on a developer's machine and wrong in CI, where the README's claims must be checked.
``CLAIMS`` maps each claim (a phrase of the README's format table) to the tests that check
it; this module fails when a claim loses its phrase or its tests, and, under CI (``CI`` set),
when a library or tool those tests need is not importable / installed.
"""

from __future__ import annotations

import ast
import importlib
import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent

#: README phrase -> (test module, test functions that check it)
CLAIMS: dict[str, list[tuple[str, list[str]]]] = {
    "interop both ways with tensorstore and zarr-python": [
        ("test_zarr3_interop.py", ["test_anchor_writes_shardstore_reads", "test_shardstore_writes_anchors_read"]),
        ("test_zarr3_default_checksum.py", ["test_reference_libraries_read_the_default_codecs"]),
    ],
    "interop both ways with tensorstore and z5py": [
        ("test_n5_interop.py", ["test_shardstore_writes_tensorstore_reads", "test_tensorstore_writes_shardstore_reads",
                                "test_shardstore_writes_z5py_reads", "test_z5py_writes_shardstore_reads"]),
    ],
    "lz4 byte-identical to lz4-java": [
        ("test_n5_interop.py", ["test_lz4_java_reads_shardstore_blocks", "test_shardstore_reads_lz4_java_streams"]),
    ],
    "CloudVolume's `.gz` chunk files read": [
        ("test_precomputed_interop.py", ["test_cloudvolume_gzipped_chunk_files"]),
    ],
    "interop both ways with tensorstore and CloudVolume": [
        ("test_precomputed_interop.py", ["test_shardstore_writes_tensorstore_and_cloudvolume_read",
                                         "test_tensorstore_writes_shardstore_reads",
                                         "test_cloudvolume_writes_shardstore_reads"]),
        ("test_uint64_interop.py", ["test_tensorstore_writes_shardstore_reads", "test_shardstore_writes_tensorstore_reads",
                                    "test_cloudvolume_writes_shardstore_reads", "test_shardstore_writes_cloudvolume_reads"]),
    ],
    "interop both ways with bcolz": [
        ("test_bcolz_interop.py", ["test_dtypes_both_ways", "test_appends_and_resizes_both_ways",
                                   "test_ctable_both_ways"]),
    ],
    "every format reads over HTTP and reads/writes on S3": [
        ("test_remote_formats.py", ["test_roundtrip_over_s3_urls", "test_reads_over_nginx",
                                    "test_tensorstore_reads_what_shardstore_wrote",
                                    "test_shardstore_reads_what_tensorstore_wrote"]),
    ],
}

#: what those tests need: importable modules, and programs / files for the lz4-java check
MODULES = ["tensorstore", "zarr", "z5py", "cloudvolume", "bcolz", "obstore"]
LZ4_JAVA = [Path("/usr/share/java/lz4-java.jar")]


def _functions(module: str) -> set[str]:
    tree = ast.parse((TESTS / module).read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


def test_every_claim_is_in_the_readme_and_has_its_tests() -> None:
    readme = (REPO / "README.md").read_text()
    for phrase, checks in CLAIMS.items():
        assert phrase in readme, f"README no longer says {phrase!r}: update CLAIMS"
        for module, names in checks:
            missing = set(names) - _functions(module)
            assert not missing, f"{phrase!r}: {module} lost {sorted(missing)}"


@pytest.mark.skipif(not os.environ.get("CI"), reason="outside CI the interop tests may skip")
@pytest.mark.parametrize("module", MODULES)
def test_ci_has_every_reference_library(module: str) -> None:
    try:
        importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - ImportError, or a library that breaks on import
        pytest.fail(f"under CI the interop tests need {module!r} (the test extra installs it): {e}")


@pytest.mark.skipif(not os.environ.get("CI"), reason="outside CI the lz4-java test may skip")
def test_ci_has_lz4_java() -> None:
    assert shutil.which("javac") and shutil.which("java"), "CI needs a JDK for the lz4-java check"
    assert any(j.exists() for j in LZ4_JAVA), "CI needs liblz4-java (.ci/run installs it)"
