"""The security APIs' tables (``messages_security``) against kafka-python 3.x's own classes.

For every version of SaslHandshake, SaslAuthenticate, DescribeAcls, CreateAcls, DeleteAcls,
DescribeUserScramCredentials and AlterUserScramCredentials, in the two directions a server needs:

- requests as kafka-python encodes them (its ``kafka.protocol.sasl`` and ``kafka.protocol.admin``
  classes) are read by our server-side decoder to the same values, and our encoder writes the same
  bytes;
- responses as our server encodes them are read by kafka-python to the same values;
- named examples (what an admin client and a SASL client send: null filters, prefixed patterns,
  SCRAM upsertions, an error answer). Hypothesis-drawn values of these tables, both ways, are
  ``test_codec_kafka_python.test_both_codecs_write_the_same_bytes_and_read_each_other``, which
  covers every API kafka-python has classes for (its SASL module included).

The plain round trip of every message at every version through our codec alone is
``test_codec.test_every_message_round_trips_at_every_version``, which covers these tables because
they are in ``messages.APIS``; the test here checks that they are.

kafka-python is in the ``clients`` extra, which CI installs: without it these tests fail (never skip).
"""

from __future__ import annotations

import pytest

from codec_strategies import EVERY_MESSAGE
from logstore.server.protocol import messages_security
from logstore.server.protocol.codec import (API_KEYS, SUPPORTED_VERSIONS, decode_response, encode_request,
                                            encode_response, is_flexible)
from logstore.server.protocol.messages import ADVERTISED, APIS
from logstore.server.protocol.schema import NO_DEFAULT, field, fields_at, parse_range
from test_codec_kafka_python import kafka_python_class, normalised, their_decoded_response, their_request_frame
from test_codec_kafka_python import their_response_frame
from test_codec_kafka_python import our_decoded_request as served_decoded_request  # kafka-python: it fails, never skips

SECURITY_KEYS = {spec.key for spec in messages_security.SPECS}

SECURITY_MESSAGES = [message for message in EVERY_MESSAGE if message[0] in SECURITY_KEYS]
"""(api key, version, direction) of every message of every security API."""


def our_decoded_request(frame: bytes) -> tuple[dict, dict]:
    """What the server reads (``test_codec_kafka_python``'s reader), normalised for comparison."""
    header, body = served_decoded_request(frame)
    return header, normalised(body)


def at_version(fields, body: dict, version: int) -> dict:
    """``body`` without the fields (at any depth) that do not exist at ``version``."""
    result = {}
    for f in fields_at(fields, version):
        if f.key not in body:
            continue
        value = body[f.key]
        if f.is_struct and value is not None:
            value = ([at_version(f.fields, item, version) for item in value] if f.is_array
                     else at_version(f.fields, value, version))
        result[f.key] = value
    return result


def every_version(examples):
    """(name, version, body) for every version of each example's API, the body cut to that version."""
    for name, body in examples:
        low, high = SUPPORTED_VERSIONS[API_KEYS[name]]
        for version in range(low, high + 1):
            yield name, version, body


def _id(param) -> str:
    return "" if isinstance(param, dict) else str(param)


# --- the registry --------------------------------------------------------------------------------


def test_the_security_apis_are_advertised_with_their_versions():
    assert {spec.name: (spec.key, spec.versions) for spec in messages_security.SPECS} == {
        "SaslHandshake": (17, (0, 1)), "SaslAuthenticate": (36, (0, 2)), "DescribeAcls": (29, (0, 3)),
        "CreateAcls": (30, (0, 3)), "DeleteAcls": (31, (0, 3)), "DescribeUserScramCredentials": (50, (0, 0)),
        "AlterUserScramCredentials": (51, (0, 0))}
    assert all(spec in ADVERTISED for spec in messages_security.SPECS)
    assert {key: SUPPORTED_VERSIONS[key] for key in SECURITY_KEYS} == {
        17: (0, 1), 36: (0, 2), 29: (0, 3), 30: (0, 3), 31: (0, 3), 50: (0, 0), 51: (0, 0)}
    flexible = {(key, version) for key in SECURITY_KEYS for version in range(SUPPORTED_VERSIONS[key][0],
                                                                            SUPPORTED_VERSIONS[key][1] + 1)
                if is_flexible(key, version)}
    assert flexible == {(36, 2), (29, 2), (29, 3), (30, 2), (30, 3), (31, 2), (31, 3), (50, 0), (51, 0)}
    # Every version of every security message is in the codec's round-trip and fuzz lists.
    assert len(SECURITY_MESSAGES) == 2 * (2 + 3 + 4 + 4 + 4 + 1 + 1)


def _from_json(spec: dict, high: int):
    """A field of Kafka's JSON spec as our ``schema.field`` would write it, None if it exists only
    above version ``high``."""
    low = parse_range(spec["versions"])[0]
    if low > high:
        return None
    subfields = [sub for sub in (_from_json(item, high) for item in spec.get("fields", ())) if sub is not None]
    return field(spec["name"], spec["type"], spec["versions"], nullable=spec.get("nullableVersions"),
                 default=spec.get("default", NO_DEFAULT), fields=subfields, tag=spec.get("tag"),
                 tagged=spec.get("taggedVersions"))


@pytest.mark.parametrize("spec", messages_security.SPECS, ids=lambda spec: spec.name)
def test_each_table_is_kafka_s_json_spec_as_kafka_python_ships_it(spec):
    """Field for field (names, types, versions, nullable versions, defaults, tags, order) the spec
    kafka-python generates its classes from, less the fields above our highest version."""
    for direction, ours in (("request", spec.request), ("response", spec.response)):
        their_json = kafka_python_class(spec.key, direction)._json
        assert their_json["apiKey"] == spec.key
        assert parse_range(their_json["flexibleVersions"]) == spec.flexible
        expected = [item for item in (_from_json(f, spec.versions[1]) for f in their_json["fields"]) if item]
        assert list(ours) == expected, direction


# --- what clients send, read by us ---------------------------------------------------------------

ACL_FILTER = {"resource_type_filter": 2, "resource_name_filter": "orders", "pattern_type_filter": 4,
              "principal_filter": "User:alice", "host_filter": "*", "operation": 3, "permission_type": 3}
ANY_ACL_FILTER = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                  "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}

REQUESTS = list(every_version([
    ("SaslHandshake", {"mechanism": "SCRAM-SHA-256"}),
    ("SaslHandshake", {"mechanism": "PLAIN"}),
    # The client-first message of SCRAM, and PLAIN's NUL-separated token.
    ("SaslAuthenticate", {"auth_bytes": b"n,,n=alice,r=fyko+d2lbbFgONRv9qkxdawL"}),
    ("SaslAuthenticate", {"auth_bytes": b"\x00alice\x00s\xc3\xa9cret"}),
    ("SaslAuthenticate", {"auth_bytes": b""}),
    ("DescribeAcls", ACL_FILTER),
    ("DescribeAcls", ANY_ACL_FILTER),
    ("CreateAcls", {"creations": [
        {"resource_type": 2, "resource_name": "orders", "resource_pattern_type": 3, "principal": "User:alice",
         "host": "*", "operation": 3, "permission_type": 3},
        {"resource_type": 3, "resource_name": "team-", "resource_pattern_type": 4, "principal": "User:bob",
         "host": "10.0.0.1", "operation": 6, "permission_type": 2}]}),
    ("CreateAcls", {"creations": []}),
    ("DeleteAcls", {"filters": [ACL_FILTER, ANY_ACL_FILTER]}),
    ("DescribeUserScramCredentials", {"users": None}),
    ("DescribeUserScramCredentials", {"users": [{"name": "alice"}, {"name": "b\u00f6b"}]}),
    ("AlterUserScramCredentials", {"deletions": [{"name": "bob", "mechanism": 2}], "upsertions": [
        {"name": "alice", "mechanism": 1, "iterations": 8192, "salt": bytes(range(16)),
         "salted_password": bytes(range(32))}]}),
    ("AlterUserScramCredentials", {"deletions": [], "upsertions": []}),
]))


@pytest.mark.parametrize("name, version, body", REQUESTS, ids=_id)
def test_we_read_what_kafka_python_sends(name, version, body):
    key = API_KEYS[name]
    body = at_version(APIS[key].request, body, version)
    frame = their_request_frame(key, version, body, correlation_id=1234, client_id="kp-client")
    header, decoded = our_decoded_request(frame)
    assert header == {"api_key": key, "api_version": version, "correlation_id": 1234, "client_id": "kp-client"}
    assert decoded == body
    assert encode_request(key, version, 1234, "kp-client", body) == frame


def test_a_v0_acl_filter_has_no_pattern_type_and_reads_as_literal():
    """v0 predates prefixed ACLs (KIP-290): no pattern type on the wire, our decoder has no key for it."""
    v0 = their_request_frame(API_KEYS["DescribeAcls"], 0, at_version(APIS[29].request, ACL_FILTER, 0))
    v1 = their_request_frame(API_KEYS["DescribeAcls"], 1, ACL_FILTER)
    assert len(v1) == len(v0) + 1
    assert "pattern_type_filter" not in our_decoded_request(v0)[1]
    assert our_decoded_request(v1)[1]["pattern_type_filter"] == 4
    # A v1+ request that leaves the pattern type out gets the spec's default, LITERAL (3).
    frame = encode_request(API_KEYS["CreateAcls"], 2, 1, "c", {"creations": [{"resource_name": "t"}]})
    assert our_decoded_request(frame)[1]["creations"][0]["resource_pattern_type"] == 3


# --- what we answer, read by kafka-python --------------------------------------------------------

RESPONSES = list(every_version([
    ("SaslHandshake", {"error_code": 0, "mechanisms": ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]}),
    ("SaslHandshake", {"error_code": 33, "mechanisms": ["SCRAM-SHA-512"]}),
    ("SaslAuthenticate", {"error_code": 0, "error_message": None,
                          "auth_bytes": b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096",
                          "session_lifetime_ms": 0}),
    ("SaslAuthenticate", {"error_code": 58, "error_message": "Authentication failed during authentication due to "
                          "invalid credentials with SASL mechanism SCRAM-SHA-256", "auth_bytes": b"",
                          "session_lifetime_ms": 3600000}),
    ("DescribeAcls", {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "resources": [
        {"resource_type": 2, "resource_name": "orders", "pattern_type": 3, "acls": [
            {"principal": "User:alice", "host": "*", "operation": 3, "permission_type": 3},
            {"principal": "User:bob", "host": "*", "operation": 4, "permission_type": 2}]},
        {"resource_type": 3, "resource_name": "team-", "pattern_type": 4, "acls": []}]}),
    ("DescribeAcls", {"throttle_time_ms": 5, "error_code": 54, "error_message": "security is disabled",
                      "resources": []}),
    ("CreateAcls", {"throttle_time_ms": 0, "results": [{"error_code": 0, "error_message": None},
                                                       {"error_code": 87, "error_message": "invalid host"}]}),
    ("DeleteAcls", {"throttle_time_ms": 0, "filter_results": [
        {"error_code": 0, "error_message": None, "matching_acls": [
            {"error_code": 0, "error_message": None, "resource_type": 2, "resource_name": "orders",
             "pattern_type": 3, "principal": "User:alice", "host": "*", "operation": 3, "permission_type": 3}]},
        {"error_code": 31, "error_message": "not authorized", "matching_acls": []}]}),
    ("DescribeUserScramCredentials", {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "results": [
        {"user": "alice", "error_code": 0, "error_message": None, "credential_infos": [
            {"mechanism": 1, "iterations": 8192}, {"mechanism": 2, "iterations": 4096}]},
        {"user": "nobody", "error_code": 91, "error_message": "Attempt to describe a user credential that does "
                                                              "not exist", "credential_infos": []}]}),
    ("AlterUserScramCredentials", {"throttle_time_ms": 0, "results": [
        {"user": "alice", "error_code": 0, "error_message": None},
        {"user": "bob", "error_code": 93, "error_message": "Iterations 1 is less than the minimum 4096"}]}),
]))


@pytest.mark.parametrize("name, version, body", RESPONSES, ids=_id)
def test_kafka_python_reads_our_responses(name, version, body):
    key = API_KEYS[name]
    body = at_version(APIS[key].response, body, version)
    frame = b"".join(encode_response(key, version, 77, body))
    correlation_id, decoded = their_decoded_response(key, version, frame)
    assert correlation_id == 77
    assert decoded == normalised(body)
    assert frame == their_response_frame(key, version, body, correlation_id=77)
    assert normalised(decode_response(key, version, frame[4:])) == (77, normalised(body))


# --- every message, both ways, drawn from our tables ---------------------------------------------
