"""The stateful demo's input, and what the seeds' application (oncelog.demo.streams) must
make of it, computed here in plain Python from the committed input alone.

One transactional producer writes, in turn, a transaction of events to `input-events`
and a transaction of table updates to `reference-data` (values, and now and then a
tombstone); every fifth transaction of each kind is aborted after its records reached the
log. Before the first event, a committed transaction fills the table for most keys.

Every record carries an explicit timestamp from one clock that ticks once per record, so
timestamp order is the order the records were committed in, and the input spans
`WINDOWS` windows' worth of time (up to one more aligned five-minute window) whatever its
size. Written one transaction after another,
a table update is visible (below the last stable offset) before any event written after
it is, so a micro-batch never holds an event without the updates that precede it: each
event's expected join is the table as the committed updates before it left it, in Kafka
Streams' processing order, whatever the micro-batches are. (With `maxOffsetsPerTrigger`
that would not hold: a micro-batch could take an event but not an earlier update.)

Event values are `e-<number> <PRIORITY>` (HIGH, NORMAL or LOW), unique across committed
and aborted transactions; table values `<key>-r<version>`, unique too; so anything from
an aborted transaction that shows up downstream is recognisable.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from oncelog.demo.topics import EVENTS_TOPIC, REFERENCE_TOPIC, seeding_producer

KEYS = 30
TABLE_KEYS = 24  # keys in the table from the start; the others only once an update adds them
PRIORITIES = ("HIGH", "NORMAL", "NORMAL", "NORMAL", "LOW")
NULL_VALUE_EVERY = 101  # every so many events has no value (skipped by the application)
WINDOW_MS = 300_000  # oncelog.demo.streams.WINDOW
WINDOWS = 4  # the input's timestamps span this many windows' worth of time
TOMBSTONE_SHARE = 0.15  # of the table updates


@dataclass(frozen=True)
class InputRecord:
    topic: str
    key: str
    value: str | None
    timestamp: int  # ms


def event_id(value: str) -> str:
    return value.split(" ", 1)[0]


@dataclass
class SeededEvents:
    """What the seeder wrote, by fate of its transaction."""

    committed: list[InputRecord] = field(default_factory=list)  # in commit (and timestamp) order
    aborted: list[InputRecord] = field(default_factory=list)
    aborted_events: set[str] = field(default_factory=set)  # event ids
    aborted_table_values: set[str] = field(default_factory=set)
    committed_transactions: int = 0
    aborted_transactions: int = 0
    error: str | None = None

    def event_values(self) -> set[str]:
        """The committed events' values."""
        return {r.value for r in self.committed if r.topic == EVENTS_TOPIC and r.value is not None}

    def count(self, topic: str, *, committed: bool = True) -> int:
        return sum(1 for record in (self.committed if committed else self.aborted) if record.topic == topic)


class EventSeeder:
    """Writes `total` events in transactions of `transaction_size`, a table transaction
    of one to three updates after each; see the module docstring."""

    def __init__(self, bootstrap: str, total: int, *, transaction_size: int = 200, abort_every: int = 5,
                 seed: int = 7) -> None:
        self.bootstrap = bootstrap
        self.total = total
        self.transaction_size = transaction_size
        self.abort_every = abort_every
        self.rng = random.Random(seed)
        self.seeded = SeededEvents()
        self.written = 0  # events
        transactions = -(-total // transaction_size)
        self._step_ms = max(1, WINDOWS * WINDOW_MS // (total + 3 * transactions + TABLE_KEYS))
        self._clock = int(time.time() * 1000) - (WINDOWS + 1) * WINDOW_MS
        self._version = 0

    @property
    def error(self) -> str | None:
        return self.seeded.error

    def _tick(self) -> int:
        self._clock += self._step_ms
        return self._clock

    def _table_value(self, key: str) -> str:
        self._version += 1
        return f"{key}-r{self._version}"

    def run(self, pace: Callable[[int], None] = lambda written: None) -> SeededEvents:
        from confluent_kafka import KafkaException

        producer = seeding_producer(self.bootstrap, "oncelog-demo-event-seeder")
        try:
            producer.init_transactions(30)
            initial = [InputRecord(REFERENCE_TOPIC, key, self._table_value(key), self._tick())
                       for key in map(_key, range(TABLE_KEYS))]
            self._transaction(producer, initial, aborting=False)
            transaction = 0
            while self.written < self.total:
                pace(self.written)
                transaction += 1
                count = min(self.transaction_size, self.total - self.written)
                events = [self._event(self.written + i) for i in range(count)]
                self._transaction(producer, events, aborting=transaction % self.abort_every == 0)
                self.written += count
                updates = [self._update() for _ in range(self.rng.randint(1, 3))]
                self._transaction(producer, updates, aborting=transaction % self.abort_every == 2)
        except KafkaException as error:
            self.seeded.error = f"seeding failed: {error.args[0].str() if error.args else error}"
        return self.seeded

    def _event(self, number: int) -> InputRecord:
        value = None if number % NULL_VALUE_EVERY == NULL_VALUE_EVERY - 1 else \
            f"e-{number:07d} {self.rng.choice(PRIORITIES)}"
        return InputRecord(EVENTS_TOPIC, _key(self.rng.randrange(KEYS)), value, self._tick())

    def _update(self) -> InputRecord:
        key = _key(self.rng.randrange(KEYS))
        value = None if self.rng.random() < TOMBSTONE_SHARE else self._table_value(key)
        return InputRecord(REFERENCE_TOPIC, key, value, self._tick())

    def _transaction(self, producer, records: list[InputRecord], *, aborting: bool) -> None:
        producer.begin_transaction()
        for record in records:
            producer.produce(record.topic, None if record.value is None else record.value.encode(),
                             key=record.key.encode(), timestamp=record.timestamp)
            producer.poll(0)
        if aborting:
            producer.flush(30)  # the records reach the log, then the marker aborts them
            producer.abort_transaction(30)
            self.seeded.aborted.extend(records)
            for record in records:
                if record.value is None:
                    continue
                if record.topic == EVENTS_TOPIC:
                    self.seeded.aborted_events.add(event_id(record.value))
                else:
                    self.seeded.aborted_table_values.add(record.value)
            self.seeded.aborted_transactions += 1
        else:
            producer.commit_transaction(30)
            self.seeded.committed.extend(records)
            self.seeded.committed_transactions += 1


def _key(number: int) -> str:
    return f"k-{number:03d}"


@dataclass
class Expected:
    """The application's outputs, from the committed input."""

    counts: Counter[str] = field(default_factory=Counter)  # `<key>@<window start ms>` -> events
    high: dict[str, str] = field(default_factory=dict)  # event value -> key
    normal: dict[str, str] = field(default_factory=dict)
    enriched: dict[str, tuple[str, str]] = field(default_factory=dict)  # event id -> (key, `event:reference`)


def expected_outputs(seeded: SeededEvents) -> Expected:
    """Kafka Streams' results for the committed input, replayed in timestamp order."""
    expected = Expected()
    table: dict[str, str] = {}
    for record in seeded.committed:  # in commit order, which is timestamp order
        if record.topic == REFERENCE_TOPIC:
            if record.value is None:
                table.pop(record.key, None)
            else:
                table[record.key] = record.value
            continue
        if record.value is None:
            continue
        expected.counts[f"{record.key}@{record.timestamp - record.timestamp % WINDOW_MS}"] += 1
        if "HIGH" in record.value:
            expected.high[record.value] = record.key
        elif "NORMAL" in record.value:
            expected.normal[record.value] = record.key
        if record.key in table:
            expected.enriched[event_id(record.value)] = (record.key, f"{record.value}:{table[record.key]}")
    return expected
