"""The cluster metadata image: what etcd holds under `/oncelog/<cluster.id>/`, as values.

Owns the key layout (`Keys`), the JSON codecs of the records (every value carries
`"v": 1`; any other version is refused loudly), the immutable `MetadataImage` built from a
`range` and advanced by watch events, and the `MetadataDelta` between two images. No I/O:
the publisher feeds it `KeyValue`s and `Event`s (see docs/cluster-design.md, section 2).

Key layout under the prefix:

    controller                 {"v":1,"node_id":2}                 lease of the active controller
    brokers/<id>               {"v":1,"host","port","inter_broker":{"host","port"},"incarnation"}
    topics/<name>              {"v":1,"topic_id","partitions","configs"}
    partitions/<name>/<p>      {"v":1,"replicas","isr","leader","leader_epoch","partition_epoch"}
    configs/brokers            {"v":1,"default":{key:value},"brokers":{"<id>":{key:value}}}  dynamic broker configs
    configs/groups             {"v":1,"groups":{"<group id>":{key:value}}}  group configs (KIP-848)
    acls                       {"v":1,"acls":[{"resource_type","name","pattern_type","principal","host",
                                               "operation","permission_type"}, ...]}  every ACL
    scram-credentials          {"v":1,"users":{user:{mechanism:{"salt","stored_key","server_key","iterations"}}}}
    client-quotas              {"v":1,"entities":[{"entity":{"user":U,"client-id":C},"quotas":{key:value}}, ...]}
                               (oncelog.kernel.quotas.configs_to_json; a null name is the default)
    producer-ids/next-block    (not part of the image)
    features                   (not part of the image)

Two facts come from etcd rather than from the JSON: a broker's epoch is the
`create_revision` of its registration key (it changes with each registration, as Kafka's
broker epoch does), and a partition's `mod_revision` is what its next CAS compares.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from types import MappingProxyType
from typing import Any

from oncelog.cluster.kv import Event, EventType, KeyValue

FORMAT_VERSION = 1
NO_LEADER = -1
NO_CONTROLLER = -1


class MetadataFormatError(ValueError):
    """A value under the cluster prefix that this version cannot read: an unknown format
    version, broken JSON or a missing field. The store is shared by every broker, so this
    is a broken invariant, never something to skip."""


class KeyKind(Enum):
    CONTROLLER = "controller"
    BROKER = "broker"
    TOPIC = "topic"
    PARTITION = "partition"
    BROKER_CONFIGS = "broker_configs"
    GROUP_CONFIGS = "group_configs"
    ACLS = "acls"
    SCRAM_CREDENTIALS = "scram_credentials"
    CLIENT_QUOTAS = "client_quotas"
    PRODUCER_ID_BLOCK = "producer_id_block"
    FEATURES = "features"
    UNKNOWN = "unknown"


_PRODUCER_ID_BLOCK = "producer-ids/next-block"
_BROKER_CONFIGS = "configs/brokers"
_GROUP_CONFIGS = "configs/groups"
_ACLS = "acls"
_SCRAM_CREDENTIALS = "scram-credentials"
_CLIENT_QUOTAS = "client-quotas"


def _parse_relative(rest: str, key: str) -> tuple:
    """Kind and parts of a key, given the part after the cluster prefix."""
    if rest == "controller":
        return (KeyKind.CONTROLLER,)
    if rest == "features":
        return (KeyKind.FEATURES,)
    if rest == _PRODUCER_ID_BLOCK:
        return (KeyKind.PRODUCER_ID_BLOCK,)
    if rest == _BROKER_CONFIGS:
        return (KeyKind.BROKER_CONFIGS,)
    if rest == _GROUP_CONFIGS:
        return (KeyKind.GROUP_CONFIGS,)
    if rest == _ACLS:
        return (KeyKind.ACLS,)
    if rest == _SCRAM_CREDENTIALS:
        return (KeyKind.SCRAM_CREDENTIALS,)
    if rest == _CLIENT_QUOTAS:
        return (KeyKind.CLIENT_QUOTAS,)
    parts = rest.split("/")
    if len(parts) == 2 and parts[0] == "brokers":
        node_id = _parse_int(parts[1])
        if node_id is not None:
            return (KeyKind.BROKER, node_id)
    elif len(parts) == 2 and parts[0] == "topics" and parts[1]:
        return (KeyKind.TOPIC, parts[1])
    elif len(parts) == 3 and parts[0] == "partitions" and parts[1]:
        partition = _parse_int(parts[2])
        if partition is not None:
            return (KeyKind.PARTITION, parts[1], partition)
    return (KeyKind.UNKNOWN, key)


def _parse_int(text: str) -> int | None:
    # Only canonical decimal ids: "07" or "+7" would name a second key for the same id.
    if text == "0" or (text[:1].isdigit() and text[0] != "0" and text.isdigit()):
        return int(text)
    return None


def parse_key(key: str) -> tuple:
    """Like `Keys.parse`, for a key under any `/oncelog/<cluster_id>/` prefix (the image
    does not need to know its cluster id: its watch only sees its own prefix)."""
    parts = key.split("/", 3)
    if len(parts) != 4 or parts[0] != "" or parts[1] != "oncelog" or not parts[2]:
        return (KeyKind.UNKNOWN, key)
    return _parse_relative(parts[3], key)


class Keys:
    """The etcd keys of one cluster. `parse` is the inverse of the builders."""

    __slots__ = ("cluster_id", "prefix")

    def __init__(self, cluster_id: str) -> None:
        if not cluster_id or "/" in cluster_id:
            raise ValueError(f"cluster id {cluster_id!r} cannot be part of an etcd key")
        self.cluster_id = cluster_id
        self.prefix = f"/oncelog/{cluster_id}/"

    @property
    def controller(self) -> str:
        return self.prefix + "controller"

    @property
    def brokers_prefix(self) -> str:
        return self.prefix + "brokers/"

    def broker(self, node_id: int) -> str:
        return f"{self.prefix}brokers/{node_id}"

    @property
    def topics_prefix(self) -> str:
        return self.prefix + "topics/"

    def topic(self, name: str) -> str:
        return f"{self.prefix}topics/{name}"

    def partitions_prefix(self, topic: str) -> str:
        # The trailing slash keeps topic "a" from matching the partitions of "a.b".
        return f"{self.prefix}partitions/{topic}/"

    def partition(self, topic: str, partition: int) -> str:
        return f"{self.prefix}partitions/{topic}/{partition}"

    @property
    def producer_id_block(self) -> str:
        return self.prefix + _PRODUCER_ID_BLOCK

    @property
    def features(self) -> str:
        return self.prefix + "features"

    @property
    def broker_configs(self) -> str:
        return self.prefix + _BROKER_CONFIGS

    @property
    def group_configs(self) -> str:
        return self.prefix + _GROUP_CONFIGS

    @property
    def acls(self) -> str:
        return self.prefix + _ACLS

    @property
    def scram_credentials(self) -> str:
        return self.prefix + _SCRAM_CREDENTIALS

    @property
    def client_quotas(self) -> str:
        return self.prefix + _CLIENT_QUOTAS

    def parse(self, key: str) -> tuple:
        """`(KeyKind.BROKER, node_id)`, `(KeyKind.TOPIC, name)`,
        `(KeyKind.PARTITION, topic, partition)`, `(KeyKind.CONTROLLER,)`,
        `(KeyKind.PRODUCER_ID_BLOCK,)`, `(KeyKind.FEATURES,)`, `(KeyKind.BROKER_CONFIGS,)`,
        `(KeyKind.GROUP_CONFIGS,)`,
        `(KeyKind.ACLS,)`, `(KeyKind.SCRAM_CREDENTIALS,)`, `(KeyKind.CLIENT_QUOTAS,)`, or
        `(KeyKind.UNKNOWN, key)`
        for anything else, including keys outside this cluster's prefix."""
        if not key.startswith(self.prefix):
            return (KeyKind.UNKNOWN, key)
        return _parse_relative(key[len(self.prefix) :], key)


# --- codecs -------------------------------------------------------------------------------


def _encode(fields: dict[str, Any]) -> bytes:
    return json.dumps(
        {"v": FORMAT_VERSION, **fields}, separators=(",", ":"), sort_keys=True
    ).encode()


def _decode(kv: KeyValue, what: str) -> dict[str, Any]:
    try:
        value = json.loads(kv.value)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MetadataFormatError(f"{what} at {kv.key!r} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise MetadataFormatError(f"{what} at {kv.key!r} is not a JSON object: {value!r}")
    version = value.get("v")
    if version != FORMAT_VERSION:
        raise MetadataFormatError(
            f"{what} at {kv.key!r} has format version {version!r}; this broker reads only "
            f"version {FORMAT_VERSION}"
        )
    return value


def _field(
    value: Mapping[str, Any], name: str, kind: type | tuple[type, ...], kv: KeyValue, what: str
) -> Any:
    if name not in value:
        raise MetadataFormatError(f"{what} at {kv.key!r} has no {name!r}: {value!r}")
    item = value[name]
    # bool is an int in Python; a boolean where a number belongs is still a broken value.
    if not isinstance(item, kind) or (isinstance(item, bool) and bool not in _as_tuple(kind)):
        raise MetadataFormatError(f"{what} at {kv.key!r} has a bad {name!r}: {item!r}")
    return item


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _int_list(value: Mapping[str, Any], name: str, kv: KeyValue, what: str) -> tuple[int, ...]:
    items = _field(value, name, list, kv, what)
    if not all(isinstance(item, int) and not isinstance(item, bool) for item in items):
        raise MetadataFormatError(f"{what} at {kv.key!r} has a bad {name!r}: {items!r}")
    return tuple(items)


def _expect_kind(kv: KeyValue, kind: KeyKind, what: str) -> tuple:
    parsed = parse_key(kv.key)
    if parsed[0] is not kind:
        raise MetadataFormatError(f"{kv.key!r} is not the key of a {what}")
    return parsed


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A live broker, as its lease-bound key says. `epoch` is the key's create_revision."""

    node_id: int
    host: str
    port: int
    inter_broker_host: str
    inter_broker_port: int
    incarnation: str
    epoch: int
    # Each listener's advertised address by name (empty: a registration from before
    # named listeners, whose host and port serve every listener).
    endpoints: Mapping[str, tuple[str, int]] = field(default_factory=dict, hash=False, compare=False)

    def endpoint(self, listener: str) -> tuple[str, int] | None:
        """Where clients of `listener` reach this broker; None when it has no such listener
        (Kafka then leaves the broker out of the answer)."""
        if not self.endpoints:
            return self.host, self.port
        return self.endpoints.get(listener)

    def encode(self) -> bytes:
        return _encode(
            {
                "host": self.host,
                "port": self.port,
                "inter_broker": {"host": self.inter_broker_host, "port": self.inter_broker_port},
                "incarnation": self.incarnation,
                "endpoints": {name: {"host": host, "port": port} for name, (host, port) in self.endpoints.items()},
            }
        )

    @classmethod
    def decode(cls, kv: KeyValue) -> BrokerRegistration:
        what = "broker registration"
        _, node_id = _expect_kind(kv, KeyKind.BROKER, what)
        value = _decode(kv, what)
        inter_broker = _field(value, "inter_broker", dict, kv, what)
        return cls(
            node_id=node_id,
            host=_field(value, "host", str, kv, what),
            port=_field(value, "port", int, kv, what),
            inter_broker_host=_field(inter_broker, "host", str, kv, what),
            inter_broker_port=_field(inter_broker, "port", int, kv, what),
            incarnation=_field(value, "incarnation", str, kv, what),
            epoch=kv.create_revision,
            endpoints={name: (_field(endpoint, "host", str, kv, what), _field(endpoint, "port", int, kv, what))
                       for name, endpoint in value.get("endpoints", {}).items()},
        )


@dataclass(frozen=True, slots=True)
class TopicRecord:
    name: str
    topic_id: uuid.UUID
    partitions: int
    # Not hashed: a read-only mapping is not hashable, and the id already tells topics apart.
    configs: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        # Read-only, so that a record shared by every image cannot be changed through one.
        object.__setattr__(self, "configs", MappingProxyType(dict(self.configs)))

    def encode(self) -> bytes:
        return _encode(
            {
                "topic_id": str(self.topic_id),
                "partitions": self.partitions,
                "configs": dict(self.configs),
            }
        )

    @classmethod
    def decode(cls, kv: KeyValue) -> TopicRecord:
        what = "topic record"
        _, name = _expect_kind(kv, KeyKind.TOPIC, what)
        value = _decode(kv, what)
        topic_id_text = _field(value, "topic_id", str, kv, what)
        try:
            topic_id = uuid.UUID(topic_id_text)
        except ValueError:
            raise MetadataFormatError(
                f"{what} at {kv.key!r} has a bad 'topic_id': {topic_id_text!r}"
            ) from None
        configs = _field(value, "configs", dict, kv, what)
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in configs.items()):
            raise MetadataFormatError(f"{what} at {kv.key!r} has a non-string config: {configs!r}")
        return cls(
            name=name,
            topic_id=topic_id,
            partitions=_field(value, "partitions", int, kv, what),
            configs=configs,
        )


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    """One partition's replicas, ISR and leadership. `mod_revision` is etcd's, the
    revision a CAS on this partition compares (0 for a record not yet written)."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    mod_revision: int = 0

    def encode(self) -> bytes:
        return _encode(
            {
                "replicas": list(self.replicas),
                "isr": list(self.isr),
                "leader": self.leader,
                "leader_epoch": self.leader_epoch,
                "partition_epoch": self.partition_epoch,
            }
        )

    @classmethod
    def decode(cls, kv: KeyValue) -> PartitionRecord:
        what = "partition record"
        _, topic, partition = _expect_kind(kv, KeyKind.PARTITION, what)
        value = _decode(kv, what)
        return cls(
            topic=topic,
            partition=partition,
            replicas=_int_list(value, "replicas", kv, what),
            isr=_int_list(value, "isr", kv, what),
            leader=_field(value, "leader", int, kv, what),
            leader_epoch=_field(value, "leader_epoch", int, kv, what),
            partition_epoch=_field(value, "partition_epoch", int, kv, what),
            mod_revision=kv.mod_revision,
        )


def encode_broker_configs(document: Mapping[str, Any]) -> bytes:
    """The dynamic broker configs (oncelog.config.dynamic's JSON form)."""
    return _encode(dict(document))


def decode_broker_configs(kv: KeyValue) -> Mapping[str, Any]:
    value = _decode(kv, "dynamic broker configs")
    value.pop("v")
    return MappingProxyType(value)


def encode_group_configs(document: Mapping[str, Any]) -> bytes:
    """The group configs (oncelog.config.groups's JSON form)."""
    return _encode(dict(document))


def decode_group_configs(kv: KeyValue) -> Mapping[str, Any]:
    """{"groups": {group: {key: value}}}; checked by whoever reads it (GroupConfigs.from_json)."""
    what = "group configs"
    return MappingProxyType({"groups": _field(_decode(kv, what), "groups", dict, kv, what)})


def encode_acls(bindings: Iterable[Mapping[str, str]]) -> bytes:
    """Every ACL, each as oncelog.security.acl_store.binding_to_json spells it."""
    return _encode({"acls": [dict(binding) for binding in bindings]})


def decode_acls(kv: KeyValue) -> Mapping[str, Any]:
    """{"acls": [binding, ...]}; each binding is checked by whoever turns it into one."""
    what = "ACL set"
    value = _decode(kv, what)
    bindings = _field(value, "acls", list, kv, what)
    if not all(isinstance(binding, dict) for binding in bindings):
        raise MetadataFormatError(f"{what} at {kv.key!r} has an ACL that is not a JSON object")
    return MappingProxyType({"acls": tuple(MappingProxyType(binding) for binding in bindings)})


def encode_scram_credentials(users: Mapping[str, Any]) -> bytes:
    """The "users" object of oncelog.security.scram_credentials.credentials_to_json."""
    return _encode({"users": dict(users)})


def decode_scram_credentials(kv: KeyValue) -> Mapping[str, Any]:
    """{"users": {user: {mechanism: {...}}}}; each credential is checked by whoever reads it."""
    what = "SCRAM credentials"
    return MappingProxyType({"users": MappingProxyType(_field(_decode(kv, what), "users", dict, kv, what))})


def encode_client_quotas(document: Mapping[str, Any]) -> bytes:
    """The client quotas as oncelog.kernel.quotas.configs_to_json spells them."""
    return _encode(dict(document))


def decode_client_quotas(kv: KeyValue) -> Mapping[str, Any]:
    """{"entities": [...]}; each entry is checked by whoever reads it (configs_from_json)."""
    what = "client quotas"
    return MappingProxyType({"entities": tuple(_field(_decode(kv, what), "entities", list, kv, what))})


def encode_controller(node_id: int) -> bytes:
    return _encode({"node_id": node_id})


def decode_controller(kv: KeyValue) -> int:
    what = "controller record"
    _expect_kind(kv, KeyKind.CONTROLLER, what)
    return _field(_decode(kv, what), "node_id", int, kv, what)


# --- image and delta ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MetadataImage:
    """The cluster metadata at one etcd revision. Immutable: `apply` returns a new image.

    Partitions are kept only while their topic exists, so a topic delete empties them from
    the image even when the partition keys' deletes come in a later batch (or never)."""

    revision: int
    brokers: Mapping[int, BrokerRegistration]
    topics: Mapping[str, TopicRecord]
    partitions: Mapping[tuple[str, int], PartitionRecord]
    controller_id: int = NO_CONTROLLER
    # The dynamic broker configs' JSON form (oncelog.config.dynamic), {} when none.
    broker_configs: Mapping[str, Any] = field(default_factory=dict)
    # decode_acls and decode_scram_credentials of their keys, {} when never written. Out of
    # the repr: long, and the credentials' keys are secrets.
    acls: Mapping[str, Any] = field(default_factory=dict, repr=False)
    scram_credentials: Mapping[str, Any] = field(default_factory=dict, repr=False)
    client_quotas: Mapping[str, Any] = field(default_factory=dict, repr=False)  # decode_client_quotas, {} if none
    group_configs: Mapping[str, Any] = field(default_factory=dict, repr=False)  # decode_group_configs, {} if none
    _by_topic: Mapping[str, tuple[PartitionRecord, ...]] = field(
        init=False, repr=False, compare=False
    )
    _by_topic_id: Mapping[uuid.UUID, TopicRecord] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "brokers", MappingProxyType(dict(self.brokers)))
        object.__setattr__(self, "topics", MappingProxyType(dict(self.topics)))
        object.__setattr__(self, "partitions", MappingProxyType(dict(self.partitions)))
        by_topic: dict[str, list[PartitionRecord]] = {}
        for (topic, _), record in sorted(self.partitions.items()):
            by_topic.setdefault(topic, []).append(record)
        object.__setattr__(
            self, "_by_topic", MappingProxyType({t: tuple(rs) for t, rs in by_topic.items()})
        )
        object.__setattr__(
            self, "_by_topic_id", MappingProxyType({t.topic_id: t for t in self.topics.values()})
        )

    @classmethod
    def empty(cls) -> MetadataImage:
        return cls(revision=0, brokers={}, topics={}, partitions={}, controller_id=NO_CONTROLLER)

    @classmethod
    def from_kvs(cls, revision: int, kvs: Iterable[KeyValue]) -> MetadataImage:
        """The image of a `range` of the prefix taken at `revision`."""
        state = _MutableState.of(cls.empty())
        for kv in kvs:
            state.put(kv)
        return state.freeze(revision)

    def apply(self, revision: int, events: Iterable[Event]) -> tuple[MetadataImage, MetadataDelta]:
        """The image after a batch of watch events (in revision order), and what changed."""
        if revision < self.revision:
            raise ValueError(
                f"metadata revision {revision} is older than the image's {self.revision}"
            )
        state = _MutableState.of(self)
        for event in events:
            if event.type is EventType.PUT:
                state.put(event.kv)
            else:
                state.delete(event.kv.key)
        image = state.freeze(revision)
        return image, MetadataDelta.diff(self, image)

    def fenced_view(self, node_id: int) -> MetadataImage:
        """The image as broker `node_id` must act on it while it cannot confirm its
        session: itself unregistered, leader of nothing (the partitions it led have no
        leader it could name: a successor may be elected any moment), and not the
        controller. What others lead and every ISR stay as last seen; the revision too,
        since nothing was read from the store."""
        partitions = {
            key: record if record.leader != node_id else _leaderless(record)
            for key, record in self.partitions.items()
        }
        brokers = {other: registration for other, registration in self.brokers.items() if other != node_id}
        controller = NO_CONTROLLER if self.controller_id == node_id else self.controller_id
        return MetadataImage(self.revision, brokers, self.topics, partitions, controller, self.broker_configs,
                             self.acls, self.scram_credentials, self.client_quotas, self.group_configs)

    def live_broker_ids(self) -> set[int]:
        return set(self.brokers)

    def partition(self, topic: str, partition: int) -> PartitionRecord | None:
        return self.partitions.get((topic, partition))

    def partitions_of(self, topic: str) -> list[PartitionRecord]:
        """The topic's partitions, by partition number."""
        return list(self._by_topic.get(topic, ()))

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicRecord | None:
        return self._by_topic_id.get(topic_id)


def _leaderless(record: PartitionRecord) -> PartitionRecord:
    # The leader epoch stays: clients ignore metadata with an older epoch than they saw
    # (KIP-320), so a guessed newer one would hide the real next leader from them.
    return replace(record, leader=NO_LEADER)


@dataclass(slots=True)
class _MutableState:
    brokers: dict[int, BrokerRegistration]
    topics: dict[str, TopicRecord]
    partitions: dict[tuple[str, int], PartitionRecord]
    controller_id: int
    broker_configs: Mapping[str, Any]
    acls: Mapping[str, Any]
    scram_credentials: Mapping[str, Any]
    client_quotas: Mapping[str, Any]
    group_configs: Mapping[str, Any]

    @classmethod
    def of(cls, image: MetadataImage) -> _MutableState:
        return cls(
            dict(image.brokers), dict(image.topics), dict(image.partitions), image.controller_id,
            image.broker_configs, image.acls, image.scram_credentials, image.client_quotas, image.group_configs,
        )

    def put(self, kv: KeyValue) -> None:
        parsed = parse_key(kv.key)
        kind = parsed[0]
        if kind is KeyKind.BROKER:
            self.brokers[parsed[1]] = BrokerRegistration.decode(kv)
        elif kind is KeyKind.TOPIC:
            self.topics[parsed[1]] = TopicRecord.decode(kv)
        elif kind is KeyKind.PARTITION:
            self.partitions[(parsed[1], parsed[2])] = PartitionRecord.decode(kv)
        elif kind is KeyKind.CONTROLLER:
            self.controller_id = decode_controller(kv)
        elif kind is KeyKind.BROKER_CONFIGS:
            self.broker_configs = decode_broker_configs(kv)
        elif kind is KeyKind.ACLS:
            self.acls = decode_acls(kv)
        elif kind is KeyKind.SCRAM_CREDENTIALS:
            self.scram_credentials = decode_scram_credentials(kv)
        elif kind is KeyKind.CLIENT_QUOTAS:
            self.client_quotas = decode_client_quotas(kv)
        elif kind is KeyKind.GROUP_CONFIGS:
            self.group_configs = decode_group_configs(kv)
        # Producer-id blocks, features and keys this version does not know: not image state.

    def delete(self, key: str) -> None:
        parsed = parse_key(key)
        kind = parsed[0]
        if kind is KeyKind.BROKER:
            self.brokers.pop(parsed[1], None)
        elif kind is KeyKind.TOPIC:
            self.topics.pop(parsed[1], None)
        elif kind is KeyKind.PARTITION:
            self.partitions.pop((parsed[1], parsed[2]), None)
        elif kind is KeyKind.CONTROLLER:
            self.controller_id = NO_CONTROLLER
        elif kind is KeyKind.BROKER_CONFIGS:
            self.broker_configs = {}
        elif kind is KeyKind.ACLS:
            self.acls = {}
        elif kind is KeyKind.SCRAM_CREDENTIALS:
            self.scram_credentials = {}
        elif kind is KeyKind.CLIENT_QUOTAS:
            self.client_quotas = {}
        elif kind is KeyKind.GROUP_CONFIGS:
            self.group_configs = {}

    def freeze(self, revision: int) -> MetadataImage:
        partitions = {
            key: record for key, record in self.partitions.items() if key[0] in self.topics
        }
        return MetadataImage(revision, self.brokers, self.topics, partitions, self.controller_id,
                             self.broker_configs, self.acls, self.scram_credentials, self.client_quotas,
                             self.group_configs)


@dataclass(slots=True)
class MetadataDelta:
    """What changed between two images. A topic deleted and created again under the same
    name (a new topic id) is in both `deleted_topics` and `created_topics`."""

    old_revision: int
    new_revision: int
    # New brokers, and brokers registered again (a new epoch: the broker restarted or its lease expired).
    registered_brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    unregistered_brokers: set[int] = field(default_factory=set)
    created_topics: dict[str, TopicRecord] = field(default_factory=dict)
    deleted_topics: dict[str, TopicRecord] = field(default_factory=dict)
    # Same topic id, new partition count or configs: (old, new).
    changed_topics: dict[str, tuple[TopicRecord, TopicRecord]] = field(default_factory=dict)
    # (old, new); None on the side where the partition does not exist.
    changed_partitions: dict[
        tuple[str, int], tuple[PartitionRecord | None, PartitionRecord | None]
    ] = field(default_factory=dict)
    controller_changed: bool = False
    broker_configs_changed: bool = False
    acls_changed: bool = False
    scram_credentials_changed: bool = False
    client_quotas_changed: bool = False
    group_configs_changed: bool = False

    @classmethod
    def diff(cls, old: MetadataImage, new: MetadataImage) -> MetadataDelta:
        """Also used after a re-range (the watch's revision was compacted): the events in
        between are lost, the difference is not."""
        delta = cls(old_revision=old.revision, new_revision=new.revision)
        for node_id, registration in new.brokers.items():
            previous = old.brokers.get(node_id)
            if previous is None or previous.epoch != registration.epoch:
                delta.registered_brokers[node_id] = registration
        delta.unregistered_brokers = set(old.brokers) - set(new.brokers)
        for name, topic in old.topics.items():
            current = new.topics.get(name)
            if current is None or current.topic_id != topic.topic_id:
                delta.deleted_topics[name] = topic
        for name, topic in new.topics.items():
            previous_topic = old.topics.get(name)
            if previous_topic is None or previous_topic.topic_id != topic.topic_id:
                delta.created_topics[name] = topic
            elif previous_topic != topic:
                delta.changed_topics[name] = (previous_topic, topic)
        for key in old.partitions.keys() | new.partitions.keys():
            before, after = old.partitions.get(key), new.partitions.get(key)
            if before != after:
                delta.changed_partitions[key] = (before, after)
        delta.controller_changed = old.controller_id != new.controller_id
        delta.broker_configs_changed = old.broker_configs != new.broker_configs
        # Kept by reference from image to image: compared only when a write replaced them.
        delta.acls_changed = old.acls is not new.acls and old.acls != new.acls
        delta.scram_credentials_changed = (old.scram_credentials is not new.scram_credentials
                                           and old.scram_credentials != new.scram_credentials)
        delta.client_quotas_changed = (old.client_quotas is not new.client_quotas
                                       and old.client_quotas != new.client_quotas)
        delta.group_configs_changed = (old.group_configs is not new.group_configs
                                       and old.group_configs != new.group_configs)
        return delta

    @property
    def is_empty(self) -> bool:
        return not (
            self.registered_brokers
            or self.unregistered_brokers
            or self.created_topics
            or self.deleted_topics
            or self.changed_topics
            or self.changed_partitions
            or self.controller_changed
            or self.broker_configs_changed
            or self.acls_changed
            or self.scram_credentials_changed
            or self.client_quotas_changed
            or self.group_configs_changed
        )
