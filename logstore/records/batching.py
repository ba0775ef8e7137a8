"""Turning the records of one append into the batches a log accepts: validation against the
topic's config (a key on every record of a compacted topic, ``max.message.bytes``,
``segment.bytes``), encoding with the topic's compression and timestamp type, and splitting an
append larger than ``max.message.bytes`` into several batches. Also the values an append takes and
hands back: ``RecordColumns`` (records given as columns), ``PreparedAppend`` (encoded, not yet
written) and ``AppendInfo`` (what was written).

One record (what an application appending one event at a time sends) takes a short path in
``Log``: ``small_batch_plan`` works out once per config what the config says about it, and
``encoder.encode_one`` encodes it (the same bytes as ``encode_records``), or declines, leaving
anything unusual (a bad type, a record too large, a compressed topic) to ``encode_records``, which
raises what it would raise.

The general work is column-wise: an append's records are taken apart into columns once (``RecordColumns``
come as columns already), an uncompressed batch found too large is not checksummed before it is
split, and the split points come from running sums of the records' estimated sizes (``bisect``),
not from a Python loop over the records.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence as SequenceABC
from dataclasses import dataclass
from itertools import accumulate, repeat
from operator import add, eq, itemgetter
from typing import Iterator, NamedTuple, Protocol, Sequence, overload

from ..config import LogConfig
from ..errors import InvalidRecordError, InvalidTimestampError, RecordTooLargeError
from .codecs import CODEC_NAMES, COMPRESSION_NONE, TOPIC_CODECS
from .decoder import HEADER_BYTES, RECORD_OVERHEAD_BYTES, TIMESTAMP_TYPE_LOG_APPEND, Record
from .encoder import encode_columns_parts

_new_record = tuple.__new__

Batch = tuple[bytearray, list[bytes]]
"""An encoded batch: its header and the parts of its body, written with one ``pwritev``."""


@dataclass(frozen=True, init=False)
class AppendInfo:
    """What an append did: the offsets assigned (None when nothing was appended)."""

    first_offset: int | None
    last_offset: int | None
    record_count: int
    max_timestamp_ms: int
    batches: int
    log_append_time_ms: int = -1

    def __init__(self, first_offset: int | None, last_offset: int | None, record_count: int,
                 max_timestamp_ms: int, batches: int, log_append_time_ms: int = -1) -> None:
        # The generated __init__ of a frozen dataclass calls object.__setattr__ once per field
        # (about 1 us, as much as encoding a small batch); filling __dict__ does the same in 0.3.
        fields = self.__dict__
        fields["first_offset"] = first_offset
        fields["last_offset"] = last_offset
        fields["record_count"] = record_count
        fields["max_timestamp_ms"] = max_timestamp_ms
        fields["batches"] = batches
        fields["log_append_time_ms"] = log_append_time_ms


class RecordColumns(SequenceABC[Record]):
    """Records held as columns: ``keys``, ``values``, ``headers`` and ``timestamps`` (equally long
    lists or tuples; a timestamp may be None). It is a read-only sequence of ``Record`` (offset None),
    so ``Log.append`` and ``Log.prepare`` take it like a list of records, and they encode its columns
    as they are: a caller that has columns already (the Kafka server's decoder) builds no ``Record``
    per record, and the append takes none apart. Slicing gives ``RecordColumns``; it equals a list
    or tuple of the same records.

    ``compression`` is the codec the records came with (a name: ``"none"``, ``"gzip"``, ``"snappy"``,
    ``"lz4"``, ``"zstd"``, or its id): a topic with ``compression.type=producer`` stores them with
    it (the server passes the codec of the producer's batch). Records given any other way are the
    producer's uncompressed ones."""

    __slots__ = ("keys", "values", "headers", "timestamps", "compression")

    def __init__(self, keys: Sequence[bytes | None], values: Sequence[bytes | None],
                 headers: Sequence[Sequence[tuple[str, bytes | None]]], timestamps: Sequence[int | None],
                 compression: int | str = COMPRESSION_NONE) -> None:
        if not len(keys) == len(values) == len(headers) == len(timestamps):
            raise ValueError(f"columns of different lengths: {len(keys)} keys, {len(values)} values, "
                             f"{len(headers)} headers, {len(timestamps)} timestamps")
        self.keys = keys
        self.values = values
        self.headers = headers
        self.timestamps = timestamps
        if compression.__class__ is not int or compression not in CODEC_NAMES:  # (a codec id passes at once)
            codec = _CODEC_IDS.get(compression) if isinstance(compression, str) else None
            if codec is None:
                raise ValueError(f"unknown compression {compression!r}: expected one of {', '.join(_CODEC_IDS)}")
            compression = codec
        self.compression = compression

    def __len__(self) -> int:
        return len(self.keys)

    @overload
    def __getitem__(self, index: int) -> Record: ...
    @overload
    def __getitem__(self, index: slice) -> RecordColumns: ...

    def __getitem__(self, index: int | slice) -> Record | RecordColumns:
        if isinstance(index, slice):
            return RecordColumns(self.keys[index], self.values[index], self.headers[index], self.timestamps[index],
                                 self.compression)
        return Record(self.keys[index], self.values[index], self.headers[index], self.timestamps[index])

    def __iter__(self) -> Iterator[Record]:
        return map(_new_record, repeat(Record), zip(self.keys, self.values, self.headers, self.timestamps, repeat(None)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (RecordColumns, list, tuple)):
            return NotImplemented
        return len(self) == len(other) and all(map(eq, self, other))

    __hash__ = None  # type: ignore[assignment]  # unhashable, as a list is (it compares equal to one)

    def __repr__(self) -> str:
        return f"RecordColumns({list(self)!r})"


_CODEC_IDS = {**{name: codec for codec, name in CODEC_NAMES.items()}, "uncompressed": COMPRESSION_NONE}


def check_record_sequence(records: object) -> None:
    """``TypeError`` unless ``records`` is a sequence of records (not one ``Record``, bytes or str).
    A list passes at once: the ``Sequence`` ABC check costs as much as encoding a one-record append."""
    if type(records) is not list and (isinstance(records, (Record, bytes, str))
                                      or not isinstance(records, Sequence)):
        raise TypeError(f"append takes a sequence of Record, got {type(records).__name__}")


class ProducerBatch(NamedTuple):
    """Who appends a batch, for its producer block (magic 3): the producer id and epoch, the
    sequence of its first record (-1: none, as in markers and coordinator writes), and whether the
    batch is part of the producer's transaction."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool = False

    def sequence_after(self, records: int) -> int:
        """The sequence of the record ``records`` after the first (sequences wrap after 2**31 - 1, as
        Kafka's do); -1 stays -1."""
        return -1 if self.base_sequence < 0 else (self.base_sequence + records) % 2**31


def encode_records(records: Sequence[Record], config: LogConfig, now_ms: int, name: str,
                   producer: ProducerBatch | None = None) -> list[Batch]:
    """Validate ``records`` for a log with ``config`` and encode them into ``(header, parts)``
    batches of at most ``max.message.bytes`` (and ``segment.bytes``). Raises ``TypeError`` for a
    wrong input type, ``InvalidRecordError`` for a missing key on a compacted topic and
    ``RecordTooLargeError`` for a single record that fits no batch. With ``producer``, every batch
    carries its producer block; when the records are split, a part's base sequence counts the
    records before it."""
    check_record_sequence(records)
    if not records:
        return []
    columns = records if type(records) is RecordColumns else None  # records given as columns
    if config.compact and None in (columns.keys if columns is not None else map(itemgetter(0), records)):
        raise InvalidRecordError(f"compacted topic {name} requires a key on every record")
    bounds = config.timestamp_bounds_ms
    if bounds is not None:
        _check_timestamps(columns.timestamps if columns is not None else list(map(itemgetter(3), records)), bounds,
                          now_ms, name)
    codec = config.compression_type
    if codec == "producer":
        compression = columns.compression if columns is not None else COMPRESSION_NONE
    else:
        compression = TOPIC_CODECS[codec]
    log_append = config.message_timestamp_type == "LogAppendTime"
    limit = min(config.max_message_bytes, config.segment_bytes)
    # An uncompressed batch's size is known before its checksum, a compressed one's only once compressed.
    known_early = limit if compression == COMPRESSION_NONE else None

    def encode(keys: Sequence[bytes | None], values: Sequence[bytes | None],
               headers: Sequence[Sequence[tuple[str, bytes | None]]], timestamps: Sequence[int | None],
               first: int = 0) -> list[Batch]:
        if known_early is not None and len(keys) > 1 and _surely_over(keys, values, timestamps, known_early):
            # (a full producer batch of small records: its stored columns outgrow max.message.bytes)
            return [part for start, stop in _split(keys, values, headers, limit)
                    for part in encode(keys[start:stop], values[start:stop], headers[start:stop],
                                       timestamps[start:stop], first + start)]
        if producer is None:
            encoded = encode_columns_parts(keys, values, headers, timestamps, default_timestamp_ms=now_ms,
                                           compression=compression, log_append_time=log_append, max_bytes=known_early)
        else:
            encoded = encode_columns_parts(keys, values, headers, timestamps, default_timestamp_ms=now_ms,
                                           compression=compression, log_append_time=log_append, max_bytes=known_early,
                                           producer=(producer.producer_id, producer.producer_epoch,
                                                     producer.sequence_after(first)),
                                           transactional=producer.transactional)
        if encoded[0] is not None:
            header, parts = encoded
            size = len(header) + sum(map(len, parts))
            if size <= limit:
                return [(header, parts)]
        else:
            size = encoded[1]  # larger than the limit: not checksummed
        if len(keys) == 1:
            setting = "max.message.bytes" if limit == config.max_message_bytes else "segment.bytes"
            raise RecordTooLargeError(f"a record of {size - HEADER_BYTES} bytes is larger than "
                                      f"{setting}={limit} of {name}")
        return [part for start, stop in _split(keys, values, headers, limit)
                for part in encode(keys[start:stop], values[start:stop], headers[start:stop], timestamps[start:stop],
                                   first + start)]

    if columns is not None:
        return encode(columns.keys, columns.values, columns.headers, columns.timestamps)
    keys, values, headers, timestamps, _offsets = zip(*records)
    return encode(keys, values, headers, timestamps)


def _surely_over(keys: Sequence[bytes | None], values: Sequence[bytes | None], timestamps: Sequence[int | None],
                 limit: int) -> bool:
    """Whether the uncompressed batch of these records is surely larger than ``limit``, by a lower
    bound of its size (header, key and value ends, the timestamp column when the first and last
    timestamps differ, key and value bytes): such a batch is split before it is encoded instead of
    after (an encoding only to learn its size costs as much as the split's own). The bytes are
    counted (one ``map(len)`` per column) only when the first value's size times the count passes
    the limit too, so an append that fits pays a few comparisons (a batch of values of several sizes
    that this misses is split after its encoding, as before)."""
    count = len(keys)
    bound = HEADER_BYTES + 8 * count
    first, last = timestamps[0], timestamps[-1]
    if first is not None and last is not None and first != last:
        bound += 8 * count  # the timestamps differ: the batch has its timestamp column
    sample = values[0]
    if bound + (0 if sample is None else len(sample)) * count <= limit:
        return False  # probably fits (exactly when the values have one size): not worth counting
    for column in (values, keys):
        try:
            bound += sum(map(len, column))  # type: ignore[arg-type]
        except TypeError:
            continue  # None among them: those bytes are not counted
        if bound > limit:
            return True
    return bound > limit


def _check_timestamps(timestamps: Sequence[int | None], bounds: tuple[int, int], now_ms: int, name: str) -> None:
    """``InvalidTimestampError`` naming the first record whose timestamp is out of ``bounds``."""
    errors = timestamp_errors(timestamps, bounds, now_ms, name, limit=1)
    if errors:
        raise InvalidTimestampError(errors[0][1])


def timestamp_errors(timestamps: Sequence[int | None], bounds: tuple[int, int], now_ms: int, name: str,
                     limit: int | None = None) -> list[tuple[int, str]]:
    """``(index, message)`` of the records (at most ``limit``) whose timestamp is more than
    ``bounds[0]`` ms before ``now_ms`` or ``bounds[1]`` ms after it (Kafka's LogValidator rule for
    CreateTime topics; a record without a timestamp, None or Kafka's -1, always passes)."""
    before, after = bounds
    low, high = now_ms - before, now_ms + after
    found: list[tuple[int, str]] = []
    for index, timestamp in enumerate(timestamps):
        if timestamp is not None and timestamp != -1 and not low <= timestamp <= high:
            found.append((index, f"Timestamp {timestamp} of record {index} is out of range for topic {name}. "
                                 f"The timestamp should be within [{low}, {min(high, 2**63 - 1)}]"))
            if limit is not None and len(found) >= limit:
                break
    return found


class SmallBatchPlan(NamedTuple):
    """What a topic's config says about a one-record batch, worked out once per config."""

    short_path: bool  # False for a compressed topic or timestamp limits: every append takes ``encode_records``
    attributes: int  # the timestamp type
    log_append_time: bool
    limit_bytes: int  # the largest batch: min(max.message.bytes, segment.bytes)
    compact: bool
    segment_bytes: int  # and the roll and flush settings the log checks per append
    max_segment_ms: int
    flush_messages: int


def small_batch_plan(config: LogConfig) -> SmallBatchPlan:
    """The ``SmallBatchPlan`` of ``config``."""
    log_append = config.message_timestamp_type == "LogAppendTime"
    short_path = config.compression_type in ("producer", "uncompressed") and config.timestamp_bounds_ms is None
    return SmallBatchPlan(short_path, TIMESTAMP_TYPE_LOG_APPEND if log_append else 0,
                          log_append, min(config.max_message_bytes, config.segment_bytes), config.compact,
                          config.segment_bytes, config.max_segment_ms, config.flush_messages)


class PreparingLog(Protocol):
    """The log that prepared an append, as ``PreparedAppend`` holds it (``Log``, layers above)."""

    @property
    def name(self) -> str: ...

    def append_prepared(self, prepared: PreparedAppend) -> AppendInfo: ...


class PreparedAppend:
    """Records validated and encoded by ``Log.prepare``, waiting for ``Log.append_prepared``."""

    def __init__(self, log: PreparingLog, batches: list[Batch], record_count: int, now_ms: int,
                 producer: ProducerBatch | None = None) -> None:
        self.log = log
        self._batches: list[Batch] | None = batches
        self.record_count = record_count
        self.now_ms = now_ms
        self.producer = producer  # whose batches these are (their producer block), for the log's checks

    def take(self) -> list[Batch]:
        """The batches, once: a prepared append cannot be appended twice."""
        if self._batches is None:
            raise ValueError("these prepared records were appended already")
        batches, self._batches = self._batches, None
        return batches


def _lengths(column: Sequence[bytes | None]) -> list[int]:
    """``len(item or b"")`` of each item (a None counts 0)."""
    try:
        return list(map(len, column))  # type: ignore[arg-type]  # a None raises TypeError: handled below
    except TypeError:
        if column.count(None) == len(column):
            return [0] * len(column)
        return [len(item or b"") for item in column]


def _split(keys: Sequence[bytes | None], values: Sequence[bytes | None],
           headers: Sequence[Sequence[tuple[str, bytes | None]]], limit: int) -> list[tuple[int, int]]:
    """``(start, stop)`` ranges of the records whose estimated batch size stays within ``limit``.

    Greedy, in order: a range ends before the record that would take it past the budget (a range
    has at least one record). Each record is estimated at ``RECORD_OVERHEAD_BYTES`` plus its key,
    value and header bytes (8 per header besides its name and value), and the ranges are found by
    bisecting the running sums of those estimates."""
    budget = max(limit - HEADER_BYTES, 1)
    sizes = map(add, map(add, _lengths(keys), _lengths(values)), repeat(RECORD_OVERHEAD_BYTES))
    if any(headers):
        sizes = map(add, sizes, [sum(8 + len(key.encode()) + len(value or b"") for key, value in pairs)
                                 for pairs in headers])
    running = [0, *accumulate(sizes)]  # running[i]: the estimates of records 0 .. i-1
    count = len(keys)
    ranges = []
    start = 0
    while start < count:
        # the first record i (after start) with running[i + 1] - running[start] > budget ends the range
        stop = max(bisect_right(running, running[start] + budget, start + 1) - 1, start + 1)
        ranges.append((start, stop))
        start = stop
    if len(ranges) == 1:  # the estimate fit but the encoding did not: halve
        middle = count // 2
        ranges = [(0, middle), (middle, count)]
    return ranges
