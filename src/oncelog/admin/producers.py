"""`oncelog producers describe`: the producer state of one partition, like
`kafka-transactions.sh describe-producers`.

Standard clients have no DescribeProducers call, so this speaks the API directly.
"""

from __future__ import annotations

import argparse
import os

from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.errors import ErrorCode


def register(commands: argparse._SubParsersAction) -> None:
    producers = commands.add_parser("producers", help="inspect idempotent and transactional producers")
    actions = producers.add_subparsers(dest="action", metavar="ACTION", required=True)
    describe = actions.add_parser(
        "describe", help="show the active producers of a partition (DescribeProducers)",
    )
    describe.add_argument("--bootstrap-server", default=os.environ.get("ONCELOG_BOOTSTRAP", "localhost:9092"))
    describe.add_argument("--topic", required=True)
    describe.add_argument("--partition", type=int, required=True)
    describe.set_defaults(run=run_describe)


def run_describe(args: argparse.Namespace) -> int:
    from oncelog.cli import CommandError
    from oncelog.protocol.client import WireClient

    try:
        client = WireClient.connect(args.bootstrap_server)
    except OSError as error:
        raise CommandError(f"cannot connect to {args.bootstrap_server}: {error}") from None
    with client:
        response = client.request(
            DescribeProducersRequest(topics=(TopicRequest(name=args.topic, partition_indexes=(args.partition,)),))
        )
    (partition,) = response.topics[0].partitions
    if partition.error_code != ErrorCode.none:
        raise CommandError(partition.error_message or partition.error_code.name)
    columns = ("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp", "CurrentTransactionStartOffset")
    rows = [
        (p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence, p.last_timestamp, p.current_txn_start_offset)
        for p in partition.active_producers
    ]
    widths = [max(len(c), *(len(str(r[i])) for r in rows)) if rows else len(c) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip())
    for row in rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths)).rstrip())
    return 0
