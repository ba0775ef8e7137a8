"""The exception hierarchy of logstore, and nothing else.

Three kinds of failure are told apart, because a caller handles each differently:

- ``CorruptDataError``: bytes on disk fail validation. The data is at fault; recovery truncates a
  torn tail left by a crash; any other damage is reported (``LogDamagedError``: the partition is
  kept as it is until an explicit repair), never returned as data.
- ``RequestError``: a request the store cannot serve (an offset out of range, an unknown topic,
  a record that breaks the topic's rules, a bad config value). Nothing was changed.
- ``StorageError``: the environment failed (an ``OSError`` from the disk, a store locked by another
  process, a log that went fail-stop after an fsync error).

Programmer misuse of the API (wrong types, impossible arguments) is not a ``LogStoreError``: it raises
``ValueError`` or ``TypeError`` naming the offending value. ``InvalidConfigError`` is both a
``RequestError`` and a ``ValueError`` because a bad config value is both.
"""

from __future__ import annotations


class LogStoreError(Exception):
    """Base of every error logstore raises on purpose. Catch this to handle all of them."""


# --- bad bytes on disk -------------------------------------------------------------------------


class CorruptDataError(LogStoreError):
    """Bytes on disk failed validation. Raised by decoders and readers; recovery catches it and
    cuts a torn tail left by a crash (any other damage makes the partition damaged:
    ``LogDamagedError``); anything else reports it to the user."""


class CorruptRecordError(CorruptDataError):
    """A record batch failed its CRC, magic or length checks. The message names the file and the
    byte position when they are known."""


class CorruptIndexError(CorruptDataError):
    """An offset or time index failed its sanity check. The owner rebuilds the index from the data
    file; indexes are derived data and never the only copy of anything."""


class LogDamagedError(CorruptDataError):
    """A partition whose files are damaged where no crash could have torn them (a corrupt batch
    below the recovery point or followed by valid data, damage on a cleanly shut-down store, a
    missing segment, a checkpoint value that contradicts the log). The loader cut nothing: the
    partition refuses reads and writes (the other partitions work) until ``logstore repair`` (or
    ``LogManager.repair``) cuts it at its first damage. ``damage`` is the loader's ``LogDamage``."""

    def __init__(self, message: str, damage=None):
        super().__init__(message)
        self.damage = damage


class CorruptCheckpointError(CorruptDataError):
    """A checkpoint or metadata file could not be parsed. A damaged recovery-point checkpoint is
    treated as absent (full recovery); damaged topic metadata is reported."""


# --- requests that cannot be served --------------------------------------------------------------


class RequestError(LogStoreError):
    """A request the store cannot serve; the store is unchanged."""


class OffsetOutOfRangeError(RequestError):
    """A read or seek below the log start offset or beyond the log end offset.

    Attributes ``offset``, ``log_start_offset`` and ``log_end_offset`` give the numbers."""

    def __init__(self, message: str, offset: int, log_start_offset: int, log_end_offset: int):
        super().__init__(message)
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class InvalidRecordError(RequestError):
    """A record was rejected at append, e.g. a record without a key on a compacted topic."""


class RecordTooLargeError(InvalidRecordError):
    """A single record is larger than the topic's ``max.message.bytes`` (or ``segment.bytes``)."""


class LogSegmentOffsetOverflowError(RequestError):
    """An offset would not fit in a segment's 32-bit relative offset; the log rolls instead."""


class UnknownTopicOrPartitionError(RequestError):
    """The named topic or partition does not exist in the store."""


class TopicExistsError(RequestError):
    """``create_topic`` was asked for a topic that already exists."""


class InvalidConfigError(RequestError, ValueError):
    """A config key is unknown or its value is invalid; the message names the key and the value."""


class InvalidTopicError(RequestError, ValueError):
    """A topic name breaks Kafka's rule: letters, digits, '.', '_' and '-', at most 249
    characters, and neither '.' nor '..'."""


# --- the environment -----------------------------------------------------------------------------


class StorageError(LogStoreError):
    """The environment failed: an ``OSError`` from the disk, usually wrapped with the path."""


class LockedError(StorageError):
    """Another process (or another store in this process) holds a data dir's ``.lock``. The message
    names the holder's pid when the lock file records one."""


class LogFailedError(StorageError):
    """A log went fail-stop after an fsync or write error (PostgreSQL's "fsyncgate" lesson: a
    failed fsync is never retried into a false success). Every later write or flush raises this;
    reopening the store runs recovery from what is durable."""


class StoreClosedError(StorageError):
    """An operation was attempted on a log or store that has been closed."""


class ShutdownError(RequestError):
    """Work was handed to a timer, scheduler or purgatory that is not running (never started, or
    shut down). Nothing was scheduled."""


class ReadOnlyError(RequestError):
    """A write was attempted on a store or log opened with ``read_only=True``."""


class DurabilityTimeoutError(StorageError, TimeoutError):
    """An ``acks="all"`` append was written but not fsynced within its timeout. The records are in
    the log (readers see them) and may still become durable; nothing is undone."""

    def __init__(self, message: str, required_offset: int, recovery_point: int):
        super().__init__(message)
        self.required_offset = required_offset
        self.recovery_point = recovery_point


class OfflineDirError(StorageError):
    """A data dir failed (an I/O error while loading it or later) and is offline: its partitions
    refuse reads and writes until the store is reopened with the dir repaired."""


class CleaningAbortedError(RequestError):
    """A cleaning round gave up because its log changed underneath (truncated, closed, a segment
    deleted by retention) or its cleaning was cancelled; nothing half-cleaned was swapped in. The
    next round starts again from the checkpointed first dirty offset."""
