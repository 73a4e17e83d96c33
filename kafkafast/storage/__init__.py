"""Partition logs on disk: segments, indexes, the writer `Log`, `LogReader`, `LogManager`.

File I/O only (no asyncio, sockets or threads). Formats are documented in the classes that
write them: `LogSegment`, `OffsetIndex`, `TimeIndex`, `ProducerStateManager`,
`LeaderEpochCache`, `LogManager` (checkpoints, clean-shutdown marker).
"""
from kafkafast.storage.config import TOPIC_CONFIG_DEFAULTS, LogConfig
from kafkafast.storage.log import AppendResult, Log
from kafkafast.storage.log_manager import LogManager
from kafkafast.storage.partition_state import FIELDS, PartitionState
from kafkafast.storage.reader import LogReader, ReadResult

__all__ = ["TOPIC_CONFIG_DEFAULTS", "LogConfig", "AppendResult", "Log", "LogManager", "FIELDS",
           "PartitionState", "LogReader", "ReadResult"]
