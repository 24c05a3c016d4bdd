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
from collections.abc import Coroutine, Iterator
from typing import Any

from oncelog.broker.dispatch import RequestContext, api
from oncelog.coordinator.txn.markers import TxnMarker, write_marker_locally
from oncelog.protocol.messages import ErrorCode
from oncelog.security.acl import AclOperation


@api(27, "WriteTxnMarkers", range(1, 3))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    codes: Iterator[ErrorCode]
    if not (ctx.authorize_cluster(AclOperation.ALTER) or ctx.authorize_cluster(AclOperation.CLUSTER_ACTION)):
        codes = itertools.repeat(ErrorCode.cluster_authorization_failed)
    else:
        codes = iter(await asyncio.gather(*_writes(ctx, request)))
    results = []
    for marker in request.markers:
        topics = []
        for topic in marker.topics:
            partitions = tuple(
                make("WritableTxnMarkerPartitionResult", partition_index=index, error_code=next(codes))
                for index in topic.partition_indexes
            )
            topics.append(make("WritableTxnMarkerTopicResult", name=topic.name, partitions=partitions))
        results.append(make("WritableTxnMarkerResult", producer_id=marker.producer_id, topics=tuple(topics)))
    return make("WriteTxnMarkersResponse", markers=tuple(results))


def _writes(ctx: RequestContext, request) -> list[Coroutine[Any, Any, ErrorCode]]:
    """One marker write per partition, in the request's order."""
    timeout_s = ctx.broker.config["request.timeout.ms"] / 1000
    writes = []
    for marker in request.markers:
        txn_marker = TxnMarker(marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
                               commit=marker.transaction_result,
                               transaction_version=getattr(marker, "transaction_version", 0))
        for topic in marker.topics:
            for index in topic.partition_indexes:
                writes.append(write_marker_locally(ctx.broker, topic.name, index, txn_marker, timeout_s))
    return writes
