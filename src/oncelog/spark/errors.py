"""Errors the oncelog Spark source and the sink's KIP-939 client raise. Each message names
the option, topic or partition it is about, because Spark shows it to the user wrapped in
a Python traceback. (No imports beyond the standard library: every Python worker that
loads the source or sink loads this.)"""

from __future__ import annotations


class SourceError(Exception):
    """Base class of the source's errors."""


class SourceOptionError(SourceError, ValueError):
    """An option is missing, unknown, or has a value the source cannot use."""


class BrokerUnreachable(SourceError):
    """No answer from kafka.bootstrap.servers (metadata or ListOffsets) in time."""


class TopicNotFound(SourceError):
    """A topic or partition named by `subscribe` or `assign` does not exist."""


class DataLoss(SourceError):
    """Offsets the query must read are gone: deleted by retention, a deleted topic or
    partition, or offsets that went backwards. Raised only when failOnDataLoss is true."""


class ReadStalled(SourceError):
    """An executor made no progress towards a range's end offset for
    kafkaConsumer.pollTimeoutMs."""


class TwoPhaseError(Exception):
    """A KIP-939 call (oncelog.spark.sink.twophase) failed with an error that retrying will not fix."""


class TwoPhaseCommitUnavailable(TwoPhaseError):
    """The cluster cannot keep a prepared transaction for an external decision."""


class ClusterUnreachable(TwoPhaseError):
    """No broker of kafka.bootstrap.servers answered in time."""
