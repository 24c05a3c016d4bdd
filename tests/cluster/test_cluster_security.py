"""ACLs and SCRAM credentials in a cluster live in the metadata quorum: a change answered
by one broker is acted on by every broker, concurrent changes through different brokers
all land, and both survive a restart of every node.

One cluster for the module. Each broker has a PLAINTEXT listener (inter-broker traffic,
principal User:ANONYMOUS: a super user, so replication works with the authorizer on; the
tests use it as the administrator) and a SASL_PLAINTEXT listener with SCRAM-SHA-256;
Kafka's StandardAuthorizer with allow.everyone.if.no.acl.found=false. Changes go over
the wire to one named broker, so the test knows which broker answered; logins and
authorization checks use confluent-kafka (librdkafka) on one broker's SASL listener.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import threading
import time
from collections.abc import Callable
from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.alter_user_scram_credentials.v0.request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest
from kio.schema.delete_acls.v3.request import DeleteAclsFilter, DeleteAclsRequest
from kio.schema.describe_acls.v3.request import DescribeAclsRequest
from kio.schema.describe_user_scram_credentials.v0.request import DescribeUserScramCredentialsRequest
from kio.static.primitive import i8, i32

from oncelog.cluster.etcd import EtcdClient, EtcdUnavailable
from oncelog.cluster.image import KeyKind, Keys, MetadataImage, encode_acls, encode_scram_credentials
from oncelog.cluster.kv import Event, EventType, KeyValue
from oncelog.cluster.security import SharedDocument
from oncelog.config.broker import BrokerConfig
from oncelog.kernel.authorization import Acls
from oncelog.local.cluster import ClusterProcess
from oncelog.local.etcd import EtcdCluster
from oncelog.local.process import free_port
from oncelog.protocol.client import WireClient
from oncelog.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
SETTINGS = {
    "authorizer.class.name": STANDARD_AUTHORIZER,
    "super.users": "User:ANONYMOUS",
    "allow.everyone.if.no.acl.found": "false",
    "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-256",
    "connection.failed.authentication.delay.ms": "20",
}
SCRAM_SHA_256 = i8(1)
ITERATIONS = 4096
NODES = (1, 2, 3)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("secured-cluster")
    running = ClusterProcess(base, 3, SETTINGS)
    for node in running.nodes.values():  # a SASL listener beside the PLAINTEXT one ClusterProcess made
        node.config["listeners"] += f",SASL_PLAINTEXT://127.0.0.1:{free_port()}"
    with running:
        yield running
    for node in running.nodes.values():  # free the etcd WALs
        shutil.rmtree(node.data_dir / "__cluster_metadata-etcd", ignore_errors=True)


def sasl_address(cluster: ClusterProcess, node_id: int) -> str:
    return cluster.nodes[node_id].config["listeners"].split("SASL_PLAINTEXT://", 1)[1]


def send(cluster: ClusterProcess, node_id: int, request):
    """`request` answered by broker `node_id` (PLAINTEXT: the super user)."""
    with WireClient.connect(cluster.nodes[node_id].bootstrap_servers) as client:
        return client.request(request)


# ---- what the tests send ------------------------------------------------------------------


def upsert_user(cluster: ClusterProcess, node_id: int, user: str, password: str) -> None:
    salt = os.urandom(24)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, ITERATIONS)
    response = send(cluster, node_id, AlterUserScramCredentialsRequest(deletions=(), upsertions=(
        ScramCredentialUpsertion(name=user, mechanism=SCRAM_SHA_256, iterations=i32(ITERATIONS), salt=salt,
                                 salted_password=salted),)))
    assert [(r.user, r.error_code, r.error_message) for r in response.results] == [(user, 0, None)]


def delete_user(cluster: ClusterProcess, node_id: int, user: str) -> None:
    response = send(cluster, node_id, AlterUserScramCredentialsRequest(
        deletions=(ScramCredentialDeletion(name=user, mechanism=SCRAM_SHA_256),), upsertions=()))
    assert [(r.user, r.error_code) for r in response.results] == [(user, 0)]


def described_users(cluster: ClusterProcess, node_id: int) -> set[str]:
    response = send(cluster, node_id, DescribeUserScramCredentialsRequest(users=None))
    assert response.error_code == 0
    return {result.user for result in response.results}


def topic_acl(topic: str, user: str, operation: AclOperation, permission: AclPermissionType) -> AclCreation:
    return AclCreation(resource_type=i8(ResourceType.TOPIC), resource_name=topic,
                       resource_pattern_type=i8(PatternType.LITERAL), principal=f"User:{user}", host="*",
                       operation=i8(operation), permission_type=i8(permission))


def create_acls(cluster: ClusterProcess, node_id: int, *creations: AclCreation) -> None:
    response = send(cluster, node_id, CreateAclsRequest(creations=creations))
    assert [(r.error_code, r.error_message) for r in response.results] == [(0, None)] * len(creations)


def delete_topic_acls(cluster: ClusterProcess, node_id: int, topic: str, permission: AclPermissionType) -> int:
    """How many ACLs of `topic` with `permission` broker `node_id` removed."""
    response = send(cluster, node_id, DeleteAclsRequest(filters=(DeleteAclsFilter(
        resource_type_filter=i8(ResourceType.TOPIC), resource_name_filter=topic,
        pattern_type_filter=i8(PatternType.LITERAL), principal_filter=None, host_filter=None,
        operation=i8(AclOperation.ANY), permission_type=i8(permission)),)))
    [result] = response.filter_results
    assert result.error_code == 0
    return len(result.matching_acls)


def described_topic_acls(cluster: ClusterProcess, node_id: int) -> set[tuple[str, str, int]]:
    """(topic, principal, operation) of every topic ACL, as broker `node_id` describes them."""
    response = send(cluster, node_id, DescribeAclsRequest(
        resource_type_filter=i8(ResourceType.TOPIC), resource_name_filter=None,
        pattern_type_filter=i8(PatternType.ANY), principal_filter=None, host_filter=None,
        operation=i8(AclOperation.ANY), permission_type=i8(AclPermissionType.ANY)))
    assert response.error_code == 0
    return {(resource.resource_name, acl.principal, acl.operation)
            for resource in response.resources for acl in resource.acls}


# ---- what a client sees on one broker ----------------------------------------------------------


def login(cluster: ClusterProcess, node_id: int, user: str, password: str, topic: str | None = None):
    """Log in as `user` on broker `node_id`'s SASL listener (the only broker the client
    knows before its first answer) and ask for metadata. "refused" when the broker refused
    the login; else the error of `topic` in the metadata (0: authorized), or 0 without one."""
    errors: list[KafkaError] = []
    settings: dict[str, Any] = {
        "bootstrap.servers": sasl_address(cluster, node_id), "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": password,
        "error_cb": errors.append, "reconnect.backoff.ms": 50}
    client = AdminClient(settings)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            metadata = client.list_topics(topic=topic, timeout=0.5)
        except KafkaException:
            client.poll(0)
            if any(error.code() == KafkaError._AUTHENTICATION for error in errors):
                return "refused"
            continue
        error = metadata.topics[topic].error if topic is not None else None
        return error.code() if error is not None else 0
    raise AssertionError(f"broker {node_id} neither let {user} in nor refused: {errors}")


def eventually(check: Callable[[], object], expected: object, timeout: float = 5.0) -> None:
    """Other brokers apply a change from their metadata watch, a few milliseconds later."""
    deadline = time.monotonic() + timeout
    while (seen := check()) != expected:
        assert time.monotonic() < deadline, f"still {seen!r}, expected {expected!r}"
        time.sleep(0.05)


TOPIC_AUTHORIZATION_FAILED = KafkaError.TOPIC_AUTHORIZATION_FAILED


# ---- the cluster ------------------------------------------------------------------------


def test_scram_user_created_through_broker_1_logs_in_on_brokers_2_and_3(cluster):
    assert login(cluster, 2, "alice", "alice-secret") == "refused"
    upsert_user(cluster, 1, "alice", "alice-secret")
    assert login(cluster, 1, "alice", "alice-secret") == 0  # the answering broker acts on it at once
    for node_id in (2, 3):
        eventually(lambda node_id=node_id: login(cluster, node_id, "alice", "alice-secret"), 0)
        assert login(cluster, node_id, "alice", "wrong") == "refused"
        assert "alice" in described_users(cluster, node_id)


def test_an_acl_created_through_broker_2_allows_on_broker_3_and_a_deny_denies(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})  # PLAINTEXT: the super user
    admin.create_topics([NewTopic("guarded", 1, 3)])["guarded"].result(30)
    cluster.wait_for_topic("guarded")
    upsert_user(cluster, 1, "bob", "bob-secret")
    eventually(lambda: login(cluster, 3, "bob", "bob-secret", "guarded"), TOPIC_AUTHORIZATION_FAILED)

    create_acls(cluster, 2, topic_acl("guarded", "bob", AclOperation.DESCRIBE, AclPermissionType.ALLOW))
    eventually(lambda: login(cluster, 3, "bob", "bob-secret", "guarded"), 0)
    assert login(cluster, 1, "bob", "bob-secret", "guarded") == 0

    create_acls(cluster, 2, topic_acl("guarded", "bob", AclOperation.ALL, AclPermissionType.DENY))
    eventually(lambda: login(cluster, 3, "bob", "bob-secret", "guarded"), TOPIC_AUTHORIZATION_FAILED)

    assert delete_topic_acls(cluster, 3, "guarded", AclPermissionType.DENY) == 1
    eventually(lambda: login(cluster, 1, "bob", "bob-secret", "guarded"), 0)
    assert {acl for acl in described_topic_acls(cluster, 1) if acl[0] == "guarded"} == {
        ("guarded", "User:bob", AclOperation.DESCRIBE)}


def test_changes_sent_to_three_brokers_at_once_all_land(cluster):
    """Every broker rewrites the same two keys under a compare: the losers of each race
    read again and add their change on top of the winner's."""
    per_broker = 6
    failures: list[BaseException] = []
    start = threading.Barrier(len(NODES))

    def change_through(node_id: int) -> None:
        try:
            start.wait()
            for i in range(per_broker):
                create_acls(cluster, node_id,
                            topic_acl(f"race-{node_id}-{i}", "carol", AclOperation.READ, AclPermissionType.ALLOW))
                upsert_user(cluster, node_id, f"racer-{node_id}-{i}", "secret")
        except BaseException as error:  # noqa: BLE001 (reported by the test thread)
            failures.append(error)

    threads = [threading.Thread(target=change_through, args=(node_id,)) for node_id in NODES]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures
    expected_acls = {(f"race-{n}-{i}", "User:carol", AclOperation.READ) for n in NODES for i in range(per_broker)}
    expected_users = {f"racer-{n}-{i}" for n in NODES for i in range(per_broker)}
    for node_id in NODES:
        eventually(lambda node_id=node_id: expected_acls <= described_topic_acls(cluster, node_id), True)
        eventually(lambda node_id=node_id: expected_users <= described_users(cluster, node_id), True)


def test_users_and_acls_survive_a_restart_of_every_node_and_a_deleted_user_is_refused_everywhere(cluster):
    upsert_user(cluster, 3, "dave", "dave-secret")
    create_acls(cluster, 3, topic_acl("guarded", "dave", AclOperation.DESCRIBE, AclPermissionType.ALLOW))
    acls_before = described_topic_acls(cluster, 1)

    cluster.kill_all()  # kill -9 of every broker and quorum member
    cluster.start()

    for node_id in NODES:
        assert described_topic_acls(cluster, node_id) == acls_before
        assert login(cluster, node_id, "dave", "dave-secret", "guarded") == 0
        assert login(cluster, node_id, "alice", "alice-secret", "guarded") == TOPIC_AUTHORIZATION_FAILED

    delete_user(cluster, 2, "dave")
    for node_id in NODES:
        eventually(lambda node_id=node_id: login(cluster, node_id, "dave", "dave-secret"), "refused")
        assert "dave" not in described_users(cluster, node_id)
    assert login(cluster, 1, "alice", "alice-secret") == 0  # the others stay


# ---- the compare-and-swap, on one etcd member -----------------------------------------------


@pytest.fixture(scope="module")
def etcd(tmp_path_factory):
    base = tmp_path_factory.mktemp("etcd")
    with EtcdCluster(base, members=1) as running:
        yield running
    shutil.rmtree(running.members[0].data_dir, ignore_errors=True)


class FakeRuntime:
    """What SharedDocument uses of a ClusterRuntime: its client, and a metadata watch
    that is always up to date."""

    def __init__(self, client) -> None:
        self.client = client

    async def wait_for_revision(self, revision: int, timeout_s: float = 10.0) -> bool:
        return True


class AnswerLost:
    """An etcd client whose next write is answered as lost (etcd's indeterminate
    outcome), after it was applied or before it was sent."""

    def __init__(self, client: EtcdClient, *, applied: bool) -> None:
        self._client = client
        self._applied = applied
        self.lost = 0

    async def get(self, key: str):
        return await self._client.get(key)

    async def txn(self, compare, success, failure=()):
        if self.lost == 0:
            self.lost += 1
            if self._applied:
                await self._client.txn(compare, success, failure)
            raise EtcdUnavailable("the answer was lost", indeterminate=True)
        return await self._client.txn(compare, success, failure)


def appending(item: int | str, plans: list[object]):
    """A plan that adds `item` to a JSON list: applied twice, the item shows twice."""
    async def plan(stored: KeyValue | None) -> bytes:
        plans.append(item)
        return json.dumps([*([] if stored is None else json.loads(stored.value)), item]).encode()
    return plan


def test_brokers_racing_to_change_one_key_each_get_their_change_in(etcd):
    key = "/test/race"
    plans: list[object] = []

    async def race() -> list[int]:
        clients = [EtcdClient(etcd.endpoints) for _ in range(3)]
        documents = [SharedDocument(cast(Any, FakeRuntime(client)), key, "the race") for client in clients]

        async def writer(index: int) -> None:
            for item in range(index * 10, index * 10 + 10):
                await documents[index].change(appending(item, plans))

        await asyncio.gather(*(writer(index) for index in range(3)))
        stored = await clients[0].get(key)
        for client in clients:
            await client.close()
        assert stored is not None
        return json.loads(stored.value)

    assert sorted(asyncio.run(race())) == list(range(30))
    assert len(plans) > 30  # some compares failed, and their writers planned again on the winner's write


@pytest.mark.parametrize("applied", [True, False], ids=["applied", "not-applied"])
def test_a_write_whose_answer_was_lost_is_read_back_and_applied_exactly_once(etcd, applied):
    key = f"/test/lost-{applied}"
    plans: list[object] = []

    async def change() -> list[str]:
        async with EtcdClient(etcd.endpoints) as client:
            await SharedDocument(cast(Any, FakeRuntime(AnswerLost(client, applied=applied))), key,
                                 "the list").change(appending("once", plans))
            stored = await client.get(key)
        assert stored is not None
        return json.loads(stored.value)

    assert asyncio.run(change()) == ["once"]
    assert len(plans) == (1 if applied else 2)


# ---- without a cluster: the image and the standalone file ----------------------------------


def test_acls_and_scram_credentials_are_keys_of_the_image_and_their_changes_are_flagged():
    keys = Keys("c1")
    assert (keys.acls, keys.scram_credentials) == ("/oncelog/c1/acls", "/oncelog/c1/scram-credentials")
    assert keys.parse(keys.acls) == (KeyKind.ACLS,)
    assert keys.parse(keys.scram_credentials) == (KeyKind.SCRAM_CREDENTIALS,)
    binding = {"resource_type": "TOPIC", "name": "t", "pattern_type": "LITERAL", "principal": "User:a",
               "host": "*", "operation": "READ", "permission_type": "ALLOW"}
    users = {"a": {"SCRAM-SHA-256": {"salt": "c2FsdA==", "stored_key": "a2V5", "server_key": "a2V5",
                                     "iterations": 4096}}}
    image = MetadataImage.from_kvs(5, [KeyValue(keys.acls, encode_acls([binding]), 3, 3)])
    assert [dict(acl) for acl in image.acls["acls"]] == [binding]

    image, delta = image.apply(6, [Event(EventType.PUT, KeyValue(keys.scram_credentials,
                                                                 encode_scram_credentials(users), 6, 6))])
    assert (delta.acls_changed, delta.scram_credentials_changed, delta.is_empty) == (False, True, False)
    assert image.scram_credentials["users"] == users
    assert "stored_key" not in repr(image)  # secrets stay out of logs
    assert image.fenced_view(1).acls is image.acls  # an isolated broker keeps enforcing them

    image, delta = image.apply(7, [Event(EventType.PUT, KeyValue(keys.acls, encode_acls([]), 3, 7))])
    assert (delta.acls_changed, delta.scram_credentials_changed) == (True, False)
    _, delta = image.apply(8, [Event(EventType.PUT, KeyValue(keys.controller, b'{"v":1,"node_id":1}', 8, 8))])
    assert not (delta.acls_changed or delta.scram_credentials_changed)


def test_a_standalone_broker_keeps_its_acls_in_its_file(tmp_path):
    config = BrokerConfig({"authorizer.class.name": STANDARD_AUTHORIZER, "log.dirs": str(tmp_path)})
    acls = Acls.from_config(config, tmp_path)
    assert acls is not None
    binding = AclBinding(ResourcePattern(ResourceType.TOPIC, "t", PatternType.LITERAL),
                         AccessControlEntry("User:a", "*", AclOperation.READ, AclPermissionType.ALLOW))
    assert [result.error_code for result in asyncio.run(acls.create([binding, binding]))] == [0, 0]
    reloaded = Acls.from_config(config, tmp_path)
    assert reloaded is not None and reloaded.describe(AclBindingFilter()) == [binding]
    [(deleted, matched)] = asyncio.run(reloaded.delete([binding.as_filter()]))
    assert (deleted.error_code, matched) == (0, [binding])
    assert Acls.from_config(config, tmp_path).describe(AclBindingFilter()) == []  # type: ignore[union-attr]
