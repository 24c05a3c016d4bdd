"""The check of `oncelog demo --stateful` against outputs made up here: what the committed
input must give (Kafka Streams' results, replayed in timestamp order), and each kind of
wrong output counted where it belongs, so the demo's zeros mean something."""

from oncelog.demo.events import WINDOW_MS, InputRecord, SeededEvents, expected_outputs
from oncelog.demo.stateful import check_branch, check_counts, check_enriched
from oncelog.demo.topics import EVENTS_TOPIC, HIGH_TOPIC, REFERENCE_TOPIC, OutputRead

START = 10 * WINDOW_MS  # a window's start


def event(number: int, key: str, priority: str, at: int) -> InputRecord:
    return InputRecord(EVENTS_TOPIC, key, f"e-{number:07d} {priority}", START + at)


def table(key: str, value: str | None, at: int) -> InputRecord:
    return InputRecord(REFERENCE_TOPIC, key, value, START + at)


def seeded_input() -> SeededEvents:
    return SeededEvents(committed=[
        table("a", "a-r1", 1),
        event(1, "a", "HIGH", 2),                # joins a-r1
        table("a", "a-r2", 3),
        event(2, "a", "NORMAL", 4),              # joins a-r2
        event(3, "b", "LOW", 5),                 # b is not in the table: no join
        InputRecord(EVENTS_TOPIC, "b", None, START + 6),  # no value: skipped everywhere
        table("a", None, 7),                     # a tombstone
        event(4, "a", "HIGH", WINDOW_MS + 8),    # the next window; a has no entry
    ], aborted_events={"e-0000009"}, aborted_table_values={"a-r9"})


def output(*records: tuple[str, str]) -> OutputRead:
    return OutputRead(keys=[key.encode() for key, _ in records], values=[value.encode() for _, value in records])


def test_the_expected_outputs_follow_kafka_streams_semantics():
    expected = expected_outputs(seeded_input())

    assert expected.counts == {f"a@{START}": 2, f"b@{START}": 1, f"a@{START + WINDOW_MS}": 1}
    assert expected.high == {"e-0000001 HIGH": "a", "e-0000004 HIGH": "a"}
    assert expected.normal == {"e-0000002 NORMAL": "a"}
    assert expected.enriched == {"e-0000001": ("a", "e-0000001 HIGH:a-r1"), "e-0000002": ("a", "e-0000002 NORMAL:a-r2")}


def test_a_window_updated_twice_with_one_count_is_a_duplicate_and_a_wrong_last_count_is_wrong():
    expected = expected_outputs(seeded_input())
    right = output((f"a@{START}", "1"), (f"b@{START}", "1"), (f"a@{START}", "2"), (f"a@{START + WINDOW_MS}", "1"))
    assert check_counts(right, expected).anomalies == 0

    twice = output((f"a@{START}", "1"), (f"a@{START}", "1"), (f"a@{START}", "2"), (f"b@{START}", "1"),
                   (f"a@{START + WINDOW_MS}", "1"))
    assert check_counts(twice, expected).duplicates == 1

    short = output((f"a@{START}", "1"), (f"b@{START}", "1"), (f"a@{START + WINDOW_MS}", "1"))
    check = check_counts(short, expected)
    assert (check.wrong, check.missing) == (1, 0)

    backwards = output((f"a@{START}", "2"), (f"a@{START}", "1"), (f"a@{START}", "2"), (f"b@{START}", "1"),
                       (f"a@{START + WINDOW_MS}", "1"))
    assert check_counts(backwards, expected).wrong == 1
    assert check_counts(output((f"b@{START}", "1")), expected).missing == 2


def test_a_branch_counts_duplicates_missing_aborted_misrouted_and_unknown_events():
    seeded = seeded_input()
    expected = expected_outputs(seeded).high
    check = check_branch(HIGH_TOPIC, output(("a", "e-0000001 HIGH"), ("a", "e-0000001 HIGH"), ("a", "e-0000009 HIGH"),
                                            ("a", "e-0000002 NORMAL"), ("b", "e-0000004 HIGH")), expected, seeded)

    assert (check.duplicates, check.missing, check.leaked, check.wrong, check.unexpected) == (1, 0, 1, 2, 0)
    assert check_branch(HIGH_TOPIC, output(("a", "e-0000123 HIGH")), expected, seeded).unexpected == 1


def test_a_join_with_a_reference_the_table_did_not_hold_is_wrong_and_an_aborted_one_leaked():
    seeded = seeded_input()
    expected = expected_outputs(seeded)
    right = output(("a", "e-0000001 HIGH:a-r1"), ("a", "e-0000002 NORMAL:a-r2"))
    assert check_enriched(right, expected, seeded).anomalies == 0

    check = check_enriched(output(("a", "e-0000001 HIGH:a-r2"), ("a", "e-0000002 NORMAL:a-r9"),
                                  ("a", "e-0000004 HIGH:a-r2"), ("a", "e-0000123 HIGH:a-r2")), expected, seeded)
    assert (check.wrong, check.leaked, check.unexpected, check.missing) == (2, 1, 1, 0)
