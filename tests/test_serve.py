"""``shardstore serve``: byte ranges, CORS, status codes, no escape from the root, concurrency,
over a local directory and over S3 (SeaweedFS); the CLI as a subprocess; tensorstore and
shardstore's own HTTP store reading sharded data through it."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import shardstore
from shardstore._sync import sync
from shardstore.serve import Server
from shardstore.store import MemoryStore
from shardstore.store.base import ByteRange

pytest_plugins = ["_servers"]
pytestmark = pytest.mark.timeout(120)

if TYPE_CHECKING:
    from _servers import Nginx, SeaweedFS

SECRET = b"top-secret-outside-the-root"
PAYLOAD = bytes(range(256)) * 4  # 1024 bytes, each position recognisable


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``top/secret.txt`` outside the served root ``top/data``, and links pointing out."""
    top = tmp_path_factory.mktemp("serve")
    (top / "secret.txt").write_bytes(SECRET)
    root = top / "data"
    (root / "sub").mkdir(parents=True)
    (root / "blob.bin").write_bytes(PAYLOAD)
    (root / "sub" / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group"}')
    (root / "sub" / "info").write_text('{"type": "image"}')
    (root / "sub" / "attributes.json").write_text("{}")
    (root / "sub" / "c").write_bytes(b"\x01\x02")
    (root / "empty").write_bytes(b"")
    (root / "out-link").symlink_to(top / "secret.txt")
    (root / "out-dir").symlink_to(top)
    (root / "in-link").symlink_to(root / "blob.bin")  # inside: allowed
    if hasattr(os, "mkfifo"):
        os.mkfifo(root / "fifo")  # not a value: must answer 404 at once, not wait for a writer
    return root


@pytest.fixture(scope="module")
def server(tree: Path) -> Iterator[Server]:
    with Server(tree, port=0) as s:
        yield s


def request(server: Server, method: str, path: str, headers: dict[str, str] | None = None,
            body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
    """One request with ``path`` sent exactly as given (no client-side normalisation)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


# -- whole values, content types, headers ------------------------------------------------------
def test_get_whole_value(server: Server) -> None:
    status, h, body = request(server, "GET", "/blob.bin")
    assert status == 200 and body == PAYLOAD
    assert h["content-length"] == str(len(PAYLOAD))
    assert h["accept-ranges"] == "bytes"
    assert h["content-type"] == "application/octet-stream"
    assert h["access-control-allow-origin"] == "*"
    exposed = {e.strip().lower() for e in h["access-control-expose-headers"].split(",")}
    assert {"content-range", "content-length", "accept-ranges", "etag"} <= exposed
    assert h["etag"]


@pytest.mark.parametrize("key, ctype", [("sub/zarr.json", "application/json"), ("sub/info", "application/json"),
                                        ("sub/attributes.json", "application/json"),
                                        ("sub/c", "application/octet-stream")])
def test_content_types(server: Server, key: str, ctype: str) -> None:
    status, h, _ = request(server, "GET", "/" + key)
    assert status == 200 and h["content-type"].split(";")[0] == ctype


def test_empty_value(server: Server) -> None:
    status, h, body = request(server, "GET", "/empty")
    assert (status, body, h["content-length"]) == (200, b"", "0")


# -- ranges ------------------------------------------------------------------------------------
@pytest.mark.parametrize("header, start, end", [
    ("bytes=10-19", 10, 20),
    ("bytes=0-0", 0, 1),
    ("bytes=1000-", 1000, 1024),
    ("bytes=-10", 1014, 1024),
    ("bytes=1020-5000", 1020, 1024),  # clipped at the end
    ("bytes=-5000", 0, 1024),  # a suffix longer than the value: all of it
])
def test_ranges(server: Server, header: str, start: int, end: int) -> None:
    status, h, body = request(server, "GET", "/blob.bin", {"Range": header})
    assert status == 206
    assert body == PAYLOAD[start:end]
    assert h["content-range"] == f"bytes {start}-{end - 1}/1024"
    assert h["content-length"] == str(end - start)
    assert h["access-control-allow-origin"] == "*"


@pytest.mark.parametrize("header", ["bytes=1024-", "bytes=5000-6000", "bytes=-0"])
def test_unsatisfiable_range(server: Server, header: str) -> None:
    status, h, _ = request(server, "GET", "/blob.bin", {"Range": header})
    assert status == 416
    assert h["content-range"] == "bytes */1024"


@pytest.mark.parametrize("header", ["bytes=5-2", "items=0-1", "bytes=0-1,5-6", "bytes=-", "bytes=a-b"])
def test_ignored_range_headers_give_the_whole_value(server: Server, header: str) -> None:
    status, h, body = request(server, "GET", "/blob.bin", {"Range": header})
    assert status == 200 and body == PAYLOAD and "content-range" not in h


@pytest.mark.parametrize("header, start, end", [(None, 0, 1024), ("bytes=100-", 100, 1024), ("bytes=-1000", 24, 1024),
                                                ("bytes=3-1002", 3, 1003)])
def test_long_bodies_are_streamed_in_pieces(server: Server, monkeypatch: pytest.MonkeyPatch,
                                            header: str | None, start: int, end: int) -> None:
    # bodies above the threshold go out in blocks: shrink both so 1 KiB takes that path
    monkeypatch.setattr(server.source, "stream_threshold", 100)
    monkeypatch.setattr(server.source, "stream_block", 64)
    status, h, body = request(server, "GET", "/blob.bin", {"Range": header} if header else {})
    assert (status, body, h["content-length"]) == (206 if header else 200, PAYLOAD[start:end], str(end - start))


def test_head(server: Server) -> None:
    status, h, body = request(server, "HEAD", "/blob.bin")
    assert (status, body, h["content-length"], h["accept-ranges"]) == (200, b"", "1024", "bytes")
    status, h, body = request(server, "HEAD", "/blob.bin", {"Range": "bytes=-100"})
    assert (status, body, h["content-length"], h["content-range"]) == (206, b"", "100", "bytes 924-1023/1024")
    assert request(server, "HEAD", "/nope")[0] == 404
    assert request(server, "HEAD", "/blob.bin", {"Range": "bytes=2000-"})[0] == 416


def test_cors_preflight_for_range(server: Server) -> None:
    status, h, _ = request(server, "OPTIONS", "/blob.bin", {
        "Origin": "https://neuroglancer-demo.appspot.com", "Access-Control-Request-Method": "GET",
        "Access-Control-Request-Headers": "range"})
    assert status == 204
    assert h["access-control-allow-origin"] == "*"
    assert "range" in h["access-control-allow-headers"].lower()
    assert {"GET", "HEAD"} <= {m.strip() for m in h["access-control-allow-methods"].split(",")}
    assert "content-range" in h["access-control-expose-headers"].lower()


# -- status codes ------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/nope", "/sub/nope.json", "/sub", "/sub/", "/blob.bin/x", "/fifo"])
def test_missing_is_404(server: Server, path: str) -> None:
    status, h, _ = request(server, "GET", path)
    assert status == 404 and h["access-control-allow-origin"] == "*"


@pytest.mark.parametrize("method", ["PUT", "POST", "DELETE", "PATCH"])
def test_writes_are_405(server: Server, tree: Path, method: str) -> None:
    status, h, _ = request(server, method, "/blob.bin", body=b"overwritten")
    assert status == 405 and "GET" in h["allow"]
    assert (tree / "blob.bin").read_bytes() == PAYLOAD
    status, _, _ = request(server, method, "/new-key", body=b"x")
    assert status == 405 and not (tree / "new-key").exists()


# -- nothing outside the root ------------------------------------------------------------------
ESCAPES = [
    "/../secret.txt",
    "/sub/../../secret.txt",
    "/%2e%2e/secret.txt",
    "/%2E%2E/secret.txt",
    "/sub/%2e%2e/%2e%2e/secret.txt",
    "/..%2fsecret.txt",
    "/%2e%2e%2fsecret.txt",
    "/..%5csecret.txt",
    "/.%2e/secret.txt",
    "/out-link",  # a symlink to the secret file
    "/out-dir/secret.txt",  # a symlink to the directory above the root
]


@pytest.mark.parametrize("path", ESCAPES)
def test_no_escape_with_dot_dot_or_symlinks(server: Server, path: str) -> None:
    status, _, body = request(server, "GET", path)
    assert status == 404, path
    assert SECRET not in body


def test_no_escape_with_absolute_paths(server: Server, tree: Path) -> None:
    secret = str(tree.parent / "secret.txt")
    for path in ["/" + secret, "//" + secret.lstrip("/"), "/%2F" + secret.lstrip("/").replace("/", "%2F"),
                 "/%00", "/blob.bin%00"]:
        status, _, body = request(server, "GET", path)
        assert status == 404, path
        assert SECRET not in body


def test_symlink_inside_the_root_is_served(server: Server) -> None:
    # the escape checks above refuse by where a link leads, not because it is a link
    status, _, body = request(server, "GET", "/in-link")
    assert status == 200 and body == PAYLOAD


# -- concurrency -------------------------------------------------------------------------------
def test_many_concurrent_range_requests(server: Server) -> None:
    def one(i: int) -> tuple[int, bytes, int]:
        start = (i * 37) % 1000
        status, _, body = request(server, "GET", "/blob.bin", {"Range": f"bytes={start}-{start + 23}"})
        return status, body, start

    with ThreadPoolExecutor(32) as pool:
        results = list(pool.map(one, range(200)))
    assert all(status == 206 and body == PAYLOAD[start:start + 24] for status, body, start in results)


class _GateStore(MemoryStore):
    """A store whose reads all wait until ``n`` of them are in flight at once: served one
    after the other, the first would wait forever (here: fail after a timeout)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n
        self.inflight = 0
        self.peak = 0
        self._event: asyncio.Event | None = None

    async def _get(self, key: str, byte_range: ByteRange | None) -> bytes | None:
        if self._event is None:
            self._event = asyncio.Event()
        self.inflight += 1
        self.peak = max(self.peak, self.inflight)
        if self.inflight >= self.n:
            self._event.set()
        try:
            await asyncio.wait_for(self._event.wait(), 20)
        finally:
            self.inflight -= 1
        return await super()._get(key, byte_range)


def test_requests_are_served_in_parallel() -> None:
    n = 16
    store = _GateStore(n)
    sync(store.set("k", PAYLOAD))
    with Server(store, port=0) as s, ThreadPoolExecutor(n) as pool:
        results = list(pool.map(lambda i: request(s, "GET", "/k", {"Range": f"bytes={i}-{i + 9}"}), range(n)))
    assert [r[0] for r in results] == [206] * n
    assert [r[2] for r in results] == [PAYLOAD[i:i + 10] for i in range(n)]
    assert store.peak >= n


# -- real clients through the server -----------------------------------------------------------
@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    root = tmp_path_factory.mktemp("served")
    data = np.random.default_rng(1).integers(0, 255, (40, 48, 56), dtype=np.uint8)
    a = shardstore.zarr3.create(root / "em.zarr", shape=data.shape, dtype="uint8", chunks=(8, 8, 8),
                                shards=(16, 16, 32), dimension_names=["z", "y", "x"], mode="w")
    a[...] = data
    return root, data


def test_shardstore_http_store_reads_sharded_zarr_through_the_server(sharded: tuple[Path, np.ndarray]) -> None:
    root, data = sharded
    with Server(root, port=0) as s:
        b = shardstore.open(s.url + "em.zarr")
        np.testing.assert_array_equal(b[...], data)
        np.testing.assert_array_equal(b[3:20, 5, 7:50], data[3:20, 5, 7:50])


def test_tensorstore_reads_sharded_zarr_through_the_server(sharded: tuple[Path, np.ndarray]) -> None:
    ts = pytest.importorskip("tensorstore")
    root, data = sharded
    with Server(root, port=0) as s:
        t = ts.open({"driver": "zarr3", "kvstore": s.url + "em.zarr/"}).result()
        np.testing.assert_array_equal(t[2:30, :, 10:20].read().result(), data[2:30, :, 10:20])


def test_start_fails_cleanly_on_a_taken_port(tree: Path, server: Server) -> None:
    with pytest.raises(shardstore.StoreError, match=f"127.0.0.1:{server.port}"):
        Server(tree, port=server.port).start()


def test_missing_root_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(shardstore.ShardStoreError, match="nothing-here"):
        Server(tmp_path / "nothing-here", port=0)


# -- over S3 -----------------------------------------------------------------------------------
def test_serve_s3(seaweedfs: SeaweedFS) -> None:
    prefix = f"serve-{uuid.uuid4().hex[:8]}"
    options = seaweedfs.storage_options()
    data = np.arange(32 * 32 * 32, dtype=np.uint16).reshape(32, 32, 32)
    a = shardstore.zarr3.create(seaweedfs.url(prefix + "/vol.zarr"), shape=data.shape, dtype="uint16",
                                chunks=(8, 8, 8), shards=(16, 16, 16), mode="w", storage_options=options)
    a[...] = data
    with Server(seaweedfs.url(prefix), port=0, storage_options=options) as s:
        found = [(d.path, src) for d, src in s.sources()]
        assert found == [("vol.zarr", f"zarr3://{s.url}vol.zarr/")]
        status, h, body = request(s, "GET", "/vol.zarr/zarr.json")
        assert status == 200 and h["content-type"] == "application/json"
        assert json.loads(body)["shape"] == [32, 32, 32]
        status, h, whole = request(s, "GET", "/vol.zarr/c/1/0/1")
        size = len(whole)
        assert status == 200 and h["content-length"] == str(size) and h["etag"]
        status, h, tail = request(s, "GET", "/vol.zarr/c/1/0/1", {"Range": "bytes=-20"})
        assert (status, tail, h["content-range"]) == (206, whole[-20:], f"bytes {size - 20}-{size - 1}/{size}")
        status, h, mid = request(s, "GET", "/vol.zarr/c/1/0/1", {"Range": "bytes=5-14"})
        assert (status, mid, h["content-range"]) == (206, whole[5:15], f"bytes 5-14/{size}")
        status, h, rest = request(s, "GET", "/vol.zarr/c/1/0/1", {"Range": f"bytes={size - 3}-"})
        assert (status, rest) == (206, whole[-3:])
        status, h, _ = request(s, "GET", "/vol.zarr/c/1/0/1", {"Range": f"bytes={size}-"})
        assert (status, h["content-range"]) == (416, f"bytes */{size}")
        status, h, body = request(s, "HEAD", "/vol.zarr/c/1/0/1")
        assert (status, body, h["content-length"]) == (200, b"", str(size))
        assert request(s, "GET", "/vol.zarr/c/9/9/9")[0] == 404
        assert request(s, "GET", "/../secret")[0] == 404
        assert request(s, "PUT", "/vol.zarr/zarr.json", body=b"{}")[0] == 405
        # and a real reader of sharded data through the server
        np.testing.assert_array_equal(shardstore.open(s.url + "vol.zarr")[...], data)
        # long bodies: streamed in ranged pieces (thresholds shrunk so a shard takes that path)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(s.source, "stream_threshold", 16)
            mp.setattr(s.source, "stream_block", 7)
            assert request(s, "GET", "/vol.zarr/c/1/0/1")[2] == whole
            status, h, body = request(s, "GET", "/vol.zarr/c/1/0/1", {"Range": "bytes=2-"})
            assert (status, body, h["content-range"]) == (206, whole[2:], f"bytes 2-{size - 1}/{size}")
            status, _, body = request(s, "GET", "/vol.zarr/c/1/0/1", {"Range": "bytes=-30"})
            assert (status, body) == (206, whole[-30:])


# -- over HTTP ---------------------------------------------------------------------------------
def test_serve_http_upstream(nginx: Nginx) -> None:
    """An http:// location (here nginx) re-served with CORS; plain HTTP cannot list, so only
    the root itself is looked at for a dataset."""
    name = f"up-{uuid.uuid4().hex[:8]}"
    data = np.arange(24 * 24, dtype=np.uint8).reshape(24, 24)
    a = shardstore.zarr3.create(nginx.root / name, shape=data.shape, dtype="uint8", chunks=(8, 8),
                                shards=(24, 24), mode="w")
    a[...] = data
    whole = (nginx.root / name / "c" / "0" / "0").read_bytes()
    with Server(f"{nginx.url.rstrip('/')}/{name}", port=0) as s:
        assert [(d.path, src) for d, src in s.sources()] == [("", f"zarr3://{s.url}")]
        status, h, tail = request(s, "GET", "/c/0/0", {"Range": "bytes=-16"})
        assert (status, tail, h["access-control-allow-origin"]) == (206, whole[-16:], "*")
        assert h["content-range"] == f"bytes {len(whole) - 16}-{len(whole) - 1}/{len(whole)}"
        assert request(s, "GET", "/c/9/9")[0] == 404
        np.testing.assert_array_equal(shardstore.open(s.url)[...], data)


def test_index_page_lists_sources(sharded: tuple[Path, np.ndarray]) -> None:
    with Server(sharded[0], port=0) as s:
        status, h, body = request(s, "GET", "/")
    assert status == 200 and h["content-type"].startswith("text/html")
    assert f"zarr3://{s.url}em.zarr/" in body.decode()


# -- the command line --------------------------------------------------------------------------
def _start_cli(args: list[str], tmp_path: Path) -> tuple[subprocess.Popen[str], list[str]]:
    """Run ``shardstore ARGS``; return it and its output up to the "Ctrl-C stops" line."""
    # (PYTHONFAULTHANDLER: a child that does not stop dumps every thread's stack on SIGABRT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "PYTHONFAULTHANDLER": "1"}
    # (a suite started as a background job of a shell starts with SIGINT ignored, and so would
    # the child: Python keeps an ignored SIGINT ignored. The child takes Ctrl-C back, as
    # ``shardstore serve`` run from a terminal has it)
    start = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
             "sys.argv[0] = 'shardstore'; runpy.run_module('shardstore', run_name='__main__', alter_sys=True)")
    proc = subprocess.Popen([sys.executable, "-c", start, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, env=env, cwd=tmp_path)
    lines: list[str] = []
    assert proc.stdout is not None
    timer = threading.Timer(60, proc.kill)  # never hang the run on a server that did not start
    timer.start()
    try:
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if "stops the server" in line:
                break
    finally:
        timer.cancel()
    return proc, lines


def _stop_cli(proc: subprocess.Popen[str]) -> None:
    """Ctrl-C the child; one that has not ended 10 s later fails the test with the stacks of
    its threads (the child of a suite run as a background job once ignored Ctrl-C: see
    ``_start_cli``)."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)  # (the fault handler writes the stacks to its output)
        try:
            rest, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            rest, _ = proc.communicate()
        pytest.fail(f"shardstore {proc.args[3:]} did not stop within 10 s of Ctrl-C; its last output:\n{rest[-6000:]}")


def test_cli_serve_prints_url_and_sources(sharded: tuple[Path, np.ndarray], tmp_path: Path) -> None:
    root, _ = sharded
    proc, lines = _start_cli(["serve", str(root), "--port", "0"], tmp_path)
    try:
        text = "\n".join(lines)
        m = re.search(r"at (http://127\.0\.0\.1:(\d+)/)", text)
        assert m, text
        url = m.group(1)
        assert f"zarr3://{url}em.zarr/" in text
        conn = http.client.HTTPConnection("127.0.0.1", int(m.group(2)), timeout=10)
        conn.request("GET", "/em.zarr/zarr.json", headers={"Range": "bytes=0-9"})
        r = conn.getresponse()
        assert r.status == 206 and len(r.read()) == 10
        conn.close()
    finally:
        _stop_cli(proc)
    assert proc.returncode in (0, 130)


def test_cli_view_serves_client_and_prints_link(sharded: tuple[Path, np.ndarray], tmp_path: Path) -> None:
    from urllib.parse import unquote, urlsplit

    root, _ = sharded
    proc, lines = _start_cli(["view", str(root), "--port", "0", "--no-browser"], tmp_path)
    try:
        links = [line for line in lines if "/v/ng/#!" in line]
        assert len(links) == 1, lines
        parts = urlsplit(links[0])
        state: dict[str, Any] = json.loads(unquote(parts.fragment[1:]))
        base = f"{parts.scheme}://{parts.netloc}/"
        assert [(ly["type"], ly["source"]) for ly in state["layers"]] == [("image", f"zarr3://{base}em.zarr/")]
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
        conn.request("GET", "/v/ng/")
        r = conn.getresponse()
        page = r.read().decode()
        assert r.status == 200 and r.getheader("Content-Type").startswith("text/html") and "<script" in page
        wasm = re.findall(r'src="([^"]+\.js)"', page)
        assert wasm, page
        conn.request("GET", "/v/ng/" + wasm[0])
        r = conn.getresponse()
        assert r.status == 200 and r.getheader("Content-Type") == "text/javascript" and r.read()
        conn.close()
    finally:
        _stop_cli(proc)


def test_cli_view_with_another_client(sharded: tuple[Path, np.ndarray], tmp_path: Path) -> None:
    from urllib.parse import unquote, urlsplit

    root, _ = sharded
    proc, lines = _start_cli(["view", str(root), "--port", "0", "--no-browser",
                              "--neuroglancer-url", "https://neuroglancer.example.org/"], tmp_path)
    try:
        (link,) = [line for line in lines if "#!" in line]
        assert link.startswith("https://neuroglancer.example.org/#!")
        state = json.loads(unquote(urlsplit(link).fragment[1:]))
        source = state["layers"][0]["source"]
        port = int(re.search(r"127\.0\.0\.1:(\d+)/", source).group(1))  # type: ignore[union-attr]
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/v/ng/")  # no bundled client served
        assert conn.getresponse().status == 404
        conn.close()
    finally:
        _stop_cli(proc)
