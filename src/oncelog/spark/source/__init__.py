"""The source, `format("oncelog")`: Kafka topics read into Spark batch and streaming queries
through PySpark's Python Data Source API.

- data_source: `OncelogDataSource` and its readers (the driver's planning, the executors'
  `read()`); its writers are the Kafka sink's (oncelog.spark.sink);
- options: the source's options, parsed into a frozen `SourceOptions`;
- offsets: offsets on the driver, what the cluster has and how far a micro-batch reads;
- ranges: one task reading one partition's offset range, on an executor;
- rows: the row schema (Spark's Kafka source's columns) and the Arrow batches that carry
  the rows.
"""
