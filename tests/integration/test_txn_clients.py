"""Transactions with kafka-python 3.0 and aiokafka 0.14 against a real broker.

Each library's transactional producer and read_committed consumer, never mixed, so a
failure names the library that cannot work with the broker:
- a commit across two topics x three partitions is seen whole by read_committed;
- an abort is invisible to read_committed but visible to read_uncommitted;
- an open transaction holds the last stable offset, also over another producer's
  committed records written after it, until it commits;
- a second instance with the same transactional id fences the first (the library's
  fenced error on its next send or commit) and the first's open transaction is aborted.

Consumers are driven until their position reaches a known offset (the LSO or the log
end), so "sees nothing" means the consumer read past those offsets and returned nothing,
not merely that a poll timed out.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import InvalidProducerEpochError, KafkaError, ProducerFencedError

DEADLINE_S = 30.0
TOPICS = ("txn-a", "txn-b")
PARTITIONS = 3


def create_topics(bootstrap: str, names, partitions: int = PARTITIONS) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1) for name in names])
    finally:
        admin.close()


def all_partitions(names=TOPICS, partitions: int = PARTITIONS) -> list[TopicPartition]:
    return [TopicPartition(name, p) for name in names for p in range(partitions)]


# -- kafka-python -----------------------------------------------------------------------


def kp_consumer(bootstrap: str, isolation: str, partitions) -> KafkaConsumer:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False,
                             auto_offset_reset="earliest", fetch_max_wait_ms=100)
    consumer.assign(list(partitions))
    consumer.seek_to_beginning()
    return consumer


def kp_read_until(consumer: KafkaConsumer, targets: dict[TopicPartition, int]) -> list:
    """Poll until the consumer's position has reached `targets` on every partition."""
    received = []
    deadline = time.monotonic() + DEADLINE_S
    while any(consumer.position(tp) < offset for tp, offset in targets.items()):
        assert time.monotonic() < deadline, {tp: (consumer.position(tp), o) for tp, o in targets.items()}
        for messages in consumer.poll(timeout_ms=200).values():
            received.extend(messages)
    return received


def kp_end_offsets(bootstrap: str, isolation: str, partitions) -> dict[TopicPartition, int]:
    """ListOffsets(latest) in the given isolation level: the LSO for read_committed."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation)
    try:
        return consumer.end_offsets(list(partitions))
    finally:
        consumer.close()


def kp_transactional(bootstrap: str, transactional_id: str, **config) -> KafkaProducer:
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id, **config)
    producer.init_transactions()
    return producer


def values(messages) -> list[bytes]:
    return [m.value for m in messages]


def test_kafka_python_commit_across_two_topics_is_seen_whole_by_read_committed(broker):
    bootstrap = broker.bootstrap_servers
    create_topics(bootstrap, TOPICS)
    producer = kp_transactional(bootstrap, "kp-commit")
    producer.begin_transaction()
    sent = {tp: [f"{tp.topic}/{tp.partition}/{i}".encode() for i in range(4)] for tp in all_partitions()}
    for tp, payloads in sent.items():
        for value in payloads:
            producer.send(tp.topic, value, partition=tp.partition)
    producer.commit_transaction()
    producer.close()

    # Four records and the COMMIT marker on every partition.
    assert kp_end_offsets(bootstrap, "read_committed", all_partitions()) == dict.fromkeys(all_partitions(), 5)
    consumer = kp_consumer(bootstrap, "read_committed", all_partitions())
    received = kp_read_until(consumer, dict.fromkeys(all_partitions(), 5))
    consumer.close()
    for tp, payloads in sent.items():
        assert [m.value for m in received if (m.topic, m.partition) == (tp.topic, tp.partition)] == payloads
    assert len(received) == 4 * len(sent)


def test_kafka_python_abort_is_invisible_to_read_committed_only(broker):
    bootstrap = broker.bootstrap_servers
    create_topics(bootstrap, TOPICS)
    producer = kp_transactional(bootstrap, "kp-abort")
    producer.begin_transaction()
    for tp in all_partitions():
        for i in range(3):
            producer.send(tp.topic, f"aborted-{tp.partition}-{i}".encode(), partition=tp.partition)
    producer.flush()  # on the log before the abort (an abort drops unsent records)
    producer.abort_transaction()
    producer.begin_transaction()
    producer.send("txn-a", b"committed-after", partition=0)
    producer.commit_transaction()
    producer.close()

    # txn-a/0: 3 aborted, ABORT, 1 committed, COMMIT; elsewhere 3 aborted, ABORT.
    ends = dict.fromkeys(all_partitions(), 4) | {TopicPartition("txn-a", 0): 6}
    assert kp_end_offsets(bootstrap, "read_committed", all_partitions()) == ends
    committed = kp_consumer(bootstrap, "read_committed", all_partitions())
    assert values(kp_read_until(committed, ends)) == [b"committed-after"]
    committed.close()
    uncommitted = kp_consumer(bootstrap, "read_uncommitted", all_partitions())
    seen = kp_read_until(uncommitted, ends)
    uncommitted.close()
    assert sorted(values(seen)) == sorted(
        [f"aborted-{tp.partition}-{i}".encode() for tp in all_partitions() for i in range(3)] + [b"committed-after"]
    )


def test_kafka_python_open_transaction_holds_the_last_stable_offset_until_commit(broker):
    bootstrap = broker.bootstrap_servers
    create_topics(bootstrap, ["lso"], partitions=1)
    tp = TopicPartition("lso", 0)
    plain = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(2):
        plain.send("lso", f"before-{i}".encode(), partition=0)
    plain.flush()  # offsets 0-1

    open_txn = kp_transactional(bootstrap, "kp-open")
    open_txn.begin_transaction()
    for i in range(3):
        open_txn.send("lso", f"open-{i}".encode(), partition=0)
    open_txn.flush()  # offsets 2-4, uncommitted
    other = kp_transactional(bootstrap, "kp-other")
    other.begin_transaction()
    for i in range(2):
        other.send("lso", f"other-{i}".encode(), partition=0)
    other.commit_transaction()  # offsets 5-6 and COMMIT at 7: committed, but behind the open one
    other.close()

    assert kp_end_offsets(bootstrap, "read_committed", [tp]) == {tp: 2}
    assert kp_end_offsets(bootstrap, "read_uncommitted", [tp]) == {tp: 8}
    consumer = kp_consumer(bootstrap, "read_committed", [tp])
    assert values(kp_read_until(consumer, {tp: 2})) == [b"before-0", b"before-1"]
    # Nothing beyond the LSO, however long it polls.
    stalled_until = time.monotonic() + 2.0
    while time.monotonic() < stalled_until:
        assert consumer.poll(timeout_ms=200) == {}
    assert consumer.position(tp) == 2

    open_txn.commit_transaction()  # COMMIT at 8
    open_txn.close()
    assert values(kp_read_until(consumer, {tp: 9})) == [
        b"open-0", b"open-1", b"open-2", b"other-0", b"other-1",
    ]
    consumer.close()
    assert kp_end_offsets(bootstrap, "read_committed", [tp]) == {tp: 9}


def kp_fenced_zombie(bootstrap: str, transactional_id: str) -> KafkaProducer:
    """A producer with an open transaction (zombie-0, zombie-1 at offsets 0-1 of fence-0),
    fenced by a second instance that then commits `successor` (ABORT at 2, successor at 3,
    COMMIT at 4)."""
    create_topics(bootstrap, ["fence"], partitions=1)
    zombie = kp_transactional(bootstrap, transactional_id)
    zombie.begin_transaction()
    for i in range(2):
        zombie.send("fence", f"zombie-{i}".encode(), partition=0)
    zombie.flush()
    successor = kp_transactional(bootstrap, transactional_id)  # returns once the zombie's transaction is aborted
    successor.begin_transaction()
    successor.send("fence", b"successor", partition=0)
    successor.commit_transaction()
    successor.close()
    return zombie


def kp_assert_zombie_transaction_aborted(bootstrap: str) -> None:
    tp = TopicPartition("fence", 0)
    committed = kp_consumer(bootstrap, "read_committed", [tp])
    assert values(kp_read_until(committed, {tp: 5})) == [b"successor"]
    committed.close()
    uncommitted = kp_consumer(bootstrap, "read_uncommitted", [tp])
    assert values(kp_read_until(uncommitted, {tp: 5})) == [b"zombie-0", b"zombie-1", b"successor"]
    uncommitted.close()


def kp_commit_expecting_fenced(zombie: KafkaProducer) -> None:
    """commit_transaction must end in ProducerFencedError. After a Produce answered
    INVALID_PRODUCER_EPOCH, kafka-python first tries a KIP-360 epoch bump (InitProducerId
    with its old id and epoch, which the coordinator answers PRODUCER_FENCED); a commit
    issued while that bump is in flight is refused locally, so retry until it settles.
    Once fenced, kafka-python reports the fatal state as a KafkaError naming
    ProducerFencedError."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            zombie.commit_transaction()
        except ProducerFencedError:
            return
        except KafkaError as error:
            if "ProducerFencedError" in str(error):
                return
            if "BUMPING_PRODUCER_EPOCH" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
        else:
            pytest.fail("the fenced producer committed its transaction")


def test_kafka_python_second_instance_fences_the_first_and_aborts_its_transaction(broker):
    zombie = kp_fenced_zombie(broker.bootstrap_servers, "kp-fence-commit")
    with pytest.raises(ProducerFencedError):
        zombie.commit_transaction()  # EndTxn with the old epoch
    zombie.close(timeout=5)
    kp_assert_zombie_transaction_aborted(broker.bootstrap_servers)


def test_kafka_python_fenced_producer_send_fails_with_producer_fenced(broker):
    # Regression: the broker answered this Produce INVALID_TXN_STATE; Kafka (and now
    # oncelog) answers INVALID_PRODUCER_EPOCH, which clients map to their fenced error.
    zombie = kp_fenced_zombie(broker.bootstrap_servers, "kp-fence-send")
    try:
        late = zombie.send("fence", b"zombie-late", partition=0)  # Produce with the old epoch
        # The record fails with the broker's error; the producer turns it into its fatal fenced state.
        with pytest.raises((InvalidProducerEpochError, ProducerFencedError)):
            late.get(timeout=DEADLINE_S)
        kp_commit_expecting_fenced(zombie)
    finally:
        zombie.close(timeout=5)
    kp_assert_zombie_transaction_aborted(broker.bootstrap_servers)


# -- aiokafka ---------------------------------------------------------------------------


async def aio_consumer(bootstrap: str, isolation: str, partitions):
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as AioTopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False,
                                auto_offset_reset="earliest", group_id=None, fetch_max_wait_ms=100)
    await consumer.start()
    consumer.assign([AioTopicPartition(tp.topic, tp.partition) for tp in partitions])
    await consumer.seek_to_beginning()
    return consumer


async def aio_read_until(consumer, targets: dict[TopicPartition, int]) -> list:
    from aiokafka.structs import TopicPartition as AioTopicPartition

    targets = {AioTopicPartition(tp.topic, tp.partition): offset for tp, offset in targets.items()}
    received = []
    deadline = time.monotonic() + DEADLINE_S

    async def behind() -> bool:
        for tp, offset in targets.items():
            if await consumer.position(tp) < offset:
                return True
        return False

    while await behind():
        assert time.monotonic() < deadline, {tp: (await consumer.position(tp), o) for tp, o in targets.items()}
        for messages in (await consumer.getmany(timeout_ms=200)).values():
            received.extend(messages)
    return received


async def aio_end_offsets(bootstrap: str, isolation: str, partitions) -> dict[TopicPartition, int]:
    consumer = await aio_consumer(bootstrap, isolation, partitions)
    try:
        ends = await consumer.end_offsets(list(consumer.assignment()))
    finally:
        await consumer.stop()
    return {TopicPartition(tp.topic, tp.partition): offset for tp, offset in ends.items()}


async def aio_transactional(bootstrap: str, transactional_id: str):
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id)
    await producer.start()  # InitProducerId
    return producer


def test_aiokafka_commit_across_two_topics_is_seen_whole_by_read_committed(broker):
    bootstrap = broker.bootstrap_servers
    create_topics(bootstrap, TOPICS)
    sent = {tp: [f"{tp.topic}/{tp.partition}/{i}".encode() for i in range(4)] for tp in all_partitions()}

    async def scenario():
        producer = await aio_transactional(bootstrap, "aio-commit")
        try:
            async with producer.transaction():
                for tp, payloads in sent.items():
                    for value in payloads:
                        await producer.send(tp.topic, value, partition=tp.partition)
        finally:
            await producer.stop()
        ends = await aio_end_offsets(bootstrap, "read_committed", all_partitions())
        assert ends == dict.fromkeys(all_partitions(), 5)
        consumer = await aio_consumer(bootstrap, "read_committed", all_partitions())
        try:
            return await aio_read_until(consumer, dict.fromkeys(all_partitions(), 5))
        finally:
            await consumer.stop()

    received = asyncio.run(scenario())
    for tp, payloads in sent.items():
        assert [m.value for m in received if (m.topic, m.partition) == (tp.topic, tp.partition)] == payloads
    assert len(received) == 4 * len(sent)


def test_aiokafka_abort_is_invisible_to_read_committed_only(broker):
    bootstrap = broker.bootstrap_servers
    create_topics(bootstrap, TOPICS)
    ends = dict.fromkeys(all_partitions(), 4) | {TopicPartition("txn-a", 0): 6}

    async def scenario():
        producer = await aio_transactional(bootstrap, "aio-abort")
        try:
            await producer.begin_transaction()
            for tp in all_partitions():
                for i in range(3):
                    await producer.send(tp.topic, f"aborted-{tp.partition}-{i}".encode(), partition=tp.partition)
            await producer.flush()  # on the log before the abort
            await producer.abort_transaction()
            async with producer.transaction():
                await producer.send_and_wait("txn-a", b"committed-after", partition=0)
        finally:
            await producer.stop()
        assert await aio_end_offsets(bootstrap, "read_committed", all_partitions()) == ends
        seen = {}
        for isolation in ("read_committed", "read_uncommitted"):
            consumer = await aio_consumer(bootstrap, isolation, all_partitions())
            try:
                seen[isolation] = values(await aio_read_until(consumer, ends))
            finally:
                await consumer.stop()
        return seen

    seen = asyncio.run(scenario())
    assert seen["read_committed"] == [b"committed-after"]
    assert sorted(seen["read_uncommitted"]) == sorted(
        [f"aborted-{tp.partition}-{i}".encode() for tp in all_partitions() for i in range(3)] + [b"committed-after"]
    )


def test_aiokafka_open_transaction_holds_the_last_stable_offset_until_commit(broker):
    from aiokafka import AIOKafkaProducer

    bootstrap = broker.bootstrap_servers
    create_topics(bootstrap, ["lso"], partitions=1)
    tp = TopicPartition("lso", 0)

    async def scenario():
        plain = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await plain.start()
        for i in range(2):
            await plain.send_and_wait("lso", f"before-{i}".encode(), partition=0)
        await plain.stop()
        open_txn = await aio_transactional(bootstrap, "aio-open")
        other = await aio_transactional(bootstrap, "aio-other")
        consumer = None
        try:
            await open_txn.begin_transaction()
            for i in range(3):
                await open_txn.send_and_wait("lso", f"open-{i}".encode(), partition=0)
            async with other.transaction():
                for i in range(2):
                    await other.send_and_wait("lso", f"other-{i}".encode(), partition=0)

            assert await aio_end_offsets(bootstrap, "read_committed", [tp]) == {tp: 2}
            assert await aio_end_offsets(bootstrap, "read_uncommitted", [tp]) == {tp: 8}
            consumer = await aio_consumer(bootstrap, "read_committed", [tp])
            assert values(await aio_read_until(consumer, {tp: 2})) == [b"before-0", b"before-1"]
            stalled_until = time.monotonic() + 2.0
            while time.monotonic() < stalled_until:
                assert await consumer.getmany(timeout_ms=200) == {}
            assert await consumer.position(next(iter(consumer.assignment()))) == 2

            await open_txn.commit_transaction()
            after = values(await aio_read_until(consumer, {tp: 9}))
        finally:
            if consumer is not None:
                await consumer.stop()
            await open_txn.stop()
            await other.stop()
        assert after == [b"open-0", b"open-1", b"open-2", b"other-0", b"other-1"]
        assert await aio_end_offsets(bootstrap, "read_committed", [tp]) == {tp: 9}

    asyncio.run(scenario())


async def aio_fenced_zombie(bootstrap: str, transactional_id: str):
    """As kp_fenced_zombie, with aiokafka."""
    create_topics(bootstrap, ["fence"], partitions=1)
    zombie = await aio_transactional(bootstrap, transactional_id)
    await zombie.begin_transaction()
    for i in range(2):
        await zombie.send_and_wait("fence", f"zombie-{i}".encode(), partition=0)
    successor = await aio_transactional(bootstrap, transactional_id)  # aborts the zombie's transaction
    try:
        async with successor.transaction():
            await successor.send_and_wait("fence", b"successor", partition=0)
    finally:
        await successor.stop()
    return zombie


async def aio_assert_zombie_transaction_aborted(bootstrap: str) -> None:
    tp = TopicPartition("fence", 0)
    seen = {}
    for isolation in ("read_committed", "read_uncommitted"):
        consumer = await aio_consumer(bootstrap, isolation, [tp])
        try:
            seen[isolation] = values(await aio_read_until(consumer, {tp: 5}))
        finally:
            await consumer.stop()
    assert seen == {
        "read_committed": [b"successor"],
        "read_uncommitted": [b"zombie-0", b"zombie-1", b"successor"],
    }


def test_aiokafka_second_instance_fences_the_first_and_aborts_its_transaction(broker):
    from aiokafka.errors import ProducerFenced

    async def scenario():
        zombie = await aio_fenced_zombie(broker.bootstrap_servers, "aio-fence-commit")
        try:
            with pytest.raises(ProducerFenced):
                await zombie.commit_transaction()  # EndTxn with the old epoch
        finally:
            await zombie.stop()
        await aio_assert_zombie_transaction_aborted(broker.bootstrap_servers)

    asyncio.run(scenario())


def test_aiokafka_fenced_producer_send_fails_with_producer_fenced(broker):
    # Regression: see the kafka-python test of the same name.
    from aiokafka.errors import ProducerFenced

    async def scenario():
        zombie = await aio_fenced_zombie(broker.bootstrap_servers, "aio-fence-send")
        try:
            with pytest.raises(ProducerFenced):
                await zombie.send_and_wait("fence", b"zombie-late", partition=0)  # Produce with the old epoch
            with pytest.raises(ProducerFenced):
                await zombie.commit_transaction()
        finally:
            await zombie.stop()
        await aio_assert_zombie_transaction_aborted(broker.bootstrap_servers)

    asyncio.run(scenario())
