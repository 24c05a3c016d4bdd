"""The pipeline's query: the `format("oncelog")` source (read_committed) -> the transform
(functions, or --sql over the view `source`) -> the `format("oncelog")` exactly-once sink
or, for --sink iceberg:NAMESPACE.TABLE, the `format("oncelog-iceberg")` one, with Spark's
checkpoint holding the progress. The transform's result is reduced to the Kafka sink's
columns (an Iceberg sink takes all of them) and checked before the query starts. A last
transform may return several outputs, `{topic: DataFrame}`: they become one stream with a
`topic` column, written by one query, so in batch mode each micro-batch reaches every
topic at once. Update output mode goes through `foreachBatch`, each micro-batch written
by the same sink as the micro-batch it is (option microBatchId).

Driver only: each transform function is called once here, to build the plan; a transform
given as a file is shipped to executors with `SparkContext.addPyFile`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from oncelog.spark.iceberg.options import FORMAT_NAME as ICEBERG_FORMAT_NAME
from oncelog.spark.pipeline.checks import TransformReference
from oncelog.spark.pipeline.failure import one_line, raised_at, spark_error_line
from oncelog.spark.pipeline.spec import SOURCE_VIEW, PipelineError, PipelineSpec, sink_options, source_options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

FORMAT_NAME = "oncelog"
# The columns the sink reads from the transform's result; any other column is dropped.
SINK_COLUMNS = ("key", "value", "headers", "partition", "topic")


def build_output(spark: SparkSession, spec: PipelineSpec, transforms: Sequence[TransformReference]) -> DataFrame:
    """The transformed stream, reduced to the sink's columns; checked before it starts."""
    from pyspark.errors import PySparkException
    from pyspark.sql import DataFrame

    source = build_source(spark, spec)
    if spec.sql is not None:
        source.createOrReplaceTempView(SOURCE_VIEW)
        try:
            result = spark.sql(spec.sql)
        except PySparkException as error:
            raise PipelineError(f"--sql: {spark_error_line(str(error))}") from None
    else:
        result = source
        for transform in transforms:
            if transform.file is not None:
                spark.sparkContext.addPyFile(transform.file)
            function = transform.load()
            try:
                result = function(result)
            except Exception as error:  # noqa: BLE001 (the user's code, on the driver, building the plan)
                where = raised_at(error)
                raise PipelineError(
                    f"--transform {transform.name} raised while building the query"
                    f"{f' (at {where})' if where else ''}: {one_line(error)}"
                ) from None
            if isinstance(result, dict) and transform is transforms[-1]:
                return several_outputs(result, spec, transform.name)
            if not isinstance(result, DataFrame):
                raise PipelineError(
                    f"--transform {transform.name} returned {type(result).__name__}, not a DataFrame"
                    + (" (only the last transform may return {topic: DataFrame})" if isinstance(result, dict) else "")
                )
    return sink_columns(result, spec)


def source_scans(output: DataFrame) -> int:
    """How many times the plan reads its stream: a transform with several outputs (or a
    self-join) reads the source once for each, and Spark's numInputRows counts every read.
    1 when the plan reads other streams as well (a transform's own readStream): then which
    rows Spark counted twice cannot be told apart."""
    try:
        leaves = output._jdf.queryExecution().analyzed().collectLeaves()
        nodes = [leaves.apply(i) for i in range(leaves.size())]  # one py4j call per leaf
        streams = [node for node in nodes if node.nodeName().startswith("StreamingRelation")]
    except Exception:  # noqa: BLE001 (a plan py4j cannot walk: count as Spark does)
        return 1
    if not streams or not all(stream.equals(streams[0]) for stream in streams[1:]):
        return 1
    return len(streams)


def nondeterministic_warning(output: DataFrame, spec: PipelineSpec) -> str | None:
    """Partition mode is exactly once only if a micro-batch run again gives each task the
    rows it gave the first time (docs/spark.md, "Determinism, shown"). A plan Spark itself
    calls nondeterministic (rand(), uuid(), shuffle(), a UDF marked asNondeterministic)
    may not: the warning for it, else None. Spark's own state, windows, aggregations and
    current_timestamp() (fixed per micro-batch in the offset log) are deterministic."""
    if spec.sink_table is not None or spec.mode != "partition":
        return None
    try:
        deterministic = bool(output._jdf.queryExecution().analyzed().deterministic())
    except Exception:  # noqa: BLE001 (a Spark without QueryPlan.deterministic: nothing to say)
        return None
    if deterministic:
        return None
    return ("the transform's plan is nondeterministic (rand(), uuid(), shuffle() or a UDF marked so): "
            "--mode partition skips a re-run micro-batch's tasks that committed, so rows computed differently "
            "the second time can be duplicated or lost; use --mode batch")


def several_outputs(outputs: dict, spec: PipelineSpec, name: str) -> DataFrame:
    """A transform's `{topic: DataFrame}` as one stream: each output's rows given its topic
    and reduced to the sink's columns, then a union (missing columns are null)."""
    from pyspark.sql import DataFrame
    from pyspark.sql.functions import lit

    if spec.sink_table is not None:
        raise PipelineError(f"--transform {name} returned several outputs: an Iceberg sink writes one table")
    if not outputs:
        raise PipelineError(f"--transform {name} returned an empty dict: give at least one {{topic: DataFrame}}")
    merged = None
    for topic, output in outputs.items():
        if topic not in spec.sink_topics:
            raise PipelineError(f"--transform {name} returned an output for the topic {topic!r}, which --sink "
                                f"does not list (--sink {spec.sink_name})")
        if not isinstance(output, DataFrame):
            raise PipelineError(f"--transform {name} returned {type(output).__name__} for the topic {topic!r}, "
                                "not a DataFrame")
        routed = sink_columns(output.withColumn("topic", lit(topic)), spec)
        merged = routed if merged is None else merged.unionByName(routed, allowMissingColumns=True)
    assert merged is not None
    return merged


def build_source(spark: SparkSession, spec: PipelineSpec) -> DataFrame:
    reader = spark.readStream.format(FORMAT_NAME)
    for key, value in source_options(spec).items():
        reader = reader.option(key, value)
    return reader.load()


def sink_columns(result: DataFrame, spec: PipelineSpec) -> DataFrame:
    """Keep what the Kafka sink writes: value (required, string or binary), key, headers,
    partition, topic. Everything else (offset, timestamp...) is dropped. A `topic` column
    routes each row to one of --sink's topics; a null, or a source topic (the source's
    own column, passed through: the pipeline never writes its source), means the first.
    Without one, --sink must name one topic. An Iceberg sink writes every column, checked
    against the table (created from them when missing) before the query starts."""
    from pyspark.sql.functions import col, lit, when
    from pyspark.sql.types import BinaryType, StringType

    if not result.isStreaming:
        raise PipelineError(
            f"the transform ({spec.describe_transform()}) returned a batch DataFrame: build it from "
            f"the source DataFrame (or the view {SOURCE_VIEW!r})"
        )
    if spec.sink_table is not None:
        check_iceberg_table(result, spec)
        return result
    types = {f.name: f.dataType for f in result.schema.fields}
    if "value" not in types:
        raise PipelineError(
            f"the transform's result has no value column (columns: {', '.join(types) or 'none'}); "
            "the sink writes value, and key, headers, partition when present"
        )
    if not isinstance(types["value"], (BinaryType, StringType)):
        raise PipelineError(
            f"the transform's value column is {types['value'].simpleString()}; make it string or binary "
            "(e.g. to_json(struct(...)) AS value)"
        )
    if "topic" in types:
        if not isinstance(types["topic"], StringType):
            raise PipelineError(f"the transform's topic column is {types['topic'].simpleString()}; make it a "
                                f"string naming one of --sink's topics ({spec.sink_name})")
        result = result.withColumn("topic", when(col("topic").isNull() | col("topic").isin(*spec.source_topics),
                                                 lit(spec.sink_topic)).otherwise(col("topic")))
    elif len(spec.sink_topics) > 1:
        raise PipelineError(f"--sink names {len(spec.sink_topics)} topics, but the transform's result has no topic "
                            "column to choose among them (or return {topic: DataFrame} from the last transform)")
    return result.select(*[name for name in SINK_COLUMNS if name in types])


def check_iceberg_table(result: DataFrame, spec: PipelineSpec) -> None:
    """The transform's columns against the Iceberg table, as the sink's first micro-batch
    will check them (creating the table from them when it is missing and
    createTableIfMissing allows), so that a mismatch is one line before the query starts."""
    from oncelog.spark.iceberg.options import IcebergSinkError, parse_iceberg_options
    from oncelog.spark.iceberg.table import open_table

    if not result.schema.fields:
        raise PipelineError(f"the transform ({spec.describe_transform()}) returned no columns")
    try:
        open_table(parse_iceberg_options(sink_options(spec)), result.schema)
    except IcebergSinkError as error:
        raise PipelineError(f"--sink {spec.sink_name}: {error}") from None
    except Exception as error:  # noqa: BLE001 (the catalog's, or Arrow's for a type it cannot hold)
        raise PipelineError(f"--sink {spec.sink_name}: {one_line(error)}") from None


def start_query(output: DataFrame, spec: PipelineSpec) -> StreamingQuery:
    options = sink_options(spec)
    if spec.output_mode == "update":
        # A Python data source's streaming sink cannot take update mode (Spark asks for
        # SupportsStreamingUpdateAsAppend): each micro-batch is written by a batch write
        # that is that micro-batch of this query (option microBatchId).
        writer = output.writeStream.foreachBatch(MicroBatchWrite(options)).option(
            "checkpointLocation", spec.checkpoint_location)
    else:
        writer = output.writeStream.format(ICEBERG_FORMAT_NAME if spec.sink_table is not None else FORMAT_NAME)
        for key, value in options.items():
            writer = writer.option(key, value)
    writer = writer.outputMode(spec.output_mode)
    if spec.trigger.kind == "available-now":
        writer = writer.trigger(availableNow=True)
    elif spec.trigger.kind == "once":
        writer = writer.trigger(once=True)
    else:
        writer = writer.trigger(processingTime=f"{spec.trigger.interval_ms} milliseconds")
    if spec.name:
        writer = writer.queryName(spec.name)
    return writer.start()


class MicroBatchWrite:
    """foreachBatch's function: micro-batch `batch_id` through the oncelog sink with these
    sink options (the query's checkpointLocation among them), as the same micro-batch of
    the query (option microBatchId): update output mode's way into the sink."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        writer = batch.write.format(FORMAT_NAME).mode("append")
        for key, value in self.options.items():
            writer = writer.option(key, value)
        writer.option("microBatchId", str(batch_id)).save()
