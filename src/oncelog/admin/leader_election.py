"""`oncelog leader-election`: move leaderships back to preferred replicas, like
kafka-leader-election.sh.

    oncelog leader-election --election-type PREFERRED --all-topic-partitions
    oncelog leader-election --election-type PREFERRED --topic orders [--partition 0]
    oncelog leader-election --election-type PREFERRED --path-to-json-file partitions.json

Built on confluent-kafka's AdminClient (ElectLeaders). The output is Kafka's
LeaderElectionCommand's: `Successfully completed leader election (PREFERRED) for
partitions orders-0, orders-1`, `Valid replica already elected for partitions orders-2`,
and for each failure `Error completing leader election (PREFERRED) for partition:
orders-0: <why>`, after which the command exits 1 (`N replica(s) could not be elected`).
The JSON file is Kafka's: {"partitions": [{"topic": "orders", "partition": 0}, ...]}.

Deviation: `--topic` without `--partition` means every partition of the topic (Kafka
needs both); UNCLEAN is accepted but oncelog makes no unclean elections, so a partition
without a leader gets ELIGIBLE_LEADERS_NOT_AVAILABLE.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from oncelog.admin.clients import (
    add_connection_arguments,
    client_config,
    command_error,
    fetch_metadata,
    make_client,
)
from oncelog.errors import CommandError

REQUEST_TIMEOUT_S = 30.0
MAX_JSON_FILE_BYTES = 16 * 1024 * 1024


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "leader-election",
        help="elect preferred leaders (kafka-leader-election.sh)",
        description="Move each partition's leadership to its preferred replica (the first of its "
        "replicas) where that replica is live and in the ISR.",
    )
    add_connection_arguments(parser)
    parser.add_argument("--election-type", required=True, type=str.upper, choices=("PREFERRED", "UNCLEAN"),
                        help="PREFERRED: the first replica leads again; UNCLEAN: not made by oncelog")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--all-topic-partitions", action="store_true", help="every partition of every topic")
    which.add_argument("--topic", help="the partitions of this topic (with --partition: that one)")
    which.add_argument("--path-to-json-file", metavar="FILE",
                       help='partitions as {"partitions": [{"topic": T, "partition": N}, ...]}')
    parser.add_argument("--partition", type=int, help="with --topic: only this partition")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.partition is not None and args.topic is None:
        raise CommandError("--partition needs --topic")
    election = ElectionType[args.election_type]
    admin = make_client(AdminClient, client_config(args, **{"allow.auto.create.topics": False}))
    if args.all_topic_partitions:
        partitions = None
    elif args.topic is not None:
        partitions = _topic_partitions(admin, args)
    else:
        partitions = _read_json_file(args.path_to_json_file)
    try:
        # No request_timeout: confluent-kafka 2.16 fails any keyword argument here (SystemError).
        results = admin.elect_leaders(election, partitions).result(timeout=REQUEST_TIMEOUT_S)
    except KafkaException as error:
        raise command_error(error, topic=args.topic) from None
    except TimeoutError:
        raise CommandError(f"no answer from {args.bootstrap_server} within {REQUEST_TIMEOUT_S:.0f}s") from None
    return _report(args.election_type, results)


def _topic_partitions(admin: AdminClient, args: argparse.Namespace) -> list[TopicPartition]:
    if args.partition is not None:
        return [TopicPartition(args.topic, args.partition)]
    metadata = fetch_metadata(admin, args, args.topic)
    topic = metadata.topics.get(args.topic)
    if topic is None or topic.error is not None:
        raise CommandError(f"Topic '{args.topic}' does not exist.")
    return [TopicPartition(args.topic, index) for index in sorted(topic.partitions)]


def _read_json_file(path: str) -> list[TopicPartition]:
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_JSON_FILE_BYTES + 1)
    except OSError as error:
        raise CommandError(f"cannot read {path!r}: {error.strerror}") from None
    if len(data) > MAX_JSON_FILE_BYTES:
        raise CommandError(f"{path}: larger than {MAX_JSON_FILE_BYTES} bytes")
    try:
        document = json.loads(data)
        entries = document["partitions"]
        partitions = [TopicPartition(str(entry["topic"]), int(entry["partition"])) for entry in entries]
    except (ValueError, KeyError, TypeError) as error:
        raise CommandError(f'{path}: expected {{"partitions": [{{"topic": T, "partition": N}}, ...]}} ({error})'
                           ) from None
    if len({(p.topic, p.partition) for p in partitions}) != len(partitions):
        raise CommandError(f"{path}: a partition is named more than once")
    if not partitions:
        raise CommandError(f"{path}: names no partition")
    return partitions


def _name(partition: TopicPartition) -> str:
    return f"{partition.topic}-{partition.partition}"


def _report(election_type: str, results: dict[TopicPartition, Any]) -> int:
    elected, noop, failed = [], [], []
    for partition in sorted(results, key=lambda p: (p.topic, p.partition)):
        error = results[partition]
        if error is None:
            elected.append(partition)
            continue
        kafka_error = error.args[0] if isinstance(error, KafkaException) and error.args else error
        if isinstance(kafka_error, KafkaError) and kafka_error.code() == KafkaError.ELECTION_NOT_NEEDED:
            noop.append(partition)
        else:
            text = kafka_error.str() if isinstance(kafka_error, KafkaError) else str(kafka_error)
            failed.append((partition, text))
    if elected:
        print(f"Successfully completed leader election ({election_type}) for partitions "
              + ", ".join(_name(p) for p in elected))
    if noop:
        print("Valid replica already elected for partitions " + ", ".join(_name(p) for p in noop))
    for partition, text in failed:
        print(f"Error completing leader election ({election_type}) for partition: {_name(partition)}: {text}")
    if failed:
        raise CommandError(f"{len(failed)} replica(s) could not be elected")
    return 0
