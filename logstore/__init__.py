"""logstore: a Kafka-style log storage engine for Python.

Partitioned, segmented, append-only logs with offsets, keys, timestamps and headers; sparse
mmap-backed offset and time indexes; crash recovery; retention and compaction. Start with
``LogManager``::

    from logstore import LogManager, Record
    with LogManager(["data"]) as store:
        store.create_topic("orders", partitions=3)
        store.append("orders", [Record(key=b"k", value=b"v")])

This module is the public API: it re-exports the engine's public names. The engine is in layers,
each a subpackage that imports only from those below it (docs/design.md §2, pinned by
tests/test_layering.py): the foundations here (``errors``, ``clock``, ``fs``, ``config``, and
``testing``, the file-operations seam's test double) < ``records`` < ``timer`` < ``log`` < ``cleaner``
< ``manager``. Above the engine: ``tools``, ``group``, ``server``, ``client`` and ``spark`` (the
optional extras), ``bench`` (every benchmark) and ``cli``; ``import logstore`` loads none of them.
"""

from .clock import Clock, ManualClock, SystemClock
from .config import LogConfig
from .errors import (CorruptCheckpointError, CorruptDataError, CorruptIndexError, CorruptRecordError,
                     InvalidConfigError, InvalidPartitionsError, InvalidRecordError, InvalidTopicError, LockedError,
                     LogFailedError, LogSegmentOffsetOverflowError, LogStoreError, OffsetOutOfRangeError, ReadOnlyError,
                     RecordTooLargeError, RequestError, ShutdownError, StorageError, StoreClosedError,
                     TopicExistsError, UnknownTopicOrPartitionError)
from .fs import FileSystem
from .log.log import Log
from .manager.log_manager import LogManager
from .records.batching import AppendInfo
from .records.decoder import Record
from .timer.purgatory import DelayedOperation, DelayedOperationPurgatory
from .timer.scheduler import ScheduledTask, Scheduler
from .timer.system_timer import SystemTimer
from .timer.timing_wheel import TimerTask

__version__ = "0.1.0"

__all__ = [
    "AppendInfo", "Clock", "CorruptCheckpointError", "CorruptDataError", "CorruptIndexError",
    "CorruptRecordError", "DelayedOperation", "DelayedOperationPurgatory", "FileSystem", "InvalidConfigError", "InvalidPartitionsError", "InvalidRecordError", "InvalidTopicError",
    "LockedError", "Log", "LogConfig", "LogFailedError", "LogManager", "LogSegmentOffsetOverflowError",
    "LogStoreError", "ManualClock", "OffsetOutOfRangeError", "ReadOnlyError", "Record", "RecordTooLargeError",
    "RequestError", "ScheduledTask", "Scheduler", "ShutdownError", "StorageError", "StoreClosedError",
    "SystemClock", "SystemTimer", "TimerTask", "TopicExistsError", "UnknownTopicOrPartitionError", "__version__",
]
