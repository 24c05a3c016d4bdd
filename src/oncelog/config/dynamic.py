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
  Kafka's LogCleaner);
- `UNUSED_KEYS`: Kafka's other reconfigurable broker keys (DynamicBrokerConfig's
  AllDynamicConfigs) that oncelog does not use (thread pools, Kerberos, metric reporters,
  tiered storage, recompression, turning partition verification off, ...): checked for
  their type, stored and described ("not used by oncelog": they change nothing here), so
  that a tool that sets them gets Kafka's answer; the listener-level ones only for one
  broker, as Kafka's per-broker configs. A broker of an older oncelog that reads them from
  a shared store refuses them as unknown keys: upgrade every broker before setting one.
The keystores and truststores can only change per listener, as in Kafka (`These security
configs can be dynamically updated only per-listener using the listener prefix`), which
oncelog does not do at run time. Any other key is INVALID_REQUEST, `Cannot update these
configs dynamically: Set(...)`, and a bad value INVALID_REQUEST naming the resource and
the key, as Kafka answers for broker resources.

This module is the domain: the layers as a value (`DynamicBrokerConfigs`), the checks,
and the topic defaults a layering gives. Where the layers are kept is the broker's
`DynamicConfigStore` (a file in standalone mode, the metadata store in cluster mode).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
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


def _kafka_number(type_name: str, low: int, high: int):
    def parse(value: str) -> None:
        try:
            number = int(value.strip())
        except ValueError:
            number = None
        if number is None or not low <= number <= high:
            raise ValueError(f"Not a number of type {type_name}")
    return parse


def _kafka_double(value: str) -> None:
    try:
        float(value.strip())
    except ValueError:
        raise ValueError("Not a number of type DOUBLE") from None


def _kafka_boolean(value: str) -> None:
    if value.strip().lower() not in ("true", "false"):
        raise ValueError("Expected value to be either true or false")


def _kafka_any(_value: str) -> None:  # STRING, CLASS (no class is loaded) and LIST
    pass


_SHORT, _INT, _LONG = (_kafka_number("SHORT", -2**15, 2**15 - 1), _kafka_number("INT", -2**31, 2**31 - 1),
                       _kafka_number("LONG", -2**63, 2**63 - 1))


def _threads(value: str) -> None:
    """A thread count, as Kafka's DynamicThreadPool checks it: a number, at least 1."""
    _INT(value)
    if int(value.strip()) < 1:
        raise ValueError("Value must be at least 1")
# Kafka's reconfigurable listener-level keys oncelog does not use: per broker only.
_UNUSED_LISTENER_KEYS: Mapping[str, Callable[[str], None]] = MappingProxyType({
    "principal.builder.class": _kafka_any, "ssl.provider": _kafka_any, "ssl.keymanager.algorithm": _kafka_any,
    "ssl.trustmanager.algorithm": _kafka_any, "ssl.secure.random.implementation": _kafka_any,
    "ssl.engine.factory.class": _kafka_any, "sasl.kerberos.service.name": _kafka_any,
    "sasl.kerberos.kinit.cmd": _kafka_any, "sasl.kerberos.ticket.renew.window.factor": _kafka_double,
    "sasl.kerberos.ticket.renew.jitter": _kafka_double, "sasl.kerberos.min.time.before.relogin": _LONG,
    "sasl.kerberos.principal.to.local.rules": _kafka_any, "sasl.login.refresh.window.factor": _kafka_double,
    "sasl.login.refresh.window.jitter": _kafka_double, "sasl.login.refresh.min.period.seconds": _SHORT,
    "sasl.login.refresh.buffer.seconds": _SHORT,
})
# Kafka's other reconfigurable broker keys oncelog does not use (cluster-wide or per broker).
_UNUSED_CLUSTER_KEYS: Mapping[str, Callable[[str], None]] = MappingProxyType({
    "max.connection.creation.rate": _INT, "num.network.threads": _threads, "num.io.threads": _threads,
    "num.replica.fetchers": _threads, "num.recovery.threads.per.data.dir": _threads, "background.threads": _threads,
    "log.cleaner.threads": _threads, "log.cleaner.io.max.bytes.per.second": _kafka_double,
    "log.cleaner.io.buffer.size": _INT, "metric.reporters": _kafka_any,
    "transaction.partition.verification.enable": _kafka_boolean,
    "log.preallocate": _kafka_boolean, "unclean.leader.election.enable": _kafka_boolean,
    "log.local.retention.ms": _LONG, "log.local.retention.bytes": _LONG,
    "log.message.timestamp.before.max.ms": _LONG, "log.message.timestamp.after.max.ms": _LONG,
    "log.index.size.max.bytes": _INT, "log.segment.delete.delay.ms": _LONG, "log.roll.jitter.ms": _LONG,
    "compression.type": _kafka_any, "compression.gzip.level": _INT, "compression.lz4.level": _INT,
    "compression.zstd.level": _INT, "remote.log.index.file.cache.total.size.bytes": _LONG,
    "remote.log.manager.copy.max.bytes.per.second": _LONG, "remote.log.manager.fetch.max.bytes.per.second": _LONG,
    "remote.log.reader.threads": _INT, "remote.log.manager.copier.thread.pool.size": _INT,
    "remote.log.manager.expiration.thread.pool.size": _INT, "remote.log.manager.follower.thread.pool.size": _INT,
    "remote.fetch.max.wait.ms": _INT, "remote.list.offsets.request.timeout.ms": _LONG,
})
UNUSED_KEYS = frozenset(_UNUSED_LISTENER_KEYS) | frozenset(_UNUSED_CLUSTER_KEYS)
# SslConfigs.RECONFIGURABLE_CONFIGS: Kafka changes these only with a listener prefix.
PER_LISTENER_SECURITY_KEYS = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.key", "ssl.keystore.certificate.chain", "ssl.truststore.type", "ssl.truststore.location",
    "ssl.truststore.password", "ssl.truststore.certificates",
})
DYNAMIC_KEYS = TOPIC_DEFAULT_KEYS | BROKER_LEVEL_KEYS | UNUSED_KEYS

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
    InvalidConfigError naming a bad key); the keys oncelog does not use play no part."""
    read = {key: value for key, value in broker_keys.items() if key not in UNUSED_KEYS or key in SETTINGS}
    return LogConfig().with_overrides(BrokerConfig(read).log_defaults())


def check(resource_name: str, overrides: Mapping[str, str], layered: Mapping[str, str]) -> None:
    """Raise ConfigChangeError, as Kafka answers, unless `overrides` may become the
    dynamic config of broker resource `resource_name`; `layered`: the broker keys this
    broker would then run with (static, the cluster default, its own)."""
    fixed = sorted(key for key in overrides if key not in DYNAMIC_KEYS and key not in PER_LISTENER_SECURITY_KEYS)
    if fixed:
        raise ConfigChangeError(ErrorCode.invalid_request,
                                f"Cannot update these configs dynamically: Set({', '.join(fixed)})")
    security = sorted(key for key in overrides if key in PER_LISTENER_SECURITY_KEYS)
    if security:
        raise ConfigChangeError(ErrorCode.invalid_request,
                                "These security configs can be dynamically updated only per-listener using the "
                                f"listener prefix: Set({', '.join(security)})")
    per_broker = sorted(key for key in overrides if key in _UNUSED_LISTENER_KEYS)
    if resource_name == CLUSTER_DEFAULT and per_broker:
        raise ConfigChangeError(ErrorCode.invalid_request,
                                "Cannot update these configs at default cluster level, broker id must be "
                                f"specified: Set({', '.join(per_broker)})")
    for key, value in overrides.items():
        parse = _UNUSED_LISTENER_KEYS.get(key) or _UNUSED_CLUSTER_KEYS.get(key)
        try:
            if parse is not None:
                parse(value)
        except ValueError as error:
            raise ConfigChangeError(
                ErrorCode.invalid_request,
                f"Invalid config value for resource ConfigResource(type=BROKER, name='{resource_name}'): "
                f"Invalid value {value} for configuration {key}: {error}",
            ) from None
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
