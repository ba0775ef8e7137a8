"""CreatePartitions (API key 37) over real sockets, every version (0-3, v2+ flexible): a topic grows
and Metadata and Produce see the new partitions at once; validate_only changes nothing; each topic
gets its own answer: UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS (no increase), INVALID_REQUEST
(a name given twice, answered once), INVALID_REPLICA_ASSIGNMENT (a wrong count of assignments or
another broker), INVALID_TOPIC_EXCEPTION (an internal topic); and ApiVersions advertises it.

Every server here binds 127.0.0.1 and is stopped by its fixture; every call has a timeout."""

from __future__ import annotations

import pytest

from logstore import LogManager, Record
from logstore.server.protocol import errors
from logstore.server.server import KafkaServer
from wire_client import WireClient

CREATE_PARTITIONS, METADATA, API_VERSIONS = 37, 3, 18
VERSIONS = range(0, 4)


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    data = tmp_path_factory.mktemp("grow") / "data"
    with LogManager([str(data)]) as store, \
            KafkaServer(store, listen="127.0.0.1:0", config={"offsets.topic.num.partitions": 1}) as server:
        client = WireClient(server.bootstrap_servers)
        try:
            yield server, store, client
        finally:
            client.close()


def grow(client, version, topics, validate_only=False):
    body = {"topics": [{"name": name, "count": count, "assignments": assignments}
                       for name, count, assignments in topics],
            "timeout_ms": 5000, "validate_only": validate_only}
    response = client.call(CREATE_PARTITIONS, version, body)
    return {entry["name"]: (entry["error_code"], entry["error_message"]) for entry in response["results"]}, response


def test_api_versions_advertises_create_partitions(running):
    _, _, client = running
    keys = {entry["api_key"]: (entry["min_version"], entry["max_version"])
            for entry in client.call(API_VERSIONS, 3, {"client_software_name": "t",
                                                       "client_software_version": "1"})["api_keys"]}
    assert keys[CREATE_PARTITIONS] == (0, 3)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_topic_grows_and_metadata_and_produce_see_it(running, version):
    server, store, client = running
    name = f"grow-{version}"
    store.create_topic(name, 2)
    store.append(name, [Record(b"k", b"old")], partition=1)
    results, response = grow(client, version, [(name, 5, None)])
    assert results == {name: (errors.NONE, None)} and response["throttle_time_ms"] == 0
    assert store.partitions(name) == 5
    metadata = client.call(METADATA, 8, {"topics": [{"name": name}], "allow_auto_topic_creation": False})
    assert [p["partition_index"] for p in metadata["topics"][0]["partitions"]] == [0, 1, 2, 3, 4]
    produced = client.produce(name, 4, [Record(b"k", b"new")])
    assert produced["error_code"] == errors.NONE
    assert [r.value for r in store.read(name, 4, 0)] == [b"new"]
    assert [r.value for r in store.read(name, 1, 0)] == [b"old"]


@pytest.mark.parametrize("version", VERSIONS)
def test_validate_only_changes_nothing(running, version):
    _, store, client = running
    name = f"validate-{version}"
    store.create_topic(name, 1)
    assert grow(client, version, [(name, 3, None)], validate_only=True)[0] == {name: (errors.NONE, None)}
    assert grow(client, version, [(name, 1, None)], validate_only=True)[0][name][0] == errors.INVALID_PARTITIONS
    assert store.partitions(name) == 1


@pytest.mark.parametrize("version", VERSIONS)
def test_errors_per_topic(running, version):
    server, store, client = running
    ok, same, fewer, wrong_count, wrong_broker, assigned = (f"{kind}-{version}" for kind in (
        "ok", "same", "fewer", "wrong-count", "wrong-broker", "assigned"))
    for name in (ok, same, fewer, wrong_count, wrong_broker, assigned):
        store.create_topic(name, 2)
    node = server.broker.node_id
    results, _ = grow(client, version, [
        (ok, 3, None), (same, 2, None), (fewer, 1, None), (f"missing-{version}", 4, None),
        ("dup", 3, None), ("dup", 4, None), (wrong_count, 4, [{"broker_ids": [node]}]),
        (wrong_broker, 3, [{"broker_ids": [node + 1]}]), (assigned, 4, [{"broker_ids": [node]}] * 2),
        ("__consumer_offsets", 9, None)])
    codes = {name: code for name, (code, _) in results.items()}
    assert codes == {
        ok: errors.NONE, same: errors.INVALID_PARTITIONS, fewer: errors.INVALID_PARTITIONS,
        f"missing-{version}": errors.UNKNOWN_TOPIC_OR_PARTITION, "dup": errors.INVALID_REQUEST,
        wrong_count: errors.INVALID_REPLICA_ASSIGNMENT, wrong_broker: errors.INVALID_REPLICA_ASSIGNMENT,
        assigned: errors.NONE, "__consumer_offsets": errors.INVALID_TOPIC_EXCEPTION}
    assert results[same][1] == "Topic already has 2 partition(s)."
    assert results[fewer][1] == f"The topic {fewer} currently has 2 partition(s); 1 would not be an increase."
    assert "2 additional partition(s), but only 1 assignment(s)" in results[wrong_count][1]
    assert [store.partitions(name) for name in (ok, same, fewer, wrong_count, wrong_broker, assigned)] == [
        3, 2, 2, 2, 2, 4]
    assert "__consumer_offsets" not in store.topics() or store.partitions("__consumer_offsets") == 1
