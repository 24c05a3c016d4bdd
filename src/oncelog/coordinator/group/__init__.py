"""The group coordinator: classic consumer groups, committed and transactional offsets.

    coordinator.py        GroupCoordinator: the protocol operations, timers, load/persist
    state.py              Group and Member, the group state machine (transition table)
    records.py            Kafka's __consumer_offsets key/value formats
    offsets_topic.py      appending to and reading __consumer_offsets
    consumer_protocol.py  the subscription format of protocol type "consumer"
    scheduler.py          clock and timers (event loop, or a manual clock for tests)
"""

from oncelog.coordinator.group.coordinator import (
    CommitOffset,
    GroupCoordinator,
    GroupSettings,
    JoinRequest,
)

__all__ = ["CommitOffset", "GroupCoordinator", "GroupSettings", "JoinRequest"]
