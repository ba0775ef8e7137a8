"""Encoding Kafka RecordBatch v2 bytes: ``encode_fetch_batch`` (a stored batch as a consumer
receives it: the server's fetch hot path) and ``encode_produce_batch`` (what a producer sends: used
by tests, the fuzzer and our own client).

Both build the records column-wise: per field a list of ready-made varint byte strings (looked up
in ``VARINTS`` tables by ``map`` in C, no Python-level step per record), the record lengths by
``map(operator.add, ...)`` over field sizes, and the batch by one ``b"".join`` over the interleaved
columns. Only records with headers take a Python loop (over their header pairs).

Fetch batches are never compressed: every client reads uncompressed batches, while a kafkajs
consumer without codec plugins cannot read snappy, lz4 or zstd.
"""

from __future__ import annotations

from itertools import chain, repeat
from operator import add, sub
from typing import Sequence

from ...clock import SYSTEM_CLOCK
from ...records.decoder import (CONTROL, HAS_PRODUCER, TIMESTAMP_TYPE_LOG_APPEND, TRANSACTIONAL, Record, RecordBatch,
                                columns_struct)
from .batch import (CONTROL_MASK, CRC_STRUCT, HEAD_STRUCT, HEADER_BYTES, LOG_OVERHEAD_BYTES, MAGIC, NO_PRODUCER_EPOCH,
                    NO_PRODUCER_ID, NO_SEQUENCE, NO_TIMESTAMP, NONNEGATIVE_VARINT_LIMIT, NONNEGATIVE_VARINTS,
                    TAIL_STRUCT, TIMESTAMP_TYPE_MASK, TRANSACTIONAL_MASK, encode_varint)
from .compression import compress
from .crc32c import crc32c

_ZERO = b"\x00"
_NULL_END = b"\xff\xff\xff\xff"  # a stored ends column's int32 ~0: a null at blob position 0
_NULL_LENGTH = b"\x01"  # the varint of -1


class _VarintCache(dict):
    """varint bytes by value for values outside ``NONNEGATIVE_VARINTS`` (negative ones: null
    lengths, timestamp deltas; large ones), filled on first use; ``map(cache.__getitem__, values)``
    runs in C. Cleared when it grows large, so odd values cannot make it grow without bound."""

    def __missing__(self, value: int) -> bytes:
        if len(self) > 65536:
            self.clear()
        encoded = self[value] = encode_varint(value)
        return encoded


class _AttributesAndStampCache(dict):
    """A record's attributes byte (0) and timestamp delta varint, by delta, filled on first use:
    producers' deltas take few values (milliseconds within a linger), so this is one C-level
    lookup per record instead of a lookup and a concatenation."""

    def __missing__(self, delta: int) -> bytes:
        if len(self) > 65536:
            self.clear()
        encoded = self[delta] = _ZERO + encode_varint(delta)
        return encoded


_VARINT_CACHE = _VarintCache()
_ATTRIBUTES_AND_STAMPS = _AttributesAndStampCache()
_FIELD_SIZES = [len(encoded) + length for length, encoded in enumerate(NONNEGATIVE_VARINTS)]
"""``_FIELD_SIZES[n]``: bytes of a length-prefixed field of ``n`` bytes (varint + data)."""
# Dense offsets with timestamp delta 0: a record's attributes, timestamp delta and offset delta
_DENSE_PREFIXES = [b"\x00\x00" + encoded for encoded in NONNEGATIVE_VARINTS]
_DENSE_PREFIX_SIZES = [len(prefix) for prefix in _DENSE_PREFIXES]
_VARINT_WIDTHS = [len(encoded) for encoded in NONNEGATIVE_VARINTS]


def _varints(values: Sequence[int], nonnegative_below: int | None) -> list[bytes]:
    """The varints of ``values``; ``nonnegative_below`` is a bound known for them (else None)."""
    if nonnegative_below is not None and nonnegative_below <= NONNEGATIVE_VARINT_LIMIT:
        return list(map(NONNEGATIVE_VARINTS.__getitem__, values))
    return list(map(_VARINT_CACHE.__getitem__, values))


def _header_blocks(headers: Sequence[Sequence[tuple[str, bytes | None]]]) -> list[bytes]:
    """Per record, its encoded header count and header pairs."""
    blocks = []
    for pairs in headers:
        if not pairs:
            blocks.append(_ZERO)
            continue
        parts = [encode_varint(len(pairs))]
        for name, value in pairs:
            name_bytes = name.encode("utf-8")
            parts += (encode_varint(len(name_bytes)), name_bytes)
            if value is None:
                parts.append(_NULL_LENGTH)
            else:
                parts += (encode_varint(len(value)), value)
        blocks.append(b"".join(parts))
    return blocks


def encode_records(keys: Sequence[bytes | None], values: Sequence[bytes | None],
                   headers: Sequence[Sequence[tuple[str, bytes | None]]] | None,
                   timestamp_deltas: Sequence[int] | None, offset_deltas: Sequence[int] | None, *,
                   null_keys: bool = True, null_values: bool = True) -> bytes:
    """The records section of a v2 batch (uncompressed). ``headers`` None: no record has headers;
    ``timestamp_deltas`` None: all 0; ``offset_deltas`` None: 0, 1, ..., n-1 (else increasing and
    >= 0). ``null_keys``/``null_values`` False promise that no key/value is None (a faster path).

    A record is ``length, attributes + timestamp delta, offset delta, key length, key, value
    length, value, headers``: each piece a column (a list, or one bytes object repeated), the
    columns zipped and joined once. A piece that is the same for every record (no timestamp
    deltas, keyless records, values of one size) is one object repeated, and neighbouring
    constant pieces are joined into one, so the join copies fewer, larger pieces and no piece is
    made per record only to be concatenated with another."""
    count = len(keys)
    if not count:
        return b""
    # the pieces after the length varint, in record order: (column, or None for a constant; constant bytes)
    pieces: list[tuple[Sequence[bytes] | None, bytes]] = []
    varying_sizes: list[Sequence[int]] = []
    constant_size = 0
    dense = offset_deltas is None and count <= NONNEGATIVE_VARINT_LIMIT
    if timestamp_deltas is None and dense:  # attributes, delta 0 and the offset delta: one piece
        pieces.append((_DENSE_PREFIXES[:count], b""))
        varying_sizes.append(_DENSE_PREFIX_SIZES[:count])
    elif timestamp_deltas is None:
        pieces.append((None, _ZERO + _ZERO))
    else:
        stamps = list(map(_ATTRIBUTES_AND_STAMPS.__getitem__, timestamp_deltas))
        pieces.append((stamps, b""))
        varying_sizes.append(list(map(len, stamps)))
    if timestamp_deltas is None and dense:
        pass
    elif dense:
        pieces.append((NONNEGATIVE_VARINTS[:count], b""))
        varying_sizes.append(_VARINT_WIDTHS[:count])
    else:
        offsets = _varints(range(count) if offset_deltas is None else offset_deltas,
                           count if offset_deltas is None else offset_deltas[-1] + 1)
        pieces.append((offsets, b""))
        varying_sizes.append(list(map(len, offsets)))
    for items, may_be_null in ((keys, null_keys), (values, null_values)):
        constant_size += _field_pieces(items, may_be_null, pieces, varying_sizes)
    if headers is None:
        pieces.append((None, _ZERO))
    else:
        header_blocks = _header_blocks(headers)
        pieces.append((header_blocks, b""))
        varying_sizes.append(list(map(len, header_blocks)))
    constant_size += sum(len(constant) for column, constant in pieces if column is None)
    sizes = varying_sizes[0]
    for more in varying_sizes[1:]:
        sizes = map(add, sizes, more)
    sizes = list(map(constant_size.__add__, sizes))
    columns = [_varints(sizes, max(sizes) + 1)]
    pending = b""  # constant pieces joined until the next column
    for column, constant in pieces:
        if column is None:
            pending += constant
        else:
            if pending:
                columns.append(repeat(pending, count))
                pending = b""
            columns.append(column)
    if pending:
        columns.append(repeat(pending, count))
    return b"".join(chain.from_iterable(zip(*columns)))


def _field_pieces(items: Sequence[bytes | None], may_be_null: bool, pieces: list,
                  varying_sizes: list) -> int:
    """Add a length-prefixed bytes field per record (a None: length -1, no data) to ``pieces`` and
    its per-record sizes to ``varying_sizes``; returns the bytes every record has for it beyond
    those (constant pieces are counted by the caller)."""
    if may_be_null and items.count(None) == len(items):  # keyless records: one constant piece
        pieces.append((None, _NULL_LENGTH))
        return 0
    if may_be_null and None in items:
        lengths = [-1 if item is None else len(item) for item in items]
        prefixes = _varints(lengths, None)
        pieces.append((prefixes, b""))
        pieces.append(([_ZERO[:0] if item is None else item for item in items], b""))
        varying_sizes.append([len(prefix) + max(length, 0) for prefix, length in zip(prefixes, lengths)])
        return 0
    lengths = list(map(len, items))
    first = lengths[0]
    if lengths.count(first) == len(lengths) and first < NONNEGATIVE_VARINT_LIMIT:
        pieces.append((None, NONNEGATIVE_VARINTS[first]))  # one size (what producers send): one prefix
        pieces.append((items, b""))
        return first
    if max(lengths) < NONNEGATIVE_VARINT_LIMIT:
        pieces.append((list(map(NONNEGATIVE_VARINTS.__getitem__, lengths)), b""))
        varying_sizes.append(list(map(_FIELD_SIZES.__getitem__, lengths)))
    else:
        prefixes = _varints(lengths, None)
        pieces.append((prefixes, b""))
        varying_sizes.append(list(map(add, map(len, prefixes), lengths)))
    pieces.append((items, b""))
    return 0


def _batch(base_offset: int, partition_leader_epoch: int, attributes: int, last_offset_delta: int,
           base_timestamp: int, max_timestamp: int, producer_id: int, producer_epoch: int, base_sequence: int,
           count: int, records: bytes) -> bytes:
    """A whole v2 batch around the (possibly compressed) ``records``, with its CRC-32C."""
    tail = TAIL_STRUCT.pack(attributes, last_offset_delta, base_timestamp, max_timestamp, producer_id,
                            producer_epoch, base_sequence, count)
    crc = crc32c(records, crc32c(tail))
    head = HEAD_STRUCT.pack(base_offset, HEADER_BYTES - LOG_OVERHEAD_BYTES + len(records), partition_leader_epoch,
                            MAGIC)
    return b"".join((head, CRC_STRUCT.pack(crc), tail, records))


def encode_fetch_batch(batch: RecordBatch, *, partition_leader_epoch: int = 0, producer_id: int = NO_PRODUCER_ID,
                       producer_epoch: int = NO_PRODUCER_EPOCH, base_sequence: int = NO_SEQUENCE) -> bytes:
    """One uncompressed v2 batch holding the whole stored ``batch`` (a verified ``RecordBatch``, as
    ``Log.iter_batch_slices`` yields them): clients skip the records below their fetch offset.

    Offsets: ``base_offset`` is the stored batch's, ``last_offset_delta`` the stored header's (a
    compacted batch keeps its whole offset range), each record's offset delta its real offset minus
    the base. Timestamps: CreateTime batches carry the first record's timestamp as
    ``base_timestamp`` and per-record deltas from it; LogAppendTime batches set attribute bit 3,
    ``max_timestamp`` = the append time (clients report it for every record) and deltas 0. A stored
    batch without records becomes what Kafka's cleaner writes for an emptied batch: record count 0,
    ``base_timestamp`` -1, ``max_timestamp`` the stored one.

    Producer fields: a stored batch with a producer block (a transactional batch, a transaction
    marker) carries its producer id, epoch and base sequence, and Kafka's bits: ``TRANSACTIONAL``
    becomes bit 4 (0x10), ``CONTROL`` bit 5 (0x20, with bit 4: a marker is part of its
    transaction); a marker's one record (Kafka's key and value bytes already) is encoded like any
    record. Other batches carry the keyword arguments (-1 unless given)."""
    header = batch.header
    count = header.record_count
    stored_attributes = header.attributes
    log_append = bool(stored_attributes & TIMESTAMP_TYPE_LOG_APPEND)
    attributes = TIMESTAMP_TYPE_MASK if log_append else 0
    if stored_attributes & HAS_PRODUCER:  # one test per batch: plain batches pay nothing more
        producer = batch.producer
        if producer is not None:
            producer_id, producer_epoch, base_sequence = producer[:3]
            if stored_attributes & TRANSACTIONAL:
                attributes |= TRANSACTIONAL_MASK
            if stored_attributes & CONTROL:
                attributes |= TRANSACTIONAL_MASK | CONTROL_MASK
    if not count:
        return _batch(header.base_offset, partition_leader_epoch, attributes, header.last_offset_delta, NO_TIMESTAMP,
                      header.max_timestamp, producer_id, producer_epoch, base_sequence, 0, b"")
    raw = batch.raw_columns()
    # Keys and values come straight from the stored columns (one struct call or one slice each,
    # never a Record), and so do headers (decoded column-wise, RecordBatch.headers).
    if raw.null_keys and not raw.keys.nbytes and raw.key_ends.tobytes() == _NULL_END * count:
        keys = [None] * count  # keyless records (most producers'): no column to decode
    else:
        keys = batch.keys()
    values = batch.values()
    headers = None if raw.header_ends is None else batch.headers()
    if log_append:
        base_timestamp = max_timestamp = header.max_timestamp
        timestamp_deltas = None
    elif raw.timestamps is None:
        base_timestamp = max_timestamp = raw.timestamp_default
        timestamp_deltas = None
    else:
        timestamps = columns_struct("q", count).unpack_from(raw.timestamps)
        base_timestamp = timestamps[0]
        max_timestamp = max(timestamps)
        timestamp_deltas = list(map(sub, timestamps, repeat(base_timestamp, count)))
        if not any(timestamp_deltas):
            timestamp_deltas = None
    if raw.offset_deltas is None:
        offset_deltas = None
    else:
        offset_deltas = columns_struct("i", count).unpack_from(raw.offset_deltas)
    records = encode_records(keys, values, headers, timestamp_deltas,
                             offset_deltas, null_keys=raw.null_keys, null_values=raw.null_values)
    return _batch(header.base_offset, partition_leader_epoch, attributes, header.last_offset_delta, base_timestamp,
                  max_timestamp, producer_id, producer_epoch, base_sequence, count, records)


def encode_produce_batch(records: Sequence[Record], *, compression: int = 0, base_timestamp: int | None = None,
                         producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                         base_sequence: int = NO_SEQUENCE, base_offset: int = 0, transactional: bool = False,
                         partition_leader_epoch: int = -1) -> bytes:
    """The v2 batch a producer would send for ``records`` (``Record`` tuples; their ``offset`` is
    ignored): offset deltas 0..n-1, CreateTime, records compressed with codec ``compression``.
    A record without a timestamp gets the current time. ``base_timestamp`` defaults to the first
    record's timestamp. ``transactional`` sets the transactional bit (a transactional producer's
    batch: give it a producer id, epoch and base sequence too)."""
    count = len(records)
    if count:
        keys, values, headers, timestamps = zip(*(record[:4] for record in records))
    else:
        keys = values = headers = timestamps = ()
    if None in timestamps:
        now_ms = SYSTEM_CLOCK.time_ms()
        timestamps = tuple(now_ms if timestamp is None else timestamp for timestamp in timestamps)
    if base_timestamp is None:
        base_timestamp = timestamps[0] if count else NO_TIMESTAMP
    deltas = [timestamp - base_timestamp for timestamp in timestamps]
    body = encode_records(keys, values, headers if any(headers) else None, deltas if any(deltas) else None, None)
    if compression:
        body = compress(compression, body)
    attributes = compression | (TRANSACTIONAL_MASK if transactional else 0)
    return _batch(base_offset, partition_leader_epoch, attributes, count - 1, base_timestamp,
                  max(timestamps) if count else NO_TIMESTAMP, producer_id, producer_epoch, base_sequence, count, body)
