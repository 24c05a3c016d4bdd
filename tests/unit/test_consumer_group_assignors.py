"""The server-side assignors of consumer groups (KIP-848): uniform and range."""

import uuid

import pytest

from oncelog.coordinator.group.assignors import (
    ASSIGNORS,
    GroupSpec,
    MemberSubscription,
    PartitionAssignorError,
    RangeAssignor,
    UniformAssignor,
    assignor_names,
)

T1, T2, T3 = (uuid.UUID(int=n) for n in (1, 2, 3))


def spec(subscriptions, partitions, current=None, instances=None):
    instances = instances or {}
    return GroupSpec(
        members={m: MemberSubscription(instances.get(m), frozenset(topics)) for m, topics in subscriptions.items()},
        partition_counts=partitions,
        current=current or {},
    )


def owned(result):
    return {m: sorted((str(t), p) for t, parts in a.items() for p in parts) for m, a in result.items()}


def all_partitions(result):
    return sorted((t, p) for a in result.values() for t, parts in a.items() for p in parts)


def test_uniform_gives_every_partition_once_and_balances_a_homogeneous_group():
    result = UniformAssignor().assign(spec({"a": {T1, T2}, "b": {T1, T2}, "c": {T1, T2}}, {T1: 4, T2: 3}))
    assert all_partitions(result) == sorted([(T1, p) for p in range(4)] + [(T2, p) for p in range(3)])
    sizes = sorted(sum(len(p) for p in a.values()) for a in result.values())
    assert sizes == [2, 2, 3]


def test_uniform_is_sticky_when_a_member_joins():
    before = UniformAssignor().assign(spec({"a": {T1}, "b": {T1}}, {T1: 6}))
    after = UniformAssignor().assign(spec({"a": {T1}, "b": {T1}, "c": {T1}}, {T1: 6}, current=before))
    for member in ("a", "b"):  # they only give up partitions, never swap them
        assert after[member][T1] <= before[member][T1]
    assert [len(after[m][T1]) for m in ("a", "b", "c")] == [2, 2, 2]


def test_uniform_keeps_the_assignment_of_the_members_that_stay_when_one_leaves():
    before = UniformAssignor().assign(spec({"a": {T1}, "b": {T1}, "c": {T1}}, {T1: 6}))
    after = UniformAssignor().assign(spec({"a": {T1}, "b": {T1}}, {T1: 6}, current=before))
    assert before["a"][T1] <= after["a"][T1] and before["b"][T1] <= after["b"][T1]
    assert after["a"][T1] | after["b"][T1] == frozenset(range(6))


def test_uniform_balances_heterogeneous_subscriptions_within_what_each_may_take():
    result = UniformAssignor().assign(spec({"a": {T1}, "b": {T1, T2}, "c": {T2}}, {T1: 4, T2: 4}))
    assert all_partitions(result) == sorted([(T1, p) for p in range(4)] + [(T2, p) for p in range(4)])
    assert T2 not in result["a"] and T1 not in result["c"]
    sizes = {m: sum(len(p) for p in a.values()) for m, a in result.items()}
    assert max(sizes.values()) - min(sizes.values()) <= 1


def test_uniform_drops_partitions_of_topics_a_member_no_longer_subscribes_to():
    before = {"a": {T1: frozenset({0, 1}), T2: frozenset({0})}}
    result = UniformAssignor().assign(spec({"a": {T1}}, {T1: 2, T2: 1}, current=before))
    assert result == {"a": {T1: frozenset({0, 1})}}


def test_uniform_with_more_members_than_partitions_leaves_some_without():
    result = UniformAssignor().assign(spec({m: {T1} for m in "abcd"}, {T1: 2}))
    assert sorted(len(a.get(T1, ())) for a in result.values()) == [0, 0, 1, 1]


def test_range_co_partitions_topics_of_equal_size_in_member_order():
    result = RangeAssignor().assign(spec({"m0": {T1, T2}, "m1": {T1, T2}}, {T1: 3, T2: 3}))
    assert result["m0"] == {T1: frozenset({0, 1}), T2: frozenset({0, 1})}
    assert result["m1"] == {T1: frozenset({2}), T2: frozenset({2})}


def test_range_orders_static_members_by_instance_id_before_dynamic_ones():
    result = RangeAssignor().assign(spec({"zz": {T1}, "aa": {T1}, "dyn": {T1}}, {T1: 3},
                                         instances={"zz": "i0", "aa": "i1"}))
    assert result == {"zz": {T1: frozenset({0})}, "aa": {T1: frozenset({1})}, "dyn": {T1: frozenset({2})}}


def test_range_heterogeneous_subscriptions_split_each_topic_among_its_subscribers():
    result = RangeAssignor().assign(spec({"a": {T1}, "b": {T1, T2}, "c": {T2, T3}}, {T1: 4, T2: 2, T3: 1}))
    assert result["a"] == {T1: frozenset({0, 1})}
    assert result["b"] == {T1: frozenset({2, 3}), T2: frozenset({0})}
    assert result["c"] == {T2: frozenset({1}), T3: frozenset({0})}


@pytest.mark.parametrize("name", ["uniform", "range"])
def test_a_subscribed_topic_that_does_not_exist_is_an_assignor_error(name):
    with pytest.raises(PartitionAssignorError):
        ASSIGNORS[name].assign(spec({"a": {T1}}, {}))


def test_group_consumer_assignors_takes_names_and_kafka_class_names():
    assert assignor_names("uniform,range") == ("uniform", "range")
    assert assignor_names("org.apache.kafka.coordinator.group.assignor.RangeAssignor") == ("range",)
    with pytest.raises(ValueError, match="unknown consumer group assignor"):
        assignor_names("sticky")
