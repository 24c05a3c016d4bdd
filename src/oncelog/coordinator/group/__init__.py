"""The group coordinator: classic groups, consumer groups (KIP-848), committed and
transactional offsets.

    coordinator.py        GroupCoordinator: owns the groups, lookups, composes the parts below
    membership.py         classic groups: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, rebalancing
    consumer_membership.py  consumer groups: ConsumerGroupHeartbeat, ConsumerGroupDescribe,
                          group epochs, target assignments, session and rebalance timeouts
    classic_members.py    classic members of consumer groups; online upgrade and downgrade
    consumer_group.py     ConsumerGroup: its state rebuilt by replaying its records
    consumer_member.py    ConsumerGroupMember and MemberState
    reconciliation.py     moving a member towards its target (revocation before assignment)
    assignors.py          the server-side assignors: uniform and range
    assignment.py         assignments by topic id, and their set algebra
    offsets.py            committed and transactional offsets, OffsetDelete, expiration
    loading.py            loading a partition's groups, dropping them on resignation
    persistence.py        the GroupMetadata record; what a failed write answers
    api.py                the operations' inputs and results, GroupSettings, GroupTimings
    state.py              Group (a classic group, and any group's offsets) and Member,
                          the classic state machine (transition table)
    records.py            Kafka's __consumer_offsets key/value formats of classic groups and offsets
    consumer_records.py   Kafka's formats of the consumer group records
    offsets_topic.py      appending to and reading __consumer_offsets
    consumer_protocol.py  the embedded consumer protocol: subscriptions and assignments
    scheduler.py          clock and timers (event loop, or a manual clock for tests)
"""

from oncelog.coordinator.group.api import CommitOffset, GroupSettings, JoinRequest
from oncelog.coordinator.group.coordinator import GroupCoordinator

__all__ = ["CommitOffset", "GroupCoordinator", "GroupSettings", "JoinRequest"]
