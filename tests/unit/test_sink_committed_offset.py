"""The partition-mode sink asks its marker group's committed offset again while the group
coordinator moves (NOT_COORDINATOR and the like, as Kafka's clients retry them), and
gives up on anything else at once."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from oncelog.spark.sink import _committed_offset


class MarkerGroup:
    def __init__(self, *answers) -> None:
        self.answers = list(answers)
        self.calls = 0

    def committed(self, partitions, timeout):
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, KafkaError):
            raise KafkaException(answer)
        return [answer]


def test_a_moving_coordinator_is_asked_again_until_it_answers():
    marker = TopicPartition("out", 0)
    group = MarkerGroup(KafkaError(KafkaError.NOT_COORDINATOR), KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS),
                        TopicPartition("out", 0, 7))
    assert _committed_offset(group, marker, timeout=5).offset == 7
    assert group.calls == 3


def test_other_errors_and_the_deadline_end_the_asking():
    marker = TopicPartition("out", 0)
    group = MarkerGroup(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED))
    with pytest.raises(KafkaException):
        _committed_offset(group, marker, timeout=5)
    assert group.calls == 1
    group = MarkerGroup(*[KafkaError(KafkaError.NOT_COORDINATOR)] * 10)
    with pytest.raises(KafkaException):
        _committed_offset(group, marker, timeout=0.5)
    assert 1 <= group.calls <= 4
