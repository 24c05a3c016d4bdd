"""A broker with an authorizer and SASL users, for the authorization tests.

    with secured_broker(tmp_path) as broker:
        broker.allow("alice", ResourceType.TOPIC, "orders", AclOperation.WRITE)
        producer = Producer(broker.client("alice"))

One SASL_PLAINTEXT listener with PLAIN users `admin` (a super user), `alice`, `bob` and
`carol` (password: the name + "-secret"); Kafka's StandardAuthorizer with
`allow.everyone.if.no.acl.found=false`. ACLs are created as `admin` through
confluent-kafka's AdminClient, the way an operator does.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AclBinding as ClientAclBinding
from confluent_kafka.admin import AclOperation as ClientAclOperation
from confluent_kafka.admin import AclPermissionType as ClientAclPermissionType
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.admin import ResourcePatternType as ClientPatternType
from confluent_kafka.admin import ResourceType as ClientResourceType

from oncelog import EmbeddedBroker
from oncelog.security.acl import AclOperation, PatternType, ResourceType

USERS = ("admin", "alice", "bob", "carol")
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def password(user: str) -> str:
    return f"{user}-secret"


def _jaas() -> str:
    users = " ".join(f'user_{user}="{password(user)}"' for user in USERS)
    return f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"


@dataclass
class SecuredBroker:
    running: EmbeddedBroker

    @property
    def bootstrap_servers(self) -> str:
        return self.running.bootstrap_servers

    def client(self, user: str, **extra: Any) -> dict[str, Any]:
        """confluent-kafka settings for `user` over SASL_PLAINTEXT with PLAIN."""
        return {"bootstrap.servers": self.bootstrap_servers, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": password(user), **extra}

    def admin(self) -> AdminClient:
        return AdminClient(self.client("admin"))

    def create_topic(self, name: str, partitions: int = 1, configs: Mapping[str, str] | None = None) -> None:
        admin = self.admin()
        admin.create_topics([NewTopic(name, partitions, 1, config=dict(configs or {}))])[name].result(10)

    def allow(self, user: str, resource_type: ResourceType, name: str, *operations: AclOperation,
              pattern_type: PatternType = PatternType.LITERAL, deny: bool = False, host: str = "*") -> None:
        """ACLs for `user` ("User:*" for everyone), created as admin."""
        principal = user if ":" in user else f"User:{user}"
        # confluent-kafka calls Kafka's CLUSTER resource type BROKER.
        client_type = ClientResourceType.BROKER if resource_type is ResourceType.CLUSTER else \
            ClientResourceType[resource_type.name]
        bindings = [
            ClientAclBinding(client_type, name, ClientPatternType[pattern_type.name],
                             principal, host, ClientAclOperation[operation.name],
                             ClientAclPermissionType.DENY if deny else ClientAclPermissionType.ALLOW)
            for operation in operations
        ]
        admin = self.admin()
        for future in admin.create_acls(bindings).values():
            future.result(10)


@contextmanager
def secured_broker(directory: Path, config: Mapping[str, str] | None = None) -> Iterator[SecuredBroker]:
    settings = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": _jaas(),
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "super.users": "User:admin",
        "allow.everyone.if.no.acl.found": "false",
        **dict(config or {}),
    }
    with EmbeddedBroker(directory, settings) as running:
        yield SecuredBroker(running)
