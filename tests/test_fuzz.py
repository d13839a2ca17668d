"""The fuzz harness (``shardstore.testing.fuzz``): its contract, its inputs, and a regression
test for every bug it found.

- A smoke run of the real runner (worker processes, memory cap, hang watch) over every target.
- Hypothesis drives the structure-aware builders (``HypothesisDraw``), so a failure shrinks:
  every valid case reads without error, every mutated one meets the contract.
- The harness itself is checked: a crash, a hang, an over-allocation and a wrong exception
  type are reported as failures (so a run with 0 failures means something).
- Regressions: each input class the fuzzer found, as a plain test.
- ``-m slow``: 40,000 executions on two workers with 0 failures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardstore
from shardstore.core.grid import RegularGrid
from shardstore.core.indexing import basic_indexer
from shardstore.errors import CodecError, MetadataError, ShardStoreError
from shardstore.store import MemoryStore
from shardstore.testing import fuzz
from shardstore.testing.fuzz_cases import (
    BUILDERS,
    Case,
    HypothesisDraw,
    RandomDraw,
    fixture_cases,
    mutate_case,
)

pytestmark = pytest.mark.timeout(180)

REPO = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _run(*args: str, timeout: float = 150) -> dict:
    r = subprocess.run([sys.executable, "-m", "shardstore.testing.fuzz", "--json", *args], capture_output=True,
                       text=True, timeout=timeout, env=_env(), stdin=subprocess.DEVNULL, check=False)
    assert r.stdout.strip(), r.stderr[-3000:]
    return json.loads(r.stdout)


# -- the runner ----------------------------------------------------------------------------

def test_smoke_run_every_target(fixtures_dir: Path) -> None:
    # (about 40 inputs per target: with fewer, a target can draw only refused inputs)
    report = _run("--executions", "396", "--jobs", "1", "--seed", "11")
    assert report["failures"] == [], report["failures"][:3]
    assert set(report["executions"]) == set(fuzz.TARGETS)
    assert report["total"] == 396
    # the inputs are not all rejected up front: every target has inputs that read fine
    # (the unmutated valid cases at least) and inputs that are refused
    for target in fuzz.TARGETS:
        assert report["outcomes"].get(f"{target}:ok", 0) > 0, target
        assert report["outcomes"].get(f"{target}:error", 0) > 0, target


def test_inputs_are_reproducible(fixtures_dir: Path) -> None:
    for target in fuzz.TARGETS:
        a, b = fuzz.make_input(target, 3, 41), fuzz.make_input(target, 3, 41)
        if isinstance(a, Case):
            assert a.files == b.files and a.mutated == b.mutated
        else:
            assert a[2] == b[2]


def test_runner_reports_contract_breaks(tmp_path: Path) -> None:
    """A crashing, hanging, over-allocating or wrongly-raising input is a failure with its
    index, and the run goes on after it (a new worker starts after a crash or a hang)."""
    (tmp_path / "fuzz_boom.py").write_text('''
import ctypes, time
from shardstore.testing import fuzz
def check(i, w):
    if i == 3:
        ctypes.string_at(0)  # segfault
    if i == 6:
        time.sleep(60)
    if i == 9:
        bytearray(8 << 30)
    if i == 12:
        raise fuzz.ContractViolation("TypeError (not a ShardStoreError)")
    return "ok"
fuzz.TARGETS["boom"] = fuzz._Target("boom", lambda d, i: i, check, repr)
''')
    # spawned workers import the plugin too: through sitecustomize on their PYTHONPATH
    (tmp_path / "sitecustomize.py").write_text("import fuzz_boom\n")
    env = _env()
    env["PYTHONPATH"] = str(tmp_path) + os.pathsep + env["PYTHONPATH"]
    code = ("import json; from shardstore.testing import fuzz; "
            "r = fuzz.run(15, jobs=1, targets=['boom'], timeout=3, memory_mb=512); print(json.dumps(r.to_json()))")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
                       stdin=subprocess.DEVNULL, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    kinds = [(f["index"], f["kind"]) for f in report["failures"]]
    assert kinds == [(3, "crash"), (6, "hang"), (9, "MemoryError"), (12, "contract")], report
    assert report["total"] == 15  # every input counted, those before a crash too
    assert report["outcomes"]["boom:ok"] == 6  # 7, 8, 10, 11, 13, 14: the run went on after each failure
    assert time.monotonic() - t0 < 90


def test_check_case_classifies(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another exception type, or a ShardStoreError not naming the changed key, break the
    contract; a valid input that is refused does too."""
    case = Case("t", "zarr3", {"zarr.json": b"{}", "c/0": b""}, mutated="c/0")

    def raising(exc: BaseException):
        def f(case: Case, store: object) -> None:
            raise exc
        return f

    monkeypatch.setattr(fuzz, "_open_and_read", raising(TypeError("boom")))
    with pytest.raises(fuzz.ContractViolation, match="TypeError"):
        fuzz.check_case(case)
    monkeypatch.setattr(fuzz, "_open_and_read", raising(CodecError("chunk 'c/1' is bad")))
    with pytest.raises(fuzz.ContractViolation, match="does not name"):
        fuzz.check_case(case)
    monkeypatch.setattr(fuzz, "_open_and_read", raising(CodecError("chunk 'c/0' is bad")))
    assert fuzz.check_case(case) == "error"
    with pytest.raises(fuzz.ContractViolation, match="valid input"):
        fuzz.check_case(Case("t", "zarr3", case.files))
    monkeypatch.setattr(fuzz, "_open_and_read", raising(MemoryError()))
    with pytest.raises(MemoryError):
        fuzz.check_case(case)


# -- structure-aware inputs under Hypothesis ----------------------------------------------

_FAST = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("builder", sorted(BUILDERS))
@_FAST
@given(data=st.data())
def test_built_cases_are_valid_and_mutations_meet_the_contract(builder: str, data: st.DataObject, tmp_path_factory: pytest.TempPathFactory) -> None:
    workdir = str(tmp_path_factory.mktemp("fuzz"))
    case = BUILDERS[builder](HypothesisDraw(data))
    assert fuzz.check_case(case, workdir) == "ok"
    mutated = mutate_case(HypothesisDraw(data), case)
    assert fuzz.check_case(mutated, workdir) in ("ok", "error")


def test_hand_built_containers_read_as_built() -> None:
    """The builders lay out what the specs say: shardstore reads back their payloads."""
    for seed in range(20):
        case = BUILDERS["uint64_shard"](RandomDraw(seed))
        from shardstore.formats.precomputed.kv import open_kv

        kv = open_kv(MemoryStore(dict(case.files)), case.kv_spec)
        assert all(isinstance(kv[k], bytes) for k in kv)
        z = BUILDERS["zarr3_shard"](RandomDraw(seed))
        a = shardstore.open(MemoryStore(dict(z.files)))
        assert np.asarray(a[...]).shape == a.shape


def test_fixture_mutations_meet_the_contract(fixtures_dir: Path) -> None:
    cases = fixture_cases(fixtures_dir)
    assert len(cases) >= 50
    for case in cases:
        assert fuzz.check_case(case) == "ok", case.name  # every fixture reads as it is
    for i in range(300):
        d = RandomDraw(f"fixture-mutation:{i}")
        assert fuzz.check_case(mutate_case(d, d.choice(cases))) in ("ok", "error")


# -- regressions: what the fuzzer found ----------------------------------------------------

def _doc_store(fmt: str) -> tuple[dict[str, bytes], str]:
    data: dict[str, bytes] = {}
    store = MemoryStore(data)
    if fmt == "bcolz":
        shardstore.create(store, format="bcolz", data=np.arange(10, dtype="int32"), chunklen=4)
        return data, "meta/sizes"
    if fmt == "precomputed":
        shardstore.precomputed.create(store, data_type="uint8", scales=[{"size": [4, 4, 4], "chunk_sizes": [[2, 2, 2]]}])
        return data, "info"
    kw = {"block_size": (2, 2)} if fmt == "n5" else {"chunks": (2, 2)}
    shardstore.create(store, format=fmt, shape=(4, 4), dtype="uint8", **kw)
    return data, "zarr.json" if fmt == "zarr3" else "attributes.json"


@pytest.mark.parametrize("fmt", ["zarr3", "n5", "bcolz", "precomputed"])
@pytest.mark.parametrize("shape", [[2**40 + 1, 0, 2**40], [2**64, 7, 6], [2**31, 2**31, 2**31]])
def test_shape_beyond_any_array_is_a_metadata_error(fmt: str, shape: list[int]) -> None:
    """Found: bcolz meta/sizes [2**40+1, 0, 2**40] made the indexer list 2**40 chunks and
    NumPy refuse the output (ValueError); precomputed sizes of 2**64 an OverflowError."""
    data, key = _doc_store(fmt)
    doc = json.loads(data[key])
    if fmt == "precomputed":
        doc["scales"][0]["size"] = shape
    elif fmt == "n5":
        doc["dimensions"] = shape
    else:
        doc["shape"] = shape
        if fmt == "zarr3":
            doc["chunk_grid"]["configuration"]["chunk_shape"] = [1] * len(shape)
    data[key] = json.dumps(doc).encode()
    with pytest.raises(MetadataError, match=key.rsplit("/", 1)[-1]) as info:
        a = shardstore.open(MemoryStore(data, read_only=True))
        np.asarray(a[...])
    assert "2**60" in str(info.value) or "rank" in str(info.value)


def test_empty_selection_lists_no_chunks() -> None:
    grid = RegularGrid((2**50, 0), (1, 1))
    t0 = time.monotonic()
    indexer = basic_indexer((slice(None), slice(None)), grid)
    assert indexer.shape == (2**50, 0)
    assert list(indexer) == []
    assert time.monotonic() - t0 < 1


@pytest.mark.parametrize("value", [True, 1.5, "x", {"name": "t"}])
def test_zarr_storage_transformers_not_a_list(value: object) -> None:
    """Found: ``"storage_transformers": true`` raised TypeError ('bool' object is not iterable)."""
    data, key = _doc_store("zarr3")
    doc = json.loads(data[key])
    doc["storage_transformers"] = value
    data[key] = json.dumps(doc).encode()
    with pytest.raises(MetadataError, match="zarr.json.*storage_transformers"):
        shardstore.open(MemoryStore(data, read_only=True))


def test_compressed_segmentation_block_beyond_any_chunk() -> None:
    """Found: a block size of 2**63 voxels overflowed int64 (OverflowError) in the decoder's checks."""
    data: dict[str, bytes] = {}
    store = MemoryStore(data)
    a = shardstore.precomputed.create(store, data_type="uint32", scales=[{
        "size": [8, 8, 8], "chunk_sizes": [[8, 8, 8]], "encoding": "compressed_segmentation",
        "compressed_segmentation_block_size": [4, 4, 4], "key": "s"}])
    a[...] = 7
    info = json.loads(data["info"])
    info["scales"][0]["compressed_segmentation_block_size"] = [2**31, 2**31, 2]
    data["info"] = json.dumps(info).encode()
    with pytest.raises(ShardStoreError) as err:
        np.asarray(shardstore.precomputed.open(MemoryStore(data, read_only=True))[...])
    assert isinstance(err.value, (CodecError, MetadataError)) and ("s/" in str(err.value) or "info" in str(err.value))


def test_n5_header_claiming_2_40_elements_is_an_error_not_an_allocation() -> None:
    """A block header may claim any size; reading it must not allocate what it claims (checked
    under an address-space cap in a child process)."""
    code = r'''
import resource, struct, json, numpy as np, shardstore
from shardstore.store import MemoryStore
from shardstore.testing.fuzz import _address_space
data = {"attributes.json": json.dumps({"dimensions": [8, 8], "blockSize": [8, 8], "dataType": "uint8",
                                       "compression": {"type": "raw"}}).encode()}
data["0/0"] = struct.pack(">HHII", 0, 2, 2**20, 2**20) + bytes(64)
data["0/1"] = struct.pack(">HHIII", 1, 2, 8, 8, 2**40 % 2**32 or 2**32 - 1) + bytes(64)
a = shardstore.open(MemoryStore(data, read_only=True))
cap = _address_space() + (256 << 20)
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
for key in ("0/0", "0/1"):
    try:
        np.asarray(a[...])
        print("read")
    except shardstore.ShardStoreError as e:
        assert "0/" in str(e), e
        print("error")
    data.pop(key)
'''
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=_env(), check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    # dims of 2**20 x 2**20 (2**40 elements): an error; a varlength count of 2**32 - 1 with
    # the 8 x 8 block's 64 bytes: read as the 64 elements its dims say, or an error - never
    # an allocation of what the header claims (the cap above would turn that into MemoryError)
    out = r.stdout.split()
    assert out[0] == "error" and out[1] in ("read", "error"), out


# -- the long run --------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_slow_fuzz_run(fixtures_dir: Path) -> None:
    report = _run("--executions", "40000", "--jobs", "2", "--seed", "5", timeout=3500)
    assert report["total"] == 40000
    assert report["failures"] == [], report["failures"][:5]


# -- the C extension -----------------------------------------------------------------------

def test_rawio_target_reaches_the_c_extension(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``n5_rawio`` inputs are read by ``_rawio.read_boxes`` (with inflate for gzip / zlib)."""
    from shardstore import _rawio
    from shardstore.core import rawread

    assert rawread.available() and rawread.inflate_available()
    calls: list[bool] = []
    real = _rawio.read_boxes

    def spy(*args: object) -> object:
        calls.append(bool(args[7]) if len(args) > 7 else False)
        return real(*args)

    monkeypatch.setattr(_rawio, "read_boxes", spy)
    for seed in range(12):
        case = BUILDERS["n5_rawio"](RandomDraw(seed))
        assert fuzz.check_case(case, str(tmp_path)) == "ok"
    assert calls and any(calls) and not all(calls), calls  # inflate and raw blocks both went native


def test_spans_target_reaches_the_c_extension(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``zarr3_spans`` inputs are read by ``_rawio.read_spans``, with every decoder it has."""
    from shardstore.core import spanread

    assert spanread.loaded_codecs() == tuple(spanread.CODECS.values())
    codecs: list[int] = []
    real = spanread._rawio.read_spans

    def spy(*args: object) -> object:
        codecs.append(args[5])  # type: ignore[arg-type]
        return real(*args)

    monkeypatch.setattr(spanread._rawio, "read_spans", spy)
    for seed in range(24):
        case = BUILDERS["zarr3_spans"](RandomDraw(seed))
        assert fuzz.check_case(case, str(tmp_path)) == "ok"
    assert set(codecs) == {0, 1, 2, 3}, codecs  # raw, zstd, blosc and gzip inner chunks went native


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_sanitized_extension_fuzz() -> None:
    """``_rawio.c`` built with ASan + UBSan, fed the n5_rawio and zarr3_spans corpora: no
    sanitizer report."""
    r = subprocess.run([sys.executable, "-m", "shardstore.testing.fuzz_sanitize", "--executions", "3000"],
                       capture_output=True, text=True, timeout=3500, env=_env(), check=False)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    report = json.loads(r.stdout)
    assert report["total"] == 3000 and report["failures"] == []


def test_huge_block_size_in_local_files_is_not_a_huge_allocation(tmp_path: Path) -> None:
    """Found: ``blockSize`` [2**31, 1] (uint16: 4 GiB) on local gzip blocks made the native
    reader allocate the metadata's block size up front (MemoryError under the worker's cap)."""
    code = r'''
import json, resource, sys, numpy as np, shardstore
from shardstore.core import rawread
from shardstore.testing.fuzz import _address_space
root = sys.argv[1]
a = shardstore.n5.create(root, "d", shape=(8, 8), dtype="uint16", block_size=(4, 4), compression={"type": "gzip"})
a[...] = np.arange(64, dtype="uint16").reshape(8, 8)
doc = json.load(open(root + "/d/attributes.json"))
doc["blockSize"] = [2**31, 1]
json.dump(doc, open(root + "/d/attributes.json", "w"))
assert rawread.inflate_available()
b = shardstore.n5.open(root, "d")
cap = _address_space() + (512 << 20)
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
try:
    np.asarray(b[...])
    print("read")
except shardstore.ShardStoreError as e:
    print("error")
'''
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "c.n5")], capture_output=True, text=True,
                       timeout=60, env={**_env(), "MALLOC_ARENA_MAX": "2"}, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() in (["read"], ["error"])


@pytest.mark.parametrize("comp", ["raw", "gzip", "zstd", "blosc"])
def test_chunk_claimed_by_metadata_is_not_allocated_before_the_data_fits(comp: str) -> None:
    """Found: a zarr.json chunk_shape of [4, 2**63] raised ValueError / OverflowError in the
    decoders; [2**31, 5] (20 GiB) made the gzip path allocate its output before decoding
    (MemoryError under the worker's cap). Now: a MetadataError, and a CodecError naming the
    chunk, under a 512 MiB cap."""
    code = r'''
import json, resource, sys, numpy as np, shardstore
from shardstore.store import MemoryStore
from shardstore.testing.fuzz import _address_space
comp = sys.argv[1]
codecs = [{"name": "bytes", "configuration": {"endian": "little"}}]
if comp == "gzip": codecs.append({"name": "gzip", "configuration": {"level": 1}})
if comp == "zstd": codecs.append({"name": "zstd", "configuration": {"level": 1, "checksum": False}})
if comp == "blosc": codecs.append({"name": "blosc", "configuration": {"cname": "lz4", "clevel": 1, "shuffle": "noshuffle", "typesize": 2, "blocksize": 0}})
out = []
for claim in ([4, 2**63], [2**31, 5]):
    d = {}
    shardstore.zarr3.create(MemoryStore(d), shape=(6, 5), dtype="uint16", chunks=(4, 4), codecs=codecs)[...] = 3
    doc = json.loads(d["zarr.json"]); doc["chunk_grid"]["configuration"]["chunk_shape"] = claim
    d["zarr.json"] = json.dumps(doc).encode()
    cap = _address_space() + (512 << 20)
    resource.setrlimit(resource.RLIMIT_AS, (cap, resource.RLIM_INFINITY))
    try:
        np.asarray(shardstore.open(MemoryStore(d))[...])
        out.append("read")
    except shardstore.ShardStoreError as e:
        out.append(type(e).__name__ + (":named" if "zarr.json" in str(e) or "c/0/0" in str(e) else ":unnamed"))
    resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
print(" ".join(out))
'''
    r = subprocess.run([sys.executable, "-c", code, comp], capture_output=True, text=True, timeout=60,
                       env={**_env(), "MALLOC_ARENA_MAX": "2"}, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["MetadataError:named", "CodecError:named"]


@pytest.mark.parametrize("value", [True, False, 1.0, "2"])
def test_sharding_inner_chunk_shape_of_booleans(value: object) -> None:
    """Found (zarr3_shard, seed 4, input 587098): a sharding_indexed chunk_shape [2, true]
    passed the codec's check (bool is an int) and failed later without naming zarr.json."""
    data: dict[str, bytes] = {}
    shardstore.zarr3.create(MemoryStore(data), shape=(2, 6), dtype="int32", chunks=(2, 3), shards=(2, 6))
    doc = json.loads(data["zarr.json"])
    doc["codecs"][0]["configuration"]["chunk_shape"] = [2, value]
    data["zarr.json"] = json.dumps(doc).encode()
    with pytest.raises(MetadataError, match="zarr.json.*chunk_shape"):
        shardstore.open(MemoryStore(data, read_only=True))
