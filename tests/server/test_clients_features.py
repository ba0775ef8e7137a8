"""Client features the server must meet beyond plain produce and consume: idempotent producers
(kafka-python's default, and the others when asked), transactional producers' start
(init_transactions: FindCoordinator and InitProducerId with a transactional id), and the single
broker as kcat's metadata shows it.
"""

import time

import pytest
from conftest import logstore_only, tansu_gets_wrong
from kafka import KafkaProducer

from clients.checks import assert_same, expected_records, now_ms
from clients.registry import DRIVER_CLASSES
from logstore import Record

pytestmark = pytest.mark.kafka_clients

# Idempotence per client: kafka-python's default (KIP-679), the others' opt-in settings.
IDEMPOTENT = {
    "kafka-python": None,
    "confluent-kafka": {"enable.idempotence": True},
    "aiokafka": {"enable_idempotence": True},
}


def numbered(count: int, base_ms: int) -> list[Record]:
    # 1 KiB values: 100 records make several batches (kafka-python's batch.size is 16 KiB), which
    # idempotent producers send up to 5 in flight with consecutive sequence numbers.
    return [Record(f"k{i}".encode(), f"{i:06d}".encode() * 170, [("seq", str(i).encode())], base_ms + i)
            for i in range(count)]


@pytest.mark.parametrize("driver", [
    "kafka-python", "confluent-kafka",
    # aiokafka speaks InitProducerId v0 only
    pytest.param("aiokafka", marks=tansu_gets_wrong("InitProducerId v0 is answered with UNKNOWN_SERVER_ERROR (-1)")),
], indirect=True)
def test_idempotent_producer_writes_each_record_once(broker, driver, topic):
    """InitProducerId, then batches with a producer id and sequence numbers: accepted, in order,
    each record exactly once."""
    broker.create_topic(topic)
    records = numbered(100, now_ms() - 60_000)
    produced = driver.produce(broker.bootstrap_servers, topic, records, acks=-1, partition=0,
                              config=IDEMPOTENT[driver.name])
    assert produced == [(0, i) for i in range(100)]
    assert_same(broker.read_back(topic, 100), expected_records(records, produced))


def test_kafka_python_default_producer_is_idempotent(broker, topic):
    """kafka-python 3.x's default producer gets a producer id from the server (InitProducerId) and
    writes every record once."""
    broker.create_topic(topic)
    records = numbered(50, now_ms() - 60_000)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, max_block_ms=20_000)
    try:
        assert producer.config["enable_idempotence"] is True  # the default this test is about
        futures = [producer.send(topic, key=r.key, value=r.value, headers=list(r.headers), partition=0,
                                 timestamp_ms=r.timestamp_ms) for r in records]
        producer.flush(timeout=20)
        offsets = [future.get(timeout=20).offset for future in futures]
        assert producer._transaction_manager.producer_id_and_epoch.producer_id >= 0
    finally:
        producer.close(timeout=5)
    assert offsets == list(range(50))
    assert_same(broker.read_back(topic, 50), expected_records(records, [(0, o) for o in offsets]))


@pytest.mark.parametrize("driver", ["kafka-python", "confluent-kafka"], indirect=True)
def test_transactional_producer_starts(broker, driver):
    """A transactional producer's init_transactions finds the transaction coordinator and gets its
    producer id and epoch, within the time limit; a second instance of the same transactional id
    starts too (it fences the first)."""
    transactional_id = f"tx-{now_ms()}"
    driver.init_transactions(broker.bootstrap_servers, transactional_id, timeout_s=20)
    driver.init_transactions(broker.bootstrap_servers, transactional_id, timeout_s=20)


@logstore_only("reads the markers from our store")
def test_kcat_transactional_produce_commits(broker, driver_factory, topic):
    """kcat with a transactional.id produces in a transaction (librdkafka's init_transactions,
    begin, produce, commit): the records are stored, followed by the COMMIT marker, and a
    read_committed reader sees them all."""
    broker.create_topic(topic)
    kcat = driver_factory("kcat")
    records = [Record(b"k%d" % i, b"v%d" % i) for i in range(3)]
    kcat.produce(broker.bootstrap_servers, topic, records, partition=0, timeout_s=20,
                 config={"transactional.id": f"kcat-tx-{now_ms()}"})
    log = broker.store.get_log(topic, 0)
    deadline = now_ms() + 20_000
    while log.last_stable_offset < log.log_end_offset and now_ms() < deadline:  # the markers follow EndTxn
        time.sleep(0.02)
    markers = [marker for _batch, _producer, marker in log.iter_batches_with_control() if marker is not None]
    assert [marker.commit for marker in markers] == [True]
    assert [record.value for record in log.read(0, isolation="read_committed")] == [b"v0", b"v1", b"v2"]


def test_kcat_metadata_shows_one_broker_leading_every_partition(broker, driver_factory, topic):
    """Metadata (kcat -L): one broker, the controller, the leader of every partition with
    replicas = ISR = [itself], at the address clients were given."""
    broker.create_topic(topic, partitions=3)
    metadata = driver_factory("kcat").metadata(broker.bootstrap_servers, topic)
    [node] = metadata["brokers"]
    assert node["name"] == broker.bootstrap_servers
    assert metadata["controllerid"] == node["id"]
    [described] = metadata["topics"]
    assert described["topic"] == topic and "error" not in described
    assert sorted(p["partition"] for p in described["partitions"]) == [0, 1, 2]
    for partition in described["partitions"]:
        assert partition["leader"] == node["id"]
        assert [r["id"] for r in partition["replicas"]] == [node["id"]]
        assert [r["id"] for r in partition["isrs"]] == [node["id"]]


@pytest.mark.parametrize("producer", list(DRIVER_CLASSES))
def test_producing_to_an_unknown_topic_creates_it(broker, driver_factory, producer, topic):
    """Metadata with auto-creation on (producers ask for it): producing to a topic nobody created
    creates it, on our server with its default of one partition (``num.partitions``: 1)."""
    sender = driver_factory(producer)
    record = Record(b"k", b"v", (), now_ms() - 1000 if sender.sets_timestamps else None)
    assert sender.produce(broker.bootstrap_servers, topic, [record], partition=0, timeout_s=20) == [(0, 0)]
    assert topic in driver_factory("confluent-kafka").list_topics(broker.bootstrap_servers)
    if broker.store is not None:
        assert broker.store.partitions(topic) == 1
        [stored] = broker.stored(topic)
        assert stored[:4] == (0, b"k", b"v", ())
