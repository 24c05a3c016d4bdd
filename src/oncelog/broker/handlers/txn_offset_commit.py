"""TxnOffsetCommit (key 28), v0-v5 (v4-v5 only with `transaction.version` finalized at 2).

- A transactional producer commits a group's offsets inside its transaction
  (sendOffsetsToTransaction, after AddOffsetsToTxn). They are appended to the group's
  `__consumer_offsets` partition as one transactional batch of the producer and stay
  pending, invisible to OffsetFetch (UNSTABLE_OFFSET_COMMIT with require_stable), until
  the COMMIT marker makes them the group's offsets; ABORT drops them.
- KIP-890 part 1 (Kafka 3.6+): the group's `__consumer_offsets` partition must be part of
  the producer's open transaction, asked of the transaction coordinator before anything
  else about the group. A late commit, whose transaction has ended or never added the
  group, gets INVALID_TXN_STATE; a fenced epoch INVALID_PRODUCER_EPOCH; an unknown
  transactional id or another producer id INVALID_PRODUCER_ID_MAPPING; a transaction whose
  markers are being written CONCURRENT_TRANSACTIONS (retriable).
- v3 (KIP-447) carries the consumer's member id, generation and group.instance.id: a
  zombie from an older generation gets ILLEGAL_GENERATION, an unknown member
  UNKNOWN_MEMBER_ID, a fenced static member FENCED_INSTANCE_ID. A group that does not
  exist: ILLEGAL_GENERATION with a generation, created (as a simple group) without one.
  v0-v2 are not checked.
- v4 (KIP-890): a commit whose transaction has not added the group gets
  TRANSACTION_ABORTABLE instead of INVALID_TXN_STATE, as Kafka answers v4.
- v5 (KIP-890 part 2, a transaction version 2 client, which sends no AddOffsetsToTxn):
  the group's `__consumer_offsets` partition is added to the producer's transaction here,
  after the same producer id and epoch checks (Ongoing, persisted); as the epoch is
  bumped at the end of every transaction, a late commit of an earlier transaction gets
  INVALID_PRODUCER_EPOCH instead of joining the next one.
- Cluster mode, the transactional id coordinated by another broker: that coordinator is
  asked in an AddPartitionsToTxn v5 (verify_only, or the add of v5) unless the
  producer's transaction is already open on the group's partition here, with the same
  answers; a coordinator that moved or is loading answers NOT_COORDINATOR /
  COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS, one that does not answer
  COORDINATOR_LOAD_IN_PROGRESS, all retried (Kafka's group coordinator's translation).
- Deviation: Kafka offers v4 and v5 whatever the feature level; oncelog offers them only
  at transaction.version 2, so a broker at level 0 or 1 answers as before.
- INVALID_PRODUCER_EPOCH for an epoch older than the one the offsets partition has seen.
- Per partition: UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist,
  OFFSET_METADATA_TOO_LARGE above offset.metadata.max.bytes.
- Answered once the offsets are on the ISR of the group's `__consumer_offsets`
  partition (and, for v5, the transaction's new partition on the ISR of its
  `__transaction_state` partition), acks=all as Kafka's; in cluster mode, when they are
  not, NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE. A group coordinated by another
  broker gets NOT_COORDINATOR before the transaction is looked at.
- Authorization (with an authorizer), before anything else, as Kafka's KafkaApis: WRITE
  on the transactional id, else every partition gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
  then READ on the group, else every partition GROUP_AUTHORIZATION_FAILED; then READ on
  each topic, else its partitions get TOPIC_AUTHORIZATION_FAILED (asked before whether
  they exist) while the others are committed.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._groups import group_coordinator, once_replicated, split_offsets
from oncelog.broker.handlers._txn import once_replicated as once_txn_replicated
from oncelog.clock import now_ms
from oncelog.kernel.internal_topics import CONSUMER_OFFSETS
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType

FIRST_TRANSACTION_ABORTABLE_VERSION = 4
FIRST_IMPLICIT_ADD_VERSION = 5  # KIP-890 part 2


@api(28, "TxnOffsetCommit", range(0, 6), first_transaction_v2_version=FIRST_TRANSACTION_ABORTABLE_VERSION)
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    coordinator = group_coordinator(ctx)
    denied = _authorization_error(ctx, request)
    if denied is not None:
        offsets = {}
        errors = {(t.name, p.partition_index): denied
                  async for t in ctx.paced(request.topics) async for p in ctx.paced(t.partitions)}
    else:
        offsets, errors = await split_offsets(ctx, request, coordinator, group_id_required=True)
        named = {t.name async for t in ctx.paced(request.topics)}
        unreadable = {name async for name in ctx.paced(named)
                      if not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, name)}
        if unreadable:
            async for key in ctx.paced([*offsets, *errors]):
                if key[0] in unreadable:
                    offsets.pop(key, None)
                    errors[key] = ErrorCode.topic_authorization_failed
    if offsets:
        refusal = coordinator.owner_error(request.group_id)
        if refusal is ErrorCode.none:
            refusal = await _verify_transaction(ctx, request, coordinator)
        if refusal is not ErrorCode.none:
            errors.update(dict.fromkeys(offsets, refusal))
        else:
            results = coordinator.txn_offset_commit(
                request.group_id,
                request.producer_id,
                request.producer_epoch,
                getattr(request, "member_id", ""),
                getattr(request, "generation_id", -1),
                getattr(request, "group_instance_id", None),
                offsets,
            )
            errors.update(await once_replicated(coordinator, request.group_id, results))
    topics = tuple([
        make(
            "TxnOffsetCommitResponseTopic",
            name=topic.name,
            partitions=tuple([
                make("TxnOffsetCommitResponsePartition", partition_index=p.partition_index,
                     error_code=errors[(topic.name, p.partition_index)])
                async for p in ctx.paced(topic.partitions)
            ]),
        )
        async for topic in ctx.paced(request.topics)
    ])
    return make("TxnOffsetCommitResponse", throttle_time=NO_THROTTLE, topics=topics)


def _authorization_error(ctx: RequestContext, request) -> ErrorCode | None:
    """The error of every partition when the transactional id or the group is refused
    (producer id authorization is implied by the transactional id's, as in Kafka)."""
    if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return ErrorCode.transactional_id_authorization_failed
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ErrorCode.group_authorization_failed
    return None


async def _verify_transaction(ctx: RequestContext, request, coordinator) -> ErrorCode:
    """KIP-890 part 1, as for transactional Produce: offsets are written only into an
    Ongoing transaction that added the group (AddOffsetsToTxn), so a TxnOffsetCommit
    arriving after its transaction ended cannot leave offsets pending with no marker to
    come, nor slip into the producer's next transaction."""
    transactions = ctx.broker.txn_coordinator
    if transactions is None:
        return ErrorCode.none
    offsets_partition = (CONSUMER_OFFSETS, coordinator.partition_for_group(request.group_id))
    if transactions.owner_error(request.transactional_id) is not ErrorCode.none:
        return await _verify_with_remote_coordinator(ctx, request, transactions.verification, offsets_partition)
    if ctx.version >= FIRST_IMPLICIT_ADD_VERSION:
        error = transactions.add_partitions(
            request.transactional_id, request.producer_id, request.producer_epoch, {offsets_partition}, now_ms(),
            transaction_version=2,
        )
        error = await once_txn_replicated(ctx, request.transactional_id, error)
    else:
        error = transactions.verify_partition(
            request.transactional_id, request.producer_id, request.producer_epoch, offsets_partition
        )
        if error is ErrorCode.invalid_txn_state and ctx.version >= FIRST_TRANSACTION_ABORTABLE_VERSION:
            error = ErrorCode.transaction_abortable  # the coordinator's own answer, which v4+ knows
    # Kafka's broker hands the coordinator's answer on, except PRODUCER_FENCED: producers
    # expect INVALID_PRODUCER_EPOCH here (AddPartitionsToTxnManager).
    return ErrorCode.invalid_producer_epoch if error is ErrorCode.producer_fenced else error


async def _verify_with_remote_coordinator(ctx: RequestContext, request, verifier, offsets_partition) -> ErrorCode:
    """Cluster mode, the transaction coordinator on another broker: ask it in an
    AddPartitionsToTxn v5 (verify_only, or the add of v5) unless the producer's
    transaction is open on the offsets partition already, as Kafka's group coordinator
    does through its AddPartitionsToTxnManager. Its answers are translated as Kafka's
    group coordinator does: no answer is COORDINATOR_LOAD_IN_PROGRESS (retried)."""
    topic, partition = offsets_partition
    producer_id, producer_epoch = request.producer_id, request.producer_epoch
    code, leader_epoch = ctx.broker.leadership.leader_epoch(topic, partition)
    if code is not ErrorCode.none:
        return ErrorCode.not_coordinator  # the group's partition is not led here (any more)
    if not verifier.needs_verification(topic, partition, producer_id, producer_epoch):
        return ErrorCode.none
    guard = verifier.guard(topic, partition, producer_id, leader_epoch)
    adding = ctx.version >= FIRST_IMPLICIT_ADD_VERSION
    codes = await verifier.verify(request.transactional_id, producer_id, producer_epoch, {offsets_partition},
                                  verify_only=not adding)
    error = codes[offsets_partition]
    if error is ErrorCode.none:
        _, leader_epoch = ctx.broker.leadership.leader_epoch(topic, partition)
        if verifier.holds(topic, partition, producer_id, producer_epoch, guard, leader_epoch):
            return ErrorCode.none
        error = ErrorCode.transaction_abortable  # it ended (its marker landed) while being verified
    else:
        verifier.drop(topic, partition, producer_id, guard)
    if error is ErrorCode.network_exception:
        return ErrorCode.coordinator_load_in_progress
    if error is ErrorCode.transaction_abortable and ctx.version < FIRST_TRANSACTION_ABORTABLE_VERSION:
        return ErrorCode.invalid_txn_state
    return ErrorCode.invalid_producer_epoch if error is ErrorCode.producer_fenced else error
