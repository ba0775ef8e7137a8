"""A topic's key placement is recorded with it in ``topics.json`` (version 3): a new topic places keys
by Kafka's murmur2, and a topic created before placements were recorded (a ``topics.json`` of version
2 or 1, without the field) keeps crc32, so none of its keys moves; ``topics describe`` shows it as
``logstore.key.placement``, and nothing alters it."""

from __future__ import annotations

import json
import zlib

import pytest
from click.testing import CliRunner

from logstore import LogManager, Record
from logstore.cli.main import main
from logstore.errors import InvalidConfigError
from logstore.manager.topics import TOPICS_FILE, murmur2, partition_for_key

KEYS = [b"alice", b"bob"] + [b"k%d" % i for i in range(60)]


def rewrite_as_version_2(data_dir) -> None:
    """``topics.json`` as the previous version wrote it: two copies of a version-2 object whose topics
    have no placement."""
    path = data_dir / TOPICS_FILE
    text = path.read_bytes()
    body = json.loads(text[: len(text) // 2])
    del body["crc32"]
    body["version"] = 2
    for entry in body["topics"].values():
        del entry["placement"]
    body["crc32"] = zlib.crc32(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())
    copy = (json.dumps(body, sort_keys=True, indent=2) + "\n").encode()
    path.write_bytes(copy + copy)


def describe(data_dir, topic) -> dict:
    result = CliRunner().invoke(main, ["--dir", str(data_dir), "topics", "describe", topic])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_a_topic_from_before_keeps_crc32_and_a_new_one_is_placed_as_kafka_places(tmp_path):
    data = tmp_path / "data"
    with LogManager([str(data)]) as store:
        store.create_topic("old", 4)
    rewrite_as_version_2(data)
    with LogManager([str(data)]) as store:
        assert store.topic_placement("old") == "crc32"
        appended = store.append("old", [Record(key, b"v") for key in KEYS])
        assert sorted(appended) == sorted({zlib.crc32(key) % 4 for key in KEYS})
        store.create_topic("new", 4)
        assert store.topic_placement("new") == "murmur2"
        store.append("new", [Record(key, b"v") for key in KEYS])
        for topic, place in (("old", lambda key: zlib.crc32(key) % 4),
                             ("new", lambda key: (murmur2(key) & 0x7FFFFFFF) % 4)):
            for partition in range(4):
                keys = [record.key for record in store.get_log(topic, partition).iter_records()]
                assert keys and all(place(key) == partition for key in keys), (topic, partition)
        # b"alice" is one of the keys the two placements disagree on (partition 3 by crc32, 1 by Kafka's).
        assert (partition_for_key(b"alice", 4, "crc32"), partition_for_key(b"alice", 4)) == (3, 1)
    # The next write recorded the placements: the file is version 3 and "old" stays crc32 for good.
    text = (data / TOPICS_FILE).read_bytes()
    body = json.loads(text[: len(text) // 2])
    assert body["version"] == 3
    assert {name: entry["placement"] for name, entry in body["topics"].items()} == {"old": "crc32", "new": "murmur2"}
    with LogManager([str(data)], read_only=True) as store:
        assert store.topic_placement("old") == "crc32"
    old, new = describe(data, "old"), describe(data, "new")
    assert old["config"]["logstore.key.placement"] == old["overrides"]["logstore.key.placement"] == "crc32"
    assert new["config"]["logstore.key.placement"] == "murmur2" and "logstore.key.placement" not in new["overrides"]


def test_the_placement_is_chosen_at_creation_only(tmp_path):
    with LogManager([str(tmp_path)]) as store:
        store.create_topic("copy", 3, {"logstore.key.placement": "crc32", "retention.ms": 1000})
        assert store.topic_placement("copy") == "crc32" and store.topic_overrides("copy") == {"retention.ms": "1000"}
        with pytest.raises(ValueError, match="logstore.key.placement must be one of murmur2, crc32, got 'fnv'"):
            store.create_topic("bad", 3, {"logstore.key.placement": "fnv"})
        assert "bad" not in store.topics()
        with pytest.raises(InvalidConfigError, match="read-only"):
            store.alter_topic_config("copy", {"logstore.key.placement": "murmur2"})
        assert store.topic_placement("copy") == "crc32"
    result = CliRunner().invoke(main, ["--dir", str(tmp_path), "topics", "alter", "copy", "--config",
                                       "logstore.key.placement=murmur2"])
    assert result.exit_code != 0 and "read-only" in result.output and "Traceback" not in result.output


def test_a_version_3_entry_without_a_placement_is_damage(tmp_path):
    with LogManager([str(tmp_path)]) as store:
        store.create_topic("t", 2)
    path = tmp_path / TOPICS_FILE
    text = path.read_bytes()
    body = json.loads(text[: len(text) // 2])
    del body["crc32"], body["topics"]["t"]["placement"]
    body["crc32"] = zlib.crc32(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())
    copy = (json.dumps(body, sort_keys=True, indent=2) + "\n").encode()
    path.write_bytes(copy + copy)
    with pytest.raises(Exception, match="topic metadata .* is damaged"):
        LogManager([str(tmp_path)])
