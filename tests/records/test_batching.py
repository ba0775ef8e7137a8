"""One append's records to batches (``records.batching``) against a plain model, and ``RecordColumns``.

The model of ``encode_records`` is the rule it implements, written the plain way: encode all the
records as one batch with ``encode_batch_parts``; if that is larger than the limit (the smaller of
``max.message.bytes`` and ``segment.bytes``), split them greedily by estimated size (a record costs
``RECORD_OVERHEAD_BYTES`` plus its key, value and header bytes), halving when the estimate keeps
them together, and encode each part the same way; one record that fits no batch raises
``RecordTooLargeError``. ``encode_records`` works on columns, skips the checksum of a batch it is
going to split and finds the split points by bisection, so it must give the model's batches byte
for byte, and the model's error, for records given as a list or as ``RecordColumns``.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from logstore.config import LogConfig
from logstore.errors import InvalidRecordError, RecordTooLargeError
from logstore.records.batching import RecordColumns, encode_records
from logstore.records.decoder import (COMPRESSION_GZIP, COMPRESSION_NONE, HEADER_BYTES, RECORD_OVERHEAD_BYTES, Record,
                                      RecordBatch)
from logstore.records.encoder import encode_batch_parts

NOW = 1_700_000_000_000


def model_batches(records, config: LogConfig, now_ms: int, name: str) -> list[bytes]:
    """The batches (whole bytes) ``encode_records`` must give, the plain way."""
    compression = COMPRESSION_GZIP if config.compression_type == "gzip" else COMPRESSION_NONE
    log_append = config.message_timestamp_type == "LogAppendTime"
    limit = min(config.max_message_bytes, config.segment_bytes)

    def encode(group):
        header, parts = encode_batch_parts(group, default_timestamp_ms=now_ms, compression=compression,
                                           log_append_time=log_append)
        data = bytes(header) + b"".join(parts)
        if len(data) <= limit:
            return [data]
        if len(group) == 1:
            setting = "max.message.bytes" if limit == config.max_message_bytes else "segment.bytes"
            raise RecordTooLargeError(f"a record of {len(data) - HEADER_BYTES} bytes is larger than "
                                      f"{setting}={limit} of {name}")
        budget = max(limit - HEADER_BYTES, 1)
        groups, start, total = [], 0, 0
        for position, record in enumerate(group):
            size = (RECORD_OVERHEAD_BYTES + len(record.key or b"") + len(record.value or b"")
                    + sum(8 + len(key.encode()) + len(value or b"") for key, value in record.headers))
            if total + size > budget and position > start:
                groups.append(group[start:position])
                start, total = position, 0
            total += size
        groups.append(group[start:])
        if len(groups) == 1:
            groups = [group[:len(group) // 2], group[len(group) // 2:]]
        return [batch for part in groups for batch in encode(part)]

    return encode(list(records))


def outcome(encode):
    try:
        return encode()
    except (RecordTooLargeError, InvalidRecordError, TypeError, ValueError) as exc:
        return type(exc), str(exc)


def batches_of(records, config):
    return [bytes(header) + b"".join(parts) for header, parts in encode_records(records, config, NOW, "t")]


def as_columns(records) -> RecordColumns:
    return RecordColumns([r.key for r in records], [r.value for r in records], [r.headers for r in records],
                         [r.timestamp_ms for r in records])


blobs = st.one_of(st.none(), st.just(b""), st.binary(max_size=30), st.binary(min_size=200, max_size=700))
headers = st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=10))), max_size=2)
records_strategy = st.lists(st.builds(Record, blobs, blobs, st.one_of(st.just(()), headers),
                                      st.one_of(st.none(), st.integers(NOW - 5, NOW + 5))), min_size=1, max_size=60)


@settings(max_examples=300)
@given(records_strategy, st.integers(100, 3000), st.sampled_from(["producer", "gzip"]),
       st.sampled_from(["CreateTime", "LogAppendTime"]), st.booleans(), st.booleans())
def test_batches_are_the_models_for_lists_and_columns(records, limit, compression, timestamp_type, by_segment,
                                                      keyless):
    if keyless:
        records = [record._replace(key=None) for record in records]
    config = LogConfig.from_properties({"max.message.bytes": 10**6 if by_segment else limit,
                                        "segment.bytes": max(limit, 14) if by_segment else 10**8,
                                        "compression.type": compression, "message.timestamp.type": timestamp_type})
    expected = outcome(lambda: model_batches(records, config, NOW, "t"))
    assert outcome(lambda: batches_of(records, config)) == expected
    assert outcome(lambda: batches_of(as_columns(records), config)) == expected
    if isinstance(expected, list):  # and the batches hold the records (the model shares the encoder)
        decoded = [record for data in expected for record in RecordBatch.decode(data).records()]
        stamp = (lambda r: NOW) if timestamp_type == "LogAppendTime" else (lambda r: NOW if r.timestamp_ms is None
                                                                           else r.timestamp_ms)
        offset = 0
        for batch in expected:  # each batch starts at offset 0 until the log assigns its base offset
            for index in range(RecordBatch.decode(batch).record_count):
                record = records[offset + index]
                assert decoded[offset + index] == Record(record.key, record.value, tuple(map(tuple, record.headers)),
                                                         stamp(record), index)
            offset += RecordBatch.decode(batch).record_count
        assert offset == len(records)
        assert all(len(batch) <= min(config.max_message_bytes, config.segment_bytes) for batch in expected)


@pytest.mark.parametrize("bad", [Record(b"k", "text"), Record("text", b"v"), Record(b"k", b"v", [("h", "x")]),
                                 Record(b"k", b"v", (), "soon"), Record(b"k", b"v" * 3000)])
def test_bad_records_raise_what_the_model_raises_also_in_a_batch_that_splits(bad):
    config = LogConfig.from_properties({"max.message.bytes": 1000})
    for records in ([bad], [Record(b"k", b"v" * 300) for _ in range(5)] + [bad],
                    [bad] + [Record(None, b"v" * 300) for _ in range(5)]):
        expected = outcome(lambda: model_batches(records, config, NOW, "t"))
        assert isinstance(expected, tuple)  # an error
        assert outcome(lambda: batches_of(records, config)) == expected
        assert outcome(lambda: batches_of(as_columns(records), config)) == expected


def test_record_columns_is_a_sequence_of_the_records():
    records = [Record(b"k", b"v", (("h", None),), NOW), Record(None, None, (), None), Record(b"", b"x", (), 5)]
    columns = as_columns(records)
    assert len(columns) == 3 and list(columns) == records and columns == records and columns == tuple(records)
    assert columns[1] == records[1] and columns[-1] == records[-1] and type(columns[0]) is Record
    assert isinstance(columns[1:], RecordColumns) and columns[1:] == records[1:]
    assert columns != records[:2] and columns != [records[0], records[0], records[2]]
    assert records[1] in columns and columns.index(records[2]) == 2
    with pytest.raises(IndexError):
        columns[3]
    with pytest.raises(ValueError, match="different lengths"):
        RecordColumns([b"k"], [], [()], [None])


def test_a_compacted_topic_refuses_columns_with_a_null_key():
    config = LogConfig.from_properties({"cleanup.policy": "compact"})
    with pytest.raises(InvalidRecordError, match="requires a key"):
        encode_records(RecordColumns([b"a", None], [b"1", b"2"], [(), ()], [None, None]), config, NOW, "t")
    assert encode_records(RecordColumns([], [], [], []), config, NOW, "t") == []
