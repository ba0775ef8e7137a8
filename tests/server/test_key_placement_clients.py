"""One key placement per topic, whatever writes the key: the same keys written through every path we
ship (``store.append``, the local CLI, our client's producer, ``--bootstrap-server append``,
``mirror``) and through each real client (kafka-python, aiokafka, kafkajs, confluent-kafka and kcat
with librdkafka's ``partitioner=murmur2_random``) are each found in one partition of the topic.

A topic placed by crc32 (created by an earlier version, kept so its keys do not move) is written by
our paths only: Kafka's clients place by murmur2 and cannot be told otherwise (the engine guide, docs/guide/engine.md, says so).
Our client learns the placement from the broker (the read-only topic config
``logstore.key.placement`` that DescribeConfigs shows). The Spark writer's part is in
``tests/spark/jvm/test_spark_write.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess

import pytest
from click.testing import CliRunner

from logstore import LogManager, Record
from logstore.cli.main import main
from logstore.client.admin import BrokerAdmin
from logstore.client.mirror import StoreEnd
from logstore.client.mirror import mirror as run_mirror
from logstore.client.producer import Producer
from logstore.manager.topics import PLACEMENT_CONFIG, partition_for_key
from logstore.server import KafkaServer

import external_tools

pytestmark = pytest.mark.kafka_clients

PARTITIONS = 4
KEYS = [b"alice", b"bob", b"carol"] + [b"user-%d" % i for i in range(40)]
NEW, LEGACY = "placed", "legacy"
JS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "clients", "js")


def keys_by_partition(store: LogManager, topic: str) -> dict[bytes, set[int]]:
    found: dict[bytes, set[int]] = {}
    for partition in range(store.partitions(topic)):
        for record in store.get_log(topic, partition).iter_records():
            found.setdefault(record.key, set()).add(partition)
    return found


def values_of(store: LogManager, topic: str) -> set[bytes]:
    return {record.value for partition in range(store.partitions(topic))
            for record in store.get_log(topic, partition).iter_records()}


def assert_one_partition_per_key(store: LogManager, topic: str, placement: str, paths: list[str]) -> None:
    """Every key in exactly one partition, the one ``placement`` gives, and a record from each path."""
    found = keys_by_partition(store, topic)
    assert sorted(found) == sorted(KEYS)
    split = {key: partitions for key, partitions in found.items() if len(partitions) != 1}
    assert not split, f"{topic}: keys in several partitions: {split}"
    assert {key: partitions.pop() for key, partitions in found.items()} == {
        key: partition_for_key(key, PARTITIONS, placement) for key in KEYS}
    assert values_of(store, topic) == {b"%s:%s" % (path.encode(), key) for path in paths for key in KEYS}


def local_cli(data: str, topic: str, path: str) -> None:
    lines = "".join(json.dumps({"key": key.decode(), "value": f"{path}:{key.decode()}"}) + "\n" for key in KEYS)
    result = CliRunner().invoke(main, ["--dir", data, "append", topic, "--input-format", "jsonl"], input=lines)
    assert result.exit_code == 0, result.output


def broker_cli(bootstrap: str, topic: str, path: str) -> None:
    lines = "".join(json.dumps({"key": key.decode(), "value": f"{path}:{key.decode()}"}) + "\n" for key in KEYS)
    result = CliRunner().invoke(main, ["--bootstrap-server", bootstrap, "append", topic, "--input-format", "jsonl"],
                                input=lines)
    assert result.exit_code == 0, result.output


def our_producer(bootstrap: str, topic: str, path: str) -> None:
    with Producer(bootstrap_servers=bootstrap, linger_ms=0) as producer:
        futures = [producer.send(topic, b"%s:%s" % (path.encode(), key), key=key) for key in KEYS]
        producer.flush(30)
        for future in futures:
            future.result(0)


def kafka_python(bootstrap: str, topic: str, path: str) -> None:
    from kafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        futures = [producer.send(topic, key=key, value=b"%s:%s" % (path.encode(), key)) for key in KEYS]
        producer.flush(30)
        for future in futures:
            future.get(10)
    finally:
        producer.close(10)


def aiokafka(bootstrap: str, topic: str, path: str) -> None:
    from aiokafka import AIOKafkaProducer

    async def produce():
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await producer.start()
        try:
            for key in KEYS:
                await producer.send_and_wait(topic, key=key, value=b"%s:%s" % (path.encode(), key))
        finally:
            await producer.stop()
    asyncio.run(asyncio.wait_for(produce(), 60))


def confluent(bootstrap: str, topic: str, path: str) -> None:
    from confluent_kafka import Producer as ConfluentProducer
    failures = []
    producer = ConfluentProducer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "acks": "all"})
    for key in KEYS:
        producer.produce(topic, key=key, value=b"%s:%s" % (path.encode(), key),
                         on_delivery=lambda error, _msg: error and failures.append(error))
    assert producer.flush(30) == 0 and not failures, failures


def kcat(bootstrap: str, topic: str, path: str) -> None:
    executable = external_tools.require("kcat")
    lines = b"".join(b"%s\t%s:%s\n" % (key, path.encode(), key) for key in KEYS)
    subprocess.run([executable, "-b", bootstrap, "-P", "-t", topic, "-K", "\t", "-X", "partitioner=murmur2_random",
                    "-X", "acks=all"], input=lines, check=True, timeout=60, capture_output=True)


KAFKAJS_SCRIPT = """
const { Kafka, logLevel } = require('kafkajs')
const [bootstrap, topic, path, keys] = [process.argv[1], process.argv[2], process.argv[3], JSON.parse(process.argv[4])]
const producer = new Kafka({ clientId: 'placement', brokers: [bootstrap], logLevel: logLevel.NOTHING }).producer()
producer.connect()
  .then(() => producer.send({ topic, acks: -1, messages: keys.map(k => ({ key: k, value: path + ':' + k })) }))
  .then(() => producer.disconnect())
  .catch(e => { console.error(e); process.exit(1) })
"""


def kafkajs(bootstrap: str, topic: str, path: str) -> None:
    node = external_tools.require("node")
    external_tools.require("kafkajs")
    subprocess.run([node, "-e", KAFKAJS_SCRIPT, bootstrap, topic, path, json.dumps([key.decode() for key in KEYS])],
                   cwd=JS_DIR, check=True, timeout=60, capture_output=True,
                   env=dict(os.environ, NODE_PATH=str(external_tools.node_modules())))


REAL_CLIENTS = {"kafka-python": kafka_python, "aiokafka": aiokafka, "confluent-kafka": confluent, "kcat": kcat,
                "kafkajs": kafkajs}


@pytest.mark.needs_tools("kcat", "kafkajs")
def test_every_path_and_every_client_puts_a_key_in_one_partition(tmp_path):
    data, copy = str(tmp_path / "data"), str(tmp_path / "mirrored")
    with LogManager([data]) as store:
        store.create_topic(NEW, PARTITIONS, {"cleanup.policy": "compact"})
        # What a topic of an earlier version has (tests/manager/test_key_placement.py makes one from
        # a topics.json without placements; the store then treats it exactly so).
        store.create_topic(LEGACY, PARTITIONS, {PLACEMENT_CONFIG: "crc32"})
        for topic in (NEW, LEGACY):
            store.append(topic, [Record(key, b"store:" + key) for key in KEYS])
    for topic in (NEW, LEGACY):
        local_cli(data, topic, "cli")

    with LogManager([data]) as store, KafkaServer(store, listen="127.0.0.1:0") as server:
        bootstrap = server.bootstrap_servers
        with BrokerAdmin(bootstrap) as admin:  # what `topics describe --bootstrap-server` shows
            assert admin.describe_topic(NEW)["config"][PLACEMENT_CONFIG] == "murmur2"
            described = admin.describe_topic(LEGACY)
            assert described["config"][PLACEMENT_CONFIG] == described["overrides"][PLACEMENT_CONFIG] == "crc32"
        for topic in (NEW, LEGACY):
            our_producer(bootstrap, topic, "client")
            broker_cli(bootstrap, topic, "broker-cli")
        for name, produce in REAL_CLIENTS.items():
            produce(bootstrap, NEW, name)

    with LogManager([data], read_only=True) as store:
        assert_one_partition_per_key(store, NEW, "murmur2", ["store", "cli", "client", "broker-cli", *REAL_CLIENTS])
        assert_one_partition_per_key(store, LEGACY, "crc32", ["store", "cli", "client", "broker-cli"])

    # mirror keeps each record's partition and gives the copy the source's placement, so keys written
    # to the copy afterwards join their mirrored records.
    source, destination = StoreEnd(data, writable=False), StoreEnd(copy, writable=True)
    try:
        run_mirror(source, destination, [NEW, LEGACY])
    finally:
        source.close()
        destination.close()
    with LogManager([copy]) as store:
        assert store.topic_placement(NEW) == "murmur2" and store.topic_placement(LEGACY) == "crc32"
        for topic in (NEW, LEGACY):
            store.append(topic, [Record(key, b"after-mirror:" + key) for key in KEYS])
    with LogManager([copy], read_only=True) as store:
        assert_one_partition_per_key(store, NEW, "murmur2",
                                     ["store", "cli", "client", "broker-cli", *REAL_CLIENTS, "after-mirror"])
        assert_one_partition_per_key(store, LEGACY, "crc32", ["store", "cli", "client", "broker-cli", "after-mirror"])


def test_the_placement_is_read_only_over_the_wire_and_a_crc32_topic_can_be_created(tmp_path):
    """DescribeConfigs marks ``logstore.key.placement`` read-only; IncrementalAlterConfigs refuses it;
    CreateTopics takes it (what mirror sends for a crc32 topic) and refuses an unknown placement."""
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
    with LogManager([str(tmp_path / "data")]) as store, KafkaServer(store, listen="127.0.0.1:0") as server:
        with BrokerAdmin(server.bootstrap_servers) as admin:
            admin.create_topic("copy", 2, {PLACEMENT_CONFIG: "crc32"})
            assert store.topic_placement("copy") == "crc32"
            with pytest.raises(Exception, match="logstore.key.placement must be one of murmur2, crc32"):
                admin.create_topic("bad", 2, {PLACEMENT_CONFIG: "fnv"})
            assert "bad" not in store.topics()
            with pytest.raises(Exception, match="read-only"):
                admin.alter_topic_config("copy", {PLACEMENT_CONFIG: "murmur2"})
            assert store.topic_placement("copy") == "crc32"
        kafka_admin = KafkaAdminClient(bootstrap_servers=server.bootstrap_servers)
        try:
            response = kafka_admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "copy")],
                                                    config_filter="all")
        finally:
            kafka_admin.close()
        entry = response["topic"]["copy"][PLACEMENT_CONFIG]
        assert (entry["value"], entry["read_only"]) == ("crc32", True)
