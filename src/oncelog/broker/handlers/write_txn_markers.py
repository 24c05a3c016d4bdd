"""WriteTxnMarkers (key 27), v1-v2.

- The broker-to-broker form of the coordinator's phase two (and what
  `kafka-transactions.sh abort` sends): for each marker, a COMMIT (transaction_result
  true) or ABORT control batch for the producer on every listed partition.
- Only on the partition's leader, and answered once the marker is on the ISR (acks=all,
  as Kafka's): NOT_LEADER_OR_FOLLOWER elsewhere, NOT_ENOUGH_REPLICAS below
  min.insync.replicas, NOT_ENOUGH_REPLICAS_AFTER_APPEND or REQUEST_TIMED_OUT when the
  ISR does not take it in time. The partitions of a request are written concurrently.
- Per partition: UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH (older epoch than
  the partition has seen), TRANSACTION_COORDINATOR_FENCED (a coordinator epoch older
  than the last marker the partition took for that producer: the coordinator epoch is
  the leader epoch of the coordinator's `__transaction_state` partition, or on a
  standalone broker a counter that grows with every start).
- v2 (KIP-890 part 2) carries the transaction version: at 2 the marker must bump the
  producer's epoch on the partition.
- Markers for `__consumer_offsets` also complete the group's pending offsets.
- Authorization (with an authorizer), as Kafka's KafkaApis: ALTER on the cluster (what
  `kafka-transactions.sh abort` runs with) or CLUSTER_ACTION on it (brokers), else every
  partition gets CLUSTER_AUTHORIZATION_FAILED and nothing is written.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator

from oncelog.broker.dispatch import RequestContext, api
from oncelog.coordinator.txn.markers import TxnMarker, append_marker_here
from oncelog.names import TopicPartition
from oncelog.protocol.messages import ErrorCode
from oncelog.security.acl import AclOperation


@api(27, "WriteTxnMarkers", range(1, 3))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    codes: Iterator[ErrorCode]
    if not (ctx.authorize_cluster(AclOperation.ALTER) or ctx.authorize_cluster(AclOperation.CLUSTER_ACTION)):
        codes = itertools.repeat(ErrorCode.cluster_authorization_failed)
    else:
        codes = iter(await _write_all(ctx, request))
    results = []
    async for marker in ctx.paced(request.markers):
        topics = []
        async for topic in ctx.paced(marker.topics):
            partitions = tuple([
                make("WritableTxnMarkerPartitionResult", partition_index=index, error_code=next(codes))
                async for index in ctx.paced(topic.partition_indexes)
            ])
            topics.append(make("WritableTxnMarkerTopicResult", name=topic.name, partitions=partitions))
        results.append(make("WritableTxnMarkerResult", producer_id=marker.producer_id, topics=tuple(topics)))
    return make("WriteTxnMarkersResponse", markers=tuple(results))


async def _write_all(ctx: RequestContext, request) -> list[ErrorCode]:
    """One marker write per partition, in the request's order: each appended, then every
    append not yet on the ISR waited for, all partitions at once, until one deadline (the
    answers of concurrent waits; a partition's later markers end later, so waiting for
    them one after the other tells the same)."""
    leadership = ctx.broker.leadership
    timeout_s = ctx.broker.config["request.timeout.ms"] / 1000
    codes: list[ErrorCode] = []
    waiting: dict[TopicPartition, list[tuple[int, int]]] = {}  # (index in codes, end offset), in append order
    async for marker in ctx.paced(request.markers):
        txn_marker = TxnMarker(marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
                               commit=marker.transaction_result,
                               transaction_version=getattr(marker, "transaction_version", 0))
        async for topic in ctx.paced(marker.topics):
            async for index in ctx.paced(topic.partition_indexes):
                code, end_offset = append_marker_here(ctx.broker, topic.name, index, txn_marker)
                if code is ErrorCode.none:
                    reached = leadership.replication_reached(topic.name, index, end_offset)
                    if reached is None:
                        waiting.setdefault((topic.name, index), []).append((len(codes), end_offset))
                    else:
                        code = reached
                codes.append(code)
    if waiting:
        deadline = asyncio.get_running_loop().time() + timeout_s

        async def wait(tp: TopicPartition, appended: list[tuple[int, int]]) -> None:
            for position, end_offset in appended:
                await ctx.pace()
                remaining = max(0.0, deadline - asyncio.get_running_loop().time())
                codes[position] = await leadership.wait_for_replication(*tp, end_offset, remaining)

        await asyncio.gather(*(wait(tp, appended) for tp, appended in waiting.items()))
    return codes
