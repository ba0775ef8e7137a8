"""The exception hierarchy of logstore, and the rule that tells a resource shortage from a disk failure
(``is_resource_shortage``).

Three kinds of failure are told apart, because a caller handles each differently:

- ``CorruptDataError``: bytes on disk fail validation. The data is at fault; recovery truncates a
  torn tail left by a crash; any other damage is reported (``LogDamagedError``: the partition is
  kept as it is until an explicit repair), never returned as data.
- ``RequestError``: a request the store cannot serve (an offset out of range, an unknown topic,
  a record that breaks the topic's rules, a bad config value). Nothing was changed.
- ``StorageError``: the environment failed (an ``OSError`` from the disk, a store locked by another
  process, a log that went fail-stop after an fsync error). A *resource shortage*
  (``is_resource_shortage``: the process or the system ran out of descriptors or kernel memory) is
  the one kind that is not the disk's fault: the operation fails and may be retried, and nothing
  goes fail-stop or offline for it.

Programmer misuse of the API (wrong types, impossible arguments) is not a ``LogStoreError``: it raises
``ValueError`` or ``TypeError`` naming the offending value. ``InvalidConfigError`` is both a
``RequestError`` and a ``ValueError`` because a bad config value is both.
"""

from __future__ import annotations

import errno


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

    def __init__(self, message: str, damage: object = None) -> None:
        super().__init__(message)
        self.damage = damage


class CorruptSnapshotError(CorruptDataError):
    """A producer-state snapshot failed its CRC, version or range checks. The message names the
    file. The log falls back to an older snapshot (or the log start) and replays the log after it:
    snapshots are derived data."""


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


class InvalidTimestampError(InvalidRecordError):
    """A record's timestamp is further from the append time than the topic's
    ``message.timestamp.before.max.ms`` / ``message.timestamp.after.max.ms`` allow (CreateTime)."""


class CodecUnavailableError(RequestError):
    """A batch uses a codec (snappy, lz4, zstd) whose library is not installed; the message names
    the extra to install. The batch is intact: it is never taken for corrupt."""


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


class InvalidPartitionsError(RequestError, ValueError):
    """A partition count a topic cannot take: ``create_partitions`` to a count not above the
    topic's (Kafka's INVALID_PARTITIONS: partitions are only ever added), or above the limit."""


class InvalidProducerEpochError(RequestError):
    """A producer batch or transaction marker carries an epoch lower than the one the partition
    knows for that producer id (Kafka's INVALID_PRODUCER_EPOCH, 47): a fenced, older producer."""


class InvalidTxnStateError(RequestError):
    """A producer's append contradicts its transaction on the partition, e.g. a non-transactional
    batch while its transaction is open (Kafka's INVALID_TXN_STATE, 48)."""


class TransactionCoordinatorFencedError(RequestError):
    """A transaction marker written by a coordinator epoch older than the one the partition last
    saw for that producer (Kafka's TRANSACTION_COORDINATOR_FENCED, 52): a stale coordinator."""


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


class ResourceShortageError(StorageError):
    """The process ran out of descriptors (``ulimit -n``) or kernel memory in the middle of an
    operation (``is_resource_shortage``). The operation failed and changed nothing durable that it
    claims; retry it once the shortage is over. No log went fail-stop and no dir went offline."""


class StoreClosedError(StorageError):
    """An operation was attempted on a log or store that has been closed."""


class ShutdownError(RequestError):
    """Work was handed to a timer, scheduler or purgatory that is not running (never started, or
    shut down). Nothing was scheduled."""


class BufferExhaustedError(RequestError, TimeoutError):
    """A durable append that returns a future (``append_future``, ``append_async``) found the store's
    limit of outstanding futures (``logstore.durable.max.pending.appends``) reached and no slot freed
    within its timeout (Kafka's producer: ``BufferExhaustedException``). Nothing was appended."""


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


# --- resource shortages --------------------------------------------------------------------------

# Out of descriptors (the process's ``ulimit -n``, the system's table), of kernel memory for a
# mapping or a buffer. None of them says anything about the disk, and no fsync or write reports them
# for lost data (fsync reports EIO, ENOSPC, EDQUOT, EROFS, EINVAL; msync's ENOMEM means "not
# mapped", which writes nothing back): a call that failed with one of them did not run, so it can be
# run again without passing off unsynced data as synced.
RESOURCE_SHORTAGE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})


def is_resource_shortage(exc: BaseException | None) -> bool:
    """Whether ``exc`` is an ``OSError`` saying the process ran out of a resource
    (``RESOURCE_SHORTAGE_ERRNOS``: descriptors, kernel memory) rather than that the disk failed, or
    an error of logstore raised *from* one (``raise ... from``; an error raised while handling one
    is judged by its own errno). Such an error fails the operation, which may be retried once the
    resource is back; it never makes a log fail-stop or a data dir go offline."""
    for _ in range(8):  # a short chain: StorageError from OSError, at most a few
        if exc is None:
            return False
        if isinstance(exc, OSError):
            return exc.errno in RESOURCE_SHORTAGE_ERRNOS
        exc = exc.__cause__
    return False
