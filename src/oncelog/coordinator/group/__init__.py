"""The group coordinator: classic consumer groups, committed and transactional offsets.

    coordinator.py        GroupCoordinator: owns the groups, lookups, composes the parts below
    membership.py         JoinGroup, SyncGroup, Heartbeat, LeaveGroup, rebalancing
    offsets.py            committed and transactional offsets, OffsetDelete, expiration
    loading.py            loading a partition's groups, dropping them on resignation
    persistence.py        the GroupMetadata record; what a failed write answers
    api.py                the operations' inputs and results, GroupSettings
    state.py              Group and Member, the group state machine (transition table)
    records.py            Kafka's __consumer_offsets key/value formats
    offsets_topic.py      appending to and reading __consumer_offsets
    consumer_protocol.py  the subscription format of protocol type "consumer"
    scheduler.py          clock and timers (event loop, or a manual clock for tests)
"""

from oncelog.coordinator.group.api import CommitOffset, GroupSettings, JoinRequest
from oncelog.coordinator.group.coordinator import GroupCoordinator

__all__ = ["CommitOffset", "GroupCoordinator", "GroupSettings", "JoinRequest"]
