"""Client quotas on a real broker with real clients: a noisy confluent-kafka producer held
to its producer_byte_rate while another keeps its rate, a consumer held to its
consumer_byte_rate (and still reading every record), request_percentage muting a busy
connection for the throttle time it was told, Kafka's precedence between a user's and a
client id's quota, DescribeClientQuotas and AlterClientQuotas round trips with their
errors and authorization, quotas surviving a restart, and `oncelog configs` for clients
and users as kafka-configs.sh prints them.

The brokers that throttle measure rates over 2 windows of 1 s (Kafka's default is 11):
a client new to its quota gets through 1 s worth of it at once, not 10, and a burst is
forgotten after 2 s, not 11, so a few seconds show a rate held to its quota. Quotas
apply to the whole broker: each test names its own client ids, and a test that sets a
default has a broker of its own.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.alter_client_quotas.v1 import request as alter_v1
from kio.schema.describe_client_quotas.v1 import request as describe_v1
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.types import TopicName
from kio.static.primitive import f64, i8, i32, i32Timedelta, i64

from oncelog import EmbeddedBroker
from oncelog.cli import main
from oncelog.client.wire import Cluster
from oncelog.protocol.client import WireClient, decode_response, encode_request
from oncelog.security.acl import AclOperation, ResourceType
from tests.support.kafka import create_topic
from tests.support.secured import secured_broker

THROTTLING = {"quota.window.num": "2", "quota.window.size.seconds": "1"}
EXACT, DEFAULT, SPECIFIED = 0, 1, 2
# An entity as {"user": ..., "client-id": ...}; a name of None is <default>.
Entity = Mapping[str, str | None]


@pytest.fixture(scope="module")
def throttling_broker(tmp_path_factory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path_factory.mktemp("quota-broker"), THROTTLING) as running:
        yield running


def alter(bootstrap: str, *entries: tuple[Entity, Mapping[str, float | None]], validate_only: bool = False,
          properties: Mapping[str, str] | None = None) -> list[tuple[ErrorCode, str | None]]:
    """AlterClientQuotas: each (entity, {key: value, or None to remove}); each entry's (error, message)."""
    request = alter_v1.AlterClientQuotasRequest(entries=tuple(alter_v1.EntryData(
        entity=tuple(alter_v1.EntityData(entity_type=kind, entity_name=name) for kind, name in entity.items()),
        ops=tuple(alter_v1.OpData(key=key, value=f64(float(value or 0.0)), remove=value is None)
                  for key, value in ops.items()))
        for entity, ops in entries), validate_only=validate_only)
    with Cluster(bootstrap, properties=properties) as cluster:
        response = cluster.request(request)
    return [(entry.error_code, entry.error_message) for entry in response.entries]


def set_quotas(bootstrap: str, entity: Entity, **quotas: float | None) -> None:
    assert alter(bootstrap, (entity, quotas)) == [(ErrorCode.none, None)]


def describe(bootstrap: str, *components: tuple[str, int, str | None], strict: bool = False,
             properties: Mapping[str, str] | None = None):
    """DescribeClientQuotas: (error code, {((type, name), ...): {key: value}} or None)."""
    request = describe_v1.DescribeClientQuotasRequest(components=tuple(
        describe_v1.ComponentData(entity_type=kind, match_type=i8(match_type), match=match)
        for kind, match_type, match in components), strict=strict)
    with Cluster(bootstrap, properties=properties) as cluster:
        response = cluster.request(request)
    if response.entries is None:
        return response.error_code, None
    return response.error_code, {tuple((data.entity_type, data.entity_name) for data in entry.entity):
                                 {value.key: value.value for value in entry.values} for entry in response.entries}


class Traffic:
    """What one client delivered or read, when (seconds from its start), and the throttle
    times librdkafka reported (its throttle_cb)."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.events: list[tuple[float, int]] = []
        self.throttles: list[float] = []

    def add(self, size: int) -> None:
        self.events.append((time.monotonic() - self.started, size))

    def rate(self, start_s: float, end_s: float) -> float:
        """Bytes per second between two moments."""
        return sum(size for at, size in self.events if start_s <= at < end_s) / (end_s - start_s)


def produce_for(bootstrap: str, topic: str, client_id: str, seconds: float, traffic: Traffic) -> None:
    """Produce 10 KB records as fast as the producer takes them, for `seconds`."""
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                         "batch.size": 32768, "queue.buffering.max.kbytes": 2048,
                         "throttle_cb": lambda event: traffic.throttles.append(event.throttle_time)})
    value = b"v" * 10_000
    traffic.started = time.monotonic()

    def delivered(error, message) -> None:
        if error is None:
            traffic.add(len(message.value()))

    while time.monotonic() - traffic.started < seconds:
        try:
            producer.produce(topic, value, on_delivery=delivered)
        except BufferError:  # the queue is full: wait for deliveries
            producer.poll(0.01)
            continue
        producer.poll(0)
    producer.purge()  # what is still queued after the run does not count
    producer.flush(5)


def test_a_noisy_producer_is_throttled_to_its_quota_while_another_keeps_its_rate(throttling_broker):
    bootstrap, quota = throttling_broker.bootstrap_servers, 100 * 1024
    create_topic(bootstrap, "quota-noisy")
    set_quotas(bootstrap, {"client-id": "noisy"}, producer_byte_rate=quota)
    noisy, quiet = Traffic(), Traffic()
    runs = [threading.Thread(target=produce_for, args=(bootstrap, "quota-noisy", client_id, 5.0, traffic))
            for client_id, traffic in (("noisy", noisy), ("quiet", quiet))]
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    # The noisy producer gets its quota (and the 1 s of it a new client gets at once);
    # the other one is not held back at all.
    assert 0.7 * quota < noisy.rate(0.0, 5.0) < 1.6 * quota, noisy.rate(0.0, 5.0)
    assert noisy.throttles and max(noisy.throttles) > 0
    assert quiet.rate(0.0, 5.0) > 10 * quota, quiet.rate(0.0, 5.0)
    assert quiet.throttles == []


def test_a_consumer_over_its_consumer_byte_rate_is_throttled_and_still_reads_every_record(throttling_broker):
    bootstrap, quota = throttling_broker.bootstrap_servers, 100 * 1024
    create_topic(bootstrap, "quota-reading")
    producer = Producer({"bootstrap.servers": bootstrap, "batch.size": 16384})  # a batch per record
    values = [f"{i:05d}".encode() * 2000 for i in range(30)]  # 30 records of 10 KB: 300 KB
    for value in values:
        producer.produce("quota-reading", value)
    assert producer.flush(10) == 0
    set_quotas(bootstrap, {"client-id": "slow-reader"}, consumer_byte_rate=quota)

    def read_all(client_id: str) -> tuple[float, list[bytes], Traffic]:
        traffic = Traffic()
        consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id, "group.id": client_id,
                             "enable.auto.commit": False, "max.partition.fetch.bytes": 65536,
                             "throttle_cb": lambda event: traffic.throttles.append(event.throttle_time)})
        consumer.assign([TopicPartition("quota-reading", 0, 0)])
        read: list[bytes] = []
        started = time.monotonic()
        while len(read) < len(values) and time.monotonic() - started < 20:
            message = consumer.poll(0.1)
            if message is not None and message.error() is None and (value := message.value()) is not None:
                read.append(value)
        elapsed = time.monotonic() - started
        consumer.close()
        return elapsed, read, traffic

    slow_s, slow_read, slow = read_all("slow-reader")
    fast_s, fast_read, fast = read_all("fast-reader")
    assert slow_read == values and fast_read == values  # throttled fetches are empty, never lossy
    # 1 s of quota (100 KB, also the most one Fetch may return) at once, the other 200 KB
    # at 100 KB/s: 2 s or more.
    assert slow_s > 1.4, slow_s
    assert slow.throttles and fast.throttles == []
    assert fast_s < slow_s / 2, (fast_s, slow_s)


def test_a_throttled_fetch_that_would_open_a_session_gets_no_partitions_and_no_session(throttling_broker):
    bootstrap = throttling_broker.bootstrap_servers
    create_topic(bootstrap, "quota-session")
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce("quota-session", b"s" * 10_000)
    assert producer.flush(10) == 0
    set_quotas(bootstrap, {"client-id": "session-reader"}, consumer_byte_rate=1000)

    def fetch(client: WireClient, correlation_id: int):
        request = fetch_v12.FetchRequest(
            max_wait=i32Timedelta.parse(datetime.timedelta(0)), min_bytes=i32(1), session_id=i32(0),
            session_epoch=i32(0),
            topics=(fetch_v12.FetchTopic(topic=TopicName("quota-session"), partitions=(fetch_v12.FetchPartition(
                partition=i32(0), fetch_offset=i64(0), partition_max_bytes=i32(1 << 20)),)),),
            forgotten_topics_data=(), rack_id="")
        client.send_raw(encode_request(request, correlation_id, client_id="session-reader"))
        return decode_response(request, client.read_frame(), correlation_id)

    with WireClient.connect(bootstrap) as client:
        first = fetch(client, 1)  # one 10 KB batch, more than the quota's window holds: throttled at once
    assert first.throttle_time > datetime.timedelta(0)
    assert (first.error_code, first.session_id, first.responses) == (ErrorCode.none, 0, ())
    cache = throttling_broker.broker.fetch_sessions
    assert cache is not None and len(cache) == 0  # the session the fetch opened is closed again


def test_request_percentage_throttles_a_busy_client_and_mutes_its_connection_for_that_long(throttling_broker):
    bootstrap = throttling_broker.bootstrap_servers
    set_quotas(bootstrap, {"client-id": "busy"}, request_percentage=0.1)  # 1 ms of the broker's thread a second
    request = MetadataRequest(topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False)

    def metadata_for(client_id: str, seconds: float) -> list[tuple[float, int]]:
        """Metadata requests one after another: when each was answered, and its throttle time (ms)."""
        client = WireClient.connect(bootstrap)
        answers: list[tuple[float, int]] = []
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            client.send_raw(encode_request(request, len(answers), client_id=client_id))
            response = decode_response(request, client.read_frame(), len(answers))
            answers.append((time.monotonic(), response.throttle_time // datetime.timedelta(milliseconds=1)))
        return answers

    unlimited = metadata_for("calm", 0.5)
    answers = metadata_for("busy", 3.0)
    assert all(throttle_ms == 0 for _answered, throttle_ms in unlimited)
    throttled = [(index, throttle_ms) for index, (_answered, throttle_ms) in enumerate(answers) if throttle_ms > 0]
    assert throttled, f"{len(answers)} requests, none throttled"
    assert max(throttle_ms for _index, throttle_ms in throttled) <= 1000  # at most one window, as Kafka
    # Muted: the request after a throttled answer waits out the throttle time (KIP-219).
    for index, throttle_ms in throttled:
        if index + 1 < len(answers):
            waited_s = answers[index + 1][0] - answers[index][0]
            assert waited_s >= throttle_ms / 1000 - 0.02, (index, throttle_ms, waited_s)
    assert len(answers) < len(unlimited) * 6 / 5, (len(answers), len(unlimited))  # a fifth of the rate at most


def test_a_users_quota_wins_over_a_default_users_client_quota_and_quotas_survive_a_restart(tmp_path):
    settings = {"quota.window.num": "2", "quota.window.size.seconds": "1"}
    with EmbeddedBroker(tmp_path / "broker", settings) as broker:
        bootstrap = broker.bootstrap_servers
        create_topic(bootstrap, "quota-precedence")
        # Plaintext clients are User:ANONYMOUS: /config/users/ANONYMOUS comes before
        # /config/users/<default>/clients/probe in Kafka's order.
        set_quotas(bootstrap, {"user": "ANONYMOUS"}, producer_byte_rate=50_000)
        set_quotas(bootstrap, {"user": None, "client-id": "probe"}, producer_byte_rate=1e9)
    with EmbeddedBroker(tmp_path / "broker", settings) as broker:
        bootstrap = broker.bootstrap_servers
        assert describe(bootstrap, ("user", SPECIFIED, None)) == (ErrorCode.none, {
            (("user", None), ("client-id", "probe")): {"producer_byte_rate": 1e9},
            (("user", "ANONYMOUS"),): {"producer_byte_rate": 50_000.0}})
        assert produce_throttle_ms(bootstrap, "probe") > 0  # 100 KB against 50 KB/s
        # /config/users/ANONYMOUS/clients/<default> comes before /config/users/ANONYMOUS.
        set_quotas(bootstrap, {"user": "ANONYMOUS", "client-id": None}, producer_byte_rate=1e9)
        assert produce_throttle_ms(bootstrap, "probe") == 0


def produce_throttle_ms(bootstrap: str, client_id: str) -> float:
    """The throttle time librdkafka is told after one 100 KB record (0: none)."""
    throttles: list[float] = []
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id,
                         "throttle_cb": lambda event: throttles.append(event.throttle_time)})
    producer.produce("quota-precedence", b"p" * 100_000)
    assert producer.flush(10) == 0
    producer.poll(0.1)  # throttle events are served by poll
    return max(throttles, default=0.0)


def test_describe_and_alter_round_trip_with_defaults_filters_and_validate_only(broker):
    bootstrap = broker.bootstrap_servers
    assert alter(bootstrap,
                 ({"client-id": "c1"}, {"producer_byte_rate": 1024.0, "request_percentage": 12.5}),
                 ({"client-id": None}, {"consumer_byte_rate": 2048.0}),
                 ({"user": "alice", "client-id": None}, {"controller_mutation_rate": 3.5}),
                 ({"user": None}, {"producer_byte_rate": 4096.0})) == [(ErrorCode.none, None)] * 4
    assert describe(bootstrap, ("client-id", SPECIFIED, None), strict=True) == (ErrorCode.none, {
        (("client-id", None),): {"consumer_byte_rate": 2048.0},
        (("client-id", "c1"),): {"producer_byte_rate": 1024.0, "request_percentage": 12.5}})
    assert describe(bootstrap, ("client-id", DEFAULT, None)) == (ErrorCode.none, {
        (("client-id", None),): {"consumer_byte_rate": 2048.0},
        (("user", "alice"), ("client-id", None)): {"controller_mutation_rate": 3.5}})
    assert describe(bootstrap, ("user", EXACT, "alice"), ("client-id", SPECIFIED, None), strict=True)[1] == {
        (("user", "alice"), ("client-id", None)): {"controller_mutation_rate": 3.5}}
    assert len(describe(bootstrap)[1] or {}) == 4

    # validate_only checks and changes nothing; removing the last key removes the entity.
    assert alter(bootstrap, ({"client-id": "c2"}, {"producer_byte_rate": 1.0}), validate_only=True) == [
        (ErrorCode.none, None)]
    set_quotas(bootstrap, {"client-id": "c1"}, producer_byte_rate=None, request_percentage=None)
    assert describe(bootstrap, ("client-id", EXACT, "c1")) == (ErrorCode.none, {})
    assert describe(bootstrap, ("client-id", EXACT, "c2")) == (ErrorCode.none, {})


def test_alterations_and_filters_kafka_refuses_get_its_errors(broker):
    bootstrap = broker.bootstrap_servers
    assert alter(bootstrap,
                 ({"client-id": "ok"}, {"producer_byte_rate": 10.0}),
                 ({"client-id": "bad-key"}, {"retention.ms": 10.0}),
                 ({"client-id": "negative"}, {"consumer_byte_rate": -5.0}),
                 ({"client-id": "fraction"}, {"producer_byte_rate": 1.5}),
                 ({"group": "g"}, {"producer_byte_rate": 1.0}),
                 ({"ip": "10.0.0.1", "user": "u"}, {"connection_creation_rate": 1.0}),
                 ({"user": ""}, {"producer_byte_rate": 1.0})) == [
        (ErrorCode.none, None),
        (ErrorCode.invalid_request, "Invalid configuration key retention.ms"),
        (ErrorCode.invalid_request, "Quota consumer_byte_rate must be greater than 0"),
        (ErrorCode.invalid_request, "producer_byte_rate cannot be a fractional value."),
        (ErrorCode.invalid_request, "Unhandled client quota entity type: group"),
        (ErrorCode.invalid_request,
         "Invalid quota entity combination, IP entity should not be combined with User or ClientId"),
        (ErrorCode.invalid_request, "Empty user not supported"),
    ]
    assert set(describe(bootstrap)[1] or {}) == {(("client-id", "ok"),)}  # the refused entries changed nothing
    assert describe(bootstrap, ("client-id", EXACT, None)) == (ErrorCode.invalid_request, None)
    assert describe(bootstrap, ("group", SPECIFIED, None)) == (ErrorCode.unsupported_version, None)
    assert describe(bootstrap, ("user", SPECIFIED, None), ("ip", SPECIFIED, None)) == (
        ErrorCode.invalid_request, None)


def test_quota_requests_need_cluster_configs_acls_and_a_users_quota_follows_its_sasl_principal(tmp_path):
    with secured_broker(tmp_path / "secured", THROTTLING) as secured:
        bootstrap = secured.bootstrap_servers

        def as_user(user: str) -> dict[str, str]:
            return {key: str(value) for key, value in secured.client(user).items() if key != "bootstrap.servers"}

        entry = ({"user": "alice"}, {"producer_byte_rate": 20_000.0})
        assert alter(bootstrap, entry, properties=as_user("alice")) == [
            (ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")]
        assert describe(bootstrap, properties=as_user("alice")) == (ErrorCode.cluster_authorization_failed, None)
        secured.allow("alice", ResourceType.CLUSTER, "kafka-cluster", AclOperation.ALTER_CONFIGS,
                      AclOperation.DESCRIBE_CONFIGS)
        assert alter(bootstrap, entry, properties=as_user("alice")) == [(ErrorCode.none, None)]
        assert describe(bootstrap, properties=as_user("alice"))[1] == {(("user", "alice"),): {
            "producer_byte_rate": 20_000.0}}

        secured.create_topic("quota-users")
        secured.allow("User:*", ResourceType.TOPIC, "quota-users", AclOperation.WRITE)
        throttled: dict[str, list[float]] = {"alice": [], "bob": []}
        for user, throttles in throttled.items():
            producer = Producer(secured.client(user, **{"client.id": "same-client",
                                                        "throttle_cb": lambda e, t=throttles: t.append(
                                                            e.throttle_time)}))
            for _ in range(10):
                producer.produce("quota-users", b"u" * 10_000)
            assert producer.flush(10) == 0
            producer.poll(0.1)
        assert throttled["alice"] and not throttled["bob"]  # 100 KB against alice's 20 KB/s; bob has no quota


def test_oncelog_configs_alters_and_describes_client_and_user_quotas_like_kafka_configs(broker, capsys):
    bootstrap = broker.bootstrap_servers

    def configs(*args: str) -> tuple[int, str, str]:
        code = main(["configs", *args, "--bootstrap-server", bootstrap])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    assert configs("--alter", "--entity-type", "clients", "--entity-name", "c1", "--add-config",
                   "producer_byte_rate=1024,request_percentage=12.5") == (
        0, "Completed updating config for client c1.\n", "")
    assert configs("--alter", "--client-defaults", "--add-config", "consumer_byte_rate=20000000") == (
        0, "Completed updating default config for clients in the cluster.\n", "")
    assert configs("--alter", "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
                   "--entity-default", "--add-config", "controller_mutation_rate=2")[0] == 0
    # Quotas and SCRAM credentials of one user in one command (kafka-configs.sh refuses it).
    assert configs("--alter", "--user", "bob", "--add-config",
                   "SCRAM-SHA-256=[iterations=4096,password=bob-pw],producer_byte_rate=2048") == (
        0, "Completed updating config for user bob.\n", "")

    assert configs("--describe", "--entity-type", "clients") == (0, (
        "Quota configs for the default client-id are consumer_byte_rate=2.0E7\n"
        "Quota configs for client-id 'c1' are producer_byte_rate=1024.0, request_percentage=12.5\n"), "")
    assert configs("--describe", "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients")[1] \
        == "Quota configs for user-principal 'alice', the default client-id are controller_mutation_rate=2.0\n"
    assert configs("--describe", "--entity-type", "users", "--entity-name", "bob") == (0, (
        "Quota configs for user-principal 'bob' are producer_byte_rate=2048.0\n"
        "SCRAM credential configs for user-principal 'bob' are SCRAM-SHA-256=iterations=4096\n"), "")

    assert configs("--alter", "--entity-type", "clients", "--entity-name", "c1", "--delete-config",
                   "request_percentage")[0] == 0
    assert configs("--describe", "--client", "c1")[1] == (
        "Quota configs for client-id 'c1' are producer_byte_rate=1024.0\n")
    assert configs("--alter", "--client", "c1", "--delete-config", "consumer_byte_rate") == (
        1, "", "oncelog: error: Invalid config(s): consumer_byte_rate\n")
    assert configs("--alter", "--client", "c1", "--add-config", "retention.ms=1") == (
        1, "", ("oncelog: error: Only quota configs can be added for 'clients' using --bootstrap-server. "
                "Unexpected config names: Set(retention.ms)\n"))
    assert configs("--alter", "--client", "c1", "--add-config", "producer_byte_rate=fast") == (
        1, "", "oncelog: error: Cannot parse quota configuration value for producer_byte_rate: fast\n")
    assert configs("--alter", "--client", "c1", "--add-config", "producer_byte_rate=-1") == (
        1, "", "oncelog: error: INVALID_REQUEST: Quota producer_byte_rate must be greater than 0\n")
    assert configs("--alter", "--user-defaults", "--add-config", "SCRAM-SHA-256=[password=x]") == (
        1, "", ("oncelog: error: The use of --entity-default or --user-defaults is not allowed with User SCRAM "
                "Credentials using --bootstrap-server.\n"))
    assert configs("--alter", "--entity-type", "users", "--entity-type", "clients", "--entity-name", "c1",
                   "--add-config", "producer_byte_rate=1")[2] == (
        "oncelog: error: --entity-name or --entity-default must be specified with each --entity-type for --alter\n")


def test_the_quota_file_is_in_the_first_log_dir(broker):
    set_quotas(broker.bootstrap_servers, {"client-id": "kept"}, producer_byte_rate=1.0)
    assert (Path(broker.data_dir) / "__client_quotas.meta").is_file()
