"""confluent-kafka's AdminClient (librdkafka) against our server for what librdkafka's own suite
checks: CreateTopics with every ``compression.type``, ListConsumerGroups' group type (KIP-848's
``classic``), DescribeCluster, ListOffsets with ``OffsetSpec.max_timestamp()`` (KIP-734) and
IncrementalAlterConfigs of a broker resource (the admin test's ``sasl.kerberos.min.time.before.relogin``);
kafka-python's ``describe_cluster`` too."""

import uuid

import pytest

from logstore import Record
from logstore.server.protocol import errors
from wire_client import WireClient

pytestmark = pytest.mark.kafka_clients
admin = pytest.importorskip("confluent_kafka.admin")
confluent_kafka = pytest.importorskip("confluent_kafka")


def logstore_broker(broker):
    if broker.store is None:
        pytest.skip("checks our server's store")
    return broker


@pytest.fixture
def client(broker):
    return admin.AdminClient({"bootstrap.servers": broker.bootstrap_servers})


def name(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_create_topics_with_every_compression_type(broker, client):
    logstore_broker(broker)
    wanted = {name(f"codec-{codec}"): codec for codec in ("uncompressed", "producer", "gzip", "snappy", "lz4", "zstd")}
    futures = client.create_topics([admin.NewTopic(topic, 1, 1, config={"compression.type": codec,
                                                                         "delete.retention.ms": "900"})
                                    for topic, codec in wanted.items()])
    for future in futures.values():
        future.result(timeout=30)
    for topic, codec in wanted.items():
        assert broker.store.topic_config(topic).compression_type == codec
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers, "compression.type": "lz4",
                                         "linger.ms": 5})
    for topic in wanted:
        for i in range(10):
            producer.produce(topic, key=b"k%d" % i, value=b"v" * 100)
    assert producer.flush(30) == 0
    for topic in wanted:
        assert len(broker.store.get_log(topic, 0).read(0)) == 10


def test_list_consumer_groups_reports_the_classic_type(broker, client):
    group = name("group")
    member = WireClient(broker.bootstrap_servers)
    try:
        joined = member.call(11, 5, {"group_id": group, "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000,
                                     "member_id": "", "group_instance_id": "static-" + group,
                                     "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]})
        assert joined["error_code"] == errors.NONE
    finally:
        member.close()
    listed = client.list_consumer_groups(request_timeout=30).result(timeout=30)
    types = {listing.group_id: listing.type for listing in listed.valid}
    assert types[group] == confluent_kafka.ConsumerGroupType.CLASSIC
    only_consumer = client.list_consumer_groups(
        types={confluent_kafka.ConsumerGroupType.CONSUMER}, request_timeout=30).result(timeout=30)
    assert group not in {listing.group_id for listing in only_consumer.valid}


def test_describe_cluster(broker, client):
    described = client.describe_cluster(include_authorized_operations=True, request_timeout=30).result(timeout=30)
    host, port = broker.bootstrap_servers.split(":")
    assert [(node.host, node.port) for node in described.nodes] == [(host, int(port))]
    assert described.controller.id == described.nodes[0].id
    assert confluent_kafka.admin.AclOperation.DESCRIBE in described.authorized_operations


def test_list_offsets_max_timestamp(broker, client):
    topic = name("max-ts")
    broker.create_topic(topic)
    broker.seed(topic, [Record(b"k", b"v", (), stamp) for stamp in (1000, 9000, 3000)])
    partition = confluent_kafka.TopicPartition(topic, 0)
    found = client.list_offsets({partition: admin.OffsetSpec.max_timestamp()}, request_timeout=30)
    info = found[partition].result(timeout=30)
    assert (info.offset, info.timestamp) == (1, 9000)
    latest = client.list_offsets({partition: admin.OffsetSpec.latest()}, request_timeout=30)[partition].result(30)
    assert latest.offset == 3


def test_incremental_alter_configs_of_the_broker(broker, client):
    logstore_broker(broker)
    node = client.describe_cluster(request_timeout=30).result(timeout=30).nodes[0].id
    resource = admin.ConfigResource(admin.ResourceType.BROKER, str(node), incremental_configs=[
        admin.ConfigEntry("sasl.kerberos.min.time.before.relogin", "58000",
                          incremental_operation=admin.AlterConfigOpType.SET)])
    for future in client.incremental_alter_configs([resource]).values():
        future.result(timeout=30)
    described = client.describe_configs([admin.ConfigResource(admin.ResourceType.BROKER, str(node))])
    entries = next(iter(described.values())).result(timeout=30)
    entry = entries["sasl.kerberos.min.time.before.relogin"]
    assert entry.value == "58000" and entry.source == admin.ConfigSource.DYNAMIC_BROKER_CONFIG.value
    fixed = admin.ConfigResource(admin.ResourceType.BROKER, str(node), incremental_configs=[
        admin.ConfigEntry("num.partitions", "3", incremental_operation=admin.AlterConfigOpType.SET)])
    with pytest.raises(confluent_kafka.KafkaException, match="Cannot update these configs dynamically"):
        for future in client.incremental_alter_configs([fixed]).values():
            future.result(timeout=30)


def test_kafka_python_describe_cluster(broker):
    kafka_admin = pytest.importorskip("kafka.admin")
    client = kafka_admin.KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        described = client.describe_cluster()
    finally:
        client.close()
    assert len(described["brokers"]) == 1
    host, port = broker.bootstrap_servers.split(":")
    assert [(entry["host"], entry["port"]) for entry in described["brokers"]] == [(host, int(port))]
    assert described["controller_id"] == described["brokers"][0]["broker_id"]  # its DescribeCluster
    assert "DESCRIBE" in described["authorized_operations"]
