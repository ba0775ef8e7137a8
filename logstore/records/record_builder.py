"""Fast record building for reads: runs of one-record batches, point reads, and reads built with the
garbage collector paused.

Pure (bytes in, ``Record`` tuples out), beside ``decoder.py`` whose ``RecordBatch``/``_Columns`` are the
general path. What lives here is what makes reads cost little per record and per batch:

- ``take_single_record_batches``: a producer that sends one record per append (``linger.ms=0``)
  leaves a file of one-record batches, where the general path (decode the header, verify, set up the
  columns, build one record) costs several microseconds a batch. This loop reads the header and both
  ends columns of such a batch with one ``struct`` call, verifies both checksums exactly as
  ``read_header`` and ``RecordBatch.verify`` do, and slices the key and value. A stretch of batches of
  one size (``_take_uniform``) is unpacked, checked and built by C-level calls over whole columns. It
  takes only the batches whose layout it knows completely (uncompressed, one dense record, no header
  column, a body that adds up) and stops at anything else, leaving that batch to the general path: a
  damaged batch is therefore always reported by the general path, with its usual error.
- ``PointHead``: a point read into a batch whose head is cached, with the columns unpacked once.
- ``call_paused``: a read returns its records in a list, so they all stay alive; every ~700 tracked
  allocations then start a collection of the young generation, and the survivors are traversed again
  in the older ones: about as much time as building the records (90 of 210 ns per record, measured).
  Records hold only bytes, ints and tuples of them, so they form no reference cycle: the read runs with
  the collector paused. The pause is process-wide (``gc.disable``), shared by concurrent reads and
  short (one read); a program that calls ``gc.disable()`` itself while a read is under way in another
  thread has it undone when that read ends (a ``gc.disable()`` made before stays).
"""

from __future__ import annotations

import gc
import struct
import sys
import threading
from array import array
from bisect import bisect_left
from functools import lru_cache
from itertools import repeat
from zlib import crc32

from .decoder import (_DELTAS, _HEADER_ENDS, _KEY_ENDS, _KEYS, _TIMESTAMPS, _VALUE_ENDS, _VALUES, BODY_AT,
                      HAS_NULL_KEYS, HAS_NULL_VALUES, HEADER_CRC_AT, LOG_OVERHEAD_BYTES, MAGIC, RECORD_OVERHEAD_BYTES,
                      TIMESTAMP_TYPE_LOG_APPEND, Record)

# A one-record batch without offset deltas, timestamps or headers: the header and the two ends
# columns (one int32 each), then the key and the value.
_SINGLE = struct.Struct("<qiBIIHiiqqqii")
_SINGLE_BYTES = _SINGLE.size  # 63
_SINGLE_KNOWN_ATTRIBUTES = HAS_NULL_KEYS | HAS_NULL_VALUES | TIMESTAMP_TYPE_LOG_APPEND  # no codec, no columns
# Magic 2 and 3 lay out such a batch alike (magic 3 differs only with its producer bits, which
# ``_SINGLE_KNOWN_ATTRIBUTES`` leaves to the general path), so logs written before magic 3 keep this
# path; the per-batch test compares with ``MAGIC`` first, so a new log pays one comparison as before.
_SINGLE_MAGICS = (2, MAGIC)
_EMPTY_HEADERS = ()
NO_LIMIT = 2**62  # a budget or a room that never binds (a scan)

_new = tuple.__new__


def take_single_record_batches(buffer: bytes, at: int, limit: int, start_offset: int, end_offset: int,
                               budget: int, room: int, records: list, need_one: bool) -> tuple[int, int, bool]:
    """Consume the one-record batches that start at ``buffer[at:]`` and end by ``limit``, appending the
    records with ``start_offset <= offset < end_offset`` to ``records``, charging each against
    ``budget`` bytes (``RECORD_OVERHEAD_BYTES`` plus key and value bytes, as ``RecordBatch.payload_bytes``
    does) and taking at most ``room`` records; the first record is taken whatever its charge when
    ``need_one``. The same records, charges and stopping rule as ``fetch.take_records`` applied batch
    by batch.

    Returns ``(at, charged, done)``: ``at`` is where the first batch not consumed starts (a batch this
    loop does not take, or one not wholly below ``limit``: the general path goes on there); ``done``
    says a limit or ``end_offset`` was reached (``at`` then follows the last batch taken)."""
    if type(buffer) is not bytes:  # slices must be bytes: only ``pread``'s own buffers qualify
        return at, 0, False
    unpack = _SINGLE.unpack_from
    view = memoryview(buffer)
    charged = 0
    taken = 0
    append = records.append
    same_size = 0  # consecutive batches of one size so far: a uniform stretch is taken in bulk
    previous_size = -1
    while at + _SINGLE_BYTES <= limit:
        if same_size >= _UNIFORM_AFTER:
            same_size = 0
            at, cost, done, count = _take_uniform(buffer, view, at, limit, start_offset, end_offset,
                                                  budget - charged, room - taken, records, need_one and not taken)
            charged += cost
            taken += count
            if done:
                return at, charged, True
            continue
        (base_offset, batch_length, magic, crc, header_crc, attributes, last_offset_delta, record_count,
         base_timestamp, max_timestamp, _horizon, key_end, value_end) = unpack(buffer, at)
        stop = at + LOG_OVERHEAD_BYTES + batch_length
        if (stop > limit or record_count != 1 or last_offset_delta or (magic != MAGIC and magic != 2)
                or attributes & ~_SINGLE_KNOWN_ATTRIBUTES):
            break
        # Sizes and slices exactly as ``_Columns`` takes them for record 0 (a negative end is a null
        # and ``~end`` the blob's size, whatever the attribute bits say).
        key_bytes = key_end if key_end >= 0 else ~key_end
        value_bytes = value_end if value_end >= 0 else ~value_end
        if _SINGLE_BYTES + key_bytes + value_bytes != stop - at:
            break
        if crc32(view[at : at + HEADER_CRC_AT]) != header_crc or crc32(view[at + BODY_AT : stop]) != crc:
            break
        if stop - at == previous_size:
            same_size += 1
        else:
            same_size, previous_size = 0, stop - at
        if base_offset >= end_offset:
            return at, charged, True
        if base_offset < start_offset:
            at = stop
            continue
        charge = key_bytes + value_bytes + RECORD_OVERHEAD_BYTES
        remaining = budget - charged
        if charge > remaining and not (need_one and not taken):
            return at, charged, True
        key_at = at + _SINGLE_BYTES
        append(_new(Record, (None if key_end < 0 else buffer[key_at : key_at + key_bytes],
                             None if value_end < 0 else buffer[key_at + key_bytes : stop], _EMPTY_HEADERS,
                             max_timestamp if attributes & TIMESTAMP_TYPE_LOG_APPEND else base_timestamp,
                             base_offset)))
        charged += charge
        taken += 1
        at = stop
        if taken >= room or charge >= remaining:
            return at, charged, True
    return at, charged, False


_UNIFORM_AFTER = 8  # equal batch sizes in a row before trying the bulk path
_UNIFORM_MIN_BATCHES = 8
_UNIFORM_MAX_BATCHES = 8192


@lru_cache(maxsize=32)
def _uniform_structs(key_bytes: int, value_bytes: int) -> tuple[struct.Struct, struct.Struct]:
    """For one-record batches with a key of ``key_bytes`` and a value of ``value_bytes``: the fields
    of one batch (max timestamp and delete horizon skipped), and its two checksummed spans."""
    size = _SINGLE_BYTES + key_bytes + value_bytes
    return (struct.Struct(f"<qiBIIHiiq16xii{key_bytes}s{value_bytes}s"),
            struct.Struct(f"<{HEADER_CRC_AT}s{BODY_AT - HEADER_CRC_AT}x{size - BODY_AT}s"))


def _take_uniform(buffer: bytes, view: memoryview, at: int, limit: int, start_offset: int, end_offset: int,
                  budget: int, room: int, records: list, need_one: bool) -> tuple[int, int, bool, int]:
    """``take_single_record_batches`` over a stretch of one-record batches that share one layout (no
    attribute bit, no null, the same key and value sizes): every field, checksum and record of the
    stretch is unpacked, compared and built by C-level calls over whole columns. Takes the records
    the batch-by-batch loop would take, with the same stopping rule. Returns ``(at, charged, done,
    records taken)``; takes nothing (and returns ``at`` unchanged) when the batch at ``at`` is not
    such a batch; stops before the first batch that breaks the pattern or fails a check."""
    (base_offset, batch_length, magic, _crc, _header_crc, attributes, last_offset_delta, record_count,
     _base_ts, _max_ts, _horizon, key_end, value_end) = _SINGLE.unpack_from(buffer, at)
    size = LOG_OVERHEAD_BYTES + batch_length
    if (attributes or key_end < 0 or value_end < 0 or magic not in _SINGLE_MAGICS or record_count != 1
            or last_offset_delta or size != _SINGLE_BYTES + key_end + value_end):
        return at, 0, False, 0
    charge = key_end + value_end + RECORD_OVERHEAD_BYTES
    # At most the batches below ``start_offset`` (each takes an offset at least) plus those wanted.
    wanted = min(room, max(budget, 0) // charge) + 1
    count = min((limit - at) // size, _UNIFORM_MAX_BATCHES, max(start_offset - base_offset, 0) + wanted)
    if count < _UNIFORM_MIN_BATCHES:
        return at, 0, False, 0
    fields, spans = _uniform_structs(key_end, value_end)
    _pause()
    try:
        region = view[at : at + count * size]
        (bases, lengths, magics, crcs, header_crcs, attributes_column, last_offset_deltas, record_counts,
         timestamps, key_ends, value_ends, keys, values) = zip(*fields.iter_unpack(region))
        # The stretch ends before the first batch whose layout differs.
        for column, expected in ((lengths, batch_length), (magics, magic), (attributes_column, 0),
                                 (last_offset_deltas, 0), (record_counts, 1), (key_ends, key_end),
                                 (value_ends, value_end)):
            part = column if len(column) == count else column[:count]
            if part.count(expected) != count:
                count = list(map(expected.__eq__, part)).index(False)
        if count < 1:
            return at, 0, False, 0
        # Bisecting the bases below takes the batches the batch-by-batch loop takes when they never
        # decrease (it skips those below ``start_offset`` and stops at the first at ``end_offset``).
        part = list(bases if len(bases) == count else bases[:count])
        if part != sorted(part):
            return at, 0, False, 0
        prefixes, bodies = zip(*spans.iter_unpack(region[: count * size]))
        if tuple(map(crc32, prefixes)) != header_crcs[:count]:
            count = list(map(int.__eq__, map(crc32, prefixes), header_crcs)).index(False)
        if tuple(map(crc32, bodies[:count])) != crcs[:count]:
            count = list(map(int.__eq__, map(crc32, bodies), crcs)).index(False)
        if count < 1:
            return at, 0, False, 0
        # Every batch in [0, count) is verified and takes one record: now the read's rules.
        first = bisect_left(bases, start_offset, 0, count)
        last = bisect_left(bases, end_offset, first, count)
        fit = max(budget, 0) // charge
        taken = min(last - first, room, fit)
        if taken == 0 and need_one and first < last:
            taken = 1
        if taken:
            records.extend(map(_new, repeat(Record, taken),
                               zip(keys[first : first + taken], values[first : first + taken], repeat((), taken),
                                   timestamps[first : first + taken], bases[first : first + taken])))
    finally:
        _resume()
    charged = taken * charge
    if taken < last - first or last < count or taken >= room or (taken and charged >= budget):
        return at + (first + taken) * size, charged, True, taken
    return at + count * size, charged, False, taken


# --- point reads -------------------------------------------------------------------------------

_ROW_PAIR = struct.Struct("=iiqii")  # a PointHead row and the ends that begin the next one (native order)
_LITTLE_ENDIAN = sys.byteorder == "little"  # the columns' order: their bytes are copied as they are


def _column(columns, column: int, code: str, count: int):
    """A fixed-width column as a typed view of its bytes (little-endian on disk), or an array of its
    values where the machine's order differs."""
    if _LITTLE_ENDIAN:
        return columns.column_bytes(column).cast(code)
    return array(code, columns.ints(column, 0, count))


class PointHead:
    """What a point read needs of a batch whose head (header, columns and perhaps the keys) is
    cached: the keys blob as bytes when it is cached, where the values start in the file, and the
    ends and timestamps repacked into one ``rows`` string, so that ``record(offset)`` costs one
    ``struct`` call, a slice of the keys, one read of the value (``read_exact(file_position,
    size)``, a mapping slice in a writer) and a tuple. The same record ``RecordBatch.record_at``
    gives, or None when the batch holds no record at exactly ``offset`` (the general path decides).

    Row ``i`` of ``rows`` (16 bytes) is the previous record's key and value ends, then record
    ``i``'s timestamp; the next row begins with record ``i``'s ends, so one unpack of 24 bytes at
    ``16 * i`` gives both ends of both blobs and the timestamp. Point reads land at random in large
    logs, where each cache miss costs more than the Python around it: two tuples of int objects per
    column (about 36 bytes a record, scattered) cost four or five misses per read where this costs
    one (16 bytes a record, contiguous)."""

    __slots__ = ("base_offset", "span", "count", "deltas", "rows", "keys", "keys_position", "values_position",
                 "read_exact", "columns")

    def __init__(self, batch, body_position: int, read_exact) -> None:
        header, columns = batch.header, batch.columns
        count = header.record_count
        self.base_offset = header.base_offset
        self.count = count
        self.columns = columns
        self.deltas = None if columns.at[_DELTAS] < 0 else columns.ints(_DELTAS, 0, count)
        # the offsets a record may be at: dense, or up to the last offset delta
        self.span = count if self.deltas is None else header.last_offset_delta + 1
        rows = bytearray(16 * (count + 1))  # (0, 0, t0), (k0, v0, t1), ..., (k[n-1], v[n-1], 0)
        if count:
            ints, longs = memoryview(rows).cast("i"), memoryview(rows).cast("q")
            ints[4::4] = _column(columns, _KEY_ENDS, "i", count)
            ints[5::4] = _column(columns, _VALUE_ENDS, "i", count)
            longs[1 : 2 * count : 2] = (array("q", repeat(columns.timestamp_default, count))
                                        if columns.constant_timestamps else _column(columns, _TIMESTAMPS, "q", count))
        self.rows = bytes(rows)
        key_at, keys_bytes = columns.blob_at[_KEYS], columns.blob_bytes[_KEYS]
        cached = key_at + keys_bytes <= len(columns.body)
        self.keys = bytes(columns.body[key_at : key_at + keys_bytes]) if cached else None
        self.keys_position = body_position + key_at
        self.values_position = body_position + columns.blob_at[_VALUES]
        self.read_exact = read_exact

    def record(self, offset: int) -> Record | None:
        index = offset - self.base_offset
        if not 0 <= index < self.span:
            return None
        deltas = self.deltas
        if deltas is not None:
            delta = index
            index = bisect_left(deltas, delta)
            if index >= self.count or deltas[index] != delta:
                return None
        key_start, value_start, timestamp, key_end, value_end = _ROW_PAIR.unpack_from(self.rows, 16 * index)
        if key_start < 0:  # a null before: its end is stored complemented
            key_start = ~key_start
        if value_start < 0:
            value_start = ~value_start
        if key_end < 0:
            key = None
        elif self.keys is not None:
            key = self.keys[key_start:key_end]
        else:
            key = self.read_exact(key_end - key_start, self.keys_position + key_start)
        value = None if value_end < 0 else self.read_exact(value_end - value_start, self.values_position + value_start)
        columns = self.columns
        return _new(Record, (key, value, () if columns.at[_HEADER_ENDS] < 0 else columns._headers(index, index + 1)[0],
                             timestamp, offset))


# --- building with the collector paused ---------------------------------------------------------

PAUSE_MIN_RECORDS = 256
"""A read that may return fewer records than this is not worth a pause."""

_pause_lock = threading.Lock()
_pausers = 0
_resume_collector = False


def _pause() -> None:
    global _pausers, _resume_collector
    with _pause_lock:
        if not _pausers:
            _resume_collector = gc.isenabled()
            if _resume_collector:
                gc.disable()
        _pausers += 1


def _resume() -> None:
    global _pausers
    with _pause_lock:
        _pausers -= 1
        if not _pausers and _resume_collector:
            gc.enable()


def call_paused(function, *args):
    """``function(*args)`` with the cyclic garbage collector paused: for a read that builds many
    records and returns them (see the module docstring). Threads pausing at the same time share one
    pause (the last to finish resumes it); a collector the program had disabled stays disabled.
    Once the caller drops the previous read's records (a consumer loop), the counts even out and no
    collection runs at all; records kept are seen by the next collection, once."""
    _pause()
    try:
        return function(*args)
    finally:
        _resume()

