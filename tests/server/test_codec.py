"""The protocol codec: every message round-trips at every advertised version, defaults, records
chunks, the ApiVersions special cases, exact bytes of known encodings, and the primitives."""

from __future__ import annotations

import struct
import uuid
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codec_strategies import EVERY_MESSAGE, message_id, message_strategy
from logstore.server.protocol import codec
from logstore.server.protocol.codec import (API_KEYS, API_NAMES, SUPPORTED_VERSIONS, ProtocolError,
                                            UnsupportedVersionError, api_versions_fallback_response, decode_message,
                                            decode_request, decode_request_header, decode_response, encode_request,
                                            encode_response, is_flexible)
from logstore.server.protocol.messages import APIS
from logstore.server.protocol.schema import fields_at, snake_case, type_default


def round_trip_request(key, version, body, client_id="client-1", correlation_id=123):
    frame = encode_request(key, version, correlation_id, client_id, body)
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    header, offset = decode_request_header(memoryview(frame)[4:])
    assert header == {"api_key": key, "api_version": version, "correlation_id": correlation_id,
                      "client_id": client_id}
    body = decode_message(key, version, "request", memoryview(frame)[4:], offset)
    if key in SUPPORTED_VERSIONS:  # what the server decodes, through its own entry point
        assert decode_request(key, version, memoryview(frame)[4:], offset) == body
    return body


def response_frame(key, version, body, correlation_id=123) -> bytes:
    frame = b"".join(encode_response(key, version, correlation_id, body))
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    return frame


def round_trip_response(key, version, body):
    correlation_id, decoded = decode_response(key, version, response_frame(key, version, body)[4:])
    assert correlation_id == 123
    return decoded


# --- every message, every version ---------------------------------------------------------------


@pytest.mark.parametrize("message", EVERY_MESSAGE, ids=message_id)
@settings(max_examples=30)
@given(data=st.data())
def test_every_message_round_trips_at_every_version(message, data):
    key, version, direction = message
    body = data.draw(message_strategy(key, version, direction))
    if direction == "request":
        client_id = data.draw(st.one_of(st.none(), st.text(max_size=20)))
        assert round_trip_request(key, version, body, client_id) == body
    else:
        assert round_trip_response(key, version, body) == body


@pytest.mark.parametrize("message", EVERY_MESSAGE, ids=message_id)
def test_missing_keys_take_the_field_defaults(message):
    key, version, direction = message
    spec = APIS[key]
    fields = fields_at(spec.request if direction == "request" else spec.response, version)
    expected = {f.key: type_default(f, version) for f in fields}
    decoded = round_trip_request(key, version, {}) if direction == "request" else round_trip_response(key, version, {})
    assert decoded == expected


def test_spec_defaults_that_handlers_rely_on():
    assert round_trip_request(API_KEYS["Metadata"], 4, {})["allow_auto_topic_creation"] is True
    assert round_trip_request(API_KEYS["Metadata"], 1, {})["topics"] is None  # null: all topics
    assert round_trip_request(API_KEYS["Metadata"], 0, {})["topics"] == []
    fetch = round_trip_request(API_KEYS["Fetch"], 11, {"topics": [{"topic": "t", "partitions": [{}]}]})
    assert (fetch["max_bytes"], fetch["replica_id"], fetch["session_epoch"]) == (0x7FFFFFFF, -1, -1)
    assert fetch["topics"][0]["partitions"][0]["log_start_offset"] == -1
    partition = round_trip_response(API_KEYS["Fetch"], 11, {"responses": [{"topic": "t", "partitions": [{}]}]})[
        "responses"][0]["partitions"][0]
    assert partition == {"partition_index": 0, "error_code": 0, "high_watermark": 0, "last_stable_offset": -1,
                         "log_start_offset": -1, "aborted_transactions": None, "preferred_read_replica": -1,
                         "records": None}
    metadata = round_trip_response(API_KEYS["Metadata"], 8, {"brokers": [{}], "topics": [{}]})
    assert metadata["controller_id"] == -1 and metadata["cluster_id"] is None
    assert metadata["brokers"][0]["rack"] is None
    assert metadata["topics"][0]["topic_authorized_operations"] == -2147483648
    assert metadata["cluster_authorized_operations"] == -2147483648
    produce = round_trip_response(API_KEYS["Produce"], 8, {"responses": [{"partition_responses": [{}]}]})
    assert produce["responses"][0]["partition_responses"][0]["log_append_time_ms"] == -1
    assert round_trip_response(API_KEYS["InitProducerId"], 1, {})["producer_id"] == -1
    assert round_trip_request(API_KEYS["CreateTopics"], 4, {})["timeout_ms"] == 60000


def test_fields_absent_at_a_version_are_ignored_on_encode_and_absent_on_decode():
    full = {"throttle_time_ms": 5, "brokers": [], "cluster_id": "c", "controller_id": 1, "topics": [],
            "cluster_authorized_operations": 7}
    frame_v0 = response_frame(API_KEYS["Metadata"], 0, full)
    assert frame_v0 == response_frame(API_KEYS["Metadata"], 0, {"brokers": [], "topics": []})
    assert decode_response(API_KEYS["Metadata"], 0, frame_v0[4:])[1] == {"brokers": [], "topics": []}


def test_snake_case_names():
    assert [snake_case(n) for n in ("TopicData", "PartitionIndex", "ThrottleTimeMs", "timeoutMs", "IsrNodes",
                                    "ZkMigrationReady", "ErrorCode")] == [
        "topic_data", "partition_index", "throttle_time_ms", "timeout_ms", "isr_nodes", "zk_migration_ready",
        "error_code"]


# --- exact bytes ---------------------------------------------------------------------------------


def test_api_versions_v3_response_has_a_v0_header_and_a_flexible_body():
    body = {"error_code": 0, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}], "throttle_time_ms": 0}
    frame = response_frame(18, 3, body, correlation_id=7)
    expected = (b"\x00\x00\x00\x07"            # correlation id, and no header tag byte (header v0)
                b"\x00\x00"                    # error_code
                b"\x02"                        # compact array: 1 element
                b"\x00\x12\x00\x00\x00\x04"    # api_key 18, min 0, max 4
                b"\x00"                        # the element's tagged fields
                b"\x00\x00\x00\x00"            # throttle_time_ms
                b"\x00")                       # the body's tagged fields
    assert frame == struct.pack(">i", len(expected)) + expected
    assert response_frame(18, 4, body, correlation_id=7) == frame


def test_flexible_responses_other_than_api_versions_have_a_v1_header():
    frame = response_frame(API_KEYS["IncrementalAlterConfigs"], 1, {}, correlation_id=9)
    assert frame == b"\x00\x00\x00\x0b" + b"\x00\x00\x00\x09" + b"\x00" + b"\x00\x00\x00\x00" + b"\x01" + b"\x00"
    frame_v0 = response_frame(API_KEYS["IncrementalAlterConfigs"], 0, {}, correlation_id=9)
    assert frame_v0 == b"\x00\x00\x00\x0c" + b"\x00\x00\x00\x09" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"


def test_api_versions_fallback_response_is_a_v0_body_with_error_35():
    frame = api_versions_fallback_response(11)
    body = b"\x00\x23" + b"\x00\x00\x00\x01" + b"\x00\x12\x00\x00\x00\x04"
    assert frame == struct.pack(">ii", 4 + len(body), 11) + body
    assert decode_response(18, 0, frame[4:]) == (11, {"error_code": 35, "api_keys": [
        {"api_key": 18, "min_version": 0, "max_version": 4}]})


def test_request_header_v2_keeps_a_classic_client_id_and_adds_tagged_fields():
    frame = encode_request(18, 3, 5, "ab", {"client_software_name": "x", "client_software_version": "1"})
    assert frame[4:] == (b"\x00\x12\x00\x03\x00\x00\x00\x05" + b"\x00\x02ab" + b"\x00"
                         + b"\x02x" + b"\x021" + b"\x00")
    frame_v1 = encode_request(18, 2, 5, None, {})
    assert frame_v1 == b"\x00\x00\x00\x0a" + b"\x00\x12\x00\x02\x00\x00\x00\x05" + b"\xff\xff"


def test_api_versions_above_our_max_still_has_its_v2_header_decoded():
    frame = bytearray(encode_request(18, 4, 77, "kp", {"client_software_name": "n", "client_software_version": "v"}))
    frame[6:8] = struct.pack(">h", 9)  # as if the client spoke ApiVersions v9
    header, offset = decode_request_header(bytes(frame[4:]))
    assert header == {"api_key": 18, "api_version": 9, "correlation_id": 77, "client_id": "kp"}
    assert offset == 2 + 2 + 4 + 4 + 1
    with pytest.raises(UnsupportedVersionError) as raised:
        decode_request(18, 9, bytes(frame[4:]), offset)
    assert (raised.value.api_key, raised.value.api_version) == (18, 9)


def test_unknown_api_keys_and_versions_decode_their_header_and_refuse_the_body():
    header = struct.pack(">hhih", 99, 3, 12, 1) + b"c" + b"\x05\x06"
    assert decode_request_header(header) == ({"api_key": 99, "api_version": 3, "correlation_id": 12,
                                              "client_id": "c"}, 11)
    with pytest.raises(UnsupportedVersionError, match="unknown API key 99"):
        decode_request(99, 3, header, 11)
    # Fetch v12 is flexible: header v2, whose tag byte is part of the header.
    fetch12 = struct.pack(">hhih", 1, 12, 4, -1) + b"\x00" + b"body"
    assert decode_request_header(fetch12) == ({"api_key": 1, "api_version": 12, "correlation_id": 4,
                                               "client_id": None}, 11)
    with pytest.raises(UnsupportedVersionError, match="Fetch v12"):
        decode_request(1, 12, fetch12, 11)
    with pytest.raises(UnsupportedVersionError):
        encode_response(1, 3, 0, {})


def test_produce_v0_to_v2_headers_and_bodies_decode():
    for version in (0, 1, 2):
        body = {"acks": 1, "timeout_ms": 10, "topic_data": [{"name": "t", "partition_data": [
            {"index": 0, "records": b"r"}]}]}
        assert round_trip_request(0, version, body) == body


# --- records -------------------------------------------------------------------------------------


def test_records_decode_to_a_slice_of_the_input_without_a_copy():
    frame = encode_request(0, 8, 1, "c", {"acks": 1, "topic_data": [{"name": "t", "partition_data": [
        {"index": 3, "records": b"\x01\x02\x03"}]}]})
    buf = bytearray(frame[4:])
    header, offset = decode_request_header(memoryview(buf))
    records = decode_request(0, 8, memoryview(buf), offset)["topic_data"][0]["partition_data"][0]["records"]
    assert isinstance(records, memoryview) and records == b"\x01\x02\x03"
    buf[-1] = 0x09  # a view of the caller's buffer, not a copy
    assert records == b"\x01\x02\x09"


def test_records_chunks_are_written_back_to_back_and_large_ones_are_not_copied():
    big = bytes(range(256)) * 256  # 64 KiB: passed through
    small = b"tail"
    for compact_version, key in ((11, API_KEYS["Fetch"]),):
        chunks = encode_response(key, compact_version, 5, {"responses": [{"topic": "t", "partitions": [
            {"records": [big, memoryview(small)]}, {"records": (b"a", b"", b"bc")}, {"records": b""}]}]})
        assert any(chunk is big for chunk in chunks)
        frame = b"".join(chunks)
        assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
        partitions = decode_response(key, compact_version, frame[4:])[1]["responses"][0]["partitions"]
        assert [bytes(p["records"]) for p in partitions] == [big + small, b"abc", b""]


def test_records_accept_a_memoryview_of_any_format():
    words = array("i", [1, 2, 3])
    body = {"responses": [{"topic": "t", "partitions": [{"records": memoryview(words)}]}]}
    decoded = round_trip_response(API_KEYS["Fetch"], 4, body)
    assert bytes(decoded["responses"][0]["partitions"][0]["records"]) == words.tobytes()
    big = array("q", range(8192))  # 64 KiB, split into its own chunk
    decoded = round_trip_response(API_KEYS["Fetch"], 4, {"responses": [{"partitions": [{"records": [memoryview(big)]}]}]})
    assert bytes(decoded["responses"][0]["partitions"][0]["records"]) == big.tobytes()


def test_null_records_and_empty_records_differ():
    for records in (None, b""):
        body = {"responses": [{"topic": "t", "partitions": [{"records": records}]}]}
        assert round_trip_response(API_KEYS["Fetch"], 11, body)["responses"][0]["partitions"][0]["records"] == records


def test_encoding_a_bad_value_names_the_message():
    with pytest.raises(ValueError, match="FetchResponse v11"):
        encode_response(1, 11, 0, {"throttle_time_ms": "soon"})
    with pytest.raises(ValueError, match="MetadataResponse v1"):
        encode_response(3, 1, 0, {"controller_id": 1 << 40})
    with pytest.raises(ValueError, match="ProduceRequest v3"):
        encode_request(0, 3, 0, None, {"topic_data": [{"name": None}]})


# --- the registry --------------------------------------------------------------------------------


def test_advertised_versions_are_profile_a_and_the_group_apis():
    assert SUPPORTED_VERSIONS == {0: (0, 8), 1: (4, 11), 2: (1, 10), 3: (0, 8), 8: (2, 7), 9: (1, 7), 10: (0, 4),
                                  11: (0, 5), 12: (0, 3), 13: (0, 3), 14: (0, 3), 15: (0, 5), 16: (0, 5), 17: (0, 1),
                                  18: (0, 4), 19: (0, 4), 20: (0, 3), 21: (0, 1), 22: (0, 4), 23: (2, 3),
                                  24: (0, 5), 25: (0, 4), 26: (0, 4), 28: (0, 4), 29: (0, 3),
                                  30: (0, 3), 31: (0, 3), 32: (0, 2), 33: (0, 2), 36: (0, 2), 37: (0, 3), 42: (0, 2), 44: (0, 1), 47: (0, 0),
                                  50: (0, 0), 51: (0, 0), 60: (0, 1), 61: (0, 0), 65: (0, 0), 66: (0, 1), 75: (0, 0)}
    assert {API_NAMES[key]: key for key in API_NAMES} == API_KEYS
    assert API_KEYS["Produce"] == 0 and API_KEYS["ApiVersions"] == 18 and API_NAMES[44] == "IncrementalAlterConfigs"
    assert API_KEYS["JoinGroup"] == 11 and API_NAMES[16] == "ListGroups" and API_NAMES[42] == "DeleteGroups"
    # KIP-848's heartbeat has a table (to be refused with) but is never advertised.
    assert APIS[68].name == "ConsumerGroupHeartbeat" and 68 not in SUPPORTED_VERSIONS


def test_decode_request_refuses_apis_that_are_not_advertised():
    frame = encode_request(68, 0, 8, "c", {"group_id": "g", "member_id": "m", "member_epoch": 0})
    header, offset = decode_request_header(frame[4:])
    assert offset == 2 + 2 + 4 + 3 + 1  # a flexible request header (v2): its tag byte read as the header's
    with pytest.raises(UnsupportedVersionError, match="ConsumerGroupHeartbeat v0 is not supported .*none of its "
                                                      "versions yet"):
        decode_request(header["api_key"], header["api_version"], frame[4:], offset)
    assert decode_message(68, 0, "request", frame[4:], offset) == {
        "group_id": "g", "member_id": "m", "member_epoch": 0, "instance_id": None, "rack_id": None,
        "rebalance_timeout_ms": -1, "subscribed_topic_names": None, "server_assignor": None, "topic_partitions": None}


def test_consumer_group_heartbeat_refusal_has_the_null_assignment_of_kafkas_layout():
    body = {"throttle_time_ms": 0, "error_code": 35, "error_message": "no", "member_id": None, "member_epoch": 0,
            "heartbeat_interval_ms": 0}
    frame = response_frame(68, 0, body, correlation_id=3)
    expected = (b"\x00\x00\x00\x03" + b"\x00"    # correlation id, header tagged fields (header v1)
                + b"\x00\x00\x00\x00" + b"\x00\x23"  # throttle, error 35
                + b"\x03no" + b"\x00"                # compact nullable error message, null member id
                + b"\x00\x00\x00\x00" * 2            # member epoch, heartbeat interval
                + b"\xff"                             # Assignment: a null struct (presence -1)
                + b"\x00")                            # the body's tagged fields
    assert frame == struct.pack(">i", len(expected)) + expected


def test_is_flexible():
    assert [is_flexible(18, v) for v in range(6)] == [False, False, False, True, True, True]
    assert not any(is_flexible(key, version) for key in (0, 1, 3, 8, 11, 12, 13, 14, 19, 20, 21, 23, 32, 47)
                   for version in range(APIS[key].versions[0], APIS[key].versions[1] + 1))
    assert [is_flexible(2, v) for v in range(1, 11)] == [False] * 5 + [True] * 5  # ListOffsets v6+
    assert all(is_flexible(key, version) for key in (60, 75) for version in range(APIS[key].versions[1] + 1))
    assert [is_flexible(10, v) for v in range(5)] == [False, False, False, True, True]
    assert [is_flexible(16, v) for v in range(5)] == [False, False, False, True, True]
    assert [is_flexible(15, v) for v in range(6)] == [False] * 5 + [True]  # DescribeGroups v5+
    assert [is_flexible(42, v) for v in range(3)] == [False, False, True]
    assert [is_flexible(9, v) for v in range(1, 8)] == [False] * 5 + [True] * 2  # OffsetFetch v6+
    assert is_flexible(68, 0) and is_flexible(68, 1)
    assert [is_flexible(22, v) for v in range(5)] == [False, False, True, True, True]
    assert [is_flexible(44, 0), is_flexible(44, 1), is_flexible(1, 12), is_flexible(999, 0)] == [False, True, True, False]


# --- primitives ----------------------------------------------------------------------------------


@pytest.mark.parametrize("value, encoded", [
    (0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"), (300, b"\xac\x02"), (16383, b"\xff\x7f"),
    (16384, b"\x80\x80\x01"), (2097151, b"\xff\xff\x7f"), (2097152, b"\x80\x80\x80\x01"),
    (0xFFFFFFFF, b"\xff\xff\xff\xff\x0f")])
def test_uvarint_boundaries(value, encoded):
    assert codec.write_uvarint(value) == encoded
    assert codec.read_uvarint(b"\xaa" + encoded + b"\xbb", 1) == (value, 1 + len(encoded))


@pytest.mark.parametrize("value, zigzag", [(0, 0), (-1, 1), (1, 2), (-2, 3), (2, 4), (63, 126), (-64, 127),
                                           (64, 128), (0x7FFFFFFF, 0xFFFFFFFE), (-0x80000000, 0xFFFFFFFF)])
def test_zigzag_varint(value, zigzag):
    assert codec.write_varint(value) == codec.write_uvarint(zigzag)
    assert codec.read_varint(codec.write_varint(value), 0) == (value, len(codec.write_uvarint(zigzag)))


@given(st.integers(-(1 << 63), (1 << 63) - 1))
def test_varlong_round_trips(value):
    encoded = codec.write_varlong(value)
    assert len(encoded) <= 10 and codec.read_varlong(encoded, 0) == (value, len(encoded))


def test_varint_limits():
    with pytest.raises(ValueError):
        codec.write_varint(1 << 31)
    with pytest.raises(ValueError):
        codec.write_uvarint(-1)
    with pytest.raises(ProtocolError, match="longer than 5"):
        codec.read_uvarint(b"\x80\x80\x80\x80\x80\x01", 0)
    with pytest.raises(ProtocolError, match="truncated"):
        codec.read_uvarint(b"\x80\x80", 0)
    assert codec.read_varlong(b"\xff" * 9 + b"\x01", 0) == (-(1 << 63), 10)


def test_null_and_empty_strings_bytes_and_arrays_differ():
    assert codec.write_string(None, nullable=True) == b"\xff\xff"
    assert codec.write_string("", nullable=True) == b"\x00\x00"
    assert codec.write_string(None, compact=True, nullable=True) == b"\x00"
    assert codec.write_string("", compact=True) == b"\x01"
    assert codec.write_string("\u00e9", compact=True) == b"\x03\xc3\xa9"
    assert codec.read_string(b"\x00", 0, compact=True, nullable=True) == (None, 1)
    assert codec.read_string(b"\x01", 0, compact=True) == ("", 1)
    assert codec.write_bytes(None, nullable=True) == b"\xff\xff\xff\xff"
    assert codec.read_bytes(b"\x00\x00\x00\x00", 0, nullable=True) == (b"", 4)
    assert codec.read_bytes(b"\xff\xff\xff\xff", 0, nullable=True) == (None, 4)
    assert codec.write_array(None, codec.write_int32, compact=True, nullable=True) == b"\x00"
    assert codec.write_array([], codec.write_int32, compact=True) == b"\x01"
    assert codec.write_array([1, 2], codec.write_int16) == b"\x00\x00\x00\x02\x00\x01\x00\x02"
    assert codec.read_array(b"\x00", 0, codec.read_int32, compact=True, nullable=True) == (None, 1)
    assert codec.read_array(b"\x03\x00\x01\x00\x02", 0, codec.read_int16, compact=True) == ([1, 2], 5)
    for reader, data in ((codec.read_string, b"\x00"), (codec.read_array, b"\x00")):
        with pytest.raises(ProtocolError):
            reader(data, 0, compact=True) if reader is codec.read_string else reader(data, 0, codec.read_int8,
                                                                                      compact=True)
    with pytest.raises(ValueError):
        codec.write_string(None)
    # In a message: a null and an empty nullable array survive as themselves.
    for aborted in (None, []):
        body = {"responses": [{"topic": "t", "partitions": [{"aborted_transactions": aborted, "records": b""}]}]}
        decoded = round_trip_response(API_KEYS["Fetch"], 4, body)
        assert decoded["responses"][0]["partitions"][0]["aborted_transactions"] == aborted


def test_fixed_width_primitives():
    assert codec.write_int16(-2) == b"\xff\xfe" and codec.read_int16(b"\xff\xfe", 0) == (-2, 2)
    assert codec.read_int64(codec.write_int64(-(1 << 63)), 0) == (-(1 << 63), 8)
    assert codec.read_uint32(b"\xff\xff\xff\xff", 0) == (0xFFFFFFFF, 4)
    assert codec.read_bool(b"\x00\x01", 1) == (True, 2) and codec.write_bool(False) == b"\x00"
    assert codec.read_float64(codec.write_float64(1.5), 0) == (1.5, 8)
    value = uuid.uuid4()
    assert codec.read_uuid(b"x" + codec.write_uuid(value), 1) == (value, 17)
    with pytest.raises(ProtocolError, match="int32: truncated"):
        codec.read_int32(b"\x00\x00\x00", 0)
    with pytest.raises(ProtocolError):
        codec.read_uuid(b"\x00" * 15, 0)


def test_tagged_fields_primitives():
    section = codec.write_tagged_fields({5: b"xyz", 1: b""})
    assert section == b"\x02" + b"\x01\x00" + b"\x05\x03xyz"
    fields, end = codec.read_tagged_fields(section + b"!", 0)
    assert end == len(section) and {tag: bytes(raw) for tag, raw in fields.items()} == {1: b"", 5: b"xyz"}
    assert codec.write_tagged_fields({}) == b"\x00"
    with pytest.raises(ProtocolError):
        codec.read_tagged_fields(b"\x01\x05\x04xyz", 0)
