"""Storage: partition logs (segments, indexes, recovery, retention) and the log manager.

Public entry points: `LogManager` (all partitions of a broker), `PartitionLog` (one
topic-partition), `LeaderEpochCache` (its leader epochs), `LogConfig` (topic-level
settings) and the exceptions in `errors`.
"""

from oncelog.storage.config import TOPIC_CONFIGS, LogConfig
from oncelog.storage.errors import (
    CorruptLogError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidRecordError,
    InvalidTopicError,
    LogError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    StorageError,
    TopicExistsError,
    UnknownTopicError,
)
from oncelog.storage.leader_epoch import LeaderEpochCache
from oncelog.storage.log import AppendOrigin, AppendResult, PartitionLog, ReadResult
from oncelog.storage.manager import LogManager, TopicInfo

__all__ = [
    "TOPIC_CONFIGS",
    "AppendOrigin",
    "AppendResult",
    "CorruptLogError",
    "InvalidConfigError",
    "InvalidPartitionsError",
    "InvalidRecordError",
    "InvalidTopicError",
    "LeaderEpochCache",
    "LogConfig",
    "LogError",
    "LogManager",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "ReadResult",
    "RecordBatchTooLargeError",
    "RecordTooLargeError",
    "StorageError",
    "TopicExistsError",
    "TopicInfo",
    "UnknownTopicError",
]
