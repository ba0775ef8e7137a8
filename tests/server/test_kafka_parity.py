"""Where the server answers as Kafka does for what librdkafka's suite checks, over real sockets with
the server's own codec (wire_client): per-record produce errors (KIP-467) for keyless records on a
compacted topic and for timestamps outside ``message.timestamp.before/after.max.ms``; ListOffsets
v6-v10 (max timestamp, KIP-734; earliest local and latest tiered, KIP-1005); ListGroups v5's group
type (KIP-848); dynamic broker configs through IncrementalAlterConfigs; DescribeCluster and
DescribeTopicPartitions; topics with every ``compression.type`` Kafka accepts, and ``producer``
keeping the producer's codec in the stored batches."""

import time

import pytest

from logstore import LogManager, Record
from logstore.records.decoder import COMPRESSION_MASK
from logstore.server.protocol import errors
from logstore.server.server import KafkaServer
from logstore.server.wire_records.compression import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD
from wire_client import WireClient

PRODUCE, LIST_OFFSETS, LIST_GROUPS, API_VERSIONS, CREATE_TOPICS = 0, 2, 16, 18, 19
DESCRIBE_CONFIGS, ALTER_CONFIGS, DESCRIBE_CLUSTER, DESCRIBE_TOPIC_PARTITIONS = 32, 44, 60, 75
TOPIC, BROKER = 2, 4


@pytest.fixture
def store(tmp_path):
    with LogManager([str(tmp_path / "data")]) as store:
        yield store


@pytest.fixture
def server(store):
    with KafkaServer(store, listen="127.0.0.1:0", config={"max.request.partition.size.limit": 5}) as server:
        yield server


@pytest.fixture
def client(server):
    client = WireClient(server.bootstrap_servers)
    yield client
    client.close()


def now_ms() -> int:
    return int(time.time() * 1000)


def test_the_new_apis_and_versions_are_advertised(client):
    advertised = {entry["api_key"]: (entry["min_version"], entry["max_version"])
                  for entry in client.call(API_VERSIONS, 3, {"client_software_name": "t",
                                                             "client_software_version": "1"})["api_keys"]}
    assert advertised[LIST_OFFSETS] == (1, 10)
    assert advertised[LIST_GROUPS] == (0, 5)
    assert advertised[DESCRIBE_CLUSTER] == (0, 1)
    assert advertised[DESCRIBE_TOPIC_PARTITIONS] == (0, 0)


# --- Produce: per-record errors (KIP-467) ------------------------------------------------------


def test_keyless_records_on_a_compacted_topic_are_refused_record_by_record(client, store):
    store.create_topic("compacted", config={"cleanup.policy": "compact"})
    batch = [Record(b"k0", b"v"), Record(None, b"v"), Record(b"k2", b"v"), Record(None, b"v")]
    result = client.produce("compacted", 0, batch, version=8)
    assert result["error_code"] == errors.INVALID_RECORD
    assert [entry["batch_index"] for entry in result["record_errors"]] == [1, 3]
    assert all("Compacted topic cannot accept message without key in topic partition compacted-0"
               in entry["batch_index_error_message"] for entry in result["record_errors"])
    assert result["error_message"].startswith("One or more records have been rejected due to 2 record errors")
    assert store.get_log("compacted", 0).log_end_offset == 0  # the batch is atomic: nothing appended
    # Before v8 there is no INVALID_RECORD nor record_errors: CORRUPT_MESSAGE, as before.
    assert client.produce("compacted", 0, batch, version=7)["error_code"] == errors.CORRUPT_MESSAGE
    assert client.produce("compacted", 0, batch[:1], version=8)["error_code"] == errors.NONE


def test_timestamps_outside_the_topic_limits_are_refused_with_invalid_timestamp(client, store):
    hour = 3600 * 1000
    store.create_topic("bounded", config={"message.timestamp.before.max.ms": str(hour),
                                          "message.timestamp.after.max.ms": str(hour)})
    now = now_ms()
    batch = [Record(b"a", b"v", (), now), Record(b"b", b"v", (), now - 2 * hour), Record(b"c", b"v", (), now + 2 * hour)]
    result = client.produce("bounded", 0, batch)
    assert result["error_code"] == errors.INVALID_TIMESTAMP
    assert [entry["batch_index"] for entry in result["record_errors"]] == [1, 2]
    assert "out of range" in result["record_errors"][0]["batch_index_error_message"]
    assert store.get_log("bounded", 0).log_end_offset == 0
    assert client.produce("bounded", 0, batch[:1])["error_code"] == errors.NONE
    # The deprecated difference setting applies where before/after are left at their defaults.
    store.create_topic("legacy", config={"message.timestamp.difference.max.ms": str(hour)})
    assert client.produce("legacy", 0, batch[1:2])["error_code"] == errors.INVALID_TIMESTAMP
    # LogAppendTime topics take the append time: no check.
    store.create_topic("appended", config={"message.timestamp.type": "LogAppendTime",
                                           "message.timestamp.before.max.ms": str(hour)})
    assert client.produce("appended", 0, batch)["error_code"] == errors.NONE


# --- ListOffsets v6+ --------------------------------------------------------------------------


def list_offsets(client, version, topic, timestamp):
    body = {"replica_id": -1, "isolation_level": 0, "timeout_ms": 1000, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}]}]}
    return client.call(LIST_OFFSETS, version, body)["topics"][0]["partitions"][0]


def test_list_offsets_max_timestamp_and_the_kip_1005_timestamps(client, store):
    store.create_topic("times")
    for stamp in (1000, 5000, 3000, 5000, 2000):
        client.produce("times", 0, [Record(b"k", b"v", (), stamp)])
    store.get_log("times", 0).delete_records(1)
    for version in (7, 8, 9, 10):
        found = list_offsets(client, version, "times", -3)
        assert (found["error_code"], found["offset"], found["timestamp"]) == (errors.NONE, 1, 5000)
    assert list_offsets(client, 6, "times", -3)["error_code"] == errors.UNSUPPORTED_VERSION
    assert list_offsets(client, 7, "times", -4)["error_code"] == errors.UNSUPPORTED_VERSION
    assert list_offsets(client, 8, "times", -4)["offset"] == 1  # earliest local: the log start offset
    tiered = list_offsets(client, 9, "times", -5)
    assert (tiered["error_code"], tiered["offset"], tiered["timestamp"]) == (errors.NONE, -1, -1)
    assert list_offsets(client, 6, "times", -1)["offset"] == 5
    assert list_offsets(client, 10, "times", 4000)["offset"] == 1  # the first at or after it
    store.create_topic("empty")
    empty = list_offsets(client, 7, "empty", -3)
    assert (empty["error_code"], empty["offset"], empty["timestamp"]) == (errors.NONE, -1, -1)


# --- ListGroups v5 -----------------------------------------------------------------------------


def test_list_groups_v5_reports_classic_groups_and_filters_by_type(client, server):
    member = WireClient(server.bootstrap_servers)
    try:
        joined = member.call(11, 5, {"group_id": "g1", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
                                     "member_id": "", "group_instance_id": "static-1", "protocol_type": "consumer",
                                     "protocols": [{"name": "range", "metadata": b""}]})
        assert joined["error_code"] == errors.NONE
    finally:
        member.close()
    listed = client.call(LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})["groups"]
    assert [(group["group_id"], group["group_type"]) for group in listed] == [("g1", "classic")]
    assert client.call(LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["Classic"]})["groups"] == listed
    assert client.call(LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["consumer"]})["groups"] == []


# --- IncrementalAlterConfigs of the broker ------------------------------------------------------


def alter(client, kind, name, configs, validate_only=False):
    return client.call(ALTER_CONFIGS, 1, {"resources": [{"resource_type": kind, "resource_name": name, "configs": [
        {"name": key, "config_operation": operation, "value": value} for key, operation, value in configs]}],
        "validate_only": validate_only})["responses"][0]


def describe_broker(client, name):
    result = client.call(DESCRIBE_CONFIGS, 1, {"resources": [{"resource_type": BROKER, "resource_name": name,
                                                              "configuration_keys": None}], "include_synonyms": False})
    return {entry["name"]: entry for entry in result["results"][0]["configs"]}


def test_dynamic_broker_configs_are_altered_and_described(client, server):
    node = str(server.node_id)
    result = alter(client, BROKER, node, [("sasl.kerberos.min.time.before.relogin", 0, "58000")])
    assert result["error_code"] == errors.NONE, result
    described = describe_broker(client, node)
    entry = described["sasl.kerberos.min.time.before.relogin"]
    assert (entry["value"], entry["config_source"], entry["read_only"]) == ("58000", 2, False)
    assert alter(client, BROKER, "", [("log.cleaner.threads.x", 0, "1")])["error_code"] == errors.NONE
    assert describe_broker(client, node)["log.cleaner.threads.x"]["config_source"] == 3  # the cluster default
    # DELETE removes it; validate_only changes nothing.
    assert alter(client, BROKER, node, [("sasl.kerberos.min.time.before.relogin", 1, None)])["error_code"] == 0
    assert "sasl.kerberos.min.time.before.relogin" not in describe_broker(client, node)
    assert alter(client, BROKER, node, [("a.b", 0, "1")], validate_only=True)["error_code"] == 0
    assert "a.b" not in describe_broker(client, node)
    # This server's own settings are read at start: Kafka's answer for a non-dynamic config.
    fixed = alter(client, BROKER, node, [("num.partitions", 0, "3")])
    assert fixed["error_code"] == errors.INVALID_REQUEST
    assert "Cannot update these configs dynamically" in fixed["error_message"]
    assert alter(client, BROKER, node, [("x", 0, None)])["error_code"] == errors.INVALID_REQUEST
    assert alter(client, BROKER, node, [("x", 2, "a")])["error_code"] == errors.INVALID_CONFIG
    assert alter(client, BROKER, "99", [("x", 0, "1")])["error_code"] == errors.INVALID_REQUEST
    assert alter(client, 16, "my-group", [("x", 0, "1")])["error_code"] == errors.INVALID_REQUEST


# --- DescribeCluster, DescribeTopicPartitions ---------------------------------------------------


def test_describe_cluster(client, server):
    for version in (0, 1):
        answer = client.call(DESCRIBE_CLUSTER, version, {"include_cluster_authorized_operations": True,
                                                         "endpoint_type": 1})
        assert answer["error_code"] == errors.NONE and answer["cluster_id"] == server.cluster_id
        host, port = server.bootstrap_servers.split(":")
        assert answer["brokers"] == [{"broker_id": server.node_id, "host": host, "port": int(port), "rack": None}]
        assert answer["controller_id"] == server.node_id
        assert answer["cluster_authorized_operations"] & (1 << 8)  # DESCRIBE
    controllers = client.call(DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False,
                                                    "endpoint_type": 2})
    assert controllers["error_code"] == errors.UNSUPPORTED_VERSION


def test_describe_topic_partitions_pages_with_a_cursor(client, store):
    store.create_topic("a-topic", partitions=3)
    store.create_topic("b-topic", partitions=4)
    first = client.call(DESCRIBE_TOPIC_PARTITIONS, 0, {"topics": [], "response_partition_limit": 100, "cursor": None})
    listed = [(topic["name"], [p["partition_index"] for p in topic["partitions"]]) for topic in first["topics"]]
    assert listed == [("a-topic", [0, 1, 2]), ("b-topic", [0, 1])]  # max.request.partition.size.limit=5
    assert first["next_cursor"] == {"topic_name": "b-topic", "partition_index": 2}
    second = client.call(DESCRIBE_TOPIC_PARTITIONS, 0, {"topics": [], "response_partition_limit": 100,
                                                        "cursor": first["next_cursor"]})
    assert [(topic["name"], [p["partition_index"] for p in topic["partitions"]]) for topic in second["topics"]] == \
           [("b-topic", [2, 3])]
    assert second["next_cursor"] is None
    named = client.call(DESCRIBE_TOPIC_PARTITIONS, 0, {"topics": [{"name": "nope"}, {"name": "a-topic"}],
                                                       "response_partition_limit": 2, "cursor": None})
    assert [(topic["name"], topic["error_code"], len(topic["partitions"])) for topic in named["topics"]] == \
           [("a-topic", errors.NONE, 2)]  # sorted by name; the page ends inside a-topic
    assert named["next_cursor"] == {"topic_name": "a-topic", "partition_index": 2}
    rest = client.call(DESCRIBE_TOPIC_PARTITIONS, 0, {"topics": [{"name": "nope"}, {"name": "a-topic"}],
                                                      "response_partition_limit": 2, "cursor": named["next_cursor"]})
    assert [(topic["name"], topic["error_code"], len(topic["partitions"])) for topic in rest["topics"]] == \
           [("a-topic", errors.NONE, 1), ("nope", errors.UNKNOWN_TOPIC_OR_PARTITION, 0)]
    assert rest["next_cursor"] is None
    outside = client.call(DESCRIBE_TOPIC_PARTITIONS, 0, {"topics": [{"name": "a-topic"}], "response_partition_limit": 2,
                                                         "cursor": {"topic_name": "b-topic", "partition_index": 0}})
    assert [topic["error_code"] for topic in outside["topics"]] == [errors.INVALID_REQUEST]


# --- compression.type ---------------------------------------------------------------------------


CODECS = {"uncompressed": CODEC_NONE, "gzip": CODEC_GZIP, "snappy": CODEC_SNAPPY, "lz4": CODEC_LZ4,
          "zstd": CODEC_ZSTD}


def stored_codecs(store, topic):
    log = store.get_log(topic, 0)
    return [batch.header.attributes & COMPRESSION_MASK for batch, _first, _stop in log.iter_batch_slices(0)]


@pytest.mark.parametrize("compression", [*CODECS, "producer"])
def test_every_compression_type_is_a_topic_config(client, store, compression):
    created = client.call(CREATE_TOPICS, 4, {"topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1,
                                                         "assignments": [], "configs": [
        {"name": "compression.type", "value": compression}]}], "timeout_ms": 1000, "validate_only": False})
    assert created["topics"][0]["error_code"] == errors.NONE, created
    sent = [Record(b"k%d" % i, b"value %d" % i * 20, (), 1000 + i) for i in range(5)]
    assert client.produce("t", 0, sent, compression=CODEC_LZ4)["error_code"] == errors.NONE
    assert client.produce("t", 0, sent[:2])["error_code"] == errors.NONE
    expected = [CODEC_LZ4, CODEC_NONE] if compression == "producer" else [CODECS[compression]] * 2
    assert stored_codecs(store, "t") == expected
    _result, fetched = client.fetch("t", 0, 0)
    assert [(record.key, record.value, record.timestamp_ms) for record in fetched] == \
           [(record.key, record.value, record.timestamp_ms) for record in sent + sent[:2]]


def test_alter_configs_replaces_every_dynamic_config_of_a_resource(client, store, server):
    # KIP-133's AlterConfigs (librdkafka's admin test sends it): the configs given replace the
    # resource's dynamic ones; those not given are removed. Before, the API was not served.
    store.create_topic("altered", 1, {"retention.ms": "1000", "segment.bytes": "1048576"})
    answer = client.call(33, 1, {"resources": [{"resource_type": 2, "resource_name": "altered",
                                               "configs": [{"name": "cleanup.policy", "value": "compact"}]}],
                                 "validate_only": False})
    assert answer["responses"][0]["error_code"] == errors.NONE
    assert store.topic_overrides("altered") == {"cleanup.policy": "compact"}
    answer = client.call(33, 2, {"resources": [{"resource_type": 2, "resource_name": "altered",
                                               "configs": [{"name": "no.such.config", "value": "1"}]}],
                                 "validate_only": False})
    assert answer["responses"][0]["error_code"] == errors.INVALID_CONFIG
    assert store.topic_overrides("altered") == {"cleanup.policy": "compact"}  # refused: nothing changed
    broker = str(server.node_id)
    for configs in ([{"name": "sasl.kerberos.min.time.before.relogin", "value": "58000"}], []):
        answer = client.call(33, 0, {"resources": [{"resource_type": 4, "resource_name": broker, "configs": configs}],
                                     "validate_only": False})
        assert answer["responses"][0]["error_code"] == errors.NONE
        described = client.call(32, 1, {"resources": [{"resource_type": 4, "resource_name": broker,
                                                      "configuration_keys": None}], "include_synonyms": False})
        names = {entry["name"] for entry in described["results"][0]["configs"]}
        assert ("sasl.kerberos.min.time.before.relogin" in names) == bool(configs)
