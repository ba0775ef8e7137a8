"""Real admin clients against the server: CreateTopics (configs, validate-only, replication factor,
an existing name), DescribeConfigs, IncrementalAlterConfigs, DeleteTopics, DeleteRecords and the
topic list, each checked with the client itself, with the other clients and, on our server, in the
store (its topics, partitions and config overrides).

Admin clients: kafka-python, confluent-kafka, aiokafka and kafkajs (kcat has none). Only
kafka-python and confluent-kafka send IncrementalAlterConfigs, the one alter our server speaks.
"""

import pytest
from conftest import tansu_gets_wrong

from clients import EARLIEST, ClientError
from clients.checks import now_ms
from clients.registry import ADMINS, CONSUMERS, DRIVER_CLASSES, runnable
from logstore import Record

pytestmark = pytest.mark.kafka_clients

INCREMENTAL = [name for name in ADMINS if DRIVER_CLASSES[name].incremental_alter]
# Keys every DescribeConfigs answer should carry (a real entry list, not an empty one).
CORE_KEYS = ("cleanup.policy", "retention.ms", "max.message.bytes", "message.timestamp.type")


def listed_by_everyone(broker, driver_factory, topic) -> dict[str, bool]:
    """Whether each client's topic list (Metadata) has ``topic``."""
    return {name: topic in driver_factory(name).list_topics(broker.bootstrap_servers)
            for name in runnable(DRIVER_CLASSES)}


@pytest.mark.parametrize("driver", ADMINS, indirect=True)
def test_create_topic_with_configs(broker, driver, driver_factory, topic):
    config = {"cleanup.policy": "compact", "retention.ms": "123456789"}
    driver.create_topic(broker.bootstrap_servers, topic, partitions=3, config=config)

    assert all(listed_by_everyone(broker, driver_factory, topic).values())
    described = driver.describe_configs(broker.bootstrap_servers, topic)
    assert {key: described.get(key) for key in config} == config
    # The partitions exist: a record produced to the last one is read back from it.
    sender = driver_factory("confluent-kafka")
    assert sender.produce(broker.bootstrap_servers, topic, [Record(b"k", b"v", (), now_ms())], partition=2) == [(2, 0)]
    with pytest.raises(ClientError):  # and there is no fourth
        sender.produce(broker.bootstrap_servers, topic, [Record(b"k", b"v")], partition=3, timeout_s=5)
    if broker.store is not None:
        assert broker.store.partitions(topic) == 3
        assert broker.store.topic_overrides(topic) == config


@tansu_gets_wrong("DescribeConfigs answers only a topic's overrides, no defaults (librdkafka test 0092's finding)")
@pytest.mark.parametrize("driver", ADMINS, indirect=True)
def test_describe_configs_lists_real_entries(broker, driver, topic):
    """A topic without overrides still has its effective config described: Kafka's keys with the
    values the store applies (not an empty list, which breaks librdkafka's own tests)."""
    broker.create_topic(topic, config={"retention.bytes": "99999999"})
    described = driver.describe_configs(broker.bootstrap_servers, topic)
    assert set(CORE_KEYS) <= set(described), f"missing: {set(CORE_KEYS) - set(described)}"
    assert described["retention.bytes"] == "99999999"
    assert described["cleanup.policy"] == "delete"
    if broker.store is not None:
        effective = {key: str(value) for key, value in broker.store.topic_config(topic).to_properties().items()}
        assert {key: described[key] for key in described if key in effective} == \
               {key: effective[key] for key in described if key in effective}


@pytest.mark.parametrize("driver", INCREMENTAL, indirect=True)
def test_incremental_alter_configs(broker, driver, topic):
    broker.create_topic(topic, config={"cleanup.policy": "compact", "retention.ms": "1000000"})
    driver.alter_configs(broker.bootstrap_servers, topic, set={"retention.ms": "2000000", "segment.ms": "3600000"},
                         delete=["cleanup.policy"])
    described = driver.describe_configs(broker.bootstrap_servers, topic)
    assert described["retention.ms"] == "2000000"
    assert described["segment.ms"] == "3600000"
    # A deleted override falls back to the default, so it is either absent (Tansu lists
    # overrides only) or the default value.
    assert described.get("cleanup.policy", "delete") == "delete"
    if broker.store is not None:
        assert broker.store.topic_overrides(topic) == {"retention.ms": "2000000", "segment.ms": "3600000"}


@tansu_gets_wrong("validate_only creates the topic")
@pytest.mark.parametrize("driver", ADMINS, indirect=True)
def test_create_validate_only_creates_nothing(broker, driver, driver_factory, topic):
    driver.create_topic(broker.bootstrap_servers, topic, partitions=2, config={"cleanup.policy": "compact"},
                        validate_only=True)
    assert not any(listed_by_everyone(broker, driver_factory, topic).values())
    if broker.store is not None:
        assert topic not in broker.store.topics()
    # Validation is real: what a create would refuse, validate-only refuses too.
    with pytest.raises(ClientError) as refused:
        driver.create_topic(broker.bootstrap_servers, topic, replication_factor=3, validate_only=True)
    assert refused.value.error == "INVALID_REPLICATION_FACTOR"


@tansu_gets_wrong("a replication factor of 3 on its single broker is accepted")
@pytest.mark.parametrize("driver", ADMINS, indirect=True)
def test_create_with_replication_factor_3_fails(broker, driver, driver_factory, topic):
    with pytest.raises(ClientError) as refused:
        driver.create_topic(broker.bootstrap_servers, topic, replication_factor=3)
    assert refused.value.error == "INVALID_REPLICATION_FACTOR"
    assert not any(listed_by_everyone(broker, driver_factory, topic).values())


@pytest.mark.parametrize("driver", ADMINS, indirect=True)
def test_create_existing_topic_fails(broker, driver, topic):
    broker.create_topic(topic)
    with pytest.raises(ClientError) as refused:
        driver.create_topic(broker.bootstrap_servers, topic)
    assert refused.value.error == "TOPIC_ALREADY_EXISTS"


@pytest.mark.parametrize("driver", ADMINS, indirect=True)
def test_delete_topic(broker, driver, driver_factory, topic):
    broker.create_topic(topic, partitions=2)
    broker.seed(topic, [Record(b"k", b"v", (), now_ms())])
    driver.delete_topic(broker.bootstrap_servers, topic)
    assert not any(listed_by_everyone(broker, driver_factory, topic).values())
    if broker.store is not None:
        assert topic not in broker.store.topics()
    with pytest.raises(ClientError) as refused:
        driver.delete_topic(broker.bootstrap_servers, topic)
    assert refused.value.error == "UNKNOWN_TOPIC_OR_PARTITION"


@tansu_gets_wrong("DeleteRecords is not implemented by the memory engine: the broker task panics "
                  "(dynostore.rs 'not yet implemented') and drops the connection")
@pytest.mark.parametrize("driver", ADMINS, indirect=True)
def test_delete_records_moves_the_log_start_offset(broker, driver, driver_factory, topic):
    """After DeleteRecords before offset 4, the low watermark is 4 for every client, and every
    consumer starting from the earliest offset starts there."""
    broker.create_topic(topic)
    base = now_ms() - 60_000
    records = broker.seed(topic, [Record(f"k{i}".encode(), f"v{i}".encode(), (), base + i) for i in range(10)])
    assert driver.delete_records(broker.bootstrap_servers, topic, 0, 4) == 4
    for name in runnable(DRIVER_CLASSES):
        assert driver_factory(name).list_offset(broker.bootstrap_servers, topic, 0, EARLIEST) == 4, name
    for name in CONSUMERS:
        assert driver_factory(name).consume(broker.bootstrap_servers, topic, 0, start=EARLIEST, count=6) == \
            records[4:], name
    if broker.store is not None:
        assert broker.store.get_log(topic, 0).log_start_offset == 4
        assert broker.stored(topic, 0, offset=4) == records[4:]
    # Beyond the high watermark is out of range.
    with pytest.raises(ClientError) as refused:
        driver.delete_records(broker.bootstrap_servers, topic, 0, 11)
    assert refused.value.error == "OFFSET_OUT_OF_RANGE"


def test_every_client_lists_exactly_the_topics_of_a_fresh_store(fresh_broker, driver_factory):
    """Metadata for all topics: a fresh broker with two topics lists those two to every client
    (internal topics, named __*, aside)."""
    names = {fresh_broker.create_topic("orders", partitions=2), fresh_broker.create_topic("audit.log")}
    for name in runnable(DRIVER_CLASSES):
        listed = driver_factory(name).list_topics(fresh_broker.bootstrap_servers)
        assert {topic for topic in listed if not topic.startswith("__")} == names, name
