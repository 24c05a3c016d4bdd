"""CreatePartitions (key 37), v0-v3.

- Raises a topic's partition count; a count that is not larger gets INVALID_PARTITIONS
  with Kafka's message; a missing topic UNKNOWN_TOPIC_OR_PARTITION; assignments naming
  other brokers INVALID_REPLICA_ASSIGNMENT; more than 10,000 new partitions in one
  request POLICY_VIOLATION, as Kafka's controller answers. `validate_only` changes nothing.
- Cluster mode: new partitions get Kafka's placement with the topic's replication
  factor (or the request's assignment, checked against the registered brokers).
- Deviation: the internal topics (`__consumer_offsets`, `__transaction_state`) get
  INVALID_TOPIC_EXCEPTION, the code Kafka gives its other refusals of internal topics.
  Kafka's controller allows it (kafka-topics before 3.0 refused, client-side), though
  it moves group and transactional ids to other partitions and strands their state.
- Authorization, as Kafka's controller: each topic needs Topic ALTER, checked before
  anything else about it; refused topics get TOPIC_AUTHORIZATION_FAILED (no message),
  whether they exist or not.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.kernel.topics import MAX_PARTITIONS_PER_REQUEST, TopicRequestError
from oncelog.names import INTERNAL_TOPICS
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType


@api(37, "CreatePartitions", range(0, 4))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    results = []
    for topic in request.topics:
        await ctx.pace()
        code, message = await _create(ctx, topic, request.validate_only)
        results.append(make("CreatePartitionsTopicResult", name=topic.name, error_code=code, error_message=message))
    return make("CreatePartitionsResponse", throttle_time=NO_THROTTLE, results=tuple(results))


async def _create(ctx: RequestContext, topic, validate_only: bool) -> tuple[ErrorCode, str | None]:
    if not ctx.authorize(AclOperation.ALTER, ResourceType.TOPIC, topic.name):
        return ErrorCode.topic_authorization_failed, None
    logs = ctx.broker.logs
    info = logs.topics().get(topic.name)
    if info is None:
        return ErrorCode.unknown_topic_or_partition, f"The topic '{topic.name}' does not exist."
    if topic.name in INTERNAL_TOPICS:
        return ErrorCode.invalid_topic_exception, (
            f"The number of partitions of internal topic {topic.name} cannot be changed."
        )
    if topic.count < info.num_partitions:
        return ErrorCode.invalid_partitions, (
            f"Topic currently has {info.num_partitions} partitions, which is higher than the requested {topic.count}."
        )
    if topic.count == info.num_partitions:
        return ErrorCode.invalid_partitions, f"Topic already has {info.num_partitions} partitions."
    if topic.count - info.num_partitions > MAX_PARTITIONS_PER_REQUEST:
        return ErrorCode.policy_violation, "Excessively large number of partitions per request."
    assignment = [list(a.broker_ids) async for a in ctx.paced(topic.assignments)] if topic.assignments else None
    try:
        await ctx.broker.topics.create_partitions(topic.name, topic.count, validate_only=validate_only,
                                                  assignment=assignment, pace=ctx.pace)
    except TopicRequestError as error:
        return error.code, str(error)
    return ErrorCode.none, None
