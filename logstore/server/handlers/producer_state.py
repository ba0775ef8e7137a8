"""Idempotent producers: producer ids, and the last batches of each producer on each partition, so a
retried batch is answered with its original offsets instead of being appended twice.

Kafka keeps a producer's id, epoch and base sequence in every batch and rebuilds this state from
the log. Our batch format has no such fields (docs/FORMAT.md), so the server keeps the state beside
the store, in one journal file, ``producer-state.journal``, in the first data dir:

- one line per idempotent batch appended, **written before the batch is appended**:
  ``B topic partition producer_id epoch first_sequence last_sequence first_offset last_offset``;
- one line per block of producer ids handed out: ``P next_free_id`` (fsynced before any id of the
  block is used, so an id is never handed out twice, even after a power loss).

Each line ends with `` <crc>``: ``zlib.crc32`` of the text before it, 8 hex digits, and a rewritten
journal starts with the version line ``V 1`` and has its ``P`` line both first and last, so one
damaged line cannot lose the id reservation. Lines without a checksum (version 0, written by earlier versions)
are still read. A damaged line that is not a torn last line is ignored with a warning and recorded
in ``problems``; as it may have been a ``P`` line, the next id then starts a block further on. A
journal left with no intact ``P`` line, or missing although a server ran on the dir (its
``__consumer_offsets`` partitions exist), is reported and the ids go on from a block derived from
the clock (microseconds since the epoch), which no id can have reached unless the store handed out
more than one id per microsecond on average. A journal that does not end with its closing ``P`` line
(a crash's tail, or a cut of whole lines: they cannot be told apart) is reported as "producer state
may be incomplete": a retry of the last batches may then be appended again.

Both writes go to the OS like an ``acks=1`` append: they survive a kill -9 of the server. At start-up
the journal is replayed and each batch line is checked against the log it names: a line whose
``last_offset`` is not below that partition's log end offset describes a batch that never made it
into the log (the process died between the two writes, or recovery cut a torn tail) and is dropped,
so a retry of that batch is appended, as it must be. The replayed state (the last five batches per
producer and partition, as in Kafka) is then written back as a new journal (temp file, fsync,
rename, fsync of the dir), which keeps the file small; it is rewritten the same way while serving
once it has grown past ``COMPACT_AFTER_LINES`` lines.
"""

from __future__ import annotations

import collections
import logging
import os
import re
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Callable

from ...errors import CorruptCheckpointError
from ...fs import OS_FILE_SYSTEM, FileSystem
from ..protocol import errors

logger = logging.getLogger(__name__)

JOURNAL_NAME = "producer-state.journal"
BATCHES_TO_RETAIN = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN
PRODUCER_ID_BLOCK = 1000
COMPACT_AFTER_LINES = 100_000
_INT32_MAX = 2**31 - 1
JOURNAL_VERSION = 1
OFFSETS_TOPIC_DIR_PREFIX = "__consumer_offsets-"
_CRC = re.compile(r"[0-9a-f]{8}")


@dataclass
class BatchMetadata:
    """One appended batch of a producer: its sequence range and the offsets it was given."""

    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int


@dataclass
class ProducerEntry:
    """What the server knows of one producer on one partition: its epoch and last batches."""

    epoch: int
    batches: collections.deque = field(default_factory=lambda: collections.deque(maxlen=BATCHES_TO_RETAIN))


class SequenceCheck:
    """The verdict on an incoming batch: append it, answer it as a duplicate, or refuse it."""

    __slots__ = ("error_code", "duplicate", "message")

    def __init__(self, error_code: int = errors.NONE, duplicate: BatchMetadata | None = None,
                 message: str | None = None) -> None:
        self.error_code = error_code
        self.duplicate = duplicate
        self.message = message


def next_sequence(sequence: int) -> int:
    """Kafka's sequences wrap from 2**31 - 1 to 0."""
    return 0 if sequence == _INT32_MAX else sequence + 1


class ProducerStateManager:
    """Producer ids and per-partition producer state, with the journal that keeps them."""

    def __init__(self, dir_path: str, *, fs: FileSystem | None = None) -> None:
        self.path = os.path.join(dir_path, JOURNAL_NAME)
        self.dir_path = dir_path
        self._fs = fs or OS_FILE_SYSTEM
        self._lock = threading.RLock()
        self._entries: dict[tuple[str, int, int], ProducerEntry] = {}
        self._next_id = 0
        self._reserved_until = 0  # ids below this are covered by a journal line
        self._lines = 0
        self._file = None
        self.problems: list[str] = []  # damaged lines found by load()

    # --- start-up --------------------------------------------------------------------------------

    def load(self, log_end_offset: Callable[[str, int], int | None]) -> None:
        """Replay the journal, keeping the batches the logs hold (``log_end_offset(topic, partition)``
        gives a partition's end offset, None for a partition that no longer exists), then rewrite it."""
        dropped = damaged = 0
        checksummed = reserved = False
        if os.path.exists(self.path):
            with open(self.path, "rb") as journal:
                data = journal.read()
            last_kind, reservations = None, 0
            for number, raw in enumerate(data.split(b"\n"), 1):
                if not raw:
                    continue
                try:
                    fields = _verified_fields(raw, checksummed)
                    checksummed = checksummed or fields[0] == "V"  # every line after a version line has one
                    reserved = reserved or fields[0] == "P"
                    dropped += self._replay(fields, log_end_offset)
                    last_kind = fields[0]
                    reservations = 0 if last_kind == "V" else reservations + (last_kind == "P")
                except (ValueError, IndexError, UnicodeDecodeError):
                    # A torn last line after a crash; anything else is damage worth a word.
                    last_kind = None
                    if number <= data.count(b"\n"):  # a complete line (a torn one has no line end)
                        damaged += 1
                        self._report(f"{self.path} line {number} is damaged and ignored: {raw[:80]!r}")
            if not reserved:
                # Every version writes a P line first (and this one last too): without one, the ids
                # handed out are unknown. Reported, and the ids go on from a block no id can have used.
                self._report(f"{self.path} is damaged: no intact producer id reservation (P line) is left; "
                             "producer state may be incomplete and producer ids restart from a block derived "
                             "from the clock")
                self._skip_to_clock_block()
            elif checksummed and (last_kind != "P" or reservations < 2) and not damaged:
                # A journal closed cleanly ends with its P line (its second one since the V line;
                # version 0 had no such rule). Any other end is a crash's torn or
                # unsynced tail, or a cut that took whole lines: the two cannot be told apart, so a
                # retry of the last batches may be appended again. Said, never silent.
                self._report(f"{self.path} does not end with its closing P line (the server stopped without "
                             "closing it, or the file was cut): producer state may be incomplete")
        elif self._ran_before():
            self._report(f"{self.path} is missing although a server used this data dir: producer state is lost "
                         "(retried batches may be appended twice) and producer ids restart from a block "
                         "derived from the clock")
            self._skip_to_clock_block()
        if damaged:
            # The line may have reserved a block of producer ids (each P line reserves one block past
            # the previous one): skip a block, so no id can be handed out twice.
            self._reserved_until += PRODUCER_ID_BLOCK
        if dropped:
            logger.info("producer state: %d batch(es) past their log's end were dropped (not appended "
                        "before the last stop)", dropped)
        self._next_id = max(self._next_id, self._reserved_until)
        self._rewrite()

    def _report(self, message: str) -> None:
        logger.warning("%s", message)
        self.problems.append(message)

    def _ran_before(self) -> bool:
        """Whether a server ran on this dir: it creates ``__consumer_offsets`` at its first start."""
        try:
            return any(name.startswith(OFFSETS_TOPIC_DIR_PREFIX) for name in os.listdir(self.dir_path))
        except OSError:
            return False

    def _skip_to_clock_block(self) -> None:
        """Reserve from the clock's microseconds since the epoch on: ids handed out before the
        reservation was lost are below that unless the store averaged more than one new producer id
        per microsecond (an earlier skip's block of ``PRODUCER_ID_BLOCK`` ids is used up in 1 ms)."""
        self._reserved_until = max(self._reserved_until, time.time_ns() // 1_000)

    def _replay(self, fields: list[str], log_end_offset: Callable[[str, int], int | None]) -> int:
        kind = fields[0]
        if kind == "V":
            if fields[1:] != [str(JOURNAL_VERSION)]:
                raise CorruptCheckpointError(f"{self.path} has version {fields[1:]}, which this version of "
                                             f"logstore cannot read (it writes version {JOURNAL_VERSION})")
            return 0
        if kind == "P":
            if len(fields) != 2:
                raise ValueError("a P line has one field")
            self._reserved_until = max(self._reserved_until, int(fields[1]))
            return 0
        if kind != "B" or len(fields) != 9:
            raise ValueError(f"unknown journal line kind {kind!r}")
        topic, partition = fields[1], int(fields[2])
        producer_id, epoch, first_sequence, last_sequence, first_offset, last_offset = map(int, fields[3:])
        self._reserved_until = max(self._reserved_until, producer_id + 1)
        end = log_end_offset(topic, partition)
        if end is None or last_offset >= end:
            return 1
        self._remember(topic, partition, producer_id, epoch, BatchMetadata(first_sequence, last_sequence,
                                                                           first_offset, last_offset))
        return 0

    # --- producer ids ----------------------------------------------------------------------------

    def new_producer_id(self) -> int:
        """A producer id never handed out before by this store."""
        with self._lock:
            if self._next_id >= self._reserved_until:
                self._reserved_until = self._next_id + PRODUCER_ID_BLOCK
                self._write(_line(f"P {self._reserved_until}"), sync=True)
            producer_id = self._next_id
            self._next_id += 1
            return producer_id

    # --- batches ---------------------------------------------------------------------------------

    def check(self, topic: str, partition: int, producer_id: int, epoch: int, first_sequence: int,
              last_sequence: int) -> SequenceCheck:
        """Kafka's sequence rules for a batch about to be appended (call under the partition's lock)."""
        entry = self._entries.get((topic, partition, producer_id))
        if entry is None:
            return SequenceCheck()  # a producer new to this partition (or whose state expired)
        if epoch < entry.epoch:
            return SequenceCheck(errors.INVALID_PRODUCER_EPOCH,
                                 message=f"producer {producer_id} epoch {epoch} is older than {entry.epoch}")
        if epoch > entry.epoch:
            if first_sequence != 0:
                return SequenceCheck(errors.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                     message=f"a new epoch must start at sequence 0, got {first_sequence}")
            return SequenceCheck()
        for batch in entry.batches:
            if batch.first_sequence == first_sequence and batch.last_sequence == last_sequence:
                return SequenceCheck(duplicate=batch)
        if entry.batches:
            expected = next_sequence(entry.batches[-1].last_sequence)
            if first_sequence != expected:
                return SequenceCheck(errors.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                     message=f"expected sequence {expected} from producer {producer_id}, "
                                             f"got {first_sequence}")
        return SequenceCheck()

    def will_append(self, topic: str, partition: int, producer_id: int, epoch: int, first_sequence: int,
                    last_sequence: int, first_offset: int, last_offset: int) -> None:
        """Journal a batch just before it is appended at ``first_offset .. last_offset``."""
        self._write(_line(f"B {topic} {partition} {producer_id} {epoch} {first_sequence} {last_sequence} "
                          f"{first_offset} {last_offset}"))
        self._remember(topic, partition, producer_id, epoch,
                       BatchMetadata(first_sequence, last_sequence, first_offset, last_offset))

    def forget(self, topic: str, partition: int, producer_id: int, epoch: int, first_sequence: int) -> None:
        """Undo ``will_append`` when the append failed (the journal line is dropped at the next load,
        its offsets being past the log's end, or replaced by the batch that takes those offsets)."""
        entry = self._entries.get((topic, partition, producer_id))
        if entry is not None and entry.batches and entry.batches[-1].first_sequence == first_sequence:
            entry.batches.pop()

    def forget_topic(self, topic: str) -> None:
        """A deleted topic's producers start afresh if the name is created again."""
        with self._lock:
            for key in [key for key in self._entries if key[0] == topic]:
                del self._entries[key]

    def _remember(self, topic: str, partition: int, producer_id: int, epoch: int, batch: BatchMetadata) -> None:
        key = (topic, partition, producer_id)
        entry = self._entries.get(key)
        if entry is None or epoch > entry.epoch:
            entry = self._entries[key] = ProducerEntry(epoch)
        entry.batches.append(batch)

    # --- the journal -----------------------------------------------------------------------------

    def _write(self, line: str, sync: bool = False) -> None:
        """Append ``line`` (made by ``_line``) to the journal."""
        with self._lock:
            if self._file is None:
                self._file = open(self.path, "ab", buffering=0)
            self._file.write(line.encode("utf-8"))
            self._lines += 1
            if sync:
                self._fs.fsync(self._file.fileno())
            if self._lines > COMPACT_AFTER_LINES:
                self._rewrite()

    def _rewrite(self) -> None:
        reservation = _line(f"P {self._reserved_until}")
        lines = [_line(f"V {JOURNAL_VERSION}"), reservation]
        for (topic, partition, producer_id), entry in self._entries.items():
            for batch in entry.batches:
                lines.append(_line(f"B {topic} {partition} {producer_id} {entry.epoch} {batch.first_sequence} "
                                   f"{batch.last_sequence} {batch.first_offset} {batch.last_offset}"))
        lines.append(reservation)  # twice: one damaged line cannot lose it
        if self._file is not None:
            self._file.close()
            self._file = None
        self._fs.write_file_atomic(self.path, "".join(lines).encode("utf-8"))
        self._lines = len(lines)

    def close(self) -> None:
        """Write the journal back compacted and close it."""
        with self._lock:
            try:
                self._rewrite()
            finally:
                if self._file is not None:
                    self._file.close()
                    self._file = None


def _line(text: str) -> str:
    """A journal line: ``text``, its checksum and the line end."""
    return f"{text} {zlib.crc32(text.encode('utf-8')):08x}\n"


def _verified_fields(raw: bytes, checksummed: bool) -> list[str]:
    """The fields of a journal line without its checksum; raises ``ValueError`` when the checksum
    does not match. Unless ``checksummed`` (a version line came first), a line of version 0 (no
    checksum: a ``B`` line of 9 fields or a ``P`` line of 2) is taken as it is."""
    text = raw.decode("utf-8")
    fields = text.split(" ")
    if not checksummed and (fields[0], len(fields)) in (("B", 9), ("P", 2)):
        return fields
    body, _, crc = text.rpartition(" ")
    if not _CRC.fullmatch(crc) or zlib.crc32(body.encode("utf-8")) != int(crc, 16):
        raise ValueError("checksum mismatch")
    return fields[:-1]
