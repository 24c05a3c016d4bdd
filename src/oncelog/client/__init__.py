"""A small Kafka client for moving records in bulk, as Arrow columns.

The Spark connectors read and write whole offset ranges and whole micro-batches. A
general-purpose client (librdkafka behind confluent-kafka) hands them one Python object per
record, and its transactional start-up waits on internal timers (50-500 ms per
`init_transactions`, measured). This package speaks the Kafka protocol directly, with
standard APIs only, so the connectors work against any Kafka-protocol cluster:

- `config`: `ClientConfig`, the connection settings (from librdkafka-style `kafka.*` keys).
- `connection`: one blocking TCP connection to one broker: framing, version negotiation,
  requests in flight in order.
- `cluster`: the brokers, partition leaders and coordinators of one cluster, connections
  kept per process, and the retry loop every call goes through.
- `records`: Kafka record batches to Arrow columns and back, a column at a time (numpy),
  never a Python object per record.
- `fetcher`: Fetch a partition from its leader, raw batches with the aborted
  transactions a read_committed reader must skip.
- `producer`: a transactional producer (InitProducerId, AddPartitionsToTxn, idempotent
  Produce, TxnOffsetCommit, EndTxn) sending the batches `records` builds.

Nothing here imports pyspark; pyarrow and numpy are needed by `records` only.
"""
