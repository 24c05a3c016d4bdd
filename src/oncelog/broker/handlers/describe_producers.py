"""DescribeProducers (key 61), v0.

- For each requested partition, the producers the partition's producer state knows:
  id, epoch, last sequence, last timestamp, coordinator epoch and the first offset of
  the producer's open transaction (-1 when none), as kafka-transactions.sh shows them.
- A missing topic or partition gets UNKNOWN_TOPIC_OR_PARTITION; a partition this broker
  does not lead (cluster mode) NOT_LEADER_OR_FOLLOWER, as the leader's state is the
  one to show.
- Before that, per topic, as Kafka's KafkaApis: an invalid topic name gets
  INVALID_TOPIC_EXCEPTION, then (with an authorizer) a topic the principal may not READ
  TOPIC_AUTHORIZATION_FAILED, whether or not it exists.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.storage.errors import InvalidTopicError
from oncelog.storage.manager import validate_topic_name


@api(61, "DescribeProducers", range(0, 1))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    topics = []
    for topic in request.topics:
        await ctx.pace()
        refusal = _refusal(ctx, topic.name)
        if refusal is not None:
            code, message = refusal
            topics.append(make("TopicResponse", name=topic.name, partitions=tuple([
                make("PartitionResponse", partition_index=index, error_code=code, error_message=message,
                     active_producers=())
                async for index in ctx.paced(topic.partition_indexes)])))
            continue
        partitions = []
        for index in topic.partition_indexes:
            await ctx.pace()
            code, _epoch = ctx.broker.leadership.leader_epoch(topic.name, index)
            log_ = ctx.broker.logs.partition(topic.name, index)
            if code is not ErrorCode.none or log_ is None:
                missing = code is ErrorCode.unknown_topic_or_partition or log_ is None
                partitions.append(make(
                    "PartitionResponse", partition_index=index,
                    error_code=ErrorCode.unknown_topic_or_partition if missing else code,
                    error_message=f"{topic.name}-{index} does not exist" if missing
                    else f"broker {ctx.broker.node_id} does not lead {topic.name}-{index}",
                    active_producers=(),
                ))
                continue
            producers = tuple(
                make(
                    "ProducerState",
                    producer_id=entry.producer_id,
                    producer_epoch=entry.producer_epoch,
                    last_sequence=entry.last_seq,
                    last_timestamp=entry.last_timestamp,
                    coordinator_epoch=entry.coordinator_epoch,
                    current_txn_start_offset=(
                        -1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset
                    ),
                )
                for entry in log_.producer_state.active_producers()
            )
            partitions.append(make(
                "PartitionResponse", partition_index=index, error_code=ErrorCode.none,
                error_message=None, active_producers=producers,
            ))
        topics.append(make("TopicResponse", name=topic.name, partitions=tuple(partitions)))
    return make("DescribeProducersResponse", throttle_time=NO_THROTTLE, topics=tuple(topics))


def _refusal(ctx: RequestContext, topic: str) -> tuple[ErrorCode, str | None] | None:
    """(error, message) for every partition of a topic refused before it is looked up."""
    try:
        validate_topic_name(topic)
    except InvalidTopicError as error:
        return ErrorCode.invalid_topic_exception, str(error)
    if not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, topic):
        return ErrorCode.topic_authorization_failed, "Topic authorization failed."
    return None
