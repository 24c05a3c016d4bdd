"""Topic administration in cluster mode: CreateTopics, Metadata's auto-creation,
DeleteTopics, CreatePartitions, ElectLeaders and the config APIs write the metadata store,
and every broker creates, deletes or reconfigures its local logs (or leads and follows)
when the change reaches its image.

The checks are the standalone ones (names, partition counts, topic configs), plus
Kafka's placement: replicas spread over the registered brokers, and a replication
factor above their number is INVALID_REPLICATION_FACTOR with Kafka's message. A call
returns once this broker's image has the change, so the topic is usable at once here.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from oncelog.cluster.etcd import EtcdUnavailable
from oncelog.cluster.image import NO_LEADER, PartitionRecord, TopicRecord
from oncelog.cluster.metadata_store import MetadataConflict
from oncelog.cluster.placement import (
    InvalidReplicationFactor,
    check_assignment,
    elect_preferred,
    place_replicas,
    preferred_replica,
)
from oncelog.kernel.internal_topics import REPLICATION_FACTOR_KEY, internal_topic_spec
from oncelog.kernel.topics import (
    ELECTION_NOT_NEEDED_MESSAGE,
    PREFERRED_ELECTION,
    TopicRequestError,
    checked_counts,
    elect_each,
)
from oncelog.pacing import Pace, paced, unpaced
from oncelog.protocol.messages import ErrorCode
from oncelog.storage.errors import InvalidConfigError, InvalidTopicError
from oncelog.storage.manager import TopicInfo, validate_topic_name

if TYPE_CHECKING:
    from oncelog.cluster.runtime import ClusterRuntime
    from oncelog.config.broker import BrokerConfig
    from oncelog.kernel.node import ElectionOutcomes, OverridesChange, TopicCreation
    from oncelog.storage.manager import LogManager

log = logging.getLogger("oncelog.cluster.topics")
CONFIG_WRITE_ATTEMPTS = 5
ASSIGNMENT_SLICE = 1000  # partitions of an explicit assignment checked between two paces


class ClusterTopics:
    """The `node.TopicAdmin` of a broker in a cluster."""

    def __init__(self, runtime: ClusterRuntime, config: BrokerConfig, logs: Callable[[], LogManager]) -> None:
        self._runtime = runtime
        self._config = config
        self._logs = logs

    async def create(self, name: str, num_partitions: int, replication_factor: int, configs: dict[str, str], *,
                     validate_only: bool = False, assignment: list[list[int]] | None = None,
                     pace: Pace = unpaced) -> TopicInfo:
        if assignment is None:
            num_partitions, replication_factor = checked_counts(self._config, num_partitions, replication_factor)
        return await _create_topic(self._runtime, self._logs(), name, num_partitions, replication_factor, configs,
                                   validate_only=validate_only, assignment=assignment, pace=pace)

    async def create_topics(self, creations: Sequence[TopicCreation], *, validate_only: bool = False,
                            pace: Pace = unpaced) -> list[TopicInfo | TopicRequestError]:
        """One topic after the other, each through the metadata quorum."""
        outcomes: list[TopicInfo | TopicRequestError] = []
        for creation in creations:
            try:
                outcomes.append(await self.create(creation.name, creation.num_partitions,
                                                  creation.replication_factor, dict(creation.configs),
                                                  validate_only=validate_only, assignment=creation.assignment,
                                                  pace=pace))
            except TopicRequestError as error:
                outcomes.append(error)
        return outcomes

    async def delete(self, name: str) -> None:
        await _delete_topic(self._runtime, name)

    async def create_partitions(self, name: str, new_total: int, *, validate_only: bool = False,
                                assignment: list[list[int]] | None = None, pace: Pace = unpaced) -> None:
        await _create_partitions(self._runtime, name, new_total, validate_only=validate_only, assignment=assignment,
                                 pace=pace)

    async def alter_configs(self, name: str, change: OverridesChange, *, validate_only: bool = False) -> None:
        await _alter_topic_configs(self._runtime, self._logs(), name, change, validate_only=validate_only)

    async def elect_leaders(self, election_type: int, wanted: Sequence[tuple[str, Sequence[int]]] | None,
                            pace: Pace = unpaced) -> ElectionOutcomes:
        counts = {name: len(self._runtime.image.partitions_of(name)) for name in self._runtime.image.topics}

        async def elect(topic: str, partition: int) -> tuple[ErrorCode, str | None]:
            if election_type == PREFERRED_ELECTION:
                return await _elect_preferred(self._runtime, topic, partition)
            # No unclean elections: a partition with a leader needs none, one without
            # has no replica that may lead (only its last ISR member, which the
            # controller elects as soon as it returns).
            record = self._runtime.image.partitions.get((topic, partition))
            if record is not None and record.leader != NO_LEADER:
                return ErrorCode.election_not_needed, ELECTION_NOT_NEEDED_MESSAGE
            return ErrorCode.eligible_leaders_not_available, (
                f"No replica of {topic}-{partition} in its ISR is live; oncelog makes no unclean elections.")

        return await elect_each(counts, wanted, elect, pace)

    async def ensure_internal(self, name: str) -> tuple[ErrorCode, str | None]:
        """Create the internal topic through the metadata quorum if the image lacks it.
        COORDINATOR_NOT_AVAILABLE while it cannot be created yet (too few brokers, no
        quorum), which clients retry, with the reason for FindCoordinator's error message
        (a command-line tool shows it)."""
        image = self._runtime.image
        if name in image.topics:
            return ErrorCode.none, None
        partitions, replication_factor, configs = internal_topic_spec(self._config, name, replicated=True)
        try:
            await self.create(name, partitions, replication_factor, configs)
        except TopicRequestError as error:
            if error.code is not ErrorCode.topic_already_exists:
                log.warning("cannot create %s yet: %s", name, error)
                reason = f"cannot create {name} yet: {error}"
                if error.code is ErrorCode.invalid_replication_factor:
                    key = REPLICATION_FACTOR_KEY[name]
                    reason += f" ({key}={replication_factor}: start more brokers, or lower {key})"
                return ErrorCode.coordinator_not_available, reason
        if name in self._runtime.image.topics:
            return ErrorCode.none, None
        return ErrorCode.coordinator_not_available, f"{name} is being created"


async def _create_topic(runtime: ClusterRuntime, logs: LogManager, name: str, num_partitions: int,
                        replication_factor: int, configs: dict[str, str], *, validate_only: bool = False,
                        assignment: list[list[int]] | None = None, pace: Pace = unpaced) -> TopicInfo:
    image = runtime.image
    try:
        validate_topic_name(name)
    except InvalidTopicError as error:
        raise TopicRequestError(ErrorCode.invalid_topic_exception, str(error)) from None
    if name in image.topics:
        raise TopicRequestError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
    collision = name.replace(".", "_")
    for existing in image.topics:
        if existing.replace(".", "_") == collision:
            raise TopicRequestError(ErrorCode.invalid_topic_exception,
                                    f"Topic '{name}' collides with existing topic: {existing}")
    overrides = {key: str(value) for key, value in configs.items() if value is not None}
    try:
        config = logs.default_config.with_overrides(overrides)
    except (InvalidConfigError, ValueError) as error:
        raise TopicRequestError(ErrorCode.invalid_config, str(error)) from None
    live = sorted(image.live_broker_ids())
    if assignment is not None:
        problem = await _check_assignment(assignment, live, pace=pace)
        if problem is not None:
            raise TopicRequestError(ErrorCode.invalid_replica_assignment, problem)
        replicas = [list(r) async for r in paced(assignment, pace)]
    else:
        try:
            replicas = place_replicas(live, num_partitions, replication_factor)
        except InvalidReplicationFactor as error:
            raise TopicRequestError(ErrorCode.invalid_replication_factor, str(error)) from None
    topic = TopicRecord(name, uuid.uuid4(), len(replicas), overrides)
    if validate_only:
        return TopicInfo(name, topic.topic_id, len(replicas), overrides, config)
    try:
        revision = await runtime.store.create_topic(topic, replicas)
    except MetadataConflict:
        raise TopicRequestError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.") from None
    except EtcdUnavailable as error:
        raise TopicRequestError(ErrorCode.request_timed_out, f"the metadata quorum did not answer: {error}") from None
    await runtime.wait_for_revision(revision)
    log.info("created topic %s with %d partition(s), replicas %s", name, len(replicas), replicas)
    info = logs.topic(name)
    return info if info is not None else TopicInfo(name, topic.topic_id, len(replicas), overrides, config)


async def _check_assignment(assignment: list[list[int]], live: list[int], *, replication_factor: int | None = None,
                            first_partition: int = 0, pace: Pace) -> str | None:
    """`placement.check_assignment` of partitions `first_partition, first_partition + 1,
    ...`, a slice at a time with `pace` between (the same answer: the checks are made in
    partition order, each slice held to the replication factor of the first partition)."""
    for start in range(0, len(assignment), ASSIGNMENT_SLICE):
        await pace()
        if start > 0 and replication_factor is None:
            replication_factor = len(assignment[0])
        problem = check_assignment(dict(enumerate(assignment[start:start + ASSIGNMENT_SLICE], first_partition + start)),
                                   live, replication_factor=replication_factor, first_partition=first_partition + start)
        if problem is not None:
            return problem
    return None


async def _delete_topic(runtime: ClusterRuntime, name: str) -> None:
    topic = runtime.image.topics.get(name)
    if topic is None:
        raise TopicRequestError(ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition.")
    try:
        revision = await runtime.store.delete_topic(name, topic.topic_id)
    except MetadataConflict:
        raise TopicRequestError(ErrorCode.unknown_topic_or_partition,
                                "This server does not host this topic-partition.") from None
    except EtcdUnavailable as error:
        raise TopicRequestError(ErrorCode.request_timed_out, f"the metadata quorum did not answer: {error}") from None
    await runtime.wait_for_revision(revision)


async def _create_partitions(runtime: ClusterRuntime, name: str, new_total: int, *, validate_only: bool = False,
                             assignment: list[list[int]] | None = None, pace: Pace = unpaced) -> None:
    image = runtime.image
    topic = image.topics.get(name)
    if topic is None:
        raise TopicRequestError(ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition.")
    current = topic.partitions
    if new_total == current:
        raise TopicRequestError(ErrorCode.invalid_partitions, f"Topic already has {current} partitions.")
    if new_total < current:
        raise TopicRequestError(
            ErrorCode.invalid_partitions,
            f"Topic currently has {current} partitions, which is higher than the requested {new_total}.",
        )
    first = image.partition(name, 0)
    assert first is not None  # a topic has a partition 0
    replication_factor = len(first.replicas)
    live = sorted(image.live_broker_ids())
    if assignment is not None:
        problem = await _check_assignment(assignment, live, replication_factor=replication_factor,
                                          first_partition=current, pace=pace)
        if problem is not None:
            raise TopicRequestError(ErrorCode.invalid_replica_assignment, problem)
        added = [list(r) async for r in paced(assignment, pace)]
    else:
        try:
            added = place_replicas(live, new_total - current, replication_factor, start_partition=current)
        except InvalidReplicationFactor as error:
            raise TopicRequestError(ErrorCode.invalid_replication_factor, str(error)) from None
    if validate_only:
        return
    stored = await runtime.client.get(runtime.keys.topic(name))
    if stored is None:
        raise TopicRequestError(ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition.")
    try:
        revision = await runtime.store.create_partitions(TopicRecord.decode(stored), stored.mod_revision,
                                                         current, added)
    except MetadataConflict as error:
        raise TopicRequestError(ErrorCode.reassignment_in_progress, str(error)) from None
    await runtime.wait_for_revision(revision)


async def _alter_topic_configs(runtime: ClusterRuntime, logs: LogManager, name: str, change: OverridesChange, *,
                               validate_only: bool = False) -> None:
    """Write the topic's new override set, computed from the stored one; a concurrent
    change of the topic (another alteration, CreatePartitions) is read again and the
    change computed anew, as a read-modify-write under etcd's compare."""
    for _ in range(CONFIG_WRITE_ATTEMPTS):
        try:
            stored = await runtime.client.get(runtime.keys.topic(name))
        except EtcdUnavailable as error:
            raise TopicRequestError(ErrorCode.request_timed_out,
                                    f"the metadata quorum did not answer: {error}") from None
        if stored is None:
            raise TopicRequestError(ErrorCode.unknown_topic_or_partition, f"The topic '{name}' does not exist.")
        topic = TopicRecord.decode(stored)
        overrides = change(dict(topic.configs))
        try:
            logs.default_config.with_overrides(overrides)
        except InvalidConfigError as error:
            raise TopicRequestError(ErrorCode.invalid_config, str(error)) from None
        if validate_only:
            return
        try:
            revision = await runtime.store.alter_topic_configs(topic, stored.mod_revision, overrides)
        except MetadataConflict:
            continue
        except EtcdUnavailable as error:
            raise TopicRequestError(ErrorCode.request_timed_out,
                                    f"the metadata quorum did not answer: {error}") from None
        if not await runtime.wait_for_revision(revision):
            raise TopicRequestError(ErrorCode.request_timed_out,
                                    f"the configs of {name} were written, but this broker has not seen them yet")
        log.info("topic %s configs are now %s", name, overrides or "the defaults")
        return
    raise TopicRequestError(
        ErrorCode.request_timed_out,
        f"the topic {name} kept changing during {CONFIG_WRITE_ATTEMPTS} attempts to alter its configs")


async def _elect_preferred(runtime: ClusterRuntime, topic: str, partition: int) -> tuple[ErrorCode, str | None]:
    """A PREFERRED election of one partition, written to the metadata store (a compare-and-
    set on the partition, as the controller's own elections and the leaders' ISR changes):
    answered once this broker's image has it."""
    record = runtime.image.partitions.get((topic, partition))
    if record is None:
        return ErrorCode.unknown_topic_or_partition, f"No such partition as {topic}-{partition}"
    preferred = preferred_replica(record)
    if record.leader == preferred:
        return ErrorCode.election_not_needed, ELECTION_NOT_NEEDED_MESSAGE
    live = runtime.image.live_broker_ids()
    unavailable = (ErrorCode.preferred_leader_not_available,
                   (f"Failed to elect leader for partition {topic}-{partition}: the preferred replica {preferred} "
                    f"is not live and in the ISR {list(record.isr)}."))
    if elect_preferred(record, live) is None:
        return unavailable
    seen = [record]  # the partition as stored, each time the change was asked

    def change(current: PartitionRecord) -> PartitionRecord | None:
        seen.append(current)
        return elect_preferred(current, live)

    try:
        stored = await runtime.store.change_partition(record, change)
    except (EtcdUnavailable, MetadataConflict) as error:
        return ErrorCode.request_timed_out, f"The metadata quorum did not take the election: {error}"
    if stored is None:  # nothing to change in the stored partition, or the partition is gone
        if elect_preferred(seen[-1], live) is not None:
            return ErrorCode.unknown_topic_or_partition, f"No such partition as {topic}-{partition}"
        if seen[-1].leader == preferred:  # another election got there first
            return ErrorCode.election_not_needed, ELECTION_NOT_NEEDED_MESSAGE
        return unavailable
    log.info("%s-%d: preferred leader %d elected (epoch %d)", topic, partition, stored.leader, stored.leader_epoch)
    await runtime.wait_for_revision(stored.mod_revision)
    return ErrorCode.none, None
