"""Verifying a store's files: the engine of ``logstore check``.

Owns the checks, not the repairs: it reads every segment of every partition and reports what a
writable open would repair or what it would miss, changing nothing (it works on a read-only open,
while another process writes). Checked:

- every batch of every ``.log`` file: header and body CRCs, column consistency, offsets inside the
  segment's 32-bit range and strictly increasing within and across segments, below the log end
  offset; a torn tail (an incomplete last batch) of the last segment is a warning when the store is
  in use or crashed (an interrupted append that recovery cuts), an error anywhere else and on a
  store that shut down cleanly (it has no torn tail: that is damage);
- offsets contiguous across segments: each segment starts where the previous one ends; a hole (a
  missing segment file) is an error. Compacted topics excepted: the cleaner keeps each group's
  last batch, but a truncation inside a cleaned segment leaves it ending below the log end offset
  the next segment starts at (a missing segment there shows as index files without data);
- damaged partitions (``LogManager.damaged_partitions``) are verified like the others;
- ``log_start_offset`` within [base offset of the first segment, log end offset];
- every offset index entry ``(O, P)``: a batch starts at byte ``P`` and its base offset is ``O``;
  entries strictly increase;
- every time index entry ``(T, O)``: timestamps strictly increase, offsets never decrease, a batch
  ends at ``O`` and ``T`` is the largest batch timestamp up to it (the rule ``LogSegment.append``
  follows); a segment that is no longer active ends with an entry for its largest timestamp;
- index files: missing (a warning: they are rebuilt) or holding a partial entry;
- leftovers of an interrupted operation (a kill during compaction, retention, a topic deletion or a
  checkpoint write): ``.cleaned``, ``.swap``, ``.deleted`` files, ``-delete`` directories and ``.tmp``
  files. The next writable open completes them, so they are warnings ("interrupted operation,
  completed at the next open"), not damage. Index files without their ``.log`` stay errors: the
  segment is missing;
- transactions (``txn_check.TransactionReplay``): producer state replayed over every batch in log
  order; a producer batch or marker the log would have refused (an epoch below its producer's, a
  marker from a fenced coordinator, a non-transactional batch inside its producer's open
  transaction) is an error; each segment's ``.txnindex`` decodes and holds an entry for each
  transaction an ABORT marker in that segment aborted, and nothing else; the log's last stable
  offset is the replay's; every producer snapshot decodes, and the newest agrees with the replay;
- checkpoints: a damaged copy (the other is used) is a warning, a file with no intact copy an error,
  as is a checkpoint that a writable open set aside as ``.damaged``; partitions missing from the data
  dirs and the other problems the open found (``LogManager.problems``).

``verify_store`` takes an open ``LogManager``; ``verify_logs`` a list of ``Log``. Both return a
``VerifyReport``; ``report.ok`` is False when any problem is an error.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Callable, Iterable

from ..clock import SYSTEM_CLOCK
from ..errors import CorruptCheckpointError, CorruptIndexError, CorruptSnapshotError
from ..fs import OS_FILE_SYSTEM
from ..log.checkpoint import (CLEANER_OFFSET_CHECKPOINT, DAMAGED_SUFFIX, LOG_START_OFFSET_CHECKPOINT,
                              RECOVERY_POINT_CHECKPOINT, parse_checkpoint)
from ..log.loader import plan_directory
from ..log.producer_snapshot import ProducerSnapshot, list_snapshots, snapshot_file_name
from ..log.log import Log
from ..log.segment import LogSegment
from ..log.txn_index import decode_entries
from ..manager.log_manager import LogManager
from ..manager.topics import DELETE_DIR_SUFFIX, TOPICS_FILE, parse_topics_file
from .dump import BATCH_TORN, read_snapshot_file, scan_log_file
from .txn_check import TransactionReplay

logger = logging.getLogger(__name__)

ERROR = "error"
WARNING = "warning"
INTERRUPTED = "interrupted operation, completed at the next open"
CHECKPOINT_NAMES = (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, CLEANER_OFFSET_CHECKPOINT)
_MAX_RELATIVE_OFFSET = 2**31 - 1
_PROGRESS_STEP_BYTES = 1 << 20

ProgressCallback = Callable[[int], None]
"""Called with the number of ``.log`` bytes scanned since the previous call."""


@dataclass(frozen=True)
class Problem:
    """One finding: ``severity`` is ``error`` or ``warning``; ``path`` the file or directory
    concerned ("" for the store as a whole)."""

    severity: str
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.path}: " if self.path else ""
        return f"{self.severity.upper()} {where}{self.message}"


@dataclass
class VerifyReport:
    """What a verification found, with counts of what it looked at."""

    problems: list[Problem] = field(default_factory=list)
    partitions: int = 0
    segments: int = 0
    batches: int = 0
    records: int = 0
    bytes_checked: int = 0

    @property
    def errors(self) -> list[Problem]:
        return [problem for problem in self.problems if problem.severity == ERROR]

    @property
    def warnings(self) -> list[Problem]:
        return [problem for problem in self.problems if problem.severity == WARNING]

    @property
    def ok(self) -> bool:
        """True when no problem is an error (warnings allowed)."""
        return not self.errors

    def add(self, path: str, message: str, severity: str = ERROR) -> None:
        """Record a problem with ``path`` (an error unless ``severity`` says otherwise)."""
        self.problems.append(Problem(severity, path, message))

    def summary(self) -> str:
        """One line: what was checked and how many errors and warnings were found."""
        return (f"checked {self.partitions} partitions, {self.segments} segments, {self.batches} batches, "
                f"{self.records} records, {self.bytes_checked} bytes: "
                f"{len(self.errors)} errors, {len(self.warnings)} warnings")


def log_size_bytes(logs: Iterable[Log]) -> int:
    """Bytes of ``.log`` data on disk in ``logs``: the total a progress bar of a check counts to."""
    return sum(_file_size(segment.log_path) for log in logs for segment in log.segments)


def verify_store(manager: LogManager, on_progress: ProgressCallback | None = None) -> VerifyReport:
    """Verify every partition of an open store (read-only or not), its data dirs and the problems
    the store found while opening (missing partitions, damaged checkpoints, unknown directories)."""
    report = VerifyReport()
    for message in manager.problems:
        report.add("", message)
    for dir_path in manager.log_dirs:
        _verify_data_dir(dir_path, report)
    clean_dirs = {entry.path for entry in manager.status() if entry.clean_shutdown}
    logs = sorted(manager.logs() + manager.damaged_logs(), key=lambda log: (log.topic, log.partition))
    for log in logs:
        _verify_log(log, report, on_progress, manager.log_dir_of(log.topic, log.partition) in clean_dirs)
    return report


def verify_logs(logs: Iterable[Log], on_progress: ProgressCallback | None = None,
                report: VerifyReport | None = None) -> VerifyReport:
    """Verify each log's directory and segments; adds to ``report`` when given."""
    report = VerifyReport() if report is None else report
    for log in logs:
        _verify_log(log, report, on_progress)
    return report


def _verify_data_dir(dir_path: str, report: VerifyReport) -> None:
    for name in sorted(os.listdir(dir_path)):
        path = os.path.join(dir_path, name)
        if name.endswith(DELETE_DIR_SUFFIX) and os.path.isdir(path):
            report.add(path, f"{INTERRUPTED}: a deleted topic's partition directory was left behind; "
                             "removed at the next writable open", WARNING)
        elif name.endswith(".tmp"):
            report.add(path, f"{INTERRUPTED}: a temporary file of a checkpoint or metadata write; "
                             "replaced at the next write", WARNING)
        elif name.endswith(DAMAGED_SUFFIX):
            report.add(path, "a damaged checkpoint set aside by a writable open: the offsets it held were "
                             "lost (for a log-start-offset checkpoint, records removed by delete_records may "
                             "be readable again); remove the file once that is dealt with")
    for name in CHECKPOINT_NAMES:
        path = os.path.join(dir_path, name)
        if not os.path.exists(path):
            continue
        try:
            contents = parse_checkpoint(OS_FILE_SYSTEM.read_file(path), path)
        except CorruptCheckpointError as exc:
            if name == CLEANER_OFFSET_CHECKPOINT:  # the manager reports the other two itself
                report.add(path, str(exc))
            continue
        for damage in contents.damaged_copies:
            report.add(path, f"{damage}; the other copy is intact and used (rewritten at the next checkpoint)",
                       WARNING)
    path = os.path.join(dir_path, TOPICS_FILE)
    if os.path.exists(path):
        try:
            damage = parse_topics_file(OS_FILE_SYSTEM.read_file(path), path)[2]
        except CorruptCheckpointError:
            damage = None  # the open reports it (LogManager.problems)
        if damage is not None:
            report.add(path, f"{damage}; the other copy is intact and used (rewritten by the next writable open)",
                       WARNING)


def _verify_log(log: Log, report: VerifyReport, on_progress: ProgressCallback | None, clean: bool = False) -> None:
    """``clean``: the store shut down cleanly (no writer since), so it has no torn tail."""
    report.partitions += 1
    if not os.path.isdir(log.dir_path):
        report.add(log.dir_path, "partition directory removed during the check (a topic deletion)", WARNING)
        return
    plan = plan_directory(OS_FILE_SYSTEM, SYSTEM_CLOCK, log.dir_path, log.config)
    for name in sorted(plan.remove):
        report.add(os.path.join(log.dir_path, name),
                   f"{INTERRUPTED}: a file of an interrupted cleaning, split or deletion; removed at the next "
                   "writable open", WARNING)
    for source, _target in sorted(plan.rename):
        report.add(os.path.join(log.dir_path, source),
                   f"{INTERRUPTED}: an uncompleted segment swap; completed at the next writable open", WARNING)
    for name in sorted(plan.orphan_indexes):
        report.add(os.path.join(log.dir_path, name),
                   "index file without its .log file; removed at the next writable open")
    segments = log.segments
    if not segments:
        report.add(log.dir_path, "partition directory holds no segment", WARNING)
        return
    if not segments[0].base_offset <= log.log_start_offset <= log.log_end_offset:
        report.add(log.dir_path, f"log start offset {log.log_start_offset} is outside [{segments[0].base_offset}, "
                                 f"{log.log_end_offset}] (first segment's base offset, log end offset)")
    previous_last_offset = -1
    previous_end = None  # where the previous segment's offsets end (None: not known)
    replay = TransactionReplay(report.add, exact=segments[0].base_offset == 0 and log.log_start_offset == 0
                               and not log.config.compact, snapshot=_newest_snapshot(log, report))
    for slot, segment in enumerate(segments):
        if not os.path.exists(segment.log_path):
            report.add(segment.log_path, "segment deleted during the check (retention or cleaning by the "
                                         "process writing to the store)", WARNING)
            previous_end = None
            continue
        if (previous_end is not None and previous_end < segment.base_offset and not log.config.compact
                and segment.base_offset > log.log_start_offset):  # below the start: dead data
            report.add(segment.log_path, f"offsets {previous_end}..{segment.base_offset - 1} are missing before "
                                         "this segment (a hole: a segment file is missing or was cut)")
        last_before = previous_last_offset
        previous_last_offset = _verify_segment(log, segment, slot == len(segments) - 1, previous_last_offset,
                                               report, on_progress, clean, replay)
        previous_end = previous_last_offset + 1 if previous_last_offset > last_before else segment.base_offset
    replay.finish(log.dir_path, log.last_stable_offset, log.log_end_offset)


def _verify_segment(log: Log, segment: LogSegment, is_last: bool, previous_last_offset: int,
                    report: VerifyReport, on_progress: ProgressCallback | None, clean: bool = False,
                    replay: TransactionReplay | None = None) -> int:
    """Check one segment; returns the last offset seen (for the next segment's monotonicity).
    ``clean``: the store shut down cleanly, so even the last segment has no torn tail. ``replay``
    takes each verified batch (the partition's producer state) and then the segment's ``.txnindex``."""
    report.segments += 1
    path = segment.log_path
    by_position = _offset_index_entries(segment, report)
    by_last_offset = _time_index_entries(segment, report)
    max_timestamp = -1
    pending_bytes = 0
    torn_at = None  # where a torn tail of the last segment starts: index entries past it are a consequence
    for entry in scan_log_file(path):
        pending_bytes += entry.size_bytes
        report.bytes_checked += entry.size_bytes
        if on_progress is not None and pending_bytes >= _PROGRESS_STEP_BYTES:
            on_progress(pending_bytes)
            pending_bytes = 0
        if entry.status == BATCH_TORN:
            interrupted = is_last and not clean
            why = ("(an interrupted append; recovery cuts it at the next writable open)" if interrupted else
                   "(the store shut down cleanly: this is damage, not an interrupted append; logstore repair "
                   "cuts it)" if is_last else "(not in the last segment: damage)")
            report.add(path, f"torn tail: {entry.size_bytes} bytes of an incomplete batch at position "
                             f"{entry.position} {why}", WARNING if interrupted else ERROR)
            torn_at = entry.position if interrupted else None
            break
        if entry.header is None:
            report.add(path, f"{entry.error}; the {entry.size_bytes} bytes from there cannot be scanned")
            break
        header = entry.header
        report.batches += 1
        pointers = by_position.pop(entry.position, ())
        if not entry.ok:
            report.add(path, entry.error)  # the header's offsets are not covered by its checksum
            continue
        report.records += header.record_count
        where = f"batch at position {entry.position} (offsets {header.base_offset}..{header.last_offset})"
        if header.base_offset < segment.base_offset or header.last_offset - segment.base_offset > _MAX_RELATIVE_OFFSET:
            report.add(path, f"{where} does not fit the segment's base offset {segment.base_offset}")
        if header.base_offset <= previous_last_offset:
            report.add(path, f"{where} does not follow the previous batch's last offset {previous_last_offset}")
        appended_since_open = is_last and entry.position >= segment.size_bytes
        if header.last_offset >= log.log_end_offset and not appended_since_open:
            report.add(path, f"{where} lies at or beyond the log end offset {log.log_end_offset}")
        previous_last_offset = max(previous_last_offset, header.last_offset)
        if replay is not None:
            replay.batch(path, entry)
        max_timestamp = max(max_timestamp, header.max_timestamp)
        for slot, offset in pointers:
            if offset != header.base_offset:
                report.add(segment.offset_index.path, f"entry {slot} ({offset}, {entry.position}) points at a "
                                                      f"batch whose base offset is {header.base_offset}")
        for slot, timestamp_ms in by_last_offset.pop(header.last_offset, ()):
            if timestamp_ms != max_timestamp:
                report.add(segment.time_index.path, f"entry {slot} ({timestamp_ms}, {header.last_offset}) "
                                                    f"disagrees with the data: the largest timestamp up to offset "
                                                    f"{header.last_offset} is {max_timestamp}")
    if on_progress is not None and pending_bytes:
        on_progress(pending_bytes)
    if replay is not None:
        replay.end_segment(*_txn_index_entries(segment, report, torn_at is None))
    in_torn_tail = " (in the torn tail; recovery rebuilds the index)"
    for position, pointers in sorted(by_position.items()):
        torn = torn_at is not None and position >= torn_at
        for slot, offset in pointers:
            report.add(segment.offset_index.path, f"entry {slot} ({offset}, {position}) points at position "
                                                  f"{position}, where no valid batch starts"
                                                  + (in_torn_tail if torn else ""), WARNING if torn else ERROR)
    for offset, entries in sorted(by_last_offset.items()):
        torn = torn_at is not None and offset > previous_last_offset
        for slot, timestamp_ms in entries:
            report.add(segment.time_index.path, f"entry {slot} ({timestamp_ms}, {offset}) names offset {offset}, "
                                                f"where no valid batch ends" + (in_torn_tail if torn else ""),
                       WARNING if torn else ERROR)
    last_entry = segment.time_index.last_entry
    if not is_last and max_timestamp >= 0 and last_entry.timestamp_ms != max_timestamp:
        report.add(segment.time_index.path, f"the segment is no longer active but its last entry {tuple(last_entry)} "
                                            f"is not its largest timestamp {max_timestamp}")
    return previous_last_offset


def _newest_snapshot(log: Log, report: VerifyReport) -> tuple[str, ProducerSnapshot] | None:
    """The newest intact producer snapshot of ``log`` at or below the log end offset, with its path
    (a damaged one is skipped: the open reports it). Newer ones are a warning: a writable open
    deletes them (a recovery cut the log below them)."""
    newest = None
    for offset in list_snapshots(OS_FILE_SYSTEM, log.dir_path):
        path = os.path.join(log.dir_path, snapshot_file_name(offset))
        try:
            snapshot = read_snapshot_file(path)
        except FileNotFoundError:
            continue  # removed by the writer meanwhile
        except CorruptSnapshotError:
            continue  # the open reported it (LogManager.problems) and loaded an older one, as this does
        if offset > log.log_end_offset:
            report.add(path, f"producer snapshot past the log end offset {log.log_end_offset}; deleted at the next "
                             "writable open", WARNING)
            continue
        newest = (path, snapshot)
    return newest


def _txn_index_entries(segment: LogSegment, report: VerifyReport,
                       compare: bool) -> tuple[str, list[tuple[int, int, int, int]] | None]:
    """The segment's ``.txnindex`` path and entries (``[]`` without the file; None when they cannot
    be compared: the file is damaged, reported here, or ``compare`` is False: a torn tail, whose
    recovery re-derives the entries past it)."""
    path = segment.txn_index.path
    try:
        data = OS_FILE_SYSTEM.read_file(path)
    except FileNotFoundError:
        return path, [] if compare else None
    try:
        entries = decode_entries(data, path)
    except CorruptIndexError as exc:
        report.add(path, f"{exc}; rebuilt from the log at the next writable open")
        return path, None
    return path, [tuple(entry) for entry in entries] if compare else None


def _offset_index_entries(segment: LogSegment, report: VerifyReport) -> dict[int, list[tuple[int, int]]]:
    """The offset index entries by position (slot, offset), after checking they increase."""
    index = segment.offset_index
    _check_index_file(index.path, index.ENTRY_BYTES, report)
    by_position: dict[int, list[tuple[int, int]]] = {}
    previous = None
    for slot in range(index.entries):
        entry = index.entry(slot)
        if previous is not None and (entry.offset <= previous.offset or entry.position <= previous.position):
            report.add(index.path, f"entry {slot} {tuple(entry)} does not increase over entry {slot - 1} "
                                   f"{tuple(previous)}")
        by_position.setdefault(entry.position, []).append((slot, entry.offset))
        previous = entry
    return by_position


def _time_index_entries(segment: LogSegment, report: VerifyReport) -> dict[int, list[tuple[int, int]]]:
    """The time index entries by offset (slot, timestamp), after checking their order."""
    index = segment.time_index
    _check_index_file(index.path, index.ENTRY_BYTES, report)
    by_offset: dict[int, list[tuple[int, int]]] = {}
    previous = None
    for slot in range(index.entries):
        entry = index.entry(slot)
        if previous is not None and entry.timestamp_ms <= previous.timestamp_ms:
            report.add(index.path, f"entry {slot} {tuple(entry)}: timestamps do not strictly increase "
                                   f"(entry {slot - 1} is {tuple(previous)})")
        if entry.offset < (previous.offset if previous is not None else segment.base_offset):
            report.add(index.path, f"entry {slot} {tuple(entry)}: offset goes backwards")
        by_offset.setdefault(entry.offset, []).append((slot, entry.timestamp_ms))
        previous = entry
    return by_offset


def _check_index_file(path: str, entry_bytes: int, report: VerifyReport) -> None:
    if not os.path.exists(path):
        report.add(path, "index file is missing; rebuilt from the data at the next writable open", WARNING)
        return
    partial_bytes = _file_size(path) % entry_bytes
    if partial_bytes:
        report.add(path, f"ends with {partial_bytes} bytes that do not make a whole {entry_bytes}-byte entry")


def _file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except FileNotFoundError:
        return 0
