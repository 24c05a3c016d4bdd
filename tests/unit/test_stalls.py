"""The stall figures of a chaos run's faults, from a made-up history."""

from __future__ import annotations

from oncelog.chaos.history import History, Outcome, Send, TxnOutcome
from oncelog.chaos.stalls import FaultWindow, fault_stalls, longest_gap


def test_the_longest_gap_counts_the_window_edges():
    assert longest_gap([], 10.0, 20.0) == 10.0
    assert longest_gap([12.0, 13.0, 19.0], 10.0, 20.0) == 6.0
    assert longest_gap([5.0, 11.0, 25.0], 10.0, 20.0) == 9.0  # events outside the window do not shorten it
    assert longest_gap([10.5, 19.5], 10.0, 20.0) == 9.0


def ack(partition: int, time: float, client: str = "idem.0", offset: int | None = 0) -> Send:
    return Send(client=client, topic="chaos", partition=partition, value=f"{client}:{time}", acked_offset=offset,
                time=time)


def commit(transactional_id: str, time: float, outcome: Outcome = "commit") -> TxnOutcome:
    return TxnOutcome(client=transactional_id, transactional_id=transactional_id, txn_seq=int(time),
                      outcome=outcome, time=time)


def test_stalls_split_the_partitions_the_victim_led_from_the_others():
    history = History()
    for t in (100.0, 101.0, 102.0, 108.0, 109.0):  # partition 0 (led by the victim): 6 s without an ack
        history.append(ack(0, t))
    for t in (100.5, 101.5, 103.0, 104.0, 105.0, 106.0, 107.0, 108.5):  # partition 1: 1.5 s at most
        history.append(ack(1, t))
    history.append(ack(1, 104.5, client="tx1.0"))  # another writer's acks do not count
    history.append(ack(0, 105.0, offset=None))  # nor do failed sends
    for t in (100.0, 103.0, 110.0):
        history.append(commit("chaos-tx-1", t))
    history.append(commit("chaos-tx-1", 106.0, outcome="abort"))  # an abort is no commit
    stalls = fault_stalls(history, FaultWindow(100.0, 110.0, frozenset({("chaos", 0)})), topic="chaos",
                          partitions=[0, 1], writers=["idem"], transactional_ids=["chaos-tx-1"])
    assert (stalls.writes_led, stalls.writes_elsewhere, stalls.commits) == (6.0, 1.5, 7.0)
    assert stalls.writes == {0: 6.0, 1: 1.5} and stalls.worst_partition == (0, 6.0)
    assert "6.0s on partitions it led, 1.5s elsewhere (worst chaos-0, 6.0s); of commits 7.0s" in (
        stalls.describe("chaos"))


def test_a_victim_that_led_nothing_has_no_led_figure():
    history = History()
    history.append(ack(0, 1.0))
    stalls = fault_stalls(history, FaultWindow(0.0, 2.0, frozenset()), topic="chaos", partitions=[0],
                          writers=["idem"], transactional_ids=[])
    assert (stalls.writes_led, stalls.writes_elsewhere, stalls.commits) == (None, 1.0, None)
    assert stalls.describe("chaos").startswith("longest stall of acknowledged writes - on partitions it led")
