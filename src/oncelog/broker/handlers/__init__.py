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
    delete_topics,
    describe_cluster,
    describe_configs,
    describe_producers,
    describe_transactions,
    end_txn,
    fetch,
    find_coordinator,
    init_producer_id,
    list_offsets,
    list_transactions,
    metadata,
    produce,
    write_txn_markers,
)
