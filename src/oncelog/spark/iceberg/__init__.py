"""The Iceberg sink, `format("oncelog-iceberg")`: exactly once from Spark into Apache Iceberg
tables, through pyiceberg (no JVM Iceberg runtime). See docs/iceberg.md.

- data_source: `OncelogIcebergDataSource`, the name Spark finds (no pyiceberg import);
- options: the sink's options (`IcebergSinkOptions`) and its errors;
- writers: the writers Spark calls, `stream_writer()` and `batch_writer()`;
- table: the driver's catalog and table before the tasks write;
- files: a task attempt's rows as Parquet data files, on an executor;
- commit: the driver's one snapshot per micro-batch, committed at most once, and the
  cleanup of files no snapshot references.
"""
