"""OffsetCommit (key 8), v2-v9.

- Stores a group's committed offsets (offset, leader epoch v6+, metadata) in
  `__consumer_offsets`, one batch per request.
- Members commit with their member id and generation (and group.instance.id v7+):
  UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID, and REBALANCE_IN_PROGRESS while
  the group waits for its assignment. Commits during PreparingRebalance are accepted.
- A consumer group's member (KIP-848) commits with its member epoch: STALE_MEMBER_EPOCH
  for another epoch, UNKNOWN_MEMBER_ID for a member it does not have, UNSUPPORTED_VERSION
  below v9 (Kafka 4's ConsumerGroup.validateOffsetCommit); one with no members takes
  commits without a member (generation -1), as an empty classic group does.
- A generation for a group that does not exist: GROUP_ID_NOT_FOUND from v9,
  ILLEGAL_GENERATION below (Kafka 4's coordinator).
- Generation -1 with no member id: a consumer that assigns partitions itself (or an admin
  client) commits for a group with no members; the group is created if needed.
- retention_time (v2-v4), unless -1, sets when the offsets expire, instead of
  offsets.retention.minutes (stored in an OffsetCommitValue v1 record, as Kafka does).
- Per partition: UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist,
  OFFSET_METADATA_TOO_LARGE above offset.metadata.max.bytes.
- Answered once the offsets are on the ISR of the group's `__consumer_offsets`
  partition (acks=all, as Kafka's); in cluster mode, when they are not, the committed
  partitions get NOT_COORDINATOR (leadership lost) or COORDINATOR_NOT_AVAILABLE, and a
  group coordinated by another broker NOT_COORDINATOR.
- Authorization, as Kafka's KafkaApis, before anything else: Group READ, else every
  partition gets GROUP_AUTHORIZATION_FAILED; then Topic READ, else the topic's
  partitions get TOPIC_AUTHORIZATION_FAILED (whether they exist or not) while the
  others are committed.
- Deviations: v10 (topic ids, KIP-848) is not offered, nor v0-v1, which Kafka 4 removed.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._groups import (
    duration_ms,
    group_coordinator,
    once_replicated,
    split_offsets,
)
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType

# GROUP_ID_NOT_FOUND for a commit to a group that does not exist is new in v9 (KIP-848);
# older clients expect ILLEGAL_GENERATION.
FIRST_VERSION_WITH_GROUP_ID_NOT_FOUND = 9


@api(8, "OffsetCommit", range(2, 10))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    coordinator = group_coordinator(ctx)
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        offsets: dict = {}
        errors = {(t.name, p.partition_index): ErrorCode.group_authorization_failed
                  async for t in ctx.paced(request.topics) async for p in ctx.paced(t.partitions)}
    else:
        offsets, errors = await split_offsets(ctx, request, coordinator)
        unreadable = {t.name async for t in ctx.paced(request.topics)
                      if not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, t.name)}
        if unreadable:
            async for key in ctx.paced([*offsets, *errors]):
                if key[0] in unreadable:
                    offsets.pop(key, None)
                    errors[key] = ErrorCode.topic_authorization_failed
    if offsets:
        results = coordinator.commit_offsets(
            request.group_id,
            request.member_id,
            getattr(request, "group_instance_id", None),
            request.generation_id_or_member_epoch,
            offsets,
            retention_ms=duration_ms(getattr(request, "retention_time", None)),
            api_version=ctx.version,
        )
        results = await once_replicated(coordinator, request.group_id, results)
        if ctx.version < FIRST_VERSION_WITH_GROUP_ID_NOT_FOUND:
            results = {tp: ErrorCode.illegal_generation if error == ErrorCode.group_id_not_found else error
                       for tp, error in results.items()}
        errors.update(results)
    topics = tuple([
        make(
            "OffsetCommitResponseTopic",
            name=topic.name,
            partitions=tuple([
                make("OffsetCommitResponsePartition", partition_index=p.partition_index,
                     error_code=errors[(topic.name, p.partition_index)])
                async for p in ctx.paced(topic.partitions)
            ]),
        )
        async for topic in ctx.paced(request.topics)
    ])
    return make("OffsetCommitResponse", throttle_time=NO_THROTTLE, topics=topics)
