"""Idempotent producers: producer ids, and the last batches of each producer on each partition, so a
retried batch is answered with its original offsets instead of being appended twice.

Kafka keeps a producer's id, epoch and base sequence in every batch and rebuilds this state from
the log. Our batch format has no such fields (docs/FORMAT.md), so the server keeps the state beside
the store, in one journal file, ``producer-state.journal``, in the first data dir:

- one line per idempotent batch appended, **written before the batch is appended**:
  ``B topic partition producer_id epoch first_sequence last_sequence first_offset last_offset append_ms``
  (``append_ms``: the server's clock when the batch came; version 1 lines have no such field);
- one line per block of producer ids handed out: ``P next_free_id`` (fsynced before any id of the
  block is used, so an id is never handed out twice, even after a power loss).

Each line ends with `` <crc>``: ``zlib.crc32`` of the text before it, 8 hex digits, and a rewritten
journal starts with the version line ``V 2`` and has its ``P`` line both first and last, so one
damaged line cannot lose the id reservation. Lines without a checksum (version 0, written by earlier versions)
are still read, and so are version 1 journals. A damaged line that is not a torn last line is ignored with a warning and recorded
in ``problems``; as it may have been a ``P`` line, the next id then starts a block further on. A
journal left with no intact ``P`` line, or missing although a server ran on the dir (its
``meta.properties`` existed before this start), is reported and the ids go on from a block derived from
the clock (microseconds since the epoch), which no id can have reached unless the store handed out
more than one id per microsecond on average. A journal that does not end with its closing ``P`` line
(a crash's tail, or a cut of whole lines: they cannot be told apart) is reported as "producer state
may be incomplete": a retry of the last batches may then be appended again.

Only ids this broker handed out are accepted: ``check`` answers UNKNOWN_PRODUCER_ID for a batch
naming an id at or past the reservation (a client cannot invent one, so no forged id can push the
reservation past the int64 range), and the replay ignores, and reports, a line whose values are out
of range (an id past the reservation, a reservation past ``PRODUCER_ID_LIMIT``, a negative offset)
without losing the other lines.

A producer's state on a partition expires ``expiration_ms`` (``producer.id.expiration.ms``, Kafka's
default one day) after its last batch there, by the server's clock: checked every
``check_interval_ms`` as batches come, and at start-up against the ``append_ms`` of the lines. An
expired producer is dropped from memory, and from the journal at its next rewrite; its next batch
is taken as a new producer's (any sequence), as Kafka takes it.

Both writes go to the OS like an ``acks=1`` append: they survive a kill -9 of the server. At start-up
the journal is replayed and each batch line is checked against the log it names: a line whose
``last_offset`` is not below that partition's log end offset describes a batch that never made it
into the log (the process died between the two writes, or recovery cut a torn tail) and is dropped,
so a retry of that batch is appended, as it must be. The replayed state (the last five batches per
producer and partition, as in Kafka) is then written back as a new journal (temp file, fsync,
rename, fsync of the dir). While serving, the journal is only appended to, one line per batch, and
rewritten the same way once it holds more than ``COMPACT_AFTER_LINES`` lines and more than twice
the live ones: a rewrite costs the live lines, and at least as many lines were appended since the
last one, so the journal's cost per batch stays a few lines whatever the number of producers.
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

from ...clock import SYSTEM_CLOCK, Clock
from ...errors import CorruptCheckpointError
from ...fs import OS_FILE_SYSTEM, FileSystem
from ..protocol import errors

logger = logging.getLogger(__name__)

JOURNAL_NAME = "producer-state.journal"
BATCHES_TO_RETAIN = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN
PRODUCER_ID_BLOCK = 1000
COMPACT_AFTER_LINES = 100_000
PRODUCER_ID_LIMIT = 2**63 - 1
"""Producer ids are below it (int64, the wire's type); a reservation (the next free id) is at most it."""
DEFAULT_EXPIRATION_MS = 86_400_000  # Kafka's producer.id.expiration.ms
DEFAULT_EXPIRATION_CHECK_INTERVAL_MS = 600_000  # Kafka's producer.id.expiration.check.interval.ms
_INT16_MIN, _INT16_MAX = -(2**15), 2**15 - 1
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
JOURNAL_VERSION = 2
_READABLE_VERSIONS = ("1", "2")  # version 1: B lines without append_ms
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
    """What the server knows of one producer on one partition: its epoch, last batches, and when
    its last batch came (the server's clock, ms), from which it expires."""

    epoch: int
    batches: collections.deque = field(default_factory=lambda: collections.deque(maxlen=BATCHES_TO_RETAIN))
    last_append_ms: int = 0


class SequenceCheck:
    """The verdict on an incoming batch: append it, answer it as a duplicate, or refuse it."""

    __slots__ = ("error_code", "duplicate", "message")

    def __init__(self, error_code: int = errors.NONE, duplicate: BatchMetadata | None = None,
                 message: str | None = None) -> None:
        self.error_code = error_code
        self.duplicate = duplicate
        self.message = message


class ProducerIdsExhaustedError(Exception):
    """No producer id is left below ``PRODUCER_ID_LIMIT``."""


class _OutOfRange(ValueError):
    """A journal line whose checksum holds but whose values no broker of this store wrote."""


def next_sequence(sequence: int) -> int:
    """Kafka's sequences wrap from 2**31 - 1 to 0."""
    return 0 if sequence == _INT32_MAX else sequence + 1


class ProducerStateManager:
    """Producer ids and per-partition producer state, with the journal that keeps them."""

    def __init__(self, dir_path: str, *, fs: FileSystem | None = None, clock: Clock | None = None,
                 expiration_ms: int = DEFAULT_EXPIRATION_MS,
                 check_interval_ms: int = DEFAULT_EXPIRATION_CHECK_INTERVAL_MS) -> None:
        for name, value in (("expiration_ms", expiration_ms), ("check_interval_ms", check_interval_ms)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.path = os.path.join(dir_path, JOURNAL_NAME)
        self.dir_path = dir_path
        self._fs = fs or OS_FILE_SYSTEM
        self._clock = clock or SYSTEM_CLOCK
        self.expiration_ms = expiration_ms
        self.check_interval_ms = check_interval_ms
        self._lock = threading.RLock()
        self._entries: dict[tuple[str, int, int], ProducerEntry] = {}
        self._live = 0  # batches held in _entries: the B lines a rewrite writes
        self._next_id = 0
        self._reserved_until = 0  # ids below this are covered by a journal line
        self._lines = 0
        self._fd: int | None = None
        self._position = 0  # where the next journal line goes
        self._next_check_ms = 0
        self.problems: list[str] = []  # damaged lines found by load()

    # --- start-up --------------------------------------------------------------------------------

    def load(self, log_end_offset: Callable[[str, int], int | None], *, served_before: bool | None = None) -> None:
        """Replay the journal, keeping the batches the logs hold (``log_end_offset(topic, partition)``
        gives a partition's end offset, None for a partition that no longer exists) and the producers
        not expired, then rewrite it. ``served_before``: whether a server ran on this dir before
        (its identity file existed; it wrote the journal then); None guesses from the dir."""
        now = self._clock.time_ms()
        dropped = damaged = 0
        checksummed = reserved = False
        batch_lines: list[tuple[int, list[str]]] = []
        if os.path.exists(self.path):
            data = self._fs.read_file(self.path)
            last_kind, reservations = None, 0
            for number, raw in enumerate(data.split(b"\n"), 1):
                if not raw:
                    continue
                try:
                    fields = _verified_fields(raw, checksummed)
                    kind = fields[0]
                    if kind == "V":
                        self._check_version(fields)
                        checksummed = True  # every line after a version line has a checksum
                    elif kind == "P":
                        self._replay_reservation(fields)
                        reserved = True
                    elif kind == "B" and len(fields) in (9, 10):
                        [int(value) for value in fields[2:]]  # integers, else damaged; ranges: below
                        batch_lines.append((number, fields))
                    else:
                        raise ValueError(f"unknown journal line kind {kind!r}")
                    last_kind = kind
                    reservations = 0 if last_kind == "V" else reservations + (last_kind == "P")
                except _OutOfRange as exc:
                    # Intact but impossible (a forged producer id journaled by an earlier version):
                    # reported; as a reservation it may have hidden a real one, so counted as damage.
                    last_kind = None
                    damaged += 1
                    self._report(f"{self.path} line {number} is out of range and ignored ({exc}): {raw[:80]!r}")
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
        elif self._ran_before() if served_before is None else served_before:
            self._report(f"{self.path} is missing although a server used this data dir: producer state is lost "
                         "(retried batches may be appended twice) and producer ids restart from a block "
                         "derived from the clock")
            self._skip_to_clock_block()
        if damaged:
            # Each damaged line may have reserved a block of producer ids (each P line reserves one
            # block past the previous one): skip as many blocks, so no id can be handed out twice.
            self._reserved_until = min(self._reserved_until + damaged * PRODUCER_ID_BLOCK, PRODUCER_ID_LIMIT)
        # The ids handed out are below the reservation: a batch line naming another is not ours.
        for number, fields in batch_lines:
            try:
                dropped += self._replay_batch(_batch_values(fields, self._reserved_until, now), log_end_offset)
            except _OutOfRange as exc:
                self._report(f"{self.path} line {number} is out of range and ignored ({exc})")
        if dropped:
            logger.info("producer state: %d batch(es) past their log's end were dropped (not appended "
                        "before the last stop)", dropped)
        expired = self._expire(now)
        if expired:
            logger.info("producer state: %d producer(s) expired (no batch for producer.id.expiration.ms=%d)",
                        expired, self.expiration_ms)
        self._next_check_ms = now + self.check_interval_ms
        self._next_id = max(self._next_id, self._reserved_until)
        self._rewrite()

    def _check_version(self, fields: list[str]) -> None:
        if len(fields) != 2 or fields[1] not in _READABLE_VERSIONS:
            raise CorruptCheckpointError(f"{self.path} has version {fields[1:]}, which this version of "
                                         f"logstore cannot read (it writes version {JOURNAL_VERSION})")

    def _replay_reservation(self, fields: list[str]) -> None:
        if len(fields) != 2:
            raise ValueError("a P line has one field")
        until = int(fields[1])
        if not 0 <= until <= PRODUCER_ID_LIMIT:
            raise _OutOfRange(f"a reservation up to {until} is outside 0..{PRODUCER_ID_LIMIT}")
        self._reserved_until = max(self._reserved_until, until)

    def _replay_batch(self, values: tuple, log_end_offset: Callable[[str, int], int | None]) -> int:
        topic, partition, producer_id, epoch, first_sequence, last_sequence, first_offset, last_offset, at_ms = values
        end = log_end_offset(topic, partition)
        if end is None or last_offset >= end:
            return 1
        self._remember(topic, partition, producer_id, epoch, BatchMetadata(first_sequence, last_sequence,
                                                                           first_offset, last_offset), at_ms)
        return 0

    def _report(self, message: str) -> None:
        logger.warning("%s", message)
        self.problems.append(message)

    def _ran_before(self) -> bool:
        """Whether a server ran on this dir, guessed: it creates ``__consumer_offsets`` at its first
        start (so does an in-process group consumer: ``KafkaServer`` says instead, from its identity
        file)."""
        try:
            return any(name.startswith(OFFSETS_TOPIC_DIR_PREFIX) for name in os.listdir(self.dir_path))
        except OSError:
            return False

    def _skip_to_clock_block(self) -> None:
        """Reserve from the clock's microseconds since the epoch on: ids handed out before the
        reservation was lost are below that unless the store averaged more than one new producer id
        per microsecond (an earlier skip's block of ``PRODUCER_ID_BLOCK`` ids is used up in 1 ms)."""
        self._reserved_until = max(self._reserved_until, time.time_ns() // 1_000)

    # --- producer ids ----------------------------------------------------------------------------

    def new_producer_id(self) -> int:
        """A producer id never handed out before by this store; ``ProducerIdsExhaustedError`` when
        none is left below ``PRODUCER_ID_LIMIT``."""
        with self._lock:
            if self._next_id >= self._reserved_until:
                if self._next_id >= PRODUCER_ID_LIMIT:
                    raise ProducerIdsExhaustedError(f"every producer id below {PRODUCER_ID_LIMIT} was handed out")
                self._reserved_until = min(self._next_id + PRODUCER_ID_BLOCK, PRODUCER_ID_LIMIT)
                self._write(_line(f"P {self._reserved_until}"), sync=True)
            producer_id = self._next_id
            self._next_id += 1
            return producer_id

    def handed_out(self, producer_id: int) -> bool:
        """Whether ``producer_id`` may have been handed out by this store (it is below the ids
        reserved; after a restart every id of the reserved blocks counts)."""
        return 0 <= producer_id < self._next_id

    # --- batches ---------------------------------------------------------------------------------

    def check(self, topic: str, partition: int, producer_id: int, epoch: int, first_sequence: int,
              last_sequence: int) -> SequenceCheck:
        """Kafka's sequence rules for a batch about to be appended (call under the partition's lock)."""
        self._maybe_expire()
        if not self.handed_out(producer_id):
            return SequenceCheck(errors.UNKNOWN_PRODUCER_ID,
                                 message=f"producer id {producer_id} was not handed out by this broker "
                                         "(ask for one with InitProducerId)")
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
        with self._lock:
            now = self._clock.time_ms()
            if now >= self._next_check_ms:
                self._expire_now(now)
            self._write(_line(f"B {topic} {partition} {producer_id} {epoch} {first_sequence} {last_sequence} "
                              f"{first_offset} {last_offset} {now}"))
            self._remember(topic, partition, producer_id, epoch,
                           BatchMetadata(first_sequence, last_sequence, first_offset, last_offset), now)

    def forget(self, topic: str, partition: int, producer_id: int, epoch: int, first_sequence: int) -> None:
        """Undo ``will_append`` when the append failed (the journal line is dropped at the next load,
        its offsets being past the log's end, or replaced by the batch that takes those offsets)."""
        with self._lock:
            entry = self._entries.get((topic, partition, producer_id))
            if entry is not None and entry.batches and entry.batches[-1].first_sequence == first_sequence:
                entry.batches.pop()
                self._live -= 1

    def forget_topic(self, topic: str) -> None:
        """A deleted topic's producers start afresh if the name is created again."""
        with self._lock:
            for key in [key for key in self._entries if key[0] == topic]:
                self._live -= len(self._entries.pop(key).batches)

    def _maybe_expire(self) -> None:
        """``expire`` once ``check_interval_ms`` has passed since the last time (a cheap test per batch)."""
        if self._clock.time_ms() >= self._next_check_ms:
            self.expire()

    def expire(self) -> int:
        """Drop the producers whose last batch on a partition is ``expiration_ms`` old or older, by
        the clock, now; returns how many (producer, partition) entries went. Batches do this every
        ``check_interval_ms`` on their own."""
        with self._lock:
            return self._expire_now(self._clock.time_ms())

    def _expire_now(self, now: int) -> int:
        self._next_check_ms = now + self.check_interval_ms
        expired = self._expire(now)
        if expired:
            logger.info("producer state: %d producer(s) expired (no batch for producer.id.expiration.ms=%d)",
                        expired, self.expiration_ms)
            self._maybe_compact()
        return expired

    def _expire(self, now: int) -> int:
        deadline = now - self.expiration_ms
        expired = [key for key, entry in self._entries.items() if entry.last_append_ms <= deadline]
        for key in expired:
            self._live -= len(self._entries.pop(key).batches)
        return len(expired)

    def producers_on(self, topic: str, partition: int) -> list[tuple[int, int, int, int]]:
        """``(producer_id, epoch, last_sequence, last_append_ms)`` of every producer with batches
        on the partition (DescribeProducers), by producer id."""
        with self._lock:
            return sorted((producer_id, entry.epoch, entry.batches[-1].last_sequence if entry.batches else -1,
                           entry.last_append_ms)
                          for (name, index, producer_id), entry in self._entries.items()
                          if name == topic and index == partition)

    @property
    def producer_count(self) -> int:
        """The (producer, partition) entries held."""
        return len(self._entries)

    def _remember(self, topic: str, partition: int, producer_id: int, epoch: int, batch: BatchMetadata,
                  at_ms: int) -> None:
        key = (topic, partition, producer_id)
        entry = self._entries.get(key)
        if entry is None or epoch > entry.epoch:
            if entry is not None:
                self._live -= len(entry.batches)
            entry = self._entries[key] = ProducerEntry(epoch)
        if len(entry.batches) < BATCHES_TO_RETAIN:
            self._live += 1
        entry.batches.append(batch)
        entry.last_append_ms = max(entry.last_append_ms, at_ms)

    # --- the journal -----------------------------------------------------------------------------

    def _write(self, line: str, sync: bool = False) -> None:
        """Append ``line`` (made by ``_line``) to the journal."""
        with self._lock:
            if self._fd is None:
                self._fd = self._fs.open_file(self.path, create=True)
                self._position = self._fs.file_size(self._fd)
            data = line.encode("utf-8")
            self._fs.pwrite(self._fd, data, self._position)
            self._position += len(data)
            self._lines += 1
            if sync:
                self._fs.fsync(self._fd)
            self._maybe_compact()

    def _maybe_compact(self) -> None:
        """Rewrite once the journal holds more than twice its live lines (and ``COMPACT_AFTER_LINES``):
        the lines appended since the last rewrite pay for this one."""
        if self._lines > max(COMPACT_AFTER_LINES, 2 * (self._live + 3)):
            self._rewrite()

    def _rewrite(self) -> None:
        reservation = _line(f"P {self._reserved_until}")
        lines = [_line(f"V {JOURNAL_VERSION}"), reservation]
        for (topic, partition, producer_id), entry in self._entries.items():
            for batch in entry.batches:
                lines.append(_line(f"B {topic} {partition} {producer_id} {entry.epoch} {batch.first_sequence} "
                                   f"{batch.last_sequence} {batch.first_offset} {batch.last_offset} "
                                   f"{entry.last_append_ms}"))
        lines.append(reservation)  # twice: one damaged line cannot lose it
        self._close_file()
        self._fs.write_file_atomic(self.path, "".join(lines).encode("utf-8"))
        self._lines = len(lines)

    def _close_file(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            self._fs.close(fd)

    def close(self) -> None:
        """Write the journal back compacted and close it."""
        with self._lock:
            try:
                self._rewrite()
            finally:
                self._close_file()


def _batch_values(fields: list[str], reserved_until: int, now_ms: int) -> tuple:
    """The values of a ``B`` line's fields: ``ValueError`` if one is not an integer, ``_OutOfRange``
    if one is outside what this broker writes (a producer id at or past ``reserved_until``)."""
    topic, numbers = fields[1], [int(value) for value in fields[2:]]
    partition, producer_id, epoch, first_sequence, last_sequence, first_offset, last_offset = numbers[:7]
    at_ms = numbers[7] if len(numbers) == 8 else now_ms  # version 1: no time; the expiry counts from now
    if not 0 <= producer_id < reserved_until:
        raise _OutOfRange(f"producer id {producer_id} was never handed out (the ids reserved are below "
                          f"{reserved_until})")
    checks = (("partition", partition, 0, _INT32_MAX), ("epoch", epoch, _INT16_MIN, _INT16_MAX),
              ("first sequence", first_sequence, 0, _INT32_MAX), ("last sequence", last_sequence, 0, _INT32_MAX),
              ("first offset", first_offset, 0, _INT64_MAX), ("last offset", last_offset, first_offset, _INT64_MAX),
              ("append time", at_ms, 0, _INT64_MAX))
    for name, value, low, high in checks:
        if not low <= value <= high:
            raise _OutOfRange(f"{name} {value} is outside {low}..{high}")
    return topic, partition, producer_id, epoch, first_sequence, last_sequence, first_offset, last_offset, at_ms


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
