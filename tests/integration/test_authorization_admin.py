"""What the metadata, admin and group APIs check with an authorizer on, as Kafka's
KafkaApis (and, for the APIs Kafka forwards, its controller's ControllerApis) checks it:
each API allowed and refused, with Kafka's error codes, through confluent-kafka and
kafka-python where a client exposes the API, and at the wire (oncelog's WireClient,
authenticated with SASL/PLAIN) where a client hides the answer's details (authorized
operations bits, which topics a refused entry names, per-partition mixes).

Authorized operations are also checked without an authorizer, where Kafka answers every
operation a resource type supports.

One broker for the module: every test uses its own topics and groups. alice, bob and
carol never get a cluster ACL; the users with one each have their own:
dora Cluster DESCRIBE, otto Cluster ALTER, cora Cluster CREATE, dani Cluster DELETE,
conf Cluster ALTER_CONFIGS (which also allows DESCRIBE_CONFIGS).
"""

from __future__ import annotations

import datetime
import time
import uuid
from contextlib import contextmanager

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    ElectionType,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AclBinding as ClientAclBinding
from confluent_kafka.admin import AclOperation as ClientAclOperation
from confluent_kafka.admin import (
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from confluent_kafka.admin import ResourceType as ClientResourceType
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaPythonTopicPartition
from kafka.errors import ClusterAuthorizationFailedError, NoError, TopicAuthorizationFailedError
from kafka.structs import TopicPartitionReplica
from kio.schema.create_topics.v7 import request as create_topics_v7
from kio.schema.delete_topics.v6 import request as delete_topics_v6
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.describe_log_dirs.v4.request import DescribeLogDirsRequest
from kio.schema.describe_topic_partitions.v0 import request as describe_partitions_v0
from kio.schema.describe_user_scram_credentials.v0 import request as describe_scram_v0
from kio.schema.errors import ErrorCode
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.incremental_alter_configs.v1 import request as incremental_v1
from kio.schema.join_group.v9 import request as join_v9
from kio.schema.leave_group.v5 import request as leave_v5
from kio.schema.metadata.v10 import request as metadata_v10
from kio.schema.offset_commit.v9 import request as commit_v9
from kio.schema.offset_delete.v0 import request as offset_delete_v0
from kio.schema.offset_fetch.v8 import request as fetch_offsets_v8
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.schema.sync_group.v5 import request as sync_v5

from oncelog.protocol.client import WireClient
from oncelog.security.acl import (
    AUTHORIZED_OPERATIONS_OMITTED,
    NO_AUTHORIZER_OPERATIONS_BITS,
    AclOperation,
    PatternType,
    ResourceType,
    authorized_operations_bits,
)
from tests.support.coordinators import find_coordinators
from tests.support.secured import USERS, password, secured_broker

CLUSTER_USERS = {
    "dora": AclOperation.DESCRIBE,
    "otto": AclOperation.ALTER,
    "cora": AclOperation.CREATE,
    "dani": AclOperation.DELETE,
    "conf": AclOperation.ALTER_CONFIGS,
}
TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
READ, DESCRIBE, DELETE, ALTER = AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.ALTER
CREATE = AclOperation.CREATE
DESCRIBE_CONFIGS, ALTER_CONFIGS = AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS
ZERO_UUID = uuid.UUID(int=0)
BROKER_LOGGER = 8


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    users = " ".join(f'user_{user}="{password(user)}"' for user in (*USERS, *CLUSTER_USERS))
    config = {
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};",
        "group.initial.rebalance.delay.ms": "0",
    }
    with secured_broker(tmp_path_factory.mktemp("authorization-admin"), config) as broker:
        find_coordinators(broker.running)
        admin = broker.admin()
        bindings = [ClientAclBinding(ClientResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                                     f"User:{user}", "*", ClientAclOperation[operation.name], AclPermissionType.ALLOW)
                    for user, operation in CLUSTER_USERS.items()]
        for future in admin.create_acls(bindings).values():
            future.result(10)
        yield broker


@contextmanager
def wire(secured, user):
    """A WireClient authenticated as `user` (SASL/PLAIN)."""
    with WireClient.connect(secured.bootstrap_servers) as client:
        assert client.request(SaslHandshakeRequest(mechanism="PLAIN")).error_code == ErrorCode.none
        answer = client.request(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{password(user)}".encode()))
        assert answer.error_code == ErrorCode.none, answer.error_message
        yield client


def kafka_python_admin(secured, user):
    return KafkaAdminClient(bootstrap_servers=secured.bootstrap_servers, security_protocol="SASL_PLAINTEXT",
                            sasl_mechanism="PLAIN", sasl_plain_username=user, sasl_plain_password=password(user),
                            request_timeout_ms=10000)


def outcome(future):
    """None when the future succeeded, else its Kafka error's name."""
    try:
        future.result(10)
    except KafkaException as error:
        return error.args[0].name()
    return None


def outcomes(futures):
    return {key: outcome(future) for key, future in futures.items()}


def is_zero(topic_id):
    """Whether a topic id is the zero UUID (which kio decodes as None)."""
    return topic_id is None or topic_id.int == 0


def bits(*operations):
    return authorized_operations_bits(operations)


def commit_as_admin(secured, group, offsets):
    """Commit {(topic, partition): offset} for `group`, as admin, with no member."""
    consumer = ConfluentConsumer(secured.client("admin", **{"group.id": group, "enable.auto.commit": False}))
    try:
        consumer.commit(offsets=[TopicPartition(topic, partition, offset)
                                 for (topic, partition), offset in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def topic_id(secured, name):
    with wire(secured, "admin") as client:
        answer = client.request(metadata_request([name]))
    (topic,) = answer.topics
    return topic.topic_id


def metadata_request(names, *, auto_create=False, operations=False):
    return metadata_v10.MetadataRequest(
        topics=None if names is None else tuple(metadata_v10.MetadataRequestTopic(topic_id=ZERO_UUID, name=name)
                                                for name in names),
        allow_auto_topic_creation=auto_create, include_cluster_authorized_operations=operations,
        include_topic_authorized_operations=operations)


# -- Metadata, DescribeTopicPartitions, DescribeCluster: what a principal may see --

def test_metadata_lists_only_describable_topics_and_refuses_named_ones(secured):
    for name in ("md-open", "md-secret"):
        secured.create_topic(name)
    secured.allow("alice", TOPIC, "md-open", READ)
    alice = AdminClient(secured.client("alice"))
    listed = alice.list_topics(timeout=10).topics
    assert "md-open" in listed and "md-secret" not in listed
    with wire(secured, "alice") as client:
        answer = client.request(metadata_request(["md-open", "md-secret", "md-missing"]))
        everything = client.request(metadata_request(None))
    # Existing or not, an undescribable topic is only TOPIC_AUTHORIZATION_FAILED, with no id.
    assert {(t.name, t.error_code, is_zero(t.topic_id)) for t in answer.topics if t.name != "md-open"} == {
        ("md-secret", ErrorCode.topic_authorization_failed, True),
        ("md-missing", ErrorCode.topic_authorization_failed, True),
    }
    assert {t.name for t in everything.topics} >= {"md-open"}
    assert {t.name for t in everything.topics} & {"md-secret"} == set()
    assert all(t.error_code == ErrorCode.none for t in everything.topics)


def test_metadata_auto_creates_a_topic_only_with_create_on_it_or_on_the_cluster(secured):
    secured.allow("alice", TOPIC, "auto-refused", DESCRIBE)
    secured.allow("alice", TOPIC, "auto-allowed", DESCRIBE, CREATE)
    secured.allow("cora", TOPIC, "auto-cluster-", DESCRIBE, pattern_type=PatternType.PREFIXED)
    with wire(secured, "alice") as client:
        alice = client.request(metadata_request(["auto-refused", "auto-allowed", "auto-hidden"], auto_create=True))
    with wire(secured, "cora") as client:
        cora = client.request(metadata_request(["auto-cluster-a", "auto-not-describable"], auto_create=True))
    assert {t.name: t.error_code for t in alice.topics} == {
        "auto-refused": ErrorCode.topic_authorization_failed,
        "auto-allowed": ErrorCode.none,
        "auto-hidden": ErrorCode.topic_authorization_failed,  # DESCRIBE is checked first
    }
    assert {t.name: t.error_code for t in cora.topics} == {
        "auto-cluster-a": ErrorCode.none,  # Cluster CREATE creates any topic
        "auto-not-describable": ErrorCode.topic_authorization_failed,
    }
    existing = AdminClient(secured.client("admin")).list_topics(timeout=10).topics
    assert {"auto-allowed", "auto-cluster-a"} <= set(existing)
    assert not {"auto-refused", "auto-hidden", "auto-not-describable"} & set(existing)


def test_metadata_answers_authorized_operations_when_asked(secured):
    secured.create_topic("mdops")
    secured.allow("alice", TOPIC, "mdops", READ)
    secured.allow("dora", TOPIC, "mdops", DESCRIBE)
    with wire(secured, "alice") as client:
        asked = client.request(metadata_request(["mdops", "mdops-secret"], operations=True))
        not_asked = client.request(metadata_request(["mdops"]))
    with wire(secured, "dora") as client:
        dora = client.request(metadata_request(["mdops"], operations=True))
    operations = {t.name: t.topic_authorized_operations for t in asked.topics}
    assert operations == {"mdops": bits(READ, DESCRIBE), "mdops-secret": AUTHORIZED_OPERATIONS_OMITTED}
    assert asked.cluster_authorized_operations == 0  # not allowed to DESCRIBE the cluster
    assert not_asked.topics[0].topic_authorized_operations == AUTHORIZED_OPERATIONS_OMITTED
    assert not_asked.cluster_authorized_operations == AUTHORIZED_OPERATIONS_OMITTED
    assert dora.topics[0].topic_authorized_operations == bits(DESCRIBE)
    assert dora.cluster_authorized_operations == bits(DESCRIBE)


def test_admin_client_describes_topics_and_cluster_with_authorized_operations(secured):
    secured.create_topic("dt-topic")
    secured.create_topic("dt-secret")
    secured.allow("alice", TOPIC, "dt-topic", READ, DESCRIBE_CONFIGS)
    alice = AdminClient(secured.client("alice"))
    described = alice.describe_topics(TopicCollection(["dt-topic", "dt-secret"]), include_authorized_operations=True)
    topic = described["dt-topic"].result(10)
    assert {operation.name for operation in topic.authorized_operations} == {"READ", "DESCRIBE", "DESCRIBE_CONFIGS"}
    assert outcome(described["dt-secret"]) == "TOPIC_AUTHORIZATION_FAILED"
    # No Cluster DESCRIBE: Kafka answers 0, no operation.
    assert not alice.describe_cluster(include_authorized_operations=True).result(10).authorized_operations
    dora = AdminClient(secured.client("dora"))
    cluster = dora.describe_cluster(include_authorized_operations=True).result(10)
    assert [operation.name for operation in cluster.authorized_operations] == ["DESCRIBE"]
    assert dora.describe_cluster().result(10).authorized_operations is None  # not asked for


def test_describe_topic_partitions_shows_only_describable_topics(secured):
    secured.create_topic("dtp-a", partitions=2)
    secured.create_topic("dtp-b")
    secured.allow("alice", TOPIC, "dtp-a", DESCRIBE)
    secured.allow("alice", TOPIC, "dtp-c", READ)  # a topic that does not exist
    with wire(secured, "alice") as client:
        named = client.request(describe_partitions_v0.DescribeTopicPartitionsRequest(
            topics=tuple(describe_partitions_v0.TopicRequest(name=name)
                         for name in ("dtp-d", "dtp-c", "dtp-b", "dtp-a")),
            response_partition_limit=2000, cursor=None))
        listed = client.request(describe_partitions_v0.DescribeTopicPartitionsRequest(
            topics=(), response_partition_limit=2000, cursor=None))
        # A refused topic takes no room under the limit and is no cursor's.
        limited = client.request(describe_partitions_v0.DescribeTopicPartitionsRequest(
            topics=tuple(describe_partitions_v0.TopicRequest(name=name) for name in ("dtp-a", "dtp-b", "dtp-c")),
            response_partition_limit=2, cursor=None))
    # The described topics first, in name order, then the refused ones, with no id.
    assert [(t.name, t.error_code, len(t.partitions), t.topic_authorized_operations) for t in named.topics] == [
        ("dtp-a", ErrorCode.none, 2, bits(DESCRIBE)),
        ("dtp-c", ErrorCode.unknown_topic_or_partition, 0, bits(READ, DESCRIBE)),
        ("dtp-b", ErrorCode.topic_authorization_failed, 0, AUTHORIZED_OPERATIONS_OMITTED),
        ("dtp-d", ErrorCode.topic_authorization_failed, 0, AUTHORIZED_OPERATIONS_OMITTED),
    ]
    assert all(is_zero(t.topic_id) for t in named.topics[2:])
    assert [t.name for t in listed.topics if t.name.startswith("dtp-")] == ["dtp-a"]
    assert [(t.name, t.error_code) for t in limited.topics] == [
        ("dtp-a", ErrorCode.none), ("dtp-b", ErrorCode.topic_authorization_failed)]
    assert limited.next_cursor is not None and limited.next_cursor.topic_name == "dtp-c"


def test_without_an_authorizer_every_supported_operation_is_authorized(shared_broker):
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap_servers})
    name = f"no-authorizer-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)
    group = f"no-authorizer-{uuid.uuid4().hex[:8]}"
    consumer = ConfluentConsumer({"bootstrap.servers": shared_broker.bootstrap_servers, "group.id": group})
    consumer.commit(offsets=[TopicPartition(name, 0, 0)], asynchronous=False)
    consumer.close()

    topic = admin.describe_topics(TopicCollection([name]), include_authorized_operations=True)[name].result(10)
    cluster = admin.describe_cluster(include_authorized_operations=True).result(10)
    described = admin.describe_consumer_groups([group], include_authorized_operations=True)[group].result(10)
    assert {operation.name for operation in topic.authorized_operations} == {
        "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}
    assert {operation.name for operation in cluster.authorized_operations} == {
        "CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "ALTER", "DESCRIBE"}
    assert {operation.name for operation in described.authorized_operations} == {
        "READ", "DELETE", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}
    with WireClient.connect(shared_broker.bootstrap_servers) as client:
        answer = client.request(metadata_request([name], operations=True))
    assert answer.topics[0].topic_authorized_operations == NO_AUTHORIZER_OPERATIONS_BITS[TOPIC]
    assert answer.cluster_authorized_operations == NO_AUTHORIZER_OPERATIONS_BITS[ResourceType.CLUSTER]


# -- Topics: CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords --

def test_create_topics_needs_create_on_the_topic_or_the_cluster(secured):
    secured.allow("alice", TOPIC, "ct-mine", CREATE)
    alice = AdminClient(secured.client("alice"))
    cora = AdminClient(secured.client("cora"))
    assert outcomes(alice.create_topics([NewTopic("ct-mine", 1, 1), NewTopic("ct-other", 1, 1)])) == {
        "ct-mine": None, "ct-other": "TOPIC_AUTHORIZATION_FAILED"}
    assert outcomes(cora.create_topics([NewTopic("ct-by-cluster", 1, 1)])) == {"ct-by-cluster": None}


def test_created_topic_configs_are_answered_only_with_describe_configs(secured):
    secured.allow("alice", TOPIC, "ctc-", CREATE, pattern_type=PatternType.PREFIXED)
    secured.allow("alice", TOPIC, "ctc-described", DESCRIBE_CONFIGS)
    with wire(secured, "alice") as client:
        answer = client.request(create_topics_v7.CreateTopicsRequest(
            topics=tuple(create_topics_v7.CreatableTopic(name=name, num_partitions=1, replication_factor=1,
                                                         assignments=(), configs=())
                         for name in ("ctc-hidden", "ctc-described")),
            timeout=datetime.timedelta(seconds=10), validate_only=False))
    hidden, described = answer.topics
    assert (hidden.error_code, hidden.topic_config_error_code) == (ErrorCode.none,
                                                                   ErrorCode.topic_authorization_failed)
    assert (hidden.num_partitions, hidden.replication_factor, hidden.configs) == (-1, -1, ())
    assert not is_zero(hidden.topic_id)
    assert (described.error_code, described.topic_config_error_code) == (ErrorCode.none, ErrorCode.none)
    assert described.num_partitions == 1 and described.configs


def test_delete_topics_does_not_tell_an_undescribable_topic_exists(secured):
    for name in ("dl-hidden", "dl-seen", "dl-mine", "dl-by-cluster", "dl-id-seen", "dl-id-hidden"):
        secured.create_topic(name)
    for name in ("dl-seen", "dl-seen-missing", "dl-id-seen"):
        secured.allow("alice", TOPIC, name, DESCRIBE)
    secured.allow("alice", TOPIC, "dl-mine", DELETE)
    alice = AdminClient(secured.client("alice"))
    assert outcomes(alice.delete_topics(["dl-hidden", "dl-seen", "dl-mine", "dl-seen-missing", "dl-hidden-missing"])) \
        == {"dl-hidden": "TOPIC_AUTHORIZATION_FAILED", "dl-seen": "TOPIC_AUTHORIZATION_FAILED", "dl-mine": None,
            "dl-seen-missing": "UNKNOWN_TOPIC_OR_PART", "dl-hidden-missing": "TOPIC_AUTHORIZATION_FAILED"}
    # By id (ids are not secret): the name only when the topic may be described.
    seen_id, hidden_id = topic_id(secured, "dl-id-seen"), topic_id(secured, "dl-id-hidden")
    with wire(secured, "alice") as client:
        answer = client.request(delete_topics_v6.DeleteTopicsRequest(
            topics=tuple(delete_topics_v6.DeleteTopicState(name=None, topic_id=topic)
                         for topic in (seen_id, hidden_id, uuid.uuid4())),
            timeout=datetime.timedelta(seconds=10)))
    assert [(r.name, r.error_code) for r in answer.responses] == [
        ("dl-id-seen", ErrorCode.topic_authorization_failed),
        (None, ErrorCode.topic_authorization_failed),
        (None, ErrorCode.unknown_topic_id),
    ]
    dani = AdminClient(secured.client("dani"))  # Cluster DELETE deletes any topic
    assert outcomes(dani.delete_topics(["dl-by-cluster"])) == {"dl-by-cluster": None}


def test_create_partitions_needs_alter_on_the_topic(secured):
    secured.create_topic("cp-mine")
    secured.create_topic("cp-other")
    secured.allow("alice", TOPIC, "cp-mine", ALTER)
    secured.allow("alice", TOPIC, "cp-other", DESCRIBE)
    alice = AdminClient(secured.client("alice"))
    assert outcomes(alice.create_partitions([NewPartitions(name, 2) for name in ("cp-mine", "cp-other", "cp-none")])) \
        == {"cp-mine": None, "cp-other": "TOPIC_AUTHORIZATION_FAILED", "cp-none": "TOPIC_AUTHORIZATION_FAILED"}


def test_delete_records_needs_delete_on_the_topic(secured):
    secured.create_topic("dr-mine")
    secured.create_topic("dr-other")
    secured.allow("alice", TOPIC, "dr-mine", DELETE)
    secured.allow("alice", TOPIC, "dr-other", DESCRIBE)  # the client finds the leader, then is refused
    alice = AdminClient(secured.client("alice"))
    results = alice.delete_records([TopicPartition("dr-mine", 0, -1), TopicPartition("dr-other", 0, -1)])
    assert {partition.topic: outcome(future) for partition, future in results.items()} == {
        "dr-mine": None, "dr-other": "TOPIC_AUTHORIZATION_FAILED"}


# -- Configs: DescribeConfigs, AlterConfigs, IncrementalAlterConfigs, ListConfigResources --

def test_describe_configs_needs_describe_configs_on_the_topic_or_the_cluster(secured):
    secured.create_topic("dc-mine")
    secured.create_topic("dc-other")
    secured.allow("alice", TOPIC, "dc-mine", DESCRIBE_CONFIGS)
    secured.allow("alice", TOPIC, "dc-other", READ)  # READ does not allow DESCRIBE_CONFIGS
    broker_id = str(secured.running.broker.node_id)
    resources = [ConfigResource(ClientResourceType.TOPIC, "dc-mine"),
                 ConfigResource(ClientResourceType.TOPIC, "dc-other"),
                 ConfigResource(ClientResourceType.BROKER, broker_id)]
    alice = AdminClient(secured.client("alice"))
    conf = AdminClient(secured.client("conf"))  # Cluster ALTER_CONFIGS allows DESCRIBE_CONFIGS
    assert [outcome(future) for future in alice.describe_configs(resources).values()] == [
        None, "TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED"]
    broker = conf.describe_configs([resources[2]])[resources[2]].result(10)
    assert "log.retention.ms" in broker


def test_alter_configs_need_alter_configs_on_the_topic_or_the_cluster(secured):
    secured.create_topic("ac-mine")
    secured.create_topic("ac-other")
    secured.allow("alice", TOPIC, "ac-mine", ALTER_CONFIGS)
    secured.allow("alice", TOPIC, "ac-other", DESCRIBE_CONFIGS)
    broker_id = str(secured.running.broker.node_id)
    retention = [ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)]
    broker_retention = [ConfigEntry("log.retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)]

    def incremental():
        return [ConfigResource(ClientResourceType.TOPIC, "ac-mine", incremental_configs=retention),
                ConfigResource(ClientResourceType.TOPIC, "ac-other", incremental_configs=retention),
                ConfigResource(ClientResourceType.BROKER, broker_id, incremental_configs=broker_retention)]

    alice = AdminClient(secured.client("alice"))
    conf = AdminClient(secured.client("conf"))
    assert [outcome(f) for f in alice.incremental_alter_configs(incremental()).values()] == [
        None, "TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED"]
    assert [outcome(f) for f in conf.incremental_alter_configs(incremental()[2:], validate_only=True).values()] \
        == [None]
    legacy = [ConfigResource(ClientResourceType.TOPIC, "ac-mine", set_config={"retention.ms": "7200000"}),
              ConfigResource(ClientResourceType.TOPIC, "ac-other", set_config={"retention.ms": "7200000"}),
              ConfigResource(ClientResourceType.BROKER, broker_id, set_config={"log.retention.ms": "3600000"})]
    with pytest.deprecated_call():  # confluent-kafka's AlterConfigs, which kafka-python still sends
        altered = alice.alter_configs(legacy)
    assert [outcome(f) for f in altered.values()] == [
        None, "TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED"]
    # Broker loggers: IncrementalAlterConfigs authorizes them (then oncelog has none to change).
    loggers = incremental_v1.IncrementalAlterConfigsRequest(resources=(incremental_v1.AlterConfigsResource(
        resource_type=BROKER_LOGGER, resource_name=broker_id, configs=(incremental_v1.AlterableConfig(
            name="kafka.server", config_operation=0, value="DEBUG"),)),), validate_only=True)
    with wire(secured, "alice") as client:
        refused = client.request(loggers).responses[0].error_code
    with wire(secured, "conf") as client:
        allowed = client.request(loggers).responses[0].error_code
    assert (refused, allowed) == (ErrorCode.cluster_authorization_failed, ErrorCode.invalid_request)


def test_group_configs_need_alter_and_describe_configs_on_the_group(secured):
    secured.allow("alice", GROUP, "gc-mine", ALTER_CONFIGS)
    secured.allow("alice", GROUP, "gc-other", DESCRIBE_CONFIGS)
    session = [ConfigEntry("consumer.session.timeout.ms", "50000", incremental_operation=AlterConfigOpType.SET)]
    alice = AdminClient(secured.client("alice"))
    resources = [ConfigResource(ClientResourceType.GROUP, name, incremental_configs=session)
                 for name in ("gc-mine", "gc-other")]
    altered = alice.incremental_alter_configs(resources)
    assert [outcome(f) for f in altered.values()] == [None, "GROUP_AUTHORIZATION_FAILED"]
    described = alice.describe_configs([ConfigResource(ClientResourceType.GROUP, name)
                                        for name in ("gc-mine", "gc-other", "gc-none")])
    assert [outcome(f) for f in described.values()] == [None, None, "GROUP_AUTHORIZATION_FAILED"]


def test_list_config_resources_needs_cluster_describe_configs(secured):
    secured.create_topic("lcr-topic")
    alice = kafka_python_admin(secured, "alice")
    conf = kafka_python_admin(secured, "conf")
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            alice.list_config_resources()
        listed = conf.list_config_resources()
    finally:
        alice.close()
        conf.close()
    assert "lcr-topic" in listed["topic"]
    assert listed["broker"] == [str(secured.running.broker.node_id)]


# -- The cluster: log dirs, elections, reassignments, SCRAM credentials --

def test_log_dirs_need_cluster_describe_and_alter(secured):
    secured.create_topic("ld-topic")
    node = secured.running.broker.node_id
    log_dir = str(secured.running.broker.logs.log_dirs[0].absolute())
    with wire(secured, "alice") as client:
        refused = client.request(DescribeLogDirsRequest(topics=None))
    assert (refused.error_code, refused.results) == (ErrorCode.cluster_authorization_failed, ())
    replica = TopicPartitionReplica("ld-topic", 0, node)
    alice = kafka_python_admin(secured, "alice")
    dora = kafka_python_admin(secured, "dora")
    otto = kafka_python_admin(secured, "otto")
    try:
        (described,) = dora.describe_log_dirs(topic_partitions={"ld-topic": [0]})
        moved_by_alice = alice.alter_replica_log_dirs({replica: log_dir})
        moved_by_otto = otto.alter_replica_log_dirs({replica: log_dir})
    finally:
        for client in (alice, dora, otto):
            client.close()
    assert [t["name"] for d in described["log_dirs"] for t in d["topics"]] == ["ld-topic"]
    assert moved_by_alice == {replica: ClusterAuthorizationFailedError}
    assert moved_by_otto == {replica: NoError}


def test_elections_and_reassignments_need_cluster_alter_or_describe(secured):
    secured.create_topic("el-topic")
    secured.allow("alice", TOPIC, "el-topic", DESCRIBE)
    secured.allow("otto", TOPIC, "el-topic", DESCRIBE)
    partition = TopicPartition("el-topic", 0)
    alice = AdminClient(secured.client("alice"))
    otto = AdminClient(secured.client("otto"))
    assert outcome(alice.elect_leaders(ElectionType.PREFERRED, [partition])) == "CLUSTER_AUTHORIZATION_FAILED"
    elected = otto.elect_leaders(ElectionType.PREFERRED, [partition]).result(10)
    assert [error.name() for error in elected.values()] == ["ELECTION_NOT_NEEDED"]

    node = secured.running.broker.node_id
    reassigned = KafkaPythonTopicPartition("el-topic", 0)
    clients = {user: kafka_python_admin(secured, user) for user in ("alice", "otto", "dora")}
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            clients["alice"].alter_partition_reassignments({reassigned: [node]})
        with pytest.raises(ClusterAuthorizationFailedError):
            clients["alice"].list_partition_reassignments()
        with pytest.raises(ClusterAuthorizationFailedError):
            clients["dora"].alter_partition_reassignments({reassigned: [node]})  # DESCRIBE is not ALTER
        assert clients["otto"].alter_partition_reassignments({reassigned: [node]}) == {reassigned: None}
        assert clients["dora"].list_partition_reassignments() == {}
    finally:
        for client in clients.values():
            client.close()


def test_scram_credentials_need_cluster_alter_and_describe(secured):
    upsertion = UserScramCredentialUpsertion("scram-user", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                             b"scram-secret")
    alice = AdminClient(secured.client("alice"))
    otto = AdminClient(secured.client("otto"))
    assert outcomes(alice.alter_user_scram_credentials([upsertion])) == {
        "scram-user": "CLUSTER_AUTHORIZATION_FAILED"}
    assert outcomes(otto.alter_user_scram_credentials([upsertion])) == {"scram-user": None}
    # confluent-kafka 2.16 crashes on any top-level DescribeUserScramCredentials error
    # (librdkafka frees a message it did not allocate): kafka-python and the wire instead.
    with wire(secured, "alice") as client:
        refused = client.request(describe_scram_v0.DescribeUserScramCredentialsRequest(
            users=(describe_scram_v0.UserName(name="scram-user"),)))
    assert refused.error_code == ErrorCode.cluster_authorization_failed
    assert [result.error_code for result in refused.results] == [ErrorCode.cluster_authorization_failed]
    alice_python = kafka_python_admin(secured, "alice")
    dora = kafka_python_admin(secured, "dora")
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            alice_python.describe_user_scram_credentials(["scram-user"])
        described = dora.describe_user_scram_credentials(["scram-user"])
    finally:
        alice_python.close()
        dora.close()
    assert described["scram-user"]["error"] is None
    assert [info["iterations"] for info in described["scram-user"]["credential_infos"]] == [4096]


# -- Groups --

def first_poll_outcome(consumer, timeout=10.0):
    """The first record's value, or the first error, a consumer gets."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is None:
            continue
        return message.error() or message.value()
    raise AssertionError("the consumer got neither a record nor an error")


def test_a_consumer_group_member_needs_read_on_the_group(secured):
    secured.create_topic("cg-topic")
    producer = Producer(secured.client("admin"))
    producer.produce("cg-topic", b"hello")
    producer.flush(10)
    secured.allow("bob", TOPIC, "cg-topic", READ)
    secured.allow("bob", GROUP, "cg-member", READ)
    secured.allow("bob", GROUP, "cg-viewer", DESCRIBE)  # finds its coordinator, may not join
    member = ConfluentConsumer(secured.client("bob", **{"group.id": "cg-member", "auto.offset.reset": "earliest",
                                                        "enable.auto.commit": False}))
    member.subscribe(["cg-topic"])
    try:
        assert first_poll_outcome(member) == b"hello"  # JoinGroup, SyncGroup, Fetch
        (committed,) = member.commit(asynchronous=False)  # OffsetCommit as a member
        assert committed.error is None and committed.offset == 1
    finally:
        member.close()  # LeaveGroup
    viewer = ConfluentConsumer(secured.client("bob", **{"group.id": "cg-viewer", "auto.offset.reset": "earliest"}))
    viewer.subscribe(["cg-topic"])
    try:
        refused = first_poll_outcome(viewer)
    finally:
        viewer.close()
    assert isinstance(refused, KafkaError) and refused.code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_join_sync_heartbeat_and_leave_are_refused_without_group_read(secured):
    secured.allow("carol", GROUP, "cg-wire", DESCRIBE)
    with wire(secured, "carol") as client:
        joined = client.request(join_v9.JoinGroupRequest(
            group_id="cg-wire", session_timeout=datetime.timedelta(seconds=10),
            rebalance_timeout=datetime.timedelta(seconds=10), member_id="", group_instance_id=None,
            protocol_type="consumer", protocols=(join_v9.JoinGroupRequestProtocol(name="range", metadata=b""),),
            reason=None))
        synced = client.request(sync_v5.SyncGroupRequest(
            group_id="cg-wire", generation_id=1, member_id="m", group_instance_id=None, protocol_type="consumer",
            protocol_name="range", assignments=()))
        beat = client.request(HeartbeatRequest(group_id="cg-wire", generation_id=1, member_id="m",
                                               group_instance_id=None))
        left = client.request(leave_v5.LeaveGroupRequest(group_id="cg-wire", members=(
            leave_v5.MemberIdentity(member_id="m", group_instance_id=None, reason=None),)))
    assert (joined.error_code, joined.member_id, joined.generation_id, joined.leader, joined.protocol_name) == (
        ErrorCode.group_authorization_failed, "", -1, "", None)
    assert (synced.error_code, synced.assignment) == (ErrorCode.group_authorization_failed, b"")
    assert beat.error_code == ErrorCode.group_authorization_failed
    assert (left.error_code, left.members) == (ErrorCode.group_authorization_failed, ())


def commit_request(group, partitions):
    return commit_v9.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=tuple(commit_v9.OffsetCommitRequestTopic(name=topic, partitions=tuple(
            commit_v9.OffsetCommitRequestPartition(partition_index=index, committed_offset=0,
                                                   committed_leader_epoch=-1, committed_metadata="")
            for index in indexes)) for topic, indexes in partitions.items()))


def test_offset_commit_needs_read_on_the_group_then_on_each_topic(secured):
    secured.create_topic("oc-read")
    secured.create_topic("oc-seen")
    secured.allow("alice", GROUP, "oc-group", READ)
    secured.allow("alice", GROUP, "oc-viewer", DESCRIBE)
    secured.allow("alice", TOPIC, "oc-read", READ)
    secured.allow("alice", TOPIC, "oc-seen", DESCRIBE)
    partitions = {"oc-read": [0, 7], "oc-seen": [0], "oc-missing": [0]}
    with wire(secured, "alice") as client:
        answer = client.request(commit_request("oc-group", partitions))
        refused = client.request(commit_request("oc-viewer", partitions))
    assert {(t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions} == {
        ("oc-read", 0): ErrorCode.none,
        ("oc-read", 7): ErrorCode.unknown_topic_or_partition,
        ("oc-seen", 0): ErrorCode.topic_authorization_failed,
        ("oc-missing", 0): ErrorCode.topic_authorization_failed,  # refused before looking it up
    }
    assert {p.error_code for t in refused.topics for p in t.partitions} == {ErrorCode.group_authorization_failed}
    # A consumer that assigns its partitions itself, as confluent-kafka commits.
    for group, expected in (("oc-group", None), ("oc-viewer", KafkaError.GROUP_AUTHORIZATION_FAILED)):
        consumer = ConfluentConsumer(secured.client("alice", **{"group.id": group, "enable.auto.commit": False}))
        try:
            consumer.commit(offsets=[TopicPartition("oc-read", 0, 1)], asynchronous=False)
            error = None
        except KafkaException as failure:
            error = failure.args[0].code()
        finally:
            consumer.close()
        assert error == expected


def test_offset_fetch_shows_only_describable_groups_and_topics(secured):
    for name in ("of-seen", "of-hidden"):
        secured.create_topic(name)
    commit_as_admin(secured, "of-group", {("of-seen", 0): 5, ("of-hidden", 0): 7})
    secured.allow("alice", GROUP, "of-group", DESCRIBE)
    secured.allow("alice", TOPIC, "of-seen", DESCRIBE)
    alice = AdminClient(secured.client("alice"))
    everything = alice.list_consumer_group_offsets([ConsumerGroupTopicPartitions("of-group")])["of-group"].result(10)
    assert [(p.topic, p.partition, p.offset) for p in everything.topic_partitions] == [("of-seen", 0, 5)]
    named = alice.list_consumer_group_offsets([ConsumerGroupTopicPartitions(
        "of-group", [TopicPartition("of-seen", 0), TopicPartition("of-hidden", 0)])])["of-group"].result(10)
    assert [(p.topic, p.offset, p.error.code() if p.error else None) for p in named.topic_partitions] == [
        ("of-seen", 5, None), ("of-hidden", -1001, KafkaError.TOPIC_AUTHORIZATION_FAILED)]
    # v8+: each group of the request on its own.
    with wire(secured, "alice") as client:
        answer = client.request(fetch_offsets_v8.OffsetFetchRequest(groups=(
            fetch_offsets_v8.OffsetFetchRequestGroup(group_id="of-group", topics=None),
            fetch_offsets_v8.OffsetFetchRequestGroup(group_id="of-other", topics=None)), require_stable=False))
    assert [(g.group_id, g.error_code, [t.name for t in g.topics]) for g in answer.groups] == [
        ("of-group", ErrorCode.none, ["of-seen"]), ("of-other", ErrorCode.group_authorization_failed, [])]


def test_offset_delete_needs_delete_on_the_group_and_read_on_each_topic(secured):
    for name in ("od-read", "od-seen"):
        secured.create_topic(name)
    commit_as_admin(secured, "od-group", {("od-read", 0): 1, ("od-seen", 0): 1})
    commit_as_admin(secured, "od-kept", {("od-read", 0): 1})
    secured.allow("alice", GROUP, "od-group", DELETE)
    secured.allow("alice", GROUP, "od-kept", READ)
    secured.allow("alice", TOPIC, "od-read", READ)
    secured.allow("alice", TOPIC, "od-seen", DESCRIBE)

    def delete(group):
        return offset_delete_v0.OffsetDeleteRequest(group_id=group, topics=tuple(
            offset_delete_v0.OffsetDeleteRequestTopic(name=topic, partitions=(
                offset_delete_v0.OffsetDeleteRequestPartition(partition_index=0),))
            for topic in ("od-read", "od-seen")))

    with wire(secured, "alice") as client:
        answer = client.request(delete("od-group"))
        refused = client.request(delete("od-kept"))
    assert answer.error_code == ErrorCode.none
    assert {t.name: t.partitions[0].error_code for t in answer.topics} == {
        "od-read": ErrorCode.none, "od-seen": ErrorCode.topic_authorization_failed}
    assert (refused.error_code, refused.topics) == (ErrorCode.group_authorization_failed, ())
    python_client = kafka_python_admin(secured, "alice")
    try:
        deleted = python_client.delete_group_offsets("od-group", [KafkaPythonTopicPartition("od-seen", 0)])
    finally:
        python_client.close()
    assert deleted == {KafkaPythonTopicPartition("od-seen", 0): TopicAuthorizationFailedError}


def test_describe_groups_needs_describe_and_answers_authorized_operations(secured):
    secured.allow("alice", GROUP, "dg-group", READ)
    alice = AdminClient(secured.client("alice"))
    described = alice.describe_consumer_groups(["dg-group"], include_authorized_operations=True)["dg-group"]
    assert {operation.name for operation in described.result(10).authorized_operations} == {"READ", "DESCRIBE"}
    with wire(secured, "alice") as client:
        answer = client.request(DescribeGroupsRequest(groups=("dg-group", "dg-hidden"),
                                                      include_authorized_operations=True))
        not_asked = client.request(DescribeGroupsRequest(groups=("dg-group",), include_authorized_operations=False))
    assert [(g.group_id, g.error_code, g.group_state, g.authorized_operations) for g in answer.groups] == [
        ("dg-group", ErrorCode.none, "Dead", bits(READ, DESCRIBE)),  # v5: no group, no error
        ("dg-hidden", ErrorCode.group_authorization_failed, "", AUTHORIZED_OPERATIONS_OMITTED),
    ]
    assert not_asked.groups[0].authorized_operations == AUTHORIZED_OPERATIONS_OMITTED


def test_list_groups_shows_every_group_only_with_cluster_describe(secured):
    secured.create_topic("lg-topic")
    for group in ("lg-mine", "lg-other"):
        commit_as_admin(secured, group, {("lg-topic", 0): 1})
    secured.allow("alice", GROUP, "lg-mine", DESCRIBE)
    listed = {}
    for user in ("alice", "dora"):
        client = AdminClient(secured.client(user))
        result = client.list_consumer_groups().result(10)
        listed[user] = {group.group_id for group in result.valid if group.group_id.startswith("lg-")}
    assert listed == {"alice": {"lg-mine"}, "dora": {"lg-mine", "lg-other"}}


def test_delete_groups_needs_delete_on_each_group(secured):
    secured.create_topic("del-topic")
    for group in ("del-mine", "del-other"):
        commit_as_admin(secured, group, {("del-topic", 0): 1})
    secured.allow("alice", GROUP, "del-mine", DELETE)
    secured.allow("alice", GROUP, "del-other", DESCRIBE)
    alice = AdminClient(secured.client("alice"))
    assert outcomes(alice.delete_consumer_groups(["del-mine", "del-other"])) == {
        "del-mine": None, "del-other": "GROUP_AUTHORIZATION_FAILED"}
