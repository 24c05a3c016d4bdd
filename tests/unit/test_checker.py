"""The history checker on a hand-built clean history, then on minimal corruptions of it:
each corruption must be reported as exactly its own anomaly, naming the offending records.

The clean history (times from a fake clock, so the order is explicit):
- `plain` (2 partitions): producer p1 sends p1:0..5 without transactions.
- `txn` (2 partitions): transactional producer t1 runs
    txn 0 {t1:0 @p0:0, t1:1 @p1:0} commit; txn 1 {t1:2 @p0:2} abort;
    txn 2 {t1:3 @p0:4, t1:4 @p1:2} commit raised -> "unknown", absent from the final
    read_committed read, so proven aborted; txn 3 {t1:5 @p0:6, t1:6 @p1:4} commit.
- consume-transform-produce: `in` holds in:0..3; client ctp turns in:N into out:in:N in
  transactions with the group offset (txn 0: in:0, in:1 -> offset 2; txn 1: in:2 ->
  offset 3); in:3 is not processed; the final OffsetFetch says 3.
- tail-rc (read_committed) and tail-ru (read_uncommitted) follow `txn` p0 while it is
  written; tail-plain follows `plain` p0.
- final-rc and final-ru read every topic completely at the end.
"""

from __future__ import annotations

import dataclasses
import itertools

from oncelog.chaos.checker import ANOMALY_KINDS, check
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
    from_json,
    to_json,
)


class Builder:
    def __init__(self) -> None:
        self.ops: list[Operation] = []
        self._clock = itertools.count(1)

    def now(self) -> float:
        return float(next(self._clock))

    def send(self, client, topic, partition, value, offset, txn=None, error=None):
        txn_id, txn_seq = txn or (None, None)
        self.ops.append(Send(client=client, topic=topic, partition=partition, value=value, key=None,
                             acked_offset=offset, error=error, txn_id=txn_id, txn_seq=txn_seq, time=self.now()))

    def outcome(self, client, txn, outcome):
        requested = self.now()
        self.ops.append(TxnOutcome(client=client, transactional_id=txn[0], txn_seq=txn[1], outcome=outcome,
                                   time=self.now(), requested_time=requested))

    def poll(self, client, topic, partition, offset, value, isolation):
        self.ops.append(Poll(client=client, topic=topic, partition=partition, offset=offset, value=value,
                             isolation=isolation, time=self.now()))

    def final_read(self, client, isolation, contents):
        """contents: {(topic, partition): (end_offset, [(offset, value), ...])}"""
        started = self.now()
        for (topic, partition), (_end, records) in contents.items():
            self.ops.append(Seek(client=client, topic=topic, partition=partition, offset=0, time=started))
            for offset, value in records:
                self.poll(client, topic, partition, offset, value, isolation)
        done = self.now()
        for (topic, partition), (end, _records) in contents.items():
            self.ops.append(ReadComplete(client=client, topic=topic, partition=partition, isolation=isolation,
                                         end_offset=end, started=started, time=done))


def clean_history() -> list:
    b = Builder()
    rc, ru = "read_committed", "read_uncommitted"
    for n in range(6):
        b.send("p1", "plain", n % 2, f"p1:{n}", n // 2)
    b.poll("tail-plain", "plain", 0, 0, "p1:0", ru)
    b.poll("tail-plain", "plain", 0, 1, "p1:2", ru)

    t = lambda seq: ("t1", seq)  # noqa: E731
    b.send("t1", "txn", 0, "t1:0", 0, t(0))
    b.send("t1", "txn", 1, "t1:1", 0, t(0))
    b.poll("tail-ru", "txn", 0, 0, "t1:0", ru)
    b.outcome("t1", t(0), "commit")
    b.poll("tail-rc", "txn", 0, 0, "t1:0", rc)
    b.send("t1", "txn", 0, "t1:2", 2, t(1))
    b.poll("tail-ru", "txn", 0, 2, "t1:2", ru)
    b.outcome("t1", t(1), "abort")
    b.send("t1", "txn", 0, "t1:3", 4, t(2))
    b.send("t1", "txn", 1, "t1:4", 2, t(2))
    b.poll("tail-ru", "txn", 0, 4, "t1:3", ru)
    b.outcome("t1", t(2), "unknown")
    b.send("t1", "txn", 0, "t1:5", 6, t(3))
    b.send("t1", "txn", 1, "t1:6", 4, t(3))
    b.outcome("t1", t(3), "commit")
    b.poll("tail-rc", "txn", 0, 6, "t1:5", rc)

    for n in range(4):
        b.send("src", "in", 0, f"in:{n}", n)
    c = lambda seq: ("ctp", seq)  # noqa: E731
    for n in range(3):
        b.poll("ctp", "in", 0, n, f"in:{n}", rc)
    for n, offset in ((0, 0), (1, 1)):
        b.ops.append(Transform(client="ctp", input_value=f"in:{n}", output_value=f"out:in:{n}", time=b.now()))
        b.send("ctp", "out", 0, f"out:in:{n}", offset, c(0))
    b.ops.append(GroupOffsetCommit(group="g", topic="in", partition=0, offset=2, txn_id="ctp", txn_seq=0))
    b.outcome("ctp", c(0), "commit")
    b.ops.append(Transform(client="ctp", input_value="in:2", output_value="out:in:2", time=b.now()))
    b.send("ctp", "out", 0, "out:in:2", 3, c(1))
    b.ops.append(GroupOffsetCommit(group="g", topic="in", partition=0, offset=3, txn_id="ctp", txn_seq=1))
    b.outcome("ctp", c(1), "commit")

    plain = {("plain", p): (3, [(o, f"p1:{2 * o + p}") for o in range(3)]) for p in (0, 1)}
    inputs = {("in", 0): (4, [(n, f"in:{n}") for n in range(4)])}
    outputs = {("out", 0): (5, [(0, "out:in:0"), (1, "out:in:1"), (3, "out:in:2")])}
    b.final_read("final-rc", rc, {
        **plain,
        ("txn", 0): (8, [(0, "t1:0"), (6, "t1:5")]),
        ("txn", 1): (6, [(0, "t1:1"), (4, "t1:6")]),
        **inputs, **outputs,
    })
    b.final_read("final-ru", ru, {
        **plain,
        ("txn", 0): (8, [(0, "t1:0"), (2, "t1:2"), (4, "t1:3"), (6, "t1:5")]),
        ("txn", 1): (6, [(0, "t1:1"), (2, "t1:4"), (4, "t1:6")]),
        **inputs, **outputs,
    })
    b.ops.append(GroupOffsetObservation(group="g", topic="in", partition=0, offset=3, time=b.now()))
    return b.ops


# -- corruption helpers ------------------------------------------------------------------


def find_poll(ops, client, value):
    return next(op for op in ops if type(op) is Poll and op.client == client and op.value == value)


def without(ops, *removed):
    ids = {id(op) for op in removed}
    return [op for op in ops if id(op) not in ids]


def replaced(ops, old, new):
    return [new if op is old else op for op in ops]


def inserted_after(ops, anchor, new):
    index = next(i for i, op in enumerate(ops) if op is anchor)
    return [*ops[: index + 1], new, *ops[index + 1:]]


def find_send(ops, value):
    return next(op for op in ops if type(op) is Send and op.value == value)


def assert_only(report, kind, count=1):
    found = report.found()
    assert found == {kind: count}, report.summary()
    return report.anomalies()[kind]


# -- the clean history ---------------------------------------------------------------------


def test_clean_history_has_no_anomalies_and_counts_its_operations():
    ops = clean_history()
    report = check(ops)
    assert report.ok, report.summary()
    assert report.stats["sends"] == 6 + 7 + 4 + 3
    assert report.stats["acked"] == report.stats["sends"]
    # txn 2 ended "unknown" and the final read_committed read proves it aborted.
    assert (report.stats["committed_txns"], report.stats["aborted_txns"], report.stats["unknown_txns"]) == (4, 2, 0)
    assert report.stats["final_partition_reads"] == 2 * 6
    summary = report.summary()
    assert "verdict: OK" in summary
    assert f"operations={len(ops)}" in summary
    for kind in ANOMALY_KINDS:
        assert f"{kind}=0" in summary


def test_history_round_trips_through_json_lines(tmp_path):
    ops = clean_history()
    history = History(ops)
    path = tmp_path / "history.jsonl"
    history.dump(path)
    loaded = History.load(path)
    assert loaded.operations == ops
    assert len(path.read_text().splitlines()) == len(ops)
    assert from_json(to_json(ops[0])) == ops[0]
    assert check(loaded).ok


def test_unknown_commit_that_the_final_read_shows_counts_as_committed():
    ops = clean_history()
    # The final read_committed read shows txn 2's records: the "unknown" commit happened.
    anchor = find_poll(ops, "final-rc", "t1:0")
    ops = inserted_after(ops, anchor, dataclasses.replace(anchor, offset=4, value="t1:3"))
    anchor = find_poll(ops, "final-rc", "t1:1")
    ops = inserted_after(ops, anchor, dataclasses.replace(anchor, offset=2, value="t1:4"))
    report = check(ops)
    assert report.ok, report.summary()
    assert report.stats["committed_txns"] == 5


# -- one corruption per anomaly ------------------------------------------------------------


def test_acknowledged_write_missing_from_a_final_read_is_a_lost_write():
    ops = clean_history()
    missing = find_poll(ops, "final-rc", "p1:3")
    (anomaly,) = assert_only(check(without(ops, missing)), "lost_write")
    assert find_send(ops, "p1:3") in anomaly.records
    assert "final-rc" in anomaly.description


def test_committed_transaction_missing_entirely_is_a_lost_write_per_record():
    ops = clean_history()
    ops = without(ops, find_poll(ops, "final-ru", "t1:5"), find_poll(ops, "final-ru", "t1:6"))
    anomalies = assert_only(check(ops), "lost_write", 2)
    assert {a.records[0].value for a in anomalies} == {"t1:5", "t1:6"}
    assert all("final-ru" in a.description for a in anomalies)


def test_value_at_two_offsets_is_a_duplicate():
    ops = clean_history()
    last = find_poll(ops, "tail-plain", "p1:2")
    ops = inserted_after(ops, last, dataclasses.replace(last, offset=7, value="p1:0"))
    (anomaly,) = assert_only(check(ops), "duplicate")
    assert find_send(ops, "p1:0") in anomaly.records
    assert {(p.offset, p.value) for p in anomaly.records if type(p) is Poll} == {(0, "p1:0"), (7, "p1:0")}


def test_same_offset_read_with_two_values_is_inconsistent_offsets():
    ops = clean_history()
    original = find_poll(ops, "tail-plain", "p1:2")
    corrupt = dataclasses.replace(original, value="phantom")
    (anomaly,) = assert_only(check(replaced(ops, original, corrupt)), "inconsistent_offsets")
    assert corrupt in anomaly.records
    assert {p.value for p in anomaly.records} == {"p1:2", "phantom"}


def test_read_committed_poll_of_an_aborted_transaction_is_an_aborted_read():
    ops = clean_history()
    anchor = find_poll(ops, "final-rc", "t1:0")
    dirty = dataclasses.replace(anchor, offset=2, value="t1:2")
    (anomaly,) = assert_only(check(inserted_after(ops, anchor, dirty)), "aborted_read")
    assert anomaly.records[0] == dirty
    assert find_send(ops, "t1:2") in anomaly.records


def test_read_committed_poll_of_an_unknown_transaction_later_proven_aborted_is_an_uncommitted_read():
    ops = clean_history()
    anchor = find_poll(ops, "tail-rc", "t1:0")
    dirty = dataclasses.replace(anchor, offset=4, value="t1:3")
    (anomaly,) = assert_only(check(inserted_after(ops, anchor, dirty)), "uncommitted_read")
    assert anomaly.records[0] == dirty
    assert "prove aborted" in anomaly.description


def test_read_committed_poll_before_the_commit_was_requested_is_an_uncommitted_read():
    ops = clean_history()
    original = find_poll(ops, "tail-rc", "t1:0")
    commit = next(op for op in ops if type(op) is TxnOutcome and op.txn_seq == 0 and op.client == "t1")
    early = dataclasses.replace(original, time=commit.requested_time - 0.5)
    (anomaly,) = assert_only(check(replaced(ops, original, early)), "uncommitted_read")
    assert anomaly.records[0] == early
    assert commit in anomaly.records


def test_unknown_transaction_read_without_proof_of_abort_is_not_reported():
    ops = clean_history()
    anchor = find_poll(ops, "tail-rc", "t1:0")
    ops = inserted_after(ops, anchor, dataclasses.replace(anchor, offset=4, value="t1:3"))
    # Without final read_committed reads nothing proves txn 2 aborted.
    ops = [op for op in ops if getattr(op, "client", None) != "final-rc"]
    assert check(ops).found() == {}


def test_repeated_offset_without_a_seek_is_non_monotonic():
    ops = clean_history()
    last = find_poll(ops, "tail-plain", "p1:2")
    repeat = dataclasses.replace(last, time=last.time + 0.1)
    (anomaly,) = assert_only(check(inserted_after(ops, last, repeat)), "non_monotonic_offsets")
    assert anomaly.records == (last, repeat)


def test_offset_going_back_without_a_seek_is_non_monotonic_and_a_seek_allows_it():
    ops = clean_history()
    last = find_poll(ops, "tail-plain", "p1:2")
    back = dataclasses.replace(find_poll(ops, "tail-plain", "p1:0"), time=last.time + 0.1)
    corrupt = inserted_after(ops, last, back)
    (anomaly,) = assert_only(check(corrupt), "non_monotonic_offsets")
    assert anomaly.records == (last, back)
    seek = Seek(client="tail-plain", topic="plain", partition=0, offset=0, time=last.time + 0.05)
    assert check(inserted_after(ops, last, seek)).ok
    assert check(inserted_after(inserted_after(ops, last, seek), seek, back)).ok


def test_committed_transaction_partly_visible_is_torn():
    ops = clean_history()
    (anomaly,) = assert_only(check(without(ops, find_poll(ops, "final-rc", "t1:6"))), "torn_transaction")
    assert find_send(ops, "t1:6") in anomaly.records
    assert find_send(ops, "t1:5") not in anomaly.records
    assert "1 of its 2" in anomaly.description


def test_acknowledged_offset_that_reads_show_elsewhere_is_a_mismatch():
    ops = clean_history()
    original = find_send(ops, "p1:4")
    wrong = dataclasses.replace(original, acked_offset=9)
    (anomaly,) = assert_only(check(replaced(ops, original, wrong)), "acked_offset_mismatch")
    assert anomaly.records[0] == wrong
    assert {p.offset for p in anomaly.records[1:]} == {2}


def test_group_offset_behind_visible_outputs_is_not_atomic():
    ops = clean_history()
    original = next(op for op in ops if type(op) is GroupOffsetObservation)
    behind = dataclasses.replace(original, offset=1)
    anomalies = assert_only(check(replaced(ops, original, behind)), "group_offsets_not_atomic", 3)
    descriptions = "\n".join(a.description for a in anomalies)
    assert "last committed transaction committed 3" in descriptions
    assert "'out:in:1' is visible 1 time(s)" in descriptions
    assert "'out:in:2' is visible 1 time(s)" in descriptions
    assert all(a.records[0] == behind for a in anomalies)


def test_group_offset_past_an_untransformed_input_is_not_atomic():
    ops = clean_history()
    original = next(op for op in ops if type(op) is GroupOffsetObservation)
    ahead = dataclasses.replace(original, offset=4)
    anomalies = assert_only(check(replaced(ops, original, ahead)), "group_offsets_not_atomic", 2)
    descriptions = "\n".join(a.description for a in anomalies)
    assert "'in:3' at in-0@3 is below the committed offset 4 but was never transformed" in descriptions


def test_group_offset_committed_in_an_aborted_transaction_must_not_be_observed():
    ops = clean_history()
    commit = next(op for op in ops if type(op) is GroupOffsetCommit and op.offset == 3)
    outcome = next(op for op in ops if type(op) is TxnOutcome and op.client == "ctp" and op.txn_seq == 1)
    aborted = dataclasses.replace(outcome, outcome="abort")
    # The output of the aborted transaction is gone from both final reads too.
    ops = [op for op in replaced(ops, outcome, aborted) if not (type(op) is Poll and op.value == "out:in:2")]
    anomalies = check(ops).anomalies()["group_offsets_not_atomic"]
    assert check(ops).found() == {"group_offsets_not_atomic": 2}
    assert any(commit in a.records and "last committed transaction committed 2" in a.description for a in anomalies)


def test_a_retried_transaction_writing_the_same_values_does_not_make_the_aborted_attempt_committed():
    """Regression (10-minute soak): the consume-transform-produce loop's transaction 0
    committed offset 2 but its commit raised (unknown) and it was aborted when the
    producer was re-created; transaction 1 wrote the same output values again and
    committed offset 1. Only polls attributed to a send make its transaction committed."""
    b = Builder()
    rc = "read_committed"
    t0, t1 = ("ctp", 0), ("ctp", 1)
    b.send("ctp", "out", 0, "out:in:0", 0, txn=t0)
    b.send("ctp", "out", 0, "out:in:1", 1, txn=t0)
    b.ops.append(GroupOffsetCommit(group="g", topic="in", partition=0, offset=2, txn_id="ctp", txn_seq=0))
    b.outcome("ctp", t0, "unknown")
    b.send("ctp", "out", 0, "out:in:0", 3, txn=t1)  # after the ABORT marker at offset 2
    b.ops.append(GroupOffsetCommit(group="g", topic="in", partition=0, offset=1, txn_id="ctp", txn_seq=1))
    b.outcome("ctp", t1, "commit")
    b.ops.append(Transform(client="ctp", input_value="in:0", output_value="out:in:0", time=b.now()))
    b.ops.append(Transform(client="ctp", input_value="in:1", output_value="out:in:1", time=b.now()))
    b.final_read("final-rc", rc, {("out", 0): (5, [(3, "out:in:0")])})
    b.ops.append(GroupOffsetObservation(group="g", topic="in", partition=0, offset=1, time=b.now()))
    report = check(History(b.ops))
    assert "group_offsets_not_atomic" not in report.found(), report.summary()
