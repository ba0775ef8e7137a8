"""The record decoder's fast path: runs of records that share one layout, checked and sliced a
column at a time instead of a varint at a time.

Producers write records of one shape over and over. A librdkafka batch of 100-byte values without
keys is three runs: records 0..63 (one-byte offset deltas), 64..8191 (two bytes) and 8192.. (three);
within a run every record has the same length, the same timestamp-delta width, the same key and
value lengths and no headers, so record ``i`` of the run starts at ``start + i * size``. A byte that
sits at the same place in every record is then one extended slice, ``buffer[at::size]``, and a
whole column is checked by one C-level operation on it:

- the length varint, key length and value length bytes, and the header count (0): every byte equal
  to the first record's (``lstrip`` of that byte leaves nothing);
- the timestamp delta: the continuation bits have the first record's pattern (``translate`` to the
  bits, then ``lstrip``), so every record's delta has the same width;
- the offset delta: the bytes equal the canonical varints of ``index, index + 1, ...`` (built from
  periodic patterns), which is Kafka's rule for a produced batch and the only case taken here.

Each check gives how many leading records pass; the run is the shortest of them, so a run ends at
the first record that differs and that record goes on to the general loop in ``decode`` (or
starts the next run). Keys and values are then sliced by ``map`` over ``range(at, stop, size)``,
timestamps come from a ``map`` over the delta column, and headers are ``()``.

Only records the general loop would accept unchanged are taken (every varint at most three bytes,
lengths -1 or more, fields that add up to the record's length, offset deltas dense from ``index``),
so both paths give the same records, and the bytes the fast path declines give the general loop's
result or its error. Nothing here raises: a record that does not fit is left to the general loop.
"""

from __future__ import annotations

from itertools import repeat
from operator import lshift, or_

from .batch import ZIGZAG_BYTE, ZIGZAG_PAIR

MIN_RUN = 4
"""Runs shorter than this are left to the general loop: the column checks cost a few microseconds."""

_MAX_LONG = 2**63 - 1
_TWO_BYTE_DELTA = 1 << 13  # |value| of a two-byte zigzag varint is below this
_FIRST_DELTA_WIDER_THAN = (0, 64, 1 << 13, 1 << 20)
"""By width w, the first non-negative number whose varint takes more than w bytes."""
_CONTINUATION = bytes(byte >> 7 for byte in range(256))
"""``bytes.translate`` table: 1 for a byte with the continuation bit set, else 0."""
_SINGLE = [bytes((byte,)) for byte in range(256)]
_SET, _CLEAR = b"\x01", b"\x00"

# Byte j of the varint of offset delta d (zigzag 2d) is ((2d >> 7j) & 0x7F) | continuation:
# byte 0 repeats every 64 deltas and byte 1 every 8192, so both are slices of repeated patterns;
# byte 2 changes every 8192 deltas and is built from blocks.
_DELTA_PATTERNS = (
    (bytes(2 * (d % 64) for d in range(64)), bytes(0x80 | 2 * (d % 64) for d in range(64))),
    (bytes((d >> 6) & 0x7F for d in range(1 << 13)), bytes(0x80 | ((d >> 6) & 0x7F) for d in range(1 << 13))),
)


def _delta_column(first: int, count: int, width: int, j: int) -> bytes:
    """Byte ``j`` of the ``width``-byte varints of the offset deltas ``first .. first + count - 1``
    (all of which take ``width`` bytes)."""
    continuation = 1 if j < width - 1 else 0
    if j < 2:
        pattern = _DELTA_PATTERNS[j][continuation]
        period = len(pattern)
        start = first % period
        return (pattern * ((start + count + period - 1) // period))[start : start + count]
    blocks = []
    delta, stop = first, first + count
    while delta < stop:
        block_end = min(stop, (delta | 0x1FFF) + 1)
        blocks.append(_SINGLE[((delta >> 13) & 0x7F) | (continuation << 7)] * (block_end - delta))
        delta = block_end
    return b"".join(blocks)


def _common_prefix(left: bytes, right: bytes) -> int:
    """How many leading bytes two equally long byte strings share (in C: one XOR of two ints)."""
    differ = int.from_bytes(left, "big") ^ int.from_bytes(right, "big")
    return len(left) - (differ.bit_length() + 7) // 8


def _short_varint(buffer: bytes, at: int) -> tuple[int, int]:
    """``(value, width)`` of the varint at ``at`` when it takes at most three bytes, else ``(0, 0)``.
    Past the end of ``buffer`` it raises IndexError."""
    byte = buffer[at]
    if byte < 0x80:
        return ZIGZAG_BYTE[byte], 1
    second = buffer[at + 1]
    if second < 0x80:
        return ZIGZAG_PAIR[(second << 8) | byte], 2
    third = buffer[at + 2]
    if third < 0x80:
        number = (byte & 0x7F) | ((second & 0x7F) << 7) | (third << 14)
        return (number >> 1) ^ -(number & 1), 3
    return 0, 0


def _layout(buffer: bytes, position: int, end: int) -> tuple[int, ...] | None:
    """The layout of the record at ``position`` when it can start a run: ``(size, length width,
    timestamp width, offset delta width, key length, key width, value length, value width)``, where
    ``size`` counts the length varint too; None when the record is not one a run can hold (a varint
    longer than three bytes, a two-byte-plus timestamp delta, headers, a null length other than -1,
    fields that do not add up, bytes past ``end``)."""
    try:
        length, length_width = _short_varint(buffer, position)
        size = length_width + length
        if not length_width or length < 1 or position + size > end:
            return None
        at = position + length_width + 1  # the attributes byte is ignored, as Kafka does
        _stamp, stamp_width = _short_varint(buffer, at)
        if not stamp_width or stamp_width > 2:
            return None
        at += stamp_width
        _delta, delta_width = _short_varint(buffer, at)
        if not delta_width:
            return None
        at += delta_width
        key_length, key_width = _short_varint(buffer, at)
        if not key_width or key_length < -1:
            return None
        at += key_width + max(key_length, 0)
        value_length, value_width = _short_varint(buffer, at)
        if not value_width or value_length < -1:
            return None
        at += value_width + max(value_length, 0)
        if at != position + size - 1 or buffer[at] != 0:  # one byte left: the header count, 0
            return None
    except IndexError:
        return None
    return size, length_width, stamp_width, delta_width, key_length, key_width, value_length, value_width


def _same_bytes(buffer: bytes, at: int, width: int, size: int, count: int) -> int:
    """How many of ``count`` records (``size`` bytes apart) have at ``at .. at + width`` the same
    bytes as the first."""
    for j in range(width):
        column = buffer[at + j : at + j + count * size : size]
        count -= len(column.lstrip(_SINGLE[buffer[at + j]]))
    return count


def take_run(buffer: bytes, position: int, end: int, index: int, count: int, base_timestamp: int,
             base_offset: int | None, keys: list, values: list, headers: list, timestamps: list,
             offsets: list | None) -> tuple[int, int]:
    """Append to the columns the run of records that starts at ``position`` (record ``index`` of
    ``count``, its bytes ending by ``end``): ``(records taken, position after them)``; no records
    when fewer than ``MIN_RUN`` share the first one's layout (nothing is appended then). ``offsets`` (a
    fetch: ``base_offset`` not None) gets ``base_offset + delta``; produce passes None."""
    layout = _layout(buffer, position, end)
    if layout is None:
        return 0, position
    size, length_width, stamp_width, delta_width, key_length, key_width, value_length, value_width = layout
    if stamp_width == 2 and not -(2**63) + _TWO_BYTE_DELTA <= base_timestamp <= _MAX_LONG - _TWO_BYTE_DELTA:
        return 0, position  # the general loop checks such timestamps against the int64 range
    run = min(min(count, _FIRST_DELTA_WIDER_THAN[delta_width]) - index, (end - position) // size)
    if run < MIN_RUN:
        return 0, position
    # Each check keeps the leading records that pass it; later checks look at those only.
    run = _same_bytes(buffer, position, length_width, size, run)
    at = position + length_width + 1
    for j in range(stamp_width):
        column = buffer[at + j : at + j + run * size : size].translate(_CONTINUATION)
        run -= len(column.lstrip(_SET if j < stamp_width - 1 else _CLEAR))
    stamp_at = at
    at += stamp_width
    for j in range(delta_width):
        column = buffer[at + j : at + j + run * size : size]
        expected = _delta_column(index, run, delta_width, j)
        if column != expected:
            run = _common_prefix(column, expected)
    at += delta_width
    run = _same_bytes(buffer, at, key_width, size, run)
    key_at = at + key_width
    at = key_at + max(key_length, 0)
    run = _same_bytes(buffer, at, value_width, size, run)
    value_at = at + value_width
    run = _same_bytes(buffer, position + size - 1, 1, size, run)
    if run < MIN_RUN:
        return 0, position
    span = run * size
    for column, start, length in ((keys, key_at, key_length), (values, value_at, value_length)):
        if length > 0:
            # a comprehension's slices beat map(buffer.__getitem__, map(slice, ...)) (~60 vs ~100 ns)
            column.extend([buffer[at : at + length] for at in range(start, start + span, size)])
        else:
            column.extend(repeat(None if length < 0 else b"", run))
    if stamp_width == 1:
        column = buffer[stamp_at : stamp_at + span : size]
        if column.count(column[0]) == run:  # a common case: the whole run in one millisecond
            timestamps.extend(repeat(base_timestamp + ZIGZAG_BYTE[column[0]], run))
        else:
            timestamps.extend(map(base_timestamp.__add__, map(ZIGZAG_BYTE.__getitem__, column)))
    else:
        low = buffer[stamp_at : stamp_at + span : size]
        high = buffer[stamp_at + 1 : stamp_at + 1 + span : size]
        timestamps.extend(map(base_timestamp.__add__,
                              map(ZIGZAG_PAIR.__getitem__, map(or_, map(lshift, high, repeat(8)), low))))
    headers.extend(repeat((), run))
    if offsets is not None:
        offsets.extend(range(base_offset + index, base_offset + index + run))
    return run, position + span
