"""WriteTxnMarkers (key 27), v1.

- The broker-to-broker form of the coordinator's phase two (and what
  `kafka-transactions.sh abort` sends): for each marker, a COMMIT (transaction_result
  true) or ABORT control batch for the producer on every listed partition.
- Per partition: UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH (older epoch than
  the partition has seen), TRANSACTION_COORDINATOR_FENCED (a coordinator epoch older
  than the last marker the partition took for that producer; the coordinator's own
  epoch grows with every load of `__transaction_state`, so a marker sent with an epoch
  from before a restart is fenced once the coordinator has written one since).
- Markers for `__consumer_offsets` also complete the group's pending offsets.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.partitions import append_marker
from oncelog.broker.topics import error_code_for
from oncelog.coordinator.internal_topics import CONSUMER_OFFSETS
from oncelog.protocol.messages import ErrorCode
from oncelog.storage.errors import LogError

GROUP_KEY_TYPE = 0


@api(27, "WriteTxnMarkers", range(1, 2))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    results = []
    for marker in request.markers:
        topics = []
        for topic in marker.topics:
            partitions = []
            for index in topic.partition_indexes:
                code = _write(ctx, marker, topic.name, index)
                partitions.append(make("WritableTxnMarkerPartitionResult", partition_index=index, error_code=code))
            topics.append(make("WritableTxnMarkerTopicResult", name=topic.name, partitions=tuple(partitions)))
        results.append(make("WritableTxnMarkerResult", producer_id=marker.producer_id, topics=tuple(topics)))
    return make("WriteTxnMarkersResponse", markers=tuple(results))


def _write(ctx: RequestContext, marker, topic: str, partition: int) -> ErrorCode:
    if ctx.broker.logs.partition(topic, partition) is None:
        return ErrorCode.unknown_topic_or_partition
    try:
        append_marker(ctx.broker, topic, partition, marker.producer_id, marker.producer_epoch,
                      marker.coordinator_epoch, commit=marker.transaction_result)
    except LogError as error:
        return error_code_for(error)
    if topic == CONSUMER_OFFSETS:
        groups = ctx.broker.coordinator_for(GROUP_KEY_TYPE)
        if groups is not None:
            groups.complete_transaction(partition, marker.producer_id, marker.transaction_result)
    return ErrorCode.none
