"""The micro-benchmark of the record batch format behind ``logstore perf format``.

Owns the format workloads (encode, decode, point decode, checksum), two baselines measured in the
same run (a pure-Python encoding of Kafka's v2 records with varints, and a pure-Python CRC-32C) and
the result table. No files, no ``Log``: only ``encoder`` and ``records``, so the numbers are the
format's own cost per record, the floor under every append and read.

- Batches hold ``batch_size`` records of a ``key_bytes`` key (``key-000000000042`` style) and a
  ``value_bytes`` value drawn from a 32-letter alphabet (so gzip has something to find, as in real
  text or JSON payloads), built from ``seed`` before any clock starts.
- Every case runs once untimed (warm-up), then ``repeats`` times over the same prepared inputs; the
  best (shortest) repeat is reported: on a shared machine, noise only ever adds time. Timing uses
  ``clock.Stopwatch``.
- payload = key + value + header bytes (names and values) per record; MB = 10**6 bytes. Most cases
  count records; the point cases count lookups (one record decoded from a 1000-record batch each,
  ``point+crc`` does 1/20 as many: each checks a whole batch's CRC) and ``assign-offsets`` batches.
- After timing, each case's answer is checked against the records it was built from; a wrong
  answer raises ``FormatBenchmarkError`` instead of producing a number.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

from ..clock import Stopwatch
from ..records.decoder import COMPRESSION_GZIP, COMPRESSION_NONE, Record, RecordBatch, read_header
from ..records.encoder import assign_base_offset, encode_batch, encode_batch_parts

MB = 1_000_000
BASE_TIMESTAMP_MS = 1_700_000_000_000
VALUE_ALPHABET = b"abcdefghijklmnopqrstuvwxyz012345"
DISTINCT_BATCHES = 8
"""Distinct prepared batches a case cycles through (so no single buffer stays hot in the cache)."""


class FormatBenchmarkError(Exception):
    """A case gave a wrong answer: its measurement is not valid."""


@dataclass(frozen=True)
class FormatWorkload:
    """What the cases encode and decode: ``records`` records per timed repeat, in batches of
    ``batch_size``; ``lookups`` point decodes per repeat for the point cases."""

    records: int = 200_000
    batch_size: int = 1000
    key_bytes: int = 16
    value_bytes: int = 100
    lookups: int = 100_000
    repeats: int = 5
    seed: int = 42

    def __post_init__(self) -> None:
        if min(self.records, self.batch_size, self.lookups, self.repeats) < 1:
            raise ValueError(f"records, batch_size, lookups and repeats must be >= 1: {self}")
        if self.key_bytes < 0 or self.value_bytes < 0:
            raise ValueError(f"key_bytes and value_bytes must be >= 0: {self}")

    @property
    def batches_per_repeat(self) -> int:
        return max(1, -(-self.records // self.batch_size))

    def as_dict(self) -> dict:
        """Plain data for JSON."""
        return asdict(self)


@dataclass
class FormatResult:
    """One row of the table: one case, best of ``repeats``."""

    case: str
    description: str
    records: int  # units handled per repeat: records, lookups (point cases) or batches (see ``unit``)
    payload_bytes: int  # payload bytes handled per repeat
    batch_bytes: int  # bytes of one encoded batch of the case (its size on disk)
    best_s: float
    repeats: int
    baseline: bool = False
    unit: str = "record"
    extra: dict = field(default_factory=dict)

    records_per_s = property(lambda self: self.records / self.best_s if self.best_s > 0 else None)
    mb_per_s = property(lambda self: self.payload_bytes / MB / self.best_s
                        if self.best_s > 0 and self.payload_bytes else None)
    ns_per_record = property(lambda self: self.best_s * 1e9 / self.records if self.records else None)

    def as_dict(self) -> dict:
        """Plain data for JSON, rates included."""
        data = asdict(self)
        data.update(records_per_s=self.records_per_s, mb_per_s=self.mb_per_s, ns_per_record=self.ns_per_record)
        return data


# --- inputs ----------------------------------------------------------------------------------------


def make_records(workload: FormatWorkload, batch_number: int, *, headers: bool = False,
                 timestamps: bool = False, nulls: bool = False) -> list[Record]:
    """The records of prepared batch ``batch_number``: deterministic in ``workload.seed``."""
    rng = random.Random(f"{workload.seed}/{batch_number}")
    first = batch_number * workload.batch_size
    records = []
    for i in range(first, first + workload.batch_size):
        key = f"key-{i:012d}".encode()[-workload.key_bytes:] if workload.key_bytes else b""
        key = key.rjust(workload.key_bytes, b"0")
        value = bytes(rng.choices(VALUE_ALPHABET, k=workload.value_bytes))
        if nulls and i % 10 == 0:
            value = None
        record_headers = (("trace-id", key), ("source", b"web")) if headers else ()
        timestamp_ms = BASE_TIMESTAMP_MS + i if timestamps else None
        records.append(Record(key, value, record_headers, timestamp_ms))
    return records


def payload_bytes(records: Sequence[Record]) -> int:
    """Key + value + header name and value bytes of ``records``."""
    total = 0
    for record in records:
        total += len(record.key or b"") + len(record.value or b"")
        for name, value in record.headers:
            total += len(name.encode()) + len(value or b"")
    return total


def _expected(records: Sequence[Record], base_offset: int = 0) -> list[Record]:
    return [Record(r.key, r.value, tuple(r.headers), BASE_TIMESTAMP_MS if r.timestamp_ms is None else r.timestamp_ms,
                   base_offset + i) for i, r in enumerate(records)]


# --- baselines -------------------------------------------------------------------------------------


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        crc = n
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC32C_TABLE = _crc32c_table()


def crc32c(data: bytes, crc: int = 0) -> int:
    """CRC-32C (Castagnoli, Kafka's batch checksum) in pure Python, table-driven: the baseline for
    the checksum choice. Check value: ``crc32c(b"123456789") == 0xE3069283``."""
    table = _CRC32C_TABLE
    crc ^= 0xFFFFFFFF
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _varint(value: int, out: bytearray) -> None:
    value = (value << 1) ^ (value >> 63)  # zigzag
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def kafka_encode_records(records: Sequence[Record], base_timestamp_ms: int) -> bytes:
    """The records section of a Kafka v2 batch (per-record zigzag varints), in pure Python: the
    baseline for the column-wise body. No batch header and no CRC-32C (both would add cost)."""
    out = bytearray()
    for offset_delta, record in enumerate(records):
        body = bytearray(b"\x00")  # attributes
        _varint((record.timestamp_ms or base_timestamp_ms) - base_timestamp_ms, body)
        _varint(offset_delta, body)
        for blob in (record.key, record.value):
            if blob is None:
                _varint(-1, body)
            else:
                _varint(len(blob), body)
                body += blob
        _varint(len(record.headers), body)
        for name, value in record.headers:
            name_bytes = name.encode()
            _varint(len(name_bytes), body)
            body += name_bytes
            if value is None:
                _varint(-1, body)
            else:
                _varint(len(value), body)
                body += value
        _varint(len(body), out)
        out += body
    return bytes(out)


def _read_varint(data: bytes, position: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), position
        shift += 7


def kafka_decode_records(data: bytes, count: int, base_offset: int, base_timestamp_ms: int) -> list[Record]:
    """Decode ``kafka_encode_records`` output into ``Record`` tuples (the decoding baseline)."""
    records = []
    position = 0
    for _ in range(count):
        _length, position = _read_varint(data, position)
        position += 1  # attributes
        timestamp_delta, position = _read_varint(data, position)
        offset_delta, position = _read_varint(data, position)
        blobs = []
        for _blob in range(2):
            size, position = _read_varint(data, position)
            if size < 0:
                blobs.append(None)
            else:
                blobs.append(data[position : position + size])
                position += size
        header_count, position = _read_varint(data, position)
        headers = []
        for _header in range(header_count):
            size, position = _read_varint(data, position)
            name = data[position : position + size].decode()
            position += size
            size, position = _read_varint(data, position)
            if size < 0:
                headers.append((name, None))
            else:
                headers.append((name, data[position : position + size]))
                position += size
        records.append(Record(blobs[0], blobs[1], tuple(headers), base_timestamp_ms + timestamp_delta,
                              base_offset + offset_delta))
    return records


# --- cases -----------------------------------------------------------------------------------------


@dataclass
class _Case:
    name: str
    description: str
    inputs: list  # one prepared input per distinct batch
    run: Callable[[object], object]  # the timed operation on one input
    check: Callable[[object, object], bool]  # (input, answer) -> the answer is right
    records_per_run: int
    payload_per_run: int
    batch_bytes: int
    runs_per_repeat: int
    baseline: bool = False
    unit: str = "record"


def _cases(workload: FormatWorkload) -> list[_Case]:
    n = workload.batch_size
    runs = workload.batches_per_repeat
    variants = {
        "plain": dict(),
        "headers": dict(headers=True),
        "timestamps": dict(timestamps=True),
        "nulls": dict(nulls=True),
    }
    records = {name: [make_records(workload, b, **flags) for b in range(DISTINCT_BATCHES)]
               for name, flags in variants.items()}
    payload = {name: payload_bytes(batches[0]) for name, batches in records.items()}

    def encoded(name: str, compression: int = COMPRESSION_NONE) -> list[bytes]:
        return [bytes(encode_batch(batch, default_timestamp_ms=BASE_TIMESTAMP_MS, compression=compression))
                for batch in records[name]]

    plain_bytes, header_bytes, gzip_bytes = encoded("plain"), encoded("headers"), encoded("plain", COMPRESSION_GZIP)
    cases: list[_Case] = []

    def encode_case(case: str, variant: str, description: str, compression: int = COMPRESSION_NONE) -> None:
        def run(batch, _compression=compression):
            return encode_batch_parts(batch, default_timestamp_ms=BASE_TIMESTAMP_MS, compression=_compression)

        def check(batch, answer) -> bool:
            header, parts = answer
            decoded = RecordBatch.decode(bytes(header) + b"".join(parts))
            return decoded is not None and decoded.records() == _expected(batch)

        size = len(encode_batch(records[variant][0], default_timestamp_ms=BASE_TIMESTAMP_MS, compression=compression))
        cases.append(_Case(case, description, records[variant], run, check, n, payload[variant], size, runs))

    encode_case("encode", "plain", "encode_batch_parts, constant timestamp (what Log.append does)")
    encode_case("encode+ts", "timestamps", "encode_batch_parts, a timestamp per record (int64 column)")
    encode_case("encode+headers", "headers", "encode_batch_parts, 2 headers per record")
    encode_case("encode+nulls", "nulls", "encode_batch_parts, every 10th value None (the null path)")
    encode_case("encode+gzip", "plain", "encode_batch_parts with gzip (zlib level 6)", COMPRESSION_GZIP)

    def decode_case(case: str, variant: str, description: str, buffers: list[bytes]) -> None:
        def check(buffer, answer) -> bool:
            return answer == _expected(records[variant][buffers.index(buffer)])

        cases.append(_Case(case, description, buffers, lambda buffer: RecordBatch.decode(buffer).records(), check,
                           n, payload[variant], len(buffers[0]), runs))

    decode_case("decode", "plain", "RecordBatch.decode (CRC) + records(): every Record built", plain_bytes)
    decode_case("decode+headers", "headers", "the same, 2 headers per record", header_bytes)
    decode_case("decode+gzip", "plain", "the same, gzip body (CRC, gunzip, records)", gzip_bytes)

    def scan(buffer):
        count = 0
        for _record in RecordBatch.decode(buffer).iter_records():
            count += 1
        return count

    cases.append(_Case("decode-iter", "RecordBatch.decode (CRC) + iter_records(), one Record at a time",
                       plain_bytes, scan, lambda _buffer, answer: answer == n, n, payload["plain"],
                       len(plain_bytes[0]), runs))

    # Point decodes: one record at a seeded random index of a random prepared batch.
    rng = random.Random(workload.seed)
    picks = [(rng.randrange(DISTINCT_BATCHES), rng.randrange(n)) for _ in range(workload.lookups)]
    headers_of = [read_header(buffer) for buffer in plain_bytes]
    crc_picks = picks[: max(1, len(picks) // 20)]  # a whole-batch CRC per lookup is slow: fewer of them
    point_payload = sum(len(records["plain"][b][i].key) + len(records["plain"][b][i].value) for b, i in picks)
    crc_payload = sum(len(records["plain"][b][i].key) + len(records["plain"][b][i].value) for b, i in crc_picks)

    def point_check(_input, answer) -> bool:
        return all(record == _expected(records["plain"][b])[i] for record, (b, i) in zip(answer[:50], picks))

    def point(_input):
        return [RecordBatch(headers_of[b], plain_bytes[b]).record_at(i) for b, i in picks]

    def point_crc(_input):
        return [RecordBatch.decode(plain_bytes[b]).record_at(i) for b, i in crc_picks]

    cases.append(_Case("point", "record_at(i) of a batch whose CRC was checked before (header only)", [None],
                       point, point_check, workload.lookups, point_payload, len(plain_bytes[0]), 1, unit="lookup"))
    cases.append(_Case("point+crc", "RecordBatch.decode (CRC of the whole batch) + record_at(i)", [None],
                       point_crc, point_check, len(crc_picks), crc_payload, len(plain_bytes[0]), 1, unit="lookup"))

    def assign(data: bytearray) -> bytearray:
        assign_base_offset(data, 1 << 40)
        return data

    cases.append(_Case("assign-offsets", "assign_base_offset: rewrite 8 bytes, re-checksum 17 (per batch)",
                       [bytearray(buffer) for buffer in plain_bytes], assign,
                       lambda buffer, answer: RecordBatch.decode(answer).base_offset == 1 << 40,
                       1, 0, len(plain_bytes[0]), 20 * runs, unit="batch"))
    cases.append(_Case("crc32", "zlib.crc32 over the batch body (the format's checksum)", plain_bytes,
                       lambda buffer: zlib.crc32(memoryview(buffer)[21:]),
                       lambda buffer, answer: answer == read_header(buffer).crc,
                       n, payload["plain"], len(plain_bytes[0]), runs))
    # Baselines. CRC-32C in pure Python is slow: one batch per repeat.
    cases.append(_Case("crc32c-py", "baseline: pure-Python CRC-32C over the same bytes (Kafka's checksum)",
                       plain_bytes, lambda buffer: crc32c(memoryview(buffer)[21:]),
                       lambda _buffer, answer: isinstance(answer, int), n, payload["plain"], len(plain_bytes[0]),
                       1, baseline=True))
    kafka_plain = [kafka_encode_records(batch, BASE_TIMESTAMP_MS) for batch in records["plain"]]
    cases.append(_Case("kafka-encode", "baseline: Kafka v2 records, per-record varints, pure Python (no CRC)",
                       records["plain"], lambda batch: kafka_encode_records(batch, BASE_TIMESTAMP_MS),
                       lambda batch, answer: answer == kafka_plain[records["plain"].index(batch)],
                       n, payload["plain"], len(kafka_plain[0]) + 61, runs, baseline=True))
    cases.append(_Case("kafka-decode", "baseline: decoding the same, pure Python (no CRC)", kafka_plain,
                       lambda data: kafka_decode_records(data, n, 0, BASE_TIMESTAMP_MS),
                       lambda data, answer: answer == _expected(records["plain"][kafka_plain.index(data)]),
                       n, payload["plain"], len(kafka_plain[0]) + 61, runs, baseline=True))
    return cases


CASE_NAMES = ("encode", "encode+ts", "encode+headers", "encode+nulls", "encode+gzip", "decode", "decode+headers",
              "decode+gzip", "decode-iter", "point", "point+crc", "assign-offsets", "crc32", "crc32c-py",
              "kafka-encode", "kafka-decode")


def bench_format(workload: FormatWorkload, cases: Sequence[str] | None = None,
                 progress: Callable[[str], None] | None = None) -> list[FormatResult]:
    """Run the format cases (all of ``CASE_NAMES`` by default) and return one result per case.
    Raises ``ValueError`` for an unknown case and ``FormatBenchmarkError`` for a wrong answer."""
    wanted = list(CASE_NAMES if cases is None else cases)
    unknown = [name for name in wanted if name not in CASE_NAMES]
    if unknown:
        raise ValueError(f"unknown format case(s) {', '.join(unknown)}; choose from {', '.join(CASE_NAMES)}")
    results = []
    for case in _cases(workload):
        if case.name not in wanted:
            continue
        if progress:
            progress(case.name)
        inputs = case.inputs
        schedule = [inputs[i % len(inputs)] for i in range(case.runs_per_repeat)]
        run = case.run
        for item in inputs:  # warm-up, untimed: caches (struct formats, allocator) as in a running engine
            run(item)
        best_s = float("inf")
        for _ in range(workload.repeats):
            watch = Stopwatch()
            for item in schedule:  # each answer is dropped at once, as a consumer loop would
                run(item)
            best_s = min(best_s, watch.elapsed_s)
        for item in inputs:  # checked untimed, on every distinct input
            if not case.check(item, run(item)):
                raise FormatBenchmarkError(f"format case {case.name} gave a wrong answer")
        results.append(FormatResult(case.name, case.description, case.records_per_run * case.runs_per_repeat,
                                    case.payload_per_run * case.runs_per_repeat, case.batch_bytes, best_s,
                                    workload.repeats, case.baseline, case.unit))
    results.sort(key=lambda result: wanted.index(result.case))
    return results


def _number(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def render_format_table(results: Sequence[FormatResult], workload: FormatWorkload) -> str:
    """The results as an aligned text table, with notes under it."""
    header = ("case", "unit", "count", "best_s", "per s", "MB/s", "ns each", "batch bytes")
    rows = [header]
    for r in results:
        rows.append((r.case, r.unit, f"{r.records:,}", f"{r.best_s:.4f}", _number(r.records_per_s),
                     _number(r.mb_per_s, 1), _number(r.ns_per_record), f"{r.batch_bytes:,}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) if i < 2 else cell.rjust(width)
                       for i, (cell, width) in enumerate(zip(row, widths))).rstrip() for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    notes = [f"batches of {workload.batch_size} records, {workload.key_bytes}-byte keys, {workload.value_bytes}-byte "
             f"values; best of {workload.repeats} repeats; seed {workload.seed}.",
             "per s: records/s (unit record), lookups/s (one record decoded per lookup) or batches/s; "
             "MB/s: payload = key + value + header bytes; MB = 10^6 bytes.",
             "kafka-*: batch bytes = the records section + Kafka's 61-byte batch header."]
    notes += [f"{r.case}: {r.description}" for r in results]
    return "\n".join(lines + [""] + notes)
