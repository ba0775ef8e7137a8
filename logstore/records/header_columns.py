"""Record headers in column form (batch magic 2): encoding, the consistency check, bulk decoding.

Owns the bytes of the headers of a magic-2 batch (docs/FORMAT.md 1.1, 1.2, 1.10), and the reading
of magic-1 headers (``decode_headers``: a length-prefixed pair list per record, a Python loop);
``decoder._Columns`` and ``encoder.encode_columns_parts`` call in here and own everything else.

Layout, for a batch of ``n`` records with ``H`` headers in all::

    columns (fixed width, with the other columns):
        header_ends   int32 * n    cumulative bytes of the header data (names and values) up to and
                                   including record i
        header_counts uint16 * n   cumulative number of headers up to and including record i
                                   (int32 * n with attribute ``WIDE_COUNTS``: more than 65,535)
    section (after the values blob):
        header_entries (name_end int32, value_end int32) * H
                                   cumulative ends in the header data; value_end ~end for a null
        header_data    name 0, value 0, name 1, value 1, ...  (UTF-8 names, values; header_ends[n-1])

Why this shape: every column is cut by one ``struct`` call and the names and values by one cached
``struct`` call when the batch is regular (every record has the same header names and sizes:
tracing and CDC headers), else by slices; the pairs and the per-record tuples are built by ``zip``
(C-level, no Python loop per record). Decoding takes the cheapest of four paths: the regular one
(from ``_REGULAR_MIN_RECORDS`` records), the column-wise one, a loop for a few headers (small
batches, partial batches' point reads) and one record read straight from the body. A record's headers are one range of ``header_entries`` and one
range of ``header_data`` found from the two per-record columns, so a point read of a partial batch
fetches exactly 8 bytes per header plus its name and value bytes, and the bytes a read charges for a
record's headers (8 + name + value per header, as with magic 1) are
``header_ends[i] + 8 * header_counts[i]`` cumulatively: budgets do not change with the magic.
"""

from __future__ import annotations

import struct
from functools import lru_cache
from itertools import accumulate, chain, repeat
from operator import itemgetter, sub
from typing import Sequence

from ..errors import CorruptRecordError

_INT = struct.Struct("<i")
_COUNT_STRUCTS = {2: (struct.Struct("<H"), struct.Struct("<HH")), 4: (_INT, struct.Struct("<ii"))}
ENTRY_BYTES = 8
"""Bytes per header in ``header_entries`` (name end, value end)."""
WIDE_COUNTS = 0x200
"""Attribute bit (magic 2, with HAS_HEADERS): ``header_counts`` are int32, for batches of more than
65,535 headers; else uint16, so that a record costs 6 bytes of columns besides its headers' 8 bytes
each (magic 1: 4), and batches split by size as they did."""
MAX_NARROW_HEADERS = 0xFFFF
COLUMN_NUMBERS = (4, 5, 2)
"""The decoder's numbers of the header_ends and header_counts columns and of the headers section."""
_ENDS, _COUNTS, _SECTION = COLUMN_NUMBERS


def known_attributes(magic: int, attributes: int) -> int:
    """The attribute bits this module adds to a batch's known ones (``WIDE_COUNTS`` in magic 2)."""
    return WIDE_COUNTS if magic >= 2 and attributes & 0x40 else 0


def per_record_bytes(magic: int, attributes: int) -> int:
    """Bytes of header columns per record of a batch with headers."""
    return 4 if magic < 2 else 8 if attributes & WIDE_COUNTS else 6

_PAIR_TYPES = frozenset((tuple, list))
_VALUE_TYPES = frozenset((bytes, bytearray, type(None)))


@lru_cache(maxsize=256)
def _ints(count: int) -> struct.Struct:
    """A cached struct of ``count`` little-endian int32s."""
    return struct.Struct(f"<{count}i")


# --- encoding --------------------------------------------------------------------------------------------


def _bad_record_headers(all_headers: Sequence) -> None:
    for headers in all_headers:
        if isinstance(headers, (str, bytes)) or not hasattr(headers, "__iter__"):
            raise TypeError(f"record headers must be a sequence of (str, bytes | None) pairs, got {headers!r}")


def _bad_pair(pairs: Sequence) -> None:
    for pair in pairs:
        try:
            name, value = pair
            name.encode("utf-8")
        except (TypeError, ValueError, AttributeError):
            raise TypeError(f"a record header must be a (str, bytes | None) pair, got {pair!r}") from None
        if value is not None and not isinstance(value, (bytes, bytearray)):
            raise TypeError(f"a record header value must be bytes or None, got {value!r}")


def encode(all_headers: Sequence) -> tuple[list[bytes], bytes, int] | None:
    """``([header_ends, header_counts], section, attributes)`` of the records' headers (one
    sequence of ``(str, bytes | None)`` pairs per record), packed; None when there is no pair at
    all. Raises TypeError naming a value of the wrong type, struct.error past 2 GiB. A few C-level
    passes over the pairs, no Python loop per header."""
    if not set(map(type, all_headers)) <= _PAIR_TYPES:  # generators, other sequences, or wrong types
        _bad_record_headers(all_headers)
        all_headers = [tuple(headers) for headers in all_headers]
    counts = list(accumulate(map(len, all_headers)))
    pairs = list(chain.from_iterable(all_headers))
    if not pairs:
        return None  # (iterables that were all empty): the batch has no header columns
    try:
        pairs_ok = set(map(len, pairs)) == {2}
    except TypeError:
        pairs_ok = False
    if not pairs_ok:
        _bad_pair(pairs)
        pairs = [tuple(pair) for pair in pairs]
    data = list(chain.from_iterable(pairs))  # name, value, name, value, ...
    names = data[0::2]
    try:
        table = dict.fromkeys(names)
        for name in table:
            table[name] = name.encode("utf-8")
    except (TypeError, AttributeError, UnicodeError):
        _bad_pair(pairs)
        raise
    data[0::2] = map(table.__getitem__, names)
    value_types = set(map(type, data[1::2]))
    if not value_types <= _VALUE_TYPES:
        _bad_pair(pairs)
    if type(None) in value_types:
        return _encode_with_nulls(counts, data[0::2], data[1::2])
    ends = list(accumulate(map(len, data)))
    value_ends = (0,) + tuple(ends[1::2])
    header_ends = list(itemgetter(*counts)(value_ends)) if len(counts) > 1 else [value_ends[counts[0]]]
    return _packed(header_ends, counts, _ints(len(ends)).pack(*ends) + b"".join(data))


def _packed(header_ends: list[int], counts: list[int], section: bytes) -> tuple[list[bytes], bytes, int]:
    count = len(counts)
    if counts[-1] > MAX_NARROW_HEADERS:
        return [_ints(count).pack(*header_ends), _ints(count).pack(*counts)], section, WIDE_COUNTS
    return [_ints(count).pack(*header_ends), struct.pack(f"<{count}H", *counts)], section, 0


def _encode_with_nulls(counts: list[int], name_bytes: list[bytes], values: Sequence) -> tuple[list[int], list[int], bytes]:
    ends = []
    total = 0
    value_ends = [0]
    for name, value in zip(name_bytes, values):
        total += len(name)
        ends.append(total)
        if value is None:
            ends.append(~total)
        else:
            total += len(value)
            ends.append(total)
        value_ends.append(total)
    header_ends = [value_ends[count] for count in counts]
    data = b"".join(chain.from_iterable(zip(name_bytes, (b"" if value is None else value for value in values))))
    return _packed(header_ends, counts, _ints(len(ends)).pack(*ends) + data)


# --- checking --------------------------------------------------------------------------------------------


def check(section, counts_column, ends_column, count: int) -> None:
    """Raise CorruptRecordError unless the two columns (their raw bytes, every record of the batch)
    and the section's entries agree: counts and ends non-decreasing from >= 0, at least one
    header, the entries' real ends non-decreasing from 0, names never null, a null value ending
    where its name ends, and each record's entries ending where its ``header_ends`` says: so every
    byte of the header data is in exactly one name or value, and the charge taken from the columns
    (``decoder.RecordBatch.payload_bytes``) is the decoded records' charge."""
    if count <= 0:
        raise CorruptRecordError("a batch without records has header columns")
    if _regular(section, counts_column, ends_column, count) is not None:
        return  # the columns and the entries repeat one consistent record shape
    counts = struct.unpack_from(f"<{count}{_code(counts_column, count)}", counts_column)
    ends = _ints(count).unpack_from(ends_column)
    total = counts[-1]
    if counts[0] < 0 or total <= 0 or ends[0] < 0 or list(counts) != sorted(counts) or list(ends) != sorted(ends):
        raise CorruptRecordError("header columns are not increasing")
    entries = _ints(2 * total).unpack_from(section)
    if min(entries[0::2]) < 0:
        raise CorruptRecordError("a header name is marked null")
    real = entries
    if min(entries) < 0:
        # A null value takes no bytes: its end (~end) must be its name's end. Else the bytes between
        # them would belong to no name or value, yet header_ends (what payload_bytes charges)
        # would count them. Such a null stays negative here and fails the order check below.
        real = list(entries)
        real[1::2] = [value_end if value_end >= 0 else name_end if value_end == ~name_end else value_end
                      for name_end, value_end in zip(entries[0::2], entries[1::2])]
    value_ends = (0,) + tuple(real[1::2])
    if real[0] < 0 or list(real) != sorted(real) or list(map(value_ends.__getitem__, counts)) != list(ends):
        raise CorruptRecordError("header entries do not add up to the header columns")


def _regular(section, counts_column, ends_column, count: int) -> tuple[int, ...] | None:
    """Record 0's entries when every record has the same number of headers with the same name and
    value sizes and no null value (the columns and the entries compared as raw bytes with a cached
    pattern: a memcmp each), else None."""
    code = _code(counts_column, count)
    (k,) = _COUNT_STRUCTS[len(counts_column) // count][0].unpack_from(counts_column)
    (size,) = _INT.unpack_from(ends_column)
    if k <= 0 or size < 0 or (ENTRY_BYTES * k + size) * count > len(section):  # (also keeps the packs in range)
        return None
    if bytes(counts_column) != _steps(k, count, code) or bytes(ends_column) != _steps(size, count, "i"):
        return None
    first = _ints(2 * k).unpack_from(section)
    if min(first) < 0 or first[-1] != size or list(first) != sorted(first):
        return None
    if bytes(section[: 2 * k * count * 4]) != _entries_pattern(first, count):
        return None
    return first


def _code(counts_column, count: int) -> str:
    return "H" if len(counts_column) == 2 * count else "i"


@lru_cache(maxsize=64)
def _steps(step: int, count: int, code: str) -> bytes:
    """The column step, 2 * step, ..., count * step (``code``: "i" int32, "H" uint16)."""
    if not step:
        return bytes(struct.calcsize(code) * count)
    return struct.pack(f"<{count}{code}", *range(step, step * count + 1, step))


@lru_cache(maxsize=32)
def _entries_pattern(first: tuple[int, ...], count: int) -> bytes:
    """The entries of ``count`` records shaped like the record whose entries are ``first``."""
    size = first[-1]
    return _ints(len(first) * count).pack(*[end + size * record for record in range(count) for end in first])


@lru_cache(maxsize=64)
def _cut(codes: str, count: int) -> struct.Struct:
    """A struct cutting ``count`` records' header data, each record by ``codes`` ("5x16s3x3x")."""
    return struct.Struct("<" + codes * count)


# --- decoding --------------------------------------------------------------------------------------------

_SHORT_BYTES = 16  # values up to this size are tested for being the same in every record
_SHORT_NAME_BYTES = 32  # names likewise (they nearly always are the same)
_REGULAR_MIN_RECORDS = 32  # the fast path's fixed cost (a few µs) pays from about this many records on
_LOOP_MAX_HEADERS = 16  # up to this many headers, a loop is cheaper than the column-wise passes


def decode_regular(section, data_at: int, counts_column, ends_column, count: int, start: int, stop: int) -> list | None:
    """The headers of records [start, stop) when the batch is regular (see ``_regular``), else None.
    A name or a short value that is the same in each of these records (compared a byte column at a
    time, by strided slices) is decoded once and shared; the rest is cut by one cached struct call."""
    if stop - start < _REGULAR_MIN_RECORDS:
        return None
    first = _regular(section, counts_column, ends_column, count)
    if first is None:
        return None
    size, wanted = first[-1], stop - start
    data_at += size * start  # from here on, record ``start`` is the first
    data_end = data_at + size * wanted
    template = bytes(section[data_at : data_at + size])
    codes = []
    layout = []  # per header: (name or None, value or None): None where it varies
    begin = 0
    try:
        for name_end, value_end in zip(first[0::2], first[1::2]):
            name = _same_everywhere(section, template, data_at, data_end, size, begin, name_end, _SHORT_NAME_BYTES,
                                    wanted)
            value = _same_everywhere(section, template, data_at, data_end, size, name_end, value_end, _SHORT_BYTES,
                                     wanted)
            codes.append(f"{name_end - begin}{'s' if name is None else 'x'}")
            codes.append(f"{value_end - name_end}{'s' if value is None else 'x'}")
            layout.append((None if name is None else name.decode("utf-8"), value))
            begin = value_end
        pieces = _cut("".join(codes), wanted).unpack_from(section, data_at)
        varying = len(pieces) // wanted
        at = 0
        columns = []
        for name, value in layout:
            if name is not None and value is not None:
                columns.append(repeat((name, value), wanted))
                continue
            if name is None:
                names = _texts(pieces[at::varying])
                at += 1
            else:
                names = repeat(name, wanted)
            if value is None:
                values = pieces[at::varying]
                at += 1
            else:
                values = repeat(value, wanted)
            columns.append(zip(names, values))
        return list(zip(*columns))
    except UnicodeDecodeError as exc:
        raise CorruptRecordError(f"undecodable record header name: {exc}") from None


def _same_everywhere(section, template: bytes, data_at: int, data_end: int, size: int, begin: int, end: int,
                     limit: int, count: int) -> bytes | None:
    """Bytes [begin, end) of the first record's header data when each of the ``count`` records from
    ``data_at`` has the same there, else None (also for segments longer than ``limit``: cutting
    them is cheaper than comparing)."""
    if end - begin > limit:
        return None
    for position in range(begin, end):
        if section[data_at + position : data_end : size] != template[position : position + 1] * count:
            return None
    return template[begin:end]


def read(columns, start: int, stop: int) -> list:
    """One headers tuple per record [start, stop) of a magic-2 batch, from its ``decoder._Columns``
    (its body, column positions, cached columns and blob access): the cheapest path that applies."""
    count, body = columns.count, columns.body
    section_at = columns.blob_at[_SECTION]
    data_at = ENTRY_BYTES * columns.count_at(count - 1)
    if columns.fetch is None:  # a whole body: one record, or maybe a regular batch
        if stop - start == 1:
            return [record_headers(body, columns.at[_COUNTS], columns.widths[_COUNTS], columns.at[_ENDS], section_at,
                                   data_at, start)]
        found = decode_regular(columns.blob(_SECTION, 0, columns.blob_bytes[_SECTION])[0], data_at,
                               columns.column_bytes(_COUNTS), columns.column_bytes(_ENDS), count, start, stop)
        if found is not None:
            return found
    ends = columns.ints(_ENDS, start, stop)
    first = columns.end_at(_ENDS, start - 1)
    counts = columns.ints(_COUNTS, start, stop)
    first_count = columns.count_at(start - 1)
    entries, base = columns.blob(_SECTION, ENTRY_BYTES * first_count, ENTRY_BYTES * counts[-1])
    data, data_base = columns.blob(_SECTION, data_at + first, data_at + ends[-1])
    return decode(memoryview(entries)[ENTRY_BYTES * first_count - base :], data, data_at - data_base, first,
                  first_count, counts)


def decode(entries, data, shift: int, data_start: int, first_count: int, counts: Sequence[int]) -> list:
    """One headers tuple per record, for records whose cumulative ``header_counts`` are ``counts``
    (the count and the header data end before them being ``first_count`` and ``data_start``).
    ``entries`` holds their ``header_entries`` (from their first), ``data`` their header data:
    ``data[shift + i]`` is byte i of the batch's header data."""
    if not counts:
        return []
    total = counts[-1] - first_count
    if total <= 0:
        return [()] * len(counts)
    ends = _ints(2 * total).unpack_from(entries)
    if total <= _LOOP_MAX_HEADERS:
        try:
            return _decode_few(ends, data, shift, data_start, first_count, counts)
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"undecodable record header name: {exc}") from None
    nulls = min(ends) < 0
    real = [end if end >= 0 else ~end for end in ends] if nulls else ends
    starts = chain((data_start,), real)
    if shift > 0:  # the whole section: one copy of the header data, so that slices need no shift
        data, shift = data[shift:], 0
    # (list comprehensions: a slice in one is about 2.5x cheaper than map(data.__getitem__, slices))
    if shift:  # a range of the header data (a partial batch: a point read, usually)
        pieces = [data[start + shift : end + shift] for start, end in zip(starts, real)]
    else:
        pieces = [data[start:end] for start, end in zip(starts, real)]
    values = pieces[1::2]
    if nulls:
        values = [None if end < 0 else value for end, value in zip(ends[1::2], values)]
    try:
        pairs = tuple(zip(_texts(pieces[0::2]), values))
    except UnicodeDecodeError as exc:
        raise CorruptRecordError(f"undecodable record header name: {exc}") from None
    if first_count:
        counts = list(map(sub, counts, repeat(first_count)))
    return [pairs[start:end] for start, end in zip(chain((0,), counts), counts)]


def record_headers(body, counts_at: int, width: int, ends_at: int, entries_at: int, data_at: int, index: int) -> tuple:
    """The headers of record ``index`` read straight from a whole, checked body (point reads,
    one-record batches): the two columns start at ``counts_at`` and ``ends_at``, the entries at
    ``entries_at``, the header data ``data_at`` bytes after them. A loop over the record's headers."""
    data_at += entries_at
    single, pair = _COUNT_STRUCTS[width]
    if index:
        first_count, count = pair.unpack_from(body, counts_at + width * index - width)
        start, end = _COUNT_STRUCTS[4][1].unpack_from(body, ends_at + 4 * index - 4)
    else:
        first_count = start = 0
        (count,) = single.unpack_from(body, counts_at)
        (end,) = _INT.unpack_from(body, ends_at)
    if count == first_count:
        return ()
    ends = _ints(2 * (count - first_count)).unpack_from(body, entries_at + ENTRY_BYTES * first_count)
    data = body[data_at + start : data_at + end].tobytes()
    try:
        return tuple(_decode_few(ends, data, -start, start, 0, (count - first_count,))[0])
    except UnicodeDecodeError as exc:
        raise CorruptRecordError(f"undecodable record header name: {exc}") from None


def _decode_few(ends: Sequence[int], data, shift: int, start: int, first_count: int, counts: Sequence[int]) -> list:
    """``decode`` of a few headers (a point read, a small batch): a loop costs less there than
    setting up the column-wise passes."""
    pairs = []
    for name_end, value_end in zip(ends[0::2], ends[1::2]):
        name = data[start + shift : name_end + shift].decode("utf-8")
        if value_end < 0:
            pairs.append((name, None))
            start = ~value_end
        else:
            pairs.append((name, data[name_end + shift : value_end + shift]))
            start = value_end
    out = []
    previous = 0
    for count in counts:
        out.append(tuple(pairs[previous : count - first_count]))
        previous = count - first_count
    return out


def _texts(names: Sequence[bytes]) -> map:
    """The names as str, each distinct name decoded once."""
    table = {name: name.decode("utf-8") for name in set(names)}
    return map(table.__getitem__, names)


# --- magic 1 ----------------------------------------------------------------------------------------------


def decode_headers(blob: bytes, ends: Sequence[int], position: int) -> list:
    """Magic-1 headers: per record ``(name_length int32, name, value_length int32 (-1 null), value)*``
    from ``position``, record i ending at ``ends[i]``. A Python loop per header."""
    out = []
    unpack = _INT.unpack_from
    try:
        for end in ends:
            if position == end:
                out.append(())
                continue
            pairs = []
            while position < end:
                (key_length,) = unpack(blob, position)
                position += 4
                key = blob[position : position + key_length].decode("utf-8")
                position += key_length
                (value_length,) = unpack(blob, position)
                position += 4
                if value_length < 0:
                    value = None
                else:
                    value = blob[position : position + value_length]
                    position += value_length
                pairs.append((key, value))
            if position != end:
                raise CorruptRecordError("record headers overrun their bounds")
            out.append(tuple(pairs))
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptRecordError(f"undecodable record headers: {exc}") from None
    return out
