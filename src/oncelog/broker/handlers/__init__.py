"""One module per Kafka API, and the table of them all.

Each module opens with the API's name and versions, what it does, and where it
deliberately differs from Apache Kafka, and declares its `handle` with
`@dispatch.api(key, "Name", versions)`. To add an API: write its module, then add its
`handle` to HANDLERS below.
"""

from dataclasses import replace

from oncelog.broker.dispatch import TRANSACTION_V2_LEVEL, ApiHandler
from oncelog.broker.handlers import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_client_quotas,
    alter_configs,
    alter_partition_reassignments,
    alter_replica_log_dirs,
    alter_share_group_offsets,
    alter_user_scram_credentials,
    api_versions,
    consumer_group_describe,
    consumer_group_heartbeat,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_groups,
    delete_records,
    delete_share_group_offsets,
    delete_share_group_state,
    delete_topics,
    describe_acls,
    describe_client_quotas,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_log_dirs,
    describe_producers,
    describe_share_group_offsets,
    describe_topic_partitions,
    describe_transactions,
    describe_user_scram_credentials,
    elect_leaders,
    end_txn,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    initialize_share_group_state,
    join_group,
    leave_group,
    list_config_resources,
    list_groups,
    list_offsets,
    list_partition_reassignments,
    list_transactions,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    read_share_group_state,
    sasl_authenticate,
    sasl_handshake,
    share_acknowledge,
    share_fetch,
    share_group_describe,
    share_group_heartbeat,
    sync_group,
    txn_offset_commit,
    write_share_group_state,
    write_txn_markers,
)

HANDLERS: tuple[ApiHandler, ...] = (
    add_offsets_to_txn.handle,
    add_partitions_to_txn.handle,
    alter_client_quotas.handle,
    alter_share_group_offsets.handle,
    alter_configs.handle,
    alter_partition_reassignments.handle,
    alter_replica_log_dirs.handle,
    alter_user_scram_credentials.handle,
    api_versions.handle,
    consumer_group_describe.handle,
    consumer_group_heartbeat.handle,
    create_partitions.handle,
    create_acls.handle,
    create_topics.handle,
    delete_acls.handle,
    delete_groups.handle,
    delete_records.handle,
    delete_share_group_offsets.handle,
    delete_share_group_state.handle,
    delete_topics.handle,
    describe_acls.handle,
    describe_client_quotas.handle,
    describe_cluster.handle,
    describe_configs.handle,
    describe_groups.handle,
    describe_log_dirs.handle,
    describe_producers.handle,
    describe_share_group_offsets.handle,
    describe_topic_partitions.handle,
    describe_transactions.handle,
    describe_user_scram_credentials.handle,
    elect_leaders.handle,
    end_txn.handle,
    fetch.handle,
    find_coordinator.handle,
    heartbeat.handle,
    incremental_alter_configs.handle,
    init_producer_id.handle,
    initialize_share_group_state.handle,
    join_group.handle,
    leave_group.handle,
    list_config_resources.handle,
    list_groups.handle,
    list_offsets.handle,
    list_partition_reassignments.handle,
    list_transactions.handle,
    metadata.handle,
    offset_commit.handle,
    offset_delete.handle,
    offset_fetch.handle,
    offset_for_leader_epoch.handle,
    produce.handle,
    read_share_group_state.handle,
    sasl_authenticate.handle,
    sasl_handshake.handle,
    share_acknowledge.handle,
    share_fetch.handle,
    share_group_describe.handle,
    share_group_heartbeat.handle,
    sync_group.handle,
    txn_offset_commit.handle,
    write_share_group_state.handle,
    write_txn_markers.handle,
)


# The share group APIs (KIP-932): offered only with share.version finalized at 1.
SHARE_APIS = frozenset(handler.api_key for handler in (
    share_group_heartbeat.handle, share_group_describe.handle, share_fetch.handle, share_acknowledge.handle,
    describe_share_group_offsets.handle, alter_share_group_offsets.handle, delete_share_group_offsets.handle,
    initialize_share_group_state.handle, read_share_group_state.handle, write_share_group_state.handle,
    delete_share_group_state.handle))


def handler_table(transaction_version: int = TRANSACTION_V2_LEVEL, share_version: int = 1) -> dict[int, ApiHandler]:
    """Every handler by API key, as a broker with `transaction.version` finalized at
    `transaction_version` offers them (below 2, without KIP-890 part 2's versions), and
    without the share group APIs at `share_version` 0."""
    table: dict[int, ApiHandler] = {}
    for declared in HANDLERS:
        if share_version < 1 and declared.api_key in SHARE_APIS:
            continue
        if declared.api_key in table:
            raise RuntimeError(f"API {declared.api_key} ({declared.name}) declared twice")
        first_v2 = declared.first_transaction_v2_version
        offered = declared if transaction_version >= TRANSACTION_V2_LEVEL or first_v2 is None \
            else replace(declared, max_version=first_v2 - 1)
        table[declared.api_key] = offered
    return table
