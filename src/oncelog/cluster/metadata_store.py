"""Every write to the cluster metadata, each one etcd transaction guarded by a compare.

This is what Kafka's controller does with its metadata log, done as compare-and-swap
on etcd keys instead (docs/cluster-design.md, "Metadata in etcd"):

- a topic is created with all its partitions in one transaction, under the compare
  "the topic key does not exist";
- a partition changes (ISR shrink or expand, leader election) under the compare "its
  key is still at the revision the writer read", Kafka's partition epoch check;
- writes made on behalf of the active controller also compare the controller key's
  create revision, so a deposed controller cannot write.

A write whose answer timed out may or may not have happened (etcd's indeterminate
outcome); every write here is a CAS that re-reads before retrying, so a retry is safe.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence

from oncelog.cluster.etcd import Compare, EtcdClient, EtcdUnavailable, LeaseNotFound, Op
from oncelog.cluster.image import BrokerRegistration, Keys, PartitionRecord, TopicRecord, decode_controller

log = logging.getLogger("oncelog.cluster.store")

PRODUCER_ID_BLOCK_SIZE = 1000
CAS_ATTEMPTS = 20
BATCH_PARTITIONS = 1000  # partition writes in one transaction (the members allow 10,000 ops)


class MetadataConflict(Exception):
    """A compare failed: what the write was based on has changed."""


class MetadataStore:
    def __init__(self, client: EtcdClient, keys: Keys) -> None:
        self.client = client
        self.keys = keys

    # ---- brokers and the controller ----------------------------------------------------

    async def register_broker(self, registration: BrokerRegistration, lease: int) -> int:
        """Put this broker's registration under its session lease. Returns the broker
        epoch: the create revision of the key, new for every registration."""
        key = self.keys.broker(registration.node_id)
        # A previous incarnation that was killed left its session lease behind, holding
        # its registration and, if it was the active controller, the controller key,
        # until the lease expires (etcd restarts the countdown when its quorum re-forms).
        # Revoking it fences that incarnation at once, so the cluster gets a controller
        # and its leaders back without waiting out broker.session.timeout.ms.
        for previous in (await self.client.range(key)).kvs:
            if previous.lease and previous.lease != lease:
                try:
                    await self.client.lease_revoke(previous.lease)
                except LeaseNotFound:
                    pass
        await self.client.delete(key)  # a previous incarnation's key: a new epoch is made below
        result = await self.client.txn(
            [Compare.create_revision(key, "=", 0)], [Op.put(key, registration.encode(), lease=lease)]
        )
        if not result.succeeded:
            raise MetadataConflict(f"broker {registration.node_id} registered twice at once")
        return result.revision

    async def campaign(self, node_id: int, lease: int) -> int | None:
        """Become the active controller if there is none: the create revision of the
        controller key when this node holds it, else None.

        A controller key this node already put under the same lease is its own: it
        counts as won, with that key's create revision. A node that dropped its won
        revision (its image had not yet shown it the key when the controller loop looked)
        would otherwise fail every campaign against its own key and elect nothing until
        its lease went."""
        key = self.keys.controller
        result = await self.client.txn(
            [Compare.create_revision(key, "=", 0)],
            [Op.put(key, json.dumps({"v": 1, "node_id": node_id}).encode(), lease=lease)],
            [Op.range(key)],
        )
        if result.succeeded:
            return result.revision
        held = result.responses[0] if result.responses else []
        if held and held[0].lease == lease and decode_controller(held[0]) == node_id:
            return held[0].create_revision
        return None

    # ---- topics --------------------------------------------------------------------------

    async def create_topic(self, topic: TopicRecord, assignment: Sequence[Sequence[int]]) -> int:
        """Create the topic and its partitions (leader: the first replica). Raises
        MetadataConflict when the topic exists. Returns the revision of the write."""
        partitions = [
            PartitionRecord(topic.name, index, tuple(replicas), tuple(replicas), replicas[0], 0, 0)
            for index, replicas in enumerate(assignment)
        ]
        ops = [Op.put(self.keys.topic(topic.name), topic.encode())]
        ops += [Op.put(self.keys.partition(topic.name, p.partition), p.encode()) for p in partitions]
        result = await self.client.txn([Compare.create_revision(self.keys.topic(topic.name), "=", 0)], ops)
        if not result.succeeded:
            raise MetadataConflict(f"topic {topic.name} already exists")
        return result.revision

    async def create_partitions(self, topic: TopicRecord, topic_revision: int, first: int,
                                assignment: Sequence[Sequence[int]]) -> int:
        grown = TopicRecord(topic.name, topic.topic_id, topic.partitions + len(assignment), topic.configs)
        ops = [Op.put(self.keys.topic(topic.name), grown.encode())]
        ops += [
            Op.put(self.keys.partition(topic.name, first + i),
                   PartitionRecord(topic.name, first + i, tuple(r), tuple(r), r[0], 0, 0).encode())
            for i, r in enumerate(assignment)
        ]
        result = await self.client.txn([Compare.mod_revision(self.keys.topic(topic.name), "=", topic_revision)], ops)
        if not result.succeeded:
            raise MetadataConflict(f"topic {topic.name} changed meanwhile")
        return result.revision

    async def alter_topic_configs(self, topic: TopicRecord, topic_revision: int, configs: Mapping[str, str]) -> int:
        changed = TopicRecord(topic.name, topic.topic_id, topic.partitions, dict(configs))
        result = await self.client.txn([Compare.mod_revision(self.keys.topic(topic.name), "=", topic_revision)],
                                       [Op.put(self.keys.topic(topic.name), changed.encode())])
        if not result.succeeded:
            raise MetadataConflict(f"topic {topic.name} changed meanwhile")
        return result.revision

    async def delete_topic(self, name: str, topic_id: uuid.UUID) -> int:
        key = self.keys.topic(name)
        current = await self.client.get(key)
        if current is None or TopicRecord.decode(current).topic_id != topic_id:
            raise MetadataConflict(f"topic {name} is gone or was recreated")
        result = await self.client.txn(
            [Compare.mod_revision(key, "=", current.mod_revision)],
            [Op.delete(key), Op.delete(self.keys.partitions_prefix(name), prefix=True)],
        )
        if not result.succeeded:
            raise MetadataConflict(f"topic {name} changed meanwhile")
        return result.revision

    # ---- partitions ----------------------------------------------------------------------

    async def change_partition(self, partition: PartitionRecord,
                               change: Callable[[PartitionRecord], PartitionRecord | None], *,
                               controller_revision: int | None = None) -> PartitionRecord | None:
        """Apply `change` (which must bump the partition epoch) to the partition as
        stored, retrying on conflicts with a fresh read: the stored record after the
        write, or None when `change` found nothing to do or the partition is gone."""
        key = self.keys.partition(partition.topic, partition.partition)
        current = partition
        for _ in range(CAS_ATTEMPTS):
            changed = change(current)
            if changed is None:
                return None
            compares = [Compare.mod_revision(key, "=", current.mod_revision)]
            if controller_revision is not None:
                compares.append(Compare.create_revision(self.keys.controller, "=", controller_revision))
            result = await self.client.txn(compares, [Op.put(key, changed.encode())], [Op.range(key)])
            if result.succeeded:
                return PartitionRecord(changed.topic, changed.partition, changed.replicas, changed.isr,
                                       changed.leader, changed.leader_epoch, changed.partition_epoch,
                                       result.revision)
            kvs = result.responses[0] if result.responses else []
            if not kvs:
                return None
            if controller_revision is not None:
                controller = await self.client.get(self.keys.controller)
                if controller is None or controller.create_revision != controller_revision:
                    raise MetadataConflict("no longer the active controller")
            current = PartitionRecord.decode(kvs[0])
        raise MetadataConflict(f"{partition.topic}-{partition.partition} kept changing")

    async def change_partitions(self, changes: Sequence[tuple[PartitionRecord, PartitionRecord]], *,
                                controller_revision: int) -> list[PartitionRecord]:
        """Write every change at once, as Kafka's controller fences a broker with one batch
        of records: each (as read, changed) pair under the compare that the partition is
        still as read, and all of them under the controller's key, in transactions of up
        to `BATCH_PARTITIONS`, in order. The stored records of the transactions that
        succeeded, up to the first whose compares failed (which wrote nothing): fewer
        than `changes` when the caller must go on partition by partition."""
        stored: list[PartitionRecord] = []
        for start in range(0, len(changes), BATCH_PARTITIONS):
            batch = changes[start:start + BATCH_PARTITIONS]
            compares = [Compare.mod_revision(self.keys.partition(read.topic, read.partition), "=", read.mod_revision)
                        for read, _ in batch]
            compares.append(Compare.create_revision(self.keys.controller, "=", controller_revision))
            result = await self.client.txn(
                compares, [Op.put(self.keys.partition(changed.topic, changed.partition), changed.encode())
                           for _, changed in batch])
            if not result.succeeded:
                break
            stored += [dataclasses.replace(changed, mod_revision=result.revision) for _, changed in batch]
        return stored

    # ---- producer ids ---------------------------------------------------------------------

    async def allocate_producer_id_block(self, block_size: int = PRODUCER_ID_BLOCK_SIZE) -> int:
        """Reserve the next block of producer ids for this broker (Kafka's
        ProducerIdControlManager): the first id of a block no other broker ever gets."""
        key = self.keys.producer_id_block
        for _ in range(CAS_ATTEMPTS * 5):
            current = await self.client.get(key)
            start = json.loads(current.value)["next_block_start"] if current else 0
            compare = (Compare.mod_revision(key, "=", current.mod_revision) if current
                       else Compare.create_revision(key, "=", 0))
            value = json.dumps({"v": 1, "next_block_start": start + block_size}).encode()
            try:
                result = await self.client.txn([compare], [Op.put(key, value)])
            except EtcdUnavailable:
                await asyncio.sleep(0.1)
                continue  # indeterminate: re-read; at worst a block is skipped, never reused
            if result.succeeded:
                return start
        raise MetadataConflict("could not reserve a producer id block")
