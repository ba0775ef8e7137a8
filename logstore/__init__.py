"""logstore: a Kafka-style log storage engine for Python.

Partitioned, segmented, append-only logs with offsets, keys, timestamps and headers; sparse
mmap-backed offset and time indexes; crash recovery. Start with ``LogManager``::

    from logstore import LogManager, Record
    with LogManager(["data"]) as store:
        store.create_topic("orders", partitions=3)
        store.append("orders", [Record(key=b"k", value=b"v")])
"""

from .clock import Clock, ManualClock, SystemClock
from .config import LogConfig
from .errors import (CorruptCheckpointError, CorruptDataError, CorruptIndexError, CorruptRecordError,
                     InvalidConfigError, InvalidRecordError, InvalidTopicError, LockedError, LogFailedError,
                     LogSegmentOffsetOverflowError, LogStoreError, OffsetOutOfRangeError, ReadOnlyError,
                     RecordTooLargeError, RequestError, ShutdownError, StorageError, StoreClosedError,
                     TopicExistsError, UnknownTopicOrPartitionError)
from .fs import FileSystem
from .log import AppendInfo, Log
from .manager import LogManager
from .purgatory import DelayedOperation, DelayedOperationPurgatory
from .records import Record
from .scheduler import ScheduledTask, Scheduler
from .timer import SystemTimer
from .timing_wheel import TimerTask

__version__ = "0.1.0"

__all__ = [
    "AppendInfo", "Clock", "CorruptCheckpointError", "CorruptDataError", "CorruptIndexError",
    "CorruptRecordError", "DelayedOperation", "DelayedOperationPurgatory", "FileSystem", "InvalidConfigError", "InvalidRecordError", "InvalidTopicError",
    "LockedError", "Log", "LogConfig", "LogFailedError", "LogManager", "LogSegmentOffsetOverflowError",
    "LogStoreError", "ManualClock", "OffsetOutOfRangeError", "ReadOnlyError", "Record", "RecordTooLargeError",
    "RequestError", "ScheduledTask", "Scheduler", "ShutdownError", "StorageError", "StoreClosedError",
    "SystemClock", "SystemTimer", "TimerTask", "TopicExistsError", "UnknownTopicOrPartitionError", "__version__",
]
