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
- Authorization, as Kafka's controller (ControllerApis.deleteTopics): Cluster DELETE
  allows every topic; else a topic needs Topic DESCRIBE to learn whether it exists and
  Topic DELETE to delete it. By name: not describable is TOPIC_AUTHORIZATION_FAILED
  (existing or not), describable but missing UNKNOWN_TOPIC_OR_PARTITION, describable
  but not deletable TOPIC_AUTHORIZATION_FAILED. By id (ids are not secret): an unknown
  id is UNKNOWN_TOPIC_ID; a topic that may not be deleted TOPIC_AUTHORIZATION_FAILED,
  with its name only when describable. A topic deleted by id is answered with its name.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable

from oncelog.broker.dispatch import RequestContext, api
from oncelog.kernel.topics import TopicRequestError
from oncelog.names import INTERNAL_TOPICS
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType

log = logging.getLogger("oncelog.topics")


@api(20, "DeleteTopics", range(1, 7))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    wanted: Iterable[tuple[str | None, uuid.UUID | None]]
    if ctx.version >= 6:
        wanted = ((t.name, t.topic_id if t.topic_id is not None and t.topic_id.int else None) for t in request.topics)
    else:
        wanted = ((name, None) for name in request.topic_names)
    may_delete_any = ctx.authorize_cluster(AclOperation.DELETE)
    results = []
    for name, topic_id in wanted:
        await ctx.pace()
        answered_name, code, message = await _delete(ctx, name, topic_id, may_delete_any)
        results.append(make("DeletableTopicResult", name=answered_name, topic_id=topic_id, error_code=code,
                            error_message=message))
    return make("DeleteTopicsResponse", throttle_time=NO_THROTTLE, responses=tuple(results))


async def _delete(ctx: RequestContext, name: str | None, topic_id, may_delete_any: bool
                  ) -> tuple[str | None, ErrorCode, str | None]:
    """The name to answer with (by id: None unless the principal may describe the topic),
    the error code and message."""
    broker = ctx.broker
    if not broker.config["delete.topic.enable"]:
        return name, ErrorCode.topic_deletion_disabled, "Topic deletion is disabled."

    def may(operation: AclOperation, topic: str) -> bool:
        return may_delete_any or ctx.authorize(operation, ResourceType.TOPIC, topic)

    if name is None:
        info = broker.logs.topic_by_id(topic_id) if topic_id is not None else None
        if info is None:
            return None, ErrorCode.unknown_topic_id, f"Topic id {topic_id} not found."
        name = info.name
        if not may(AclOperation.DELETE, name):
            shown = name if may(AclOperation.DESCRIBE, name) else None
            return shown, ErrorCode.topic_authorization_failed, None
    else:
        if not may(AclOperation.DESCRIBE, name):
            return name, ErrorCode.topic_authorization_failed, None
        if not may(AclOperation.DELETE, name):
            if broker.logs.topic(name) is None:  # describable: its absence may be told
                return name, ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition."
            return name, ErrorCode.topic_authorization_failed, None
    if name in INTERNAL_TOPICS:
        return name, ErrorCode.invalid_topic_exception, f"Cannot delete internal topic {name}."
    try:
        await broker.topics.delete(name)
    except TopicRequestError as error:
        return name, error.code, str(error)
    log.info("deleted topic %s", name)
    return name, ErrorCode.none, None
