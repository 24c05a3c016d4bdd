"""Writing a group's GroupMetadata record, and what a failed write answers.

Every change of membership that must survive a restart (a generation's assignment, a
static member's new id, a group becoming empty) is appended to the group's
`__consumer_offsets` partition as its GroupMetadata record before it takes effect;
`loading.py` rebuilds the same state from those records. The errors an append may
raise (`WRITE_ERRORS`) and the client error each becomes (`storage_error`) are shared by
the membership protocol and offset storage.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from kio.schema.errors import ErrorCode

from oncelog.coordinator.coordinator_log import append_failure
from oncelog.coordinator.group import records
from oncelog.coordinator.group.offsets_topic import OffsetsTopic
from oncelog.coordinator.group.records import GroupMetadataKey, GroupMetadataValue, MemberMetadataValue
from oncelog.coordinator.group.state import Group
from oncelog.kernel.partitions import AppendRefused
from oncelog.protocol.record_batch import Record
from oncelog.storage.errors import LogError, RecordBatchTooLargeError, RecordTooLargeError

log = logging.getLogger("oncelog.group")

# What appending to `__consumer_offsets` may raise: the storage layer's refusals,
# AppendRefused off the leader or under min.insync.replicas, LookupError for a missing
# partition (CoordinatorLog.append).
WRITE_ERRORS = (LogError, AppendRefused, LookupError)


def persist_group(offsets_topic: OffsetsTopic, group: Group, now_ms: int,
                  assignment: Mapping[str, bytes] | None = None) -> None:
    """Append the group's GroupMetadata record (members with their assignment)."""
    members = tuple(
        MemberMetadataValue(
            member.member_id, member.group_instance_id, member.client_id, member.client_host,
            member.rebalance_timeout_ms, member.session_timeout_ms,
            member.metadata_for(group.protocol_name),
            assignment.get(member.member_id, b"") if assignment is not None else member.assignment,
        )
        for member in group.members.values()
    )
    value = GroupMetadataValue(
        group.protocol_type or "", group.generation_id, group.protocol_name, group.leader_id,
        group.current_state_timestamp_ms, members,
    )
    offsets_topic.append(
        offsets_topic.partition_for(group.group_id),
        [Record(records.encode_group_metadata_key(GroupMetadataKey(group.group_id)),
                records.encode_group_metadata_value(value))],
        now_ms=now_ms,
    )


def try_persist_group(offsets_topic: OffsetsTopic, group: Group, now_ms: int) -> None:
    try:
        persist_group(offsets_topic, group, now_ms)
    except WRITE_ERRORS as error:
        log.error("group %s: storing group metadata failed: %s", group.group_id, error)


def storage_error(error: Exception) -> ErrorCode:
    """Kafka's mapping of append failures on `__consumer_offsets` for clients: this
    broker no longer leads the partition (NOT_COORDINATOR), its ISR is too small or the
    partition is missing (COORDINATOR_NOT_AVAILABLE), a batch too large."""
    if isinstance(error, (RecordTooLargeError, RecordBatchTooLargeError)):
        return ErrorCode.invalid_commit_offset_size
    if isinstance(error, (AppendRefused, LookupError)):
        return append_failure(error)
    return ErrorCode.coordinator_not_available
