"""DescribeConfigs (key 32), v1-v4.

- Topic resources (type 2): every topic-level key with its effective value. Source and
  synonyms follow Kafka's ConfigHelper: a topic override (TOPIC_CONFIG) comes first,
  then the broker keys the default comes from, most precise first (`retention.ms`:
  `log.retention.ms`, `.minutes`, `.hours`), those set in server.properties or by
  --override as STATIC_BROKER_CONFIG, then the same keys' built-in defaults as
  DEFAULT_CONFIG; the list starts at the topic key's own broker key, so a default that
  comes from a coarser key only (`log.retention.hours`) lists no synonym, as in Kafka.
  The entry's source is its first synonym's (DEFAULT_CONFIG when there is none).
- Broker resources (type 4) named by this node id: the broker keys, built the same way
  (STATIC_BROKER_CONFIG when set, else DEFAULT_CONFIG); keys Kafka has no default for
  (`log.retention.ms`, `log.roll.ms`, ...) have a null value until set. The cluster
  default resource (empty name) lists only dynamic defaults: none here.
- `configuration_keys` narrows the list (null or empty: all); an illegal topic name is INVALID_TOPIC_EXCEPTION,
  a missing topic UNKNOWN_TOPIC_OR_PARTITION, another broker id or resource type
  INVALID_REQUEST.
"""

from __future__ import annotations

from oncelog.broker.config import SETTINGS
from oncelog.broker.dispatch import RequestContext, api
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.storage.config import TOPIC_CONFIGS, LogConfig
from oncelog.storage.errors import InvalidTopicError
from oncelog.storage.manager import validate_topic_name

TOPIC = 2
BROKER = 4

DYNAMIC_TOPIC_CONFIG = 1  # Kafka's TOPIC_CONFIG
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

# Broker keys whose Kafka default is null (a coarser key supplies the value).
_NO_KAFKA_DEFAULT = frozenset({"log.retention.ms", "log.retention.minutes", "log.roll.ms", "log.roll.jitter.ms",
                               "log.flush.interval.ms"})
# Topic key -> the broker keys its default is read from, most precise first.
_TOPIC_SYNONYMS = {
    name: [definition.broker_key, *(key for key, _factor in definition.broker_fallbacks)]
    for name, definition in TOPIC_CONFIGS.items()
}
# Broker key -> the keys that set the same thing (Kafka's brokerConfigSynonyms).
_BROKER_SYNONYMS = {key: group for group in _TOPIC_SYNONYMS.values() if len(group) > 1 for key in group}
# Built-in defaults of broker keys oncelog does not read, from the topic setting they feed.
_TOPIC_DEFAULTS = LogConfig().to_kafka_dict()
_UNREAD_BROKER_DEFAULTS = {definition.broker_key: _TOPIC_DEFAULTS[name] for name, definition in TOPIC_CONFIGS.items()}

TYPE_BOOLEAN, TYPE_STRING, TYPE_INT, TYPE_LONG, TYPE_LIST = 1, 2, 3, 5, 7
_INT_KEYS = frozenset({"max.message.bytes", "index.interval.bytes", "segment.bytes", "num.partitions",
                       "node.id", "broker.id", "default.replication.factor", "socket.request.max.bytes",
                       "message.max.bytes", "log.index.interval.bytes", "max.connections"})
_LIST_KEYS = frozenset({"cleanup.policy", "log.cleanup.policy", "log.dirs", "listeners", "advertised.listeners"})


def _config_type(key: str, value: str | None) -> int:
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
    entries: list[tuple[str, str | None, int, list[tuple[str, str, int]]]] = []
    code, message = ErrorCode.none, None
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
            static = broker.config.explicit
            for key, value in sorted(info.config.to_kafka_dict().items()):
                names = _TOPIC_SYNONYMS[key]
                synonyms = _synonyms(names[0], names, static)
                if key in info.config_overrides:
                    synonyms.insert(0, (key, value, DYNAMIC_TOPIC_CONFIG))
                entries.append((key, value, synonyms[0][2] if synonyms else DEFAULT_CONFIG, synonyms))
    elif resource.resource_type == BROKER:
        if resource.resource_name not in ("", str(broker.node_id)):
            code = ErrorCode.invalid_request
            message = f"Unexpected broker id, expected {broker.node_id} or empty string."
        elif resource.resource_name:  # the cluster default ("") holds dynamic defaults only: none
            static = broker.config.explicit
            for key in sorted(SETTINGS):
                synonyms = _synonyms(key, _BROKER_SYNONYMS.get(key, [key]), static)
                broker_value = static[key] if key in static else _default(key)
                entries.append((key, broker_value, synonyms[0][2] if synonyms else DEFAULT_CONFIG, synonyms))
    else:
        code, message = ErrorCode.invalid_request, f"Unsupported resource type {resource.resource_type}."

    keys = resource.configuration_keys
    if keys:  # null or empty: every key, as in Kafka
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


def _default(broker_key: str) -> str | None:
    """A broker key's built-in default as Kafka reports it (None: Kafka has none)."""
    if broker_key in _NO_KAFKA_DEFAULT:
        return None
    setting = SETTINGS.get(broker_key)
    if setting is not None:
        return setting.default
    return _UNREAD_BROKER_DEFAULTS.get(broker_key)


def _synonyms(name: str, names: list[str], static: dict[str, str]) -> list[tuple[str, str, int]]:
    """Kafka's ConfigHelper.configSynonyms: the keys of `names` set in server.properties
    or by --override, then their defaults, dropping those listed before `name`."""
    found = [(key, static[key], STATIC_BROKER_CONFIG) for key in names if key in static]
    found += [(key, default, DEFAULT_CONFIG) for key in names if (default := _default(key)) is not None]
    while found and found[0][0] != name:
        found.pop(0)
    return found
