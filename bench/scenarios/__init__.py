"""Every scenario, in the order the harness runs and prints them.

Adding one: write a module here with a `Scenario` object (see base.py and produce.py
for the shape) and list it below. Numbering follows the issue:

 1 produce acks=1              2 produce idempotent acks=all   2w 2 from a raw wire client
 2m 2 with /metrics scraped (the HTTP listener's cost)
 2r 2 on 3 brokers (RF 3) vs 1
 3 txn every 10 records        3c 3 from 16 producers at once  4 txn every 1000 records
 3p 3c over 4 of 8 partitions per transaction
 5 consume read_uncommitted    5c consume read_committed     6 commit latency p50/p99
 7 start-up                   7r recovery after kill -9       8 Spark pipeline
 8i 8 into an Iceberg table vs into a topic
 8t stateful pipelines (windowed count, table join) at the demo's rate
 8s the Spark source alone     8w the Spark sink alone
 9 others' round trips while one principal sends 1,000,000-item requests (issue 38)
"""

from __future__ import annotations

from bench.scenarios import consume, consume_many, heavy, pipeline, produce, replicated, startup, transactions
from bench.scenarios.base import Scenario

SCENARIOS: list[Scenario] = [
    produce.PLAIN,
    produce.IDEMPOTENT,
    produce.WIRE_IDEMPOTENT,
    produce.METRICS_COST,
    replicated.REPLICATED,
    transactions.EVERY_10,
    transactions.EVERY_10_CONCURRENT,
    transactions.EVERY_10_SPREAD,
    transactions.EVERY_1000,
    consume.READ_UNCOMMITTED,
    consume.READ_COMMITTED,
    consume_many.CONSUME_MANY,
    transactions.COMMIT_LATENCY,
    startup.STARTUP,
    startup.RECOVERY,
    pipeline.PIPELINE,
    pipeline.ICEBERG,
    pipeline.STATEFUL,
    pipeline.SOURCE_ALONE,
    pipeline.SINK_ALONE,
    heavy.HEAVY_REQUESTS,
]

BY_ID = {scenario.id: scenario for scenario in SCENARIOS}
