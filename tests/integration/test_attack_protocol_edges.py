"""Attacks at the protocol's edges (issue 38, item 5): what a client may send that real
clients never do, and what the broker's answers give away.

- A null where Kafka's schema forbids one (a null array, string or bytes) is a request
  Kafka cannot parse: the connection closes, one INFO line, and no handler sees it (a
  dozen handlers used to raise TypeError on a null array, one ERROR traceback per
  request: a log flood any user could cause). Nulls the schema allows stay accepted.
- ConsumerGroupHeartbeat v0, which the broker advertises, works (the handler read a
  field only v1 has, so every v0 request failed).
- A fetch session (KIP-227) is its principal's: another user naming its id finds no
  session, learns nothing of its partitions, and cannot close it or move its epoch.
- SCRAM's server-first message for an unknown user is the one of a user stored with the
  default parameters (`oncelog configs`, kafka-configs.sh): the same salt form and
  iterations, the same salt on every attempt and after a restart, and the exchange
  fails like a wrong password.
- DescribeConfigs answers every key Kafka types PASSWORD, a listener's override of one
  included, as sensitive with a null value: no secret of the broker's config is sent.

The broker under the null attacks runs in its own process (BrokerProcess), so its log
is the file a flood would fill; the attacks between users run against one broker with
SASL users and an authorizer (tests/support/secured.py), over raw wire clients.
"""

from __future__ import annotations

import base64
import datetime
import os
import re
import socket
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from kio.schema.consumer_group_heartbeat.v0.request import ConsumerGroupHeartbeatRequest as HeartbeatV0
from kio.schema.consumer_group_heartbeat.v0.request import TopicPartitions as OwnedPartitionsV0
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.schema.types import BrokerId, GroupId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from oncelog.broker.handlers import handler_table
from oncelog.local.process import BrokerProcess, free_port
from oncelog.protocol.client import WireClient, decode_response, encode_request
from oncelog.protocol.messages import is_flexible, request_class
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.security.sasl_client import ScramSaslClient
from tests.support.kafka import create_topic
from tests.support.null_fields import NullTarget, body_with_null, null_field_targets
from tests.support.secured import SecuredBroker, password, secured_broker

HANDLERS = handler_table()
EXCHANGE_TIMEOUT = 10.0  # two shared cores
ERROR_LINE = re.compile(r" (ERROR|CRITICAL) |Traceback \(most recent call last\)")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class LoggedBroker:
    """A broker process and the part of its log written since the last look."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self._seen = 0

    @property
    def bootstrap_servers(self) -> str:
        return self.broker.bootstrap_servers

    def new_log(self) -> str:
        text = self.broker.log_path.read_text(errors="replace")
        fresh, self._seen = text[self._seen:], len(text)
        return fresh

    def assert_no_error_logged(self) -> str:
        fresh = self.new_log()
        errors = [line for line in fresh.splitlines() if ERROR_LINE.search(line)]
        assert not errors, f"the broker logged {len(errors)} error lines, the first: {errors[:3]}"
        return fresh

    def assert_serves_others(self) -> None:
        with WireClient.connect(self.bootstrap_servers, timeout=EXCHANGE_TIMEOUT) as client:
            metadata = client.request(MetadataRequest(
                topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False))
            assert [b.port for b in metadata.brokers] == [self.broker.port]


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("protocol-edges") / "data") as broker:
        logged = LoggedBroker(broker)
        logged.new_log()
        yield logged


# Kafka's PASSWORD-typed broker keys oncelog takes (SslConfigs, BrokerSecurityConfigs,
# SaslConfigs), each set on the secured broker, bare and for its listener, to a value
# DescribeConfigs must never send.
PASSWORD_KEYS = ("ssl.keystore.password", "ssl.key.password", "ssl.keystore.key", "ssl.keystore.certificate.chain",
                 "ssl.truststore.password", "ssl.truststore.certificates")
LISTENER_PREFIX = "listener.name.sasl_plaintext."
SECRET_CONFIGS = {
    **{key: f"edges-secret {key}" for key in PASSWORD_KEYS},
    **{LISTENER_PREFIX + key: f"edges-secret {LISTENER_PREFIX + key}" for key in PASSWORD_KEYS},
    LISTENER_PREFIX + "scram-sha-256.sasl.jaas.config":
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="x" password="edges-secret";',
}


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    config = {"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
              "connection.failed.authentication.delay.ms": "0", **SECRET_CONFIGS,
              LISTENER_PREFIX + "sasl.server.max.receive.size": "524288"}
    with secured_broker(tmp_path_factory.mktemp("protocol-edges-secured"), config) as broker:
        yield broker


def signed_in(broker: SecuredBroker, user: str) -> WireClient:
    """A raw wire client authenticated as `user` with SASL/PLAIN."""
    client = WireClient.connect(broker.bootstrap_servers, timeout=EXCHANGE_TIMEOUT)
    assert client.request(SaslHandshakeRequest(mechanism="PLAIN")).error_code == ErrorCode.none
    answer = client.request(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{password(user)}".encode()))
    assert answer.error_code == ErrorCode.none, answer.error_message
    return client


def raw_frame(api_key: int, version: int, body: bytes, correlation_id: int = 7) -> bytes:
    header = struct.pack(">hhi", api_key, version, correlation_id) + struct.pack(">h", 6) + b"hostil"
    if is_flexible(api_key, version):
        header += b"\x00"  # no tagged fields
    return struct.pack(">i", len(header) + len(body)) + header + body


def send_and_read(port: int, frame: bytes) -> tuple[bytes, bool]:
    """Send `frame` on a fresh connection; what came back before the broker closed it
    (True), or before a whole response arrived or the timeout passed (False)."""
    received = bytearray()
    with socket.create_connection(("127.0.0.1", port), timeout=EXCHANGE_TIMEOUT) as sock:
        sock.sendall(frame)
        deadline = time.monotonic() + EXCHANGE_TIMEOUT
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                return bytes(received), True
            except TimeoutError:
                break
            if not chunk:
                return bytes(received), True
            received += chunk
            if len(received) >= 4 and len(received) >= 4 + struct.unpack_from(">i", received)[0]:
                return bytes(received), False  # a whole response: the broker parsed the request
    return bytes(received), False


def null_targets(api_key: int, *, nullable: bool) -> list[tuple[int, NullTarget]]:
    handler = HANDLERS[api_key]
    return [(version, target)
            for version in range(handler.min_version, handler.max_version + 1)
            for target in null_field_targets(request_class(api_key, version))
            if target.nullable == nullable]


KEYS = sorted(HANDLERS)
KEYS_WITH_NON_NULLABLE = [key for key in KEYS if null_targets(key, nullable=False)]


# -- nulls the schema forbids -----------------------------------------------------------------


@pytest.mark.parametrize("api_key", KEYS_WITH_NON_NULLABLE, ids=[HANDLERS[k].name for k in KEYS_WITH_NON_NULLABLE])
def test_a_null_the_schema_forbids_closes_the_connection_with_one_info_line_and_no_error(target, api_key):
    """Every version the broker offers, each non-nullable array, string and bytes field
    (at any depth) sent as null: the connection closes unanswered, as Kafka closes it
    when its generated reader throws "non-nullable field X was serialized as null"."""
    target.new_log()
    answered = []
    cases = null_targets(api_key, nullable=False)
    for version, null_field in cases:
        received, closed = send_and_read(target.broker.port, raw_frame(api_key, version, body_with_null(
            request_class(api_key, version), null_field.path)))
        if received or not closed:
            answered.append(f"v{version} {null_field}: {len(received)} bytes back, closed={closed}")
    assert not answered, f"{len(answered)} of {len(cases)} null fields were not refused: {answered[:5]}"
    target.assert_serves_others()
    log = target.assert_no_error_logged()
    closing = [line for line in log.splitlines() if "closing connection" in line]
    assert len(closing) == len(cases) and all(" INFO " in line for line in closing), closing[:3]


def test_null_arrays_the_schema_allows_are_still_answered(target):
    """Metadata's topics from v1 (null: every topic), and every other nullable array of
    a request the broker handles: answered, and nothing logged as an error."""
    target.new_log()
    topic = unique("edges-all-topics")
    create_topic(target.bootstrap_servers, topic)
    for version in range(1, HANDLERS[3].max_version + 1):
        received, _closed = send_and_read(target.broker.port, raw_frame(3, version, body_with_null(
            request_class(3, version), ("topics",))))
        assert received and topic.encode() in received, f"Metadata v{version} with null topics"
    unanswered = []
    for api_key in KEYS:
        for version, null_field in null_targets(api_key, nullable=True):
            if null_field.kind != "array":
                continue
            received, _closed = send_and_read(target.broker.port, raw_frame(api_key, version, body_with_null(
                request_class(api_key, version), null_field.path)))
            if not received:
                unanswered.append(f"{HANDLERS[api_key].name} v{version} {null_field}")
    assert not unanswered
    target.assert_no_error_logged()


# -- ConsumerGroupHeartbeat v0 ----------------------------------------------------------------


def heartbeat_v0(client: WireClient, group: str, member_id: str, epoch: int, **fields):
    return client.request(HeartbeatV0(group_id=GroupId(group), member_id=member_id, member_epoch=i32(epoch),
                                      **fields))


def test_consumer_group_heartbeat_v0_joins_gets_an_assignment_and_leaves(target):
    target.new_log()
    topic, group = unique("edges-v0"), unique("edges-v0-group")
    create_topic(target.bootstrap_servers, topic, partitions=3)
    with WireClient.connect(target.bootstrap_servers, timeout=EXCHANGE_TIMEOUT) as client:
        metadata = client.request(MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=None, name=TopicName(topic)),), allow_auto_topic_creation=False,
            include_topic_authorized_operations=False))
        (topic_id,) = [t.topic_id for t in metadata.topics]
        assert client.request(FindCoordinatorRequest(key=group, key_type=0)).error_code == ErrorCode.none
        joined = heartbeat_v0(client, group, "", 0, subscribed_topic_names=(TopicName(topic),), topic_partitions=(),
                              rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)))
        assert joined.error_code == ErrorCode.none, joined.error_message
        assert joined.member_id  # v0: the coordinator names the member
        assert joined.member_epoch >= 1
        member_id, epoch, assignment = joined.member_id, joined.member_epoch, joined.assignment
        deadline = time.monotonic() + 20
        while not (assignment is not None and assignment.topic_partitions):
            assert time.monotonic() < deadline, "no assignment within 20 s"
            time.sleep(joined.heartbeat_interval.total_seconds() / 4)
            answer = heartbeat_v0(client, group, member_id, epoch, topic_partitions=None)
            assert answer.error_code == ErrorCode.none, answer.error_message
            epoch, assignment = answer.member_epoch, answer.assignment or assignment
        assert [(tp.topic_id, sorted(tp.partitions)) for tp in assignment.topic_partitions] == [(topic_id, [0, 1, 2])]
        owned = tuple(OwnedPartitionsV0(topic_id=tp.topic_id, partitions=tp.partitions)
                      for tp in assignment.topic_partitions)
        owning = heartbeat_v0(client, group, member_id, epoch, topic_partitions=owned)
        assert (owning.error_code, owning.member_epoch) == (ErrorCode.none, epoch)
        left = heartbeat_v0(client, group, member_id, -1, topic_partitions=None)
        assert (left.error_code, left.member_id, left.member_epoch) == (ErrorCode.none, member_id, -1)
    target.assert_no_error_logged()


# -- fetch sessions between principals --------------------------------------------------------

FULL, SESSIONLESS = 0, -1  # the session epochs of full fetches: opening a session, or not


def fetch(client: WireClient, topic: str | None, *, session_id: int = 0, epoch: int = FULL):
    """A Fetch v12 of partition 0 of `topic` (None: no partition) from offset 0."""
    partition = fetch_v12.FetchPartition(
        partition=i32(0), current_leader_epoch=i32(-1), fetch_offset=i64(0), last_fetched_epoch=i32(-1),
        log_start_offset=i64(-1), partition_max_bytes=i32(1 << 20))
    topics = () if topic is None else (fetch_v12.FetchTopic(topic=TopicName(topic), partitions=(partition,)),)
    return client.request(fetch_v12.FetchRequest(
        replica_id=BrokerId(-1), max_wait=i32Timedelta.parse(datetime.timedelta(0)), min_bytes=i32(0),
        max_bytes=i32(1 << 20), isolation_level=i8(0), session_id=i32(session_id), session_epoch=i32(epoch),
        topics=topics, forgotten_topics_data=(), rack_id=""))


def test_another_principal_naming_a_fetch_session_finds_none_learns_nothing_and_leaves_it_alone(secured):
    """Kafka lets any fetcher continue or close any session whose id it names: an
    incremental fetch of alice's session by bob answered bob with alice's partitions
    (their topic names among them, even unauthorized), moved its epoch and broke it."""
    private = unique("alice-private")
    secured.create_topic(private)
    secured.allow("alice", ResourceType.TOPIC, private, AclOperation.READ)
    with signed_in(secured, "alice") as alice, signed_in(secured, "bob") as bob:
        opened = fetch(alice, private)
        assert opened.error_code == ErrorCode.none and opened.session_id > 0
        session_id = opened.session_id
        for epoch in (1, 2, 9):  # the right epoch or not: the same answer, nothing about the session
            stolen = fetch(bob, None, session_id=session_id, epoch=epoch)
            assert (stolen.error_code, stolen.session_id, stolen.responses) == (
                ErrorCode.fetch_session_id_not_found, 0, ()), f"epoch {epoch}"
        closing = fetch(bob, None, session_id=session_id, epoch=SESSIONLESS)  # Kafka closes the session it names
        assert (closing.error_code, closing.session_id) == (ErrorCode.none, 0)
        replacing = fetch(bob, None, session_id=session_id, epoch=FULL)
        assert replacing.error_code == ErrorCode.none and replacing.session_id != session_id
        assert secured.running.broker.fetch_sessions.get(session_id) is not None
        going_on = fetch(alice, None, session_id=session_id, epoch=1)  # still alice's, at the epoch she expects
        assert (going_on.error_code, going_on.session_id) == (ErrorCode.none, session_id)


# -- SCRAM: an unknown user looks like a stored one -------------------------------------------

SALT_BITS = 130  # Kafka's salts: new BigInteger(130, SecureRandom) in base 36 (ScramFormatter)


def kafka_salt_form(salt: bytes) -> bool:
    """Whether `salt` is what Kafka's tools store: a 130-bit number in base 36, as ASCII."""
    return bool(re.fullmatch(rb"[0-9a-z]{1,26}", salt)) and int(salt, 36) < 2**SALT_BITS


def add_scram_user(broker: SecuredBroker, user: str, secret: str, directory: Path) -> None:
    """`oncelog configs --add-config 'SCRAM-SHA-256=[password=...]'` as admin: the default parameters."""
    command_config = directory / "admin.properties"
    command_config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=admin\n"
                              f"sasl.password={password('admin')}\n")
    subprocess.run(
        [str(Path(sys.executable).with_name("oncelog")), "configs", "--alter", "--entity-type", "users",
         "--entity-name", user, "--add-config", f"SCRAM-SHA-256=[password={secret}]",
         "--bootstrap-server", broker.bootstrap_servers, "--command-config", str(command_config)],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, check=True, timeout=60,
        env={k: v for k, v in os.environ.items() if k != "ONCELOG_BOOTSTRAP"})


def scram_first(bootstrap: str, user: str, mechanism: str = "SCRAM-SHA-256") -> tuple[bytes, int]:
    """The salt and iteration count of the broker's server-first message to `user`."""
    with WireClient.connect(bootstrap, timeout=EXCHANGE_TIMEOUT) as client:
        assert client.request(SaslHandshakeRequest(mechanism=mechanism)).error_code == ErrorCode.none
        answer = client.request(SaslAuthenticateRequest(auth_bytes=f"n,,n={user},r=fyko+d2lbbFgONRv9qkxdawL".encode()))
        assert answer.error_code == ErrorCode.none, answer.error_message
    fields = dict(field.split("=", 1) for field in answer.auth_bytes.decode().split(","))
    return base64.b64decode(fields["s"]), int(fields["i"])


def scram_exchange(bootstrap: str, user: str, secret: str) -> tuple[ErrorCode, str | None]:
    """A whole SCRAM-SHA-256 exchange as `user` with `secret`: the final answer's error and message."""
    scram = ScramSaslClient("SCRAM-SHA-256", user, secret)
    with WireClient.connect(bootstrap, timeout=EXCHANGE_TIMEOUT) as client:
        assert client.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-256")).error_code == ErrorCode.none
        first = client.request(SaslAuthenticateRequest(auth_bytes=scram.initial_response()))
        assert first.error_code == ErrorCode.none, first.error_message
        final = client.request(SaslAuthenticateRequest(auth_bytes=scram.evaluate(first.auth_bytes) or b""))
        return final.error_code, final.error_message


def test_an_unknown_scram_user_gets_the_server_first_message_of_a_user_stored_with_the_defaults(
        secured, tmp_path):
    """The attacker's probe: a stored user's salt was librdkafka's 64 random bytes (88
    base64 characters), an unknown user's a 26-character base-36 number."""
    stored = unique("scram-stored")
    add_scram_user(secured, stored, "stored-secret", tmp_path)
    stored_salt, stored_iterations = scram_first(secured.bootstrap_servers, stored)
    unknown = [unique("scram-nobody") for _ in range(12)]
    unknown_firsts = [scram_first(secured.bootstrap_servers, user) for user in unknown]
    assert (kafka_salt_form(stored_salt), stored_iterations) == (True, 4096)
    assert [(kafka_salt_form(salt), iterations) for salt, iterations in unknown_firsts] == [(True, 4096)] * 12
    # One user, the same salt on every attempt, as a stored user's.
    assert [scram_first(secured.bootstrap_servers, user) for user in unknown] == unknown_firsts
    assert scram_first(secured.bootstrap_servers, stored) == (stored_salt, stored_iterations)
    assert scram_first(secured.bootstrap_servers, unknown[0], "SCRAM-SHA-512")[1] == 4096


def test_an_unknown_scram_user_fails_the_whole_exchange_as_a_wrong_password(secured, tmp_path):
    stored = unique("scram-known")
    add_scram_user(secured, stored, "right-secret", tmp_path)
    assert scram_exchange(secured.bootstrap_servers, stored, "right-secret") == (ErrorCode.none, None)
    wrong_password = scram_exchange(secured.bootstrap_servers, stored, "wrong-secret")
    unknown_user = scram_exchange(secured.bootstrap_servers, unique("scram-nobody"), "wrong-secret")
    assert wrong_password[0] == ErrorCode.sasl_authentication_failed
    assert unknown_user == wrong_password


def test_an_unknown_scram_users_salt_outlives_a_broker_restart(tmp_path):
    """The salt comes from a secret the broker keeps in its first log dir: one drawn anew
    at each start would change an unknown user's salt, and a stored user's never changes."""
    port = free_port()
    config = {"listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}", "sasl.enabled.mechanisms": "SCRAM-SHA-256"}
    broker = BrokerProcess(tmp_path / "data", config, port=port)
    with broker:
        before = scram_first(broker.bootstrap_servers, "nobody-at-all")
    with broker:
        after = scram_first(broker.bootstrap_servers, "nobody-at-all")
    assert after == before and kafka_salt_form(before[0])
    key_file = tmp_path / "data" / "scram-fake-salt.key"
    assert key_file.stat().st_mode & 0o777 == 0o600 and key_file.stat().st_size == 32


# -- DescribeConfigs: every secret is sensitive -----------------------------------------------


def test_describe_configs_sends_no_secret_and_marks_every_password_key_sensitive(secured):
    """ssl.truststore.certificates was sent as it was set, and listener overrides
    (listener.name.<l>.<key>) were not described at all, where Kafka describes them as
    sensitive."""
    request = DescribeConfigsRequest(resources=(DescribeConfigsResource(
        resource_type=i8(4), resource_name=str(secured.running.broker.node_id), configuration_keys=None),),
        include_synonyms=True, include_documentation=False)
    with signed_in(secured, "admin") as admin:
        admin.send_raw(encode_request(request, 77))
        frame = admin.read_frame()
    assert b"edges-secret" not in frame and password("alice").encode() not in frame
    (result,) = decode_response(request, frame, 77).results
    assert result.error_code == ErrorCode.none
    described = {entry.name: entry for entry in result.configs}
    expected = [*PASSWORD_KEYS, *(LISTENER_PREFIX + key for key in PASSWORD_KEYS),
                LISTENER_PREFIX + "plain.sasl.jaas.config", LISTENER_PREFIX + "scram-sha-256.sasl.jaas.config"]
    missing = [key for key in expected if key not in described]
    assert not missing, f"not described: {missing}"
    shown = [(key, described[key].value, described[key].is_sensitive, described[key].config_type) for key in expected
             if (described[key].value, described[key].is_sensitive, described[key].config_type) != (None, True, 9)]
    assert not shown, f"not answered as sensitive PASSWORD keys: {shown}"
    synonyms = [(key, synonym.name, synonym.value) for key in expected for synonym in described[key].synonyms
                if synonym.value is not None]
    assert not synonyms
    keystore = described[LISTENER_PREFIX + "ssl.keystore.password"]
    assert [(s.name, s.source) for s in keystore.synonyms] == [
        (LISTENER_PREFIX + "ssl.keystore.password", 4), ("ssl.keystore.password", 4), ("ssl.keystore.password", 5)]
    receive_size = described[LISTENER_PREFIX + "sasl.server.max.receive.size"]  # a listener key that is no secret
    assert (receive_size.value, receive_size.is_sensitive) == ("524288", False)
