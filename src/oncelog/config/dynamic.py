"""Dynamic broker configs (Kafka's KIP-226): broker keys changed at run time.

Two levels, as in Kafka: one broker's own (AlterConfigs on the broker resource named by
its id; DescribeConfigs source DYNAMIC_BROKER_CONFIG) and the cluster-wide default (the
broker resource with an empty name; DYNAMIC_DEFAULT_BROKER_CONFIG). A key's value is the
first of: this broker's dynamic value, the cluster default's, server.properties or
--override (STATIC_BROKER_CONFIG), the built-in default.

The keys that can change:
- the broker keys that give topics their defaults (`log.retention.ms`,
  `log.segment.bytes`, `log.cleanup.policy`, `log.cleaner.*` compaction settings,
  `message.max.bytes`, `min.insync.replicas`, ...: Kafka's DynamicLogConfig keys, among
  those oncelog reads); a change reaches every topic without an override of its own at
  once;
- `BROKER_LEVEL_KEYS`, read where they act: `num.partitions` and
  `default.replication.factor` (the next topic created with -1, as Confluent Platform
  allows; Apache Kafka keeps them static), `max.connections`, `max.connections.per.ip`
  and `max.connections.per.ip.overrides` (the next connection, as
  Kafka's SocketServer) and `log.cleaner.backoff.ms` (the cleaner's next pause, as
  Kafka's LogCleaner).
Any other key is INVALID_REQUEST, `Cannot update these configs dynamically: Set(...)`,
and a bad value INVALID_REQUEST naming the resource and the key, as Kafka answers for
broker resources.

This module is the domain: the layers as a value (`DynamicBrokerConfigs`), the checks,
and the topic defaults a layering gives. Where the layers are kept is the broker's
`DynamicConfigStore` (a file in standalone mode, the metadata store in cluster mode).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from oncelog.config.broker import SETTINGS, BrokerConfig, ConfigError
from oncelog.config.changes import ConfigChangeError
from oncelog.protocol.messages import ErrorCode
from oncelog.storage.config import TOPIC_CONFIGS, LogConfig
from oncelog.storage.errors import InvalidConfigError

# The broker keys behind topic defaults that oncelog reads (BrokerConfig.log_defaults).
TOPIC_DEFAULT_KEYS = frozenset(
    key
    for definition in TOPIC_CONFIGS.values()
    for key in (definition.broker_key, *(fallback for fallback, _factor in definition.broker_fallbacks))
    if key in SETTINGS
)
# Dynamic keys the broker reads where they act (BrokerConfig.apply_dynamic keeps them current).
BROKER_LEVEL_KEYS = frozenset({"num.partitions", "default.replication.factor", "max.connections",
                               "max.connections.per.ip", "max.connections.per.ip.overrides",
                               "log.cleaner.backoff.ms"})
DYNAMIC_KEYS = TOPIC_DEFAULT_KEYS | BROKER_LEVEL_KEYS

CLUSTER_DEFAULT = ""  # the broker resource name of the cluster-wide default


@dataclass(frozen=True)
class DynamicBrokerConfigs:
    """Every dynamic broker override of a cluster: the default and each broker's."""

    cluster_default: Mapping[str, str] = field(default_factory=dict)
    per_broker: Mapping[int, Mapping[str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cluster_default", MappingProxyType(dict(self.cluster_default)))
        object.__setattr__(self, "per_broker", MappingProxyType(
            {node: MappingProxyType(dict(values)) for node, values in self.per_broker.items() if values}))

    def of(self, resource_name: str) -> Mapping[str, str]:
        """The overrides of one broker resource ("" the cluster default)."""
        if resource_name == CLUSTER_DEFAULT:
            return self.cluster_default
        return self.per_broker.get(int(resource_name), {})

    def with_overrides(self, resource_name: str, overrides: Mapping[str, str]) -> DynamicBrokerConfigs:
        if resource_name == CLUSTER_DEFAULT:
            return DynamicBrokerConfigs(overrides, self.per_broker)
        return DynamicBrokerConfigs(self.cluster_default, {**self.per_broker, int(resource_name): overrides})

    def layered(self, node_id: int, static: Mapping[str, str]) -> dict[str, str]:
        """Broker keys as node `node_id` sees them: static, then the default, then its own."""
        return {**static, **self.cluster_default, **self.per_broker.get(node_id, {})}

    def to_json(self) -> dict:
        return {"default": dict(self.cluster_default),
                "brokers": {str(node): dict(values) for node, values in sorted(self.per_broker.items())}}

    @classmethod
    def from_json(cls, document: Mapping) -> DynamicBrokerConfigs:
        default = document.get("default", {})
        brokers = document.get("brokers", {})
        if not isinstance(default, dict) or not isinstance(brokers, dict):
            raise ValueError(f"malformed dynamic broker configs: {document!r}")
        return cls(_strings(default), {int(node): _strings(values) for node, values in brokers.items()})


def _strings(values: object) -> dict[str, str]:
    if not isinstance(values, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in values.items()):
        raise ValueError(f"malformed dynamic broker config: {values!r}")
    return dict(values)


def topic_defaults(broker_keys: Mapping[str, str]) -> LogConfig:
    """The topic defaults a set of broker keys gives (raises ConfigError or
    InvalidConfigError naming a bad key)."""
    return LogConfig().with_overrides(BrokerConfig(broker_keys).log_defaults())


def check(resource_name: str, overrides: Mapping[str, str], layered: Mapping[str, str]) -> None:
    """Raise ConfigChangeError, as Kafka answers, unless `overrides` may become the
    dynamic config of broker resource `resource_name`; `layered`: the broker keys this
    broker would then run with (static, the cluster default, its own)."""
    fixed = sorted(key for key in overrides if key not in DYNAMIC_KEYS)
    if fixed:
        raise ConfigChangeError(ErrorCode.invalid_request,
                                f"Cannot update these configs dynamically: Set({', '.join(fixed)})")
    try:
        topic_defaults(layered)  # BrokerConfig checks the broker-level keys on the way
    except (ConfigError, InvalidConfigError) as error:
        if isinstance(error, InvalidConfigError):  # named by the topic key it feeds: name the broker key
            definition = TOPIC_CONFIGS.get(error.key)
            error = InvalidConfigError(definition.broker_key if definition else error.key, error.detail)
        raise ConfigChangeError(
            ErrorCode.invalid_request,
            f"Invalid config value for resource ConfigResource(type=BROKER, name='{resource_name}'): {error}",
        ) from None
