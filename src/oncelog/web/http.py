"""The broker's HTTP listener's routes (`http.listener=HOST:PORT`): Prometheus metrics at
`/metrics`, the console at `/`, its data at `/api/console`.

`ConsoleApp` answers one `HttpRequest` on a worker thread of the listener
(oncelog.web.server, which owns connections, TLS, the Host check and the limits): never
on the broker's event loop. What it shows of the broker comes from a `ConsoleBackend`,
which asks the loop for a copy; the page and its scripts are static files of this package
(no build step; uPlot, vendored, draws the charts).

On a broker with an authorizer every `/api/*` route needs HTTP Basic credentials of a
SASL user (a SCRAM or PLAIN user, checked by `SignIns`: cached briefly, rate-limited per
client address, refusals delayed) and answers 401 without them; the page's static files
load without. The console then shows only what the principal may DESCRIBE, as Kafka's
Metadata, DescribeGroups and ListTransactions filter (the backend filters on the loop,
with the broker's authorizer). Without an authorizer nobody signs in and everything is
shown, as before. `/metrics` needs credentials when `http.metrics.require.auth` is true
(and, with an authorizer, Cluster DESCRIBE).

`GET /api/topics/{topic}/records` is the message browser (one partition's records with
their fate, for a principal with Topic READ; oncelog.broker.console_records);
`GET /api/security` the ACLs (Cluster DESCRIBE) and client quotas (Cluster DESCRIBE_CONFIGS);
`GET /api/topics/{topic}/configs` and `GET /api/broker/configs` (`?broker=N`: another
broker's of the cluster, asked of it) the configs with their sources (Topic / Cluster
DESCRIBE_CONFIGS), as DescribeConfigs gives them.

Read-only, but for two actions when the broker has an authorizer: a principal that holds
Cluster ALTER may abort an open transaction: `POST /api/transactions/abort` with
`{"transactional_id": ...}`; and a principal with Group READ and Topic READ may reset an
Empty group's offsets (`POST /api/groups/reset-offsets`, planned first:
oncelog.broker.console_groups). Each POST must carry the `X-Oncelog-Console` header, which a
page of another site cannot send without this server's consent (CORS, which it never
gives): no cross-site request forgery. With `http.ssl.enabled` the listener speaks HTTPS
(docs/console.md); without it, credentials cross the network in the clear.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import mimetypes
import re
from importlib import resources
from typing import Any, Protocol

from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.registry import CollectorRegistry

from oncelog.web.model import PartitionsQuery, QueryError
from oncelog.web.server import HttpRequest, HttpResponse
from oncelog.web.sign_in import Outcome, SignIn, SignIns

log = logging.getLogger("oncelog.web")

CONSOLE_HEADER = "x-oncelog-console"
MAX_BODY_BYTES = 4096


class ConsoleBackend(Protocol):
    """What the console asks of the broker (each call may raise TimeoutError)."""

    # What `principal` may see, JSON-able, with the page of partitions `query` asks for.
    def view(self, principal: str | None, host: str, query: PartitionsQuery) -> dict[str, Any]: ...
    @property
    def sign_in_enabled(self) -> bool: ...  # the broker has an authorizer
    def authenticate(self, user: str, password: str) -> str | None: ...  # the principal, or None
    def may_abort(self, principal: str, host: str) -> bool: ...
    def may_describe_cluster(self, principal: str, host: str) -> bool: ...
    def abort(self, principal: str, host: str, transactional_id: str) -> tuple[int, str]: ...
    # The message browser: (HTTP status, JSON) for one topic and the request's query string.
    def records(self, principal: str | None, host: str, topic: str, query: str) -> tuple[int, dict[str, Any]]: ...
    def reset_offsets(self, principal: str, host: str, body: object) -> tuple[int, dict[str, Any]]: ...
    def topic_configs(self, principal: str | None, host: str, topic: str) -> tuple[int, dict[str, Any]]: ...
    # A broker's configs: this one's, or another's of its cluster (`broker=N` in `query`).
    def broker_configs(self, principal: str | None, host: str, query: str) -> tuple[int, dict[str, Any]]: ...
    def alter_topic_config(self, principal: str, host: str, topic: str, body: object) -> tuple[int, dict[str, Any]]: ...
    # The security views: ACLs and client quotas, for whom may describe them.
    def security(self, principal: str | None, host: str) -> tuple[int, dict[str, Any]]: ...


_STATIC = resources.files("oncelog.web") / "static"
_SECURITY_HEADERS = (
    ("X-Content-Type-Options", "nosniff"),
    ("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'"),
    ("Referrer-Policy", "no-referrer"),
)
_API_ROUTES = {"/api/console": "GET", "/api/session": "GET", "/api/security": "GET", "/api/broker/configs": "GET",
               "/api/transactions/abort": "POST",
               "/api/groups/reset-offsets": "POST"}
_ACTIONS = frozenset(path for path, method in _API_ROUTES.items() if method == "POST")
# GET /api/topics/{topic}/records: a topic name as Kafka allows it (up to 249 of [a-zA-Z0-9._-]).
_RECORDS_ROUTE = re.compile(r"/api/topics/([a-zA-Z0-9._-]{1,249})/records")
# GET (DescribeConfigs) and POST (one key SET or DELETE) /api/topics/{topic}/configs.
_CONFIGS_ROUTE = re.compile(r"/api/topics/([a-zA-Z0-9._-]{1,249})/configs")


class ConsoleApp:
    """The routes (oncelog.web.server.HttpApp), called on the listener's worker threads."""

    def __init__(self, registry: CollectorRegistry, console: ConsoleBackend, sign_ins: SignIns, *,
                 metrics_require_auth: bool = False, failed_sign_in_delay_s: float = 0.1) -> None:
        self._registry = registry
        self._console = console
        self._sign_ins = sign_ins
        self._metrics_require_auth = metrics_require_auth
        self._failed_delay_s = failed_sign_in_delay_s

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            return self._route(request)
        except TimeoutError:
            return _json(503, {"error": "the broker did not answer in time"})
        except Exception:
            log.exception("the console's request %s %s failed", request.method, request.path)
            return _json(500, {"error": "the console failed; see the broker log"})

    def _route(self, request: HttpRequest) -> HttpResponse:
        method, path = request.method, request.path
        if _CONFIGS_ROUTE.fullmatch(path):
            if method not in ("GET", "HEAD", "POST"):
                return _answer(405, b"method not allowed\n", "text/plain", [("Allow", "GET, POST")])
            return self._api(request)
        if path in _API_ROUTES or _RECORDS_ROUTE.fullmatch(path):
            allowed = _API_ROUTES.get(path, "GET")
            if method != allowed and not (allowed == "GET" and method == "HEAD"):
                return _answer(405, b"method not allowed\n", "text/plain", [("Allow", allowed)])
            return self._api(request)
        if method not in ("GET", "HEAD"):
            return _answer(405, b"read-only: GET only\n", "text/plain", [("Allow", "GET, HEAD")])
        if path == "/metrics":
            return self._metrics(request)
        if path.startswith("/api/"):
            return _json(404, {"error": "no such route"})
        return self._static_route(path)

    # -- /api/*: signed in on a broker with an authorizer ----------------------------------------

    def _api(self, request: HttpRequest) -> HttpResponse:
        host = request.client_host
        if (request.path in _ACTIONS or request.method == "POST") and request.header(CONSOLE_HEADER) != "1":
            return _json(403, {"error": "the X-Oncelog-Console header is missing"})
        principal: str | None = None
        if self._console.sign_in_enabled:
            sign_in = self._sign_in(request)
            if sign_in.principal is None:
                return self._refused(sign_in, request, realm="oncelog console")
            principal = sign_in.principal
        configs = _CONFIGS_ROUTE.fullmatch(request.path)
        if configs is not None and request.method != "POST":
            status, answer = self._console.topic_configs(principal, host, configs.group(1))
            return _json(status, answer)
        records = _RECORDS_ROUTE.fullmatch(request.path)
        if records is not None:  # for everyone who may read the topic (no authorizer: everyone)
            status, answer = self._console.records(principal, host, records.group(1), request.query)
            return _json(status, answer)
        if request.path == "/api/broker/configs":
            status, answer = self._console.broker_configs(principal, host, request.query)
            return _json(status, answer)
        if request.path == "/api/security":
            status, answer = self._console.security(principal, host)
            return _json(status, answer)
        if request.path == "/api/console":
            try:
                query = PartitionsQuery.parse(request.query)
            except (QueryError, ValueError) as error:  # parse_qs raises ValueError for a malformed query
                return _json(400, {"error": str(error)})
            view = self._console.view(principal, host, query)
            view["actions"] = {"sign_in": self._console.sign_in_enabled}
            view["principal"] = principal
            return _json(200, view)
        if principal is None:
            return _json(401, {"error": "this broker has no authorizer: nobody signs in to its console"})
        if request.path == "/api/session":
            return _json(200, {"principal": principal, "may_abort": self._console.may_abort(principal, host)})
        if request.path == "/api/groups/reset-offsets":
            return self._reset_offsets(request, principal)
        if configs is not None:
            body = _json_body(request)
            if body is None:
                return _json(400, {"error": "expected a JSON object of at most 4096 bytes"})
            status, answer = self._console.alter_topic_config(principal, host, configs.group(1), body)
            return _json(status, answer)
        return self._abort(request, principal)

    def _reset_offsets(self, request: HttpRequest, principal: str) -> HttpResponse:
        body = _json_body(request)
        if body is None:
            return _json(400, {"error": "expected a JSON object of at most 4096 bytes"})
        status, answer = self._console.reset_offsets(principal, request.client_host, body)
        return _json(status, answer)

    def _abort(self, request: HttpRequest, principal: str) -> HttpResponse:
        body = _json_body(request)
        transactional_id = body.get("transactional_id") if isinstance(body, dict) else None
        if not isinstance(transactional_id, str):
            return _json(400, {"error": 'expected {"transactional_id": "..."}'})
        status, message = self._console.abort(principal, request.client_host, transactional_id)
        return _json(status, {"message": message} if status == 200 else {"error": message})

    def _sign_in(self, request: HttpRequest) -> SignIn:
        sign_in = self._sign_ins.check(request.header("authorization"), request.client_host)
        if sign_in.outcome is Outcome.WRONG:
            log.warning("HTTP sign-in from %s failed (%s %s)", request.client_host, request.method, request.path)
        elif sign_in.outcome is Outcome.LIMITED:
            log.info("HTTP sign-in from %s refused unchecked: too many failures", request.client_host)
        return sign_in

    def _refused(self, sign_in: SignIn, request: HttpRequest, *, realm: str) -> HttpResponse:
        """401 (or 429) for a request without a principal. A failed or refused sign-in waits
        connection.failed.authentication.delay.ms first; asking without credentials does not.
        The page's own requests get no Basic challenge, so the browser shows the page's form,
        not its own dialog."""
        challenge = "Console" if request.header(CONSOLE_HEADER) == "1" else "Basic"
        headers = [("WWW-Authenticate", f'{challenge} realm="{realm}", charset="UTF-8"')]
        if sign_in.outcome is Outcome.NO_CREDENTIALS:
            return _json(401, {"error": "sign in first", "sign_in": True}, headers)
        if sign_in.outcome is Outcome.LIMITED:
            wait_s = max(math.ceil(sign_in.retry_after_s), 1)
            return _json(429, {"error": f"{sign_in.outcome.value}; try again in {wait_s} s", "sign_in": True},
                         [("Retry-After", str(wait_s))], delay_s=self._failed_delay_s)
        return _json(401, {"error": sign_in.outcome.value, "sign_in": True}, headers, delay_s=self._failed_delay_s)

    # -- /metrics ---------------------------------------------------------------------------------

    def _metrics(self, request: HttpRequest) -> HttpResponse:
        if self._metrics_require_auth:
            sign_in = self._sign_in(request)
            if sign_in.principal is None:
                return self._refused(sign_in, request, realm="oncelog metrics")
            if self._console.sign_in_enabled and not self._console.may_describe_cluster(sign_in.principal,
                                                                                        request.client_host):
                return _answer(403, f"{sign_in.principal} may not read the metrics (needs Cluster DESCRIBE)\n"
                               .encode(), "text/plain")
        encoder, content_type = choose_encoder(request.header("accept"))
        body = encoder(self._registry)
        headers = [("Cache-Control", "no-store")]
        if gzip_accepted(request.header("accept-encoding")):
            body = gzip.compress(body)
            headers.append(("Content-Encoding", "gzip"))
        return HttpResponse(200, body, content_type, (*_SECURITY_HEADERS, *headers))

    # -- the page's files -------------------------------------------------------------------------

    def _static_route(self, path: str) -> HttpResponse:
        if path in ("/", "/index.html"):
            return self._static("index.html")
        if path.startswith("/static/"):
            return self._static(path.removeprefix("/static/"))
        return _answer(404, b"not found\n", "text/plain")

    @staticmethod
    def _static(name: str) -> HttpResponse:
        parts = name.split("/")
        if any(part in ("", ".", "..") for part in parts):
            return _answer(404, b"not found\n", "text/plain")
        resource = _STATIC.joinpath(*parts)
        if not resource.is_file():
            return _answer(404, b"not found\n", "text/plain")
        content_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
        if content_type.startswith("text/") or content_type.endswith("javascript"):
            content_type += "; charset=utf-8"
        return _answer(200, resource.read_bytes(), content_type, [("Cache-Control", "max-age=300")])


def _json_body(request: HttpRequest) -> object | None:
    """The request's JSON body, None when it is missing, too big or not JSON."""
    if not 0 < len(request.body) <= MAX_BODY_BYTES:
        return None
    try:
        return json.loads(request.body)
    except ValueError:
        return None


def _json(status: int, value: dict[str, Any], headers: list[tuple[str, str]] | None = None, *,
          delay_s: float = 0.0) -> HttpResponse:
    return _answer(status, json.dumps(value, separators=(",", ":")).encode(), "application/json",
                   [("Cache-Control", "no-store"), *(headers or [])], delay_s=delay_s)


def _answer(status: int, body: bytes, content_type: str, headers: list[tuple[str, str]] | None = None, *,
            delay_s: float = 0.0) -> HttpResponse:
    if content_type == "text/plain":
        content_type += "; charset=utf-8"
    return HttpResponse(status, body, content_type, (*_SECURITY_HEADERS, *(headers or [])), delay_s)
