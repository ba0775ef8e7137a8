"""Reading logstore's files one at a time, without opening a store: the engine of ``logstore dump``
(like Kafka's ``kafka-dump-log``) and the byte-level scan that ``logstore check`` builds on.

Owns:

- ``scan_log_file``: every batch of a segment's ``.log`` file, in order, read in chunks, each with its
  status: ``ok`` (CRC and columns verified), ``corrupt`` (the header is intact, so the scan goes on
  to the next batch; or the header itself is damaged, and the scan stops there) or ``torn`` (the
  bytes end inside a batch: an interrupted append, which recovery cuts; shown, never raised).
- ``read_index_file``: the entries of a ``.index`` or ``.timeindex`` file with absolute offsets.
- ``dump_file``: human-readable lines for a ``.log`` (optionally every record), ``.index``,
  ``.timeindex``, ``.txnindex`` (aborted transactions), ``.snapshot`` (producer state) or offset
  checkpoint file. The file type comes from the file name. Timestamps are
  ``NAME_ms: N`` (ms since the epoch), or with ``timestamps="iso"`` ``NAME: 2026-11-29T13:05:01.123Z``
  (UTC, ``logstore.clock.format_iso_ms``). A batch written for a producer shows its block
  (``producer=<pid>/<epoch> seq=<n>``, `` txn`` when transactional) and a transaction marker its
  kind and coordinator epoch (``COMMIT marker coordinator_epoch=<e>``).
- ``dump_document``: the same as one JSON-ready document (``logstore dump --format json``).

It only reads. Files renamed with a status suffix (``.deleted``, ``.cleaned``, ``.swap``) are dumped
like the file they stand for.
"""

from __future__ import annotations

import base64
import logging
import os
from dataclasses import dataclass
from typing import Iterator

from ..clock import format_iso_ms
from ..errors import CorruptCheckpointError, CorruptIndexError, CorruptRecordError, CorruptSnapshotError
from ..fs import OS_FILE_SYSTEM, FileSystem
from ..log.checkpoint import (CLEANER_OFFSET_CHECKPOINT, DAMAGED_SUFFIX, LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT,
                              parse_checkpoint)
from ..log.index import OffsetIndex, TimeIndex
from ..log.producer_snapshot import SNAPSHOT_SUFFIX, ProducerSnapshot, decode_snapshot
from ..log.txn_index import TXN_INDEX_SUFFIX, TxnIndexEntry, decode_entries
from ..log.segment import (CLEANED_SUFFIX, DELETED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX, TIME_INDEX_SUFFIX)
from ..records.codecs import CODEC_NAMES
from ..records.control import Marker, decode_marker
from ..records.decoder import (COMPRESSION_MASK, CONTROL, HEADER_BYTES, TIMESTAMP_TYPE_LOG_APPEND, BatchHeader,
                               ProducerFields, Record, RecordBatch, read_header)

logger = logging.getLogger(__name__)

BATCH_OK = "ok"
BATCH_CORRUPT = "corrupt"
BATCH_TORN = "torn"

LOG_FILE = "log"
OFFSET_INDEX_FILE = "offset index"
TIME_INDEX_FILE = "time index"
CHECKPOINT_FILE = "checkpoint"
SNAPSHOT_FILE = "producer snapshot"
TXN_INDEX_FILE = "transaction index"

_CHECKPOINT_NAMES = (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, CLEANER_OFFSET_CHECKPOINT)
_STATUS_SUFFIXES = (DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX, ".tmp")
_SCAN_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class BatchEntry:
    """One batch found by ``scan_log_file``.

    ``header`` is None when the header itself could not be read (damaged, or cut short by the end
    of the file); ``batch`` is the verified batch when ``status`` is ``ok``, else None.
    ``size_bytes`` is the batch's size, or for an unreadable header the bytes left in the file."""

    position: int
    status: str
    size_bytes: int
    header: BatchHeader | None = None
    batch: RecordBatch | None = None
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status == BATCH_OK


def scan_log_file(path: str, start_position: int = 0, end_position: int | None = None, *,
                  chunk_bytes: int = _SCAN_CHUNK_BYTES, fs: FileSystem = OS_FILE_SYSTEM) -> Iterator[BatchEntry]:
    """Yield a ``BatchEntry`` for every batch of the ``.log`` file at ``path`` from ``start_position``
    up to ``end_position`` (default: the file size when the scan starts), reading ``chunk_bytes`` at a
    time. A batch whose body fails its CRC is yielded as corrupt and the scan continues (its header
    checksum vouches for its length); a damaged header or a torn tail ends the scan."""
    fd = fs.open_file(path, writable=False)
    try:
        end = fs.file_size(fd) if end_position is None else end_position
        where = f" in {path}"
        buffer = memoryview(b"")
        buffer_position = position = start_position
        while position < end:
            at = position - buffer_position
            if len(buffer) - at < HEADER_BYTES:
                buffer = memoryview(fs.pread(fd, min(chunk_bytes, end - position), position))
                buffer_position, at = position, 0
            try:
                header = read_header(buffer, at, where, whole=False)
            except CorruptRecordError as exc:
                yield BatchEntry(position, BATCH_CORRUPT, end - position, error=str(exc))
                return
            if header is None or position + header.size_bytes > end:
                yield BatchEntry(position, BATCH_TORN, end - position, header,
                                 error=f"the file ends {end - position} bytes into a batch at position {position}")
                return
            size = header.size_bytes
            data = buffer[at : at + size] if at + size <= len(buffer) else fs.pread(fd, size, position)
            if len(data) < size:  # the file shrank under us
                yield BatchEntry(position, BATCH_TORN, len(data), header,
                                 error=f"the file ends {len(data)} bytes into a batch at position {position}")
                return
            batch = RecordBatch(header, data)
            try:
                batch.verify(where, position)
            except CorruptRecordError as exc:
                yield BatchEntry(position, BATCH_CORRUPT, size, header, error=str(exc))
            else:
                yield BatchEntry(position, BATCH_OK, size, header, batch)
            position += size
    finally:
        fs.close(fd)


# --- file types ----------------------------------------------------------------------------------


def file_kind(path: str) -> str:
    """``log``, ``offset index``, ``time index``, ``transaction index``, ``producer snapshot`` or
    ``checkpoint``, from the file name; raises ``ValueError`` for anything else."""
    name = os.path.basename(path)
    if name.endswith(DAMAGED_SUFFIX):  # a checkpoint set aside by an open: <name>.<ms>.damaged
        name = name[: -len(DAMAGED_SUFFIX)].rsplit(".", 1)[0]
    for suffix in _STATUS_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    if name in _CHECKPOINT_NAMES:
        return CHECKPOINT_FILE
    for suffix, kind in ((LOG_SUFFIX, LOG_FILE), (INDEX_SUFFIX, OFFSET_INDEX_FILE), (TIME_INDEX_SUFFIX, TIME_INDEX_FILE),
                         (TXN_INDEX_SUFFIX, TXN_INDEX_FILE), (SNAPSHOT_SUFFIX, SNAPSHOT_FILE)):
        if name.endswith(suffix):
            return kind
    raise ValueError(f"cannot tell what kind of file {path} is: expected a .log, .index, .timeindex, .txnindex or "
                     f".snapshot file or one of {', '.join(_CHECKPOINT_NAMES)}")


def base_offset_of(path: str) -> int | None:
    """The base offset in a segment file name (``00000000000000000042.log`` -> 42), or None when the
    name does not start with one."""
    prefix = os.path.basename(path).split(".", 1)[0]
    return int(prefix) if prefix.isdigit() else None


def read_index_file(path: str, kind: str, base_offset: int, fs: FileSystem = OS_FILE_SYSTEM) -> tuple[list[tuple], int]:
    """The entries of an offset index (``(offset, position)``) or time index (``(timestamp_ms,
    offset)``) file with absolute offsets, and the number of trailing bytes that do not make a whole
    entry. A zero-filled preallocated tail is not counted as entries."""
    index_class = OffsetIndex if kind == OFFSET_INDEX_FILE else TimeIndex
    size_bytes = fs.path_size(path)
    index = index_class(fs, path, base_offset, max(size_bytes, index_class.ENTRY_BYTES), writable=False)
    try:
        entries = [tuple(index.entry(slot)) for slot in range(index.entries)]
    finally:
        index.close_handlers()
    return entries, size_bytes % index_class.ENTRY_BYTES


# --- dumping -------------------------------------------------------------------------------------


def dump_file(path: str, records: bool = False, fs: FileSystem = OS_FILE_SYSTEM,
              timestamps: str = "ms") -> Iterator[str]:
    """Human-readable lines describing the file at ``path`` (its kind comes from its name). With
    ``records``, a ``.log`` dump also shows every record of every valid batch. ``timestamps``:
    ``ms`` (``timestamp_ms: N``) or ``iso`` (``timestamp: ISO 8601 UTC``)."""
    if timestamps not in TIMESTAMP_STYLES:
        raise ValueError(f"timestamps must be one of {', '.join(TIMESTAMP_STYLES)}, got {timestamps!r}")
    if fs.exists(path) and not fs.is_file(path):  # a FIFO would block the read forever
        raise ValueError(f"{path} is not a regular file (a directory, FIFO, socket or device): "
                         "only the store's own files can be dumped")
    kind = file_kind(path)
    if kind == LOG_FILE:
        yield from _dump_log(path, records, fs, timestamps)
    elif kind == CHECKPOINT_FILE:
        yield from _dump_checkpoint(path, fs)
    elif kind == SNAPSHOT_FILE:
        yield from _dump_snapshot(path, fs, timestamps)
    elif kind == TXN_INDEX_FILE:
        yield from _dump_txn_index(path, fs)
    else:
        yield from _dump_index(path, kind, fs, timestamps)


TIMESTAMP_STYLES = ("ms", "iso")


def _stamp(name: str, timestamp_ms: int, timestamps: str) -> str:
    """``NAME_ms: N``, or ``NAME: ISO`` (a negative one, no timestamp, stays a number)."""
    if timestamps == "iso" and timestamp_ms >= 0:
        return f"{name}: {format_iso_ms(timestamp_ms)}"
    return f"{name}_ms: {timestamp_ms}"


def _dump_log(path: str, records: bool, fs: FileSystem, timestamps: str) -> Iterator[str]:
    size_bytes = fs.path_size(path)
    base = base_offset_of(path)
    yield f"Dumping {path}: log segment, base offset {base if base is not None else 'unknown'}, {size_bytes} bytes"
    batches = record_count = corrupt = 0
    tail = None
    for entry in scan_log_file(path, fs=fs):
        if entry.status == BATCH_TORN or entry.header is None:
            tail = entry
            break
        batches += 1
        yield _batch_line(entry, timestamps)
        if entry.ok:
            record_count += entry.header.record_count
            if records:
                yield from (_record_line(record, timestamps) for record in entry.batch.records())
        else:
            corrupt += 1
    summary = f"Summary: {batches} batches ({corrupt} corrupt), {record_count} records in valid batches"
    if tail is None:
        yield summary + f", {size_bytes} bytes, no torn tail"
        return
    if tail.status == BATCH_TORN:
        yield (f"position: {tail.position} torn tail: {tail.size_bytes} bytes of an incomplete batch "
               "(an interrupted append; recovery cuts it at the next writable open)")
        yield summary + f", torn tail of {tail.size_bytes} bytes at position {tail.position}"
    else:
        yield f"position: {tail.position} unreadable: {tail.error}; {tail.size_bytes} bytes from here not scanned"
        yield summary + f", {tail.size_bytes} unreadable bytes from position {tail.position}"


def _batch_line(entry: BatchEntry, timestamps: str = "ms") -> str:
    header = entry.header
    compression = CODEC_NAMES.get(header.attributes & COMPRESSION_MASK, "unknown")
    timestamp_type = "LogAppendTime" if header.attributes & TIMESTAMP_TYPE_LOG_APPEND else "CreateTime"
    crc = "ok" if entry.ok else f"BAD ({entry.error})"
    return (f"position: {entry.position} base_offset: {header.base_offset} last_offset: {header.last_offset} "
            f"count: {header.record_count} {_stamp('base_timestamp', header.base_timestamp, timestamps)} "
            f"{_stamp('max_timestamp', header.max_timestamp, timestamps)} size_bytes: {header.size_bytes} "
            f"compression: {compression} timestamp_type: {timestamp_type}{_producer_text(entry)} "
            f"crc: {header.crc:#010x} {crc}")


def batch_producer(entry: BatchEntry) -> tuple[ProducerFields | None, Marker | None]:
    """The producer block of a verified batch (None without one, or when the batch is damaged: its
    block is not to be trusted) and, for a control batch, the transaction marker it holds."""
    if not entry.ok:
        return None, None
    producer = entry.batch.producer
    if producer is None or not entry.header.attributes & CONTROL:
        return producer, None
    record = entry.batch.record_at(0)
    return producer, decode_marker(record.key, record.value)  # verify() decoded it already: cannot fail


def _producer_text(entry: BatchEntry) -> str:
    """`` producer=<pid>/<epoch> seq=<n>`` with `` txn`` for a transactional batch and, for a
    marker, `` COMMIT marker coordinator_epoch=<e>`` (or ABORT); "" for a batch without a producer."""
    producer, marker = batch_producer(entry)
    if producer is None:
        return ""
    text = (f" producer={producer.producer_id}/{producer.producer_epoch} seq={producer.base_sequence}"
            + (" txn" if producer.transactional else ""))
    if marker is not None:
        text += f" {'COMMIT' if marker.commit else 'ABORT'} marker coordinator_epoch={marker.coordinator_epoch}"
    return text


def _record_line(record: Record, timestamps: str = "ms") -> str:
    headers = ", ".join(f"{key}={_show(value)}" for key, value in record.headers)
    return (f"| offset: {record.offset} {_stamp('timestamp', record.timestamp_ms, timestamps)} "
            f"key: {_show(record.key)} "
            f"value: {_show(record.value)} headers: [{headers}]")


def _show(data: bytes | None) -> str:
    """None as ``null``, bytes as a Python bytes literal (printable text stays readable)."""
    return "null" if data is None else repr(bytes(data))


def _dump_index(path: str, kind: str, fs: FileSystem, timestamps: str) -> Iterator[str]:
    base = base_offset_of(path)
    entries, partial_bytes = read_index_file(path, kind, base or 0, fs)
    size_bytes = fs.path_size(path)
    entry_bytes = OffsetIndex.ENTRY_BYTES if kind == OFFSET_INDEX_FILE else TimeIndex.ENTRY_BYTES
    spare = size_bytes - partial_bytes - len(entries) * entry_bytes
    yield (f"Dumping {path}: {kind}, base offset {base if base is not None else 'unknown (0 assumed)'}, "
           f"{len(entries)} entries, {size_bytes} bytes"
           + (f" ({spare} bytes preallocated and empty)" if spare else ""))
    for slot, entry in enumerate(entries):
        if kind == OFFSET_INDEX_FILE:
            yield f"entry: {slot} offset: {entry[0]} position: {entry[1]}"
        else:
            yield f"entry: {slot} {_stamp('timestamp', entry[0], timestamps)} offset: {entry[1]}"
    if partial_bytes:
        yield f"trailing {partial_bytes} bytes do not make a whole entry (a damaged index; it is rebuilt on open)"


def _dump_checkpoint(path: str, fs: FileSystem) -> Iterator[str]:
    data = fs.read_file(path)
    try:
        contents = parse_checkpoint(data, path)
    except CorruptCheckpointError as exc:
        yield f"Dumping {path}: checkpoint, DAMAGED: {exc} (no intact copy)"
        yield from (f"| {line}" for line in data.decode("utf-8", "replace").splitlines())
        return
    entries = contents.entries
    yield f"Dumping {path}: offset checkpoint (version {contents.version}), {len(entries)} entries"
    for damage in contents.damaged_copies:
        yield f"damaged copy: {damage} (the intact copy is shown; rewritten at the next checkpoint)"
    for (topic, partition), offset in sorted(entries.items()):
        yield f"topic: {topic} partition: {partition} offset: {offset}"


def read_txn_index_file(path: str, fs: FileSystem = OS_FILE_SYSTEM) -> list[TxnIndexEntry]:
    """The aborted transactions of the ``.txnindex`` at ``path``; ``CorruptIndexError`` when an
    entry fails its checksum or order."""
    return decode_entries(fs.read_file(path), path)


def _dump_txn_index(path: str, fs: FileSystem) -> Iterator[str]:
    size_bytes = fs.path_size(path)
    base = base_offset_of(path)
    try:
        entries = read_txn_index_file(path, fs)
    except CorruptIndexError as exc:
        yield f"Dumping {path}: transaction index, {size_bytes} bytes, DAMAGED: {exc} (rebuilt from the log on open)"
        return
    yield (f"Dumping {path}: transaction index (aborted transactions), base offset "
           f"{base if base is not None else 'unknown'}, {len(entries)} entries, {size_bytes} bytes")
    for slot, entry in enumerate(entries):
        yield (f"entry: {slot} producer_id: {entry.producer_id} first_offset: {entry.first_offset} "
               f"last_offset: {entry.last_offset} last_stable_offset: {entry.last_stable_offset}")


def read_snapshot_file(path: str, fs: FileSystem = OS_FILE_SYSTEM) -> ProducerSnapshot:
    """The producer snapshot at ``path`` (its offset from its name); ``CorruptSnapshotError`` when
    it is damaged."""
    return decode_snapshot(fs.read_file(path), offset=base_offset_of(path) or 0, path=path)


def _dump_snapshot(path: str, fs: FileSystem, timestamps: str) -> Iterator[str]:
    size_bytes = fs.path_size(path)
    try:
        snapshot = read_snapshot_file(path, fs)
    except CorruptSnapshotError as exc:
        yield f"Dumping {path}: producer snapshot, {size_bytes} bytes, DAMAGED: {exc}"
        return
    follow = ("producer batches may follow (a load replays from here)" if snapshot.batches_follow
              else "exact (no replay)")
    yield (f"Dumping {path}: producer snapshot, state before offset {snapshot.offset}, "
           f"{len(snapshot.entries)} producers, {follow}, {size_bytes} bytes")
    for entry in snapshot.entries:
        yield (f"producer_id: {entry.producer_id} epoch: {entry.epoch} coordinator_epoch: {entry.coordinator_epoch} "
               f"last_offset: {entry.last_offset} {_stamp('last_timestamp', entry.last_timestamp_ms, timestamps)} "
               f"txn_first_offset: {entry.txn_first_offset}")


# --- as one JSON document ------------------------------------------------------------------------


def dump_document(path: str, records: bool = False, fs: FileSystem = OS_FILE_SYSTEM) -> dict:
    """What ``dump_file`` shows, as one JSON-ready document (``logstore dump --format json``):
    ``{"path", "kind", "base_offset", "size_bytes", ...}`` and by kind: a log's ``"batches"``
    (each ``{"position", "status", "base_offset", "last_offset", "count", "base_timestamp_ms",
    "max_timestamp_ms", "size_bytes", "compression", "timestamp_type", "crc", "error", "producer",
    "marker"}``: ``producer`` null or ``{"producer_id", "producer_epoch", "base_sequence",
    "transactional"}``, ``marker`` null or ``{"type": "COMMIT" | "ABORT", "coordinator_epoch"}``; with
    ``records`` a ``"records"`` list of ``{"offset", "timestamp_ms", "key", "value", "headers"}``,
    keys, values and header values base64, null for null) and ``"tail"`` (null, or ``{"status",
    "position", "size_bytes", "error"}``); an index's ``"entries"`` (``{"offset", "position"}`` or
    ``{"timestamp_ms", "offset"}``) and ``"trailing_bytes"``; a producer snapshot's ``"batches_follow"``,
    ``"entries"`` (``{"producer_id", "epoch", "coordinator_epoch", "last_offset",
    "last_timestamp_ms", "txn_first_offset"}``) and ``"error"``; a transaction index's
    ``"entries"`` (``{"producer_id", "first_offset", "last_offset", "last_stable_offset"}``: an
    aborted transaction, its ABORT marker at ``last_offset``) and ``"error"``; a checkpoint's ``"version"``,
    ``"entries"`` (``{"topic", "partition", "offset"}``), ``"damaged_copies"`` and ``"error"``
    (null, or why it cannot be read)."""
    if fs.exists(path) and not fs.is_file(path):
        raise ValueError(f"{path} is not a regular file (a directory, FIFO, socket or device): "
                         "only the store's own files can be dumped")
    kind = file_kind(path)
    document: dict = {"path": path, "kind": kind, "base_offset": base_offset_of(path), "size_bytes": fs.path_size(path)}
    if kind == LOG_FILE:
        batches, tail = [], None
        for entry in scan_log_file(path, fs=fs):
            if entry.status == BATCH_TORN or entry.header is None:
                tail = {"status": entry.status, "position": entry.position, "size_bytes": entry.size_bytes,
                        "error": entry.error or None}
                break
            batches.append(_batch_json(entry, records))
        document.update(batches=batches, tail=tail)
    elif kind == SNAPSHOT_FILE:
        try:
            snapshot = read_snapshot_file(path, fs)
        except CorruptSnapshotError as exc:
            document.update(batches_follow=None, entries=[], error=str(exc))
        else:
            document.update(batches_follow=snapshot.batches_follow,
                            entries=[entry._asdict() for entry in snapshot.entries], error=None)
    elif kind == TXN_INDEX_FILE:
        try:
            document.update(entries=[entry._asdict() for entry in read_txn_index_file(path, fs)], error=None)
        except CorruptIndexError as exc:
            document.update(entries=[], error=str(exc))
    elif kind == CHECKPOINT_FILE:
        try:
            contents = parse_checkpoint(fs.read_file(path), path)
        except CorruptCheckpointError as exc:
            document.update(version=None, entries=[], damaged_copies=[], error=str(exc))
        else:
            document.update(version=contents.version, entries=[
                {"topic": topic, "partition": partition, "offset": offset}
                for (topic, partition), offset in sorted(contents.entries.items())],
                damaged_copies=[str(damage) for damage in contents.damaged_copies], error=None)
    else:
        entries, partial_bytes = read_index_file(path, kind, document["base_offset"] or 0, fs)
        names = ("offset", "position") if kind == OFFSET_INDEX_FILE else ("timestamp_ms", "offset")
        document.update(entries=[dict(zip(names, entry)) for entry in entries], trailing_bytes=partial_bytes)
    return document


def _batch_json(entry: BatchEntry, records: bool) -> dict:
    header = entry.header
    row = {"position": entry.position, "status": entry.status, "base_offset": header.base_offset,
           "last_offset": header.last_offset, "count": header.record_count, "base_timestamp_ms": header.base_timestamp,
           "max_timestamp_ms": header.max_timestamp, "size_bytes": header.size_bytes,
           "compression": CODEC_NAMES.get(header.attributes & COMPRESSION_MASK, "unknown"),
           "timestamp_type": "LogAppendTime" if header.attributes & TIMESTAMP_TYPE_LOG_APPEND else "CreateTime",
           "crc": header.crc, "error": entry.error or None}
    producer, marker = batch_producer(entry)
    row["producer"] = None if producer is None else {
        "producer_id": producer.producer_id, "producer_epoch": producer.producer_epoch,
        "base_sequence": producer.base_sequence, "transactional": producer.transactional}
    row["marker"] = None if marker is None else {"type": "COMMIT" if marker.commit else "ABORT",
                                                 "coordinator_epoch": marker.coordinator_epoch}
    if records:
        row["records"] = [{"offset": record.offset, "timestamp_ms": record.timestamp_ms, "key": _base64(record.key),
                           "value": _base64(record.value),
                           "headers": [{"key": key, "value": _base64(value)} for key, value in record.headers]}
                          for record in entry.batch.records()] if entry.ok else None
    return row


def _base64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(bytes(data)).decode("ascii")
