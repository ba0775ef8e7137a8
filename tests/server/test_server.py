"""The server end to end over real sockets with the server's own codec (wire_client): the APIs'
answers and error codes, the network layer's ordering and isolation rules, the purgatories,
idempotent producers across restarts, and the broker identity in meta.properties."""

import threading
import time

import pytest

from logstore import LogManager, Record
from logstore.clock import ManualClock
from logstore.server.protocol import errors
from logstore.server.protocol.codec import encode_request
from logstore.server.server import KafkaServer, read_meta_properties
from logstore.server.wire_records import encode_produce_batch
from wire_client import WireClient

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
API_VERSIONS, CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS, INIT_PRODUCER_ID = 18, 19, 20, 21, 22
DESCRIBE_CONFIGS, ALTER_CONFIGS = 32, 44


@pytest.fixture
def store(tmp_path):
    with LogManager([str(tmp_path / "data")]) as store:
        yield store


@pytest.fixture
def server(store):
    with KafkaServer(store, listen="127.0.0.1:0", config={"connections.max.idle.ms": 60000}) as server:
        yield server


@pytest.fixture
def client(server):
    client = WireClient(server.bootstrap_servers)
    yield client
    client.close()


def records(count, prefix=b"v", **extra):
    return [Record(key=b"k%d" % i, value=prefix + b"%d" % i, headers=(("h", b"x"),), timestamp_ms=1_700_000_000_000 + i,
                   **extra) for i in range(count)]


def test_api_versions_at_every_version_and_the_newer_client_fallback(client):
    for version in range(5):
        response = client.call(API_VERSIONS, version, {"client_software_name": "t", "client_software_version": "1"})
        assert response["error_code"] == 0
        advertised = {entry["api_key"]: (entry["min_version"], entry["max_version"]) for entry in response["api_keys"]}
        assert advertised[PRODUCE] == (0, 8) and advertised[FETCH] == (4, 11) and advertised[API_VERSIONS] == (0, 4)
        assert advertised[24] == (0, 5) and advertised[26] == (0, 4)  # the transaction APIs (test_txn_api)
    # A client newer than us asks with v7: a v0 body with UNSUPPORTED_VERSION, connection kept open.
    frame = bytearray(encode_request(API_VERSIONS, 4, 99, "t", {"client_software_name": "t",
                                                                "client_software_version": "1"}))
    frame[6:8] = (7).to_bytes(2, "big")  # the same request, as a client that speaks v7 sends it
    client.send_raw(bytes(frame))
    correlation_id, response = client.receive(API_VERSIONS, 0)
    assert correlation_id == 99 and response["error_code"] == errors.UNSUPPORTED_VERSION
    assert any(entry["api_key"] == API_VERSIONS and entry["max_version"] == 4 for entry in response["api_keys"])
    assert client.call(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})["error_code"] == 0


def test_metadata_auto_creates_and_describes_the_one_broker(client, server, store):
    response = client.call(METADATA, 8, {"topics": [{"name": "auto"}], "allow_auto_topic_creation": True})
    assert response["brokers"] == [{"node_id": server.node_id, "host": "127.0.0.1", "port": server.port, "rack": None}]
    assert response["controller_id"] == server.node_id and response["cluster_id"] == server.cluster_id
    (topic,) = response["topics"]
    assert topic["error_code"] == 0 and topic["name"] == "auto" and len(topic["partitions"]) == 1
    assert topic["partitions"][0]["leader_id"] == server.node_id and topic["partitions"][0]["isr_nodes"] == [server.node_id]
    assert "auto" in store.topics()
    refused = client.call(METADATA, 8, {"topics": [{"name": "nope"}], "allow_auto_topic_creation": False})
    assert refused["topics"][0]["error_code"] == errors.UNKNOWN_TOPIC_OR_PARTITION and "nope" not in store.topics()
    bad = client.call(METADATA, 8, {"topics": [{"name": "bad name!"}], "allow_auto_topic_creation": True})
    assert bad["topics"][0]["error_code"] == errors.INVALID_TOPIC_EXCEPTION
    everything = client.call(METADATA, 1, {"topics": None})
    # __consumer_offsets is created by the first group write; once there it is listed, as Kafka lists
    # it: internal.
    assert [(topic["name"], topic["is_internal"]) for topic in everything["topics"]] == [("auto", False)]
    committed = client.call(8, 2, {"group_id": "listing", "generation_id_or_member_epoch": -1, "member_id": "",
                                   "retention_time_ms": -1, "topics": [{"name": "auto", "partitions": [
                                       {"partition_index": 0, "committed_offset": 0, "committed_metadata": ""}]}]})
    assert committed["topics"][0]["partitions"][0]["error_code"] == 0
    everything = client.call(METADATA, 1, {"topics": None})
    assert [(topic["name"], topic["is_internal"]) for topic in everything["topics"]] == [
        ("__consumer_offsets", True), ("auto", False)]


def test_produce_then_fetch_and_the_store_agree(client, store):
    store.create_topic("t", partitions=2)
    sent = records(10)
    result = client.produce("t", 1, sent)
    assert result["error_code"] == 0 and result["base_offset"] == 0
    assert client.produce("t", 1, records(5, prefix=b"w"))["base_offset"] == 10
    partition, fetched = client.fetch("t", 1, 0)
    assert partition["high_watermark"] == 15 == partition["last_stable_offset"] and partition["log_start_offset"] == 0
    stored = store.read("t", 1, 0, max_bytes=1 << 20)
    assert [(r.offset, r.key, r.value, tuple(r.headers), r.timestamp_ms) for r in fetched] == \
           [(r.offset, r.key, r.value, tuple(r.headers), r.timestamp_ms) for r in stored]
    assert [r.value for r in stored[:10]] == [r.value for r in sent]
    # Records appended through the Python API are fetched over the wire too.
    store.append("t", [Record(key=None, value=None)], partition=1)
    _partition, more = client.fetch("t", 1, 15)
    assert [(r.offset, r.key, r.value) for r in more] == [(15, None, None)]


def test_produce_errors_have_kafkas_codes(client, store):
    store.create_topic("c", config={"cleanup.policy": "compact", "max.message.bytes": "2000"})
    assert client.produce("missing", 0, records(1))["error_code"] == errors.UNKNOWN_TOPIC_OR_PARTITION
    assert client.produce("c", 0, [Record(key=None, value=b"v")])["error_code"] == errors.INVALID_RECORD
    assert client.produce("c", 0, [Record(key=None, value=b"v")], version=7)["error_code"] == errors.CORRUPT_MESSAGE
    assert client.produce("c", 0, [Record(key=b"k", value=b"x" * 5000)])["error_code"] == errors.MESSAGE_TOO_LARGE
    assert client.produce("c", 0, records(1), acks=2)["error_code"] == errors.INVALID_REQUIRED_ACKS
    assert client.produce("c", 0, records(1), version=2)["error_code"] == errors.UNSUPPORTED_VERSION
    two_batches = encode_produce_batch(records(1)) + encode_produce_batch(records(1))
    response = client.call(PRODUCE, 8, {"acks": 1, "timeout_ms": 1000, "topic_data": [
        {"name": "c", "partition_data": [{"index": 0, "records": two_batches}]}]})
    assert response["responses"][0]["partition_responses"][0]["error_code"] == errors.INVALID_RECORD
    assert store.get_log("c", 0).log_end_offset == 0


def test_acks_zero_gets_no_answer_and_a_failed_one_closes_the_connection(client, server, store):
    store.create_topic("z")
    client.produce("z", 0, records(3), acks=0)
    assert client.call(METADATA, 8, {"topics": [{"name": "z"}]})["topics"][0]["error_code"] == 0
    assert store.get_log("z", 0).log_end_offset == 3
    client.produce("z", 7, records(1), acks=0)  # no such partition: the client must notice
    assert client.is_closed_by_server()
    other = WireClient(server.bootstrap_servers)
    assert other.produce("z", 0, records(1))["base_offset"] == 3
    other.close()


def test_acks_all_is_answered_once_fsynced(client, store):
    store.create_topic("d")
    result = client.produce("d", 0, records(20), acks=-1)
    assert result["error_code"] == 0
    assert store.get_log("d", 0).recovery_point >= 20


def test_a_parked_fetch_holds_back_its_own_connection_only_and_wakes_on_produce(server, store):
    store.create_topic("p")
    waiting, other = WireClient(server.bootstrap_servers), WireClient(server.bootstrap_servers)
    try:
        started = time.monotonic()
        fetch_id = waiting.send(FETCH, 11, {
            "max_wait_ms": 5000, "min_bytes": 1, "max_bytes": 1 << 20, "session_epoch": -1, "replica_id": -1,
            "topics": [{"topic": "p", "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
        metadata_id = waiting.send(METADATA, 8, {"topics": [{"name": "p"}]})  # pipelined behind the fetch
        # Another connection is served while the fetch waits.
        assert other.call(METADATA, 8, {"topics": [{"name": "p"}]})["topics"][0]["error_code"] == 0
        assert other.produce("p", 0, records(2))["base_offset"] == 0
        got_id, response = waiting.receive(FETCH, 11)
        elapsed = time.monotonic() - started
        assert got_id == fetch_id and elapsed < 4, elapsed
        assert response["responses"][0]["partitions"][0]["high_watermark"] == 2
        assert waiting.receive(METADATA, 8)[0] == metadata_id  # responses in request order
        # A fetch with nothing to wait for expires after max_wait_ms with an empty answer.
        started = time.monotonic()
        partition, fetched = waiting.fetch("p", 0, 2, max_wait_ms=300)
        assert fetched == [] and 0.25 <= time.monotonic() - started < 3
    finally:
        waiting.close()
        other.close()


def test_fetch_limits_follow_kip_74(client, store):
    store.create_topic("big", partitions=2)
    for partition in (0, 1):
        for _ in range(3):
            client.produce("big", partition, [Record(key=b"k", value=b"x" * 3000)] * 2)
    # A partition limit below one batch still returns that first batch, whole.
    partition, fetched = client.fetch("big", 0, 0, partition_max_bytes=100)
    assert [r.offset for r in fetched] == [0, 1]
    # Two batches fit in the partition limit, the third does not.
    partition, fetched = client.fetch("big", 0, 0, partition_max_bytes=13000)
    assert [r.offset for r in fetched] == [0, 1, 2, 3]
    # The response limit: the first partition's first batch goes whole, the second partition gets nothing.
    response = client.call(FETCH, 11, {
        "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 10, "session_epoch": -1, "replica_id": -1,
        "topics": [{"topic": "big", "partitions": [{"partition": p, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                                                   for p in (0, 1)]}]})
    first, second = response["responses"][0]["partitions"]
    assert len(bytes(first["records"])) > 6000 and bytes(second["records"] or b"") == b""
    # Out of range and unknown partitions get their codes, next to good answers.
    partition, _ = client.fetch("big", 0, 99)
    assert partition["error_code"] == errors.OFFSET_OUT_OF_RANGE
    partition, _ = client.fetch("big", 5, 0)
    assert partition["error_code"] == errors.UNKNOWN_TOPIC_OR_PARTITION


def test_list_offsets_earliest_latest_and_by_time(client, store):
    store.create_topic("l")
    client.produce("l", 0, records(10))
    store.get_log("l", 0).delete_records(2)

    def lookup(timestamp):
        response = client.call(LIST_OFFSETS, 5, {"replica_id": -1, "isolation_level": 1, "topics": [
            {"name": "l", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}]}]})
        result = response["topics"][0]["partitions"][0]
        return result["error_code"], result["offset"], result["timestamp"]

    assert lookup(-2) == (0, 2, -1)
    assert lookup(-1) == (0, 10, -1)
    assert lookup(1_700_000_000_005) == (0, 5, 1_700_000_000_005)
    assert lookup(1_800_000_000_000) == (0, -1, -1)


def test_idempotent_retries_are_answered_with_their_offsets_across_restarts(tmp_path):
    data = str(tmp_path / "data")
    with KafkaServer([data], listen="127.0.0.1:0") as server:
        client = WireClient(server.bootstrap_servers)
        client.call(CREATE_TOPICS, 4, {"topics": [{"name": "i", "num_partitions": 1, "replication_factor": 1}],
                                       "timeout_ms": 1000})
        producer = client.call(INIT_PRODUCER_ID, 1, {"transactional_id": None, "transaction_timeout_ms": -1})
        pid = producer["producer_id"]
        assert producer["error_code"] == 0 and pid >= 0
        ids = dict(producer_id=pid, producer_epoch=0)
        assert client.produce("i", 0, records(3), base_sequence=0, **ids)["base_offset"] == 0
        assert client.produce("i", 0, records(2), base_sequence=3, **ids)["base_offset"] == 3
        assert client.produce("i", 0, records(3), base_sequence=0, **ids)["base_offset"] == 0  # a retry
        gap = client.produce("i", 0, records(1), base_sequence=9, **ids)
        assert gap["error_code"] == errors.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert server.store.get_log("i", 0).log_end_offset == 5
        client.close()
    with KafkaServer([data], listen="127.0.0.1:0") as server:
        client = WireClient(server.bootstrap_servers)
        assert client.produce("i", 0, records(2), base_sequence=3, **ids)["base_offset"] == 3  # still a retry
        assert client.produce("i", 0, records(1), base_sequence=5, **ids)["base_offset"] == 5
        assert client.call(INIT_PRODUCER_ID, 1, {"transactional_id": None})["producer_id"] > pid
        transactional = client.call(INIT_PRODUCER_ID, 1, {"transactional_id": "tx", "transaction_timeout_ms": 1000})
        assert transactional["error_code"] == errors.NONE and transactional["producer_id"] > pid
        assert server.store.get_log("i", 0).log_end_offset == 6
        client.close()


def test_a_forged_producer_id_is_refused_and_init_producer_id_survives_a_restart(tmp_path):
    """The probe's finding: one batch naming producer id 2**63 - 1 made every InitProducerId fail
    after the next restart ("int too large to convert"). Such an id was never handed out."""
    data = str(tmp_path / "data")
    with KafkaServer([data], listen="127.0.0.1:0") as server:
        client = WireClient(server.bootstrap_servers)
        client.call(CREATE_TOPICS, 4, {"topics": [{"name": "f", "num_partitions": 1, "replication_factor": 1}],
                                       "timeout_ms": 1000})
        forged = client.produce("f", 0, records(1), producer_id=2**63 - 1, producer_epoch=0, base_sequence=0)
        assert forged["error_code"] == errors.UNKNOWN_PRODUCER_ID
        assert server.store.get_log("f", 0).log_end_offset == 0
        client.close()
    with KafkaServer([data], listen="127.0.0.1:0") as server:
        client = WireClient(server.bootstrap_servers)
        producer = client.call(INIT_PRODUCER_ID, 1, {"transactional_id": None, "transaction_timeout_ms": -1})
        assert producer["error_code"] == errors.NONE and 0 <= producer["producer_id"] < 2**63 - 1
        ids = dict(producer_id=producer["producer_id"], producer_epoch=0)
        assert client.produce("f", 0, records(2), base_sequence=0, **ids)["base_offset"] == 0
        client.close()


def test_idempotent_producer_state_expires_after_producer_id_expiration_ms(tmp_path):
    """By the server's clock: a retry within ``producer.id.expiration.ms`` is answered as a duplicate;
    after it the producer is forgotten, so the same batch is taken as a new producer's (as in Kafka)."""
    clock = ManualClock()
    config = {"producer.id.expiration.ms": 60000, "producer.id.expiration.check.interval.ms": 1000}
    with KafkaServer([str(tmp_path / "data")], listen="127.0.0.1:0", config=config, clock=clock) as server:
        client = WireClient(server.bootstrap_servers)
        client.call(CREATE_TOPICS, 4, {"topics": [{"name": "e", "num_partitions": 1, "replication_factor": 1}],
                                       "timeout_ms": 1000})
        pid = client.call(INIT_PRODUCER_ID, 1, {"transactional_id": None, "transaction_timeout_ms": -1})["producer_id"]
        ids = dict(producer_id=pid, producer_epoch=0, base_sequence=0)
        assert client.produce("e", 0, records(1), **ids)["base_offset"] == 0
        clock.advance(59999)
        assert client.produce("e", 0, records(1), **ids)["base_offset"] == 0  # a retry: not appended
        clock.advance(60000)
        assert client.produce("e", 0, records(1), **ids)["base_offset"] == 1  # expired: a new producer's
        client.close()


def test_admin_apis(client, store):
    created = client.call(CREATE_TOPICS, 4, {"timeout_ms": 1000, "validate_only": False, "topics": [
        {"name": "a", "num_partitions": 3, "replication_factor": 1, "configs": [{"name": "retention.ms", "value": "1000"}]},
        {"name": "b", "num_partitions": -1, "replication_factor": -1},
        {"name": "rf3", "num_partitions": 1, "replication_factor": 3},
        {"name": "cfg", "num_partitions": 1, "replication_factor": 1, "configs": [{"name": "no.such", "value": "1"}]},
        {"name": "zero", "num_partitions": 0, "replication_factor": 1}]})
    codes = {topic["name"]: topic["error_code"] for topic in created["topics"]}
    assert codes == {"a": 0, "b": 0, "rf3": errors.INVALID_REPLICATION_FACTOR, "cfg": errors.INVALID_CONFIG,
                     "zero": errors.INVALID_PARTITIONS}
    assert store.partitions("a") == 3 and store.topic_config("a").retention_ms == 1000 and "rf3" not in store.topics()
    again = client.call(CREATE_TOPICS, 4, {"timeout_ms": 1000, "validate_only": True, "topics": [
        {"name": "a", "num_partitions": 1, "replication_factor": 1},
        {"name": "v", "num_partitions": 1, "replication_factor": 1}]})
    assert [t["error_code"] for t in again["topics"]] == [errors.TOPIC_ALREADY_EXISTS, 0] and "v" not in store.topics()

    described = client.call(DESCRIBE_CONFIGS, 2, {"resources": [
        {"resource_type": 2, "resource_name": "a", "configuration_keys": None},
        {"resource_type": 2, "resource_name": "missing", "configuration_keys": None}], "include_synonyms": False})
    entries = {entry["name"]: entry for entry in described["results"][0]["configs"]}
    assert entries["retention.ms"]["value"] == "1000" and entries["retention.ms"]["config_source"] == 1
    assert entries["cleanup.policy"]["value"] == "delete" and entries["cleanup.policy"]["config_source"] == 5
    assert described["results"][1]["error_code"] == errors.UNKNOWN_TOPIC_OR_PARTITION

    altered = client.call(ALTER_CONFIGS, 0, {"validate_only": False, "resources": [{"resource_type": 2, "resource_name": "a", "configs": [
        {"name": "retention.ms", "config_operation": 1, "value": None},
        {"name": "cleanup.policy", "config_operation": 2, "value": "compact"}]}]})
    assert altered["responses"][0]["error_code"] == 0
    assert store.topic_config("a").cleanup_policy == "compact,delete" and "retention.ms" not in store.topic_overrides("a")
    bad = client.call(ALTER_CONFIGS, 0, {"resources": [{"resource_type": 2, "resource_name": "a", "configs": [
        {"name": "retention.ms", "config_operation": 0, "value": "soon"}]}]})
    assert bad["responses"][0]["error_code"] == errors.INVALID_CONFIG

    client.produce("b", 0, records(10))
    deleted = client.call(DELETE_RECORDS, 1, {"timeout_ms": 1000, "topics": [{"name": "b", "partitions": [
        {"partition_index": 0, "offset": 4}]}]})
    assert deleted["topics"][0]["partitions"][0] == {"partition_index": 0, "low_watermark": 4, "error_code": 0}
    past = client.call(DELETE_RECORDS, 1, {"timeout_ms": 1000, "topics": [{"name": "b", "partitions": [
        {"partition_index": 0, "offset": 40}]}]})
    assert past["topics"][0]["partitions"][0]["error_code"] == errors.OFFSET_OUT_OF_RANGE
    assert store.get_log("b", 0).log_start_offset == 4

    gone = client.call(DELETE_TOPICS, 3, {"topic_names": ["b", "never"], "timeout_ms": 1000})
    assert [(r["name"], r["error_code"]) for r in gone["responses"]] == [("b", 0), ("never", errors.UNKNOWN_TOPIC_OR_PARTITION)]
    assert "b" not in store.topics()


def test_bad_input_closes_only_that_connection(server, store):
    store.create_topic("safe")
    good = WireClient(server.bootstrap_servers)
    good.produce("safe", 0, records(1))
    for bad_bytes in (b"\x7f\xff\xff\xff", b"\x00\x00\x00\x02\x00\x00", b"\x00\x00\x00\x08\x00\x63\x00\x00\x00\x00\x00\x01",
                      b"\x00\x00\x00\x0a\x00\x00\x00\x08\x00\x00\x00\x01\xff\xff"):
        bad = WireClient(server.bootstrap_servers)
        bad.send_raw(bad_bytes)
        assert bad.is_closed_by_server(), bad_bytes
        bad.close()
    assert good.produce("safe", 0, records(1))["base_offset"] == 1
    good.close()


def test_limits_max_connections_and_idle_timeout(store):
    config = {"max.connections": 2, "connections.max.idle.ms": 300}
    with KafkaServer(store, listen="127.0.0.1:0", config=config) as server:
        first, second = WireClient(server.bootstrap_servers), WireClient(server.bootstrap_servers)
        first.call(API_VERSIONS, 0, {})
        second.call(API_VERSIONS, 0, {})
        # A third waits in the listen backlog (as with Kafka: not accepted and dropped)...
        third = WireClient(server.bootstrap_servers)
        third.send(API_VERSIONS, 0, {})
        assert first.is_closed_by_server(timeout_s=5)  # idle past connections.max.idle.ms
        # ...and is served once a connection closed.
        assert third.receive(API_VERSIONS, 0)[1]["error_code"] == 0
        for client in (first, second, third):
            client.close()


def test_meta_properties_keep_the_broker_identity(tmp_path):
    data = str(tmp_path / "data")
    with KafkaServer([data], listen="127.0.0.1:0", config={"node.id": 3}) as server:
        cluster_id, node_id = server.cluster_id, server.node_id
    assert node_id == 3 and len(cluster_id) == 22
    assert read_meta_properties(data) == {"version": "1", "cluster.id": cluster_id, "node.id": "3"}
    with KafkaServer([data], listen="127.0.0.1:0") as server:
        assert (server.cluster_id, server.node_id) == (cluster_id, 3)
    with pytest.raises(Exception, match="node.id 4 differs"):
        KafkaServer([data], listen="127.0.0.1:0", config={"node.id": 4}).start()
    with pytest.raises(Exception, match="unknown store setting"):
        KafkaServer([data], listen="127.0.0.1:0", config={"no.such.setting": 1}).start()


def test_log_append_time_topics_stamp_the_broker_time(client, store):
    store.create_topic("lat", config={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    result = client.produce("lat", 0, records(3))
    assert result["log_append_time_ms"] >= before
    _partition, fetched = client.fetch("lat", 0, 0)
    assert {r.timestamp_ms for r in fetched} == {result["log_append_time_ms"]}


def test_concurrent_producers_on_many_connections(server, store):
    store.create_topic("many", partitions=3)
    failures = []

    def produce(index):
        try:
            client = WireClient(server.bootstrap_servers)
            for round_ in range(20):
                assert client.produce("many", index % 3, records(5), acks=-1 if round_ % 2 else 1)["error_code"] == 0
            client.close()
        except Exception as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=produce, args=(index,)) for index in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures
    assert sum(store.get_log("many", p).log_end_offset for p in range(3)) == 6 * 20 * 5


def test_requests_sent_before_the_client_closed_are_all_handled(server, store):
    """acks=0 produces queued behind a parked fetch, then the client closes: every one is appended."""
    store.create_topic("eof")
    client = WireClient(server.bootstrap_servers)
    client.send(FETCH, 11, {"max_wait_ms": 300, "min_bytes": 1, "max_bytes": 1 << 20, "session_epoch": -1,
                            "replica_id": -1, "topics": [{"topic": "eof", "partitions": [
                                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
    for _ in range(5):
        client.produce("eof", 0, records(2), acks=0)
    client.close()
    deadline = time.monotonic() + 10
    while store.get_log("eof", 0).log_end_offset < 10 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert store.get_log("eof", 0).log_end_offset == 10


def test_pipelined_durable_produces_share_fsyncs_and_are_answered_in_order(tmp_path):
    """acks=-1 produces pipelined on one connection: each parks for its fsync without muting the
    connection, so the later ones are appended meanwhile and one fsync covers several."""
    from logstore.fs import FileSystem

    class SlowFsync(FileSystem):
        def fsync(self, fd):
            time.sleep(0.05)
            super().fsync(fd)

    with LogManager([str(tmp_path / "data")], fs=SlowFsync()) as store, \
            KafkaServer(store, listen="127.0.0.1:0") as server:
        store.create_topic("durable")
        client = WireClient(server.bootstrap_servers)
        store.waits.flusher  # noqa: B018 - started before counting its rounds
        rounds_before = store.waits.flusher.rounds
        sent = []
        for index in range(10):
            body = {"acks": -1, "timeout_ms": 10000, "topic_data": [{"name": "durable", "partition_data": [
                {"index": 0, "records": encode_produce_batch(records(3, prefix=b"%d-" % index))}]}]}
            sent.append(client.send(PRODUCE, 8, body))
        answers = [client.receive(PRODUCE, 8) for _ in sent]
        assert [correlation_id for correlation_id, _ in answers] == sent
        assert [a["responses"][0]["partition_responses"][0]["base_offset"] for _, a in answers] == list(range(0, 30, 3))
        assert store.get_log("durable", 0).recovery_point == 30
        assert store.waits.flusher.rounds - rounds_before <= 5
        client.close()


def test_a_durable_produce_that_outlives_its_timeout_gets_request_timed_out(tmp_path):
    from logstore.fs import FileSystem

    release = threading.Event()
    release.set()  # fsyncs pass until the topic exists

    class StuckFsync(FileSystem):
        def fsync(self, fd):
            release.wait(10)
            super().fsync(fd)

    with LogManager([str(tmp_path / "data")], fs=StuckFsync()) as store, \
            KafkaServer(store, listen="127.0.0.1:0") as server:
        store.create_topic("slow")
        client = WireClient(server.bootstrap_servers)
        release.clear()
        started = time.monotonic()
        result = client.produce("slow", 0, records(2), acks=-1, timeout_ms=200)
        assert result["error_code"] == errors.REQUEST_TIMED_OUT and time.monotonic() - started < 5
        assert store.get_log("slow", 0).log_end_offset == 2  # appended, not yet durable (as in Kafka)
        release.set()
        client.close()


def test_find_coordinator_serves_groups_and_transactions(client, server):
    """(The group APIs themselves: test_groups_wire; the transaction APIs: test_txn_api.)"""
    group = client.call(10, 2, {"key": "g", "key_type": 0})
    assert group["error_code"] == errors.NONE and group["node_id"] == server.node_id
    transaction = client.call(10, 1, {"key": "tx", "key_type": 1})
    assert transaction["error_code"] == errors.NONE and transaction["node_id"] == server.node_id


def test_offsets_compaction_emptied_are_served_so_consumers_move_past_them(client, server, store):
    """A batch that compaction left without records (it only carries offsets forward) is sent as
    Kafka's empty batch, as Kafka sends it, so a consumer's position moves past its offsets."""
    from kafka import KafkaConsumer, TopicPartition

    from logstore.records.encoder import assign_base_offset, encode_batch_parts
    from logstore.server.wire_records import decode_fetch

    store.create_topic("emptied", config={"cleanup.policy": "compact"})
    log = store.get_log("emptied", 0)
    log.append([Record(key=b"k%d" % i, value=b"v") for i in range(5)])
    log.roll()
    # What the cleaner writes when every record of a segment's last batch was superseded.
    cleaned = log.new_cleaned_segment(0)
    header, parts = encode_batch_parts([], last_offset_delta=4, default_timestamp_ms=1000)
    assign_base_offset(header, 0)
    cleaned.append(0, 4, 1000, [header, *parts])
    cleaned.flush()
    assert log.replace_segments([cleaned], [log.segments[0]])
    assert store.read("emptied", 0, 0) == [] and log.log_end_offset == 5
    partition, fetched = client.fetch("emptied", 0, 0)
    assert fetched == [] and partition["high_watermark"] == 5
    ((batch, batch_records),) = decode_fetch(bytes(partition["records"]))
    assert (batch.base_offset, batch.last_offset_delta, batch.record_count, batch_records) == (0, 4, 0, [])
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap_servers, consumer_timeout_ms=1000)
    topic_partition = TopicPartition("emptied", 0)
    consumer.assign([topic_partition])
    consumer.seek(topic_partition, 0)
    assert list(consumer) == [] and consumer.position(topic_partition) == 5
    consumer.close()


def test_meta_properties_carry_a_checksum(tmp_path):
    """A damaged meta.properties is reported, never read as another broker's identity; a file
    without the checksum (written before it) is read as it is."""
    from logstore.errors import CorruptCheckpointError
    from logstore.server.server import format_meta_properties

    data = format_meta_properties("Xk3pQ0e9Rj2vWkq8yH1bZA", 7)
    path = tmp_path / "meta.properties"
    expected = {"version": "1", "cluster.id": "Xk3pQ0e9Rj2vWkq8yH1bZA", "node.id": "7"}
    path.write_bytes(data)
    assert read_meta_properties(str(tmp_path)) == expected
    for position in range(len(data)):
        for mask in (0x01, 0x80):
            path.write_bytes(data[:position] + bytes([data[position] ^ mask]) + data[position + 1:])
            try:
                found = read_meta_properties(str(tmp_path))
            except CorruptCheckpointError as exc:
                assert "meta.properties" in str(exc)
                continue
            assert {key: found[key] for key in expected} == expected, position  # only the comment was hit
    path.write_bytes(b"version=1\ncluster.id=abc\nnode.id=2\n")
    assert read_meta_properties(str(tmp_path)) == {"version": "1", "cluster.id": "abc", "node.id": "2"}


def test_fetch_max_bytes_caps_an_answer_whatever_the_client_asks(store):
    # Before: max_bytes 2**31-1 returned the whole partition.
    config = {"fetch.max.bytes": 100_000}
    with KafkaServer(store, listen="127.0.0.1:0", config=config) as server:
        client = WireClient(server.bootstrap_servers)
        try:
            store.create_topic("capped", partitions=1)
            for _ in range(20):
                assert client.produce("capped", 0, [Record(key=b"k", value=b"x" * 10_000)] * 2)["error_code"] == 0
            for version in (4, 11):
                body = {"max_wait_ms": 0, "min_bytes": 1, "max_bytes": 0x7FFFFFFF, "session_epoch": -1, "replica_id": -1,
                        "topics": [{"topic": "capped", "partitions": [{"partition": 0, "fetch_offset": 0,
                                                                       "partition_max_bytes": 0x7FFFFFFF}]}]}
                answer = client.call(FETCH, version, body)["responses"][0]["partitions"][0]
                size = len(bytes(answer["records"]))
                assert 20_000 < size <= 100_000, (version, size)
        finally:
            client.close()


def test_a_dead_server_thread_stops_the_server_and_releases_the_store(tmp_path):
    # Before: the network thread died (a MemoryError) and the process held the store's lock,
    # answering nothing, for good.
    data = str(tmp_path / "data")
    server = KafkaServer([data], listen="127.0.0.1:0").start()
    try:
        def broken() -> None:
            raise MemoryError("planted")

        server._network._finish_completions = broken
        client = WireClient(server.bootstrap_servers)
        client.send(API_VERSIONS, 0, {})
        assert server.wait_stopped(15), "the server did not stop"
        assert isinstance(server.failure, MemoryError)
        client.close()
        with LogManager([data]) as again:  # the lock was released: the store opens
            assert again.offline_dirs == {}
    finally:
        server.stop()


def test_max_connections_is_derived_from_the_descriptor_limit(store):
    import resource
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with KafkaServer(store, listen="127.0.0.1:0") as server:
        budget = server.descriptors
        assert not budget.configured and budget.store_needs > 0
        assert budget.max_connections == soft - budget.store_needs - budget.server_needs - budget.headroom
        assert server._network.max_connections == budget.max_connections
        assert f"max.connections {budget.max_connections}" in str(budget)
    with KafkaServer(store, listen="127.0.0.1:0", config={"max.connections": 5}) as server:
        assert server._network.max_connections == 5 and server.descriptors.configured


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the planted death
def test_logstore_serve_exits_1_when_a_thread_of_its_process_dies(tmp_path, monkeypatch):
    # Before: a dead thread left the process up, holding the store's lock and answering nothing.
    from click.testing import CliRunner

    from logstore.cli.main import main
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)  # serve installs its own: undone after
    servers = []
    start = KafkaServer.start

    def start_then_lose_a_thread(self):
        started = start(self)
        servers.append(self)

        def dies() -> None:
            raise RuntimeError("planted")

        threading.Thread(target=dies, name="a-doomed-thread").start()
        return started

    monkeypatch.setattr(KafkaServer, "start", start_then_lose_a_thread)
    data = str(tmp_path / "data")
    result = CliRunner().invoke(main, ["--dir", data, "serve", "--listen", "127.0.0.1:0"])
    assert result.exit_code == 1, result.output
    assert "a thread of the server died (RuntimeError: planted)" in result.output
    assert servers and servers[0].wait_stopped(0) and isinstance(servers[0].failure, RuntimeError)
    with LogManager([data]):  # the store was closed and its lock released
        pass
