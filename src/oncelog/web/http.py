"""The broker's HTTP listener (`http.listener=HOST:PORT`): Prometheus metrics at
`/metrics`, the console at `/`, its data at `/api/console`.

A threaded WSGI server (the standard library's, as prometheus_client's own endpoint
uses) on threads of its own: a request never runs on the broker's event loop. What it
shows of the broker comes from `ConsoleSource`, which asks the loop for a copy; the page
and its scripts are static files of this package (no build step; uPlot, vendored, draws
the charts). Read-only: every route answers GET and HEAD only.
"""

from __future__ import annotations

import json
import logging
import mimetypes
import threading
from collections.abc import Callable, Iterable
from importlib import resources
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.registry import CollectorRegistry

log = logging.getLogger("oncelog.web")

# The console's data, as JSON-able values (built on the loop; may raise TimeoutError).
ConsoleSource = Callable[[], dict[str, Any]]
StartResponse = Callable[..., Any]

_STATIC = resources.files("oncelog.web") / "static"
_SECURITY_HEADERS = [
    ("X-Content-Type-Options", "nosniff"),
    ("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'"),
    ("Referrer-Policy", "no-referrer"),
]


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)


class ConsoleApp:
    """The WSGI application: routes by path."""

    def __init__(self, registry: CollectorRegistry, console: ConsoleSource) -> None:
        self._metrics = make_wsgi_app(registry)
        self._console = console

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        path = environ.get("PATH_INFO", "/")
        if method not in ("GET", "HEAD"):
            return _answer(start_response, "405 Method Not Allowed", b"read-only: GET only\n", "text/plain",
                           [("Allow", "GET, HEAD")])
        if path == "/metrics":
            return self._metrics(environ, start_response)
        if path == "/api/console":
            try:
                body = json.dumps(self._console(), separators=(",", ":")).encode()
            except TimeoutError:
                return _answer(start_response, "503 Service Unavailable",
                               b'{"error": "the broker did not answer in time"}', "application/json")
            except Exception:
                log.exception("the console's view failed")
                return _answer(start_response, "500 Internal Server Error",
                               b'{"error": "the console failed; see the broker log"}', "application/json")
            return _answer(start_response, "200 OK", body, "application/json", [("Cache-Control", "no-store")])
        if path in ("/", "/index.html"):
            return self._static(start_response, "index.html")
        if path.startswith("/static/"):
            return self._static(start_response, path.removeprefix("/static/"))
        return _answer(start_response, "404 Not Found", b"not found\n", "text/plain")

    @staticmethod
    def _static(start_response: StartResponse, name: str) -> Iterable[bytes]:
        parts = name.split("/")
        if any(part in ("", ".", "..") for part in parts):
            return _answer(start_response, "404 Not Found", b"not found\n", "text/plain")
        resource = _STATIC.joinpath(*parts)
        if not resource.is_file():
            return _answer(start_response, "404 Not Found", b"not found\n", "text/plain")
        content_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
        if content_type.startswith("text/") or content_type.endswith("javascript"):
            content_type += "; charset=utf-8"
        return _answer(start_response, "200 OK", resource.read_bytes(), content_type,
                       [("Cache-Control", "max-age=300")])


def _answer(start_response: StartResponse, status: str, body: bytes, content_type: str,
            headers: list[tuple[str, str]] | None = None) -> list[bytes]:
    start_response(status, [("Content-Type", content_type), ("Content-Length", str(len(body))),
                            *_SECURITY_HEADERS, *(headers or [])])
    return [body]


class HttpListener:
    """The server on its own thread; `address` once started."""

    def __init__(self, host: str, port: int, app: ConsoleApp) -> None:
        self._host, self._port = host, port
        self._app = app
        self._server: WSGIServer | None = None
        self.address: tuple[str, int] | None = None

    def start(self) -> tuple[str, int]:
        self._server = make_server(self._host, self._port, self._app, _ThreadingServer, handler_class=_QuietHandler)
        threading.Thread(target=self._server.serve_forever, name="oncelog-http", daemon=True).start()
        self.address = (self._host, self._server.server_port)
        log.info("metrics at http://%s:%d/metrics, the console at http://%s:%d/", *self.address, *self.address)
        return self.address

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
