"""DescribeConfigs (key 32), v1-v4.

- Topic resources (type 2): every topic-level key with its effective value; source
  DYNAMIC_TOPIC_CONFIG for a topic override, DEFAULT_CONFIG otherwise. Synonyms (when
  asked for) list the override, then the broker key the default comes from.
- Broker resources (type 4, name = node id or empty for the cluster default): the broker
  keys; STATIC_BROKER_CONFIG when set in server.properties or by --override.
- `configuration_keys` narrows the list; a missing topic is UNKNOWN_TOPIC_OR_PARTITION,
  another broker id or resource type INVALID_REQUEST.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode

TOPIC = 2
BROKER = 4

DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

TYPE_BOOLEAN, TYPE_STRING, TYPE_INT, TYPE_LONG, TYPE_LIST = 1, 2, 3, 5, 7
_INT_KEYS = frozenset({"max.message.bytes", "index.interval.bytes", "segment.bytes", "num.partitions",
                       "node.id", "broker.id", "default.replication.factor", "socket.request.max.bytes",
                       "message.max.bytes", "log.index.interval.bytes", "max.connections"})
_LIST_KEYS = frozenset({"cleanup.policy", "log.cleanup.policy", "log.dirs", "listeners", "advertised.listeners"})


def _config_type(key: str, value: str) -> int:
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
    results = [_describe(ctx, resource, request.include_synonyms) for resource in request.resources]
    return ctx.response.make("DescribeConfigsResponse", throttle_time=NO_THROTTLE, results=tuple(results))


def _describe(ctx: RequestContext, resource, include_synonyms: bool) -> object:
    make = ctx.response.make
    broker = ctx.broker
    entries: list[tuple[str, str, int, list[tuple[str, str, int]]]] = []
    code, message = ErrorCode.none, None
    if resource.resource_type == TOPIC:
        info = broker.logs.topics().get(resource.resource_name)
        if info is None:
            code, message = ErrorCode.unknown_topic_or_partition, f"Topic '{resource.resource_name}' does not exist."
        else:
            defaults = broker.logs.default_config.to_kafka_dict()
            for key, value in sorted(info.config.to_kafka_dict().items()):
                source = DYNAMIC_TOPIC_CONFIG if key in info.config_overrides else DEFAULT_CONFIG
                synonyms = []
                if key in info.config_overrides:
                    synonyms.append((key, value, DYNAMIC_TOPIC_CONFIG))
                synonyms.append((key, defaults.get(key, value), DEFAULT_CONFIG))
                entries.append((key, value, source, synonyms))
    elif resource.resource_type == BROKER:
        if resource.resource_name not in ("", str(broker.node_id)):
            code, message = ErrorCode.invalid_request, f"Unexpected broker id, expected {broker.node_id} or empty string."
        else:
            for key, (value, explicit) in sorted(broker.config.describe().items()):
                source = STATIC_BROKER_CONFIG if explicit else DEFAULT_CONFIG
                entries.append((key, value, source, [(key, value, source)]))
    else:
        code, message = ErrorCode.invalid_request, f"Unsupported resource type {resource.resource_type}."

    keys = resource.configuration_keys
    if keys is not None:
        wanted = set(keys)
        entries = [e for e in entries if e[0] in wanted]
    configs = tuple(
        make(
            "DescribeConfigsResourceResult",
            name=key,
            value=value,
            read_only=resource.resource_type == BROKER,
            config_source=source,
            is_sensitive=False,
            synonyms=tuple(make("DescribeConfigsSynonym", name=n, value=v, source=s) for n, v, s in synonyms)
            if include_synonyms else (),
            config_type=_config_type(key, value),
            documentation=None,
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
