"""Internal topics (``__consumer_offsets``, ``__transaction_state``) against clients: Produce,
DeleteTopics and DeleteRecords of one are INVALID_TOPIC_EXCEPTION whatever the ACLs allow, CreateTopics
and Metadata's auto-creation do not make one, Metadata marks them ``is_internal``; the same through
kafka-python and librdkafka, with a forged offset commit that must not survive a restart. The store's API and the
CLI refuse appends and (without ``allow_internal``) deletions."""

import pytest
from click.testing import CliRunner

from logstore.cli.main import main
from logstore import LogManager, Record
from logstore.errors import InvalidTopicError
from logstore.group.formats import OffsetValue, encode_offset_key, encode_offset_value, partition_for
from logstore.server.protocol import errors
from logstore.server.security.acls import bindings_for
from logstore.server.server import KafkaServer
from wire_client import WireClient

PRODUCE, METADATA, CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS = 0, 3, 19, 20, 21
OFFSETS = "__consumer_offsets"
ONE_PARTITION = {"offsets.topic.num.partitions": 1}


def _forged_commit(group: str, topic: str, offset: int) -> Record:
    return Record(encode_offset_key(group, topic, 0), encode_offset_value(OffsetValue(offset)), (), 1_700_000_000_000)


def _refusals(client: WireClient, store) -> None:
    """Every way a client could damage ``__consumer_offsets`` is refused with INVALID_TOPIC_EXCEPTION."""
    end = store.get_log(OFFSETS, 0).log_end_offset
    produced = client.produce(OFFSETS, 0, [_forged_commit("g", "t", 7)])
    assert produced["error_code"] == errors.INVALID_TOPIC_EXCEPTION
    assert "internal topic" in produced["error_message"]
    deleted = client.call(DELETE_TOPICS, 3, {"topic_names": [OFFSETS, "__transaction_state"], "timeout_ms": 1000})
    assert [r["error_code"] for r in deleted["responses"]] == [errors.INVALID_TOPIC_EXCEPTION] * 2
    trimmed = client.call(DELETE_RECORDS, 1, {"timeout_ms": 1000, "topics": [
        {"name": OFFSETS, "partitions": [{"partition_index": 0, "offset": -1}]}]})
    assert trimmed["topics"][0]["partitions"][0]["error_code"] == errors.INVALID_TOPIC_EXCEPTION
    assert OFFSETS in store.topics() and store.get_log(OFFSETS, 0).log_end_offset == end
    assert store.get_log(OFFSETS, 0).log_start_offset == 0


def _store_with_offsets_topic(path) -> LogManager:
    """A store holding ``__consumer_offsets`` as the group coordinator creates it on first use."""
    store = LogManager([str(path)])
    store.create_topic(OFFSETS, partitions=1, config={"cleanup.policy": "compact"})
    return store


def test_clients_cannot_produce_to_delete_or_trim_an_internal_topic(tmp_path):
    with _store_with_offsets_topic(tmp_path / "data") as store, \
            KafkaServer(store, listen="127.0.0.1:0", config=ONE_PARTITION) as server:
        client = WireClient(server.bootstrap_servers)
        _refusals(client, server.store)
        client.close()


def test_internal_topics_are_refused_whatever_the_acls_allow(tmp_path):
    """A principal allowed everything on every topic (All on ``*``) is still refused."""
    config = {**ONE_PARTITION, "authorizer.enable": "true"}
    with _store_with_offsets_topic(tmp_path / "data") as store, \
            KafkaServer(store, listen="127.0.0.1:0", config=config) as server:
        server.authorizer.create(bindings_for(allow_principals=["User:ANONYMOUS"], topics=["*"], operations=["All"]))
        client = WireClient(server.bootstrap_servers)
        _refusals(client, server.store)
        client.close()


def test_internal_topics_are_marked_and_never_created_by_clients(tmp_path):
    with _store_with_offsets_topic(tmp_path / "data") as store, \
            KafkaServer(store, listen="127.0.0.1:0", config=ONE_PARTITION) as server:
        client = WireClient(server.bootstrap_servers)
        created = client.call(CREATE_TOPICS, 4, {"timeout_ms": 1000, "validate_only": False, "topics": [
            {"name": "__transaction_state", "num_partitions": 1, "replication_factor": 1},
            {"name": OFFSETS, "num_partitions": 1, "replication_factor": 1}]})
        assert [t["error_code"] for t in created["topics"]] == [errors.INVALID_TOPIC_EXCEPTION,
                                                                errors.TOPIC_ALREADY_EXISTS]
        answer = client.call(METADATA, 8, {"topics": [{"name": OFFSETS}, {"name": "__transaction_state"},
                                                      {"name": "ordinary"}],
                                           "allow_auto_topic_creation": True,
                                           "include_cluster_authorized_operations": False,
                                           "include_topic_authorized_operations": False})
        topics = {t["name"]: t for t in answer["topics"]}
        assert topics[OFFSETS]["is_internal"] and topics[OFFSETS]["error_code"] == errors.NONE
        assert topics["__transaction_state"]["is_internal"]
        assert topics["__transaction_state"]["error_code"] == errors.UNKNOWN_TOPIC_OR_PARTITION
        assert not topics["ordinary"]["is_internal"] and topics["ordinary"]["error_code"] == errors.NONE
        assert "__transaction_state" not in server.store.topics() and "ordinary" in server.store.topics()
        client.close()


def test_real_clients_cannot_rewind_a_group_through_consumer_offsets(tmp_path):
    """The probe's finding: a forged commit record produced to ``__consumer_offsets`` moved a group's
    offset from 42 to 7 after a restart, and DeleteTopics of it answered success. kafka-python
    commits and deletes; librdkafka (confluent-kafka) produces, as kafka-python's producer keeps off
    topics marked internal."""
    kafka = pytest.importorskip("kafka")
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from kafka.errors import InvalidTopicError as KafkaInvalidTopicError
    from kafka.structs import OffsetAndMetadata, TopicPartition

    data = str(tmp_path / "data")
    partition = TopicPartition("t", 0)
    with KafkaServer([data], listen="127.0.0.1:0", config=ONE_PARTITION) as server:
        server.store.create_topic("t")
        consumer = kafka.KafkaConsumer(bootstrap_servers=server.bootstrap_servers, group_id="g",
                                       enable_auto_commit=False, request_timeout_ms=10000)
        consumer.commit({partition: OffsetAndMetadata(42, "", -1)})
        consumer.close()
        reports = []
        producer = confluent_kafka.Producer({"bootstrap.servers": server.bootstrap_servers, "message.timeout.ms": 10000})
        forged = _forged_commit("g", "t", 7)
        producer.produce(OFFSETS, forged.value, forged.key, partition=partition_for("g", 1),
                         on_delivery=lambda error, message: reports.append(error))
        assert producer.flush(15) == 0
        assert len(reports) == 1 and reports[0] is not None
        assert reports[0].code() == confluent_kafka.KafkaError.TOPIC_EXCEPTION
        admin = kafka.KafkaAdminClient(bootstrap_servers=server.bootstrap_servers, request_timeout_ms=10000)
        with pytest.raises(KafkaInvalidTopicError):
            admin.delete_topics([OFFSETS])
        admin.close()
    with KafkaServer([data], listen="127.0.0.1:0", config=ONE_PARTITION) as server:
        assert OFFSETS in server.store.topics()
        consumer = kafka.KafkaConsumer(bootstrap_servers=server.bootstrap_servers, group_id="g",
                                       enable_auto_commit=False, request_timeout_ms=10000)
        assert consumer.committed(partition) == 42
        consumer.close()


def test_the_store_refuses_appends_to_and_deletion_of_internal_topics(tmp_path):
    with LogManager([str(tmp_path / "data")]) as store:
        store.create_topic(OFFSETS, partitions=1)  # as the group coordinator creates it
        with pytest.raises(InvalidTopicError, match="internal topic '__consumer_offsets'"):
            store.append(OFFSETS, [_forged_commit("g", "t", 7)])
        with pytest.raises(InvalidTopicError, match="internal"):
            store.validate_append(OFFSETS, [_forged_commit("g", "t", 7)])
        with pytest.raises(InvalidTopicError, match="allow_internal"):
            store.delete_topic(OFFSETS)
        assert OFFSETS in store.topics() and store.get_log(OFFSETS, 0).log_end_offset == 0
        store.delete_topic(OFFSETS, allow_internal=True)  # the operator's deliberate choice
        assert OFFSETS not in store.topics()


def test_the_cli_refuses_deleting_an_internal_topic_without_allow_internal(tmp_path):
    data = str(tmp_path / "data")
    with LogManager([data]) as store:
        store.create_topic(OFFSETS, partitions=1)
    runner = CliRunner()
    refused = runner.invoke(main, ["--dir", data, "topics", "delete", OFFSETS])
    assert refused.exit_code == 1 and "--allow-internal" in refused.output and "Traceback" not in refused.output
    appended = runner.invoke(main, ["--dir", data, "append", OFFSETS, "forged"])
    assert appended.exit_code == 1 and "internal topic" in appended.output
    usage = runner.invoke(main, ["--bootstrap-server", "127.0.0.1:1", "topics", "delete", "--allow-internal", OFFSETS])
    assert usage.exit_code == 2
    with LogManager([data]) as store:
        assert OFFSETS in store.topics() and store.get_log(OFFSETS, 0).log_end_offset == 0
    deleted = runner.invoke(main, ["--dir", data, "topics", "delete", "--allow-internal", OFFSETS])
    assert deleted.exit_code == 0, deleted.output
    with LogManager([data]) as store:
        assert OFFSETS not in store.topics()
