"""Where a config's value comes from, as Kafka's ConfigHelper tells it: the layers a broker
key is set in (this broker's dynamic configs, the cluster default, server.properties or
--override, the built-in default) and each key's synonyms. DescribeConfigs answers with
it (broker/handlers/describe_configs.py), and the console shows a topic's configs by it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from oncelog.config.broker import SETTINGS, overridden_key
from oncelog.config.dynamic import UNUSED_KEYS
from oncelog.storage.config import TOPIC_CONFIGS, LogConfig

if TYPE_CHECKING:
    from oncelog.config.broker import BrokerConfig
    from oncelog.config.dynamic_store import DynamicConfigStore
    from oncelog.storage.manager import TopicInfo

DYNAMIC_TOPIC_CONFIG = 1  # Kafka's TOPIC_CONFIG
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
DYNAMIC_GROUP_CONFIG = 8  # Kafka's GROUP_CONFIG

# Broker keys whose Kafka default is null (a coarser key supplies the value).
NO_KAFKA_DEFAULT = frozenset({"log.retention.ms", "log.retention.minutes", "log.roll.ms", "log.roll.jitter.ms",
                               "log.flush.interval.ms"})
# Topic key -> the broker keys its default is read from, most precise first.
TOPIC_SYNONYMS = {
    name: [definition.broker_key, *(key for key, _factor in definition.broker_fallbacks)]
    for name, definition in TOPIC_CONFIGS.items()
}
# Broker key -> the keys that set the same thing (Kafka's brokerConfigSynonyms).
BROKER_SYNONYMS = {key: group for group in TOPIC_SYNONYMS.values() if len(group) > 1 for key in group}
# Built-in defaults of broker keys oncelog does not read, from the topic setting they feed.
TOPIC_DEFAULTS = LogConfig().to_kafka_dict()
UNREAD_BROKER_DEFAULTS = {definition.broker_key: TOPIC_DEFAULTS[name] for name, definition in TOPIC_CONFIGS.items()}


# (source, the keys set there), most precise first; and one key's synonyms: (key, value, source).
Layers = list[tuple[int, Mapping[str, str]]]
Synonyms = list[tuple[str, str, int]]
# (key, value, source, synonyms): one entry of DescribeConfigs.
Entry = tuple[str, "str | None", int, Synonyms]


class ConfiguredBroker(Protocol):
    @property
    def node_id(self) -> int: ...
    @property
    def config(self) -> BrokerConfig: ...
    @property
    def dynamic_configs(self) -> DynamicConfigStore: ...


def default(broker_key: str) -> str | None:
    """A broker key's built-in default as Kafka reports it (None: Kafka has none)."""
    if broker_key in NO_KAFKA_DEFAULT:
        return None
    setting = SETTINGS.get(broker_key)
    if setting is not None:
        return setting.default
    return UNREAD_BROKER_DEFAULTS.get(broker_key)


def dynamic_layer(broker: ConfiguredBroker, resource_name: str) -> Mapping[str, str]:
    return broker.dynamic_configs.current().of(resource_name)


def layers(broker: ConfiguredBroker) -> Layers:
    """The set broker keys by source, most precise first (the built-in defaults apart)."""
    return [
        (DYNAMIC_BROKER_CONFIG, dynamic_layer(broker, str(broker.node_id))),
        (DYNAMIC_DEFAULT_BROKER_CONFIG, dynamic_layer(broker, "")),
        (STATIC_BROKER_CONFIG, broker.config.explicit),
    ]


def synonyms(name: str, names: list[str], layers: Layers) -> Synonyms:
    """Kafka's ConfigHelper.configSynonyms: the keys of `names` set in each layer (this
    broker's dynamic configs, the cluster default, server.properties or --override), then
    their defaults, dropping those listed before `name`."""
    found = [(key, layer[key], source) for source, layer in layers for key in names if key in layer]
    found += [(key, value, DEFAULT_CONFIG) for key in names if (value := default(key)) is not None]
    while found and found[0][0] != name:
        found.pop(0)
    return found


def topic_entries(info: TopicInfo, layers: Layers) -> list[Entry]:
    """A topic's keys with their values: its own override (TOPIC_CONFIG) first, then the
    broker keys its default comes from, by layer."""
    entries: list[Entry] = []
    for key, value in sorted(info.config.to_kafka_dict().items()):
        names = TOPIC_SYNONYMS[key]
        found = synonyms(names[0], names, layers)
        if key in info.config_overrides:
            found.insert(0, (key, value, DYNAMIC_TOPIC_CONFIG))
        entries.append((key, value, found[0][2] if found else DEFAULT_CONFIG, found))
    return entries


def broker_entries(broker: ConfiguredBroker, layers: Layers) -> list[Entry]:
    """This broker's keys with their values by layer, then the listener overrides set and
    Kafka's reconfigurable keys it stores but does not use."""
    entries: list[Entry] = []
    for key in sorted(SETTINGS):
        found = synonyms(key, BROKER_SYNONYMS.get(key, [key]), layers)
        value = next((layer[key] for _source, layer in layers if key in layer), default(key))
        entries.append((key, value, found[0][2] if found else DEFAULT_CONFIG, found))
    return entries + _listener_entries(broker, layers) + _unused_entries(layers)


def _listener_entries(broker: ConfiguredBroker, layers: Layers) -> list[Entry]:
    """The listener overrides set (server.properties, --override), as Kafka lists its
    originals: each with itself, then the key it overrides, as synonyms."""
    entries: list[Entry] = []
    for listener, overrides in sorted(broker.config.listener_overrides.items()):
        for suffix, value in sorted(overrides.items()):
            key = f"listener.name.{listener.lower()}.{suffix}"
            base = overridden_key(key) or suffix
            found = [(key, value, STATIC_BROKER_CONFIG), *synonyms(base, [base], layers)]
            entries.append((key, value, STATIC_BROKER_CONFIG, found))
    return entries


def _unused_entries(layers: Layers) -> list[Entry]:
    """Kafka's reconfigurable keys that oncelog stores but does not use, where set
    dynamically (for this broker or as the cluster default)."""
    entries: list[Entry] = []
    for key in sorted({key for source, layer in layers if source != STATIC_BROKER_CONFIG for key in layer}):
        if key in UNUSED_KEYS and key not in SETTINGS:
            found = synonyms(key, [key], layers)
            entries.append((key, found[0][1], found[0][2], found))
    return entries
