"""Offsets on the driver: what the cluster has, and how far each micro-batch reads.

- `PartitionOffsets` maps (topic, partition) to an offset. Spark stores offsets as JSON;
  `to_json` writes the canonical form `{"orders": {"0": 42, "1": 17}}` (string partition
  keys, keys sorted as `json.dumps(sort_keys=True)` sorts them), because Spark compares
  offsets as JSON strings: equal offsets must serialize to equal strings.
- `ClusterView` asks the cluster (metadata, ListOffsets) through a confluent-kafka
  AdminClient. The latest offset is the last stable offset (read_committed) or the high
  watermark, read from the broker every time, never counted in this process: a re-run
  batch and a restarted query see the log, not a memory.
- `limit_offsets` applies maxOffsetsPerTrigger the way Spark's Kafka source does: the
  budget is shared by the partitions in proportion to how far behind each is.

Everything here runs on the driver. ClusterView holds a live client and is never pickled.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from oncelog.client.config import librdkafka_settings
from oncelog.names import INTERNAL_TOPICS
from oncelog.spark.errors import BrokerUnreachable, SourceOptionError, TopicNotFound
from oncelog.spark.source.options import (
    Assign,
    SourceOptions,
    Subscribe,
    SubscribePattern,
    TopicPartitionKey,
)

PartitionOffsets = dict[TopicPartitionKey, int]

# Kafka's own internal topics: never matched by subscribePattern (like the Java client's
# exclude.internal.topics=true).

# librdkafka settings that only a consumer understands; the driver's AdminClient leaves
# them out instead of logging a warning for each.
_CONSUMER_ONLY_SETTINGS = frozenset(
    {
        "group.id",
        "group.instance.id",
        "partition.assignment.strategy",
        "session.timeout.ms",
        "heartbeat.interval.ms",
        "group.protocol.type",
        "group.protocol",
        "group.remote.assignor",
        "coordinator.query.interval.ms",
        "max.poll.interval.ms",
        "auto.commit.interval.ms",
        "queued.min.messages",
        "queued.max.messages.kbytes",
        "fetch.wait.max.ms",
        "fetch.queue.backoff.ms",
        "fetch.message.max.bytes",
        "max.partition.fetch.bytes",
        "fetch.max.bytes",
        "fetch.min.bytes",
        "fetch.error.backoff.ms",
        "isolation.level",
        "check.crcs",
        "offset.store.method",
        "allow.auto.create.topics",
    }
)


# -- JSON form ------------------------------------------------------------------------------


def to_json(offsets: Mapping[TopicPartitionKey, int]) -> dict[str, dict[str, int]]:
    """The canonical JSON-safe dict Spark stores in its offset log."""
    nested: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in offsets.items():
        nested.setdefault(topic, {})[str(partition)] = int(offset)
    return {topic: dict(sorted(nested[topic].items())) for topic in sorted(nested)}


def from_json(nested: Mapping[str, Mapping[str, int]] | None) -> PartitionOffsets:
    if not nested:
        return {}
    return {
        (topic, int(partition)): int(offset)
        for topic, by_partition in nested.items()
        for partition, offset in by_partition.items()
    }


def describe_partitions(partitions: Iterable[TopicPartitionKey]) -> str:
    return ", ".join(f"{topic}-{partition}" for topic, partition in sorted(partitions))


# -- the cluster ----------------------------------------------------------------------------


class ClusterView:
    """Metadata and ListOffsets answers for one source, through one AdminClient."""

    def __init__(self, options: SourceOptions) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        self.options = options
        config: dict[str, str | int | float | bool] = {
            key: value
            for key, value in librdkafka_settings(options.client_settings).items()
            if key not in _CONSUMER_ONLY_SETTINGS
        }
        config["bootstrap.servers"] = options.bootstrap_servers
        try:
            self._admin = AdminClient(config)
        except (KafkaException, ValueError, TypeError) as error:
            raise SourceOptionError(
                f"kafka.* options rejected by the Kafka client: {error}"
            ) from None
        self._timeout_s = options.metadata_timeout_ms / 1000
        if options.client.uses_sasl:
            self._check_credentials()

    def _check_credentials(self) -> None:
        """librdkafka reports refused SASL credentials only in its log, and its calls wait
        out fetchOffset.timeoutMs as for an unreachable broker: oncelog's client, which the
        executors use, says at once (its connection stays for them in this process)."""
        from oncelog.client.cluster import shared_cluster
        from oncelog.client.errors import AuthenticationFailed, ClientError

        try:
            shared_cluster(self.options.client).any_connection()
        except AuthenticationFailed as error:
            raise SourceOptionError(
                f"kafka.bootstrap.servers={self.options.bootstrap_servers} refused the kafka.sasl.* "
                f"credentials: {error}"
            ) from None
        except ClientError:
            pass  # unreachable: the calls say so, naming their timeout

    # Partitions -------------------------------------------------------------------------

    def topics(self) -> dict[str, list[int]]:
        """Every topic the cluster has, with its partition numbers."""
        metadata = self._retrying(
            "Metadata", lambda: self._admin.list_topics(timeout=self._timeout_s)
        )
        return {
            name: sorted(topic.partitions)
            for name, topic in metadata.topics.items()
            if topic.error is None
        }

    def subscribed_partitions(self, *, require_existing: bool) -> list[TopicPartitionKey]:
        """The partitions the subscription covers now. With `require_existing`, a topic or
        partition named by subscribe/assign that the cluster lacks is a TopicNotFound."""
        topics = self.topics()
        subscription = self.options.subscription
        if isinstance(subscription, SubscribePattern):
            return sorted(
                (name, partition)
                for name, partitions in topics.items()
                if name not in INTERNAL_TOPICS and subscription.matches(name)
                for partition in partitions
            )
        if isinstance(subscription, Subscribe):
            missing = [name for name in subscription.topics if name not in topics]
            if missing and require_existing:
                raise TopicNotFound(
                    f"topic {', '.join(map(repr, missing))} named by option subscribe does not exist "
                    f"on kafka.bootstrap.servers={self.options.bootstrap_servers}"
                )
            return sorted(
                (name, partition)
                for name in subscription.topics
                for partition in topics.get(name, ())
            )
        assert isinstance(subscription, Assign)
        missing_partitions = [
            (name, partition)
            for name, partition in subscription.partitions
            if partition not in topics.get(name, ())
        ]
        if missing_partitions and require_existing:
            raise TopicNotFound(
                f"partition {describe_partitions(missing_partitions)} named by option assign does not "
                f"exist on kafka.bootstrap.servers={self.options.bootstrap_servers}"
            )
        return sorted(set(subscription.partitions) - set(missing_partitions))

    # Offsets ----------------------------------------------------------------------------

    def latest(self, partitions: Iterable[TopicPartitionKey]) -> PartitionOffsets:
        """Last stable offset (read_committed) or high watermark of each partition."""
        from confluent_kafka.admin import OffsetSpec

        return self._list_offsets(partitions, OffsetSpec.latest())

    def earliest(self, partitions: Iterable[TopicPartitionKey]) -> PartitionOffsets:
        """Log start offset of each partition."""
        from confluent_kafka.admin import OffsetSpec

        return self._list_offsets(partitions, OffsetSpec.earliest())

    def _list_offsets(self, partitions: Iterable[TopicPartitionKey], spec) -> PartitionOffsets:
        from confluent_kafka import IsolationLevel, TopicPartition

        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        isolation = (
            IsolationLevel.READ_COMMITTED
            if self.options.read_committed
            else IsolationLevel.READ_UNCOMMITTED
        )

        def ask() -> PartitionOffsets:
            futures = self._admin.list_offsets(
                {TopicPartition(topic, partition): spec for topic, partition in wanted},
                isolation_level=isolation,
                request_timeout=self._timeout_s,
            )
            return {
                (tp.topic, tp.partition): future.result().offset for tp, future in futures.items()
            }

        return self._retrying("ListOffsets", ask)

    def _retrying(self, what: str, ask):
        """Kafka's retriable errors are retried fetchOffset.numRetries times; then, or for
        any other error, a BrokerUnreachable/TopicNotFound naming the servers."""
        from confluent_kafka import KafkaError, KafkaException

        attempts = self.options.metadata_retries + 1
        for attempt in range(attempts):
            try:
                return ask()
            except KafkaException as exception:
                error = exception.args[0] if exception.args else None
                code = error.code() if isinstance(error, KafkaError) else None
                if code == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise TopicNotFound(
                        f"{what} on kafka.bootstrap.servers={self.options.bootstrap_servers}: {error}"
                    ) from None
                retriable = isinstance(error, KafkaError) and error.retriable()
                timed_out = code in (
                    KafkaError._TIMED_OUT,
                    KafkaError._TRANSPORT,
                    KafkaError._ALL_BROKERS_DOWN,
                )
                if attempt + 1 < attempts and retriable and not timed_out:
                    time.sleep(self.options.metadata_retry_interval_ms / 1000)
                    continue
                raise BrokerUnreachable(
                    f"{what} failed on kafka.bootstrap.servers={self.options.bootstrap_servers} "
                    f"(waited up to fetchOffset.timeoutMs={self.options.metadata_timeout_ms}): {error}"
                ) from None
        raise AssertionError("unreachable")


# -- rate limiting ---------------------------------------------------------------------------


def limit_offsets(
    start: Mapping[TopicPartitionKey, int], end: Mapping[TopicPartitionKey, int], budget: int
) -> PartitionOffsets:
    """Move each partition from `start` towards `end` by at most `budget` offsets in total,
    shared in proportion to each partition's lag (largest remainders get the spare offsets,
    ties broken by topic-partition order, so the answer is deterministic)."""
    lags = {tp: max(0, end[tp] - start.get(tp, 0)) for tp in end}
    total = sum(lags.values())
    if total <= budget:
        return dict(end)
    shares: dict[TopicPartitionKey, int] = {}
    remainders = []
    for tp, lag in lags.items():
        exact = budget * lag / total
        shares[tp] = int(exact)
        remainders.append((-(exact - int(exact)), tp))
    spare = budget - sum(shares.values())
    for _, tp in sorted(remainders)[:spare]:
        shares[tp] += 1
    return {tp: start.get(tp, 0) + min(shares[tp], lags[tp]) for tp in end}
