"""The history checker: Kafka's consistency anomalies (the Jepsen taxonomy) in a History.

    report = check(history)
    assert report.ok, report.summary()

Each rule below names what it proves and what it reads. Terms:

- A *final read* is one client's polls of one partition from offset 0 to the end offset
  taken when the read began (a ReadComplete says the client got there). Reads by
  different clients are different final reads; the rules check each of them.
- A transaction is (transactional id, txn seq). Its *effective outcome*:
  1. the last definitive TxnOutcome ("commit" or "abort") recorded for it; else
  2. "commit" when a final read_committed read shows any of its records; else
  3. "abort" when a final read_committed read that covers one of its partitions began
     after the transaction's last recorded event, and shows none of its records
     (the transaction is *proven aborted*: final reads are taken after every writer
     stopped and every transaction ended or timed out); else
  4. "unknown": nothing is concluded about it.
- A poll is *attributed* to the sends of its value in its topic and partition: the
  send acknowledged at the polled offset if there is one, else all of them. Values no
  send produced (untracked writers) are left out of the rules that need a send.

Rules:

- lost write: an acknowledged send (acked_offset set, no error) that a final read of
  its partition does not show, although the read had to: the send was acknowledged
  before the read began (or at an offset below its end offset), and, if transactional,
  its transaction committed (recorded commit before the read began, or inferred).
  For transactions, only a committed transaction whose records the read shows *none*
  of is a lost write (every send of it is reported); some-but-not-all is torn.
- duplicate: one value at two or more (partition, offset) positions of one topic, as
  polls saw it. read_uncommitted polls of values that were only ever sent in
  transactions are left out: such a reader legitimately sees an aborted attempt and
  its committed retry.
- inconsistent offsets: one (topic, partition, offset) polled with different values.
- aborted read: a read_committed poll whose attributed transactions all have a
  recorded "abort" as their last definitive outcome.
- uncommitted read: a read_committed poll of a transactional value that
  (a) is attributed only to transactions proven aborted by the final reads, with no
      abort recorded by the client (an "unknown" or missing outcome counts only once
      it is proven aborted), or
  (b) was polled before any of its committed transactions requested its commit
      (poll.time < the earliest requested_time of its commit/unknown TxnOutcomes):
      the broker served it before the client had even asked to commit it.
- non-monotonic offsets: one client's polls of one partition, in recording order,
  repeat or go back with no Seek of that partition by that client in between.
- torn transaction: a committed transaction some, but not all, of whose expected
  sends (as for lost writes) a final read shows. Final reads of either isolation are
  checked: a committed transaction's records are all in the log.
- acked offset mismatch: a send acknowledged at offset O whose value was polled in its
  partition but never at O, at an offset no other send of that value was acknowledged at.
  (Polled at O *and* elsewhere is a duplicate, not a mismatch.)
- group offsets not atomic with output (consume-transform-produce): for each final
  GroupOffsetObservation C of a group's input partition,
  * C must be the largest offset committed for it by a committed transaction (or a
    plain commit), or one committed by a transaction whose outcome is unknown;
  * every input record polled below C must have each of its Transform outputs visible
    exactly once in every final read_committed read covering the output's partitions,
    and an input below C with no Transform at all was skipped;
  * no output of an input record at or above C may be visible in such a read.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from oncelog.chaos.history import (
    GroupOffsetCommit,
    GroupOffsetObservation,
    History,
    Operation,
    Poll,
    ReadComplete,
    Seek,
    Send,
    Transform,
    TxnOutcome,
)
from oncelog.names import TopicPartition

TxnKey = tuple[str, int]

ANOMALY_KINDS: tuple[str, ...] = (
    "lost_write",
    "duplicate",
    "inconsistent_offsets",
    "aborted_read",
    "uncommitted_read",
    "non_monotonic_offsets",
    "torn_transaction",
    "acked_offset_mismatch",
    "group_offsets_not_atomic",
)


@dataclass(frozen=True, slots=True)
class Anomaly:
    kind: str
    description: str
    records: tuple[Operation, ...]

    def __str__(self) -> str:
        return f"{self.kind}: {self.description}"


@dataclass(slots=True)
class Report:
    lost_writes: list[Anomaly] = field(default_factory=list)
    duplicates: list[Anomaly] = field(default_factory=list)
    inconsistent_offsets: list[Anomaly] = field(default_factory=list)
    aborted_reads: list[Anomaly] = field(default_factory=list)
    uncommitted_reads: list[Anomaly] = field(default_factory=list)
    non_monotonic_offsets: list[Anomaly] = field(default_factory=list)
    torn_transactions: list[Anomaly] = field(default_factory=list)
    acked_offset_mismatches: list[Anomaly] = field(default_factory=list)
    group_offsets_not_atomic: list[Anomaly] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)

    def anomalies(self) -> dict[str, list[Anomaly]]:
        """Every anomaly list by kind (ANOMALY_KINDS order)."""
        return {kind: getattr(self, _FIELD_OF_KIND[kind]) for kind in ANOMALY_KINDS}

    def found(self) -> dict[str, int]:
        """Counts of the kinds that occurred."""
        return {kind: len(found) for kind, found in self.anomalies().items() if found}

    @property
    def ok(self) -> bool:
        return not any(self.anomalies().values())

    def summary(self, examples: int = 3) -> str:
        s = self.stats
        lines = [
            (f"operations={s.get('operations', 0)} sends={s.get('sends', 0)} acked={s.get('acked', 0)} "
             f"failed={s.get('failed', 0)} txns committed={s.get('committed_txns', 0)} "
             f"aborted={s.get('aborted_txns', 0)} unknown={s.get('unknown_txns', 0)} "
             f"reads={s.get('reads', 0)} final_partition_reads={s.get('final_partition_reads', 0)}"),
            " ".join(f"{kind}={len(found)}" for kind, found in self.anomalies().items()),
        ]
        for found in self.anomalies().values():
            lines += [f"  {anomaly}" for anomaly in found[:examples]]
        lines.append("verdict: OK" if self.ok else f"verdict: {sum(self.found().values())} ANOMALIES")
        return "\n".join(lines)

    def _add(self, kind: str, description: str, records: Iterable[Operation]) -> None:
        getattr(self, _FIELD_OF_KIND[kind]).append(Anomaly(kind, description, tuple(records)))


_FIELD_OF_KIND = {
    "lost_write": "lost_writes",
    "duplicate": "duplicates",
    "inconsistent_offsets": "inconsistent_offsets",
    "aborted_read": "aborted_reads",
    "uncommitted_read": "uncommitted_reads",
    "non_monotonic_offsets": "non_monotonic_offsets",
    "torn_transaction": "torn_transactions",
    "acked_offset_mismatch": "acked_offset_mismatches",
    "group_offsets_not_atomic": "group_offsets_not_atomic",
}


@dataclass(slots=True)
class FinalRead:
    """One client's complete reads (one or more partitions, one isolation)."""

    client: str
    isolation: str
    completions: dict[TopicPartition, ReadComplete] = field(default_factory=dict)
    # partition -> value -> the polls that saw it
    seen: dict[TopicPartition, dict[str | None, list[Poll]]] = field(default_factory=dict)

    def covers(self, tp: TopicPartition) -> bool:
        return tp in self.completions

    def polls_of(self, tp: TopicPartition, value: str | None) -> list[Poll]:
        return self.seen.get(tp, {}).get(value, [])


def _tp(op) -> TopicPartition:
    return (op.topic, op.partition)


def _txn(send: Send) -> TxnKey | None:
    if send.txn_id is None or send.txn_seq is None:
        return None
    return (send.txn_id, send.txn_seq)


def _acked(send: Send) -> bool:
    return send.acked_offset is not None and send.error is None


class _History:
    """Indexes over one history, built once."""

    def __init__(self, operations: list[Operation]) -> None:
        self.operations = operations
        self.sends: list[Send] = []
        self.polls: list[Poll] = []
        self.sends_by_value: dict[str, list[Send]] = defaultdict(list)
        self.sends_by_tp: dict[TopicPartition, list[Send]] = defaultdict(list)
        self.txn_sends: dict[TxnKey, list[Send]] = defaultdict(list)
        self.txn_outcomes: dict[TxnKey, list[TxnOutcome]] = defaultdict(list)
        self.offset_commits: dict[tuple[str, str, int], list[GroupOffsetCommit]] = defaultdict(list)
        self.observations: list[GroupOffsetObservation] = []
        self.transforms: dict[str, list[Transform]] = defaultdict(list)
        completions: list[ReadComplete] = []
        for op in operations:
            if isinstance(op, Send):
                self.sends.append(op)
                self.sends_by_value[op.value].append(op)
                self.sends_by_tp[_tp(op)].append(op)
                key = _txn(op)
                if key is not None:
                    self.txn_sends[key].append(op)
            elif isinstance(op, Poll):
                self.polls.append(op)
            elif isinstance(op, TxnOutcome):
                self.txn_outcomes[(op.transactional_id, op.txn_seq)].append(op)
            elif isinstance(op, ReadComplete):
                completions.append(op)
            elif isinstance(op, GroupOffsetCommit):
                self.offset_commits[(op.group, op.topic, op.partition)].append(op)
            elif isinstance(op, GroupOffsetObservation):
                self.observations.append(op)
            elif isinstance(op, Transform):
                self.transforms[op.input_value].append(op)
        self.final_reads = self._final_reads(completions)
        self._outcome_cache: dict[TxnKey, tuple[str, bool]] = {}

    def _final_reads(self, completions: list[ReadComplete]) -> list[FinalRead]:
        reads: dict[str, FinalRead] = {}
        for done in completions:
            read = reads.setdefault(done.client, FinalRead(done.client, done.isolation))
            read.completions[_tp(done)] = done
            read.seen.setdefault(_tp(done), {})
        for poll in self.polls:
            reader = reads.get(poll.client)
            if reader is not None and reader.covers(_tp(poll)):
                reader.seen[_tp(poll)].setdefault(poll.value, []).append(poll)
        return list(reads.values())

    def final_reads_of(self, isolation: str | None = None) -> list[FinalRead]:
        return [r for r in self.final_reads if isolation is None or r.isolation == isolation]

    # -- transactions --------------------------------------------------------------

    def definitive_outcome(self, key: TxnKey) -> TxnOutcome | None:
        for outcome in reversed(self.txn_outcomes.get(key, [])):
            if outcome.outcome in ("commit", "abort"):
                return outcome
        return None

    def outcome(self, key: TxnKey) -> tuple[str, bool]:
        """(effective outcome, whether a client recorded it) — see the module docstring."""
        cached = self._outcome_cache.get(key)
        if cached is not None:
            return cached
        recorded = self.definitive_outcome(key)
        result: tuple[str, bool]
        if recorded is not None:
            result = (recorded.outcome, True)
        else:
            result = (self._inferred_outcome(key), False)
        self._outcome_cache[key] = result
        return result

    def _inferred_outcome(self, key: TxnKey) -> str:
        sends = self.txn_sends.get(key, [])
        if not sends:
            return "unknown"
        committed_reads = self.final_reads_of("read_committed")
        for read in committed_reads:
            # Attributed polls only: a retried transaction may write the same values again,
            # and those copies must not make the aborted first attempt look committed.
            if any(send in self.attributed(poll) for send in sends
                   for poll in read.polls_of(_tp(send), send.value)):
                return "commit"
        last_event = max([s.time for s in sends] + [o.time for o in self.txn_outcomes.get(key, [])])
        for read in committed_reads:
            for send in sends:
                done = read.completions.get(_tp(send))
                if done is not None and done.started >= last_event:
                    return "abort"
        return "unknown"

    def commit_requested_time(self, key: TxnKey) -> float | None:
        times = [o.requested_time for o in self.txn_outcomes.get(key, [])
                 if o.outcome in ("commit", "unknown") and o.requested_time is not None]
        return min(times) if times else None

    def commit_time(self, key: TxnKey) -> float | None:
        outcome = self.definitive_outcome(key)
        return outcome.time if outcome is not None and outcome.outcome == "commit" else None

    # -- reads ---------------------------------------------------------------------

    def visible(self, read: FinalRead, send: Send) -> bool:
        return bool(read.polls_of(_tp(send), send.value))

    def attributed(self, poll: Poll) -> list[Send]:
        if poll.value is None:  # a null value: no send has it
            return []
        candidates = [s for s in self.sends_by_value.get(poll.value, ())
                      if s.topic == poll.topic and s.partition in (poll.partition, -1)]
        exact = [s for s in candidates if s.acked_offset == poll.offset]
        return exact or candidates

    def expected_in(self, read: FinalRead, send: Send) -> bool:
        """Whether `read` had to show `send` (see lost write)."""
        done = read.completions.get(_tp(send))
        if done is None or not _acked(send):
            return False
        assert send.acked_offset is not None  # _acked
        below_end = send.acked_offset < done.end_offset
        key = _txn(send)
        if key is None:
            return send.time <= done.started or below_end
        outcome, recorded = self.outcome(key)
        if outcome != "commit":
            return False
        committed_at = self.commit_time(key)
        return below_end or (recorded and committed_at is not None and committed_at <= done.started)


def check(history: History | Iterable[Operation]) -> Report:
    """Check a history; the Report lists every anomaly with the records that show it."""
    operations = history.operations if isinstance(history, History) else list(history)
    index = _History(operations)
    report = Report()
    _check_final_reads(index, report)
    _check_duplicates(index, report)
    _check_inconsistent_offsets(index, report)
    _check_read_committed_polls(index, report)
    _check_monotonic(index, report)
    _check_acked_offsets(index, report)
    _check_group_offsets(index, report)
    report.stats = _stats(index)
    return report


def _check_final_reads(index: _History, report: Report) -> None:
    """Lost writes and torn transactions."""
    for read in index.final_reads:
        by_txn: dict[TxnKey, list[Send]] = defaultdict(list)
        covered = (send for tp in read.completions for send in index.sends_by_tp.get(tp, ()))
        for send in covered:
            if not index.expected_in(read, send):
                continue
            key = _txn(send)
            if key is not None:
                by_txn[key].append(send)
            elif not index.visible(read, send):
                done = read.completions[_tp(send)]
                report._add("lost_write", (
                    f"{send.value!r} acknowledged at {send.topic}-{send.partition}@{send.acked_offset} is missing "
                    f"from {read.client}'s {read.isolation} read to offset {done.end_offset}"
                ), (send, done))
        for key, sends in by_txn.items():
            missing = [s for s in sends if not index.visible(read, s)]
            if not missing:
                continue
            outcomes = index.txn_outcomes.get(key, [])
            completions = tuple({id(c): c for c in (read.completions[_tp(s)] for s in sends)}.values())
            if len(missing) == len(sends):
                for send in missing:
                    report._add("lost_write", (
                        f"{send.value!r} of committed transaction {key} (acked at {send.topic}-{send.partition}"
                        f"@{send.acked_offset}) is missing from {read.client}'s {read.isolation} read"
                    ), (send, *outcomes, read.completions[_tp(send)]))
            else:
                report._add("torn_transaction", (
                    f"committed transaction {key}: {read.client}'s {read.isolation} read shows "
                    f"{len(sends) - len(missing)} of its {len(sends)} records; missing "
                    f"{[s.value for s in missing]}"
                ), (*missing, *outcomes, *completions))


def _check_duplicates(index: _History, report: Report) -> None:
    positions: dict[tuple[str, str], dict[tuple[int, int], Poll]] = defaultdict(dict)
    for poll in index.polls:
        if poll.value is None:
            continue
        if poll.isolation == "read_uncommitted":
            sends = index.sends_by_value.get(poll.value)
            if sends and all(_txn(s) is not None for s in sends):
                continue
        positions[(poll.topic, poll.value)].setdefault((poll.partition, poll.offset), poll)
    for (topic, value), seen in positions.items():
        if len(seen) > 1:
            places = ", ".join(f"{topic}-{p}@{o}" for p, o in sorted(seen))
            report._add("duplicate", f"{value!r} appears at {len(seen)} positions: {places}",
                        (*index.sends_by_value.get(value, ()), *seen.values()))


def _check_inconsistent_offsets(index: _History, report: Report) -> None:
    values: dict[tuple[str, int, int], dict[str | None, Poll]] = defaultdict(dict)
    for poll in index.polls:
        values[(poll.topic, poll.partition, poll.offset)].setdefault(poll.value, poll)
    for (topic, partition, offset), seen in values.items():
        if len(seen) > 1:
            report._add("inconsistent_offsets", (
                f"{topic}-{partition}@{offset} was read as {sorted(map(repr, seen))} by "
                f"{sorted({p.client for p in seen.values()})}"
            ), seen.values())


def _check_read_committed_polls(index: _History, report: Report) -> None:
    """Aborted reads and uncommitted reads."""
    for poll in index.polls:
        if poll.isolation != "read_committed" or poll.value is None:
            continue
        sends = index.attributed(poll)
        if not sends or any(_txn(s) is None for s in sends):
            continue  # untracked, or a non-transactional write explains it
        keys = sorted({key for key in map(_txn, sends) if key is not None})
        outcomes = {key: index.outcome(key) for key in keys}
        records: tuple[Operation, ...] = (poll, *sends, *(o for key in keys for o in index.txn_outcomes.get(key, [])))
        committed = [key for key, (outcome, _recorded) in outcomes.items() if outcome == "commit"]
        if committed:
            requested = [t for t in map(index.commit_requested_time, committed) if t is not None]
            if len(requested) == len(committed) and poll.time < min(requested):
                report._add("uncommitted_read", (
                    f"{poll.client} read {poll.value!r} at {poll.topic}-{poll.partition}@{poll.offset} "
                    f"{min(requested) - poll.time:.3f}s before its transaction {committed} asked to commit"
                ), records)
            continue
        if all(outcome == "abort" for outcome, _ in outcomes.values()):
            if all(recorded for _, recorded in outcomes.values()):
                report._add("aborted_read", (
                    f"{poll.client} read {poll.value!r} at {poll.topic}-{poll.partition}@{poll.offset} "
                    f"from aborted transaction(s) {keys}"
                ), records)
            else:
                report._add("uncommitted_read", (
                    f"{poll.client} read {poll.value!r} at {poll.topic}-{poll.partition}@{poll.offset} "
                    f"from transaction(s) {keys} that the final reads prove aborted"
                ), records)


def _check_monotonic(index: _History, report: Report) -> None:
    last: dict[tuple[str, str, int], Poll] = {}
    for op in index.operations:
        if isinstance(op, Seek):
            last.pop((op.client, op.topic, op.partition), None)
        elif isinstance(op, Poll):
            key = (op.client, op.topic, op.partition)
            previous = last.get(key)
            if previous is not None and op.offset <= previous.offset:
                verb = "repeats" if op.offset == previous.offset else "goes back to"
                report._add("non_monotonic_offsets", (
                    f"{op.client} on {op.topic}-{op.partition} {verb} offset {op.offset} after "
                    f"{previous.offset} without a seek"
                ), (previous, op))
            last[key] = op


def _check_acked_offsets(index: _History, report: Report) -> None:
    polled: dict[tuple[str, int, str], dict[int, Poll]] = defaultdict(dict)
    for poll in index.polls:
        if poll.value is not None:
            polled[(poll.topic, poll.partition, poll.value)].setdefault(poll.offset, poll)
    for send in index.sends:
        if not _acked(send):
            continue
        seen = polled.get((send.topic, send.partition, send.value))
        if not seen or send.acked_offset in seen:
            continue
        explained = {s.acked_offset for s in index.sends_by_value[send.value]
                     if s.topic == send.topic and s.partition == send.partition}
        unexplained = sorted(set(seen) - explained)
        if unexplained:
            report._add("acked_offset_mismatch", (
                f"{send.value!r} was acknowledged at {send.topic}-{send.partition}@{send.acked_offset} "
                f"but read at offset(s) {unexplained}"
            ), (send, *(seen[o] for o in unexplained)))


def _check_group_offsets(index: _History, report: Report) -> None:
    committed_reads = index.final_reads_of("read_committed")
    inputs: dict[TopicPartition, dict[int, Poll]] = defaultdict(dict)
    for poll in index.polls:
        inputs[_tp(poll)].setdefault(poll.offset, poll)
    for observation in index.observations:
        group, tp, observed = observation.group, _tp(observation), observation.offset
        commits = index.offset_commits.get((group, *tp), [])
        if commits:
            _check_observed_offset(index, report, observation, commits)
        for offset, input_poll in sorted(inputs.get(tp, {}).items()):
            below = offset < observed
            transforms = index.transforms.get(input_poll.value, []) if input_poll.value is not None else []
            if below and not transforms:
                report._add("group_offsets_not_atomic", (
                    f"group {group}: input {input_poll.value!r} at {tp[0]}-{tp[1]}@{offset} is below the "
                    f"committed offset {observed} but was never transformed"
                ), (observation, input_poll))
                continue
            for output in sorted({t.output_value for t in transforms}):
                output_tps = {_tp(s) for s in index.sends_by_value.get(output, ()) if s.partition >= 0}
                if not output_tps:
                    continue
                for read in committed_reads:
                    if not all(read.covers(t) for t in output_tps):
                        continue
                    seen = [p for t in sorted(output_tps) for p in read.polls_of(t, output)]
                    positions = {(p.partition, p.offset) for p in seen}
                    expected = 1 if below else 0
                    if len(positions) != expected:
                        where = "below" if below else "at or above"
                        report._add("group_offsets_not_atomic", (
                            f"group {group}: input {input_poll.value!r} at {tp[0]}-{tp[1]}@{offset} is {where} "
                            f"the committed offset {observed}, but its output {output!r} is visible "
                            f"{len(positions)} time(s) in {read.client}'s read_committed read"
                        ), (observation, input_poll, *transforms, *seen))


def _check_observed_offset(index: _History, report: Report, observation: GroupOffsetObservation,
                           commits: list[GroupOffsetCommit]) -> None:
    committed: list[GroupOffsetCommit] = []
    undecided: list[GroupOffsetCommit] = []
    for commit in commits:
        if commit.txn_id is None or commit.txn_seq is None:
            committed.append(commit)
            continue
        outcome, _recorded = index.outcome((commit.txn_id, commit.txn_seq))
        if outcome == "commit":
            committed.append(commit)
        elif outcome == "unknown":
            undecided.append(commit)
    expected = max((c.offset for c in committed), default=-1)
    allowed = {expected} | {c.offset for c in undecided if c.offset > expected}
    if observation.offset not in allowed:
        latest = [c for c in committed if c.offset == expected]
        report._add("group_offsets_not_atomic", (
            f"group {observation.group} has offset {observation.offset} for {observation.topic}-"
            f"{observation.partition}, but the last committed transaction committed {expected}"
        ), (observation, *latest, *(c for c in commits if c.offset == observation.offset)))


def _stats(index: _History) -> dict[str, int]:
    outcomes = [index.outcome(key)[0] for key in set(index.txn_sends) | set(index.txn_outcomes)]
    return {
        "operations": len(index.operations),
        "sends": len(index.sends),
        "acked": sum(1 for s in index.sends if _acked(s)),
        "failed": sum(1 for s in index.sends if s.error is not None),
        "transactions": len(outcomes),
        "committed_txns": outcomes.count("commit"),
        "aborted_txns": outcomes.count("abort"),
        "unknown_txns": outcomes.count("unknown"),
        "reads": len(index.polls),
        "final_partition_reads": sum(len(r.completions) for r in index.final_reads),
    }
