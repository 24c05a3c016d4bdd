"""DescribeTransactions (key 65), v0: the coordinator's view of transactional ids.

- State name (Kafka's: Empty, Ongoing, PrepareCommit, ...), timeout, start time,
  producer id and epoch, and the partitions of the current transaction.
- An unknown id gets TRANSACTIONAL_ID_NOT_FOUND; an id another broker coordinates
  (cluster mode) NOT_COORDINATOR. An id answered with an error has Kafka's zero values
  in its other fields (start time 0, producer id 0, epoch 0, no state), as Kafka sends.
- Authorization (with an authorizer), as Kafka's KafkaApis: DESCRIBE on each
  transactional id, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for it; the partitions
  shown are only those of topics the principal may DESCRIBE.
"""

from __future__ import annotations

import datetime
from collections import defaultdict

from oncelog.broker.dispatch import RequestContext, api
from oncelog.pacing import sorted_paced
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType


@api(65, "DescribeTransactions", range(0, 1))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    states = []
    describable: dict[str, bool] = {}  # by topic: one authorization per topic

    def may_describe(topic: str) -> bool:
        allowed = describable.get(topic)
        if allowed is None:
            allowed = describable[topic] = ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, topic)
        return allowed

    for transactional_id in request.transactional_ids:
        await ctx.pace()
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            states.append(_error_state(make, transactional_id, ErrorCode.transactional_id_authorization_failed))
            continue
        owner = ctx.broker.txn_coordinator.owner_error(transactional_id)
        metadata = ctx.broker.txn_coordinator.describe(transactional_id) if owner is ErrorCode.none else None
        if metadata is None:
            code = owner if owner is not ErrorCode.none else ErrorCode.transactional_id_not_found
            states.append(_error_state(make, transactional_id, code))
            continue
        by_topic = defaultdict(list)
        for topic, partition in await sorted_paced(metadata.partitions, ctx.pace):
            await ctx.pace()
            if may_describe(topic):
                by_topic[topic].append(partition)
        states.append(make(
            "TransactionState",
            error_code=ErrorCode.none,
            transactional_id=transactional_id,
            transaction_state=metadata.state.display_name,
            transaction_timeout=datetime.timedelta(milliseconds=metadata.txn_timeout_ms),
            transaction_start_time=_time(metadata.txn_start_timestamp),
            producer_id=metadata.producer_id,
            producer_epoch=metadata.producer_epoch,
            topics=tuple(make("TopicData", topic=t, partitions=tuple(p)) for t, p in by_topic.items()),
        ))
    return make("DescribeTransactionsResponse", throttle_time=NO_THROTTLE, transaction_states=tuple(states))


def _error_state(make, transactional_id: str, code: ErrorCode) -> object:
    """An id answered with an error: its other fields are Kafka's defaults (zero, empty)."""
    return make("TransactionState", error_code=code, transactional_id=transactional_id, transaction_state="",
                transaction_timeout=datetime.timedelta(0), transaction_start_time=_time(0), producer_id=0,
                producer_epoch=0, topics=())


def _time(epoch_ms: int) -> datetime.datetime:
    # kio carries this as an aware datetime; -1 (not started) encodes as the epoch minus 1 ms.
    return datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.UTC)
