"""The resources of AlterConfigs and IncrementalAlterConfigs, shared by both handlers.

Each resource gets its own error code and message, as in Kafka:
- topics (type 2): the new override set is checked as CreateTopics checks configs (an
  unknown key or a bad value is INVALID_CONFIG naming the key), stored (standalone: the
  log manager's topic metadata; cluster mode: the metadata store, shared by every broker)
  and applied to the topic's logs at once (a retention change acts on the next retention
  pass, no restart). The internal topics may be altered, as in Kafka. A missing topic is
  UNKNOWN_TOPIC_OR_PARTITION; an illegal name INVALID_TOPIC_EXCEPTION.
- a resource named twice in one request: INVALID_REQUEST for each copy, as Kafka answers.
- Deviation: brokers (type 4), broker loggers (8) and groups (32) are INVALID_REQUEST
  with a message saying so: oncelog's broker keys come from server.properties and
  --override only, and it has no KIP-848 group configs.
"""

from __future__ import annotations

from collections import Counter

from oncelog.broker.config_changes import ConfigChangeError
from oncelog.broker.dispatch import RequestContext
from oncelog.broker.topics import OverridesChange, TopicRequestError, alter_topic_configs
from oncelog.protocol.messages import ErrorCode
from oncelog.storage.errors import InvalidTopicError
from oncelog.storage.manager import validate_topic_name

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
GROUP = 32

_UNSUPPORTED = {
    BROKER: "Dynamic broker configs are not supported: oncelog reads broker keys from server.properties and "
            "--override at start-up.",
    BROKER_LOGGER: "Broker logger levels cannot be changed at run time on oncelog.",
    GROUP: "Group configs (KIP-848) are not supported by oncelog.",
}


def duplicated(resources) -> set[tuple[int, str]]:
    """The (type, name) pairs named more than once in one request."""
    counts = Counter((resource.resource_type, resource.resource_name) for resource in resources)
    return {key for key, count in counts.items() if count > 1}


async def alter_resource(ctx: RequestContext, resource, change: OverridesChange,
                         validate_only: bool) -> tuple[ErrorCode, str | None]:
    """Apply `change` to one resource's overrides: its error code and message."""
    kind, name = resource.resource_type, resource.resource_name
    if kind != TOPIC:
        message = _UNSUPPORTED.get(kind, f"Unexpected resource type {kind}.")
        return ErrorCode.invalid_request, message
    try:
        validate_topic_name(name)
        await alter_topic_configs(ctx.broker, name, change, validate_only=validate_only)
    except InvalidTopicError as error:
        return ErrorCode.invalid_topic_exception, str(error)
    except (TopicRequestError, ConfigChangeError) as error:
        return error.code, str(error)
    return ErrorCode.none, None


def answers(ctx: RequestContext, request, outcome) -> tuple:
    """The per-resource results, in the request's order, from `outcome` (each resource's
    (code, message))."""
    make = ctx.response.make
    return tuple(
        make("AlterConfigsResourceResponse", error_code=code, error_message=message,
             resource_type=resource.resource_type, resource_name=resource.resource_name)
        for resource, (code, message) in zip(request.resources, outcome, strict=True)
    )
