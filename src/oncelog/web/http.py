"""The broker's HTTP listener (`http.listener=HOST:PORT`): Prometheus metrics at
`/metrics`, the console at `/`, its data at `/api/console`.

A threaded WSGI server (the standard library's, as prometheus_client's own endpoint
uses) on threads of its own: a request never runs on the broker's event loop. What it
shows of the broker comes from a `ConsoleBackend`, which asks the loop for a copy; the
page and its scripts are static files of this package (no build step; uPlot, vendored,
draws the charts).

Read-only, but for one action when the broker has an authorizer: an operator who signs
in (HTTP Basic credentials of a SCRAM or PLAIN user, checked by the backend; the page
asks for them, the browser never stores them) and holds Cluster ALTER may abort an open
transaction: `POST /api/transactions/abort` with `{"transactional_id": ...}`. That POST
must carry the `X-Oncelog-Console` header, which a page of another site cannot send
without this server's consent (CORS, which it never gives): no cross-site request
forgery. The listener is plain HTTP: bind it to loopback, or put TLS in front of it,
before anyone signs in over a network.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import mimetypes
import threading
from collections.abc import Callable, Iterable
from importlib import resources
from socketserver import ThreadingMixIn
from typing import Any, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.registry import CollectorRegistry

log = logging.getLogger("oncelog.web")

StartResponse = Callable[..., Any]
CSRF_HEADER = "HTTP_X_ONCELOG_CONSOLE"  # X-Oncelog-Console, as WSGI names it
MAX_BODY_BYTES = 4096


class ConsoleBackend(Protocol):
    """What the console asks of the broker (each call may raise TimeoutError)."""

    def __call__(self) -> dict[str, Any]: ...  # the console's data, as JSON-able values
    @property
    def sign_in_enabled(self) -> bool: ...
    def authenticate(self, user: str, password: str) -> str | None: ...  # the principal, or None
    def may_abort(self, principal: str, host: str) -> bool: ...
    def abort(self, principal: str, host: str, transactional_id: str) -> tuple[int, str]: ...

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

    def __init__(self, registry: CollectorRegistry, console: ConsoleBackend) -> None:
        self._metrics = make_wsgi_app(registry)
        self._console = console

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        path = environ.get("PATH_INFO", "/")
        try:
            if method == "POST" and path == "/api/transactions/abort":
                return self._abort(environ, start_response)
            if method not in ("GET", "HEAD"):
                return _answer(start_response, "405 Method Not Allowed", b"read-only: GET only\n", "text/plain",
                               [("Allow", "GET, HEAD")])
            if path == "/metrics":
                return self._metrics(environ, start_response)
            if path == "/api/console":
                view = self._console()
                view["actions"] = {"sign_in": self._console.sign_in_enabled}
                return _json(start_response, 200, view)
            if path == "/api/session":
                return self._session(environ, start_response)
        except TimeoutError:
            return _json(start_response, 503, {"error": "the broker did not answer in time"})
        except Exception:
            log.exception("the console's request %s %s failed", method, path)
            return _json(start_response, 500, {"error": "the console failed; see the broker log"})
        return self._static_route(path, start_response)

    def _session(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        """Who the credentials are, and whether they may abort transactions."""
        principal = self._principal(environ)
        if principal is None:
            return _json(start_response, 401, {"error": "wrong user name or password"})
        may_abort = self._console.may_abort(principal, environ.get("REMOTE_ADDR", ""))
        return _json(start_response, 200, {"principal": principal, "may_abort": may_abort})

    def _abort(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get(CSRF_HEADER) != "1":
            return _json(start_response, 403, {"error": "the X-Oncelog-Console header is missing"})
        principal = self._principal(environ)
        if principal is None:
            return _json(start_response, 401, {"error": "sign in first"})
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
            if not 0 < length <= MAX_BODY_BYTES:
                raise ValueError
            body = json.loads(environ["wsgi.input"].read(length))
            transactional_id = body["transactional_id"]
            if not isinstance(transactional_id, str):
                raise ValueError
        except (ValueError, KeyError, TypeError):
            return _json(start_response, 400, {"error": 'expected {"transactional_id": "..."}'})
        status, message = self._console.abort(principal, environ.get("REMOTE_ADDR", ""), transactional_id)
        return _json(start_response, status, {"message": message} if status == 200 else {"error": message})

    def _principal(self, environ: dict[str, Any]) -> str | None:
        """The principal of the request's HTTP Basic credentials, or None."""
        if not self._console.sign_in_enabled:
            return None
        scheme, _, encoded = environ.get("HTTP_AUTHORIZATION", "").partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            user, separator, password = base64.b64decode(encoded, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        if not separator or not user:
            return None
        principal = self._console.authenticate(user, password)
        if principal is None:
            log.warning("console sign-in as %r from %s failed", user, environ.get("REMOTE_ADDR", "?"))
        return principal

    def _static_route(self, path: str, start_response: StartResponse) -> Iterable[bytes]:
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


_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
            409: "Conflict", 500: "Internal Server Error", 503: "Service Unavailable"}


def _json(start_response: StartResponse, status: int, value: dict[str, Any]) -> list[bytes]:
    return _answer(start_response, f"{status} {_REASONS[status]}", json.dumps(value, separators=(",", ":")).encode(),
                   "application/json", [("Cache-Control", "no-store")])


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
