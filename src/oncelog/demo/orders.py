"""The demo's input: JSON orders written by a transactional producer, some transactions
aborted; and what enrichment must make of each order (the independent Python version of
oncelog.demo.enrich, for checking the pipeline's output).

Order ids are unique across committed and aborted transactions, so any aborted order that
shows up downstream is recognisable.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from oncelog.demo.topics import seeding_producer

CUSTOMERS = 1_000  # as in oncelog.demo.enrich
SKUS = 50
PRICES = (4.99, 9.5, 12.25, 19.99, 25.0, 49.9, 99.0)


def make_order(number: int, rng: random.Random) -> dict:
    items = [
        {"sku": f"sku-{rng.randrange(SKUS):03d}", "quantity": rng.randint(1, 5),
         "unit_price": rng.choice(PRICES)}
        for _ in range(rng.randint(1, 4))
    ]
    return {
        "order_id": f"o-{number:07d}",
        "customer_id": f"c-{rng.randrange(CUSTOMERS):04d}",
        "currency": "EUR",
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "items": items,
    }


def tier_of(customer_id: str) -> str:
    number = int(customer_id.removeprefix("c-"))
    return "gold" if number % 10 == 0 else "silver" if number % 3 == 0 else "bronze"


def expected_enrichment(order: dict) -> dict:
    """The fields enrich_orders adds, computed here without Spark."""
    return {
        "total": round(sum(item["quantity"] * item["unit_price"] for item in order["items"]), 2),
        "item_count": sum(item["quantity"] for item in order["items"]),
        "tier": tier_of(order["customer_id"]),
    }


@dataclass
class Seeded:
    """What the seeder wrote, by fate of its transaction."""

    committed: dict[str, dict] = field(default_factory=dict)  # order_id -> order
    aborted: set[str] = field(default_factory=set)
    committed_transactions: int = 0
    aborted_transactions: int = 0
    error: str | None = None


class OrderSeeder:
    """Writes `total` orders to `topic` in transactions of `transaction_size`; every
    `abort_every`-th transaction is aborted after its records reached the log.

    `run(pace)` calls `pace(written_so_far)` between transactions, so the caller can
    spread the writes over the pipeline's run."""

    def __init__(self, bootstrap: str, topic: str, total: int, *, transaction_size: int = 200,
                 abort_every: int = 5, seed: int = 7) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.total = total
        self.transaction_size = transaction_size
        self.abort_every = abort_every
        self.rng = random.Random(seed)
        self.seeded = Seeded()
        self.written = 0

    @property
    def error(self) -> str | None:
        return self.seeded.error

    def run(self, pace: Callable[[int], None] = lambda written: None) -> Seeded:
        from confluent_kafka import KafkaException

        producer = seeding_producer(self.bootstrap, "oncelog-demo-order-seeder")
        try:
            producer.init_transactions(30)
            transaction = 0
            while self.written < self.total:
                pace(self.written)
                transaction += 1
                aborting = transaction % self.abort_every == 0
                count = min(self.transaction_size, self.total - self.written)
                orders = [make_order(self.written + i, self.rng) for i in range(count)]
                producer.begin_transaction()
                for order in orders:
                    producer.produce(self.topic, json.dumps(order).encode(), key=order["order_id"].encode())
                    producer.poll(0)
                if aborting:
                    producer.flush(30)  # the records reach the log, then the marker aborts them
                    producer.abort_transaction(30)
                    self.seeded.aborted.update(order["order_id"] for order in orders)
                    self.seeded.aborted_transactions += 1
                else:
                    producer.commit_transaction(30)
                    self.seeded.committed.update((order["order_id"], order) for order in orders)
                    self.seeded.committed_transactions += 1
                self.written += count
        except KafkaException as error:
            self.seeded.error = f"seeding {self.topic} failed: {error.args[0].str() if error.args else error}"
        return self.seeded
