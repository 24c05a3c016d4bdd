"""Topic administration shared by Metadata (auto-create), CreateTopics, DeleteTopics,
CreatePartitions, ElectLeaders and the config APIs: request-level checks, the mapping of
storage errors to Kafka codes, the walk over an election's partitions, and the
standalone broker's `node.TopicAdmin` (the cluster's is
`oncelog.cluster.topics.ClusterTopics`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from oncelog.kernel.internal_topics import internal_topic_spec
from oncelog.kernel.node import TopicCreation
from oncelog.kernel.topic_errors import TopicRequestError
from oncelog.pacing import Pace, unpaced
from oncelog.protocol.messages import ErrorCode
from oncelog.storage import errors as storage_errors
from oncelog.storage.manager import NewTopic

if TYPE_CHECKING:
    from oncelog.config.broker import BrokerConfig
    from oncelog.kernel.leadership import StandaloneLeadership
    from oncelog.kernel.node import ElectionOutcomes, OverridesChange, PartitionOutcome
    from oncelog.storage.manager import LogManager, TopicInfo

log = logging.getLogger("oncelog.topics")

# Kafka's controller refuses to create more partitions than this in one request.
MAX_PARTITIONS_PER_REQUEST = 10_000
# CreateTopics makes its topics this many partitions at a time, giving the loop to other
# requests in between (a chunk holds the loop 35 ms on tmpfs, up to about 0.5 s on this
# machine's slowest disk minutes: bench/partition_scale.py).
CREATE_CHUNK_PARTITIONS = 500

PREFERRED_ELECTION, UNCLEAN_ELECTION = 0, 1  # ElectLeaders' election_type
ELECTION_NOT_NEEDED_MESSAGE = "Leader election not needed for topic partition."


async def elect_each(partition_counts: Mapping[str, int], wanted: Sequence[tuple[str, Sequence[int]]] | None,
                     elect: Callable[[str, int], Awaitable[tuple[ErrorCode, str | None]]],
                     pace: Pace = unpaced) -> ElectionOutcomes:
    """ElectLeaders' walk, as Kafka's controller makes it: each named partition gets
    `elect`'s outcome, or UNKNOWN_TOPIC_OR_PARTITION; with `wanted` None every partition of
    every topic is tried and only those that needed an election are listed (each topic
    is, with no partitions when none did)."""
    if wanted is None:
        wanted = [(name, range(count)) for name, count in sorted(partition_counts.items())]
        every = True
    else:
        every = False
    outcomes: ElectionOutcomes = []
    for topic, partitions in wanted:
        await pace()
        count = partition_counts.get(topic)
        results: list[PartitionOutcome] = []
        for index in partitions:
            await pace()
            message: str | None
            if count is None:
                code, message = ErrorCode.unknown_topic_or_partition, f"No such topic as {topic}"
            elif not 0 <= index < count:
                code, message = ErrorCode.unknown_topic_or_partition, f"No such partition as {topic}-{index}"
            else:
                code, message = await elect(topic, index)
            if not (every and code is ErrorCode.election_not_needed):
                results.append((index, code, message))
        outcomes.append((topic, results))
    return outcomes


def error_code_for(error: Exception) -> ErrorCode:
    """Kafka's code for a storage error; anything else is a bug and propagates."""
    if isinstance(error, storage_errors.LogError):
        return ErrorCode(error.kafka_error_code)
    raise error


class StandaloneTopics:
    """The `node.TopicAdmin` of a standalone broker: every change is made to the local
    logs at once. Only this broker may hold replicas (replication factor 1)."""

    def __init__(self, node_id: int, config: BrokerConfig, logs: Callable[[], LogManager],
                 leadership: StandaloneLeadership) -> None:
        self._node_id = node_id
        self._config = config
        self._logs = logs  # read when asked: the broker opens its logs after making this
        self._leadership = leadership

    async def ensure_internal(self, name: str) -> tuple[ErrorCode, str | None]:
        """Create the internal topic if missing and announce its partitions, which this
        broker leads, to the coordinators."""
        logs = self._logs()
        if logs.topic(name) is not None:
            return ErrorCode.none, None
        partitions, _replication_factor, configs = internal_topic_spec(self._config, name, replicated=False)
        try:
            logs.create_topic(name, partitions, configs)
        except storage_errors.TopicExistsError:
            return ErrorCode.none, None  # created meanwhile, and announced then
        except storage_errors.LogError as error:
            return ErrorCode.coordinator_not_available, f"cannot create {name}: {error}"
        log.info("created internal topic %s with %d partition(s)", name, partitions)
        self._leadership.lead(name)
        return ErrorCode.none, None

    async def create(self, name: str, num_partitions: int, replication_factor: int, configs: dict[str, str], *,
                     validate_only: bool = False, assignment: list[list[int]] | None = None,
                     pace: Pace = unpaced) -> TopicInfo:
        outcome, = await self.create_topics(
            [TopicCreation(name, num_partitions, replication_factor, configs, assignment)],
            validate_only=validate_only, pace=pace)
        if isinstance(outcome, TopicRequestError):
            raise outcome
        return outcome

    async def create_topics(self, creations: Sequence[TopicCreation], *, validate_only: bool = False,
                            pace: Pace = unpaced) -> list[TopicInfo | TopicRequestError]:
        """The request's checks for each topic, then the logs make the valid ones a
        chunk of about `CREATE_CHUNK_PARTITIONS` partitions at a time (one topic metadata
        write per chunk, the partitions' files made by several threads), `pace` between
        chunks."""
        outcomes: list[TopicInfo | TopicRequestError | None] = []
        valid: list[tuple[int, NewTopic]] = []
        for creation in creations:
            await pace()
            try:
                num_partitions = await self._checked_partitions(creation, pace)
            except TopicRequestError as error:
                outcomes.append(error)
                continue
            valid.append((len(outcomes), NewTopic(creation.name, num_partitions, creation.configs)))
            outcomes.append(None)
        for chunk in _chunks(valid):
            await pace()
            made = self._logs().create_topics([topic for _, topic in chunk], validate_only=validate_only)
            for (index, topic), outcome in zip(chunk, made, strict=True):
                if isinstance(outcome, storage_errors.LogError):
                    outcomes[index] = TopicRequestError(error_code_for(outcome), str(outcome))
                    continue
                outcomes[index] = outcome
                if not validate_only:
                    log.info("created topic %s with %d partition(s)%s", topic.name, topic.num_partitions,
                             f" and configs {dict(topic.configs)}" if topic.configs else "")
        return [outcome for outcome in outcomes if outcome is not None]

    async def _checked_partitions(self, creation: TopicCreation, pace: Pace) -> int:
        """The topic's partition count, once its counts and assignment pass (a replication
        factor above 1 cannot: there is one broker)."""
        num_partitions, replication_factor = creation.num_partitions, creation.replication_factor
        if creation.assignment is not None:
            await self._check_assignment(creation.assignment, pace)
            num_partitions, replication_factor = len(creation.assignment), 1
        num_partitions, replication_factor = checked_counts(self._config, num_partitions, replication_factor)
        if replication_factor > 1:
            raise TopicRequestError(
                ErrorCode.invalid_replication_factor,
                f"Unable to replicate the partition {replication_factor} time(s): The target replication factor "
                f"of {replication_factor} cannot be reached because only 1 broker(s) are registered.",
            )
        return num_partitions

    async def delete(self, name: str) -> None:
        try:
            self._logs().delete_topic(name)
        except storage_errors.LogError as error:
            raise TopicRequestError(error_code_for(error), str(error)) from None

    async def create_partitions(self, name: str, new_total: int, *, validate_only: bool = False,
                                assignment: list[list[int]] | None = None, pace: Pace = unpaced) -> None:
        await self._check_assignment(assignment or [], pace)
        if validate_only:
            return
        try:
            self._logs().create_partitions(name, new_total)
        except storage_errors.LogError as error:
            raise TopicRequestError(error_code_for(error), str(error)) from None

    async def alter_configs(self, name: str, change: OverridesChange, *, validate_only: bool = False) -> None:
        logs = self._logs()
        info = logs.topic(name)
        if info is None:
            raise TopicRequestError(ErrorCode.unknown_topic_or_partition, f"The topic '{name}' does not exist.")
        overrides = change(info.config_overrides)
        try:
            logs.alter_topic_config(name, overrides, replace=True, validate_only=validate_only)
        except storage_errors.LogError as error:
            raise TopicRequestError(error_code_for(error), str(error)) from None
        if not validate_only:
            log.info("topic %s configs are now %s", name, overrides or "the defaults")

    async def elect_leaders(self, election_type: int, wanted: Sequence[tuple[str, Sequence[int]]] | None,
                            pace: Pace = unpaced) -> ElectionOutcomes:
        """Every partition has one replica, this broker, which leads it: no election is
        ever needed."""
        async def not_needed(_topic: str, _partition: int) -> tuple[ErrorCode, str | None]:
            return ErrorCode.election_not_needed, ELECTION_NOT_NEEDED_MESSAGE

        counts = {name: info.num_partitions for name, info in self._logs().topics().items()}
        return await elect_each(counts, wanted, not_needed, pace)

    async def _check_assignment(self, assignment: list[list[int]], pace: Pace) -> None:
        for replicas in assignment:
            await pace()
            if replicas != [self._node_id]:
                raise TopicRequestError(
                    ErrorCode.invalid_replica_assignment,
                    f"Replica assignment {replicas} names brokers other than {self._node_id}.",
                )


def _chunks(topics: list[tuple[int, NewTopic]]) -> Iterator[list[tuple[int, NewTopic]]]:
    """`topics` in runs of about CREATE_CHUNK_PARTITIONS partitions (a topic is never split)."""
    chunk: list[tuple[int, NewTopic]] = []
    partitions = 0
    for entry in topics:
        chunk.append(entry)
        partitions += entry[1].num_partitions
        if partitions >= CREATE_CHUNK_PARTITIONS:
            yield chunk
            chunk, partitions = [], 0
    if chunk:
        yield chunk


def checked_counts(config: BrokerConfig, num_partitions: int, replication_factor: int) -> tuple[int, int]:
    """A request's partition count and replication factor, -1 meaning the broker's
    default; TopicRequestError for values Kafka refuses."""
    if num_partitions == -1:
        num_partitions = config["num.partitions"]
    if replication_factor == -1:
        replication_factor = config["default.replication.factor"]
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
