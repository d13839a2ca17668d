"""Hostile remote servers: a local server that misbehaves on purpose, read through shardstore's
HTTP store (and its S3 store, which shares the request code).

Each misbehaviour - 200 with the whole body to a range request, a wrong ``Content-Range``, a
body longer or shorter than asked, a multi-gigabyte ``Content-Length``, a stall mid-body, a
stall before the headers - gives a correct result or a ``StoreError`` naming the key, within
the configured timeout, and without memory growing with what the server claims.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from _servers import FaultyServer

from shardstore._aio import run_inline
from shardstore._sync import sync
from shardstore.errors import StoreError
from shardstore.store import RangeBR, store_from_url
from shardstore.store.base import SuffixBR

pytest_plugins = ["_net_audit"]
pytestmark = pytest.mark.timeout(120)

VALUE = bytes(range(256)) * 64  # 16 KiB
KEY = "dir/v"
GIB = 1 << 30


class HostileServer(FaultyServer):
    """HTTP/1.1 on 127.0.0.1; ``mode`` decides how every GET with a Range is answered.

    Modes: ``ok``; ``whole`` (200 + whole body); ``wrong-range`` (206, Content-Range shifted,
    the shifted bytes); ``longer`` / ``shorter`` (206 with the right Content-Range but 16 bytes
    more / fewer of body, Content-Length to match); ``huge`` (206 / 200 announcing 8 GiB, 64 KiB
    sent, then the connection closes); ``huge-stall`` (the same, then silence);
    ``stall-body`` (half the body, then silence); ``stall-head`` (no answer at all).
    HEAD requests are answered correctly (a client may ask for the size).
    """

    def __init__(self) -> None:
        self.mode = "ok"
        super().__init__()

    @property
    def requests(self) -> int:
        return sum(self.hits.values())

    def _answer(self, conn: socket.socket, method: str, path: str, headers: dict[str, str]) -> bool:
        return self._hostile(conn, method, path, headers.get("range"))

    def _stall(self) -> bool:
        self._closing.wait(60)
        return False

    def _hostile(self, conn: socket.socket, method: str, path: str, rng: str | None) -> bool:
        # an S3 client asks for /bucket/dir/v: serve the value under any path ending in the key
        if not path.endswith(KEY):
            conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            return True
        size, mode = len(VALUE), self.mode
        base = "ETag: \"e1\"\r\nLast-Modified: Mon, 01 Jan 2024 00:00:00 GMT\r\nAccept-Ranges: bytes\r\n"
        if method == "HEAD":
            conn.sendall(f"HTTP/1.1 200 OK\r\n{base}Content-Length: {size}\r\n\r\n".encode())
            return True
        if mode == "stall-head":
            return self._stall()
        start, end = 0, size
        if rng:
            first, _, last = rng.removeprefix("bytes=").partition("-")
            start, end = (size - int(last), size) if first == "" else (int(first), min(int(last) + 1, size) if last else size)
        body = VALUE[start:end]
        status, content_range = "206 Partial Content", f"bytes {start}-{end - 1}/{size}"
        if mode == "whole" or not rng:
            status, content_range, body = "200 OK", "", VALUE
        elif mode == "wrong-range":
            content_range, body = f"bytes {start + 8}-{end + 7}/{size}", VALUE[start + 8 : end + 8]
        elif mode == "longer":
            body = VALUE[start : end + 16] if end + 16 <= size else body + b"\0" * 16
        elif mode == "shorter":
            body = body[:-16]
        if mode in ("huge", "huge-stall"):
            announced = 8 * GIB
            cr = f"Content-Range: bytes {start}-{start + announced - 1}/{start + announced}\r\n" if rng else ""
            conn.sendall(f"HTTP/1.1 {'206 Partial Content' if rng else '200 OK'}\r\n{base}{cr}"
                         f"Content-Length: {announced}\r\n\r\n".encode() + bytes(64 << 10))
            return self._stall() if mode == "huge-stall" else False
        cr = f"Content-Range: {content_range}\r\n" if content_range else ""
        head = f"HTTP/1.1 {status}\r\n{base}{cr}Content-Length: {len(body)}\r\n\r\n".encode()
        if mode == "stall-body":
            conn.sendall(head + body[: len(body) // 2])
            return self._stall()
        conn.sendall(head + body)
        return True


@pytest.fixture
def server() -> Iterator[HostileServer]:
    s = HostileServer()
    try:
        yield s
    finally:
        s.close()


OPTIONS = {"timeout": 0.6, "connect_timeout": 0.5, "max_retries": 1, "retry_timeout": 5, "body_retries": 1}
#: (1 + body_retries) * (1 + max_retries) * timeout, plus backoff and scheduling slack
BOUND = 2 * 2 * 0.6 + 3.0


def _http(server: HostileServer) -> object:
    return store_from_url(server.url, mode="r", storage_options=OPTIONS)


def _s3(server: HostileServer) -> object:
    return store_from_url("s3://bucket", mode="r",
                          storage_options={"endpoint": server.url, "anonymous": True, **OPTIONS})


STORES = {"http": _http, "s3": _s3}
#: a whole body bigger than asked is refused (not cut to size: a server that ignores ranges
#: would make every chunk read cost the whole object)
BAD = ["whole", "wrong-range", "longer", "shorter", "huge", "huge-stall", "stall-body", "stall-head"]


@pytest.mark.parametrize("backend", sorted(STORES))
def test_control_correct_server(server: HostileServer, backend: str) -> None:
    store = STORES[backend](server)
    assert sync(store.get(KEY, RangeBR(100, 1100))) == VALUE[100:1100]
    assert sync(store.get(KEY, SuffixBR(300))) == VALUE[-300:]
    assert sync(store.get(KEY)) == VALUE


#: how a read's coroutine runs: on an event loop (``sync``), or with obstore's blocking calls
#: and no loop (``run_inline``: a blocking read of one chunk, ``Store.reads_inline``)
RUNNERS = {"loop": sync, "inline": run_inline}


@pytest.mark.parametrize("backend", sorted(STORES))
@pytest.mark.parametrize("mode", BAD)
@pytest.mark.parametrize("byte_range", [RangeBR(100, 1100), SuffixBR(300)], ids=["range", "suffix"])
@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_hostile_reply_is_a_clear_error_in_time(
    server: HostileServer, backend: str, mode: str, byte_range: object, runner: str
) -> None:
    store = STORES[backend](server)
    server.mode = mode
    want = VALUE[100:1100] if isinstance(byte_range, RangeBR) else VALUE[-300:]
    t0 = time.monotonic()
    try:
        got = RUNNERS[runner](store.get(KEY, byte_range))
    except StoreError as e:
        assert KEY in str(e), str(e)
    else:
        assert got == want, f"{mode}: wrong data returned"  # a correct result is fine too
    # every attempt is bounded by the request timeout; retries (1 + body retries) are bounded too
    assert time.monotonic() - t0 < BOUND, f"{mode} took {time.monotonic() - t0:.1f} s"


@pytest.mark.parametrize("mode", ["huge", "huge-stall", "stall-body"])
def test_whole_value_reads_are_bounded_too(server: HostileServer, mode: str) -> None:
    """A metadata read (no range) of a reply that claims 8 GiB or stalls."""
    store = _http(server)
    server.mode = mode
    t0 = time.monotonic()
    with pytest.raises(StoreError, match=KEY):
        sync(store.get(KEY))
    assert time.monotonic() - t0 < BOUND


class _Interrupted(BaseException):
    """What Ctrl-C raises here (a BaseException, as KeyboardInterrupt: no handler takes it)."""


@pytest.mark.parametrize("backend", sorted(STORES))
def test_ctrl_c_interrupts_a_blocking_read_from_a_stalled_server(server: HostileServer, backend: str) -> None:
    """A read without an event loop (obstore's blocking calls, which return only with their
    request) still gives way to Ctrl-C at once on the main thread, not after the timeouts."""
    assert threading.current_thread() is threading.main_thread()
    patient = {**OPTIONS, "timeout": 30, "max_retries": 0}
    store = (store_from_url(server.url, mode="r", storage_options=patient) if backend == "http" else
             store_from_url("s3://bucket", mode="r", storage_options={"endpoint": server.url, "anonymous": True, **patient}))
    server.mode = "stall-head"

    def interrupted(signum: int, frame: object) -> None:
        raise _Interrupted

    previous = signal.signal(signal.SIGINT, interrupted)
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    t0 = time.monotonic()
    try:
        timer.start()
        with pytest.raises(_Interrupted):
            run_inline(store.get(KEY, RangeBR(100, 1100)))
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - t0 < 5


_RSS_PROBE = r'''
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from test_hostile_http import HostileServer, KEY, OPTIONS
from shardstore._aio import run_inline
from shardstore._sync import sync
from shardstore.store import RangeBR, store_from_url
s = HostileServer(); s.mode = sys.argv[2]
store = store_from_url(s.url, mode="r", storage_options=OPTIONS)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
for br in (RangeBR(100, 1100), None):
    try:
        sync(store.get(KEY, br))
    except Exception as e:
        pass
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"before_kib": before, "after_kib": after}), flush=True)
s.close()
# the figure is out: skip interpreter shutdown, which under load once aborted (SIGABRT) with
# the stalled server's threads still blocked (the measurement does not depend on it)
import os; os._exit(0)
'''


@pytest.mark.parametrize("mode", ["huge", "huge-stall"])
def test_multi_gigabyte_content_length_does_not_allocate(mode: str) -> None:
    """Peak RSS of a process reading from a server that announces 8 GiB (and sends 64 KiB)."""
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", _RSS_PROBE, str(Path(__file__).parent), mode], capture_output=True,
                       text=True, timeout=90, env=env, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    grew_mib = (got["after_kib"] - got["before_kib"]) / 1024
    print(f"{mode}: peak RSS {got['after_kib'] / 1024:.0f} MiB, grew {grew_mib:.1f} MiB during the hostile reads")
    assert grew_mib < 64, got
