"""Writing rows into a store from Spark, all or nothing per job (no pyspark: stdlib and the core only).

This module owns the write protocol of the Spark data source; the pyspark adapter turns Spark rows
into the plain tuples taken here and wraps ``StagedFile`` in Spark's commit messages:

1. **Plan** (driver): ``TargetPlan.for_store`` reads the topics from a read-only view (a writer may
   hold the store) and names the job (a uuid4 hex).
2. **Stage** (each task, in its own process): ``stage_records`` resolves every row's topic and
   partition and writes the records, as batches in the store's format, to ``<first data dir>/
   .staging/<job id>/task-<task id>-<uuid>.stage``, fsynced. A failed task leaves no trace in the logs.
3. **Commit** (driver, once every task succeeded): ``commit_staged`` opens the store writable (its
   ``.lock``: one writer at a time), checks every staged file (counts and CRCs) before appending
   anything, appends the files in task-id order and each (topic, partition) in row order, fsyncs,
   and deletes the job dir. If anything fails, every partition touched is truncated back to the log
   end offset it had on entry and the error is raised; the staged files are kept, so the commit can
   be retried, or ``abort_staged`` deletes them (what Spark's abort does).
4. **Exactly-once streaming**: with ``sink_id`` and ``batch_id`` a journal per sink
   (``.staging/sinks/<sink>.json``, replaced crash-safely) records an intent (the start offsets)
   before appending and the batch id after the fsync. A batch id at or below the last committed one
   is skipped; a retry after a crash between the two compares the log from the intent's start
   offsets with the staged records and appends only the part that is not there yet.

Readers are not isolated from a commit (no transactions): a read between an append and a rollback sees
records that then disappear. Staging files live in the first data dir, which executors must see.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import reprlib
import shutil
import struct
import uuid
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Sequence

from ..clock import SYSTEM_CLOCK, Clock
from ..errors import (CorruptCheckpointError, CorruptRecordError, InvalidRecordError, LockedError, LogStoreError,
                      RequestError, StorageError, UnknownTopicOrPartitionError)
from ..fs import OS_FILE_SYSTEM
from ..log.log import Log
from ..manager.log_manager import LogManager
from ..manager.topics import MURMUR2, STAGING_DIR, partition_for_key, validate_topic_name
from ..records.decoder import HEADER_BYTES, NO_TIMESTAMP, Record, RecordBatch, read_header
from ..records.encoder import encode_batch

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

MAX_STAGED_BATCH_RECORDS = 1000
MAX_STAGED_BATCH_BYTES = 1 << 20
MAX_PENDING_BYTES = 16 << 20  # a task with many partitions writes out its groups at this total
DEFAULT_STAGING_MAX_AGE_S = 86_400.0
SINKS_DIR = "sinks"
_FILE_MAGIC = b"LSSTAGE1"
_FRAME = struct.Struct("<IHi")  # crc32 of what follows, topic length, partition; then the topic bytes
_FRAME_BODY = struct.Struct("<Hi")
_MAX_TIMESTAMP_MS = 2**63 - 1
_JOURNAL_VERSION = 1
_JOB_ID = re.compile(r"[0-9a-f]{32}")
_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60
_short = _REPR.repr  # a row's value in an error message: enough to find it, never megabytes


def _create_hint(topic: str, data_dirs: Sequence[str]) -> str:
    return f"create it first: logstore {' '.join(f'--dir {d}' for d in data_dirs)} topics create {topic} --partitions N"


@dataclass(frozen=True)
class TargetPlan:
    """What every task of one write job needs, made on the driver: the store, the topics it has
    (their partition counts and key placements), the ``topic`` option (it overrides the rows' topic
    column) and the job id naming the staging dir. Picklable, so Spark ships it to the tasks."""

    data_dirs: tuple[str, ...]
    topic: str | None
    partitions: dict[str, int]
    compacted: frozenset[str] = frozenset()  # topics whose every record needs a key
    job_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    include_headers: bool = True
    placements: dict[str, str] = field(default_factory=dict)  # per topic; one not named is Kafka's murmur2

    @classmethod
    def for_store(cls, path: str | Sequence[str], topic: str | None = None, *,
                  include_headers: bool = True) -> "TargetPlan":
        """Plan a write job to the store at ``path`` (a data dir or a list of them) through a
        read-only view. A ``topic`` that does not exist raises ``UnknownTopicOrPartitionError``."""
        dirs = [path] if isinstance(path, (str, os.PathLike)) else list(path)
        store = LogManager(dirs, read_only=True, load_only=())  # topics metadata only, no log loaded
        try:
            partitions = {name: store.partitions(name) for name in store.topics()}
            compacted = frozenset(name for name in partitions if store.topic_config(name).compact)
            placements = {name: store.topic_placement(name) for name in partitions}
            data_dirs = tuple(store.log_dirs)
        finally:
            store.close()
        if topic is not None:
            validate_topic_name(topic)
            if topic not in partitions:
                raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist in the store {list(data_dirs)}: "
                                                   + _create_hint(topic, data_dirs))
        return cls(data_dirs, topic, partitions, compacted, include_headers=bool(include_headers),
                   placements=placements)

    @property
    def staging_dir(self) -> str:
        """``<first data dir>/.staging``: staged jobs and the sinks' journals."""
        return os.path.join(self.data_dirs[0], STAGING_DIR)

    @property
    def job_dir(self) -> str:
        """The directory holding this job's staged files."""
        return os.path.join(self.staging_dir, self.job_id)


@dataclass(frozen=True)
class StagedFile:
    """One task's staged records: the file, Spark's partition id of the task, and the record count
    per (topic, partition) and in total (checked against the file before the commit appends)."""

    path: str
    task_id: int
    records_per_partition: tuple[tuple[TopicPartition, int], ...]
    total_records: int


@dataclass(frozen=True)
class CommitResult:
    """What ``commit_staged`` did per (topic, partition): records appended by this call, their first
    and last offsets, and records an interrupted attempt of the same streaming batch had appended
    already (``recovered``: found in the log). ``skipped``: the batch was committed before."""

    appended: dict[TopicPartition, int]
    first_offsets: dict[TopicPartition, int]
    last_offsets: dict[TopicPartition, int]
    recovered: dict[TopicPartition, int] = field(default_factory=dict)
    skipped: bool = False

    @property
    def total_appended(self) -> int:
        return sum(self.appended.values())


# --- staging (a task) --------------------------------------------------------------------------------


def _as_bytes(value: Any, what: str) -> bytes | None:
    if value is None or type(value) is bytes:
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{what} must be bytes, str or None, got {_short(value)}")


def _headers(headers: Any) -> tuple:
    if not headers:
        return ()
    if isinstance(headers, (str, bytes)) or not hasattr(headers, "__iter__"):
        raise TypeError(f"headers must be a list of (str, bytes | None) pairs, got {_short(headers)}")
    pairs = []
    for pair in headers:
        try:
            name, value = pair
        except (TypeError, ValueError):
            raise TypeError(f"a header must be a (str, bytes | None) pair, got {_short(pair)}") from None
        if not isinstance(name, str):
            raise TypeError(f"a header name must be a str, got {_short(name)}")
        pairs.append((name, _as_bytes(value, f"header {name!r}")))
    return tuple(pairs)


class _Stager:
    """Resolves rows to (topic, partition) and writes them to one staging file as framed batches:
    ``magic | (frame header, topic, batch)*``. Each (topic, partition) keeps its rows' order."""

    def __init__(self, plan: TargetPlan, task_id: int, path: str) -> None:
        self.plan, self.task_id, self.path = plan, task_id, path
        self.file = open(path, "xb")
        self.file.write(_FILE_MAGIC)
        self.pending: dict[TopicPartition, list] = {}  # [records, their bytes] per target, in row order
        self.pending_bytes = 0
        self.counts: dict[TopicPartition, int] = {}
        self.keyless: dict[str, int] = {}

    def add(self, number: int, row: Any) -> None:
        try:
            target, record = self._resolve(row)
        except (TypeError, ValueError, RequestError) as exc:  # the same error, saying which row
            raise type(exc)(f"row {number} of task {self.task_id}: {exc}") from None
        size = (16 + len(record.key or b"") + len(record.value or b"")
                + sum(8 + len(name) + len(data or b"") for name, data in record.headers))
        group = self.pending.get(target)
        if group is None:
            group = self.pending[target] = [[], 0]
        group[0].append(record)
        group[1] += size
        self.pending_bytes += size
        if len(group[0]) >= MAX_STAGED_BATCH_RECORDS or group[1] >= MAX_STAGED_BATCH_BYTES:
            self._write(target)
        elif self.pending_bytes >= MAX_PENDING_BYTES:
            for pending in list(self.pending):
                self._write(pending)

    def _resolve(self, row: Any) -> tuple[TopicPartition, Record]:
        try:
            topic, partition, key, value, headers, timestamp_ms = row
        except (TypeError, ValueError):
            raise TypeError("expected (topic, partition, key, value, headers, timestamp_ms), "
                            f"got {_short(row)}") from None
        plan = self.plan
        if plan.topic is not None:
            topic = plan.topic  # the option wins over the column, as in Spark's Kafka sink
        elif topic is None:
            raise ValueError("no topic: give a topic column or the topic option")
        partitions = plan.partitions.get(topic)
        if partitions is None:
            if not isinstance(topic, str):
                raise TypeError(f"topic must be a str, got {_short(topic)}")
            raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist in the store: "
                                               + _create_hint(topic, plan.data_dirs))
        key = _as_bytes(key, "key")
        value = _as_bytes(value, "value")
        headers = _headers(headers) if plan.include_headers else ()
        if timestamp_ms is not None and (not isinstance(timestamp_ms, int) or isinstance(timestamp_ms, bool)
                                         or not 0 <= timestamp_ms <= _MAX_TIMESTAMP_MS):
            raise ValueError(f"timestamp_ms must be an int64 >= 0 or None, got {_short(timestamp_ms)}")
        if key is None and topic in plan.compacted:
            raise InvalidRecordError(f"topic {topic!r} is compacted (cleanup.policy=compact) and needs a key "
                                     "on every record")
        if partition is None:
            if key is not None:
                partition = partition_for_key(key, partitions, plan.placements.get(topic, MURMUR2))
            else:  # round-robin that a re-run of the task repeats: the k-th keyless row goes to (task + k) % n
                turn = self.keyless.get(topic, 0)
                self.keyless[topic] = turn + 1
                partition = (self.task_id + turn) % partitions
        elif not isinstance(partition, int) or isinstance(partition, bool):
            raise TypeError(f"partition must be an int or None, got {_short(partition)}")
        elif not 0 <= partition < partitions:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {partition} "
                                               f"(partitions: 0..{partitions - 1})")
        return (topic, partition), Record(key, value, headers, timestamp_ms)

    def _write(self, target: TopicPartition) -> None:
        records, size = self.pending.pop(target)
        self.pending_bytes -= size
        topic_bytes = target[0].encode("utf-8")
        body = _FRAME_BODY.pack(len(topic_bytes), target[1]) + topic_bytes
        self.file.write(zlib.crc32(body).to_bytes(4, "little") + body)
        # Timestamps left None are staged as NO_TIMESTAMP and given back as None: the log stamps them.
        self.file.write(encode_batch(records, default_timestamp_ms=NO_TIMESTAMP))
        self.counts[target] = self.counts.get(target, 0) + len(records)

    def finish(self) -> StagedFile:
        for target in list(self.pending):
            self._write(target)
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        OS_FILE_SYSTEM.fsync_dir(os.path.dirname(self.path))
        counts = tuple(sorted(self.counts.items()))
        return StagedFile(self.path, self.task_id, counts, sum(count for _, count in counts))

    def discard(self) -> None:
        self.file.close()
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.path)


def stage_records(plan: TargetPlan, task_id: int, rows: Iterable[tuple]) -> StagedFile:
    """Stage one task's ``rows`` for ``commit_staged`` and return what the task hands the driver.

    A row is ``(topic, partition, key, value, headers, timestamp_ms)``: ``topic`` is required unless
    the plan has a topic option (which wins); ``partition`` None means the key's partition by the
    topic's placement (``partition_for_key``), or for a row without a key round-robin per task (the
    k-th keyless row of a topic in task t goes to ``(t + k) % partitions``, so a re-run stages the same placement); ``key``/``value`` are bytes,
    str (UTF-8) or None (a None value is a tombstone); ``headers`` (str, bytes | None) pairs or None
    (ignored when the plan excludes headers); ``timestamp_ms`` an int >= 0, or None for the append
    time. A bad row raises naming its number, and the task's file is removed."""
    if not isinstance(task_id, int) or isinstance(task_id, bool) or task_id < 0:
        raise ValueError(f"task_id must be an int >= 0, got {task_id!r}")
    OS_FILE_SYSTEM.make_dirs(plan.job_dir)
    stager = _Stager(plan, task_id, os.path.join(plan.job_dir, f"task-{task_id}-{uuid.uuid4().hex}.stage"))
    try:
        for number, row in enumerate(rows):
            stager.add(number, row)
        return stager.finish()
    except BaseException:
        stager.discard()
        raise


def read_staged(path: str) -> Iterator[tuple[TopicPartition, list[Record]]]:
    """The batches of a staging file as ``((topic, partition), records)``, CRCs verified; raises
    ``CorruptRecordError`` for a damaged or cut file."""
    for target, batch in _frames(path):
        yield target, [Record(key, value, headers, None if timestamp == NO_TIMESTAMP else timestamp)
                       for key, value, headers, timestamp, _ in batch.iter_records()]


def _frames(path: str) -> Iterator[tuple[TopicPartition, RecordBatch]]:
    where = f" in staged file {path}"
    with open(path, "rb") as file:
        if file.read(len(_FILE_MAGIC)) != _FILE_MAGIC:
            raise CorruptRecordError(f"{path} is not a logstore staging file")
        while head := file.read(_FRAME.size):
            if len(head) < _FRAME.size:
                raise CorruptRecordError(f"cut frame header{where}")
            crc, topic_length, partition = _FRAME.unpack(head)
            topic_bytes = file.read(topic_length)
            if zlib.crc32(head[4:] + topic_bytes) != crc:
                raise CorruptRecordError(f"frame checksum mismatch{where}")
            batch_head = file.read(HEADER_BYTES)
            header = read_header(batch_head, 0, where, whole=False)
            batch = header and RecordBatch.decode(batch_head + file.read(header.size_bytes - HEADER_BYTES), 0, where)
            if batch is None:
                raise CorruptRecordError(f"cut batch{where}")
            yield (topic_bytes.decode("utf-8"), partition), batch


def _verify_staged(staged: StagedFile) -> None:
    """Check a staged file against what its task reported, before anything is appended."""
    counts: dict[TopicPartition, int] = {}
    try:
        for target, batch in _frames(staged.path):
            counts[target] = counts.get(target, 0) + batch.record_count
    except FileNotFoundError:
        raise StorageError(f"the staged file {staged.path} of task {staged.task_id} is missing "
                           "(aborted or cleaned up?)") from None
    except OSError as exc:
        raise StorageError(f"reading the staged file {staged.path} failed: {exc}") from exc
    if tuple(sorted(counts.items())) != staged.records_per_partition:
        raise CorruptRecordError(f"the staged file {staged.path} holds {sorted(counts.items())} records but task "
                                 f"{staged.task_id} reported {list(staged.records_per_partition)}")


# --- the streaming journal ---------------------------------------------------------------------------


def _journal_name(sink_id: str) -> str:
    """Readable and collision-free: the id's safe characters plus a hash of the whole id."""
    return f"{re.sub(r'[^A-Za-z0-9._-]', '_', sink_id)[:80]}-{hashlib.sha256(sink_id.encode()).hexdigest()[:16]}.json"


class _Journal:
    """One sink's exactly-once state: the last committed batch id, and the intent of the batch being
    committed (``batch_id``, ``start_offsets`` and ``records`` as ``[topic, partition, n]`` lists)."""

    def __init__(self, path: str, sink_id: str) -> None:
        self.path, self.sink_id = path, sink_id
        self.last_batch_id: int | None = None
        self.intent: dict | None = None  # start_offsets as {(topic, partition): offset} once loaded
        if not os.path.exists(path):
            return
        try:
            body = json.loads(OS_FILE_SYSTEM.read_file(path).decode("utf-8"))
            stored = body.pop("crc32")
            if zlib.crc32(json.dumps(body, sort_keys=True).encode()) != stored:
                raise ValueError("checksum mismatch")
            if body["version"] != _JOURNAL_VERSION or body["sink_id"] != sink_id:
                raise ValueError(f"version {body['version']!r} or sink id {body['sink_id']!r} does not match")
            self.last_batch_id, self.intent = body["last_batch_id"], body["intent"]
            if self.intent is not None:
                self.intent["start_offsets"] = {(t, p): offset for t, p, offset in self.intent["start_offsets"]}
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            raise CorruptCheckpointError(f"the sink journal {path} is damaged ({exc}): exactly-once cannot be "
                                         "guaranteed for this sink; move the file away to start it afresh") from None

    def _save(self, intent: dict | None) -> None:
        body = {"version": _JOURNAL_VERSION, "sink_id": self.sink_id, "last_batch_id": self.last_batch_id,
                "intent": intent}
        body["crc32"] = zlib.crc32(json.dumps(body, sort_keys=True).encode())
        OS_FILE_SYSTEM.make_dirs(os.path.dirname(self.path))
        OS_FILE_SYSTEM.write_file_atomic(self.path, (json.dumps(body, sort_keys=True, indent=1) + "\n").encode())

    def write_intent(self, batch_id: int, start_offsets: dict[TopicPartition, int],
                     records: dict[TopicPartition, int]) -> None:
        self._save({"batch_id": batch_id, "records": [[*key, count] for key, count in sorted(records.items())],
                    "start_offsets": [[*key, offset] for key, offset in sorted(start_offsets.items())]})

    def write_committed(self, batch_id: int) -> None:
        self.last_batch_id = batch_id
        self._save(None)


def _already_appended(logs: dict[TopicPartition, Log], starts: dict[TopicPartition, int],
                      files: Sequence[StagedFile]) -> dict[TopicPartition, int]:
    """Per partition, how many of the staged records (in commit order) an interrupted attempt
    appended from its intent's start offset: the longest prefix of them found in the log. Staged
    record i belongs at ``start + i``; an offset the log no longer has (retention, compaction)
    counts as found, anything else is compared (key, value, headers, and the timestamp when the
    row gave one and the topic keeps create times)."""
    matched = dict.fromkeys(logs, 0)
    cursors: dict[TopicPartition, list] = {}  # [the log's records from the start, the next one]
    for target, log in logs.items():
        if starts[target] < log.log_end_offset:
            records = log.iter_records(max(starts[target], log.log_start_offset))
            cursors[target] = [records, next(records, None)]
    for staged in files:
        for target, records in read_staged(staged.path):
            cursor = cursors.get(target)
            if cursor is None:
                continue
            log = logs[target]
            compare_time = log.config.message_timestamp_type != "LogAppendTime"
            for record in records:
                expected, found = starts[target] + matched[target], cursor[1]
                here = found is not None and found.offset == expected  # else: removed since, counts as found
                differs = here and (found[:3] != record[:3]  # key, value, headers
                                    or compare_time and record.timestamp_ms not in (None, found.timestamp_ms))
                if differs or expected >= log.log_end_offset:
                    del cursors[target]
                    break
                matched[target] += 1
                if here:
                    cursor[1] = next(cursor[0], None)
    return {target: count for target, count in matched.items() if count}


# --- committing (the driver) -------------------------------------------------------------------------


def _check_staged_list(plan: TargetPlan, staged: Sequence[StagedFile | None]) -> list[StagedFile]:
    if None in staged:
        raise ValueError(f"tasks {[i for i, item in enumerate(staged) if item is None]} of job {plan.job_id} staged "
                         "nothing (failed?): a job commits only when every task succeeded; abort it instead")
    if not all(isinstance(item, StagedFile) for item in staged):
        raise TypeError(f"staged must hold StagedFile values, got {_short(staged)}")
    files = sorted(staged, key=lambda item: item.task_id)
    if len({item.task_id for item in files}) != len(files):
        raise ValueError(f"task ids staged twice in job {plan.job_id}: {[item.task_id for item in files]}")
    stranger = next((item for item in files if os.path.dirname(item.path) != plan.job_dir), None)
    if stranger is not None:
        raise ValueError(f"staged file {stranger.path} is not part of job {plan.job_id} ({plan.job_dir})")
    return files


def _open_writable(plan: TargetPlan, lock_wait_s: float, clock: Clock) -> LogManager:
    deadline_ms = clock.monotonic_ms() + int(lock_wait_s * 1000)
    while True:
        try:
            return LogManager(list(plan.data_dirs))
        except LockedError as exc:
            if clock.monotonic_ms() >= deadline_ms:
                raise LockedError(f"cannot commit job {plan.job_id}: {exc}. Nothing was appended; the staged files "
                                  f"stay in {plan.job_dir}: retry the commit once the store is free") from exc
            clock.sleep_ms(min(50, max(deadline_ms - clock.monotonic_ms(), 0)))


def _roll_back(logs: dict[TopicPartition, Log], before: dict[TopicPartition, int], cause: BaseException) -> None:
    """Truncate every partition touched back to its log end offset on entry."""
    failures = []
    for target, log in logs.items():
        try:
            if log.log_end_offset > before[target]:  # a failed log that got nothing is no failure to undo
                log.truncate_to(before[target])
        except Exception as exc:  # noqa: BLE001 - every partition gets its chance; all are reported
            failures.append(f"{target[0]}-{target[1]} (from offset {before[target]}): {exc}")
    if failures:
        raise StorageError(f"the commit failed ({cause!r}) and rolling back failed too; records of this job may "
                           "remain in " + "; ".join(failures)) from cause


def commit_staged(plan: TargetPlan, staged: Sequence[StagedFile | None], *, sink_id: str | None = None, batch_id:
                  int | None = None, lock_wait_s: float = 0.0, clock: Clock = SYSTEM_CLOCK) -> CommitResult:
    """Append every staged record of the job, all or nothing, and delete the job's staging dir.

    ``staged`` holds every task's ``StagedFile`` (a None, a failed task, raises ``ValueError``).
    The store is opened writable: when another process holds it this raises ``LockedError`` (after
    retrying for ``lock_wait_s`` on ``clock``) and keeps the staged files. On any failure every partition touched
    is truncated back to where it was, the staged files are kept (retry, or ``abort_staged``) and
    the error is raised. With ``sink_id`` and ``batch_id`` (streaming) the commit is exactly-once
    per (sink, batch id): see the module docstring."""
    files = _check_staged_list(plan, staged)
    if (sink_id, batch_id) != (None, None) and not (isinstance(sink_id, str) and sink_id and type(batch_id) is int
                                                    and batch_id >= 0):
        raise ValueError("a streaming commit takes both sink_id (a non-empty str) and batch_id (an int >= 0), a batch "
                         f"job neither; got {sink_id!r} and {batch_id!r}")
    store = _open_writable(plan, lock_wait_s, clock)
    try:
        result = _commit_locked(store, plan, files, sink_id, batch_id)
    finally:
        try:
            store.close()
        except (LogStoreError, OSError) as exc:  # after a commit its records are flushed: it stands
            logger.warning("closing the store after the commit of job %s: %s", plan.job_id, exc)
    shutil.rmtree(plan.job_dir, ignore_errors=True)  # with any file of failed or speculative attempts
    try:
        clear_staging(plan.data_dirs[0], clock=clock)
    except OSError as exc:  # leftovers only cost space: never fail a commit that happened
        logger.warning("clearing old staging dirs failed: %s", exc)
    return result


def _commit_locked(store: LogManager, plan: TargetPlan, files: list[StagedFile], sink_id: str | None,
                   batch_id: int | None) -> CommitResult:
    journal = None
    if sink_id is not None:
        journal = _Journal(os.path.join(plan.staging_dir, SINKS_DIR, _journal_name(sink_id)), sink_id)
        if journal.last_batch_id is not None and batch_id <= journal.last_batch_id:
            logger.info("sink %s: batch %s is committed already (last %s)", sink_id, batch_id, journal.last_batch_id)
            return CommitResult({}, {}, {}, skipped=True)
    for item in files:
        _verify_staged(item)
    planned: Counter[TopicPartition] = Counter()
    for item in files:
        planned.update(dict(item.records_per_partition))
    logs = {}
    for target in sorted(planned):
        try:
            logs[target] = store.get_log(*target)
        except UnknownTopicOrPartitionError as exc:
            raise UnknownTopicOrPartitionError(f"job {plan.job_id} staged records for {target[0]}-{target[1]}: "
                                               f"{exc} (deleted since the job was planned?)") from exc
    before = {target: log.log_end_offset for target, log in logs.items()}
    recovered: dict[TopicPartition, int] = {}
    if journal is not None:
        starts = dict(before)
        intent = journal.intent
        if intent is not None and intent["batch_id"] == batch_id:
            # The previous attempt of this batch stopped between its intent and its commit: part of
            # it (or all) may be in the logs from the intent's start offsets.
            for target, offset in intent["start_offsets"].items():
                if target in starts:
                    starts[target] = min(offset, before[target])
            recovered = _already_appended(logs, starts, files)
            logger.info("sink %s: batch %s resumes; found already appended: %s", sink_id, batch_id, recovered)
        # An intent of another batch id is abandoned: Spark re-runs an unacknowledged batch under its
        # own id before any later one, so a later id means that attempt was never going to commit.
        journal.write_intent(batch_id, starts, planned)
    appended: dict[TopicPartition, int] = {}
    first_offsets: dict[TopicPartition, int] = {}
    last_offsets: dict[TopicPartition, int] = {}
    try:
        skip = dict(recovered)
        for item in files:
            for (topic, partition), records in read_staged(item.path):
                target = (topic, partition)
                present = skip.get(target, 0)  # records an interrupted attempt appended already
                skip[target] = max(present - len(records), 0)
                if present and not (records := records[present:]):
                    continue
                info = store.append(topic, records, partition=partition)[partition]
                first_offsets.setdefault(target, info.first_offset)
                last_offsets[target] = info.last_offset
                appended[target] = appended.get(target, 0) + info.record_count
        for log in logs.values():
            log.flush()
    except BaseException as exc:
        logger.error("commit of job %s failed (%r); rolling back %s", plan.job_id, exc, sorted(logs))
        _roll_back(logs, before, exc)
        raise
    if journal is not None:
        # Not rolled back if this fails: the records are durable and either journal state covers them.
        journal.write_committed(batch_id)
    return CommitResult(appended, first_offsets, last_offsets, recovered)


# --- cleaning up ---------------------------------------------------------------------------------------


def abort_staged(plan: TargetPlan, staged: Iterable[StagedFile | None]) -> None:
    """Delete a job's staged files and its staging dir (None entries, failed tasks, are ignored;
    files already gone are fine). Spark calls this when a job fails."""
    for item in staged:
        if item is not None:
            with contextlib.suppress(FileNotFoundError):
                os.remove(item.path)
    shutil.rmtree(plan.job_dir, ignore_errors=True)  # files of tasks whose message never arrived


def clear_staging(path: str | Sequence[str], older_than_s: float = DEFAULT_STAGING_MAX_AGE_S,
                  clock: Clock = SYSTEM_CLOCK) -> list[str]:
    """Delete the staging dirs of jobs (crashed drivers, killed jobs) untouched for ``older_than_s``
    in the store at ``path`` (its first data dir); the sinks' journals stay. Returns the dirs removed."""
    first = path if isinstance(path, (str, os.PathLike)) else path[0]
    staging = os.path.join(os.fspath(first), STAGING_DIR)
    cutoff = clock.time_ms() / 1000 - older_than_s
    removed: list[str] = []
    for name in sorted(os.listdir(staging)) if os.path.isdir(staging) else ():
        job_dir = os.path.join(staging, name)
        if not _JOB_ID.fullmatch(name) or not os.path.isdir(job_dir):
            continue
        try:
            touched = max([os.path.getmtime(job_dir)]
                          + [os.path.getmtime(os.path.join(job_dir, child)) for child in os.listdir(job_dir)])
        except FileNotFoundError:
            continue  # removed meanwhile (its commit or abort)
        if touched < cutoff:
            shutil.rmtree(job_dir, ignore_errors=True)
            removed.append(job_dir)
    return removed
