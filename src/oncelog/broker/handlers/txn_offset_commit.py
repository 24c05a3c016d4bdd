"""TxnOffsetCommit (key 28), v0-v3.

- A transactional producer commits a group's offsets inside its transaction
  (sendOffsetsToTransaction, after AddOffsetsToTxn). They are appended to the group's
  `__consumer_offsets` partition as one transactional batch of the producer and stay
  pending, invisible to OffsetFetch (UNSTABLE_OFFSET_COMMIT with require_stable), until
  the COMMIT marker makes them the group's offsets; ABORT drops them.
- v3 (KIP-447) carries the consumer's member id, generation and group.instance.id: a
  zombie from an older generation gets ILLEGAL_GENERATION, an unknown member
  UNKNOWN_MEMBER_ID, a fenced static member FENCED_INSTANCE_ID. v0-v2 are not checked.
- INVALID_PRODUCER_EPOCH for an epoch older than the one the offsets partition has seen.
- Per partition: UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist,
  OFFSET_METADATA_TOO_LARGE above offset.metadata.max.bytes.
- Deviation: whether the transaction really added the group (AddOffsetsToTxn) is not
  verified here, as in Kafka before KIP-890.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._groups import group_coordinator, split_offsets
from oncelog.protocol.messages import NO_THROTTLE


@api(28, "TxnOffsetCommit", range(0, 4))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    coordinator = group_coordinator(ctx)
    offsets, errors = split_offsets(ctx, request, coordinator, group_id_required=True)
    if offsets:
        errors.update(coordinator.txn_offset_commit(
            request.group_id,
            request.producer_id,
            request.producer_epoch,
            getattr(request, "member_id", ""),
            getattr(request, "generation_id", -1),
            getattr(request, "group_instance_id", None),
            offsets,
        ))
    topics = tuple(
        make(
            "TxnOffsetCommitResponseTopic",
            name=topic.name,
            partitions=tuple(
                make("TxnOffsetCommitResponsePartition", partition_index=p.partition_index,
                     error_code=errors[(topic.name, p.partition_index)])
                for p in topic.partitions
            ),
        )
        for topic in request.topics
    )
    return make("TxnOffsetCommitResponse", throttle_time=NO_THROTTLE, topics=topics)
