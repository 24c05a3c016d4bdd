"""Scenario 5s: a consumer of 200 partitions, with fetch sessions (KIP-227) and without.

Each run: a fresh broker, a topic of PARTITIONS partitions, and two wire-level
consumers (oncelog's WireClient, Fetch v12) that each make the same number of fetches
of every partition from its end:

- "full": every Fetch names all partitions and is a full, sessionless one (epoch -1,
  as librdkafka's);
- "session": a full fetch opens a session (epoch 0), then each incremental fetch names
  only the partitions whose position moved and is answered only with what changed.

Two loads each: "trickle", where before each fetch one record (of `--value-size`
bytes) is produced to the next partition in turn, so every fetch has one partition with
news (the produce's broker CPU is in both figures); and "idle", where nothing is new
and each fetch is answered at once (min_bytes 0), the cost of a caught-up consumer's
polling. Reported per fetch: the broker's CPU (microseconds) and the response bytes,
and full / session ratios (higher: sessions save more).
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass

from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.fetch.v12 import response as fetch_v12_response
from kio.schema.produce.v9 import request as produce_v9
from kio.schema.types import TopicName
from kio.static.primitive import Records, i16, i32, i32Timedelta, i64

from bench.peers import ONCELOG
from bench.scenarios.base import Metric, Scenario, ScenarioFailed, Settings, load_phase, loadgen, running
from oncelog.protocol import record_batch
from oncelog.protocol.client import WireClient, decode_response, encode_request

TOPIC = "bench-consume-many"
PARTITIONS = 200
FETCHES, QUICK_FETCHES = 2000, 300
FULL, SESSION = "full", "session"
SESSIONLESS_EPOCH, NEW_SESSION_EPOCH = -1, 0


@dataclass
class LoopResult:
    fetches: int
    response_bytes: int
    broker_cpu_s: float | None
    seconds: float


class WireConsumer:
    """A consumer of every partition of TOPIC at the wire, with or without a session."""

    def __init__(self, client: WireClient, offsets: dict[int, int], *, use_session: bool) -> None:
        self.client = client
        self.offsets = dict(offsets)
        self.use_session = use_session
        self.session_id = 0
        self.epoch = NEW_SESSION_EPOCH if use_session else SESSIONLESS_EPOCH
        self.moved: set[int] = set(offsets)  # the partitions the next incremental fetch names
        self._correlation = 0

    def fetch(self, *, wait: bool) -> int:
        """One Fetch; the response's size in bytes."""
        incremental = self.use_session and self.session_id != 0
        named = sorted(self.moved) if incremental else sorted(self.offsets)
        request = fetch_v12.FetchRequest(
            max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=500 if wait else 0)),
            min_bytes=i32(1 if wait else 0), max_bytes=i32(50 << 20),
            session_id=i32(self.session_id), session_epoch=i32(self.epoch),
            topics=(fetch_v12.FetchTopic(topic=TopicName(TOPIC), partitions=tuple(
                fetch_v12.FetchPartition(partition=i32(p), fetch_offset=i64(self.offsets[p]),
                                         partition_max_bytes=i32(1 << 20))
                for p in named)),) if named else (),
            forgotten_topics_data=(), rack_id="",
        )
        self._correlation += 1
        self.client.send_raw(encode_request(request, self._correlation))
        frame = self.client.read_frame()
        response: fetch_v12_response.FetchResponse = decode_response(request, frame, self._correlation)
        if response.error_code != 0:
            raise ScenarioFailed(f"fetch error {response.error_code} (session {self.session_id}, epoch {self.epoch})")
        self.moved = set()
        for topic in response.responses:
            for data in topic.partitions:
                if data.error_code != 0:
                    raise ScenarioFailed(f"fetch of partition {data.partition_index}: error {data.error_code}")
                if data.records:
                    batches = record_batch.parse_batches(bytes(data.records), verify_crc=False)
                    self.offsets[data.partition_index] = batches[-1].next_offset
                    self.moved.add(data.partition_index)
        if self.use_session:
            if self.session_id == 0 and response.session_id == 0:
                raise ScenarioFailed("the broker opened no fetch session")
            self.session_id = response.session_id
            self.epoch = 1 if self.epoch == NEW_SESSION_EPOCH else self.epoch + 1
        return len(frame) + 4


class ConsumeManyScenario(Scenario):
    id = "5s"
    title = f"consume {PARTITIONS} partitions: fetch sessions vs full fetches"
    peers = (ONCELOG,)
    metrics = (
        Metric("session_cpu_us_per_fetch", "CPU us/fetch sess", higher_is_better=False),
        Metric("full_cpu_us_per_fetch", "CPU us/fetch full", higher_is_better=False),
        Metric("cpu_ratio", "CPU full/session"),
        Metric("session_bytes_per_fetch", "B/fetch session", higher_is_better=False),
        Metric("full_bytes_per_fetch", "B/fetch full", higher_is_better=False),
        Metric("bytes_ratio", "bytes full/session"),
        Metric("idle_session_cpu_us_per_fetch", "idle CPU us sess", higher_is_better=False),
        Metric("idle_full_cpu_us_per_fetch", "idle CPU us full", higher_is_better=False),
        Metric("idle_cpu_ratio", "idle CPU full/sess"),
        Metric("idle_bytes_ratio", "idle B full/sess"),
    )

    def run_once(self, peer: str, settings: Settings) -> dict[str, float]:
        fetches = QUICK_FETCHES if settings.quick else FETCHES
        value = b"v" * settings.value_size
        with running(peer, settings) as (bootstrap, target):
            loadgen("create-topic", "--bootstrap", bootstrap, "--topic", TOPIC, "--partitions", PARTITIONS)
            with WireClient.connect(bootstrap) as producer:
                ends = {p: _produce(producer, p, value) + 1 for p in range(PARTITIONS)}  # one record each
                figures: dict[str, float] = {}
                for load, trickle in (("trickle", True), ("idle", False)):
                    results = {}
                    for mode in (FULL, SESSION):
                        with WireClient.connect(bootstrap) as client:
                            consumer = WireConsumer(client, ends, use_session=mode == SESSION)
                            consumer.fetch(wait=False)  # the session's full fetch, outside the figures
                            with load_phase(target, settings, f"scenario5s-{load}-{mode}", 0.0) as phase:
                                started = time.perf_counter()
                                response_bytes = 0
                                for i in range(fetches):
                                    if trickle:
                                        partition = i % PARTITIONS
                                        ends[partition] = _produce(producer, partition, value) + 1
                                    response_bytes += consumer.fetch(wait=trickle)
                                seconds = time.perf_counter() - started
                            ends = dict(consumer.offsets)
                        results[mode] = LoopResult(fetches, response_bytes, phase.get("broker_cpu_s"), seconds)
                    figures.update(_figures(results, prefix="" if trickle else "idle_"))
        return figures


def _figures(results: dict[str, LoopResult], prefix: str) -> dict[str, float]:
    figures: dict[str, float] = {}
    for mode, result in results.items():
        figures[f"{prefix}{mode}_bytes_per_fetch"] = result.response_bytes / result.fetches
        if result.broker_cpu_s is not None:
            figures[f"{prefix}{mode}_cpu_us_per_fetch"] = result.broker_cpu_s * 1e6 / result.fetches
    full, session = f"{prefix}{FULL}", f"{prefix}{SESSION}"
    if figures.get(f"{session}_cpu_us_per_fetch"):
        figures[f"{prefix}cpu_ratio"] = figures[f"{full}_cpu_us_per_fetch"] / figures[f"{session}_cpu_us_per_fetch"]
    figures[f"{prefix}bytes_ratio"] = figures[f"{full}_bytes_per_fetch"] / figures[f"{session}_bytes_per_fetch"]
    return figures


def _produce(client: WireClient, partition: int, value: bytes) -> int:
    """One record to `partition` (acks=1); its offset."""
    batch = record_batch.build_batch([record_batch.Record(None, value)], timestamp_ms=int(time.time() * 1000))
    request = produce_v9.ProduceRequest(
        transactional_id=None, acks=i16(1), timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
        topic_data=(produce_v9.TopicProduceData(name=TopicName(TOPIC), partition_data=(
            produce_v9.PartitionProduceData(index=i32(partition), records=Records(batch)),)),),
    )
    answer = client.request(request).responses[0].partition_responses[0]
    if answer.error_code != 0:
        raise ScenarioFailed(f"produce to partition {partition}: error {answer.error_code}")
    return int(answer.base_offset)


CONSUME_MANY = ConsumeManyScenario()
