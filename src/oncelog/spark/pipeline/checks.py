"""The checks the runner makes before Spark starts, in about a second where Spark takes ten
to start before saying the same in a long trace: the source's and the sink's options as
they will parse them, the broker and the topics (`check_cluster`), for --mode batch the
cluster's two-phase commit, and for an Iceberg sink its catalog (`check_iceberg_catalog`).
Also the transform's reference (`TransformReference`): located here, imported on the
driver once the session runs.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from oncelog.spark.pipeline.failure import one_line
from oncelog.spark.pipeline.spec import PipelineError, PipelineSpec, sink_options, source_options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# How long the broker may take to answer the start-up check before it counts as unreachable.
BROKER_CHECK_TIMEOUT_S = 10.0
BROKER_REFUSED_GRACE_S = 3.0

Transform = Callable[["DataFrame"], "DataFrame"]


@dataclass(frozen=True)
class TransformReference:
    """`--transform module:function` or `path/to/file.py:function`, found but not yet
    imported: a module may build UDFs at import time, which needs a running SparkContext."""

    name: str  # as given
    module: str
    attribute: str
    file: str | None  # the file to ship to executors, for path.py:function

    @classmethod
    def locate(cls, reference: str) -> TransformReference:
        """Before Spark starts: the syntax is right and the file or module exists."""
        target, sep, attribute = reference.rpartition(":")
        if not sep or not target or not attribute:
            raise PipelineError(f"--transform {reference!r}: use module:function or path/to/file.py:function")
        if target.endswith(".py") or os.sep in target:
            path = Path(target).expanduser().resolve()
            if not path.is_file():
                raise PipelineError(f"--transform {reference!r}: no file {str(path)!r}")
            return cls(reference, path.stem, attribute, str(path))
        try:
            found = importlib.util.find_spec(target)
        except (ImportError, ValueError) as error:
            found = None
            reason = one_line(error)
        else:
            reason = f"No module named {target!r}"
        if found is None:
            raise PipelineError(f"--transform {reference!r}: cannot import {target!r}: {reason}")
        return cls(reference, target, attribute, None)

    def load(self) -> Transform:
        """On the driver, once the session runs: import the module and find the function."""
        try:
            if self.file is not None:
                spec = importlib.util.spec_from_file_location(self.module, self.file)
                assert spec is not None and spec.loader is not None
                module = importlib.util.module_from_spec(spec)
                # Under its file name: executors import it by that name from addPyFile.
                sys.modules[self.module] = module
                spec.loader.exec_module(module)
            else:
                module = importlib.import_module(self.module)
        except Exception as error:  # noqa: BLE001 (the user's module: anything can go wrong while importing it)
            target = self.file or self.module
            raise PipelineError(f"--transform {self.name!r}: cannot import {target!r}: {one_line(error)}") from None
        function = getattr(module, self.attribute, None)
        if function is None:
            raise PipelineError(f"--transform {self.name!r}: {self.module!r} has no attribute {self.attribute!r}")
        if not callable(function):
            raise PipelineError(f"--transform {self.name!r}: {self.attribute!r} is not a function")
        return function


def check_options(spec: PipelineSpec) -> None:
    """The source's and the sink's options as they will get them, checked as they will
    check them (kafka.* names by librdkafka too), before Spark starts."""
    from oncelog.spark.errors import SourceError
    from oncelog.spark.iceberg.options import parse_iceberg_options
    from oncelog.spark.sink.options import check_client_settings, parse_sink_options
    from oncelog.spark.source.options import parse_options

    try:
        parse_options(source_options(spec), streaming=True)
    except SourceError as error:
        raise PipelineError(f"--source-option: {error}") from None
    try:
        if spec.sink_table is not None:
            parse_iceberg_options(sink_options(spec))
        else:
            check_client_settings(parse_sink_options(sink_options(spec), streaming=True))
    except SourceError as error:  # the sinks' errors derive from the source's
        raise PipelineError(f"--sink-option: {error}") from None


def check_iceberg_catalog(spec: PipelineSpec) -> None:
    """An Iceberg sink: its catalog loads (the embedded one's directory is created) and,
    with createTableIfMissing=false, has the table. The DataFrame's columns are checked
    against the table once the transform has built the plan (query.py)."""
    from oncelog.spark.iceberg.options import IcebergSinkError, parse_iceberg_options
    from oncelog.spark.iceberg.table import open_catalog

    warehouse = spec.embedded_warehouse
    if warehouse is not None:
        try:
            warehouse.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise PipelineError(f"--warehouse {warehouse}: cannot create it: {error.strerror or error}") from None
    options = parse_iceberg_options(sink_options(spec))
    where = "the embedded Iceberg catalog" if warehouse is not None else "the Iceberg catalog (--iceberg-catalog)"
    try:
        catalog = open_catalog(options)
        exists = options.create_table or catalog.table_exists(options.table)
    except IcebergSinkError as error:
        raise PipelineError(f"--iceberg-catalog: {error}") from None
    except Exception as error:  # noqa: BLE001 (any catalog: SQLAlchemy, HTTP, Glue... errors)
        raise PipelineError(f"cannot use {where}: {one_line(error)}") from None
    if not exists:
        raise PipelineError(f"--sink {spec.sink_name}: no such table in {where} (createTableIfMissing=false)")


def check_two_phase_commit(spec: PipelineSpec) -> None:
    """--mode batch: the cluster keeps prepared transactions (KIP-939), asked with the
    hand-over call the sink's tasks make, on an id of the pipeline's own; before Spark
    starts, and before anything is written."""
    from oncelog.spark.errors import TwoPhaseError
    from oncelog.spark.sink.options import parse_sink_options
    from oncelog.spark.sink.twophase import TwoPhaseClient

    options = parse_sink_options(sink_options(spec), streaming=True)
    try:
        with TwoPhaseClient(options.client, min(options.cluster_timeout_s, BROKER_CHECK_TIMEOUT_S)) as client:
            client.check_two_phase_commit()
            client.keep_prepared(f"{spec.transactional_id}-check")
    except TwoPhaseError as error:
        raise PipelineError(f"--mode batch: {error}") from None


def check_cluster(spec: PipelineSpec) -> None:
    """The broker answers and the topics exist, or a one-line PipelineError, in seconds
    (Spark would take ten seconds to start before saying the same in a long trace)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    from oncelog.client.config import librdkafka_settings

    refused_codes = (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE)
    try:
        # A Java sasl.jaas.config becomes librdkafka's settings, as the source and sink give them.
        settings: dict[str, str | int | float | bool] = dict(librdkafka_settings(
            (key[len("kafka."):], value) for key, value in spec.source_options if key.startswith("kafka.")
        ))
        # No librdkafka log lines (refused connections...): the outcome is reported as one line.
        settings.update({"bootstrap.servers": spec.bootstrap_servers, "log_level": 0})
        admin = AdminClient(settings)
    except (KafkaException, ValueError, TypeError) as error:
        raise PipelineError(f"--source-option: invalid client setting: {one_line(error)}") from None
    started = time.monotonic()
    credentials_checked = False
    while True:
        try:
            metadata = admin.list_topics(timeout=1.0)
            break
        except KafkaException as error:
            waited = time.monotonic() - started
            # A refused connection gets a short grace (a broker still starting), a slow one longer.
            refused = _error_code(error) in refused_codes
            if refused and not credentials_checked:
                credentials_checked = True
                _check_credentials(spec)
            if waited >= BROKER_CHECK_TIMEOUT_S or (refused and waited >= BROKER_REFUSED_GRACE_S):
                raise PipelineError(
                    f"cannot reach the broker at --bootstrap-server {spec.bootstrap_servers}: {one_line(error)}"
                ) from None
    topics = [("--source", topic) for topic in spec.source_topics] + [("--sink", topic) for topic in spec.sink_topics]
    for option, topic in topics:
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            raise PipelineError(
                f"{option} topic {topic!r} does not exist on {spec.bootstrap_servers} "
                f"(create it: oncelog topics create --bootstrap-server {spec.bootstrap_servers} --topic {topic})"
            )


def _check_credentials(spec: PipelineSpec) -> None:
    """librdkafka reports refused SASL credentials only in its log, then as a broker it
    cannot reach: ask with oncelog's client (the one the source's and sink's tasks use),
    which says so. Nothing when it does not tell (no SASL, or no broker answers)."""
    from oncelog.client.cluster import shared_cluster
    from oncelog.client.errors import AuthenticationFailed, ClientError
    from oncelog.spark.errors import SourceError
    from oncelog.spark.source.options import parse_options

    try:
        client = parse_options(source_options(spec), streaming=True).client
    except SourceError:
        return  # check_options reports it
    if not client.uses_sasl:
        return
    try:
        shared_cluster(client).any_connection()
    except AuthenticationFailed as error:
        raise PipelineError(f"the broker at --bootstrap-server {spec.bootstrap_servers} refused the "
                            f"kafka.sasl.* credentials: {error}") from None
    except ClientError:
        pass


def _error_code(error: Exception) -> int | None:
    from confluent_kafka import KafkaError

    return error.args[0].code() if error.args and isinstance(error.args[0], KafkaError) else None
