"""Errors the oncelog Spark source raises. Each message names the option, topic or
partition it is about, because Spark shows it to the user wrapped in a Python traceback."""

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
