"""Topic administration shared by Metadata (auto-create), CreateTopics, DeleteTopics,
CreatePartitions and the config APIs: request-level checks and the mapping of storage
errors to Kafka codes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from oncelog.protocol.messages import ErrorCode
from oncelog.storage import errors as storage_errors

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker

log = logging.getLogger("oncelog.topics")

# Kafka's controller refuses to create more partitions than this in one request.
MAX_PARTITIONS_PER_REQUEST = 10_000

class TopicRequestError(Exception):
    """A per-topic failure answered with a Kafka error code and message."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def error_code_for(error: Exception) -> ErrorCode:
    """Kafka's code for a storage error; anything else is a bug and propagates."""
    if isinstance(error, storage_errors.LogError):
        return ErrorCode(error.kafka_error_code)
    raise error


def create_topic(
    broker: Broker,
    name: str,
    num_partitions: int,
    replication_factor: int,
    configs: dict[str, str],
    *,
    validate_only: bool = False,
):
    """Create a topic (standalone) or raise TopicRequestError with Kafka's code for what
    is wrong."""
    num_partitions, replication_factor = _checked_counts(broker, num_partitions, replication_factor)
    if replication_factor > 1:
        raise TopicRequestError(
            ErrorCode.invalid_replication_factor,
            f"Unable to replicate the partition {replication_factor} time(s): The target replication factor "
            f"of {replication_factor} cannot be reached because only 1 broker(s) are registered.",
        )
    try:
        if validate_only:
            return broker.logs.validate_new_topic(name, num_partitions, configs)
        info = broker.logs.create_topic(name, num_partitions, configs)
    except storage_errors.LogError as error:
        raise TopicRequestError(error_code_for(error), str(error)) from None
    log.info("created topic %s with %d partition(s)%s", name, num_partitions,
             f" and configs {configs}" if configs else "")
    return info


async def create_topic_for_request(
    broker: Broker,
    name: str,
    num_partitions: int,
    replication_factor: int,
    configs: dict[str, str],
    *,
    validate_only: bool = False,
    assignment: list[list[int]] | None = None,
):
    """Create a topic through the cluster metadata (cluster mode) or locally."""
    if broker.cluster is None:
        return create_topic(broker, name, num_partitions, replication_factor, configs, validate_only=validate_only)
    from oncelog.cluster import topics as cluster_topics

    if assignment is None:
        num_partitions, replication_factor = _checked_counts(broker, num_partitions, replication_factor)
    return await cluster_topics.create_topic(broker, name, num_partitions, replication_factor, configs,
                                             validate_only=validate_only, assignment=assignment)


# A topic's new override set, from its overrides now.
OverridesChange = Callable[[Mapping[str, str]], dict[str, str]]


async def alter_topic_configs(broker: Broker, name: str, change: OverridesChange, *,
                              validate_only: bool = False) -> None:
    """Give a topic the override set `change` computes (checked as CreateTopics checks
    configs), through the cluster metadata (cluster mode) or locally; raises
    TopicRequestError with Kafka's code for what is wrong."""
    if broker.cluster is not None:
        from oncelog.cluster import topics as cluster_topics

        await cluster_topics.alter_topic_configs(broker, name, change, validate_only=validate_only)
        return
    info = broker.logs.topic(name)
    if info is None:
        raise TopicRequestError(ErrorCode.unknown_topic_or_partition, f"The topic '{name}' does not exist.")
    overrides = change(info.config_overrides)
    try:
        broker.logs.alter_topic_config(name, overrides, replace=True, validate_only=validate_only)
    except storage_errors.LogError as error:
        raise TopicRequestError(error_code_for(error), str(error)) from None
    if not validate_only:
        log.info("topic %s configs are now %s", name, overrides or "the defaults")


def _checked_counts(broker: Broker, num_partitions: int, replication_factor: int) -> tuple[int, int]:
    if num_partitions == -1:
        num_partitions = broker.config["num.partitions"]
    if replication_factor == -1:
        replication_factor = broker.config["default.replication.factor"]
    if num_partitions > MAX_PARTITIONS_PER_REQUEST:
        raise TopicRequestError(ErrorCode.policy_violation, "Excessively large number of partitions per request.")
    if num_partitions <= 0:
        raise TopicRequestError(
            ErrorCode.invalid_partitions,
            f"Number of partitions was set to an invalid non-positive value ({num_partitions}).",
        )
    if replication_factor <= 0:
        raise TopicRequestError(
            ErrorCode.invalid_replication_factor, f"Replication factor must be larger than 0, got {replication_factor}."
        )
    return num_partitions, replication_factor
