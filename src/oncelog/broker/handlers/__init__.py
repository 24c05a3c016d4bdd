"""One module per Kafka API. Importing this package registers them all with the dispatcher.

Each module opens with the API's name and versions, what it does, and where it
deliberately differs from Apache Kafka.
"""

from oncelog.broker.handlers import (  # noqa: F401
    api_versions,
    create_partitions,
    create_topics,
    delete_topics,
    describe_cluster,
    describe_configs,
    describe_producers,
    fetch,
    find_coordinator,
    init_producer_id,
    list_offsets,
    metadata,
    produce,
)
