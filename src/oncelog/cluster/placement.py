"""Where replicas go and who leads: the decisions, without the writes.

- `place_replicas`: Kafka's rack-unaware assignment (AdminUtils): the first replica of each
  partition round-robin from a random broker, the others at an increasing shift, so
  leaders spread over the brokers and each broker's followers spread over the others.
- `check_assignment`: the checks Kafka's controller makes on an explicit assignment
  (ReplicationControlManager.validateManualPartitionAssignment), with its messages.
- `elect_leader` / `elect_on_return`: the partition change the active controller writes
  when brokers go away or come back (PartitionChangeBuilder, ONLINE election, no ELR and no
  unclean election): the leader comes only from the ISR, and the ISR never becomes empty.
- `election_order`: which partitions to change, ISRs before leaderships.
- `elect_preferred` / `imbalanced_partitions`: a PREFERRED election (ElectLeaders, and the
  controller's automatic leader rebalance): leadership goes back to the first replica when
  it is live and in the ISR, for the brokers whose share of preferred leaderships held
  elsewhere is above `leader.imbalance.per.broker.percentage`.
- `alter_isr`: the ISR change a partition's leader writes (AlterPartition's checks).

Deviation: no racks (oncelog brokers have no `broker.rack`).
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

from oncelog.cluster.image import NO_LEADER, PartitionRecord


class InvalidReplicationFactor(ValueError):
    """The replication factor cannot be placed; the message is Kafka's (answer
    INVALID_REPLICATION_FACTOR with it)."""


def _unable(replication_factor: int, reason: str) -> InvalidReplicationFactor:
    # Kafka's controller prefixes the placer's reason with this sentence.
    return InvalidReplicationFactor(
        f"Unable to replicate the partition {replication_factor} time(s): {reason}"
    )


def place_replicas(
    broker_ids: Sequence[int],
    num_partitions: int,
    replication_factor: int,
    *,
    start_partition: int = 0,
    fixed_start_index: int | None = None,
    rng: random.Random | None = None,
) -> list[list[int]]:
    """Replica lists for partitions `start_partition .. start_partition + num_partitions - 1`
    (element i is partition start_partition + i), first replica = preferred leader.

    The start index and the replica shift are drawn from `rng` (Kafka draws both at random)
    unless `fixed_start_index` is given, which fixes both as Kafka's `fixedStartIndex` does.
    Brokers are taken in id order, so the result depends only on the ids and the rng."""
    if replication_factor < 1:
        raise _unable(
            replication_factor,
            f"Invalid replication factor {replication_factor}: the replication factor must be positive.",
        )
    brokers = sorted(set(broker_ids))
    if replication_factor > len(brokers):
        raise _unable(
            replication_factor,
            f"The target replication factor of {replication_factor} cannot be reached because only "
            f"{len(brokers)} broker(s) are registered.",
        )
    if num_partitions < 1:
        raise ValueError(f"cannot place {num_partitions} partitions")
    if start_partition < 0:
        raise ValueError(f"partitions start at 0, not {start_partition}")
    count = len(brokers)
    if fixed_start_index is not None:
        start_index = replica_shift = fixed_start_index
    else:
        rng = rng or random.Random()
        start_index = rng.randrange(count)
        replica_shift = rng.randrange(count)
    assignment: list[list[int]] = []
    for partition in range(start_partition, start_partition + num_partitions):
        # Each full round over the brokers moves the followers one step further, so the
        # same leader does not always get the same followers.
        if partition > 0 and partition % count == 0:
            replica_shift += 1
        first = (partition + start_index) % count
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            replicas.append(brokers[_follower_index(first, replica_shift, j, count)])
        assignment.append(replicas)
    return assignment


def _follower_index(first: int, shift: int, j: int, count: int) -> int:
    # 1 + (...) % (count - 1) is never 0 nor count: a follower is never the leader's broker.
    return (first + 1 + (shift + j) % (count - 1)) % count


def check_assignment(
    assignment: Mapping[int, Sequence[int]],
    broker_ids: Collection[int],
    *,
    replication_factor: int | None = None,
    first_partition: int = 0,
) -> str | None:
    """Kafka's error message for an explicit assignment (partition -> replicas), or None
    when it is acceptable (answer INVALID_REPLICA_ASSIGNMENT with the message).

    `replication_factor` is the existing topic's, for CreatePartitions; otherwise the first
    partition's size sets it. The partitions must be `first_partition, first_partition + 1, ...`."""
    registered = set(broker_ids)
    expected_size = replication_factor
    for replicas in assignment.values():
        if not replicas:
            return "The manual partition assignment includes an empty replica list."
        previous = None
        for broker_id in sorted(replicas):
            if broker_id not in registered:
                return f"The manual partition assignment includes broker {broker_id}, but no such broker is registered."
            if broker_id == previous:
                return f"The manual partition assignment includes the broker {broker_id} more than once."
            previous = broker_id
        if expected_size is not None and len(replicas) != expected_size:
            return (
                f"The manual partition assignment includes a partition with {len(replicas)} replica(s), but this "
                f"is not consistent with previous partitions, which have {expected_size} replica(s)."
            )
        expected_size = len(replicas)
    if set(assignment) != set(range(first_partition, first_partition + len(assignment))):
        return "partitions should be a consecutive 0-based integer sequence"
    return None


def elect_leader(partition: PartitionRecord, live: Collection[int]) -> PartitionRecord | None:
    """The partition after the brokers outside `live` are gone, or None if that changes
    nothing. The dead leave the ISR, except that the ISR never becomes empty: when every
    member is dead, the last one stays (the leader, if it was a member) and the leader is
    -1, so only that replica, which holds every committed offset, can lead again. A live
    leader still in the ISR keeps leading; otherwise the first replica, in replica order,
    that is live and in the ISR leads. A new leader bumps the leader epoch; any change
    bumps the partition epoch."""
    live = set(live)
    isr = tuple(r for r in partition.isr if r in live)
    if not isr and partition.isr:
        isr = (partition.leader,) if partition.leader in partition.isr else partition.isr[-1:]
    leader = partition.leader
    if not (leader in isr and leader in live):
        leader = next((r for r in partition.replicas if r in isr and r in live), NO_LEADER)
    if isr == partition.isr and leader == partition.leader:
        return None
    return replace(
        partition,
        isr=isr,
        leader=leader,
        leader_epoch=partition.leader_epoch + (1 if leader != partition.leader else 0),
        partition_epoch=partition.partition_epoch + 1,
    )


def election_order(partitions: Collection[PartitionRecord], live: Collection[int]) -> list[PartitionRecord]:
    """The partitions the controller may have to change for `live`, those whose leader
    stays first. Kafka's controller fences a broker with one batch of metadata records
    (the ISR shrinks and the leader changes together), which each broker applies as one
    unit; oncelog's controller writes them in one etcd transaction, which each broker's
    watch delivers as one revision (`MetadataStore.change_partitions`). When that write
    meets a change it did not read, it goes partition by partition, and this order stands
    in for the batch: in the store's order, the dead are out of every ISR a live leader
    keeps before any leadership moves, a transaction coordinator's included. Otherwise a
    stalled replica that comes back could, with a dead one still counted, make an ISR
    look as large as min.insync.replicas, and a new coordinator's markers (or acks=all
    writes) would pass where the live replicas alone would be refused. Leaders do not
    write a dead broker back (`alter_isr`). As in Kafka, each broker still applies the
    changes at its own pace."""
    live = set(live)
    stays = [r for r in partitions if r.leader in live and any(m not in live for m in r.isr)]
    moves = [r for r in partitions if r.leader not in live]
    return stays + moves


def alter_isr(current: PartitionRecord, known: PartitionRecord, leader: int,
              new_isr: tuple[int, ...]) -> PartitionRecord | None:
    """The partition with the ISR its leader asks for, or None when it must not be
    written. Kafka's AlterPartition checks: only the leader of the leader epoch it knows
    may change the ISR, and only from the partition epoch it knows (INVALID_UPDATE_VERSION
    otherwise). `known` is the leader's view; `current` is the partition as stored, read
    again after a conflict. A leader that had not yet seen the controller take a fenced
    broker out of the ISR would otherwise write it back in; it tries again once it has."""
    if (current.leader != leader or current.leader_epoch != known.leader_epoch
            or current.partition_epoch != known.partition_epoch or current.isr == new_isr):
        return None
    return replace(current, isr=new_isr, partition_epoch=current.partition_epoch + 1)


def elect_on_return(partition: PartitionRecord, live: Collection[int]) -> PartitionRecord | None:
    """A leaderless partition when brokers come back: its remaining ISR member leads again
    if it is live. Replicas outside the ISR never lead (no unclean election)."""
    if partition.leader != NO_LEADER:
        return None
    return elect_leader(partition, live)


def preferred_replica(partition: PartitionRecord) -> int:
    return partition.replicas[0] if partition.replicas else NO_LEADER


def elect_preferred(partition: PartitionRecord, live: Collection[int]) -> PartitionRecord | None:
    """The partition led by its preferred replica, or None when that is not possible or
    not needed: the preferred replica must be live and in the ISR, and not lead already.
    The ISR does not change; the leader epoch and the partition epoch go up."""
    preferred = preferred_replica(partition)
    if preferred == partition.leader or preferred not in live or preferred not in partition.isr:
        return None
    return replace(partition, leader=preferred, leader_epoch=partition.leader_epoch + 1,
                   partition_epoch=partition.partition_epoch + 1)


def imbalanced_partitions(partitions: Collection[PartitionRecord], live: Collection[int],
                          max_imbalance_percentage: int) -> list[PartitionRecord]:
    """The partitions the automatic leader rebalance moves (Kafka's
    checkAndTriggerAutoLeaderRebalance): for each broker, the share of the partitions it
    is the preferred replica of that another replica leads; where that share is above
    `max_imbalance_percentage`, every one of them a preferred election can move now."""
    preferred_of: dict[int, list[PartitionRecord]] = {}
    for record in partitions:
        preferred_of.setdefault(preferred_replica(record), []).append(record)
    moves: list[PartitionRecord] = []
    for broker, records in sorted(preferred_of.items()):
        if broker == NO_LEADER:
            continue
        elsewhere = [record for record in records if record.leader != broker]
        if len(elsewhere) * 100 > max_imbalance_percentage * len(records):
            moves.extend(record for record in elsewhere if elect_preferred(record, live) is not None)
    return moves
