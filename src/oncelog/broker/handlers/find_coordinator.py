"""FindCoordinator (key 10), v0-v4.

- key_type 0 (group) and 1 (transaction): the coordinator is the leader of the key's
  partition of `__consumer_offsets` / `__transaction_state`, created on the first
  lookup (`TopicAdmin.ensure_internal`). On a standalone broker that is this broker. In
  cluster mode it is the partition's leader in the metadata (any broker answers for
  all); the topic is created through the metadata quorum with its replication factor,
  and until that is possible
  (too few brokers), or while the partition has no leader, the answer is
  COORDINATOR_NOT_AVAILABLE, which clients retry; its error message says why (e.g.
  "cannot create __consumer_offsets yet: Replication factor: 3 larger than available
  brokers: 2. (offsets.topic.replication.factor=3: ...)"), where Kafka sends none. The broker named may still be loading
  the partition: it then answers the client's next request with NOT_COORDINATOR or
  COORDINATOR_LOAD_IN_PROGRESS, and the client looks again.
- v4 batches keys (`coordinator_keys`) and answers one entry per key; v0-v3 take one
  `key` and answer at the top level.
- key_type 2 (share groups) and others get INVALID_REQUEST.
- Authorization (with an authorizer), per key and before anything else, as Kafka's
  KafkaApis: a group key needs DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED),
  a transaction key DESCRIBE on the transactional id (else
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED), answered with no node (-1) and Kafka's message.
"""

from __future__ import annotations

from oncelog.broker.dispatch import BrokerServices, RequestContext, api
from oncelog.kernel.internal_topics import CONSUMER_OFFSETS, TRANSACTION_STATE, partition_for
from oncelog.kernel.leadership import BrokerView
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType

GROUP, TRANSACTION = 0, 1
INTERNAL_TOPIC = {GROUP: CONSUMER_OFFSETS, TRANSACTION: TRANSACTION_STATE}
NOWHERE = BrokerView(-1, "", -1)
# What a key's coordinator lookup needs: DESCRIBE on the key's resource, and the refusal.
_REFUSAL = {
    GROUP: (ResourceType.GROUP, ErrorCode.group_authorization_failed, "Group authorization failed."),
    TRANSACTION: (ResourceType.TRANSACTIONAL_ID, ErrorCode.transactional_id_authorization_failed,
                  "Transactional Id authorization failed."),
}


@api(10, "FindCoordinator", range(0, 5))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    key_type = getattr(request, "key_type", GROUP)
    if ctx.version >= 4:
        coordinators = []
        for key in request.coordinator_keys:
            await ctx.pace()
            code, message, node = _refusal(ctx, key_type, key) or await _locate(ctx.broker, ctx.listener,
                                                                                 key_type, key)
            coordinators.append(make("Coordinator", key=key, node_id=node.node_id, host=node.host, port=node.port,
                                     error_code=code, error_message=message))
        return make("FindCoordinatorResponse", throttle_time=NO_THROTTLE, coordinators=tuple(coordinators))
    code, message, node = _refusal(ctx, key_type, request.key) or await _locate(ctx.broker, ctx.listener,
                                                                                   key_type, request.key)
    return make("FindCoordinatorResponse", throttle_time=NO_THROTTLE, error_code=code, error_message=message,
                node_id=node.node_id, host=node.host, port=node.port)


def _refusal(ctx: RequestContext, key_type: int, key: str) -> tuple[ErrorCode, str | None, BrokerView] | None:
    """The answer for a key the principal may not DESCRIBE, or None."""
    refusal = _REFUSAL.get(key_type)
    if refusal is None:
        return None
    resource_type, code, message = refusal
    if ctx.authorize(AclOperation.DESCRIBE, resource_type, key):
        return None
    return code, message, NOWHERE


async def _locate(broker: BrokerServices, listener: str, key_type: int, key: str
                  ) -> tuple[ErrorCode, str | None, BrokerView]:
    if key_type not in (GROUP, TRANSACTION):
        return ErrorCode.invalid_request, f"Unsupported key type {key_type}", NOWHERE
    if not key and key_type == TRANSACTION:
        return ErrorCode.invalid_request, "Transactional id must not be empty.", NOWHERE
    code, reason, node = await _leader_of_key(broker, listener, INTERNAL_TOPIC[key_type], key)
    return code, None if code is ErrorCode.none else reason or code.name.upper(), node


async def _leader_of_key(broker: BrokerServices, listener: str, topic: str, key: str
                         ) -> tuple[ErrorCode, str | None, BrokerView]:
    code, reason = await broker.topics.ensure_internal(topic)
    if code is not ErrorCode.none:
        return code, reason, NOWHERE
    leadership = broker.leadership
    partitions = leadership.partition_count(topic)
    if partitions is None:
        return ErrorCode.coordinator_not_available, f"{topic} is being created", NOWHERE
    partition = partition_for(key, partitions)
    leader = leadership.leader_of(topic, partition)
    node = next((b for b in leadership.live_brokers(listener) if b.node_id == leader), None)
    if node is None:
        return ErrorCode.coordinator_not_available, f"{topic}-{partition} has no leader", NOWHERE
    return ErrorCode.none, None, node
