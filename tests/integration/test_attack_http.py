"""Attacks on the broker's HTTP listener (`http.listener`: the console and /metrics), each
made as an attacker makes it, against a real broker with an authorizer (issue 38, item 4):

- anonymous clients reading the console's data (every transactional id, topic and group);
- a signed-in principal reading more than it may DESCRIBE through Kafka;
- DNS rebinding: a page of another site whose name resolves to the listener (its Host
  header names the other site);
- password guessing through the sign-in (PLAIN users), and SCRAM guesses making the broker
  derive keys while other clients wait;
- half-sent requests that hold the listener's threads;
- requests smuggled behind another on one connection (a Content-Length and a
  Transfer-Encoding, two Content-Lengths, a folded header, a bare LF, a space before a
  colon): the first is refused and nothing after it is answered;
- /metrics read without credentials, in the clear, or with the names of topics and groups.

The numbers asserted are the documented ones (docs/console.md): failed sign-ins wait
`connection.failed.authentication.delay.ms` and an address has a bucket of 10 failures
refilled at one per 2 s. The guessers run in processes of their own, as an attacker's
would, so their work is not this test process's (and the broker's) GIL.
"""

from __future__ import annotations

import base64
import http.client
import json
import re
import select
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
from prometheus_client.parser import text_string_to_metric_families

from oncelog.security.acl import AclOperation, ResourceType
from tests.support.certs import CertificateAuthority
from tests.support.latency_probe import LatencyProbe
from tests.support.secured import password, secured_broker

REQUEST_TIMEOUT_MS = 1500
FAILURE_BURST, FAILURE_REFILL_S = 10, 2.0  # docs/console.md
DELAY_S = 0.1  # connection.failed.authentication.delay.ms, Kafka's default


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """alice may describe alice-orders, the group alice-readers and the transactional id
    alice-txn; bob's side (and the cluster) are not hers. alice-txn writes to both topics,
    alice-readers committed on both. A PLAINTEXT listener beside the SASL one is where the
    latency probe measures other clients' round trips; scrammy is a SCRAM-SHA-512 user."""
    config = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
              "http.listener": "127.0.0.1:0", "http.request.timeout.ms": str(REQUEST_TIMEOUT_MS),
              "transaction.abort.timed.out.transaction.cleanup.interval.ms": "3600000"}
    with secured_broker(tmp_path_factory.mktemp("attack-http"), config) as secured:
        for topic in ("alice-orders", "bob-orders"):
            secured.create_topic(topic)
        producers = []
        for transactional_id, topics in (("alice-txn", ("alice-orders", "bob-orders")), ("bob-txn", ("bob-orders",))):
            producer = Producer({**secured.client("admin"), "transactional.id": transactional_id})
            producer.init_transactions(10)
            producer.begin_transaction()
            for topic in topics:
                producer.produce(topic, b"pending")
            producer.flush(10)
            producers.append(producer)
        for group, topics in (("alice-readers", ("alice-orders", "bob-orders")), ("bob-readers", ("bob-orders",))):
            consumer = Consumer({**secured.client("admin"), "group.id": group})
            consumer.commit(offsets=[TopicPartition(topic, 0, 0) for topic in topics], asynchronous=False)
            consumer.close()
        secured.allow("alice", ResourceType.TOPIC, "alice-orders", AclOperation.DESCRIBE)
        secured.allow("alice", ResourceType.GROUP, "alice-readers", AclOperation.DESCRIBE)
        secured.allow("alice", ResourceType.TRANSACTIONAL_ID, "alice-txn", AclOperation.DESCRIBE)
        admin = secured.admin()
        for future in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                "scrammy", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"scrammy-secret")]).values():
            future.result(10)
        host, port = secured.running.broker.http.address
        yield {"broker": secured, "host": host, "port": port, "url": f"http://{host}:{port}",
               "plaintext": "{}:{}".format(*secured.running.broker.endpoints["PLAINTEXT"])}
        for producer in producers:
            producer.abort_transaction(10)


def basic(user: str, secret: str | None = None) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password(user) if secret is None else secret}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def get(url: str, headers: dict[str, str] | None = None, context: ssl.SSLContext | None = None
        ) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def raw_get(host: str, port: int, path: str, host_header: str, headers: dict[str, str] | None = None) -> int:
    """The status of a GET whose Host header is `host_header` (what a browser sends for a
    page whose name was rebound to this address)."""
    connection = http.client.HTTPConnection(host, port, timeout=10)
    try:
        connection.putrequest("GET", path, skip_host=True)
        connection.putheader("Host", host_header)
        for name, value in (headers or {}).items():
            connection.putheader(name, value)
        connection.endheaders()
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


# A password guesser in a process of its own: `threads` keep-alive connections from
# `source` (another loopback address: a client address of its own) guessing `user`'s
# password on /api/session for `seconds`. Prints the statuses it got, when it ran
# (CLOCK_MONOTONIC, the same in every process), its fastest refused answer and the
# shortest Retry-After of a 429.
_GUESSER = """
import base64, http.client, json, sys, threading, time
host, port, source, user, seconds, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], \\
    float(sys.argv[5]), int(sys.argv[6])
statuses, refusals, retry_after, lock = {}, [], [], threading.Lock()
started = time.monotonic()
deadline = started + seconds

def connect():
    return http.client.HTTPConnection(host, port, timeout=30, source_address=(source, 0))

def guess(worker):
    connection, attempt = connect(), 0
    while time.monotonic() < deadline:
        attempt += 1
        token = base64.b64encode(f"{user}:guess-{worker}-{attempt}".encode()).decode()
        sent = time.monotonic()
        try:
            connection.request("GET", "/api/session", headers={"Authorization": "Basic " + token})
            response = connection.getresponse()
            response.read()
            status = str(response.status)
            if status == "429":
                retry_after.append(int(response.headers["Retry-After"]))
        except (OSError, http.client.HTTPException) as error:
            connection.close()
            connection, status = connect(), type(error).__name__
        with lock:
            statuses[status] = statuses.get(status, 0) + 1
            if status in ("401", "429"):
                refusals.append(time.monotonic() - sent)

workers = [threading.Thread(target=guess, args=(n,)) for n in range(threads)]
for worker in workers:
    worker.start()
for worker in workers:
    worker.join()
print(json.dumps({"statuses": statuses, "started": started, "ended": time.monotonic(),
                  "fastest_refusal": min(refusals, default=None), "retry_after": min(retry_after, default=None)}))
"""


def guess_passwords(broker, source: str, user: str, seconds: float, threads: int) -> dict:
    done = subprocess.run([sys.executable, "-c", _GUESSER, broker["host"], str(broker["port"]), source, user,
                           str(seconds), str(threads)], capture_output=True, text=True, timeout=seconds + 60,
                          check=True)
    return json.loads(done.stdout)


def test_anonymous_clients_get_401_from_every_api_route_but_the_page_still_loads(broker):
    url = broker["url"]
    for path in ("/api/console", "/api/session"):
        status, headers, body = get(url + path)
        assert status == 401, (path, body[:200])
        assert headers["WWW-Authenticate"].startswith("Basic ")
        assert b"alice-txn" not in body and b"orders" not in body
    status, _headers, body = get(url + "/api/console", basic("alice", "not-her-password"))
    assert status == 401 and b"alice-orders" not in body
    assert get(url + "/")[0] == 200 and get(url + "/static/console.js")[0] == 200  # the sign-in form loads


def test_a_principal_sees_only_the_topics_groups_and_transactions_it_may_describe(broker):
    status, _headers, body = get(broker["url"] + "/api/console?internal=1&partitions_limit=500", basic("alice"))
    assert status == 200
    view = json.loads(body)
    assert {p["topic"] for p in view["partitions"]} == {"alice-orders"}  # no bob-orders, no internal topics
    assert [(t["transactional_id"], t["partitions"]) for t in view["transactions"]] == [("alice-txn",
                                                                                         ["alice-orders-0"])]
    assert [(g["group_id"], [o["topic"] for o in g["offsets"]]) for g in view["groups"]] == [("alice-readers",
                                                                                             ["alice-orders"])]
    assert {key.rpartition("-")[0] for key in view["lso_history"]["series"]} <= {"alice-orders"}
    assert view["completed"] == {} and view["under_min_isr"] is None  # cluster-wide: Cluster DESCRIBE
    assert b"bob" not in body and view["principal"] == "User:alice"
    everything = json.loads(get(broker["url"] + "/api/console?internal=1&partitions_limit=500", basic("admin"))[2])
    assert {t["transactional_id"] for t in everything["transactions"]} == {"alice-txn", "bob-txn"}
    assert {g["group_id"] for g in everything["groups"]} == {"alice-readers", "bob-readers"}
    assert {"alice-orders", "bob-orders", "__transaction_state"} <= {p["topic"] for p in everything["partitions"]}


def test_a_rebound_dns_name_gets_421_and_the_listeners_own_names_are_answered(broker):
    host, port = broker["host"], broker["port"]
    rebound = f"rebind.attacker.example:{port}"  # what the browser sends for the attacker's page
    assert raw_get(host, port, "/", rebound) == 421
    assert raw_get(host, port, "/api/console", rebound, basic("admin")) == 421
    assert raw_get(host, port, "/metrics", rebound) == 421
    for own in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost"):
        assert raw_get(host, port, "/", own) == 200, own


def test_password_guessing_is_delayed_and_limited_per_client_address(broker):
    seconds = 3.0
    result = guess_passwords(broker, "127.0.0.2", "alice", seconds, threads=8)
    statuses = result["statuses"]
    elapsed = result["ended"] - result["started"]
    checked, refused_unchecked = statuses.get("401", 0), statuses.get("429", 0)
    assert set(statuses) <= {"401", "429"}, statuses
    # The bucket lets FAILURE_BURST guesses through, then one per FAILURE_REFILL_S.
    assert checked <= FAILURE_BURST + elapsed / FAILURE_REFILL_S + 1, statuses
    # Every refusal waits the delay, so 8 connections make at most 80 guesses a second.
    assert (checked + refused_unchecked) / elapsed <= 8 / DELAY_S, statuses
    assert result["fastest_refusal"] >= DELAY_S * 0.9
    # The rest were refused unchecked (429, a Retry-After); another address still signs in.
    assert refused_unchecked > 0 and result["retry_after"] >= 1, statuses
    assert get(broker["url"] + "/api/session", basic("alice"))[0] == 200


def p98(latencies: list[float]) -> float:
    return latencies[int(len(latencies) * 0.98) - 1]


def round_trips_before_and_while_guessing(broker, source: str) -> tuple[list[float], list[float], dict]:
    """Other clients' round trip latencies for 1.8 s before and then while 16 threads
    from `source` guess scrammy's password for 4 s, and what the guessers got."""
    probe = LatencyProbe(broker["plaintext"], interval_s=0.005)
    try:
        time.sleep(2.0)
        calm_until = time.monotonic()
        result = guess_passwords(broker, source, "scrammy", 4.0, threads=16)
    finally:
        probe.stop()
    calm = probe.latencies_between(calm_until - 1.8, calm_until)
    attacked = probe.latencies_between(result["started"] + 0.2, result["ended"])
    assert len(calm) >= 100 and len(attacked) >= 200
    return calm, attacked, result


def test_scram_guesses_do_not_slow_other_clients_kafka_round_trips(broker):
    # Measured twice at most, from a fresh address the second time: a machine busy with
    # something else for a few seconds (seen once in CI: a p98 of 23 ms before the guesses
    # began, 1 ms here) fails one measurement, while guesses that cost the broker's loop
    # fail both.
    measured = []
    for source in ("127.0.0.3", "127.0.0.4"):
        calm, attacked, result = round_trips_before_and_while_guessing(broker, source)
        measured.append(f"p98 {p98(calm) * 1000:.1f} ms before, {p98(attacked) * 1000:.1f} ms while guessing "
                        f"from {source} ({result['statuses']})")
        if p98(attacked) < p98(calm) + 0.015:
            break
    else:
        raise AssertionError("16 threads guessing SCRAM passwords slowed Metadata/ApiVersions round trips: "
                             + "; ".join(measured))
    # The broker derived keys for the bucket's guesses only.
    assert result["statuses"].get("401", 0) <= FAILURE_BURST + 4 / FAILURE_REFILL_S + 1, result["statuses"]


def test_half_sent_requests_hold_no_thread_and_are_closed_by_the_read_timeout(broker):
    host, port = broker["host"], broker["port"]
    threads_before = threading.active_count()
    stalled = []
    for _ in range(300):
        connection = socket.create_connection((host, port), timeout=10)
        connection.sendall(f"GET /api/console HTTP/1.1\r\nHost: {host}:{port}\r\nX-Slow: ".encode())
        stalled.append(connection)
    sent = time.monotonic()
    try:
        time.sleep(0.3)
        assert threading.active_count() - threads_before < 10  # not one thread per connection
        started = time.monotonic()
        status, _headers, _body = get(broker["url"] + "/static/console.css")
        assert status == 200 and time.monotonic() - started < 2.0
        # Each stalled connection is closed (after a 408) once its request is later than the timeout.
        open_ones = set(stalled)
        deadline = sent + REQUEST_TIMEOUT_MS / 1000 + 5.0
        while open_ones and time.monotonic() < deadline:
            readable, _, _ = select.select(list(open_ones), [], [], 0.5)
            for connection in readable:
                try:
                    while connection.recv(65536):
                        pass
                except OSError:
                    pass
                open_ones.discard(connection)
        assert not open_ones, f"{len(open_ones)} of 300 half-sent requests still open after the read timeout"
    finally:
        for connection in stalled:
            connection.close()


def test_a_request_head_larger_than_16_kib_is_refused(broker):
    status = raw_get(broker["host"], broker["port"], "/", f"127.0.0.1:{broker['port']}", {"X-Padding": "a" * 20_000})
    assert status == 431


def exchange(broker, data: bytes) -> list[int]:
    """The statuses of the answers to `data`, sent at once on one connection and read until
    the listener closes it."""
    received = bytearray()
    with socket.create_connection((broker["host"], broker["port"]), timeout=10) as connection:
        connection.sendall(data)
        try:
            while chunk := connection.recv(65536):
                received += chunk
        except TimeoutError:
            pytest.fail(f"the listener left the connection open after {bytes(received[:300])!r}")
        except ConnectionResetError:
            pass  # closed with some of `data` unread: what it had sent is still here
    return [int(status) for status in re.findall(rb"^HTTP/1\.1 (\d{3}) ", received, re.MULTILINE)]


def admins_console_request(port: int) -> bytes:
    """A request smuggled behind another: answered, it would give the admin's whole view."""
    return (f"GET /api/console HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: {basic('admin')['Authorization']}\r\nConnection: close\r\n\r\n").encode()


def sign_in_with_a_body(host: str, framing: str, body: bytes) -> bytes:
    return f"POST /api/session HTTP/1.1\r\nHost: {host}\r\n{framing}\r\n".encode() + body


# Each request is read one way by h11 and another by a front end that a smuggler counts on
# (a proxy that takes the Content-Length, does not unfold, splits lines only at CRLF, or
# trims the space before a colon); the admin's request follows it on the same connection.
SMUGGLING_ATTEMPTS = {
    "content_length_and_transfer_encoding": lambda host, smuggled: sign_in_with_a_body(
        host, f"Content-Length: {5 + len(smuggled)}\r\nTransfer-Encoding: chunked\r\n", b"0\r\n\r\n" + smuggled),
    "two_different_content_lengths": lambda host, smuggled: sign_in_with_a_body(
        host, f"Content-Length: 0\r\nContent-Length: {len(smuggled)}\r\n", smuggled),
    "a_header_folded_across_lines": lambda host, smuggled: sign_in_with_a_body(
        host, f"Content-Length: {5 + len(smuggled)}\r\nX-Note: a\r\n Transfer-Encoding: chunked\r\n",
        b"0\r\n\r\n" + smuggled),
    "a_bare_lf_line_ending": lambda host, smuggled: sign_in_with_a_body(
        host, f"X-Note: a\nContent-Length: {len(smuggled)}\r\n", smuggled),
    "a_bare_lf_request": lambda host, smuggled: f"GET / HTTP/1.1\nHost: {host}\n\n".encode() + smuggled,
    "a_space_before_the_colon": lambda host, smuggled: sign_in_with_a_body(
        host, f"Content-Length: {5 + len(smuggled)}\r\nTransfer-Encoding : chunked\r\n", b"0\r\n\r\n" + smuggled),
}


def test_pipelined_requests_are_each_answered_in_order(broker):
    """The control for the smuggling tests: the admin's request, after a good one, is answered."""
    host = f"127.0.0.1:{broker['port']}"
    assert exchange(broker, f"GET / HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
                    + admins_console_request(broker["port"])) == [200, 200]


@pytest.mark.parametrize("attempt", list(SMUGGLING_ATTEMPTS))
def test_a_smuggling_attempt_gets_400_and_the_request_behind_it_is_never_answered(broker, attempt):
    host = f"127.0.0.1:{broker['port']}"
    assert exchange(broker, SMUGGLING_ATTEMPTS[attempt](host, admins_console_request(broker["port"]))) == [400]


def test_a_chunked_body_gets_501_and_the_request_behind_it_is_never_answered(broker):
    host = f"127.0.0.1:{broker['port']}"
    request = sign_in_with_a_body(host, "Transfer-Encoding: chunked\r\n", b"3\r\nabc\r\n0\r\n\r\n")
    assert exchange(broker, request + admins_console_request(broker["port"])) == [501]


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory):
    """/metrics over HTTPS with the broker's ssl.* keystore (TLS 1.3 only for HTTP, by its
    own http.ssl.enabled.protocols), Basic credentials required, names of topics and groups
    left out; bob may describe the cluster, alice may not."""
    base = tmp_path_factory.mktemp("attack-https")
    ca = CertificateAuthority.create(base / "certs")
    server = ca.issue("broker", "CN=localhost", server=True)
    config = {"http.listener": "127.0.0.1:0", "http.request.timeout.ms": str(REQUEST_TIMEOUT_MS),
              "ssl.keystore.type": "PEM", "ssl.keystore.location": str(server.combined),
              "http.ssl.enabled": "true", "http.ssl.enabled.protocols": "TLSv1.3",
              "http.metrics.require.auth": "true", "http.metrics.resource.names": "false"}
    with secured_broker(base / "data", config) as secured:
        secured.create_topic("secret-project")
        consumer = Consumer({**secured.client("admin"), "group.id": "secret-readers"})
        consumer.commit(offsets=[TopicPartition("secret-project", 0, 0)], asynchronous=False)
        consumer.close()
        secured.allow("bob", ResourceType.CLUSTER, "kafka-cluster", AclOperation.DESCRIBE)
        host, port = secured.running.broker.http.address
        context = ssl.create_default_context(cafile=str(ca.certificate))
        yield {"host": host, "port": port, "url": f"https://{host}:{port}", "context": context}


def test_metrics_over_https_need_basic_credentials_of_a_principal_that_may_describe_the_cluster(tls_broker):
    url, context = tls_broker["url"] + "/metrics", tls_broker["context"]
    status, headers, _body = get(url, context=context)
    assert status == 401 and headers["WWW-Authenticate"].startswith("Basic realm=")
    assert get(url, basic("alice"), context)[0] == 403
    status, _headers, body = get(url, basic("bob"), context)
    assert status == 200
    families = {family.name for family in text_string_to_metric_families(body.decode())}
    assert "kafka_network_request_requests" in families
    # Nothing in the clear: an HTTP request to the port gets no HTTP answer.
    with pytest.raises((http.client.HTTPException, OSError)):
        raw_get(tls_broker["host"], tls_broker["port"], "/metrics", f"127.0.0.1:{tls_broker['port']}")
    # http.ssl.enabled.protocols overrides the broker's ssl.enabled.protocols: TLS 1.2 is refused.
    old_client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    old_client.check_hostname, old_client.verify_mode = False, ssl.CERT_NONE
    old_client.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(ssl.SSLError), socket.create_connection((tls_broker["host"], tls_broker["port"]), 10) as raw:
        old_client.wrap_socket(raw).close()


def test_a_tls_connection_that_never_says_hello_is_closed_by_the_read_timeout(tls_broker):
    with socket.create_connection((tls_broker["host"], tls_broker["port"]), timeout=10) as silent:
        started = time.monotonic()
        assert silent.recv(1) == b""
        assert time.monotonic() - started < REQUEST_TIMEOUT_MS / 1000 + 3.0


def test_metrics_can_leave_out_every_topic_and_group_name(tls_broker):
    status, _headers, body = get(tls_broker["url"] + "/metrics", basic("bob"), tls_broker["context"])
    assert status == 200
    text = body.decode()
    assert "secret-project" not in text and "secret-readers" not in text
    samples = [sample for family in text_string_to_metric_families(text) for sample in family.samples]
    assert not [sample for sample in samples if {"topic", "consumergroup"} & sample.labels.keys()]
    assert any(sample.name == "kafka_server_replicamanager_producer_id_count" for sample in samples)  # broker-wide
