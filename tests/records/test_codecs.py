"""Every codec Kafka's ``compression.type`` names, in stored batches: snappy, lz4 and zstd through
the optional ``cramjam`` (loaded by name on first use), gzip and none from the standard library;
``producer`` keeping the codec the records came with; and without ``cramjam``, a one-line refusal
naming the extra, never a batch taken for corrupt."""

import importlib

import pytest

from logstore import LogManager, Record
from logstore.config import LogConfig
from logstore.errors import CodecUnavailableError, CorruptRecordError, InvalidConfigError
from logstore.records import codecs
from logstore.records.batching import RecordColumns, encode_records
from logstore.records.decoder import COMPRESSION_MASK, RecordBatch

pytest.importorskip("cramjam", reason="snappy, lz4 and zstd need the compression extra")

CODECS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def columns(count=20, compression=0):
    return RecordColumns([b"key-%d" % i for i in range(count)], [b"value %d " % i * 30 for i in range(count)],
                         [(("h", b"x"),)] * count, [1000 + i for i in range(count)], compression)


def encoded(records, config):
    [(header, parts)] = encode_records(records, config, 5000, "t")
    return bytes(header) + b"".join(parts)


@pytest.mark.parametrize("name", [*CODECS, "producer"])
def test_each_compression_type_round_trips(name):
    records = columns(compression="zstd")
    data = encoded(records, LogConfig.from_properties({"compression.type": name}))
    batch = RecordBatch.decode(data, 0)
    assert batch.header.attributes & COMPRESSION_MASK == (4 if name == "producer" else CODECS[name])
    assert [(r.key, r.value, r.headers, r.timestamp_ms) for r in batch.records()] == \
           [(r.key, r.value, r.headers, r.timestamp_ms) for r in records]
    if name not in ("uncompressed", "producer"):
        assert len(data) < len(encoded(records, LogConfig.from_properties({"compression.type": "uncompressed"})))


def test_producer_keeps_what_the_records_came_with():
    config = LogConfig()  # compression.type=producer is the default
    plain = [Record(b"k", b"v" * 100)] * 5
    assert RecordBatch.decode(encoded(plain, config), 0).header.attributes & COMPRESSION_MASK == 0
    for name, codec in CODECS.items():
        given = encoded(columns(compression=codec), config)
        assert RecordBatch.decode(given, 0).header.attributes & COMPRESSION_MASK == codec, name
    with pytest.raises(ValueError, match="unknown compression 'brotli'"):
        columns(compression="brotli")


def test_a_store_topic_with_lz4_appends_reads_and_cleans(tmp_path):
    with LogManager([str(tmp_path)]) as store:
        store.create_topic("t", config={"compression.type": "lz4", "cleanup.policy": "compact"})
        log = store.get_log("t", 0)
        log.append([Record(b"a", b"1"), Record(b"b", b"2")])
        log.append([Record(b"a", b"3")])
        log.roll()
        log.append([Record(b"c", b"4")])
        store.compact("t")
        assert {(r.key, r.value) for r in log.read(0)} == {(b"b", b"2"), (b"a", b"3"), (b"c", b"4")}
        assert {batch.header.attributes & COMPRESSION_MASK for batch, _f, _s in log.iter_batch_slices()} == {3}


def test_damaged_compressed_bodies_are_corrupt():
    for codec in (2, 3, 4):
        with pytest.raises(CorruptRecordError, match="undecodable"):
            codecs.decompress(codec, memoryview(b"\x00\x01 not compressed at all"))
    with pytest.raises(CorruptRecordError, match="unknown compression codec 6"):
        codecs.decompress(6, memoryview(b""))


@pytest.fixture
def without_cramjam(monkeypatch):
    """As if cramjam were not installed: the config's check and the codecs' import both fail."""
    real_import = importlib.import_module

    def refuse(name, *args):
        if name == "cramjam":
            raise ImportError("No module named 'cramjam'")
        return real_import(name, *args)
    monkeypatch.setattr(codecs, "_module", None)
    monkeypatch.setattr(importlib, "import_module", refuse)
    monkeypatch.setattr("logstore.config.optional_codecs_available", lambda: False)


def test_without_the_library_a_topic_is_refused_naming_the_extra(without_cramjam):
    for name in ("snappy", "lz4", "zstd"):
        with pytest.raises(InvalidConfigError, match=r"pip install 'kafka-logstore\[compression\]'"):
            LogConfig.from_properties({"compression.type": name})
    LogConfig.from_properties({"compression.type": "gzip"})  # the standard library's


def test_without_the_library_a_stored_batch_is_unreadable_not_corrupt(monkeypatch):
    data = encoded(columns(), LogConfig.from_properties({"compression.type": "zstd"}))
    real_import = importlib.import_module
    monkeypatch.setattr(codecs, "_module", None)
    monkeypatch.setattr(importlib, "import_module",
                        lambda name, *args: (_ for _ in ()).throw(ImportError(name)) if name == "cramjam"
                        else real_import(name, *args))
    with pytest.raises(CodecUnavailableError, match=r"kafka-logstore\[compression\]") as raised:
        RecordBatch.decode(data, 0)
    assert not isinstance(raised.value, CorruptRecordError)
