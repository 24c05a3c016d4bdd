"""DescribeTransactions (key 65), v0: the coordinator's view of transactional ids.

- State name (Kafka's: Empty, Ongoing, PrepareCommit, ...), timeout, start time,
  producer id and epoch, and the partitions of the current transaction.
- An unknown id gets TRANSACTIONAL_ID_NOT_FOUND; an id another broker coordinates
  (cluster mode) NOT_COORDINATOR.
"""

from __future__ import annotations

import datetime
from collections import defaultdict

from oncelog.broker.dispatch import RequestContext, api
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode


@api(65, "DescribeTransactions", range(0, 1))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    states = []
    for transactional_id in request.transactional_ids:
        owner = ctx.broker.txn_coordinator.owner_error(transactional_id)
        metadata = ctx.broker.txn_coordinator.describe(transactional_id) if owner is ErrorCode.none else None
        if metadata is None:
            code = owner if owner is not ErrorCode.none else ErrorCode.transactional_id_not_found
            states.append(make(
                "TransactionState", error_code=code, transactional_id=transactional_id,
                transaction_state="", transaction_timeout=datetime.timedelta(0),
                transaction_start_time=_time(-1), producer_id=-1, producer_epoch=-1, topics=(),
            ))
            continue
        by_topic = defaultdict(list)
        for topic, partition in sorted(metadata.partitions):
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


def _time(epoch_ms: int) -> datetime.datetime:
    # kio carries this as an aware datetime; -1 (not started) encodes as the epoch minus 1 ms.
    return datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.UTC)
