"""Records for the real-client tests and the comparison of what went in with what came out.

``varied_records`` builds the records a producer client can express (keys, null keys, null values,
empty bytes, binary bytes, repeated and non-ASCII header names, null header values, a compressible
value), so one list exercises all of it per client. ``expected_records`` turns them and a
producer's ``(partition, offset)`` answers into the ``WireRecord`` list every consumer must return,
and ``assert_same`` compares, accepting a client-chosen timestamp inside the produce window (kcat
cannot set timestamps) and showing pytest's list diff otherwise.
"""

from __future__ import annotations

import time
from typing import Sequence

from logstore import Record

from . import WireRecord


def now_ms() -> int:
    return int(time.time() * 1000)


def varied_records(capabilities, base_ms: int | None = None, *, tag: bytes = b"") -> list[Record]:
    """Records covering what a producer with ``capabilities`` (a driver or its class) can send.
    Timestamps are ``base_ms + i`` (recent, so retention never touches them) when the client can set
    them, else None (the client stamps them)."""
    base_ms = now_ms() - 60_000 if base_ms is None else base_ms

    def ts(i):
        return base_ms + i if capabilities.sets_timestamps else None

    records = [
        Record(b"key-0" + tag, b"value-0", [("h1", b"a"), ("h2", b"\x01\xff\xfe")], ts(0)),
        Record(None, b"a null key", [], ts(1)),
        Record(b"tombstone" + tag, None, [], ts(2)),
        Record(b"", b"", [("empty", b"")], ts(3)),  # empty bytes, not null
        Record(b"binary \n\x00\xff" + tag, bytes(range(256)) * 4, [("dup", b"1"), ("dup", b"2")], ts(4)),
        Record(b"compressible" + tag, b"abcdefgh" * 2048, [("n\u00efc\u00f6d\u00e9", "v\u00e4lue".encode())], ts(5)),
    ]
    if capabilities.null_header_values:
        records.append(Record(b"null header" + tag, b"v", [("nothing", None), ("something", b"x")], ts(6)))
    if capabilities.null_key_and_value:
        records.append(Record(None, None, [], ts(7)))
    return records


def expected_records(records: Sequence[Record], produced: Sequence[tuple[int, int | None]],
                     first_offset: int = 0) -> list[WireRecord]:
    """What a consumer must read back: the records with the offsets the producer reported (where the
    broker did not say, acks=0, the next offsets from ``first_offset``, as one producer on one
    connection sends them in order). A None timestamp means "stamped by the client"."""
    assert len(produced) == len(records), f"{len(produced)} answers for {len(records)} records"
    out = []
    for i, (record, (_, offset)) in enumerate(zip(records, produced)):
        out.append(WireRecord(first_offset + i if offset is None else offset, record.key, record.value,
                              tuple((name, value) for name, value in (record.headers or ())), record.timestamp_ms))
    return out


def assert_same(actual: Sequence[WireRecord], expected: Sequence[WireRecord], *, window: tuple[int, int] | None = None,
                what: str = "") -> None:
    """``actual == expected`` record for record. Where an expected timestamp is None, any timestamp
    inside ``window`` (the produce call's start and end, ms) is accepted."""
    normalized = []
    for i, record in enumerate(actual):
        if i < len(expected) and expected[i].timestamp_ms is None and window is not None \
                and window[0] - 1 <= record.timestamp_ms <= window[1] + 1:
            record = record._replace(timestamp_ms=None)
        normalized.append(record)
    assert normalized == list(expected), what
