"""Invariants checked: topic configuration and topic names, through ``LogConfig`` and through the store.

- Every Kafka topic key we support accepts valid values given as Python ints/floats and as strings
  (the CLI form), and both forms give the same effective value.
- Invalid values (wrong type, out of range, unparsable) and unknown keys raise ``InvalidConfigError``,
  which is both a ``RequestError`` and a ``ValueError``, and whose message names the key and the value.
  A rejected ``create_topic`` creates nothing (no topic, no directory); a rejected
  ``alter_topic_config`` changes nothing.
- ``cleanup.policy`` accepts ``delete``, ``compact``, ``compact,delete`` in any order and spacing, and a
  list; ``min.compaction.lag.ms`` above ``max.compaction.lag.ms`` is rejected (also across store
  defaults and topic overrides).
- Broker-level settings (``LogManager(dirs, config={"log.segment.bytes": ...})``) become the defaults of
  every topic, topic overrides win over them, only the overrides are persisted, and an unknown store
  setting is rejected before anything is created on disk.
- Topic names follow Kafka's rule: letters, digits, '.', '_', '-', 1 to 249 characters, not '.' or '..'.
  Every other name raises ``InvalidTopicError`` (a ``ValueError``) and no directory appears anywhere,
  inside or outside the data dir.
"""

from __future__ import annotations

import json
import os

import pytest

from logstore import (InvalidConfigError, InvalidTopicError, LogConfig, LogManager, Record, RecordTooLargeError,
                      RequestError, UnknownTopicOrPartitionError)
from logstore.config import LONG_MAX

INT_MAX = 2**31 - 1

# (key, valid values as given, the effective value each should produce)
VALID = {
    "segment.bytes": [(1024, 1024), ("1048576", 1048576), (" 4096 ", 4096), (INT_MAX, INT_MAX)],
    "segment.ms": [(1, 1), ("604800000", 604800000), (LONG_MAX, LONG_MAX)],
    "segment.index.bytes": [(4096, 4096), ("10485760", 10485760)],
    "index.interval.bytes": [(0, 0), ("4096", 4096)],
    "max.message.bytes": [(0, 0), (1024, 1024), ("1048588", 1048588)],
    "cleanup.policy": [("delete", "delete"), ("compact", "compact"), ("compact,delete", "compact,delete"),
                       ("delete, compact", "compact,delete"), (["compact", "delete"], "compact,delete"),
                       (("delete",), "delete"), ("compact, compact", "compact")],
    "retention.ms": [(-1, -1), (0, 0), ("86400000", 86400000), ("-1", -1)],
    "retention.bytes": [(-1, -1), (0, 0), ("1073741824", 1073741824)],
    "flush.messages": [(1, 1), ("10000", 10000), (LONG_MAX, LONG_MAX)],
    "flush.ms": [(0, 0), ("1000", 1000)],
    "min.cleanable.dirty.ratio": [(0, 0.0), (0.5, 0.5), (1, 1.0), ("0.25", 0.25), ("1.0", 1.0)],
    "delete.retention.ms": [(0, 0), ("86400000", 86400000)],
    "min.compaction.lag.ms": [(0, 0), ("1000", 1000)],
}

# (key, invalid values)
INVALID = {
    "segment.bytes": [0, -1, 63, INT_MAX + 1, "abc", "1.5", 1.5, True, None, "", "1 GB"],
    "segment.ms": [0, -1, "never", 2.0, LONG_MAX + 1],
    "segment.index.bytes": [0, -1, "big", INT_MAX + 1],
    "index.interval.bytes": [-1, "x", 0.5],
    "max.message.bytes": [-1, "1MB", INT_MAX + 1, False],
    "cleanup.policy": ["", "foo", "compact,foo", "compact,", [], 1, None, ["delete", "tiered"]],
    "retention.ms": [-2, "forever", 1.5, "9223372036854775808"],
    "retention.bytes": ["1GB", 1.5, True],
    "flush.messages": [0, -1, "all"],
    "flush.ms": [-1, "soon"],
    "min.cleanable.dirty.ratio": [-0.1, 1.5, "half", "nan", "inf", True, None, 2],
    "delete.retention.ms": [-1, "a day"],
    "min.compaction.lag.ms": [-1, "x"],
}

CASES_VALID = [(key, given, effective) for key, values in VALID.items() for given, effective in values]
CASES_INVALID = [(key, value) for key, values in INVALID.items() for value in values]


def field_of(key: str) -> str:
    return key.replace(".", "_")


def test_every_kafka_topic_key_is_covered():
    topic_keys = {"segment.bytes", "segment.ms", "segment.index.bytes", "index.interval.bytes", "max.message.bytes",
                  "cleanup.policy", "retention.ms", "retention.bytes", "flush.messages", "flush.ms",
                  "min.cleanable.dirty.ratio", "delete.retention.ms", "min.compaction.lag.ms"}
    assert topic_keys <= set(VALID) and topic_keys <= set(INVALID)
    assert topic_keys <= set(LogConfig().to_properties())


@pytest.mark.parametrize("key,given,effective", CASES_VALID, ids=[f"{k}={g!r}" for k, g, _ in CASES_VALID])
def test_valid_values_accepted(key, given, effective):
    config = LogConfig.from_properties({key: given})
    assert getattr(config, field_of(key)) == effective
    assert config.to_properties()[key] == effective
    # Every other key keeps its default.
    defaults = LogConfig().to_properties()
    changed = {k for k, v in config.to_properties().items() if v != defaults[k]}
    assert changed <= {key}


@pytest.mark.parametrize("key,value", CASES_INVALID, ids=[f"{k}={v!r}" for k, v in CASES_INVALID])
def test_invalid_values_rejected_naming_key_and_value(key, value):
    with pytest.raises(InvalidConfigError) as caught:
        LogConfig.from_properties({key: value})
    error = caught.value
    assert isinstance(error, ValueError) and isinstance(error, RequestError)
    message = str(error)
    assert key in message
    assert repr(value) in message or str(value) in message, message


def test_int_and_string_forms_are_equal():
    for key, values in VALID.items():
        for given, effective in values:
            if isinstance(given, (int, float)) and not isinstance(given, bool):
                assert (LogConfig.from_properties({key: str(given)}).to_properties()[key]
                        == LogConfig.from_properties({key: given}).to_properties()[key] == effective)


@pytest.mark.parametrize("key", ["segment.byte", "retention.hours", "log.segment.bytes", "", "SEGMENT.BYTES"])
def test_unknown_topic_key_rejected(key):
    with pytest.raises(InvalidConfigError) as caught:
        LogConfig.from_properties({key: 1})
    assert repr(key) in str(caught.value)


def test_config_must_be_a_mapping():
    with pytest.raises(TypeError, match="segment.bytes=1"):
        LogConfig.from_properties(["segment.bytes=1"])


def test_compaction_lag_order():
    assert LogConfig.from_properties({"min.compaction.lag.ms": 5, "max.compaction.lag.ms": 5}).min_compaction_lag_ms == 5
    with pytest.raises(InvalidConfigError, match="min.compaction.lag.ms"):
        LogConfig.from_properties({"min.compaction.lag.ms": 2000, "max.compaction.lag.ms": "1000"})
    with pytest.raises(InvalidConfigError, match="max.compaction.lag.ms"):
        LogConfig.from_properties({"max.compaction.lag.ms": 0})


# --- through the store ------------------------------------------------------------------------------


def partition_dirs(data_dir) -> list[str]:
    return sorted(name for name in os.listdir(data_dir) if os.path.isdir(os.path.join(data_dir, name)))


@pytest.mark.parametrize("key,value", [("segment.bytes", "abc"), ("cleanup.policy", "tiered"),
                                       ("retention.ms", -5), ("no.such.key", 1),
                                       ("min.cleanable.dirty.ratio", 3)])
def test_create_topic_with_bad_config_creates_nothing(tmp_path, key, value):
    data = tmp_path / "data"
    with LogManager([str(data)]) as store:
        with pytest.raises(InvalidConfigError) as caught:
            store.create_topic("t", 2, config={"segment.bytes": 4096, key: value})
        assert key in str(caught.value)
        assert store.topics() == []
        assert partition_dirs(data) == []
        with pytest.raises(UnknownTopicOrPartitionError):
            store.partitions("t")
        store.create_topic("t", 2, config={"segment.bytes": 4096})  # the name is still free
        assert store.topic_overrides("t") == {"segment.bytes": "4096"}


def test_create_topic_normalises_and_persists_overrides(tmp_path):
    data = str(tmp_path / "data")
    config = {"segment.bytes": 8192, "cleanup.policy": ["delete", "compact"], "min.cleanable.dirty.ratio": 0.1,
              "retention.ms": "-1", "flush.messages": " 10 "}
    with LogManager([data]) as store:
        store.create_topic("t", config=config)
        expected = {"segment.bytes": "8192", "cleanup.policy": "compact,delete", "min.cleanable.dirty.ratio": "0.1",
                    "retention.ms": "-1", "flush.messages": "10"}
        assert store.topic_overrides("t") == expected
    with LogManager([data]) as store:
        assert store.topic_overrides("t") == expected
        effective = store.topic_config("t")
        assert (effective.segment_bytes, effective.cleanup_policy, effective.min_cleanable_dirty_ratio,
                effective.retention_ms, effective.flush_messages) == (8192, "compact,delete", 0.1, -1, 10)
        assert effective.compact and effective.delete


def test_alter_with_bad_value_changes_nothing(tmp_path):
    data = str(tmp_path / "data")
    with LogManager([data]) as store:
        store.create_topic("t", config={"max.message.bytes": 2000, "max.compaction.lag.ms": 1000})
        before = store.topic_overrides("t")
        for bad in ({"max.message.bytes": 100, "segment.bytes": "huge"},   # second key bad: first not applied
                    {"max.message.bytes": 100, "unknown.key": None},        # removal of an unknown key
                    {"min.compaction.lag.ms": 5000},                        # above the topic's max lag
                    {"cleanup.policy": None, "flush.ms": -7}):
            with pytest.raises(InvalidConfigError):
                store.alter_topic_config("t", bad)
            assert store.topic_overrides("t") == before
            assert store.get_log("t", 0).config.max_message_bytes == 2000
        with pytest.raises(TypeError):
            store.alter_topic_config("t", [("max.message.bytes", 5)])
    with LogManager([data]) as store:
        assert store.topic_overrides("t") == before


def test_compaction_lag_checked_against_store_defaults(tmp_path):
    data = str(tmp_path / "data")
    with LogManager([data], config={"log.cleaner.max.compaction.lag.ms": 1000}) as store:
        with pytest.raises(InvalidConfigError, match="min.compaction.lag.ms"):
            store.create_topic("t", config={"min.compaction.lag.ms": 2000})
        assert store.topics() == [] and partition_dirs(data) == []
        store.create_topic("t", config={"min.compaction.lag.ms": 2000, "max.compaction.lag.ms": 3000})
        assert store.topic_config("t").min_compaction_lag_ms == 2000


# --- broker-level settings --------------------------------------------------------------------------


def test_broker_synonyms_become_defaults_that_topics_override(tmp_path):
    data = str(tmp_path / "data")
    settings = {"log.segment.bytes": 4096, "log.retention.hours": 2, "log.cleanup.policy": "compact",
                "message.max.bytes": "3000", "log.flush.interval.messages": 1000,
                "log.cleaner.min.cleanable.ratio": "0.3", "log.cleaner.delete.retention.ms": 5,
                "log.cleaner.min.compaction.lag.ms": 7, "log.index.interval.bytes": 100,
                "log.index.size.max.bytes": 8192, "log.roll.ms": 99999, "log.retention.bytes": 10**9,
                "log.flush.interval.ms": 12345}
    with LogManager([data], config=settings) as store:
        store.create_topic("plain")
        store.create_topic("custom", config={"segment.bytes": 100_000, "cleanup.policy": "delete"})
        plain = store.topic_config("plain")
        assert (plain.segment_bytes, plain.retention_ms, plain.cleanup_policy, plain.max_message_bytes,
                plain.flush_messages, plain.min_cleanable_dirty_ratio, plain.delete_retention_ms,
                plain.min_compaction_lag_ms, plain.index_interval_bytes, plain.segment_index_bytes,
                plain.segment_ms, plain.retention_bytes, plain.flush_ms) == (
            4096, 2 * 3600 * 1000, "compact", 3000, 1000, 0.3, 5, 7, 100, 8192, 99999, 10**9, 12345)
        custom = store.topic_config("custom")
        assert (custom.segment_bytes, custom.cleanup_policy, custom.retention_ms) == (100_000, "delete", 2 * 3600 * 1000)
        assert store.topic_overrides("plain") == {}
        # The defaults act: max.message.bytes 3000 from the store rejects a 5000-byte record on "plain".
        with pytest.raises(RecordTooLargeError):
            store.get_log("plain", 0).append([Record(b"k", b"x" * 5000)])
        # and segment.bytes 4096 makes "plain" roll.
        log = store.get_log("plain", 0)
        for i in range(20):
            log.append([Record(b"k%d" % i, b"v" * 500)])
        assert len(log.segments) >= 3
    # Only overrides are persisted: reopening with other store settings changes the defaults.
    with open(os.path.join(data, "topics.json")) as handle:
        text = handle.read()
    assert "4096" not in text and '"compact"' not in text
    with LogManager([data], config={"log.segment.bytes": 50_000}) as store:
        assert store.topic_config("plain").segment_bytes == 50_000
        assert store.topic_config("plain").cleanup_policy == "delete"
        assert store.topic_config("custom").segment_bytes == 100_000


def test_broker_time_units_precedence():
    hours = LogConfig.from_broker_properties({"log.retention.hours": 3})
    assert hours.retention_ms == 3 * 3600 * 1000
    minutes = LogConfig.from_broker_properties({"log.retention.hours": 3, "log.retention.minutes": "5"})
    assert minutes.retention_ms == 5 * 60 * 1000
    ms = LogConfig.from_broker_properties({"log.retention.hours": 3, "log.retention.minutes": 5,
                                           "log.retention.ms": 42})
    assert ms.retention_ms == 42
    assert LogConfig.from_broker_properties({"log.retention.hours": -1}).retention_ms == -1
    assert LogConfig.from_broker_properties({"log.roll.hours": 1}).segment_ms == 3600 * 1000
    with pytest.raises(InvalidConfigError, match="log.retention.hours"):
        LogConfig.from_broker_properties({"log.retention.hours": "two"})


@pytest.mark.parametrize("setting", ["log.segment.byte", "no.such.setting", "segment.bytes", "retention.ms"])
def test_unknown_store_setting_rejected_before_touching_disk(tmp_path, setting):
    data = tmp_path / "data"
    with pytest.raises(InvalidConfigError) as caught:
        LogManager([str(data)], config={setting: 1})
    assert repr(setting) in str(caught.value)
    assert not data.exists()


def test_bad_store_setting_value_rejected(tmp_path):
    data = tmp_path / "data"
    with pytest.raises(InvalidConfigError) as caught:
        LogManager([str(data)], config={"log.segment.bytes": "big"})
    assert "'big'" in str(caught.value)
    assert not data.exists()


def test_bad_store_setting_value_names_the_broker_key(tmp_path):
    with pytest.raises(InvalidConfigError) as caught:
        LogManager([str(tmp_path / "data")], config={"log.segment.bytes": "big"})
    assert "log.segment.bytes" in str(caught.value)


# --- topic names ------------------------------------------------------------------------------------

VALID_NAMES = ["a", "Z", "0", "orders", "orders.v2", "my_topic-1", "-", "_", "...", ".hidden", "a..b",
               "x" * 249, "A" * 100 + "." + "9" * 148]
INVALID_NAMES = ["x" * 250, ".", "..", "", "a/b", "../evil", "/abs", "a b", " a", "a\tb", "a\nb", "a\x00b",
                 "caf\u00e9", "a:b", "a*b", "a\\b", "~", "x" * 1000]
NON_STR_NAMES = [None, b"abc", 5, ["a"], ("a",)]


def tree(path) -> list[str]:
    found = []
    for root, dirs, files in os.walk(path):
        found += [os.path.relpath(os.path.join(root, name), path) for name in dirs + files]
    return sorted(found)


@pytest.mark.parametrize("name", VALID_NAMES, ids=lambda n: f"len{len(n)}:{n[:12]}")
def test_valid_topic_names(tmp_path, name):
    data = str(tmp_path / "data")
    with LogManager([data]) as store:
        store.create_topic(name, 2)
        assert store.topics() == [name]
        assert partition_dirs(data) == sorted([f"{name}-0", f"{name}-1"])
        store.append(name, [Record(b"k", b"v")], partition=1)
    with LogManager([data]) as store:
        assert store.topics() == [name] and store.problems == [] and store.missing_partitions == []
        assert store.read(name, 1, 0)[0].value == b"v"


@pytest.mark.parametrize("name", INVALID_NAMES + NON_STR_NAMES, ids=repr)
def test_invalid_topic_names_rejected_and_nothing_created(tmp_path, name):
    data = tmp_path / "root" / "data"
    with LogManager([str(data)]) as store:
        store.create_topic("existing")
        before = tree(tmp_path)
        with pytest.raises(InvalidTopicError) as caught:
            store.create_topic(name, 1)
        assert isinstance(caught.value, ValueError) and isinstance(caught.value, RequestError)
        assert repr(name)[:40] in str(caught.value) or repr(name)[:40].strip("'") in str(caught.value)
        assert tree(tmp_path) == before
        assert store.topics() == ["existing"]
        assert not os.path.exists("/abs-0") and not (tmp_path / "root" / "evil-0").exists()
    with open(data / "topics.json") as handle:
        text = handle.read()
    assert set(json.loads(text[: len(text) // 2])["topics"]) == {"existing"}  # the first of its two copies


def test_similar_names_do_not_collide(tmp_path):
    data = str(tmp_path / "data")
    with LogManager([data]) as store:
        store.create_topic("a", 12)   # a-0 .. a-11
        store.create_topic("a-1", 2)  # a-1-0, a-1-1: never confused with partition 1 of "a"
        store.create_topic("a-11", 1)
        store.append("a", [Record(b"k", b"of a")], partition=1)
        store.append("a-1", [Record(b"k", b"of a-1")], partition=0)
    with LogManager([data]) as store:
        assert store.topics() == ["a", "a-1", "a-11"]
        assert store.problems == [] and store.missing_partitions == []
        assert [r.value for r in store.read("a", 1, 0)] == [b"of a"]
        assert [r.value for r in store.read("a-1", 0, 0)] == [b"of a-1"]
        assert store.read("a-11", 0, 0) == []
