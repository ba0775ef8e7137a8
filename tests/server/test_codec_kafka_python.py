"""Cross-checks against a real client's codec: kafka-python 3.x, whose protocol classes are generated
from Kafka's own JSON specs by other people's code.

- Named requests that kafka-python sends at startup, on the data path (ApiVersions v4, Metadata v8,
  Produce v8, Fetch v11, ListOffsets v5, CreateTopics v4) and in a consumer group (FindCoordinator
  v4, JoinGroup v5, SyncGroup v3, Heartbeat v3, LeaveGroup v3, OffsetCommit v7, OffsetFetch v5,
  ListGroups v4, DescribeGroups v4 and v5, DeleteGroups v2, OffsetDelete v0) are encoded by kafka-python
  and read by our decoder; our responses to them are read by kafka-python's response classes.
- Then every message at every version with a table, with values drawn from our tables: both codecs
  must produce the same bytes, and each must read the other's. (KIP-848's ConsumerGroupHeartbeat,
  which we only refuse, is left out: kafka-python has no class for it.)

kafka-python is in the ``clients`` extra, which CI installs: without it these tests fail to import
(never skip).
"""

from __future__ import annotations

import importlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codec_strategies import EVERY_MESSAGE, message_id, message_strategy
from logstore.server.protocol.codec import (API_KEYS, SUPPORTED_VERSIONS, decode_message, decode_request,
                                            decode_request_header, decode_response, encode_request, encode_response)
from logstore.server.protocol.messages import APIS
from logstore.server.protocol.schema import fields_at, type_default

import kafka.protocol.api_message  # noqa: E402,F401 - the clients extra; a missing one fails, it never skips

_MODULES = ("kafka.protocol.metadata", "kafka.protocol.producer", "kafka.protocol.consumer", "kafka.protocol.admin",
            "kafka.protocol.sasl")


def kafka_python_class(api_key: int, direction: str):
    """kafka-python's class for the request or response of an API (e.g. ``FetchRequest``)."""
    name = APIS[api_key].name + direction.capitalize()
    for module in _MODULES:
        cls = getattr(importlib.import_module(module), name, None)
        if cls is not None:
            return cls
    raise LookupError(name)


def _kafka_python_has(api_key: int) -> bool:
    try:
        kafka_python_class(api_key, "request")
    except LookupError:
        return False
    return True


CROSS_CHECKED = [message for message in EVERY_MESSAGE if _kafka_python_has(message[0])]
"""Every message of an API kafka-python has classes for (all but the ones we only refuse)."""


def _pairs(our_fields, their_fields: dict, version: int):
    """Our fields and kafka-python's, matched by wire position at ``version`` (kafka-python renames a
    few, e.g. TopicAuthorizedOperations is its ``authorized_operations``)."""
    ours = fields_at(our_fields, version)
    theirs = [f for f in their_fields.values() if f.for_version_q(version)]
    assert len(ours) == len(theirs), ([f.key for f in ours], [f.name for f in theirs])
    return list(zip(ours, theirs))


def _bits_to_set(value: int):
    """kafka-python holds the 32-bit authorized-operations fields as a set of bit numbers, None for
    the "not requested" value -2147483648 (bit 31 alone)."""
    bits = {bit for bit in range(32) if value & (1 << bit)}
    return None if bits == {31} else bits


def _set_to_bits(bits) -> int:
    value = sum(1 << bit for bit in ({31} if bits is None else bits))
    return value - (1 << 32) if value & (1 << 31) else value


def to_kafka_python(cls, our_fields, value: dict, version: int):
    """Our dict as a kafka-python object of ``cls`` (tagged fields passed only when not default,
    as kafka-python writes every tagged field it is given)."""
    kwargs = {}
    for ours, theirs in _pairs(our_fields, cls.fields, version):
        item = value[ours.key]
        if ours.tag is not None and item == type_default(ours, version):
            continue
        if theirs.type_str == "bitfield":
            item = _bits_to_set(item)
        if ours.is_struct and item is not None:
            sub = theirs.data_class
            item = ([to_kafka_python(sub, ours.fields, element, version) for element in item] if ours.is_array
                    else to_kafka_python(sub, ours.fields, item, version))
        kwargs[theirs.name] = item
    return cls(version=version, **kwargs) if hasattr(cls, "API_KEY") else cls(**kwargs)


def from_kafka_python(obj, our_fields, their_fields: dict, version: int) -> dict:
    """A kafka-python object as our dict (records and bytes as bytes)."""
    result = {}
    for ours, theirs in _pairs(our_fields, their_fields, version):
        item = getattr(obj, theirs.name)
        if theirs.type_str == "bitfield":
            item = _set_to_bits(item)
        if ours.is_struct and item is not None:
            sub = theirs.data_class.fields
            item = ([from_kafka_python(element, ours.fields, sub, version) for element in item] if ours.is_array
                    else from_kafka_python(item, ours.fields, sub, version))
        result[ours.key] = item
    return result


def their_request_frame(api_key, version, body, correlation_id=31, client_id="kafka-python"):
    cls = kafka_python_class(api_key, "request")
    request = to_kafka_python(cls, APIS[api_key].request, body, version)
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(header=True, framed=True))


def their_response_frame(api_key, version, body, correlation_id=31):
    cls = kafka_python_class(api_key, "response")
    response = to_kafka_python(cls, APIS[api_key].response, body, version)
    response.with_header(correlation_id=correlation_id)
    return bytes(response.encode(header=True, framed=True))


def their_decoded_response(api_key, version, frame: bytes) -> tuple[int, dict]:
    cls = kafka_python_class(api_key, "response")
    response = cls.decode(frame[4:], version=version, header=True)
    return response.header.correlation_id, from_kafka_python(response, APIS[api_key].response, cls.fields, version)


def our_decoded_request(frame: bytes):
    header, offset = decode_request_header(frame[4:])
    if header["api_key"] in SUPPORTED_VERSIONS:
        return header, decode_request(header["api_key"], header["api_version"], frame[4:], offset)
    return header, decode_message(header["api_key"], header["api_version"], "request", frame[4:], offset)


def normalised(value):
    """memoryviews as bytes, so kafka-python's bytes compare equal."""
    if isinstance(value, dict):
        return {key: normalised(item) for key, item in value.items()}
    if isinstance(value, list):
        return [normalised(item) for item in value]
    return bytes(value) if isinstance(value, memoryview) else value


# --- what kafka-python sends, and what it reads back --------------------------------------------

PRODUCE_V8 = {"transactional_id": None, "acks": -1, "timeout_ms": 30000, "topic_data": [
    {"name": "events", "partition_data": [{"index": 0, "records": b"\x00" * 61 + b"batch"},
                                         {"index": 3, "records": None}]}]}
FETCH_V11 = {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 52428800, "isolation_level": 0,
             "session_id": 0, "session_epoch": 0, "topics": [{"topic": "events", "partitions": [
                 {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 42, "log_start_offset": -1,
                  "partition_max_bytes": 1048576}]}],
             "forgotten_topics_data": [{"topic": "old", "partitions": [1, 2]}], "rack_id": ""}
REQUESTS = [
    ("ApiVersions", 4, {"client_software_name": "kafka-python", "client_software_version": "3.0.12"}),
    ("Metadata", 8, {"topics": [{"name": "events"}, {"name": "t\u00e9l\u00e9"}], "allow_auto_topic_creation": True,
                     "include_cluster_authorized_operations": False, "include_topic_authorized_operations": True}),
    ("Metadata", 8, {"topics": None, "allow_auto_topic_creation": False, "include_cluster_authorized_operations": True,
                     "include_topic_authorized_operations": False}),
    ("Produce", 8, PRODUCE_V8),
    ("Fetch", 11, FETCH_V11),
    ("ListOffsets", 5, {"replica_id": -1, "isolation_level": 1, "topics": [{"name": "events", "partitions": [
        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -2},
        {"partition_index": 1, "current_leader_epoch": 5, "timestamp": 1700000000000}]}]}),
    ("CreateTopics", 4, {"topics": [{"name": "new", "num_partitions": -1, "replication_factor": -1, "assignments": [],
                                     "configs": [{"name": "cleanup.policy", "value": "compact"},
                                                 {"name": "retention.ms", "value": None}]},
                                    {"name": "placed", "num_partitions": 2, "replication_factor": 1, "assignments": [
                                        {"partition_index": 0, "broker_ids": [1]}], "configs": []}],
                         "timeout_ms": 60000, "validate_only": False}),
    # A consumer in a group, and the admin client's group calls.
    ("FindCoordinator", 4, {"key_type": 0, "coordinator_keys": ["my-group", "other"]}),
    ("FindCoordinator", 2, {"key": "my-group", "key_type": 0}),
    ("JoinGroup", 5, {"group_id": "my-group", "session_timeout_ms": 45000, "rebalance_timeout_ms": 300000,
                      "member_id": "", "group_instance_id": None, "protocol_type": "consumer", "protocols": [
                          {"name": "range", "metadata": b"\x00\x01sub"}, {"name": "roundrobin", "metadata": b""}]}),
    ("SyncGroup", 3, {"group_id": "my-group", "generation_id": 1, "member_id": "m-1", "group_instance_id": "i-1",
                      "assignments": [{"member_id": "m-1", "assignment": b"\x00\x01a"}]}),
    ("Heartbeat", 3, {"group_id": "my-group", "generation_id": 1, "member_id": "m-1", "group_instance_id": None}),
    ("LeaveGroup", 3, {"group_id": "my-group", "members": [{"member_id": "m-1", "group_instance_id": None},
                                                           {"member_id": "", "group_instance_id": "i-2"}]}),
    ("OffsetCommit", 7, {"group_id": "my-group", "generation_id_or_member_epoch": 1, "member_id": "m-1",
                         "group_instance_id": None, "topics": [{"name": "events", "partitions": [
                             {"partition_index": 0, "committed_offset": 42, "committed_leader_epoch": 3,
                              "committed_metadata": "meta"},
                             {"partition_index": 1, "committed_offset": 7, "committed_leader_epoch": -1,
                              "committed_metadata": None}]}]}),
    ("OffsetFetch", 5, {"group_id": "my-group", "topics": None}),
    ("OffsetFetch", 1, {"group_id": "my-group", "topics": [{"name": "events", "partition_indexes": [0, 1]}]}),
    ("ListGroups", 4, {"states_filter": ["Stable", "Empty"]}),
    ("DescribeGroups", 4, {"groups": ["my-group"], "include_authorized_operations": True}),
    ("DescribeGroups", 5, {"groups": ["my-group", "other"], "include_authorized_operations": False}),
    ("DeleteGroups", 2, {"groups_names": ["my-group", "gone"]}),
    ("OffsetDelete", 0, {"group_id": "my-group", "topics": [{"name": "events", "partitions": [
        {"partition_index": 0}]}]}),
]


@pytest.mark.parametrize("name, version, body", REQUESTS, ids=lambda p: str(p) if not isinstance(p, dict) else "")
def test_we_read_what_kafka_python_sends(name, version, body):
    frame = their_request_frame(API_KEYS[name], version, body, correlation_id=1234, client_id="kp-client")
    header, decoded = our_decoded_request(frame)
    assert header == {"api_key": API_KEYS[name], "api_version": version, "correlation_id": 1234,
                      "client_id": "kp-client"}
    assert decoded == body
    assert encode_request(API_KEYS[name], version, 1234, "kp-client", body) == frame


RESPONSES = [
    ("ApiVersions", 4, {"error_code": 0, "api_keys": [{"api_key": 0, "min_version": 0, "max_version": 8},
                                                      {"api_key": 18, "min_version": 0, "max_version": 4}],
                        "throttle_time_ms": 0}),
    ("ApiVersions", 0, {"error_code": 0, "api_keys": [{"api_key": 1, "min_version": 4, "max_version": 11}]}),
    ("Metadata", 8, {"throttle_time_ms": 0, "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": 9092}],
                     "cluster_id": "abcdefghijklmnopqrstuv", "controller_id": 1, "topics": [
                         {"error_code": 0, "name": "events", "is_internal": False, "partitions": [
                             {"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 0,
                              "replica_nodes": [1], "isr_nodes": [1], "offline_replicas": []}]},
                         {"error_code": 3, "name": "missing", "partitions": []}]}),
    ("Produce", 8, {"responses": [{"name": "events", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 100, "log_start_offset": 0},
        {"index": 1, "error_code": 87, "base_offset": -1, "record_errors": [{"batch_index": 2}],
         "error_message": "bad record"}]}], "throttle_time_ms": 0}),
    ("Fetch", 11, {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [
        {"topic": "events", "partitions": [
            {"partition_index": 0, "high_watermark": 10, "last_stable_offset": 10, "log_start_offset": 0,
             "records": [b"\x00" * 40000, b"more"]},
            {"partition_index": 1, "error_code": 1, "high_watermark": 0, "records": b""}]}]}),
    ("ListOffsets", 5, {"topics": [{"name": "events", "partitions": [
        {"partition_index": 0, "timestamp": -1, "offset": 42, "leader_epoch": 0}]}]}),
    ("CreateTopics", 4, {"throttle_time_ms": 0, "topics": [{"name": "new", "error_code": 0},
                                                           {"name": "dup", "error_code": 36, "error_message": "exists"}]}),
    ("FindCoordinator", 4, {"throttle_time_ms": 0, "coordinators": [
        {"key": "my-group", "node_id": 0, "host": "127.0.0.1", "port": 9092, "error_code": 0, "error_message": None},
        {"key": "tx", "node_id": -1, "host": "", "port": -1, "error_code": 53, "error_message": "no"}]}),
    ("FindCoordinator", 0, {"error_code": 0, "node_id": 0, "host": "127.0.0.1", "port": 9092}),
    ("JoinGroup", 5, {"throttle_time_ms": 0, "error_code": 0, "generation_id": 1, "protocol_name": "range",
                      "leader": "m-1", "member_id": "m-1", "members": [
                          {"member_id": "m-1", "group_instance_id": None, "metadata": b"\x00\x01sub"},
                          {"member_id": "m-2", "group_instance_id": "i-2", "metadata": b""}]}),
    ("JoinGroup", 4, {"throttle_time_ms": 0, "error_code": 79, "generation_id": -1, "protocol_name": "",
                      "leader": "", "member_id": "kafka-python-3.0.12-0a1b", "members": []}),
    ("SyncGroup", 3, {"throttle_time_ms": 0, "error_code": 0, "assignment": b"\x00\x01a"}),
    ("LeaveGroup", 3, {"throttle_time_ms": 0, "error_code": 0, "members": [
        {"member_id": "m-1", "group_instance_id": None, "error_code": 0},
        {"member_id": "", "group_instance_id": "i-2", "error_code": 25}]}),
    ("OffsetCommit", 7, {"throttle_time_ms": 0, "topics": [{"name": "events", "partitions": [
        {"partition_index": 0, "error_code": 0}, {"partition_index": 9, "error_code": 3}]}]}),
    ("OffsetFetch", 5, {"throttle_time_ms": 0, "topics": [{"name": "events", "partitions": [
        {"partition_index": 0, "committed_offset": 42, "committed_leader_epoch": 3, "metadata": "meta",
         "error_code": 0},
        {"partition_index": 1, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
         "error_code": 0}]}], "error_code": 0}),
    ("ListGroups", 4, {"throttle_time_ms": 0, "error_code": 0, "groups": [
        {"group_id": "my-group", "protocol_type": "consumer", "group_state": "Stable"}]}),
    ("DescribeGroups", 4, {"throttle_time_ms": 0, "groups": [
        {"error_code": 0, "group_id": "my-group", "group_state": "Stable", "protocol_type": "consumer",
         "protocol_data": "range", "members": [
             {"member_id": "m-1", "group_instance_id": None, "client_id": "c", "client_host": "/127.0.0.1",
              "member_metadata": b"\x00\x01sub", "member_assignment": b"\x00\x01a"}],
         "authorized_operations": 328}]}),
    ("DescribeGroups", 5, {"throttle_time_ms": 0, "groups": [
        {"error_code": 0, "group_id": "my-group", "group_state": "Stable", "protocol_type": "consumer",
         "protocol_data": "range", "members": [
             {"member_id": "m-1", "group_instance_id": "i-1", "client_id": "c", "client_host": "/127.0.0.1",
              "member_metadata": b"\x00\x01sub", "member_assignment": b"\x00\x01a"}],
         "authorized_operations": -2147483648},
        {"error_code": 0, "group_id": "gone", "group_state": "Dead", "protocol_type": "", "protocol_data": "",
         "members": [], "authorized_operations": -2147483648}]}),
    ("DeleteGroups", 2, {"throttle_time_ms": 0, "results": [{"group_id": "my-group", "error_code": 0},
                                                            {"group_id": "gone", "error_code": 69}]}),
    ("OffsetDelete", 0, {"error_code": 0, "throttle_time_ms": 0, "topics": [{"name": "events", "partitions": [
        {"partition_index": 0, "error_code": 86}]}]}),
]


@pytest.mark.parametrize("name, version, body", RESPONSES, ids=lambda p: str(p) if not isinstance(p, dict) else "")
def test_kafka_python_reads_our_responses(name, version, body):
    key = API_KEYS[name]
    frame = b"".join(encode_response(key, version, 77, body))
    correlation_id, decoded = their_decoded_response(key, version, frame)
    assert correlation_id == 77
    expected = decode_response(key, version, frame[4:])[1]  # body with every default filled in
    assert decoded == normalised(expected)
    assert all(normalised(expected)[k] == normalised(v) for k, v in body.items() if not isinstance(v, list))


def test_kafka_python_reads_the_api_versions_fallback():
    from logstore.server.protocol.codec import api_versions_fallback_response

    frame = api_versions_fallback_response(5)
    cls = kafka_python_class(18, "response")
    response = cls.decode(frame[4:], version=4, header=True)  # decoded as v0 because the error is set
    assert response.header.correlation_id == 5 and response.error_code == 35
    assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == [(18, 0, 4)]


# --- every message, both ways -------------------------------------------------------------------


def test_only_the_refused_kip_848_heartbeat_is_not_cross_checked():
    assert {key for key, _version, _direction in EVERY_MESSAGE} - {key for key, _v, _d in CROSS_CHECKED} == {68}


@pytest.mark.parametrize("message", CROSS_CHECKED, ids=message_id)
@settings(max_examples=15)
@given(data=st.data())
def test_both_codecs_write_the_same_bytes_and_read_each_other(message, data):
    key, version, direction = message
    body = data.draw(message_strategy(key, version, direction))
    if direction == "request":
        client_id = data.draw(st.one_of(st.none(), st.text(max_size=10)))
        frame = their_request_frame(key, version, body, client_id=client_id)
        assert encode_request(key, version, 31, client_id, body) == frame
        assert our_decoded_request(frame)[1] == body
    else:
        if key == API_KEYS["ApiVersions"]:
            body["error_code"] = 0  # kafka-python reads any other ApiVersions answer as v0
        frame = their_response_frame(key, version, body)
        assert b"".join(encode_response(key, version, 31, body)) == frame
        assert their_decoded_response(key, version, frame) == (31, normalised(body))
