"""AlterConfigs and IncrementalAlterConfigs, the part both handlers share: the loop over
the request's resources and what each resource type means.

Each resource gets its own error code and message, as in Kafka:
- topics (type 2): the new override set is checked as CreateTopics checks configs (an
  unknown key or a bad value is INVALID_CONFIG naming the key), stored (standalone: the
  log manager's topic metadata; cluster mode: the metadata store, shared by every broker)
  and applied to the topic's logs at once (a retention change acts on the next retention
  pass, no restart). The internal topics may be altered, as in Kafka. A missing topic is
  UNKNOWN_TOPIC_OR_PARTITION; an illegal name INVALID_TOPIC_EXCEPTION.
- brokers (type 4): this broker's dynamic configs (its id) or the cluster-wide default
  (empty name), see oncelog.config.dynamic; another broker's id is INVALID_REQUEST
  ("Unexpected broker id, expected N or empty string, but received M"), as in Kafka.
- groups (type 32): a group's own configs (KIP-848's consumer.session.timeout.ms and
  consumer.heartbeat.interval.ms, see oncelog.config.groups), whether or not the
  group exists; an unknown key or a bad value is INVALID_CONFIG with Kafka's message, an
  empty name INVALID_REQUEST ("Default group resources are not allowed."). Stored as the
  dynamic broker configs are, and read by the group coordinator at the group's next
  heartbeat.
- a resource named twice in one request: INVALID_REQUEST for each copy.
- Deviation: broker loggers (8) are INVALID_REQUEST with a message saying so: oncelog has
  no run-time log levels.
- Authorization, as Kafka (the broker's checks, then the controller's
  authorizeAlterResource), after the duplicate check and, for brokers, the broker id
  check: a topic needs Topic ALTER_CONFIGS (else TOPIC_AUTHORIZATION_FAILED); brokers
  and client metrics (16) Cluster ALTER_CONFIGS (else CLUSTER_AUTHORIZATION_FAILED);
  groups Group ALTER_CONFIGS (else GROUP_AUTHORIZATION_FAILED); broker loggers, in
  IncrementalAlterConfigs only, Cluster ALTER_CONFIGS (AlterConfigs refuses them first).
  Each with Kafka's message. Deviation: Kafka's broker validates a broker config change
  before the controller authorizes it, so an unauthorized bad change gets the
  validation error; here it gets CLUSTER_AUTHORIZATION_FAILED.

The handlers plan what a resource's changes make of its overrides (`Plan`, checked at the
request's pace with the list keys of the resource's type: config_changes.PlannedChange);
this module gives the planned change the keys' built-in defaults, and the owner of the
overrides (the topics', the dynamic broker configs' or the group configs' store) applies
the result.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from oncelog.broker.dispatch import RequestContext
from oncelog.config import dynamic, groups
from oncelog.config.broker import SETTINGS
from oncelog.config.changes import ConfigChangeError, PlannedChange
from oncelog.kernel.topics import TopicRequestError
from oncelog.pacing import Steps, run_paced
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from oncelog.storage.config import TOPIC_CONFIGS, TOPIC_LIST_KEYS, LogConfig
from oncelog.storage.errors import InvalidTopicError, LogError
from oncelog.storage.manager import validate_topic_name

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
CLIENT_METRICS = 16
GROUP = 32

BROKER_LIST_KEYS = frozenset(TOPIC_CONFIGS[key].broker_key for key in TOPIC_LIST_KEYS)  # log.cleanup.policy
TOPIC_DEFAULTS = LogConfig().to_kafka_dict()  # the topic keys' built-in defaults
BROKER_DEFAULTS = {key: setting.default for key, setting in SETTINGS.items()}

_UNSUPPORTED = {
    BROKER_LOGGER: "Broker logger levels cannot be changed at run time on oncelog.",
}

# The ACL resource a config resource type is authorized on, and the error when refused.
_CLUSTER_REFUSAL = (ResourceType.CLUSTER, ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
_AUTHORIZED_ON = {
    TOPIC: (ResourceType.TOPIC, ErrorCode.topic_authorization_failed, "Topic authorization failed."),
    BROKER: _CLUSTER_REFUSAL,
    BROKER_LOGGER: _CLUSTER_REFUSAL,
    CLIENT_METRICS: _CLUSTER_REFUSAL,
    GROUP: (ResourceType.GROUP, ErrorCode.group_authorization_failed, "Group authorization failed."),
}

# A resource's new overrides, from its overrides now, the keys' built-in defaults and the
# keys that hold lists.
Change = Callable[[Mapping[str, str], Mapping[str, str], frozenset[str]], dict[str, str]]
# What the request asks of one resource, planned with the list keys of its type.
Plan = Callable[[Any, frozenset[str]], Steps[PlannedChange]]
_LIST_KEYS = {TOPIC: TOPIC_LIST_KEYS, BROKER: BROKER_LIST_KEYS}


async def alter_all(ctx: RequestContext, request, plan_of: Plan, response: str, *, incremental: bool) -> object:
    """Answer an AlterConfigs or IncrementalAlterConfigs request: `plan_of(resource,
    list keys)` plans what the request asks of one resource; `response` names the
    response entity; `incremental`: IncrementalAlterConfigs (which knows broker loggers)."""
    named: set[tuple[int, str]] = set()
    duplicated: set[tuple[int, str]] = set()  # named more than once
    async for resource in ctx.paced(request.resources):
        key = (resource.resource_type, resource.resource_name)
        if key in named:
            duplicated.add(key)
        named.add(key)
    outcome: list[tuple[ErrorCode, str | None]] = []
    for resource in request.resources:
        await ctx.pace()
        if (resource.resource_type, resource.resource_name) in duplicated:
            outcome.append((ErrorCode.invalid_request, "Duplicate resource in the request."))
        else:
            refusal = _refusal(ctx, resource.resource_type, resource.resource_name, incremental)
            if refusal is not None:
                outcome.append(refusal)
            else:
                planned = await run_paced(plan_of(resource, _LIST_KEYS.get(resource.resource_type, frozenset())),
                                          ctx.pace)
                change = partial(_apply, planned)
                outcome.append(await _alter(ctx, resource, change, request.validate_only))
    make = ctx.response.make
    return make(response, throttle_time=NO_THROTTLE, responses=tuple([
        make("AlterConfigsResourceResponse", error_code=code, error_message=message,
             resource_type=resource.resource_type, resource_name=resource.resource_name)
        async for resource, (code, message) in ctx.paced(zip(request.resources, outcome, strict=True))
    ]))


def _apply(planned: PlannedChange, current: Mapping[str, str], defaults: Mapping[str, str],
           _list_keys: frozenset[str]) -> dict[str, str]:
    return planned.apply(current, defaults)


def _refusal(ctx: RequestContext, kind: int, name: str, incremental: bool) -> tuple[ErrorCode, str | None] | None:
    """The authorization error of altering the resource, or None when the principal may
    (or when the resource is refused for another reason first, as Kafka's broker does)."""
    if kind == BROKER and name not in (dynamic.CLUSTER_DEFAULT, str(ctx.broker.node_id)):
        return None  # another broker's id: INVALID_REQUEST, before authorization
    if kind == BROKER_LOGGER and not incremental:
        return None  # AlterConfigs has no broker loggers: INVALID_REQUEST
    authorized_on = _AUTHORIZED_ON.get(kind)
    if authorized_on is None:
        return None
    resource_type, code, message = authorized_on
    if ctx.authorize(AclOperation.ALTER_CONFIGS, resource_type,
                     CLUSTER_NAME if resource_type is ResourceType.CLUSTER else name):
        return None
    return code, message


async def _alter(ctx: RequestContext, resource, change: Change, validate_only: bool) -> tuple[ErrorCode, str | None]:
    kind, name = resource.resource_type, resource.resource_name
    try:
        if kind == TOPIC:
            validate_topic_name(name)
            await ctx.broker.topics.alter_configs(name,
                                                  lambda current: change(current, TOPIC_DEFAULTS, TOPIC_LIST_KEYS),
                                                  validate_only=validate_only)
        elif kind == BROKER:
            await _alter_broker(ctx, name, change, validate_only)
        elif kind == GROUP:
            await _alter_group(ctx, name, change, validate_only)
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
    if name not in (dynamic.CLUSTER_DEFAULT, str(broker.node_id)):
        raise ConfigChangeError(ErrorCode.invalid_request,
                                f"Unexpected broker id, expected {broker.node_id} or empty string, but received {name}")
    store = broker.dynamic_configs
    assert store is not None  # set at start-up, before requests are served
    static = broker.config.explicit

    def check(overrides: dict[str, str]) -> None:
        # What this broker would run with: the other level as it stands, these overrides.
        layered = store.current().with_overrides(name, overrides).layered(broker.node_id, static)
        dynamic.check(name, overrides, layered)

    await store.alter(name, lambda current: change(current, BROKER_DEFAULTS, BROKER_LIST_KEYS), check,
                      validate_only=validate_only)


async def _alter_group(ctx: RequestContext, group_id: str, change: Change, validate_only: bool) -> None:
    groups.check_group_id(group_id)
    config = ctx.broker.config
    broker_values = {key: config[key] for key in groups.BROKER_KEYS}
    defaults = {key: groups.default_value(key, broker_values) for key in groups.GROUP_KEYS}
    await ctx.broker.group_configs.alter(
        group_id, lambda current: groups.normalized(change(current, defaults, frozenset())),
        lambda overrides: groups.check(overrides, broker_values), validate_only=validate_only)
