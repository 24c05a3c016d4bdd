"""One module per Kafka API. Importing this package registers them all with the dispatcher.

Each module opens with the API's name and versions, what it does, and where it
deliberately differs from Apache Kafka.
"""

from oncelog.broker.handlers import (  # noqa: F401
    add_offsets_to_txn,
    add_partitions_to_txn,
    api_versions,
    create_partitions,
    create_topics,
    delete_groups,
    delete_topics,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_producers,
    describe_transactions,
    end_txn,
    fetch,
    find_coordinator,
    heartbeat,
    init_producer_id,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    list_transactions,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    produce,
    sync_group,
    txn_offset_commit,
    write_txn_markers,
)
