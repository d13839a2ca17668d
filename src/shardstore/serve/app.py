"""The read-only HTTP server (aiohttp): data under ``/``, optionally the Neuroglancer client
under ``/v/ng/``.

Answers GET and HEAD with single byte ranges (206 / 416), CORS for any origin (with the
preflight a ``Range`` header needs), 404 for missing keys and anything that would leave the
root, 405 for every other method. Each request is its own task and local reads run in the
I/O thread pool, so the dozens of concurrent range requests of a Neuroglancer tab are served
in parallel.
"""

from __future__ import annotations

import asyncio
import html
import os
import threading
from collections.abc import Callable, Mapping
from email.utils import format_datetime
from pathlib import Path
from typing import Any, Self

from aiohttp import web

from ..config import IOConfig, default_config
from ..errors import InvalidKeyError, ShardStoreError, StoreError
from ..store.base import Store
from .discover import Dataset, find_datasets
from .keys import key_from_path
from .ranges import Unsatisfiable, content_range, parse_range
from .source import Blob, LocalSource, ReadMore, Source, open_source

__all__ = ["CLIENT_MOUNT", "Server", "content_type", "make_app", "neuroglancer_client_dir"]

#: where ``view`` serves the Neuroglancer client
CLIENT_MOUNT = "/v/ng/"
#: where the client bundled in the ``neuroglancer`` package looks for its Python server (its
#: token is the path segment after ``/v/``); answered only when the client is served
_CLIENT_API = tuple(f"/{name}/ng" for name in ("events", "state", "action", "socket", "volume_response", "credentials"))
CORS_HEADERS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Expose-Headers": "Content-Range, Content-Length, Accept-Ranges, ETag",
}
_PREFLIGHT = {
    **CORS_HEADERS,
    "Access-Control-Allow-Methods": "GET, HEAD, OPTIONS",
    "Access-Control-Allow-Headers": "Range, If-None-Match, If-Match, Cache-Control",
    "Access-Control-Max-Age": "86400",
}
_ALLOW = "GET, HEAD, OPTIONS"
#: metadata documents of the formats (JSON without a .json suffix included)
_JSON_NAMES = {"zarr.json", "info", "attributes.json", ".zarray", ".zgroup", ".zattrs", "transform", "provenance"}
_TYPES = {".json": "application/json", ".js": "text/javascript", ".mjs": "text/javascript",
          ".wasm": "application/wasm", ".css": "text/css", ".html": "text/html; charset=utf-8",
          ".map": "application/json", ".svg": "image/svg+xml", ".png": "image/png"}


def content_type(key: str) -> str:
    name = key.rsplit("/", 1)[-1]
    if name in _JSON_NAMES:
        return "application/json"
    return _TYPES.get(os.path.splitext(name)[1].lower(), "application/octet-stream")


def neuroglancer_client_dir() -> Path:
    """The static Neuroglancer client bundled in the ``neuroglancer`` package."""
    try:
        import neuroglancer
    except ImportError as e:
        raise ShardStoreError(
            "the Neuroglancer client comes from the `neuroglancer` package: pip install neuroglancer "
            "(or pass --neuroglancer-url to use another client)") from e
    path = Path(neuroglancer.__file__).parent / "static" / "client"
    if not (path / "index.html").is_file():
        raise ShardStoreError(f"no Neuroglancer client in {str(path)!r} (index.html missing)")
    return path


async def _answer(request: web.Request, source: Source, key: str) -> web.StreamResponse:
    head = request.method == "HEAD"
    try:
        byte_range = parse_range(request.headers.get("Range"))
        blob = await source.read(key, byte_range, head=head)
    except Unsatisfiable as e:
        return web.Response(status=416, headers={**CORS_HEADERS, "Content-Range": f"bytes */{e.size}",
                                                 "Accept-Ranges": "bytes"})
    except StoreError as e:
        return web.Response(status=502, text=f"{e}\n", headers=CORS_HEADERS)
    if blob is None:
        return web.Response(status=404, text=f"not found: {key}\n", headers=CORS_HEADERS)
    headers = {**CORS_HEADERS, "Accept-Ranges": "bytes", "Content-Type": content_type(key),
               "Cache-Control": "no-cache"}
    if blob.etag:
        headers["ETag"] = blob.etag
    if blob.modified is not None:
        headers["Last-Modified"] = format_datetime(blob.modified, usegmt=True)
    status = 200
    if byte_range is not None:
        status = 206
        headers["Content-Range"] = content_range(blob.start, blob.end, blob.size)
    length = blob.end - blob.start
    if blob.read_more is not None and not head:
        return await _stream(request, blob, blob.read_more, status, headers, source.stream_block)
    if head:
        response = web.StreamResponse(status=status, headers=headers)
        response.content_length = length
        return response
    return web.Response(status=status, body=blob.data, headers=headers)


async def _stream(
    request: web.Request, blob: Blob, read_more: ReadMore, status: int, headers: dict[str, str], block: int
) -> web.StreamResponse:
    """Send a long body in pieces of ``block`` bytes (bounded memory per request)."""
    response = web.StreamResponse(status=status, headers=headers)
    response.content_length = blob.end - blob.start
    try:
        await response.prepare(request)
        pos = blob.start
        while pos < blob.end:
            step = min(block, blob.end - pos)
            await response.write(await read_more(pos, pos + step))
            pos += step
        await response.write_eof()
    finally:
        if blob.close is not None:
            blob.close()
    return response


async def _python_events(request: web.Request) -> web.StreamResponse:
    """An event stream that stays open and sends nothing: the client bundled in the
    ``neuroglancer`` package expects its Python server's ``/events/<token>`` stream and shows
    "Disconnected from Python server" without one. The viewer state stays the link's."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    while True:
        await asyncio.sleep(15)
        await response.write(b": keep-alive\n\n")


def make_app(
    source: Source, *, client: Source | None = None, index: Callable[[], str] | None = None
) -> web.Application:
    """The aiohttp application serving ``source`` (and ``client`` under ``CLIENT_MOUNT``)."""

    async def handle(request: web.Request) -> web.StreamResponse:
        if request.method == "OPTIONS":
            return web.Response(status=204, headers=_PREFLIGHT)
        if client is not None and request.raw_path.split("?", 1)[0] in _CLIENT_API:
            if request.method == "GET" and request.raw_path.startswith("/events/"):
                return await _python_events(request)
            # the client's state and action notifications: 412 makes it keep its own state
            return web.Response(status=412 if "/state/" in request.raw_path else 204)
        if request.method not in ("GET", "HEAD"):
            return web.Response(status=405, text="read-only server\n", headers={**CORS_HEADERS, "Allow": _ALLOW})
        raw = request.raw_path
        if raw.split("?", 1)[0] == "/" and index is not None:
            return web.Response(text=index(), content_type="text/html", headers=CORS_HEADERS)
        mounted, mount = source, "/"
        if client is not None and raw.startswith(CLIENT_MOUNT):
            mounted, mount = client, CLIENT_MOUNT
            if raw.split("?", 1)[0] == CLIENT_MOUNT:
                raw = CLIENT_MOUNT + "index.html"
        try:
            key = key_from_path(raw, mount)
        except (InvalidKeyError, UnicodeDecodeError):
            return web.Response(status=404, text="not found\n", headers=CORS_HEADERS)
        return await _answer(request, mounted, key)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


def _index_page(where: str, base_url: str, datasets: list[Dataset]) -> str:
    rows = []
    for d in datasets:
        src = d.source(base_url)
        shown = html.escape(src) if src else "(not viewable in Neuroglancer)"
        rows.append(f"<li><code>{html.escape(d.path or '.')}</code> [{d.format} {d.dtype}]: <code>{shown}</code></li>")
    return (f"<!doctype html><title>shardstore serve</title><h1>{html.escape(where)}</h1>"
            f"<ul>{''.join(rows) or '<li>no datasets found</li>'}</ul>")


class Server:
    """``shardstore serve`` as an object: serves ``location`` read-only on ``bind:port``.

    ``location``: a local directory, an ``s3://`` / ``http(s)://`` URL (``storage_options``
    configure its store) or a ``Store``. ``port=0`` picks a free port. ``client=True`` also
    serves the bundled Neuroglancer client under ``/v/ng/``. ``start()`` runs the server in a
    background thread (``stop()`` ends it; also a context manager); ``serve_forever()`` blocks.
    ``config`` (an ``IOConfig``) sets the streaming and discovery limits.
    """

    def __init__(
        self,
        location: str | os.PathLike[str] | Store,
        *,
        port: int = 8000,
        bind: str = "127.0.0.1",
        storage_options: Mapping[str, Any] | None = None,
        client: bool = False,
        max_depth: int = 4,
        config: IOConfig | None = None,
    ) -> None:
        self.config = default_config(config)
        self.source = open_source(location, storage_options, self.config)
        self.bind = bind
        self.port = int(port)
        self._client = LocalSource(neuroglancer_client_dir()) if client else None
        self._max_depth = max_depth
        self._datasets: list[Dataset] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        """The base URL of the data (``http://127.0.0.1:PORT/``)."""
        host = "127.0.0.1" if self.bind in ("", "0.0.0.0") else ("[::1]" if self.bind == "::" else self.bind)
        host = f"[{host}]" if ":" in host and not host.startswith("[") else host
        return f"http://{host}:{self.port}/"

    @property
    def client_url(self) -> str:
        return self.url.rstrip("/") + CLIENT_MOUNT

    @property
    def datasets(self) -> list[Dataset]:
        """The datasets found below the root (walked once, on first use)."""
        if self._datasets is None:
            self._datasets = find_datasets(self.source, self._max_depth,
                                           max_listed_keys=self.config.discover_max_listed_keys,
                                           max_dirs=self.config.discover_max_dirs)
        return self._datasets

    def sources(self) -> list[tuple[Dataset, str | None]]:
        """Each dataset with its Neuroglancer source string (None: not viewable)."""
        return [(d, d.source(self.url)) for d in self.datasets]

    async def _start(self) -> None:
        app = make_app(self.source, client=self._client,
                       index=lambda: _index_page(self.source.where, self.url, self.datasets))
        # a short shutdown: the client's idle event streams must not hold up stop()
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, self.bind, self.port, backlog=256)
        try:
            await site.start()
        except OSError as e:
            await runner.cleanup()
            raise StoreError(f"cannot listen on {self.bind}:{self.port}: {e.strerror or e}") from e
        self._runner = runner
        server = site._server
        if server is not None and self.port == 0:
            self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    def start(self) -> Self:
        """Start serving in a background thread; returns once the socket listens."""
        if self._thread is not None:
            return self
        _ = self.datasets  # walk the root here, in the caller's thread, not in the server's loop
        ready = threading.Event()
        failure: list[BaseException] = []
        loop = asyncio.new_event_loop()

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._start())
            except BaseException as e:  # noqa: BLE001 - re-raised in start()'s caller
                failure.append(e)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            if self._runner is not None:
                loop.run_until_complete(self._runner.cleanup())
            # what the shutdown left (idle event streams): cancel and wait, then close
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="shardstore-serve", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            self._thread = None
            raise failure[0]
        return self

    def stop(self) -> None:
        """Stop serving and wait for the thread to end."""
        if self._thread is None or self._loop is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._thread = None

    def serve_forever(self) -> None:
        """Serve until interrupted (Ctrl-C)."""
        self.start()
        try:
            while self._thread is not None and self._thread.is_alive():
                self._thread.join(0.5)
        finally:
            self.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
