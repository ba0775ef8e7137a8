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
                     RecordTooLargeError, RequestError, StorageError, StoreClosedError, TopicExistsError,
                     UnknownTopicOrPartitionError)
from .fs import FileSystem
from .log import AppendInfo, Log
from .manager import LogManager
from .records import Record

__version__ = "0.1.0"

__all__ = [
    "AppendInfo", "Clock", "CorruptCheckpointError", "CorruptDataError", "CorruptIndexError",
    "CorruptRecordError", "FileSystem", "InvalidConfigError", "InvalidRecordError", "InvalidTopicError",
    "LockedError", "Log", "LogConfig", "LogFailedError", "LogManager", "LogSegmentOffsetOverflowError",
    "LogStoreError", "ManualClock", "OffsetOutOfRangeError", "ReadOnlyError", "Record", "RecordTooLargeError",
    "RequestError", "StorageError", "StoreClosedError", "SystemClock", "TopicExistsError",
    "UnknownTopicOrPartitionError", "__version__",
]
