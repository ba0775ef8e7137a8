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
optional extras), ``bench`` (every benchmark) and ``cli``; ``import logstore`` loads none of them, nor
the engine itself: each public name here loads its module on first use, so a program (the command
line's ``logstore --version``) that needs none of them does not pay for them.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what the names below are, for type checkers (at run time each loads on first use)
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

# Where each public name lives: ``import logstore`` loads none of the engine (the command line's
# ``logstore --version`` must not pay for it); ``from logstore import LogManager`` loads its module on
# first use (PEP 562).
_ERRORS = ("CorruptCheckpointError", "CorruptDataError", "CorruptIndexError", "CorruptRecordError", "InvalidConfigError",
           "InvalidPartitionsError", "InvalidRecordError", "InvalidTopicError", "LockedError", "LogFailedError",
           "LogSegmentOffsetOverflowError", "LogStoreError", "OffsetOutOfRangeError", "ReadOnlyError",
           "RecordTooLargeError", "RequestError", "ShutdownError", "StorageError", "StoreClosedError",
           "TopicExistsError", "UnknownTopicOrPartitionError")
_MODULES = {
    **dict.fromkeys(("Clock", "ManualClock", "SystemClock"), ".clock"), "LogConfig": ".config",
    **dict.fromkeys(_ERRORS, ".errors"), "FileSystem": ".fs", "Log": ".log.log", "LogManager": ".manager.log_manager",
    "AppendInfo": ".records.batching", "Record": ".records.decoder",
    **dict.fromkeys(("DelayedOperation", "DelayedOperationPurgatory"), ".timer.purgatory"),
    **dict.fromkeys(("ScheduledTask", "Scheduler"), ".timer.scheduler"), "SystemTimer": ".timer.system_timer",
    "TimerTask": ".timer.timing_wheel",
}


def __getattr__(name: str) -> object:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULES))


__all__ = [
    "AppendInfo", "Clock", "CorruptCheckpointError", "CorruptDataError", "CorruptIndexError",
    "CorruptRecordError", "DelayedOperation", "DelayedOperationPurgatory", "FileSystem", "InvalidConfigError", "InvalidPartitionsError", "InvalidRecordError", "InvalidTopicError",
    "LockedError", "Log", "LogConfig", "LogFailedError", "LogManager", "LogSegmentOffsetOverflowError",
    "LogStoreError", "ManualClock", "OffsetOutOfRangeError", "ReadOnlyError", "Record", "RecordTooLargeError",
    "RequestError", "ScheduledTask", "Scheduler", "ShutdownError", "StorageError", "StoreClosedError",
    "SystemClock", "SystemTimer", "TimerTask", "TopicExistsError", "UnknownTopicOrPartitionError", "__version__",
]
