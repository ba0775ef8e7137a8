"""``Log``: one partition, a sequence of segments with offsets.

Offsets: ``log_start_offset`` is the first readable offset, ``log_end_offset`` the next one to be
assigned, ``recovery_point`` the first offset not known to be fsynced (everything below it survives a
power loss). ``append`` assigns offsets and writes to the active segment (the page cache: it survives a
process crash, not a power loss); ``flush`` fsyncs and only then advances the recovery point.

The log holds collaborators that own a responsibility each: the ``LocalLog`` (the segment list and
every file operation on it), the ``AppendCombiner`` (one-record appends handed to the append that
holds the lock) and, once set or first needed, the ``LogWaits`` (reads that wait for data, appends
that wait for an fsync). The log keeps the offsets, the locks, the fail-stop rule and the policies,
and moves the offsets before or after the files change, whichever keeps readers from ever seeing a
hole.

Concurrency: one lock serialises appends, rolls and truncation; a second serialises flushes, so an
fsync never blocks appends. Readers take no lock: they read a snapshot of the segment list
(``LocalLog.view``) and of the offsets, and data with ``pread`` bounded by a size snapshot. What can
change underneath, and what a read does:

- a concurrent truncation cuts (and rewrites) bytes of the snapshot: the read waits for it to finish
  and retries on a fresh snapshot (``truncations`` tells it from damage on disk);
- retention or a compaction swap deletes or closes a segment of the snapshot: retry on the new list
  (``OffsetOutOfRangeError`` when the offset itself is gone);
- a read-only view's files are renamed or removed by the writing process: ``refresh`` re-reads the
  directory (``local_log.retry_while_renamed``) and the read retries;
- an index entry lies (a flipped byte): ``CorruptIndexError`` from the segment's checked lookup; a
  writable log rebuilds that segment's indexes, a read-only view scans without them, and the read
  retries (the lazy scans resume after the last batch they yielded).

Failure: an ``OSError`` from an fsync makes the log fail-stop (``LogFailedError`` on every later write
or flush; reopening recovers from what is durable). A failed write is cut back to the last complete
batch when possible, and fail-stop otherwise; a roll on a full disk changes nothing (``StorageError``).
A resource shortage (out of descriptors: ``errors.is_resource_shortage``) is never fail-stop: a flush,
roll or deletion that meets one raises ``ResourceShortageError`` and may be retried (a flush that could
not open a file did not fsync it: the recovery point stays).
Damage the loader found (``damage.LogDamage``) makes reads and writes raise ``LogDamagedError`` until
``repair`` cuts the log at its first damage (``damage.plan_repair``, ``damage.apply_repair``).
"""

from __future__ import annotations

import bisect
import errno
import logging
import os
import threading
from concurrent.futures import Future
from functools import partial
from itertools import chain, starmap
from typing import Any, Callable, Iterator, NamedTuple, Sequence, TypeVar, cast

from ..clock import Clock
from ..config import LogConfig
from ..errors import (BufferExhaustedError, CorruptIndexError, CorruptRecordError, DurabilityTimeoutError,
                      LogDamagedError, LogFailedError, OffsetOutOfRangeError, ReadOnlyError, ResourceShortageError,
                      StorageError, StoreClosedError, is_resource_shortage)
from ..fs import FileSystem
from ..records import control
from ..records.batching import AppendInfo, Batch, PreparedAppend, ProducerBatch, encode_records, small_batch_plan
from ..records.columns import ColumnBatch, ColumnTaker, take_columns
from ..records.decoder import (CONTROL, HEADER_BYTES, RECORD_OVERHEAD_BYTES, BatchHeader, ProducerFields, Record,
                               RecordBatch, read_header)
from ..records.encoder import assign_base_offset, encode_marker_batch, encode_one
from ..records.fetch import take_records
from .append_combiner import COMBINED_FLUSH_MESSAGES, AppendCombiner
from .damage import RepairPlan, apply_repair, plan_repair
from .loader import load_log
from .local_log import LocalLog, View, retry_while_renamed
from .producer_snapshot import ProducerSnapshots, iter_producer_batches, list_snapshots
from .producer_state import CompletedTxn, ProducerStateTable
from .retention import RetentionDecision, RetentionResult, plan_retention
from .segment import CLEANED_SUFFIX, LogSegment
from .txn_filter import AbortedFilter
from .txn_index import AbortedTxn, TxnIndexEntry, collect_aborted
from .durable_futures import DurableFutures, acquire_slot_async
from .waits import (DEFAULT_DURABLE_TIMEOUT_MS, MAX_TIMEOUT_MS, LogWaits, check_timeout, check_wait, durable_acks,
                    read_or_wait)

logger = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 1 << 20
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
READ_ONLY_READ_ATTEMPTS = 10
"""How often a read-only view's read starts again when the writer's retention or compaction swapped
the segments it was reading (each time after re-reading the segment list)."""
READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
ISOLATION_LEVELS = (READ_UNCOMMITTED, READ_COMMITTED)


class ReadResult(NamedTuple):
    """What ``Log.fetch`` returns: the records, the offset to read from next (past markers and
    aborted data that end the range, so a reader never stalls at a marker), the high watermark (the
    log end offset: one replica), the last stable offset, and the aborted transactions whose data
    may lie in the range returned (read_committed; [] for read_uncommitted)."""

    records: list[Record]
    next_offset: int
    high_watermark: int
    last_stable_offset: int
    aborted: list[AbortedTxn]


class ColumnsResult(NamedTuple):
    """What ``Log.fetch_columns`` returns: ``ReadResult`` with the records as ``ColumnBatch``es
    (``batches``) instead of ``Record`` tuples."""

    batches: list[ColumnBatch]
    next_offset: int
    high_watermark: int
    last_stable_offset: int
    aborted: list[AbortedTxn]


_R = TypeVar("_R", ReadResult, ColumnsResult)


def check_isolation(isolation: str) -> None:
    """Raise ``ValueError`` naming ``isolation`` unless it is one of ``ISOLATION_LEVELS``."""
    if isolation not in ISOLATION_LEVELS:
        raise ValueError(f"isolation must be one of {', '.join(ISOLATION_LEVELS)}, got {isolation!r}")


def read_limits(offset: Any, max_bytes: int, max_records: int | None) -> int:
    """Check a read's ``offset``, ``max_bytes`` and ``max_records`` (TypeError/ValueError naming the
    value); returns ``max_records`` with None as no limit."""
    if not isinstance(offset, int) or isinstance(offset, bool):
        raise TypeError(f"offset must be an int, got {offset!r}")
    if max_bytes < 0:
        raise ValueError(f"max_bytes must be >= 0, got {max_bytes!r}")
    if max_records is None:
        return 2**62
    if max_records < 1:
        raise ValueError(f"max_records must be >= 1, got {max_records!r}")
    return max_records


class Log:
    """One partition of a topic: ``append``, ``read``, ``roll``, ``flush``, ``truncate_to`` and
    ``delete_records``. Open it through ``LogManager.get_log`` (which persists its checkpoints), or
    directly with ``Log(dir_path, config, ...)`` for a standalone partition."""

    def __init__(self, dir_path: str, config: LogConfig, *, fs: FileSystem, clock: Clock,
                 recovery_point: int = 0, log_start_offset: int = 0, clean_shutdown: bool = False,
                 read_only: bool = False, topic: str | None = None, partition: int | None = None) -> None:
        self.dir_path = dir_path
        self.topic = topic
        self.partition = partition
        self.read_only = read_only
        self._fs = fs
        self._clock = clock
        self._lock = threading.RLock()
        self._flush_lock = threading.Lock()
        self._failure: BaseException | None = None
        self._closed = False
        self.on_checkpoint_needed: Callable[["Log"], None] | None = None
        # The key of this partition in the purgatories, and the waits (set by the LogManager; a
        # standalone log makes its own on the first wait).
        # (Any: a store's logs have ``(topic, partition)``, ``tuple[str, int]``; a standalone one its dir.)
        self.key: Any = (topic, partition) if topic is not None else dir_path
        self.on_truncated: Callable[["Log", int], None] | None = None  # the cleaner lowers its checkpoint
        self.truncations = 0  # truncate_to calls so far: a read that saw torn bytes checks it
        self.waits: LogWaits | None = None
        self._own_waits = False
        # How segments deleted by retention are removed: None removes them at once; the LogManager
        # schedules the removal after file.delete.delay.ms so readers holding them finish.
        self.schedule_file_delete: Callable[[Sequence[LogSegment], int], None] | None = None
        load = partial(load_log, fs, clock, dir_path, config, recovery_point=recovery_point,
                       log_start_offset=log_start_offset, clean_shutdown=clean_shutdown, read_only=read_only)
        loaded = retry_while_renamed(dir_path, clock, load) if read_only else load()  # a writer renames meanwhile
        self.load_problems, self.damage, self._orphan_indexes = loaded.problems, loaded.damage, loaded.orphan_indexes
        self._local = LocalLog(dir_path, config, fs, clock, loaded.segments)
        self.log_end_offset = loaded.log_end_offset
        self.recovery_point = loaded.recovery_point
        self.log_start_offset = loaded.log_start_offset
        self.last_flush_ms = clock.time_ms()
        self._idle_mark = -1  # the end offset seen by the last ``release_idle_descriptors``
        self._small_plan = small_batch_plan(config)  # the config's view of one-record appends
        # The producers and open transactions of this partition (changed under the lock), as the
        # loader's pass 7 rebuilt them from the producer snapshots (empty without any).
        self.producer_state = loaded.producer_state
        self._producers_stale = False  # a read-only view's refresh lost a segment while following them
        # The snapshot files' writing rules (a writer's); what the load found. A read-only view
        # writes none: it follows the writer's appends in ``refresh``.
        producer_load = loaded.producer_load
        # (A damaged log's snapshots were not read: its repair reloads them, removing those above the cut.)
        self._snapshots = None if read_only else ProducerSnapshots(
            fs, dir_path, loaded.snapshot_offsets, producer_load.newest_flagged if producer_load else False)
        # Whether a segment may hold a ``.txnindex``: until one does, ``aborted_transactions`` is [] at once.
        self._txn_indexes = any(segment.txn_index.present is not False for segment in loaded.segments)
        # One-record appends handed to the append holding the lock.
        self._combiner = AppendCombiner(self._lock, clock, self._write_one, self._wake_readers, self._flush_rounds,
                                        self.durable_outcome)

    # --- state -----------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return os.path.basename(self.dir_path)

    @property
    def config(self) -> LogConfig:
        """The topic's config, held by the ``LocalLog``; ``LogManager.alter_topic_config`` replaces it."""
        return self._local.config

    @config.setter
    def config(self, config: LogConfig) -> None:
        self._local.config = config
        self._small_plan = small_batch_plan(config)

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        """A snapshot of the segments, oldest first; the last is the active segment."""
        return self._local.segments

    @property
    def active_segment(self) -> LogSegment:
        return self._local.segments[-1]

    @property
    def size_bytes(self) -> int:
        return sum(segment.size_bytes for segment in self._local.segments)

    @property
    def last_stable_offset(self) -> int:
        """The first offset a read_committed reader may not read yet: the first offset of the oldest
        open transaction (never below the log start offset), else the log end offset. Read without a
        lock: the end offset first, then the first unstable offset, the reverse of the order in which
        appends publish them (see ``_write_producer_batches``, ``_write_marker``)."""
        end = self.log_end_offset
        first = self.producer_state.first_unstable_offset
        if first is None or first >= end:
            return end
        return max(first, self.log_start_offset)

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction, or None when none is open."""
        return self.producer_state.first_unstable_offset

    @property
    def unflushed_messages(self) -> int:
        return self.log_end_offset - self.recovery_point

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def failed(self) -> bool:
        """True once the log went fail-stop (an fsync or undo error); only a reopen recovers it."""
        return self._failure is not None

    def _check_writable(self) -> None:
        if self._closed:
            raise StoreClosedError(f"log {self.name} is closed")
        if self.read_only:
            raise ReadOnlyError(f"log {self.name} is open read-only")
        if self._failure is not None:
            raise LogFailedError(f"log {self.name} failed earlier ({self._failure}); "
                                 "reopen the store to recover from what is durable") from self._failure
        self.check_not_damaged()

    def writable_now(self) -> bool:
        """Whether an append could write now (open, writable, not failed, not damaged)."""
        return not (self._closed or self.read_only or self._failure is not None or self.damage is not None)

    def check_not_damaged(self) -> None:
        """Raise ``LogDamagedError`` while the log is damaged (reads and writes are refused)."""
        if self.damage is not None:
            raise self.damaged_error()

    def damaged_error(self) -> LogDamagedError:
        """The error reads and writes of this damaged log raise (naming the repair command)."""
        command = (f"logstore repair {self.topic} --partition {self.partition}" if self.topic is not None
                   else "Log.repair()")
        assert self.damage is not None, "damaged_error of a log that is not damaged"
        return self.damage.error(self.name, command)

    def _fail(self, exc: BaseException) -> LogFailedError:
        self._failure = exc
        logger.error("log %s is now fail-stop: %s", self.name, exc)
        return LogFailedError(f"log {self.name} failed: {exc}; reopen the store to recover")

    def _fail_unless_shortage(self, exc: OSError, doing: str) -> StorageError:
        """``_fail``, unless ``exc`` is a resource shortage (``is_resource_shortage``: out of
        descriptors or memory): then the operation did not happen and may be retried, and the log
        stays writable (an fsync that did not run is not counted as done by the caller)."""
        if is_resource_shortage(exc):
            return ResourceShortageError(f"{doing} {self.name} failed for want of a resource, and may be "
                                         f"retried: {exc}")
        return self._fail(exc)

    # --- appending -------------------------------------------------------------------------------

    def append(self, records: Sequence[Record], *, acks: int | str = 1,
               timeout_ms: int = DEFAULT_DURABLE_TIMEOUT_MS, producer: ProducerBatch | None = None) -> AppendInfo:
        """Append ``records`` and return the offsets assigned. Records without a timestamp get the
        current time. An append larger than ``max.message.bytes`` is split into several batches
        (each batch is atomic); a single record larger than that raises ``RecordTooLargeError``.

        ``acks=1`` (the default) returns once the data is written to the OS: it survives a crash of
        this process, not a power loss. ``acks="all"`` returns only once an fsync covers the records
        (the recovery point is past them); concurrent durable appends share fsyncs. If that takes
        longer than ``timeout_ms`` it raises ``DurabilityTimeoutError``: the records are appended
        and may still become durable later.

        ``producer``: the batches carry its producer block and pass the producer-state checks
        (``append_prepared``); a transactional one opens the producer's transaction here."""
        # durable_acks' own first test inline: the default costs no call (once per append)
        durable = (False if type(acks) is int and acks == 1 and type(timeout_ms) is int
                   and 0 <= timeout_ms <= MAX_TIMEOUT_MS else durable_acks(acks, timeout_ms))
        # None unless one record (of no producer) takes the short path
        info = self._append_one(records, durable, timeout_ms) if producer is None else None
        if info is None:
            info = self.append_prepared(self.prepare(records, producer))
        # (a combined durable append has waited already: its records are below the recovery point)
        if durable and info.last_offset is not None and self.recovery_point <= info.last_offset:
            self.wait_durable(info.last_offset + 1, timeout_ms)
        return info

    def _append_one(self, records: Sequence[Record], durable: bool = False,
                    timeout_ms: int = DEFAULT_DURABLE_TIMEOUT_MS) -> AppendInfo | None:
        """Append ``records`` when they are one ``Record``, as ``append_prepared(prepare(records))``
        would (the same bytes, the same checks), without its per-batch machinery: ``encode_one``
        encodes the batch with its base offset (the log end offset, again under the lock if another
        append took it meanwhile), so no header is parsed back and no offset rewritten. The rules of
        ``encode_records`` that apply to one record are the config's ``SmallBatchPlan`` and the
        checks below. None, having done nothing, when the short path does not take the records (more
        than one, a closed or failed log, a compressed topic, an invalid, unusual or too large
        record): the general path then appends them or raises.

        When another append holds the lock, the record is handed to it (``AppendCombiner``): the
        holder writes it after its own, and a ``durable`` one then waits for its flush round (it
        returns fsynced, or raises as ``wait_durable`` would after ``timeout_ms``)."""
        if ((type(records) is not list and type(records) is not tuple) or len(records) != 1
                or type(records[0]) is not Record):
            return None
        if self._closed or self.read_only or self._failure is not None or self.damage is not None:
            return None
        plan = self._small_plan  # the config's, replaced with it (the ``config`` setter)
        key, value, headers, timestamp_ms, _offset = records[0]
        if not plan.short_path or (key is None and plan.compact):
            return None  # a compressed topic; a record a compacted topic refuses
        if timestamp_ms is None or plan.log_append_time:
            timestamp_ms = now_ms = self._clock.time_ms()
        else:  # the record has its time: the clock is read only if a roll check needs it
            now_ms = None
        base = self.log_end_offset
        data = encode_one(base, key, value, headers, timestamp_ms, plan.attributes)
        if data is None or (len(data) if type(data) is bytes else sum(map(len, data))) > plan.limit_bytes:
            return None  # an unusual or invalid record, or one too large
        if plan.flush_messages < COMBINED_FLUSH_MESSAGES:  # flush.messages: each append flushes itself
            return self._append_flushing(1, self._write_one, base, data, key, value, headers, timestamp_ms, now_ms)
        combiner = self._combiner
        lock = self._lock
        if not lock.acquire(False):  # another append is writing (its pwrite let this thread run)
            return combiner.follow((base, data, key, value, headers, timestamp_ms, now_ms), durable, timeout_ms)
        try:
            info = self._write_one(base, data, key, value, headers, timestamp_ms, now_ms)
        finally:
            if combiner.pending:  # records handed over meanwhile: written before the lock goes
                combiner.release_lock()
            else:
                lock.release()
                if combiner.pending and lock.acquire(False):  # handed over as the lock went
                    combiner.release_lock()
        waits = self.waits  # _wake_readers inline: the one-record path saves the call per append
        if waits is not None:  # after publishing the end offset, outside the lock (purgatory rule)
            waits.data_arrived(self.key)
        return info

    def _append_flushing(self, records: int, write: Callable[..., AppendInfo], *args: Any) -> AppendInfo:
        """``write(*args)`` under the lock, then the flush ``flush.messages`` asks for. An append
        that will reach it takes the flush lock first (``flush`` takes the flush lock, then this
        one: an append that flushed while holding only this one could wait forever for a flush
        under way in another thread), and flushes under both, so each such append has its own
        fsync. One that did not expect to reach it (another append came first) flushes afterwards."""
        flush_messages = self.config.flush_messages
        if self.log_end_offset + records - self.recovery_point >= flush_messages:
            with self._flush_lock, self._lock:
                info = write(*args)
                if self.unflushed_messages >= flush_messages:
                    self._flush_locked()
        elif flush_messages >= COMBINED_FLUSH_MESSAGES:  # one-record appends queued meanwhile: written too
            self._lock.acquire()
            try:
                info = write(*args)
            finally:
                self._combiner.release_lock()
        else:
            with self._lock:
                info = write(*args)
            if self.unflushed_messages >= flush_messages and self.writable_now():
                self.flush()
        self._wake_readers()
        return info

    def _write_one(self, base: int, data: Any, key: bytes | None, value: bytes | None,
                   headers: Sequence[tuple[str, bytes | None]], timestamp_ms: int, now_ms: int | None) -> AppendInfo:
        """Under the lock: write the one-record batch ``data`` (encoded for offset ``base``, again
        for the log end offset if another append came first) and publish its offset."""
        plan = self._small_plan
        if self._closed or self._failure is not None or self.damage is not None:
            self._check_writable()
        if base != self.log_end_offset:  # another append came first
            base = self.log_end_offset
            data = encode_one(base, key, value, headers, timestamp_ms, plan.attributes)
        segment = self._local.view[0][-1]
        try:
            written = type(data) is bytes and segment.append_unless_roll(
                base, timestamp_ms, data, plan.segment_bytes, plan.max_segment_ms, now_ms)
        except OSError as exc:
            self._after_write_error(segment, exc)
        if not written:  # a roll first (or a large value, written from its parts)
            segment = self._maybe_roll(len(data) if type(data) is bytes else sum(map(len, data)), timestamp_ms,
                                       base, self._clock.time_ms() if now_ms is None else now_ms)
            try:
                segment.append(base, base, timestamp_ms, data)
            except OSError as exc:
                self._after_write_error(segment, exc)
        self.log_end_offset = base + 1  # flush.messages is checked once the lock is released
        # max_timestamp_ms as append_prepared reports it: at least -1 (a record's time may be lower);
        # with LogAppendTime, now_ms is the clock's (set by the caller), not None
        return AppendInfo(base, base, 1, timestamp_ms if timestamp_ms > -1 else -1, 1,
                          now_ms if plan.log_append_time else -1)  # type: ignore[arg-type]

    def prepare(self, records: Sequence[Record], producer: ProducerBatch | None = None) -> PreparedAppend:
        """Validate and encode ``records`` for ``append_prepared`` without writing anything: raises
        what ``append`` would raise for bad input. ``LogManager.append`` prepares every partition's
        records before appending any, so a rejected record appends nothing anywhere. ``producer``:
        the batches carry its producer block (the producer-state checks run at ``append_prepared``,
        under the lock)."""
        self._check_writable()
        if producer is not None and type(producer) is not ProducerBatch:
            raise TypeError(f"producer must be a ProducerBatch or None, got {producer!r}")
        now_ms = self._clock.time_ms()
        return PreparedAppend(self, encode_records(records, self.config, now_ms, self.topic or self.name, producer),
                              len(records), now_ms, producer)

    def append_prepared(self, prepared: PreparedAppend) -> AppendInfo:
        """Append what ``prepare`` encoded (once; offsets are assigned now). A producer's batches
        are first checked against the partition's producer state, under the lock:
        ``InvalidProducerEpochError`` for an epoch older than the producer's,
        ``InvalidTxnStateError`` for a non-transactional batch while its transaction is open."""
        if prepared.log is not self:
            raise ValueError(f"records prepared for {prepared.log.name} cannot be appended to {self.name}")
        batches, now_ms = prepared.take(), prepared.now_ms
        if not batches:
            return AppendInfo(None, None, 0, -1, 0)
        if prepared.producer is not None:
            return self._append_flushing(prepared.record_count, self._write_producer_batches, batches, now_ms,
                                         prepared.record_count, prepared.producer)
        return self._append_flushing(prepared.record_count, self._write_batches, batches, now_ms,
                                     prepared.record_count)

    def _write_producer_batches(self, batches: list[Batch], now_ms: int, record_count: int,
                                producer: ProducerBatch) -> AppendInfo:
        """``_write_batches`` for a producer's batches: checked against the producer state first;
        each batch is fed to it after its bytes are written and before its end offset is published,
        so a transaction it opens is unstable before any reader can see its data."""
        self._check_writable()
        state = self.producer_state
        producer_id, epoch, transactional = producer.producer_id, producer.producer_epoch, producer.transactional
        state.check_data(producer_id, epoch, transactional)
        first_offset = None
        max_timestamp = -1
        for header_bytes, parts in batches:
            header: BatchHeader = read_header(header_bytes, 0, whole=False)  # type: ignore[assignment]
            base = self.log_end_offset
            last = base + header.last_offset_delta
            segment = self._maybe_roll(header.size_bytes, header.max_timestamp, last, now_ms)
            self._before_producer_batch(base)
            assign_base_offset(header_bytes, base)
            try:
                segment.append(base, last, header.max_timestamp, [header_bytes, *parts])
            except OSError as exc:
                self._after_write_error(segment, exc)
            state.on_data(producer_id, epoch, transactional, base, last, header.max_timestamp)
            self.log_end_offset = last + 1
            first_offset = base if first_offset is None else first_offset
            max_timestamp = max(max_timestamp, header.max_timestamp)
        log_append = self.config.message_timestamp_type == "LogAppendTime"
        return AppendInfo(first_offset, self.log_end_offset - 1, record_count, max_timestamp, len(batches),
                          now_ms if log_append else -1)

    def append_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool, *,
                      timestamp_ms: int | None = None) -> int:
        """Append the COMMIT (``commit``) or ABORT marker of ``producer_id``'s transaction and return
        its offset. It closes the producer's open transaction here (a marker for a producer without
        one is appended and closes nothing: a coordinator resending its markers); an ABORT of a
        transaction that had data here is recorded for ``aborted_transactions``. Raises
        ``InvalidProducerEpochError`` for an epoch older than the producer's and
        ``TransactionCoordinatorFencedError`` for a coordinator epoch older than its last marker's;
        a newer epoch is taken. Written to the OS, as any append (``wait_durable`` for an fsync)."""
        for name, value in (("producer_id", producer_id), ("producer_epoch", producer_epoch),
                            ("coordinator_epoch", coordinator_epoch)):
            if type(value) is not int:
                raise TypeError(f"{name} must be an int, got {value!r}")
        if type(commit) is not bool:
            raise TypeError(f"commit must be a bool, got {commit!r}")
        if timestamp_ms is not None and type(timestamp_ms) is not int:
            raise TypeError(f"timestamp_ms must be an int or None, got {timestamp_ms!r}")
        info = self._append_flushing(1, self._write_marker, producer_id, producer_epoch, coordinator_epoch, commit,
                                     timestamp_ms)
        return info.first_offset  # type: ignore[return-value]

    def _write_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                      timestamp_ms: int | None) -> AppendInfo:
        """Under the lock: check, write and publish a marker. Publication order: the aborted
        transaction's index entry, then the end offset, then the first unstable offset, so a reader
        that sees the transaction decided (past the last stable offset) also sees its abort."""
        self._check_writable()
        state = self.producer_state
        state.check_marker(producer_id, producer_epoch, coordinator_epoch)
        now_ms = self._clock.time_ms()
        timestamp_ms = now_ms if timestamp_ms is None else timestamp_ms
        data = encode_marker_batch(commit, coordinator_epoch, producer_id, producer_epoch, timestamp_ms)
        header_bytes, body = bytearray(data[:HEADER_BYTES]), bytes(data[HEADER_BYTES:])
        base = self.log_end_offset
        segment = self._maybe_roll(len(data), timestamp_ms, base, now_ms)
        self._before_producer_batch(base)
        assign_base_offset(header_bytes, base)
        try:
            segment.append(base, base, timestamp_ms, [header_bytes, body])
        except OSError as exc:
            self._after_write_error(segment, exc)
        completed = state.on_marker(producer_id, producer_epoch, coordinator_epoch, commit, base, timestamp_ms,
                                    publish=False)
        if completed is not None and completed.aborted:
            self._record_aborted(completed, segment)
        self.log_end_offset = base + 1
        state.publish_first_unstable()
        return AppendInfo(base, base, 1, timestamp_ms, 1, -1)

    def _before_producer_batch(self, offset: int) -> None:
        """Under the lock, before a producer batch is written at ``offset``: the flagged snapshot
        that makes a load replay it (``ProducerSnapshots.before_producer_batch``; a dict test when
        it exists already). Nothing is written when it fails."""
        snapshots = self._snapshots
        if snapshots is not None and not snapshots.newest_flagged:
            self._write_snapshot(snapshots.before_producer_batch, offset)

    def _write_snapshot(self, rule: Callable[[int, ProducerStateTable], None], offset: int) -> None:
        """Apply a snapshot writing ``rule`` at ``offset``: a full disk or a shortage raises and may
        be retried (the files are as before: a temp file at most), another error is fail-stop."""
        try:
            rule(offset, self.producer_state)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise StorageError(f"cannot write a producer snapshot of {self.name} at offset {offset}: "
                                   f"{exc}") from exc
            raise self._fail_unless_shortage(exc, "writing a producer snapshot of") from exc

    def _record_aborted(self, completed: CompletedTxn, segment: LogSegment) -> None:
        """Add the aborted transaction ``completed``, whose marker is the last batch of ``segment``,
        to that segment's ``.txnindex``, with the last stable offset just after its marker. A write
        error is treated as one of the marker's own (the marker is cut back: nothing happened)."""
        first_unstable = self.producer_state.pending_first_unstable()  # not yet published: see _write_marker
        lso = completed.last_offset + 1 if first_unstable is None else max(first_unstable, self.log_start_offset)
        entry = TxnIndexEntry(completed.producer_id, completed.first_offset, completed.last_offset, lso)
        self._txn_indexes = True
        try:
            segment.txn_index.append(entry)
        except CorruptIndexError as exc:
            self._rebuild_txn_index(segment, exc, completed.last_offset + 1)  # the marker's entry included
        except OSError as exc:
            self._after_write_error(segment, exc)

    def _write_batches(self, batches: list[Batch], now_ms: int, record_count: int) -> AppendInfo:
        """Under the lock: write prepared ``batches`` one after another, assigning their offsets."""
        first_offset = None
        max_timestamp = -1
        self._check_writable()
        for header_bytes, parts in batches:
            # (the bytes are a whole header: never None)
            header: BatchHeader = read_header(header_bytes, 0, whole=False)  # type: ignore[assignment]
            base = self.log_end_offset
            last = base + header.last_offset_delta
            segment = self._maybe_roll(header.size_bytes, header.max_timestamp, last, now_ms)
            assign_base_offset(header_bytes, base)
            try:
                segment.append(base, last, header.max_timestamp, [header_bytes, *parts])
            except OSError as exc:
                self._after_write_error(segment, exc)
            self.log_end_offset = last + 1
            first_offset = base if first_offset is None else first_offset
            max_timestamp = max(max_timestamp, header.max_timestamp)
        log_append = self.config.message_timestamp_type == "LogAppendTime"
        return AppendInfo(first_offset, self.log_end_offset - 1, record_count, max_timestamp, len(batches),
                          now_ms if log_append else -1)

    def validate(self, records: Sequence[Record]) -> None:
        """Raise exactly what ``append(records)`` would raise for bad input (wrong types, a record
        larger than the limits, a missing key on a compacted topic), without appending anything."""
        encode_records(records, self.config, self._clock.time_ms(), self.topic or self.name)

    def _after_write_error(self, segment: LogSegment, exc: OSError) -> None:
        try:
            segment.undo_partial_write()
        except OSError as undo_exc:
            raise self._fail(undo_exc) from exc
        error = ResourceShortageError if is_resource_shortage(exc) else StorageError
        raise error(f"append to {segment.log_path} failed: {exc}") from exc

    def _maybe_roll(self, incoming_bytes: int, max_timestamp_ms: int, last_offset: int, now_ms: int) -> LogSegment:
        segment = self._local.segments[-1]
        if segment.should_roll(self.config.segment_bytes, self.config.max_segment_ms, incoming_bytes,
                               max_timestamp_ms, last_offset, now_ms):
            return self.roll()
        return segment

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset (unless the active one is empty) and
        return it. The previous segment's indexes are trimmed."""
        with self._lock:
            self._check_writable()
            active = self._local.segments[-1]
            if active.base_offset == self.log_end_offset and active.size_bytes:
                raise StorageError(f"cannot roll {self.name}: segment {self.log_end_offset} already exists")
            try:
                segment = self._local.roll(self.log_end_offset)
            except OSError as exc:
                if active.base_offset == self.log_end_offset:  # the empty active segment is gone
                    raise self._fail(exc) from exc
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                    # Out of descriptors: the roll changed nothing either; the next append tries again.
                    raise self._fail_unless_shortage(exc, "rolling") from exc
                # A full disk: the roll changed nothing; reads go on, appends once space is freed.
                raise StorageError(f"cannot roll {self.name} at offset {self.log_end_offset}: {exc}") from exc
            if self._snapshots is not None and self._snapshots.offsets:  # a partition that had producer batches
                self._write_snapshot(self._snapshots.on_roll, segment.base_offset)
            return segment

    # --- durability ------------------------------------------------------------------------------

    def flush(self) -> int:
        """fsync everything up to the log end offset, then advance the recovery point to it.
        Returns the new recovery point. An fsync error makes the log fail-stop."""
        self._check_writable()
        with self._flush_lock:
            return self._flush_locked()

    def _flush_locked(self) -> int:
        """``flush`` with the flush lock held."""
        self._check_writable()
        with self._lock:
            target = self.log_end_offset
            old_recovery_point = self.recovery_point
            view = self._local.view
        if target <= old_recovery_point:
            return self.recovery_point
        try:
            self._local.flush_from(view, old_recovery_point, lambda: self._closed)
        except OSError as exc:
            # A file that could not be opened (no descriptor left) was not fsynced: the recovery
            # point stays, and the next flush fsyncs it. An fsync error is fail-stop.
            raise self._fail_unless_shortage(exc, "flushing") from exc
        except (ValueError, TypeError) as exc:  # a segment closed underneath (the log was closed)
            raise StoreClosedError(f"log {self.name} closed during a flush") from exc
        with self._lock:
            self.recovery_point = max(self.recovery_point, min(target, self.log_end_offset))
            self.last_flush_ms = self._clock.time_ms()
        return self.recovery_point

    def wait_durable(self, required_offset: int, timeout_ms: int = DEFAULT_DURABLE_TIMEOUT_MS) -> int:
        """Block until everything below ``required_offset`` is fsynced (the recovery point covers
        it), sharing the fsync with other waiters through the group-commit flusher. Returns the
        recovery point; raises ``DurabilityTimeoutError`` after ``timeout_ms`` and ``LogFailedError``
        if the log failed meanwhile."""
        check_timeout("timeout_ms", timeout_ms)
        if self.recovery_point < required_offset:
            self._get_waits().wait_fsynced(self, required_offset, timeout_ms)
        return self.durable_outcome(required_offset, timeout_ms)

    def append_future(self, records: Sequence[Record], *,
                      timeout_ms: int = DEFAULT_DURABLE_TIMEOUT_MS) -> Future[AppendInfo]:
        """Append ``records`` now (as ``append`` with ``acks=1``: offsets assigned, written to the
        OS) and return a ``concurrent.futures.Future`` that completes with their ``AppendInfo`` once
        an fsync covers them, without a thread waiting: the group-commit flusher completes it after
        the flush round that covers the records, together with every other append of that round.
        The future's error: ``LogFailedError`` (the fsync failed: the log is fail-stop, as with
        ``wait_durable``), ``StoreClosedError`` (closed without a clean flush), or
        ``DurabilityTimeoutError`` after ``timeout_ms`` (the records stay appended and may still
        become durable). At a clean close the final flush covers them: the future completes with
        the info. It cannot be cancelled; callbacks run on the flusher thread (keep them short).

        Bad records raise here, with nothing appended, as ``append`` does. The futures outstanding
        in a store are bounded (``logstore.durable.max.pending.appends``): when none is free this
        waits for one, at most ``timeout_ms``, then raises ``BufferExhaustedError`` (nothing appended)."""
        check_timeout("timeout_ms", timeout_ms)
        futures = self._get_waits().futures
        slots = futures.slots
        if not slots.acquire(timeout_ms / 1000.0):
            raise self._buffer_exhausted(futures, timeout_ms)
        return cast("Future[AppendInfo]", self._watched_append(futures, records, timeout_ms))

    async def append_async(self, records: Sequence[Record], *,
                           timeout_ms: int = DEFAULT_DURABLE_TIMEOUT_MS) -> AppendInfo:
        """``append_future`` for asyncio: appends now, then awaits the fsync without blocking the
        event loop (``asyncio.wrap_future``); a full limit of outstanding futures is awaited too."""
        import asyncio  # (here: a program that never awaits an append does not load asyncio)

        check_timeout("timeout_ms", timeout_ms)
        futures = self._get_waits().futures
        await acquire_slot_async(futures.slots, timeout_ms, partial(self._buffer_exhausted, futures, timeout_ms))
        info: AppendInfo = await self._watched_append(futures, records, timeout_ms, asyncio.get_running_loop())
        return info

    def _watched_append(self, futures: DurableFutures, records: Sequence[Record], timeout_ms: int,
                        loop: Any = None) -> Any:
        """Append ``records`` (the caller holds a slot, which the future gives back) and watch
        them: a ``concurrent.futures.Future``, or an asyncio one of ``loop``."""
        try:
            info = self.append(records)
        except BaseException:
            futures.slots.release()
            raise
        last = info.last_offset
        return futures.watch(() if last is None else ((self, last + 1),), info, timeout_ms, loop=loop)

    def _buffer_exhausted(self, futures: DurableFutures, timeout_ms: int) -> BufferExhaustedError:
        return BufferExhaustedError(f"no durable append of {self.name} appended: {futures.slots.limit} are "
                                    f"waiting for an fsync (logstore.durable.max.pending.appends) and none "
                                    f"completed within {timeout_ms} ms")

    def durable_outcome(self, required_offset: int, timeout_ms: int) -> int:
        """After a durable wait of ``timeout_ms`` ended: the recovery point when it covers
        ``required_offset``, else ``LogFailedError`` (or closed) or ``DurabilityTimeoutError``."""
        if self.recovery_point >= required_offset:
            return self.recovery_point
        self._check_writable()
        raise DurabilityTimeoutError(
            f"records of {self.name} below offset {required_offset} were appended but not fsynced within "
            f"{timeout_ms} ms (recovery point {self.recovery_point}); they may still become durable",
            required_offset, self.recovery_point)

    def _get_waits(self) -> LogWaits:
        if self.waits is None:
            self.waits, self._own_waits = LogWaits(self.name), True
        return self.waits

    def _flush_rounds(self) -> Callable[[object], bool]:
        """``join(waiter)``: add ``waiter``, a lock its owner holds, to this log's next flush round,
        which releases it once that flush ended (False, nothing joined: no flush comes). For the
        ``AppendCombiner``'s handed-over durable appends."""
        return partial(self._get_waits().flusher.join, self)

    def _wake_readers(self) -> None:
        """Complete the reads waiting for data, once a new end offset is published (outside the
        lock: the purgatory's rule)."""
        waits = self.waits
        if waits is not None:
            waits.data_arrived(self.key)

    # --- reading ---------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int = DEFAULT_MAX_BYTES, max_records: int | None = None, *,
             min_bytes: int = 1, max_wait_ms: int = 0, isolation: str = READ_UNCOMMITTED) -> list[Record]:
        """Records with offset >= ``offset``, in order: at least one when any exists (even if it alone
        is larger than ``max_bytes``), then as many as fit in ``max_bytes`` (key, value and header
        bytes plus a small per-record overhead) and ``max_records``. Reading at the log end offset
        returns []; below the log start offset or past the end raises ``OffsetOutOfRangeError``.

        With ``max_wait_ms`` > 0 a read that finds fewer than ``min_bytes`` waits (Kafka's fetch
        wait): it returns as soon as appends bring ``min_bytes`` (batch bytes) or after
        ``max_wait_ms``, with whatever is there then (possibly nothing).

        Transaction markers are never returned. ``isolation="read_committed"`` reads only below the
        last stable offset (an offset in [LSO, LEO] gives []) and drops the data of aborted
        transactions (``fetch``, which also says where to read next)."""
        if isolation != READ_UNCOMMITTED:
            check_isolation(isolation)
            if max_wait_ms or min_bytes != 1:
                return self._read_waiting(offset, max_bytes, max_records, min_bytes, max_wait_ms, isolation)
            return self.fetch(offset, max_bytes, max_records, isolation=isolation).records
        if max_wait_ms or min_bytes != 1:
            return self._read_waiting(offset, max_bytes, max_records, min_bytes, max_wait_ms)
        if (max_records == 1 or 0 <= max_bytes < RECORD_OVERHEAD_BYTES) and type(offset) is int:
            # A point read whose batch head is cached: no segment scan at all.
            if self.log_start_offset <= offset < self.log_end_offset and not self._closed:
                record = self._local.read_one_cached(offset)
                if record is not None:
                    return [record]
        max_records = read_limits(offset, max_bytes, max_records)
        repaired = False
        # A writer in this process is waited for (its lock) before a retry; another process's swaps
        # (a read-only view beside a compacting writer) cannot be, so a view tries more often.
        for _attempt in range(READ_ONLY_READ_ATTEMPTS if self.read_only else 3):
            view, truncations = self._local.view, self.truncations
            log_end_offset, log_start_offset = self.log_end_offset, self.log_start_offset
            if self._closed:
                raise StoreClosedError(f"log {self.name} is closed")
            if offset < log_start_offset or offset > log_end_offset:
                raise self._out_of_range(offset, log_start_offset, log_end_offset)
            if offset == log_end_offset:
                return []
            try:
                return LocalLog.read(view, offset, log_end_offset, max_bytes, max_records)
            except (ValueError, TypeError, OSError, CorruptIndexError, CorruptRecordError) as exc:
                repaired = self._retry_after_read_error(exc, view, truncations, repaired)
        raise StorageError(f"log {self.name} kept changing during a read at offset {offset}")

    def _retry_after_read_error(self, exc: Exception, view: View, truncations: int, repaired: bool) -> bool:
        """A read of the snapshot ``view`` (taken when ``truncations`` was the count) failed with
        ``exc``: get ready to read again, or raise ``exc``. Returns whether a lying index has been
        rebuilt (``repaired``: once per read)."""
        segments = view[0]
        if not isinstance(exc, (CorruptIndexError, CorruptRecordError)):
            self._segment_lost(segments, exc)
            return repaired
        # Bytes cut (and perhaps written again) under the snapshot by a concurrent truncation look
        # torn, or make an index entry look wrong; damage that is really on disk is still there when
        # no truncation ran meanwhile (an even count that did not move: none under way, none
        # finished since the snapshot). A lying index is rebuilt once, then retried.
        if self._local.view is not view or self.truncations != truncations or truncations % 2:
            self._wait_for_truncation()
        elif isinstance(exc, CorruptIndexError) and not repaired:
            self._repair_indexes(segments, exc)
            return True
        else:
            raise exc
        return repaired

    def _out_of_range(self, offset: int, log_start_offset: int, log_end_offset: int) -> OffsetOutOfRangeError:
        return OffsetOutOfRangeError(f"offset {offset} is out of range for {self.name} (log start offset "
                                     f"{log_start_offset}, log end offset {log_end_offset})",
                                     offset, log_start_offset, log_end_offset)

    def _segment_lost(self, segments: Sequence[LogSegment], exc: Exception) -> None:
        """A read failed on a segment of its snapshot ``segments``: when one was deleted or closed
        under it (retention, a truncation, a compaction swap, a read-only view's refresh), or
        its file is gone (a read-only view: the writer removed it), re-read the segment list for
        a retry; any other error is raised."""
        if self.read_only and isinstance(exc, FileNotFoundError):
            self.refresh()
        elif any(segment.deleted or segment.closed for segment in segments):
            self._wait_for_truncation()
        else:
            raise exc

    def _wait_for_truncation(self) -> None:
        """Block until a truncation under way has finished (it holds the log lock throughout), so
        the retry reads a settled log instead of racing the same cut again."""
        if not self.read_only:
            with self._lock:
                pass

    def _read_waiting(self, offset: int, max_bytes: int, max_records: int | None, min_bytes: int,
                      max_wait_ms: int, isolation: str = READ_UNCOMMITTED) -> list[Record]:
        check_wait(min_bytes, max_wait_ms)
        key = self.key
        found = read_or_wait({key: (self, offset)},
                             lambda: {key: self.read(offset, max_bytes, max_records, isolation=isolation)},
                             min_bytes, max_wait_ms, None if self.read_only else self._get_waits(),
                             None if max_records is None else lambda found: len(found[key]) >= max_records,
                             isolation == READ_COMMITTED)
        return found[key]

    def fetch(self, offset: int, max_bytes: int = DEFAULT_MAX_BYTES, max_records: int | None = None, *,
              isolation: str = READ_UNCOMMITTED) -> ReadResult:
        """``read`` (no wait) with what a consumer needs besides the records (``ReadResult``): where
        to read next, past markers and aborted data that end the range (so a reader never stalls at
        a marker, even when no record is returned), the high watermark, the last stable offset and,
        for ``isolation="read_committed"``, the aborted transactions whose data may lie in what was
        returned (those with their ABORT marker at or after ``offset`` and data below the next offset)."""
        return self._fetch(offset, max_bytes, max_records, isolation, ReadResult, self._read_plain,
                           self._read_filtered)

    def fetch_columns(self, offset: int, max_bytes: int = DEFAULT_MAX_BYTES, max_records: int | None = None, *,
                      isolation: str = READ_UNCOMMITTED) -> ColumnsResult:
        """``fetch`` with the records as columns (``ColumnsResult``: ``ColumnBatch`` per stored batch,
        the records in range only, no ``Record`` built): the same records, limits (at least one record,
        then as many as fit ``max_bytes`` and ``max_records``), next offset, watermarks and aborted
        transactions. Markers are never returned; read_committed stops at the last stable offset and
        leaves out aborted batches. The first batch may start before ``offset`` (``ColumnBatch.start``
        says where the range begins in it)."""
        return self._fetch(offset, max_bytes, max_records, isolation, ColumnsResult, self._columns_plain,
                           self._columns_filtered)

    def _fetch(self, offset: int, max_bytes: int, max_records: int | None, isolation: str, result: Callable[..., _R],
               read_plain: Callable[..., tuple[Any, int]], read_filtered: Callable[..., tuple[Any, int]]) -> _R:
        """``fetch`` and ``fetch_columns``: ``read_plain(view, offset, upper, max_bytes, max_records)``
        reads a range without aborted data, ``read_filtered(..., aborted)`` one with; each returns
        what it read and the offset to read next. The answer is ``result(read, next offset, high
        watermark, last stable offset, aborted)``."""
        check_isolation(isolation)
        max_records = read_limits(offset, max_bytes, max_records)
        committed = isolation == READ_COMMITTED
        repaired = False
        for _attempt in range(READ_ONLY_READ_ATTEMPTS if self.read_only else 3):
            view, truncations = self._local.view, self.truncations
            # The end offset first, then the first unstable offset: the reverse of the order appends
            # publish them (see ``last_stable_offset``).
            log_end_offset = self.log_end_offset
            first_unstable = self.producer_state.first_unstable_offset
            log_start_offset = self.log_start_offset
            last_stable = (log_end_offset if first_unstable is None or first_unstable >= log_end_offset
                           else max(first_unstable, log_start_offset))
            if self._closed:
                raise StoreClosedError(f"log {self.name} is closed")
            if offset < log_start_offset or offset > log_end_offset:
                raise self._out_of_range(offset, log_start_offset, log_end_offset)
            upper = last_stable if committed else log_end_offset
            if offset >= upper:
                return result([], offset, log_end_offset, last_stable, [])
            try:
                aborted = self.aborted_transactions(offset, upper) if committed else []
                if aborted:
                    found, next_offset = read_filtered(view, offset, upper, max_bytes, max_records, aborted)
                    aborted = [txn for txn in aborted if txn.first_offset < next_offset]
                else:
                    found, next_offset = read_plain(view, offset, upper, max_bytes, max_records)
                    if next_offset < upper and self.producer_state.seen_producer_batches:
                        next_offset = LocalLog.skip_unreadable(view, next_offset, upper)
                return result(found, next_offset, log_end_offset, last_stable, aborted)
            except (ValueError, TypeError, OSError, CorruptIndexError, CorruptRecordError) as exc:
                repaired = self._retry_after_read_error(exc, view, truncations, repaired)
        raise StorageError(f"log {self.name} kept changing during a read at offset {offset}")

    @staticmethod
    def _read_plain(view: View, offset: int, upper: int, max_bytes: int, max_records: int) -> tuple[list[Record], int]:
        """A read of [offset, upper) with no aborted data in it: the records and the offset after them
        (``upper`` when none was read: only markers up to it)."""
        records = LocalLog.read(view, offset, upper, max_bytes, max_records)
        return records, records[-1].offset + 1 if records else upper  # type: ignore[operator]  # (read back: an int)

    @staticmethod
    def _columns_plain(view: View, offset: int, upper: int, max_bytes: int,
                       max_records: int) -> tuple[list[ColumnBatch], int]:
        """``_read_plain`` for ``fetch_columns``."""
        batches, next_offset = take_columns(LocalLog.iter_batch_slices(view, offset, upper), max_bytes, max_records)
        return batches, upper if next_offset < 0 else next_offset

    @staticmethod
    def _columns_filtered(view: View, offset: int, upper: int, max_bytes: int, max_records: int,
                          aborted: list[AbortedTxn]) -> tuple[list[ColumnBatch], int]:
        """``_read_filtered`` for ``fetch_columns``: the kept batches taken by a ``ColumnTaker``."""
        taker = ColumnTaker(max_bytes, max_records)
        return taker.batches, Log._take_committed(view, offset, upper, aborted, taker.take)

    @staticmethod
    def _take_committed(view: View, offset: int, upper: int, aborted: list[AbortedTxn],
                        take: Callable[[RecordBatch, int, int], int]) -> int:
        """Feed every batch of [offset, upper) to an ``AbortedFilter`` and the kept ones, with their
        record range, to ``take``, which answers -1 to go on, or, once a limit is reached, the offset
        after what it took. Returns the offset to read next: past the markers and aborted batches
        that follow what was taken."""
        keep = AbortedFilter(aborted).keep
        resume = -1  # once a limit is reached: where the next read starts
        for batch, first, stop in LocalLog.iter_batch_slices(view, offset, upper, True, True):
            if not keep(batch) or first >= stop:  # a marker, aborted data, no record in range
                if resume >= 0:
                    resume = batch.header.last_offset + 1
                continue
            if resume >= 0:
                break
            resume = take(batch, first, stop)
            if 0 <= resume <= batch.header.last_offset:  # the batch's records go on
                break
        return upper if resume < 0 else min(resume, upper)

    def iter_columns(self, offset: int | None = None, end_offset: int | None = None, *,
                     isolation: str = READ_UNCOMMITTED) -> Iterator[ColumnBatch]:
        """Every record from ``offset`` (default: the log start offset) up to ``end_offset``
        (default: the log end offset when called) as a ``ColumnBatch`` per stored batch, lazily: the
        bulk reader's ``iter_records``, with no object per record (the first and last batches may
        straddle the range: ``start``/``stop``). Markers never come; ``isolation="read_committed"``
        ends at the last stable offset and leaves out aborted batches. Scans survive what
        ``iter_records``' do (a rebuilt index, retention or a compaction swap underneath)."""
        return starmap(ColumnBatch, self.iter_batch_slices(offset, end_offset, isolation=isolation))

    @staticmethod
    def _read_filtered(view: View, offset: int, upper: int, max_bytes: int, max_records: int,
                       aborted: list[AbortedTxn]) -> tuple[list[Record], int]:
        """A read_committed read of [offset, upper) that overlaps aborted transactions: batch by
        batch through an ``AbortedFilter`` (``_take_committed``). Returns the records and the offset
        to read next."""
        records: list[Record] = []
        charged = 0

        def take(batch: RecordBatch, first: int, stop: int) -> int:
            nonlocal charged
            cost, done = take_records(batch, offset, upper, max_bytes - charged, max_records, records, not records)
            charged += cost
            return records[-1].offset + 1 if done else -1  # type: ignore[operator]  # (read back: an int)

        return records, Log._take_committed(view, offset, upper, aborted, take)

    def aborted_transactions(self, start_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """The aborted transactions whose data may lie in [``start_offset``, ``upper_offset``):
        their ABORT marker is at or after ``start_offset`` and their first offset below
        ``upper_offset`` (what a read_committed fetch of that range reports), by marker offset."""
        if not self._txn_indexes:
            return []
        for attempt in range(3):
            segments, bases = self._local.view
            found: list[AbortedTxn] = []
            try:
                for slot in range(max(bisect.bisect_right(bases, start_offset) - 1, 0), len(segments)):
                    entries, last_offsets = segments[slot].txn_index.load()
                    if entries and collect_aborted(entries, last_offsets, start_offset, upper_offset, found):
                        break
                return found
            except CorruptIndexError as exc:
                if attempt:
                    raise
                segment = next(s for s in segments if s.txn_index.path in str(exc))
                with self._lock:
                    self._rebuild_txn_index(segment, exc, self.log_end_offset)
            except OSError as exc:  # a segment deleted or renamed underneath: again on the new list
                self._segment_lost(segments, exc)
        raise StorageError(f"log {self.name} kept changing while its aborted transactions were read")

    def _rebuild_txn_index(self, segment: LogSegment, exc: CorruptIndexError, stop_offset: int) -> None:
        """Under the lock: ``segment``'s ``.txnindex`` failed its checks (``exc``). Derived data: it
        is rebuilt by replaying the producer state over the log below ``stop_offset`` and keeping the
        aborted transactions whose marker is in that segment (a read-only view keeps them in memory
        only). Logged and recorded in ``load_problems``, as a lying offset index is."""
        view = self._local.view
        segments, bases = view
        slot = segments.index(segment)
        segment_end = bases[slot + 1] if slot + 1 < len(segments) else 2**63
        table = ProducerStateTable()
        entries: list[TxnIndexEntry] = []
        for batch, _first, _last in LocalLog.iter_batch_slices(view, self.log_start_offset, stop_offset, True, True):
            producer = batch.producer
            if producer is None:
                continue
            header = batch.header
            marker = None
            if header.attributes & CONTROL:
                record = batch.record_at(0)
                marker = control.decode_marker(record.key, record.value)
            completed = table.on_batch(header, producer, marker)
            if completed is not None and completed.aborted and segment.base_offset <= completed.last_offset < segment_end:
                first_unstable = table.first_unstable_offset
                lso = (completed.last_offset + 1 if first_unstable is None
                       else max(first_unstable, self.log_start_offset))
                entries.append(TxnIndexEntry(completed.producer_id, completed.first_offset, completed.last_offset, lso))
        done = (f"{exc}; {'rebuilt in memory' if self.read_only else 'rebuilt'} from the log "
                f"({len(entries)} aborted transaction(s))")
        logger.warning("%s", done)
        self.load_problems.append(done)
        try:
            segment.txn_index.replace(entries, write=not self.read_only)
        except OSError as os_exc:
            raise self._fail(os_exc) from exc

    def iter_records(self, offset: int | None = None, end_offset: int | None = None, *,
                     isolation: str = READ_UNCOMMITTED) -> Iterator[Record]:
        """Every record from ``offset`` (default: the log start offset) up to ``end_offset``
        (default: the log end offset when called), lazily: each ``Record`` is built when the
        iterator reaches it, so a scan holds one batch of bytes and few objects at a time.
        Markers are never returned; ``isolation="read_committed"`` also ends at the last stable
        offset and leaves out aborted data."""
        view = self._local.view  # the snapshot, taken now: a scan created before retention reads it all
        start, stop = self._scan_range(offset, end_offset)
        if isolation != READ_UNCOMMITTED:
            check_isolation(isolation)
            stop = min(stop, self.last_stable_offset)
            aborted = self.aborted_transactions(start, stop)
            if aborted:
                return chain.from_iterable(batch.iter_records(first, last) for batch, first, last
                                           in self._committed_slices(view, start, stop, aborted, False))
        return chain.from_iterable(LocalLog.iter_records_resuming(view, lambda: self._local.view, start, stop,
                                                                  self._resume_scan))

    def iter_batch_slices(self, offset: int | None = None, end_offset: int | None = None, *,
                          include_empty: bool = False,
                          isolation: str = READ_UNCOMMITTED) -> Iterator[tuple[RecordBatch, int, int]]:
        """``(batch, first, stop)`` per batch over the same range as ``iter_records``: records
        [first, stop) of each verified ``RecordBatch`` are in range (Spark's Arrow path takes its raw
        columns). ``include_empty``: also batches with offsets but no record in range (first == stop),
        markers among them (else markers are left out). ``isolation`` as for ``iter_records``: read
        committed, aborted batches are left out too (or come as empty slices)."""
        view = self._local.view  # the snapshot, taken now: a scan created before retention reads it all
        start, stop = self._scan_range(offset, end_offset)
        if isolation != READ_UNCOMMITTED:
            check_isolation(isolation)
            stop = min(stop, self.last_stable_offset)
            aborted = self.aborted_transactions(start, stop)
            if aborted:
                return self._committed_slices(view, start, stop, aborted, include_empty)
        return LocalLog.iter_batch_slices_resuming(view, lambda: self._local.view, start, stop,
                                                   include_empty, self._resume_scan)

    def _committed_slices(self, view: View, start: int, stop: int, aborted: list[AbortedTxn],
                          include_empty: bool) -> Iterator[tuple[RecordBatch, int, int]]:
        """The slices of [start, stop) with every batch (markers included) fed to an
        ``AbortedFilter``: what it drops comes as an empty slice (``include_empty``) or not at all."""
        keep = AbortedFilter(aborted).keep
        for batch, first, last in LocalLog.iter_batch_slices_resuming(view, lambda: self._local.view, start, stop,
                                                                      True, self._resume_scan, True):
            if keep(batch) and first < last:
                yield batch, first, last
            elif include_empty:
                yield batch, first, first

    def iter_batches_with_control(self, start_offset: int | None = None, end_offset: int | None = None) -> \
            Iterator[tuple[RecordBatch, ProducerFields | None, control.Marker | None]]:
        """``(batch, producer, marker)`` for every verified batch holding offsets in [start_offset,
        end_offset) (defaults as ``iter_records``), in log order, empty ones and transaction markers
        included: ``producer`` is the batch's producer block (or None), ``marker`` the decoded marker
        of a control batch (else None). For replays that need the markers (producer state, group
        offsets, checks)."""
        view = self._local.view
        start, stop = self._scan_range(start_offset, end_offset)
        for batch, _first, _last in LocalLog.iter_batch_slices_resuming(view, lambda: self._local.view, start, stop,
                                                                        True, self._resume_scan, True):
            marker = None
            if batch.header.attributes & CONTROL:
                record = batch.record_at(0)
                marker = control.decode_marker(record.key, record.value)
            yield batch, batch.producer, marker

    def _scan_range(self, offset: int | None, end_offset: int | None) -> tuple[int, int]:
        start = self.log_start_offset if offset is None else offset
        stop = self.log_end_offset if end_offset is None else min(end_offset, self.log_end_offset)
        if start < self.log_start_offset or start > self.log_end_offset:
            raise self._out_of_range(start, self.log_start_offset, self.log_end_offset)
        return start, stop

    def _resume_scan(self, segments: Sequence[LogSegment], exc: Exception, offset: int) -> None:
        """A lazy scan failed at ``offset`` (nothing from it on yielded yet): repair what it met, so
        it goes on there on the current segments; ``OffsetOutOfRangeError`` when retention removed
        that offset meanwhile, the error itself when it is real."""
        if self._closed:
            raise StoreClosedError(f"log {self.name} is closed") from exc
        if isinstance(exc, CorruptIndexError):
            self._repair_indexes(segments, exc)
        else:
            self._segment_lost(segments, exc)
        if offset < self.log_start_offset:
            raise self._out_of_range(offset, self.log_start_offset, self.log_end_offset) from exc

    def _repair_indexes(self, segments: Sequence[LogSegment], exc: CorruptIndexError) -> None:
        """A read found an index entry that lies: ``LocalLog.repair_indexes`` (logged and recorded
        in ``load_problems``)."""
        with self._lock:
            try:
                self.load_problems.append(self._local.repair_indexes(segments, exc, self.read_only))
            except OSError as os_exc:
                raise self._fail(os_exc) from exc

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """The first offset whose record timestamp is >= ``timestamp_ms`` (None if there is none).
        -2 means the log start offset, -1 the log end offset."""
        if not isinstance(timestamp_ms, int) or isinstance(timestamp_ms, bool):
            raise TypeError(f"timestamp_ms must be an int, got {timestamp_ms!r}")
        if timestamp_ms == EARLIEST_TIMESTAMP:
            return self.log_start_offset
        if timestamp_ms == LATEST_TIMESTAMP:
            return self.log_end_offset
        if timestamp_ms < 0:
            raise ValueError(f"timestamp_ms must be >= 0 (or -1/-2), got {timestamp_ms!r}")
        start = self.log_start_offset
        segments = self._local.segments
        for _attempt in range(2):
            try:
                return LocalLog.offset_for_timestamp(segments, timestamp_ms, start)
            except CorruptIndexError as exc:
                if _attempt:
                    raise
                self._repair_indexes(segments, exc)
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """``(timestamp, offset)`` of the first record with the largest timestamp in the log
        (Kafka's ListOffsets MAX_TIMESTAMP, KIP-734); None when the log holds no record. The
        segments keep their largest timestamp and its batch (the time index), so one batch is read
        per segment that could hold the answer. Records below the log start offset
        (``delete_records``) do not count: when a segment's largest timestamp is theirs, the rest
        of that segment is scanned for its own largest (Kafka answers the offset of a record it
        no longer serves there)."""
        start = self.log_start_offset
        segments = self._local.segments
        best: tuple[int, int] | None = None
        for index, segment in enumerate(segments):
            found = segment.max_timestamp_so_far
            stop = segments[index + 1].base_offset if index + 1 < len(segments) else self.log_end_offset
            if found.timestamp_ms < 0 or stop <= start or (best is not None and found.timestamp_ms <= best[0]):
                continue  # nothing here, nothing readable, or nothing larger than found already
            located = None
            if found.offset >= start:
                located = self._first_record_at(found.timestamp_ms, found.offset, stop)
            if located is None:  # that record is below the log start offset
                located = self._largest_timestamp_in(start, stop)
            if located is not None and (best is None or located[0] > best[0]):
                best = located
        return best

    def _first_record_at(self, timestamp_ms: int, offset: int, stop: int) -> tuple[int, int] | None:
        """``(timestamp_ms, offset)`` of the first record of the batch holding ``offset`` (the time
        index names a batch by its last offset) with that timestamp, not below the log start
        offset; None when it has none."""
        # (A record read back has its offset and timestamp: not None, whatever ``Record`` allows.)
        for batch, _first, _last in self.iter_batch_slices(offset, stop):
            for record in batch.iter_records():
                if (record.timestamp_ms == timestamp_ms
                        and record.offset >= self.log_start_offset):  # type: ignore[operator]
                    return timestamp_ms, record.offset  # type: ignore[return-value]
            break
        return None

    def _largest_timestamp_in(self, offset: int, stop: int) -> tuple[int, int] | None:
        """``(timestamp, offset)`` of the first record with the largest timestamp in [offset, stop):
        a batch is decoded only when its header's largest timestamp beats the one found so far."""
        best: tuple[int, int] | None = None
        for batch, first, last in self.iter_batch_slices(offset, stop):
            if batch.max_timestamp < 0 or (best is not None and batch.max_timestamp <= best[0]):
                continue
            for record in batch.records(first, last):  # (read back: offset and timestamp are not None)
                timestamp_ms: int = record.timestamp_ms  # type: ignore[assignment]
                if timestamp_ms >= 0 and (best is None or timestamp_ms > best[0]):
                    best = (timestamp_ms, record.offset)  # type: ignore[assignment]
        return best

    def expire_producers(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Forget the producers whose last batch is ``expiration_ms`` or more older than ``now_ms``
        and that hold no open transaction here (Kafka's producer.id.expiration.ms); returns their ids."""
        with self._lock:
            return self.producer_state.expire(now_ms, expiration_ms)

    # --- a read-only view ------------------------------------------------------------------------

    def refresh(self) -> bool:
        """A read-only view: take in what the writing process appended (and the segments it rolled
        or deleted) since the view was opened or last refreshed. True when anything changed; a
        writable log returns False (it knows its own state)."""
        if not self.read_only or self._closed:
            return False
        changed = self._local.refresh(self.log_start_offset)
        if changed is None:
            return False
        previous_end = self.log_end_offset
        self._follow_producers(previous_end, changed[0])
        self.log_end_offset, self.recovery_point, log_start_offset, replaced = changed
        self.log_start_offset = max(self.log_start_offset, log_start_offset)
        for segment in replaced:  # a read in flight on these retries on the new view
            segment.close_handlers()
        segments = self._local.segments
        if not replaced:  # the active segment grew: the writer may have added aborted transactions
            segments[-1].txn_index.reload()
        self._txn_indexes = any(segment.txn_index.present is not False for segment in segments)
        return True

    def _follow_producers(self, previous_end: int, log_end_offset: int) -> None:
        """A read-only view: feed the producer batches the writer appended in [``previous_end``,
        ``log_end_offset``) to the producer state (before the new end is published, as the writer
        does); when the writer truncated, a replay from the log start (rare) instead. Headers of the
        new batches only; a partition without producer batches finds none."""
        table, start = self.producer_state, previous_end
        if not table.seen_producer_batches and not list_snapshots(self._fs, self.dir_path):
            # The writer snapshots a partition before its first producer batch (and keeps one while
            # it has producers): none here means nothing to follow, so a plain partition's view
            # reads no header twice.
            return
        if log_end_offset < previous_end or self._producers_stale:
            table, start = ProducerStateTable(), self.log_start_offset
        try:
            for header, producer, marker in iter_producer_batches(self._local.segments, start, log_end_offset):
                table.on_batch(header, producer, marker)  # (the aborted ones: the writer's .txnindex files)
        except OSError:
            # A segment the writer removed meanwhile (retention, a compaction swap): the next
            # refresh replays from the log start instead of missing what was in it.
            self._producers_stale = True
            return
        self._producers_stale = False
        self.producer_state = table

    # --- removing data ----------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Remove every record with offset >= ``offset``; the log end offset becomes ``offset``.
        Returns False when there was nothing to remove. The result is durable when this returns, and
        crash-safe (``LocalLog.truncate_to``: a crash leaves the old log or a shorter gap-free one)."""
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise ValueError(f"truncate_to needs an offset >= 0, got {offset!r}")
        with self._flush_lock, self._lock:
            self._check_writable()
            if offset >= self.log_end_offset:
                return False
            # A sequence count: odd while bytes are being cut, so a reader that saw torn bytes can
            # tell a truncation under way (or finished since its snapshot) from damage on disk.
            self.truncations += 1
            try:
                self._truncate_locked(offset)
            finally:
                self.truncations += 1
        if self.on_truncated is not None:
            self.on_truncated(self, offset)
        self._wake_readers()  # reads waiting past the new end are answered (out of range) now
        return True

    def _truncate_locked(self, offset: int) -> None:
        # A lower recovery point is persisted before the cut (above the end after a crash = records
        # lost), a lower start offset after it (never deleted records readable again).
        if self.on_checkpoint_needed is not None and self.recovery_point > offset:
            self.recovery_point = offset
            self.on_checkpoint_needed(self)
        for attempt in range(2):
            try:
                self._local.truncate_to(offset)  # again after a repair: it completes what it began
                break
            except CorruptIndexError as exc:  # a lying entry met while finding the cut
                if attempt:
                    raise
                self._repair_indexes(self._local.segments, exc)
            except OSError as exc:
                raise self._fail(exc) from exc
        self.log_end_offset, self.recovery_point = offset, min(self.recovery_point, offset)
        self.log_start_offset = min(self.log_start_offset, offset)
        self._truncate_transactions(offset)
        if self.on_checkpoint_needed is not None:
            self.on_checkpoint_needed(self)

    def _truncate_transactions(self, offset: int) -> None:
        """After the log was cut at ``offset`` (the segments cut their ``.txnindex`` entries with
        it): rebuild the producer state from what is left (``rebuild_producer_state``), snapshots
        above the cut removed."""
        if self.producer_state.seen_producer_batches or (self._snapshots is not None and self._snapshots.offsets):
            self.rebuild_producer_state()

    def rebuild_producer_state(self) -> None:
        """Under the lock: replace the producer state by the state at the log end, published at
        once: the newest producer snapshot at or below it and a replay after it
        (``ProducerSnapshots.reload``, which removes the snapshots above the end), or without
        snapshot files a replay of the whole log (``ProducerStateTable.on_batch`` over
        ``iter_batches_with_control``)."""
        table = ProducerStateTable()
        table.seen_producer_batches = True  # a truncated transactional log keeps paying for its markers
        if self._snapshots is not None and self._snapshots.offsets:
            try:
                self._snapshots.reload(self._local.segments, table, log_start_offset=self.log_start_offset,
                                       log_end_offset=self.log_end_offset, problems=self.load_problems)
            except OSError as exc:
                raise self._fail(exc) from exc
            table.forget_below(self.log_start_offset)
            self.producer_state = table
            return
        for batch, producer, marker in self.iter_batches_with_control(self.log_start_offset, self.log_end_offset):
            if producer is not None:
                table.on_batch(batch.header, producer, marker)
        self.producer_state = table

    def delete_records(self, before_offset: int) -> int:
        """Make records below ``before_offset`` unreadable by advancing the log start offset, and
        delete the segments that lie wholly below it. Returns the new log start offset."""
        if not isinstance(before_offset, int) or isinstance(before_offset, bool):
            raise TypeError(f"delete_records needs an int offset, got {before_offset!r}")
        with self._lock:
            self._check_writable()
            if not self.log_start_offset <= before_offset <= self.log_end_offset:
                if before_offset < self.log_start_offset:
                    return self.log_start_offset
                raise OffsetOutOfRangeError(
                    f"cannot delete records before {before_offset}: the log end offset of {self.name} is "
                    f"{self.log_end_offset}", before_offset, self.log_start_offset, self.log_end_offset)
            self.log_start_offset = before_offset  # first: readers never reach a deleted segment
            self.producer_state.forget_below(before_offset)
            if self.on_checkpoint_needed is not None:
                self.on_checkpoint_needed(self)
            # Only now, with the new start durable, may the recovery point pass records that were
            # never fsynced (those below the start: deleted). A checkpoint of the higher recovery
            # point beside the old start would claim them fsynced, and a power loss that tore them
            # would read as damage.
            self.recovery_point = max(self.recovery_point, min(before_offset, self.log_end_offset))
            try:
                self._local.remove_below(before_offset)
                if self._snapshots is not None:  # (after the segments: their replay stays possible until then)
                    self._snapshots.on_log_start_moved(before_offset)
            except OSError as exc:
                # The segments left the list first: a shortage leaves files below the start offset,
                # which the next open removes (the start offset is checkpointed already).
                raise self._fail_unless_shortage(exc, "deleting records of") from exc
            return self.log_start_offset

    def delete_old_segments(self, *, now_ms: int | None = None, dry_run: bool = False) -> RetentionResult:
        """Apply retention (``retention`` module: log start offset, then ``retention.bytes``, then
        ``retention.ms``) and return what was deleted, or with ``dry_run`` what would be. Deleted
        segments are renamed ``.deleted`` oldest first (each rename durable, so a crash never
        leaves a gap) and removed now, or after ``file.delete.delay.ms`` through
        ``schedule_file_delete`` (the LogManager's), so readers holding them finish their reads."""
        with self._lock:
            if not dry_run:
                self._check_writable()
            now_ms = self._clock.time_ms() if now_ms is None else now_ms
            decisions = plan_retention(self._local.segments, log_end_offset=self.log_end_offset,
                                       log_start_offset=self.log_start_offset, delete_policy=self.config.delete,
                                       retention_bytes=self.config.retention_bytes,
                                       retention_ms=self.config.retention_ms, now_ms=now_ms,
                                       mtime_ms=self._fs.mtime_ms)
            if dry_run or not decisions:
                return RetentionResult(self.name, tuple(decisions), self.log_start_offset, dry_run)
            self._delete_prefix(decisions)
            return RetentionResult(self.name, tuple(decisions), self.log_start_offset)

    def _delete_prefix(self, decisions: Sequence[RetentionDecision]) -> None:
        count = len(decisions)
        assert [s.base_offset for s in self._local.segments[:count]] == [d.base_offset for d in decisions], decisions
        try:
            if count == len(self._local.segments):
                self.roll()  # the active segment goes too: a new empty one holds the log end offset
            # The start offset moves before the segments leave the list: a reader never finds a
            # hole between the log start offset and the first segment.
            self.log_start_offset = max(self.log_start_offset, self._local.segments[count].base_offset)
            self.producer_state.forget_below(self.log_start_offset)
            self.recovery_point = max(self.recovery_point, min(self.log_start_offset, self.log_end_offset))
            doomed = self._local.remove_prefix(count)
            if self._snapshots is not None:  # (after the segments: their replay stays possible until then)
                self._snapshots.on_log_start_moved(self.log_start_offset)
        except OSError as exc:
            # A shortage while renaming the segments that already left the list leaves files below
            # the start offset, which the next open removes (retention by the start offset).
            raise self._fail_unless_shortage(exc, "applying retention to") from exc
        if self.schedule_file_delete is not None:
            self.schedule_file_delete(doomed, self.config.file_delete_delay_ms)
        else:
            for segment in doomed:
                segment.delete()

    # --- repairing damage ------------------------------------------------------------------------

    def repair(self, dry_run: bool = False) -> RepairPlan:
        """Verify every segment and cut the log at its first damage, as recovery would have
        (``plan_repair``): logged, and the log is healthy afterwards. ``dry_run``: change nothing,
        only return what would be cut. Works on a healthy log too (a full verification)."""
        with self._flush_lock, self._lock:
            if self._closed or self.read_only or self._failure is not None:
                self._check_writable()
            segments = list(self._local.segments)
            plan = plan_repair(self.name, segments, self.log_start_offset, self.damage, self._orphan_indexes,
                               self.config.compact)
            if dry_run:
                return plan
            self.truncations += 1  # a cut under way: a reader that sees torn bytes retries
            try:
                kept = apply_repair(self._fs, self.dir_path, segments, plan)
                if not kept:
                    kept = [self._local.new_segment(plan.log_start_offset)]
                kept[-1].resize_indexes(self.config.segment_index_bytes)
            except OSError as exc:
                raise self._fail(exc) from exc
            finally:
                self.truncations += 1
            self._local.set_segments(kept)
            self.log_end_offset = self.recovery_point = kept[-1].read_next_offset()
            self.log_start_offset = min(plan.log_start_offset, self.log_end_offset)
            self.damage, self._orphan_indexes = None, []
            self._truncate_transactions(self.log_end_offset)
        if self.on_checkpoint_needed is not None:
            self.on_checkpoint_needed(self)
        if self.on_truncated is not None and plan.slot is not None:
            self.on_truncated(self, plan.cut_offset)
        return plan

    # --- for the cleaner -------------------------------------------------------------------------

    def segments_and_truncations(self) -> tuple[tuple[LogSegment, ...], int]:
        """The segments and truncation count read together: a cleaning round's start (see ``replace_segments``)."""
        with self._lock:
            return self._local.segments, self.truncations

    def new_cleaned_segment(self, base_offset: int) -> LogSegment:
        """A new, empty ``<base>.log.cleaned`` segment (stale files of that name removed first)."""
        self._check_writable()
        return self._local.new_segment(base_offset, CLEANED_SUFFIX)

    def copy_mtime(self, source: LogSegment, target: LogSegment) -> None:
        """Give ``target``'s data file ``source``'s mtime: a recopy keeps its age for retention."""
        self._local.copy_mtime(source, target)

    def replace_segments(self, new_segments: Sequence[LogSegment], old_segments: Sequence[LogSegment], *,
                         truncations: int | None = None, delay_delete: bool = False) -> bool:
        """Swap ``new_segments`` (complete and flushed, named ``*.cleaned``) in for ``old_segments``,
        crash-safely (``LocalLog.replace_segments``: ``.cleaned`` -> ``.swap`` -> final names, the
        old ones through ``.deleted``; with ``delay_delete`` removed after ``file.delete.delay.ms``,
        so readers holding them finish).

        With ``truncations`` (the log's count when the caller read ``old_segments``) nothing is
        swapped, and False returned, when the log was truncated since or an old segment has left
        it (retention): the copies describe a log that no longer exists (the cleaner's abort)."""
        delayed = delay_delete and self.schedule_file_delete is not None
        with self._lock:
            if truncations is not None and (truncations != self.truncations or not self._local.holds_all(old_segments)):
                return False
            self._check_writable()
            swapped_out = self._local.replace_segments(new_segments, old_segments, keep_deleted=delayed)
        if delayed and self.schedule_file_delete is not None:  # (delayed says so: for type checkers)
            self.schedule_file_delete(swapped_out, self.config.file_delete_delay_ms)
        return True

    # --- descriptors ---------------------------------------------------------------------------------

    def release_idle_descriptors(self) -> int:
        """Give back the descriptors and mappings of the active segment when the log was not used
        since the previous call (no append: the end offset did not move; no read of its data file);
        returns how many descriptors that freed. The next append or read opens them again. Called
        every ``log.descriptor.idle.ms`` by the store (``BackgroundJobs``): a store of many
        partitions holds descriptors only for those in use. The inactive segments' files are bounded
        apart (``OPEN_FILES``)."""
        with self._lock:
            if self._closed or self.read_only or self._failure is not None or self.damage is not None:
                return 0
            segment = self._local.segments[-1]
            used = segment.file.take_referenced() or self.log_end_offset != self._idle_mark
            self._idle_mark = self.log_end_offset
            held = segment.descriptors
            if used or not held:
                return 0
            segment.release_descriptors()
            return held - segment.descriptors

    # --- closing ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Flush (when writable and healthy) and close every segment. Safe to call twice."""
        with self._flush_lock, self._lock:
            if self._closed:
                return
            try:
                if not self.read_only and self._failure is None and self.damage is None:
                    self._snapshot_at_close()
                    self._local.close_segments()
                    self.recovery_point = self.log_end_offset
            finally:
                self._release_handlers()
        self._answer_waiters()

    def _snapshot_at_close(self) -> None:
        """Rule 2 at a clean close: the exact producer state at the log end, so the next open
        replays nothing. Optional: when it cannot be written the flagged one stays, and the next
        open replays from it (logged, never raised: the close goes on)."""
        if self._snapshots is None or not self._snapshots.newest_flagged:
            return
        try:
            self._snapshots.on_close(self.log_end_offset, self.producer_state)
        except OSError as exc:
            logger.warning("%s: no producer snapshot at close (%s); the next open replays the producer batches",
                           self.name, exc)

    def close_handlers(self) -> None:
        """Close without writing (an offline dir, a damaged log): release descriptors and mappings."""
        with self._lock:
            self._release_handlers()
        self._answer_waiters()

    def _release_handlers(self) -> None:
        self._local.release_handlers()
        self._closed = True

    def _answer_waiters(self) -> None:
        waits = self.waits
        if waits is not None:  # outside the log's locks (the purgatory's rule)
            waits.wake_all([self.key])
            if self._own_waits:
                waits.shutdown()

    def __repr__(self) -> str:
        return (f"Log({self.name!r}, log_start_offset={self.log_start_offset}, "
                f"log_end_offset={self.log_end_offset}, recovery_point={self.recovery_point})")
