"""Scenario 9's clients, each in its own process: an attacker that sends requests of a
million items, and a prober that times another client's round trips meanwhile.

    heavy_requests.py attack --bootstrap H:P --user U --password P --items N --ready FILE --go FILE
    heavy_requests.py probe  --bootstrap H:P --user U --password P --topic T --stop FILE

`attack` builds its requests first (Metadata v1 naming N topics, ListOffsets v7 of N
partitions over 1,000 topics, OffsetFetch v7 of N partitions of one group, DescribeConfigs
v4 of N topics, CreateTopics v7 of N topics), writes `--ready`, waits for `--go`, then
sends them one after the other and prints, as JSON, each one's wall-clock start and end
(time.time()) and its answer's size. `probe` sends an ApiVersions and a one-record
Produce (acks=1) on two connections of its own every 5 ms until `--stop` exists, and
prints every round trip as [wall-clock start, "api_versions" | "produce", ms]. Both
authenticate with SASL/PLAIN, as the issue's attacker (a principal with no ACLs) did.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import threading
import time
from pathlib import Path

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.create_topics.v7 import request as create_topics
from kio.schema.describe_configs.v4 import request as describe_configs
from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v7 import request as list_offsets
from kio.schema.metadata.v1 import request as metadata
from kio.schema.offset_fetch.v7 import request as offset_fetch
from kio.schema.produce.v9 import request as produce
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.schema.types import BrokerId, GroupId, TopicName
from kio.static.primitive import Records, i8, i16, i32, i32Timedelta, i64

from oncelog.protocol import record_batch
from oncelog.protocol.client import WireClient, encode_request

TOPICS_OF_PARTITIONS = 1000  # ListOffsets' partitions are spread over this many topics


def connect(args: argparse.Namespace) -> WireClient:
    client = WireClient.connect(args.bootstrap, timeout=300)
    if client.request(SaslHandshakeRequest(mechanism="PLAIN")).error_code != ErrorCode.none:
        raise SystemExit("SaslHandshake refused")
    answer = client.request(SaslAuthenticateRequest(auth_bytes=f"\0{args.user}\0{args.password}".encode()))
    if answer.error_code != ErrorCode.none:
        raise SystemExit(f"SASL/PLAIN as {args.user} failed: {answer.error_message}")
    return client


def attack_requests(items: int) -> dict[str, bytes]:
    per_topic = max(1, items // TOPICS_OF_PARTITIONS)
    topics = [f"t{index:07d}" for index in range(items)]
    requests = {
        "Metadata": metadata.MetadataRequest(topics=tuple(
            metadata.MetadataRequestTopic(name=TopicName(name)) for name in topics)),
        "ListOffsets": list_offsets.ListOffsetsRequest(
            replica_id=BrokerId(-1), isolation_level=i8(0), topics=tuple(
                list_offsets.ListOffsetsTopic(name=TopicName(f"t{topic:04d}"), partitions=tuple(
                    list_offsets.ListOffsetsPartition(partition_index=i32(partition), timestamp=i64(-1))
                    for partition in range(per_topic)))
                for topic in range(TOPICS_OF_PARTITIONS))),
        "OffsetFetch": offset_fetch.OffsetFetchRequest(
            group_id=GroupId("victim"), require_stable=False, topics=tuple(
                offset_fetch.OffsetFetchRequestTopic(name=TopicName(f"t{topic:04d}"), partition_indexes=tuple(
                    i32(partition) for partition in range(per_topic)))
                for topic in range(TOPICS_OF_PARTITIONS))),
        "DescribeConfigs": describe_configs.DescribeConfigsRequest(
            include_synonyms=False, include_documentation=False, resources=tuple(
                describe_configs.DescribeConfigsResource(resource_type=i8(2), resource_name=name,
                                                         configuration_keys=None)
                for name in topics)),
        "CreateTopics": create_topics.CreateTopicsRequest(
            timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)), validate_only=False, topics=tuple(
                create_topics.CreatableTopic(name=TopicName(name), num_partitions=i32(1),
                                             replication_factor=i16(1), assignments=(), configs=())
                for name in topics)),
    }
    return {name: encode_request(request, number) for number, (name, request) in enumerate(requests.items(), 1)}


def attack(args: argparse.Namespace) -> dict:
    frames = attack_requests(args.items)
    client = connect(args)
    Path(args.ready).write_text("ready")
    while not os.path.exists(args.go):
        time.sleep(0.01)
    attacks = []
    for name, frame in frames.items():
        began = time.time()
        client.send_raw(frame)
        answer = client.read_frame()
        attacks.append({"api": name, "start": began, "end": time.time(), "request_bytes": len(frame),
                        "response_bytes": len(answer)})
    return {"attacks": attacks}


def probe(args: argparse.Namespace) -> dict:
    samples: list[list] = []
    lock = threading.Lock()

    def loop(kind: str, send) -> None:
        client = connect(args)
        number = 0
        while not os.path.exists(args.stop):
            number += 1
            began, started = time.time(), time.perf_counter()
            send(client, number)
            elapsed_ms = (time.perf_counter() - started) * 1000
            with lock:
                samples.append([began, kind, elapsed_ms])
            time.sleep(0.005)

    def api_versions(client: WireClient, number: int) -> None:
        client.request(ApiVersionsRequest(client_software_name="probe", client_software_version="1"))

    def produce_one(client: WireClient, number: int) -> None:
        batch = record_batch.build_batch([record_batch.Record(None, b"probe %d" % number)],
                                         timestamp_ms=int(time.time() * 1000))
        answer = client.request(produce.ProduceRequest(
            transactional_id=None, acks=i16(1), timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
            topic_data=(produce.TopicProduceData(name=TopicName(args.topic), partition_data=(
                produce.PartitionProduceData(index=i32(0), records=Records(batch)),)),)))
        error = answer.responses[0].partition_responses[0].error_code
        if error != ErrorCode.none:
            raise SystemExit(f"the probe's Produce failed: {error!r}")

    with connect(args) as admin:  # the probe's topic, as the principal that writes it
        created = admin.request(create_topics.CreateTopicsRequest(
            timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)), validate_only=False, topics=(
                create_topics.CreatableTopic(name=TopicName(args.topic), num_partitions=i32(1),
                                             replication_factor=i16(1), assignments=(), configs=()),)))
        if created.topics[0].error_code not in (ErrorCode.none, ErrorCode.topic_already_exists):
            raise SystemExit(f"creating {args.topic} failed: {created.topics[0].error_code!r}")
    threads = [threading.Thread(target=loop, args=("api_versions", api_versions)),
               threading.Thread(target=loop, args=("produce", produce_one))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"samples": samples}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    modes = parser.add_subparsers(dest="mode", required=True)
    for name, run in (("attack", attack), ("probe", probe)):
        mode = modes.add_parser(name)
        mode.add_argument("--bootstrap", required=True)
        mode.add_argument("--user", required=True)
        mode.add_argument("--password", required=True)
        mode.set_defaults(run=run)
        if name == "attack":
            mode.add_argument("--items", type=int, default=1_000_000)
            mode.add_argument("--ready", required=True)
            mode.add_argument("--go", required=True)
        else:
            mode.add_argument("--topic", required=True)
            mode.add_argument("--stop", required=True)
    args = parser.parse_args()
    print(json.dumps(args.run(args)), flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
