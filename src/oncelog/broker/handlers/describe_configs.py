"""DescribeConfigs (key 32), v1-v4.

- Topic resources (type 2): every topic-level key with its effective value. Source and
  synonyms follow Kafka's ConfigHelper: a topic override (TOPIC_CONFIG) comes first,
  then the broker keys the default comes from, most precise first (`retention.ms`:
  `log.retention.ms`, `.minutes`, `.hours`), by source: this broker's dynamic configs
  (DYNAMIC_BROKER_CONFIG), the cluster-wide dynamic default
  (DYNAMIC_DEFAULT_BROKER_CONFIG), server.properties or --override
  (STATIC_BROKER_CONFIG), then the same keys' built-in defaults (DEFAULT_CONFIG); the
  list starts at the topic key's own broker key, so a default that comes from a coarser
  key only (`log.retention.hours`) lists no synonym, as in Kafka. The entry's source is
  its first synonym's (DEFAULT_CONFIG when there is none).
- Broker resources (type 4) named by this node id: the broker keys, built the same way;
  keys Kafka has no default for (`log.retention.ms`, `log.roll.ms`, ...) have a null
  value until set; the dynamic keys (oncelog.config.dynamic) are not read-only.
  Then the listener overrides set (`listener.name.<l>.<key>`, the listener in lower
  case, as Kafka names them; STATIC_BROKER_CONFIG), with the key they override as a
  synonym (Kafka's brokerConfigSynonyms). Then Kafka's reconfigurable keys oncelog does
  not use (`config.dynamic.UNUSED_KEYS`) where they were set dynamically, documented (v3+,
  when asked) as having no effect here.
- Sensitive keys (`config.is_sensitive`: Kafka's PASSWORD-typed keys, also behind a
  listener prefix) have a null value and `is_sensitive`, and so do their synonyms.
  The cluster default resource (empty name) lists the dynamic defaults only.
- Group resources (type 32), whether or not the group exists: its config keys
  (oncelog.config.groups) with the value it runs with. Synonyms as Kafka's since
  KAFKA-20289: the group's own value (DYNAMIC_GROUP_CONFIG, 8) when set, then the broker
  key the default comes from (`group.consumer.session.timeout.ms`) by source, as above;
  the entry's source is the first synonym's. An empty name is INVALID_REQUEST ("Group
  name must not be empty"), as in Kafka.
- `configuration_keys` narrows the list (null or empty: all); an illegal topic name is INVALID_TOPIC_EXCEPTION,
  a missing topic UNKNOWN_TOPIC_OR_PARTITION, another broker id or resource type
  INVALID_REQUEST.
- Authorization, as Kafka's ConfigHelper, before anything else about a resource: a topic
  needs Topic DESCRIBE_CONFIGS (else TOPIC_AUTHORIZATION_FAILED); brokers, broker
  loggers (8) and client metrics (16) Cluster DESCRIBE_CONFIGS (else
  CLUSTER_AUTHORIZATION_FAILED); groups (32) Group DESCRIBE_CONFIGS (else
  GROUP_AUTHORIZATION_FAILED). Each with Kafka's message and no configs.
"""

from __future__ import annotations

from collections.abc import Mapping

from oncelog.broker import config_sources as sources
from oncelog.broker.dispatch import RequestContext, api
from oncelog.config.broker import SETTINGS, is_sensitive
from oncelog.config.dynamic import DYNAMIC_KEYS, UNUSED_KEYS
from oncelog.config.groups import GROUP_KEYS
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from oncelog.storage.errors import InvalidTopicError
from oncelog.storage.manager import validate_topic_name

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
CLIENT_METRICS = 16
GROUP = 32

# The ACL resource a config resource type is authorized on, and the error when refused.
_AUTHORIZED_ON = {
    TOPIC: (ResourceType.TOPIC, ErrorCode.topic_authorization_failed, "Topic authorization failed."),
    BROKER: (ResourceType.CLUSTER, ErrorCode.cluster_authorization_failed, "Cluster authorization failed."),
    BROKER_LOGGER: (ResourceType.CLUSTER, ErrorCode.cluster_authorization_failed, "Cluster authorization failed."),
    CLIENT_METRICS: (ResourceType.CLUSTER, ErrorCode.cluster_authorization_failed, "Cluster authorization failed."),
    GROUP: (ResourceType.GROUP, ErrorCode.group_authorization_failed, "Group authorization failed."),
}

TYPE_BOOLEAN, TYPE_STRING, TYPE_INT, TYPE_LONG, TYPE_LIST, TYPE_PASSWORD = 1, 2, 3, 5, 7, 9
UNUSED_DOCUMENTATION = "Not used by oncelog: stored and described, as Kafka's reconfigurable key, with no effect."
_INT_KEYS = frozenset({"max.message.bytes", "index.interval.bytes", "segment.bytes", "num.partitions",
                       "node.id", "broker.id", "default.replication.factor", "socket.request.max.bytes",
                       "message.max.bytes", "log.index.interval.bytes", "max.connections"})
_LIST_KEYS = frozenset({"cleanup.policy", "log.cleanup.policy", "log.dirs", "listeners", "advertised.listeners"})


def _config_type(key: str, value: str | None) -> int:
    if key in GROUP_KEYS:
        return TYPE_INT if GROUP_KEYS[key].is_int else TYPE_STRING
    if is_sensitive(key):
        return TYPE_PASSWORD
    if key in _LIST_KEYS:
        return TYPE_LIST
    if key in _INT_KEYS:
        return TYPE_INT
    if value in ("true", "false"):
        return TYPE_BOOLEAN
    if key.endswith((".ms", ".bytes", ".messages", ".hours", ".minutes")):
        return TYPE_LONG
    return TYPE_STRING


@api(32, "DescribeConfigs", range(1, 5))
async def handle(ctx: RequestContext, request) -> object:
    documented = getattr(request, "include_documentation", False)  # v3+
    results = [await _describe(ctx, resource, request.include_synonyms, documented)
               async for resource in ctx.paced(request.resources)]
    return ctx.response.make("DescribeConfigsResponse", throttle_time=NO_THROTTLE, results=tuple(results))


def _refusal(ctx: RequestContext, resource) -> tuple[ErrorCode, str] | None:
    """The authorization error of `resource`, or None when the principal may describe it."""
    authorized_on = _AUTHORIZED_ON.get(resource.resource_type)
    if authorized_on is None:
        return None  # not a resource type Kafka describes: INVALID_REQUEST below
    resource_type, code, message = authorized_on
    name = CLUSTER_NAME if resource_type is ResourceType.CLUSTER else resource.resource_name
    if ctx.authorize(AclOperation.DESCRIBE_CONFIGS, resource_type, name):
        return None
    return code, message


async def _describe(ctx: RequestContext, resource, include_synonyms: bool, documented: bool) -> object:
    make = ctx.response.make
    broker = ctx.broker
    refusal = _refusal(ctx, resource)
    if refusal is not None:
        return make("DescribeConfigsResult", error_code=refusal[0], error_message=refusal[1],
                    resource_type=resource.resource_type, resource_name=resource.resource_name, configs=())
    entries: list[tuple[str, str | None, int, list[tuple[str, str, int]]]] = []
    code, message = ErrorCode.none, None
    layers = sources.layers(broker)
    if resource.resource_type == TOPIC:
        info = None
        try:
            validate_topic_name(resource.resource_name)
            info = broker.logs.topics().get(resource.resource_name)
        except InvalidTopicError as error:
            code, message = ErrorCode.invalid_topic_exception, str(error)
        if info is None and code == ErrorCode.none:
            code, message = ErrorCode.unknown_topic_or_partition, f"Topic '{resource.resource_name}' does not exist."
        if info is not None:
            entries = sources.topic_entries(info, layers)
    elif resource.resource_type == BROKER:
        if resource.resource_name not in ("", str(broker.node_id)):
            code = ErrorCode.invalid_request
            message = f"Unexpected broker id, expected {broker.node_id} or empty string."
        elif resource.resource_name:
            entries = sources.broker_entries(broker, layers)
        else:  # the cluster-wide default: its dynamic keys only
            for key, default_value in sorted(sources.dynamic_layer(broker, "").items()):
                entries.append((key, default_value, sources.DYNAMIC_DEFAULT_BROKER_CONFIG,
                                [(key, default_value, sources.DYNAMIC_DEFAULT_BROKER_CONFIG)]))
    elif resource.resource_type == GROUP:
        if resource.resource_name:
            entries = _group_entries(broker, resource.resource_name, layers)
        else:
            code, message = ErrorCode.invalid_request, "Group name must not be empty"
    else:
        code, message = ErrorCode.invalid_request, f"Unsupported resource type {resource.resource_type}."

    keys = resource.configuration_keys
    if keys:  # null or empty: every key, as in Kafka
        wanted = {key async for key in ctx.paced(keys)}
        entries = [e for e in entries if e[0] in wanted]
    configs = tuple(
        make(
            "DescribeConfigsResourceResult",
            name=key,
            value=None if is_sensitive(key) else value,  # as Kafka: a password's value is never sent
            read_only=resource.resource_type == BROKER and key not in DYNAMIC_KEYS,
            config_source=source,
            is_sensitive=is_sensitive(key),
            synonyms=tuple(make("DescribeConfigsSynonym", name=n, value=None if is_sensitive(key) or is_sensitive(n)
                                else v, source=s) for n, v, s in synonyms)
            if include_synonyms else (),
            config_type=_config_type(key, value),
            documentation=UNUSED_DOCUMENTATION if documented and key in UNUSED_KEYS and key not in SETTINGS else None,
        )
        for key, value, source, synonyms in entries
    )
    return make(
        "DescribeConfigsResult",
        error_code=code,
        error_message=message,
        resource_type=resource.resource_type,
        resource_name=resource.resource_name,
        configs=configs if code == ErrorCode.none else (),
    )


def _group_entries(broker, group_id: str, layers: list[tuple[int, Mapping[str, str]]]
                   ) -> list[tuple[str, str | None, int, list[tuple[str, str, int]]]]:
    """A group's config keys: its own value, else the broker key's (KAFKA-20289's synonyms)."""
    own = broker.group_configs.current().of(group_id)
    entries: list[tuple[str, str | None, int, list[tuple[str, str, int]]]] = []
    for key, group_key in sorted(GROUP_KEYS.items()):
        if group_key.broker_key is None:  # a key of its own, with its own default
            synonyms = [(key, own[key], sources.DYNAMIC_GROUP_CONFIG)] if key in own else []
            entries.append((key, synonyms[0][1] if synonyms else group_key.default,
                            synonyms[0][2] if synonyms else sources.DEFAULT_CONFIG, synonyms))
            continue
        synonyms = sources.synonyms(group_key.broker_key, [group_key.broker_key], layers)
        if key in own:
            synonyms.insert(0, (key, own[key], sources.DYNAMIC_GROUP_CONFIG))
        value = synonyms[0][1] if synonyms else None
        entries.append((key, value, synonyms[0][2] if synonyms else sources.DEFAULT_CONFIG, synonyms))
    return entries
