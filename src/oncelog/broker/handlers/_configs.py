"""The resources of AlterConfigs and IncrementalAlterConfigs, shared by both handlers.

Each resource gets its own error code and message, as in Kafka:
- topics (type 2): the new override set is checked as CreateTopics checks configs (an
  unknown key or a bad value is INVALID_CONFIG naming the key), stored (standalone: the
  log manager's topic metadata; cluster mode: the metadata store, shared by every broker)
  and applied to the topic's logs at once (a retention change acts on the next retention
  pass, no restart). The internal topics may be altered, as in Kafka. A missing topic is
  UNKNOWN_TOPIC_OR_PARTITION; an illegal name INVALID_TOPIC_EXCEPTION.
- brokers (type 4): this broker's dynamic configs (its id) or the cluster-wide default
  (empty name), see oncelog.broker.dynamic_config; another broker's id is INVALID_REQUEST
  with the message DescribeConfigs gives, as in Kafka.
- a resource named twice in one request: INVALID_REQUEST for each copy, as Kafka answers.
- Deviation: broker loggers (8) and groups (32) are INVALID_REQUEST with a message saying
  so: oncelog has no run-time log levels and no KIP-848 group configs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping

from oncelog.broker import dynamic_config
from oncelog.broker.config_changes import ConfigChangeError
from oncelog.broker.dispatch import RequestContext
from oncelog.broker.topics import TopicRequestError, alter_topic_configs
from oncelog.protocol.messages import ErrorCode
from oncelog.storage.config import TOPIC_LIST_KEYS
from oncelog.storage.errors import InvalidTopicError, LogError
from oncelog.storage.manager import validate_topic_name

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
GROUP = 32

BROKER_LIST_KEYS = frozenset({"log.cleanup.policy"})

_UNSUPPORTED = {
    BROKER_LOGGER: "Broker logger levels cannot be changed at run time on oncelog.",
    GROUP: "Group configs (KIP-848) are not supported by oncelog.",
}

# What a request asks of one resource: its new overrides, from its overrides now, every
# key's value in effect, and the keys that hold lists.
Change = Callable[[Mapping[str, str], Mapping[str, str], frozenset[str]], dict[str, str]]


def duplicated(resources) -> set[tuple[int, str]]:
    """The (type, name) pairs named more than once in one request."""
    counts = Counter((resource.resource_type, resource.resource_name) for resource in resources)
    return {key for key, count in counts.items() if count > 1}


async def alter_resource(ctx: RequestContext, resource, change: Change,
                         validate_only: bool) -> tuple[ErrorCode, str | None]:
    """Apply `change` to one resource's overrides: its error code and message."""
    kind, name = resource.resource_type, resource.resource_name
    try:
        if kind == TOPIC:
            validate_topic_name(name)
            await alter_topic_configs(ctx.broker, name, lambda current, effective: change(
                current, effective, TOPIC_LIST_KEYS), validate_only=validate_only)
        elif kind == BROKER:
            await _alter_broker(ctx, name, change, validate_only)
        else:
            return ErrorCode.invalid_request, _UNSUPPORTED.get(kind, f"Unexpected resource type {kind}.")
    except InvalidTopicError as error:
        return ErrorCode.invalid_topic_exception, str(error)
    except (TopicRequestError, ConfigChangeError) as error:
        return error.code, str(error)
    except LogError as error:  # the dynamic config file could not be written
        return ErrorCode(error.kafka_error_code), str(error)
    return ErrorCode.none, None


async def _alter_broker(ctx: RequestContext, name: str, change: Change, validate_only: bool) -> None:
    broker = ctx.broker
    if name not in (dynamic_config.CLUSTER_DEFAULT, str(broker.node_id)):
        raise ConfigChangeError(ErrorCode.invalid_request,
                                f"Unexpected broker id, expected {broker.node_id} or empty string, but received {name}")
    store = broker.dynamic_configs
    static = broker.config.explicit

    def new_overrides(current: Mapping[str, str]) -> dict[str, str]:
        layered = store.current().layered(broker.node_id, static)
        return change(current, {**broker.config.as_strings(), **layered}, BROKER_LIST_KEYS)

    def check(overrides: dict[str, str]) -> None:
        dynamic_config.check(name, overrides, static)

    await store.alter(name, new_overrides, check, validate_only=validate_only)


def answers(ctx: RequestContext, request, outcome) -> tuple:
    """The per-resource results, in the request's order, from `outcome` (each resource's
    (code, message))."""
    make = ctx.response.make
    return tuple(
        make("AlterConfigsResourceResponse", error_code=code, error_message=message,
             resource_type=resource.resource_type, resource_name=resource.resource_name)
        for resource, (code, message) in zip(request.resources, outcome, strict=True)
    )
