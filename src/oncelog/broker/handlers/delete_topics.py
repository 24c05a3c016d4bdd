"""DeleteTopics (key 20), v1-v6.

- Topics are named (v1-v5) or given by name or id (v6). A missing topic gets
  UNKNOWN_TOPIC_OR_PARTITION (UNKNOWN_TOPIC_ID when asked by id); with
  `delete.topic.enable=false` every topic gets TOPIC_DELETION_DISABLED.
- The partitions' directories are removed before the response is sent. In cluster
  mode the topic is deleted from the cluster metadata, and every broker removes its
  copy when its metadata has the deletion (this broker before it answers).
- Deviation: the internal topics (`__consumer_offsets`, `__transaction_state`) get
  INVALID_TOPIC_EXCEPTION, the code Kafka gives its other refusals of internal topics
  (produce, DeleteRecords). Kafka's KRaft controller deletes them (only kafka-topics
  before 3.0 refused, client-side); oncelog's coordinators hold their state in them
  and do not survive their removal while running.
"""

from __future__ import annotations

import logging

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.topics import TopicRequestError
from oncelog.names import INTERNAL_TOPICS
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode

log = logging.getLogger("oncelog.topics")


@api(20, "DeleteTopics", range(1, 7))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    if ctx.version >= 6:
        wanted = [(t.name, t.topic_id if t.topic_id is not None and t.topic_id.int else None) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    results = []
    for name, topic_id in wanted:
        code, message = await _delete(ctx, name, topic_id)
        results.append(
            make("DeletableTopicResult", name=name, topic_id=topic_id, error_code=code, error_message=message)
        )
    return make("DeleteTopicsResponse", throttle_time=NO_THROTTLE, responses=tuple(results))


async def _delete(ctx: RequestContext, name: str | None, topic_id) -> tuple[ErrorCode, str | None]:
    broker = ctx.broker
    if not broker.config["delete.topic.enable"]:
        return ErrorCode.topic_deletion_disabled, "Topic deletion is disabled."
    if name is None:
        info = broker.logs.topic_by_id(topic_id) if topic_id is not None else None
        if info is None:
            return ErrorCode.unknown_topic_id, f"Topic id {topic_id} not found."
        name = info.name
    if name in INTERNAL_TOPICS:
        return ErrorCode.invalid_topic_exception, f"Cannot delete internal topic {name}."
    try:
        await broker.topics.delete(name)
    except TopicRequestError as error:
        return error.code, str(error)
    log.info("deleted topic %s", name)
    return ErrorCode.none, None
