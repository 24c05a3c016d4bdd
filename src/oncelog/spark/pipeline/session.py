"""The Spark session the runner starts: under spark-submit the cluster's, as it is;
otherwise a local one (`--master`, default local[*]) with oncelog's local defaults, logging
to a file under the checkpoint (`spark_log_path`) so the runner prints only its own lines.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from oncelog.spark.pipeline.spec import DEFAULT_MASTER, PipelineError, PipelineSpec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def spark_log_path(spec: PipelineSpec) -> Path:
    """Where the Spark the runner starts writes its log (warnings, failed tasks' stack
    traces): `<checkpoint>/logs/` when the checkpoint is a local directory, else the
    temporary directory. The runner itself prints one line per event."""
    name = f"spark-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    checkpoint = spec.checkpoint_location
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", checkpoint):
        return Path(tempfile.gettempdir()) / f"oncelog-pipeline-{name}"
    return Path(checkpoint) / "logs" / name


def start_session(spec: PipelineSpec, log_file: Path | None = None) -> SparkSession:
    """A session for the pipeline. Under spark-submit (PYSPARK_GATEWAY_PORT is set) the
    cluster's master and settings are used as they are; otherwise a local session
    (`--master`, default local[*]) with oncelog's local defaults, logging to `log_file`."""
    from oncelog.spark.session import register

    conf = dict(spec.spark_conf)
    app_name = spec.app_name or f"oncelog-pipeline {spec.source_topic} -> {spec.sink_name}"
    if "PYSPARK_GATEWAY_PORT" in os.environ and spec.master is None:
        from pyspark.sql import SparkSession

        builder = SparkSession.builder.appName(app_name)
        for key, value in conf.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        register(spark)
        return spark
    from oncelog.local.java import JavaNotFound
    from oncelog.spark.session import build_session

    try:
        return build_session(app_name, master=spec.master or DEFAULT_MASTER, conf=conf, log_file=log_file,
                             verbose=spec.verbose)
    except JavaNotFound as error:
        raise PipelineError(f"Spark needs Java 17+: {error}") from None
