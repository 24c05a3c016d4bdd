"""What the Spark tests share: the pipelines they run in-process or as a driver process
(`sink_pipeline.py`, `iceberg_pipeline.py`; `pipeline_parts.py`, their source stream and
the main() both run as a driver process), a driver run killed at a pause point
(`driver_runs.py`), the source topics and read_committed reads of the Kafka sink's
output (`topics.py`), and reads of the Iceberg sink's tables (`iceberg_tables.py`)."""

from pathlib import Path

SINK_PIPELINE = Path(__file__).with_name("sink_pipeline.py")  # run as a driver process: python SINK_PIPELINE '<json>'
ICEBERG_PIPELINE = Path(__file__).with_name("iceberg_pipeline.py")
# The speculation tests' Spark settings (test_sink_speculation.py, test_iceberg_speculation.py,
# on a standalone cluster): speculate early and often, so a stalled attempt gets its copy.
SPECULATION_CONF = {
    "spark.speculation": "true",
    "spark.speculation.interval": "100ms",
    "spark.speculation.quantile": "0.5",
    "spark.speculation.multiplier": "1.5",
    "spark.speculation.minTaskRuntime": "300ms",
    "spark.task.maxFailures": "4",
}
