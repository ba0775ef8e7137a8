"""The record batch format, encoding side: ``encode_batch_parts`` (and ``encode_columns_parts``, the
same from columns), ``encode_batch`` and ``assign_base_offset``; ``encode_one``, the short path of a
one-record batch (what an application appending one event at a time sends). Pure:
values in, bytes out. The layout is specified in docs/FORMAT.md and summarised in ``records.py``.

An encoded batch is a 55-byte header (a ``bytearray``, so the base offset can be assigned in place)
and a list of body parts. The body CRC is chained over the parts, so large values are never copied
into one buffer: ``LogSegment.append`` hands the parts to ``pwritev`` as they are. Small values are
joined (one copy), which is cheaper than one CRC call and one iovec per value.

Per-record work is a few C-level passes per column (``zip``, ``len``, ``accumulate``,
``struct.pack``), never a Python loop, unless a column holds a None (nulls take a slower path).
"""

from __future__ import annotations

import struct
import zlib
from itertools import accumulate
from typing import Sequence

from ..errors import InvalidRecordError
from . import codecs, control, header_columns
from .decoder import (BODY_AT, COMPRESSION_GZIP, COMPRESSION_MASK, COMPRESSION_NONE, CONTROL, CRC_AT, HAS_HEADERS,
                      HAS_NULL_KEYS, HAS_NULL_VALUES, HAS_OFFSET_DELTAS, HAS_PRODUCER, HAS_TIMESTAMPS, HEADER_BYTES,
                      HEADER_CRC_AT, HEADER_STRUCT, LOG_OVERHEAD_BYTES, MAGIC, MAX_BATCH_BYTES, NO_SEQUENCE,
                      NO_TIMESTAMP, PRODUCER_STRUCT, TIMESTAMP_TYPE_LOG_APPEND, TRANSACTIONAL, Record,
                      columns_struct)

_BASE_OFFSET = struct.Struct("<q")
_CRC = struct.Struct("<I")
_INT = struct.Struct("<i")
# A one-record batch from the attributes on (what the body CRC covers): the header fields after
# header_crc, then the key_ends and value_ends columns, one int32 each (header columns follow them).
_ONE = struct.Struct("<Hiiqqqii")
_PREFIX = struct.Struct("<qiBI")  # base_offset, batch_length, magic, crc: what header_crc covers
_ONE_LENGTH_BYTES = HEADER_BYTES - LOG_OVERHEAD_BYTES - (HEADER_BYTES - BODY_AT)  # magic, crc, header_crc
# Bound once: ``encode_one`` runs once per one-record append, where each lookup shows.
_pack_one, _pack_prefix, _pack_crc, _crc32 = _ONE.pack, _PREFIX.pack, _CRC.pack, zlib.crc32
LARGE_VALUE_BYTES = 4096
"""Average value size from which values are written as separate parts instead of joined."""


def _ends(items: Sequence, what: str) -> tuple[list[int], bool]:
    """Cumulative ends of ``items`` (bytes or None; ~end marks a None) and whether any is None."""
    try:
        return list(accumulate(map(len, items))), False
    except TypeError:
        if items.count(None) == len(items):  # all None (keyless producers): no Python-level loop
            return [-1] * len(items), True
        ends = []
        total = 0
        for item in items:
            if item is None:
                ends.append(~total)
            else:
                if not isinstance(item, (bytes, bytearray, memoryview)):
                    raise TypeError(f"record {what} must be bytes or None, got {item!r}") from None
                total += len(item)
                ends.append(total)
        return ends, True


def _blob_parts(items: Sequence, ends: list[int], has_nulls: bool, what: str, split: bool) -> list:
    """The concatenation of ``items`` as parts: one joined buffer, or the items themselves."""
    if has_nulls and ends[-1] == -1 and not split and items.count(None) == len(items):
        return [b""]  # all None (what the join of no items gives)
    present = [item for item in items if item is not None] if has_nulls else items
    if split:
        parts = list(present)
        bad = next((item for item in parts if not isinstance(item, (bytes, bytearray)) and not (
            isinstance(item, memoryview) and item.nbytes == len(item))), None)
    else:
        try:
            parts = [b"".join(present)]
        except TypeError:
            parts, bad = [], next(item for item in present if not isinstance(item, (bytes, bytearray, memoryview)))
        else:
            bad = None
            last = ends[-1] if ends else 0
            if len(parts[0]) != (last if last >= 0 else ~last):  # len() counted something else
                bad = next(item for item in present if not isinstance(item, (bytes, bytearray)))
    if bad is not None:
        raise TypeError(f"record {what} must be bytes or None, got {bad!r}")
    return parts


def _encode_headers(all_headers: Sequence) -> tuple[list[int], bytes]:
    parts = []
    ends = []
    total = 0
    pack = _INT.pack
    for headers in all_headers:
        if isinstance(headers, (str, bytes)) or not hasattr(headers, "__iter__"):
            raise TypeError(f"record headers must be a sequence of (str, bytes | None) pairs, got {headers!r}")
        for pair in headers:
            try:
                key, value = pair
                key_bytes = key.encode("utf-8")
            except (TypeError, ValueError, AttributeError):
                raise TypeError(f"a record header must be a (str, bytes | None) pair, got {pair!r}") from None
            parts.append(pack(len(key_bytes)))
            parts.append(key_bytes)
            if value is None:
                parts.append(pack(-1))
                total += 8 + len(key_bytes)
            else:
                if not isinstance(value, (bytes, bytearray)):
                    raise TypeError(f"a record header value must be bytes or None, got {value!r}")
                parts.append(pack(len(value)))
                parts.append(value)
                total += 8 + len(key_bytes) + len(value)
        ends.append(total)
    return ends, b"".join(parts)


def _check_timestamp_types(timestamps: Sequence) -> None:
    bad = next((t for t in timestamps if not isinstance(t, int)), None)
    if bad is not None:
        raise TypeError(f"record timestamp_ms must be an int or None, got {bad!r}")


def _timestamp_range(timestamps: tuple, default_ms: int) -> tuple[tuple, int, int]:
    try:
        low, high = min(timestamps), max(timestamps)
        if low is None or high is None:  # a single record: min/max compared nothing
            raise TypeError
    except TypeError:
        timestamps = tuple(default_ms if t is None else t for t in timestamps)
        try:
            low, high = min(timestamps), max(timestamps)
        except TypeError:
            low = high = None
    if not isinstance(low, int) or not isinstance(high, int):
        bad = next(t for t in timestamps if not isinstance(t, int))
        raise TypeError(f"record timestamp_ms must be an int or None, got {bad!r}")
    return timestamps, low, high


def encode_batch_parts(records: Sequence[Record], *, default_timestamp_ms: int = NO_TIMESTAMP,
                       compression: int = COMPRESSION_NONE, log_append_time: bool = False,
                       offset_deltas: Sequence[int] | None = None, last_offset_delta: int | None = None,
                       delete_horizon_ms: int = -1, magic: int = MAGIC, producer: tuple[int, int, int] | None = None,
                       transactional: bool = False, control: bool = False) -> tuple[bytearray, list]:
    """Encode ``records`` as one batch: ``(header, body_parts)``, base offset 0.

    Records whose ``timestamp_ms`` is None get ``default_timestamp_ms``. ``offset_deltas`` (strictly
    increasing, for compacted batches) and ``last_offset_delta`` override the dense 0..n-1 offsets;
    with no records, ``last_offset_delta`` makes an empty batch that only carries offsets forward.
    ``magic=1`` and ``magic=2`` write the previous formats (magic 1: headers as length-prefixed
    pairs; magic 2: no producer block), which readers since then still read; the default is the
    current ``MAGIC``. ``producer`` = ``(producer_id, producer_epoch, base_sequence)`` writes the
    producer block (magic 3), with the ``transactional`` and ``control`` bits (docs/FORMAT.md 1.12;
    a control batch is what ``encode_marker_batch`` builds)."""
    if len(records):
        keys, values, headers, timestamps, _offsets = zip(*records)
    else:
        keys = values = headers = timestamps = ()
    header, parts = encode_columns_parts(keys, values, headers, timestamps, default_timestamp_ms=default_timestamp_ms,
                                         compression=compression, log_append_time=log_append_time,
                                         offset_deltas=offset_deltas, last_offset_delta=last_offset_delta,
                                         delete_horizon_ms=delete_horizon_ms, magic=magic, producer=producer,
                                         transactional=transactional, control=control)
    return header, parts


def encode_columns_parts(keys: Sequence, values: Sequence, headers: Sequence, timestamps: Sequence, *,
                         default_timestamp_ms: int = NO_TIMESTAMP, compression: int = COMPRESSION_NONE,
                         log_append_time: bool = False, offset_deltas: Sequence[int] | None = None,
                         last_offset_delta: int | None = None, delete_horizon_ms: int = -1,
                         max_bytes: int | None = None, magic: int = MAGIC,
                         producer: tuple[int, int, int] | None = None, transactional: bool = False,
                         control: bool = False) -> tuple[bytearray, list[bytes]] | tuple[None, int]:
    """``encode_batch_parts`` of records given as columns (equally long sequences: keys, values,
    headers, timestamps), for callers that hold columns already (``RecordColumns``, the splits of an
    append). With ``max_bytes``, a batch larger than that is checked as fully as any other (so it
    raises what it would raise) but not checksummed: ``(None, its size in bytes)`` is returned."""
    count = len(keys)
    if magic not in (1, 2, MAGIC):
        raise ValueError(f"cannot encode batch magic {magic!r}")
    producer_block = b""
    if producer is not None or transactional or control:  # (plain batches pay one test)
        producer_block = _producer_block(producer, transactional, control, magic, compression, count)
    if log_append_time or not count:  # every record reads as the append time, kept once in the header
        timestamps = (default_timestamp_ms,) * count
        low = high = default_timestamp_ms
    else:
        timestamps, low, high = _timestamp_range(timestamps, default_timestamp_ms)
    attributes = compression | (TIMESTAMP_TYPE_LOG_APPEND if log_append_time else 0)
    columns: list[bytes] = []
    int_columns = columns_struct("i", count)
    if offset_deltas is not None:
        if len(offset_deltas) != count:
            raise ValueError(f"{len(offset_deltas)} offset deltas for {count} records")
        if count and (offset_deltas[0] < 0 or any(map(int.__ge__, offset_deltas, offset_deltas[1:]))):
            raise ValueError(f"offset deltas must be >= 0 and strictly increasing, got {list(offset_deltas)[:8]!r}...")
        attributes |= HAS_OFFSET_DELTAS
        columns.append(int_columns.pack(*offset_deltas))
        if last_offset_delta is None:
            last_offset_delta = offset_deltas[-1] if count else 0
        elif count and last_offset_delta < offset_deltas[-1]:
            raise ValueError(f"last_offset_delta {last_offset_delta} is below the last offset delta {offset_deltas[-1]}")
    elif last_offset_delta is None:
        last_offset_delta = max(count - 1, 0)
    elif count and last_offset_delta != count - 1:
        raise ValueError(f"last_offset_delta {last_offset_delta} needs offset_deltas for {count} records")
    if not 0 <= last_offset_delta <= 2**31 - 1:
        raise ValueError(f"last_offset_delta must be in [0, 2**31 - 1], got {last_offset_delta!r}")
    if low != high:
        attributes |= HAS_TIMESTAMPS
        try:
            columns.append(columns_struct("q", count).pack(*timestamps))
        except struct.error:
            _check_timestamp_types(timestamps)
            raise ValueError(f"record timestamps out of the int64 range: {low!r}..{high!r}") from None
    key_ends, null_keys = _ends(keys, "key")
    value_ends, null_values = _ends(values, "value")
    attributes |= (HAS_NULL_KEYS if null_keys else 0) | (HAS_NULL_VALUES if null_values else 0)
    try:
        columns.append(int_columns.pack(*key_ends))
        columns.append(int_columns.pack(*value_ends))
    except struct.error:
        raise InvalidRecordError("a batch's keys or values exceed 2 GiB") from None
    value_bytes = value_ends[-1] if value_ends else 0
    value_bytes = value_bytes if value_bytes >= 0 else ~value_bytes
    split_values = compression == COMPRESSION_NONE and count and value_bytes >= LARGE_VALUE_BYTES * count
    blobs = _blob_parts(keys, key_ends, null_keys, "key", False)
    blobs += _blob_parts(values, value_ends, null_values, "value", bool(split_values))
    try:
        has_headers = any(headers)
    except TypeError:
        has_headers = True  # _encode_headers names the bad value
    if has_headers:
        try:  # (columns, section, attributes); None: no pair after all (iterables that were empty)
            if magic >= 2:
                encoded = header_columns.encode(headers)
            else:
                header_ends, header_blob = _encode_headers(headers)
                encoded = [int_columns.pack(*header_ends)], header_blob, 0
            if encoded is not None:
                attributes |= HAS_HEADERS | encoded[2]
                columns += encoded[0]
                blobs.append(encoded[1])
        except struct.error:
            raise InvalidRecordError("a batch's headers exceed 2 GiB") from None
    parts = columns + blobs
    if compression == COMPRESSION_GZIP:
        parts = [zlib.compress(b"".join(parts), 6, wbits=31)]
    elif compression != COMPRESSION_NONE:
        parts = [codecs.compress(compression, b"".join(parts))]
    if producer_block:  # before the body, never compressed, covered by the body CRC
        parts.insert(0, producer_block)
        attributes |= HAS_PRODUCER | (TRANSACTIONAL if transactional else 0) | (CONTROL if control else 0)
        if control and attributes & HAS_HEADERS:
            raise ValueError("a control batch cannot have headers")
    body_bytes = sum(map(len, parts))
    batch_length = HEADER_BYTES - LOG_OVERHEAD_BYTES + body_bytes
    if batch_length > MAX_BATCH_BYTES - LOG_OVERHEAD_BYTES:
        raise InvalidRecordError(f"a batch of {batch_length} bytes exceeds the 2 GiB format limit")
    header = bytearray(HEADER_BYTES)
    try:
        HEADER_STRUCT.pack_into(header, 0, 0, batch_length, magic, 0, 0, attributes, last_offset_delta,
                                count, low, high, delete_horizon_ms)
    except struct.error:
        _check_timestamp_types(timestamps)
        raise ValueError(f"batch fields out of range: timestamps {low!r}..{high!r}, delete_horizon_ms "
                         f"{delete_horizon_ms!r} (int64)") from None
    if max_bytes is not None and batch_length + LOG_OVERHEAD_BYTES > max_bytes:
        return None, batch_length + LOG_OVERHEAD_BYTES  # the caller splits it: no need for its checksum
    crc = zlib.crc32(memoryview(header)[BODY_AT:])
    for part in parts:
        crc = zlib.crc32(part, crc)
    _CRC.pack_into(header, CRC_AT, crc)
    _seal_header(header, 0)
    return header, parts


def _producer_block(producer: tuple[int, int, int] | None, transactional: bool, control: bool, magic: int,
                    compression: int, count: int) -> bytes:
    """The 14-byte producer block of a magic-3 batch, after checking the combination is one the
    format allows (docs/FORMAT.md 1.12)."""
    if producer is None:
        raise ValueError("a transactional or control batch needs producer=(producer_id, producer_epoch, "
                         "base_sequence)")
    if magic < 3:
        raise ValueError(f"batch magic {magic} has no producer block (magic 3 has)")
    if control and (not transactional or compression != COMPRESSION_NONE or count != 1):
        raise ValueError("a control batch is transactional, uncompressed and holds exactly one record")
    try:
        producer_id, producer_epoch, base_sequence = producer
        return PRODUCER_STRUCT.pack(producer_id, producer_epoch, base_sequence)
    except (TypeError, ValueError, struct.error):
        raise ValueError(f"producer must be (producer_id int64, producer_epoch int16, base_sequence int32), "
                         f"got {producer!r}") from None


def encode_marker_batch(commit: bool, coordinator_epoch: int, producer_id: int, producer_epoch: int,
                        timestamp_ms: int) -> bytearray:
    """A transaction marker: the control batch of one COMMIT (``commit``) or ABORT record
    (``control.encode_marker``), at base offset 0, timestamped ``timestamp_ms`` (the append time),
    base sequence -1."""
    key, value = control.encode_marker(commit, coordinator_epoch)
    return encode_batch([Record(key, value, (), timestamp_ms)], default_timestamp_ms=timestamp_ms,
                        producer=(producer_id, producer_epoch, NO_SEQUENCE), transactional=True, control=True)


def encode_one(base_offset: int, key, value, headers, timestamp_ms: int, attributes: int) -> bytes | list | None:
    """The batch of one uncompressed record at ``base_offset``, as ``encode_batch`` encodes it (the
    same bytes, which a test pins), with a few ``struct`` and ``crc32`` calls instead of the column
    machinery: what a one-record append costs is mostly per-batch work. ``timestamp_ms`` is the
    record's timestamp already resolved (the default or the append time for a None one);
    ``attributes`` the timestamp type (the null and header flags are added here).

    Returns the batch as one ``bytes`` (one write), or, when the value is large, as a list of
    buffers (the value is not copied), or None when the record is not one this path takes (a key or
    value other than bytes or None, headers other than a list or tuple, a timestamp other than an
    int in range): the general encoder then encodes it or raises what is wrong with it."""
    if key is None:
        key, key_end, attributes = b"", -1, attributes | HAS_NULL_KEYS
    elif type(key) is bytes:
        key_end = len(key)
    else:
        return None
    if value is None:
        value, value_end, attributes = b"", -1, attributes | HAS_NULL_VALUES
    elif type(value) is bytes:
        value_end = len(value)
    else:
        return None
    if type(timestamp_ms) is not int or (type(headers) is not tuple and type(headers) is not list):
        return None
    try:
        encoded = header_columns.encode((headers,)) if headers else None  # raises TypeError for a bad header
        if encoded is None:  # the common case
            body = _pack_one(attributes, 0, 1, timestamp_ms, timestamp_ms, -1, key_end, value_end) + key
            section = b""
        else:  # magic 2's header columns follow the value ends; their section follows the values
            columns, section, flags = encoded
            body = (_pack_one(attributes | HAS_HEADERS | flags, 0, 1, timestamp_ms, timestamp_ms, -1, key_end,
                              value_end) + b"".join(columns) + key)
        if len(value) < LARGE_VALUE_BYTES:  # a small value: one bytes object
            body += value + section
            prefix = _pack_prefix(base_offset, _ONE_LENGTH_BYTES + len(body), MAGIC, _crc32(body))
            return prefix + _pack_crc(_crc32(prefix)) + body
        prefix = _pack_prefix(base_offset, _ONE_LENGTH_BYTES + len(body) + len(value) + len(section), MAGIC,
                              _crc32(section, _crc32(value, _crc32(body))))
    except struct.error:  # a value out of range: the general encoder says which
        return None
    return [prefix + _pack_crc(_crc32(prefix)) + body, value, section]


def encode_batch(records: Sequence[Record], **options) -> bytearray:
    """Encode ``records`` as one contiguous batch (see ``encode_batch_parts`` for the options)."""
    base_offset = options.pop("base_offset", 0)
    header, parts = encode_batch_parts(records, **options)
    header.extend(b"".join(parts))
    if base_offset:
        assign_base_offset(header, base_offset)
    return header


def _seal_header(buffer: bytearray, position: int) -> None:
    _CRC.pack_into(buffer, position + HEADER_CRC_AT,
                   zlib.crc32(memoryview(buffer)[position : position + HEADER_CRC_AT]))


def assign_base_offset(buffer: bytearray, base_offset: int, position: int = 0) -> None:
    """Rewrite the base offset of the batch at ``position`` and re-seal its header checksum.
    The body CRC does not cover the base offset, so this costs 17 checksummed bytes."""
    _BASE_OFFSET.pack_into(buffer, position, base_offset)
    _seal_header(buffer, position)


def encode_batch_prefix(straddling, offset: int) -> bytearray:
    """The records of the batch ``straddling`` below ``offset`` as one batch with its base offset,
    ending at ``offset - 1`` (same offsets, timestamps, compression, timestamp type, delete horizon
    and producer block): what a truncation inside a batch keeps."""
    kept = straddling.records(0, straddling.index_of(offset))
    base = straddling.base_offset
    deltas = [record.offset - base for record in kept]
    dense = len(kept) == offset - base
    producer = straddling.producer  # kept with its block and flags (a control batch holds one record: never cut)
    batch = encode_batch(kept, producer=None if producer is None else producer[:3],
                         transactional=producer is not None and producer.transactional,
                         offset_deltas=None if dense else deltas, last_offset_delta=offset - 1 - base,
                         compression=straddling.header.attributes & COMPRESSION_MASK,
                         log_append_time=bool(straddling.header.attributes & TIMESTAMP_TYPE_LOG_APPEND),
                         default_timestamp_ms=straddling.max_timestamp,
                         # a tombstone keeps the delete horizon the cleaner gave it
                         delete_horizon_ms=straddling.header.delete_horizon_ms
                         if any(record.value is None for record in kept) else -1)
    assign_base_offset(batch, base)
    return batch
