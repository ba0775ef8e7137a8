"""``NetworkClient.poll`` (``logstore.client.cluster``), the one selector the producer's sender waits
on, and ``BrokerConnection.read_available`` under it: against ``logstore serve`` and small fake brokers
(``test_connection.fake_broker``): a silent broker does not hold up another's responses and is
reported broken once its request times out; a broker that answers then hangs up has its answers
returned and is reported broken; a closed connection is reported at once; responses a blocking
``request`` read meanwhile are returned without waiting; ``wakeup`` ends a wait from another thread."""

from __future__ import annotations

import threading
import time

import pytest
from test_connection import api_versions, fake_broker

from logstore.client.cluster import NetworkClient
from logstore.client.errors import NetworkError, RequestTimedOutError
from logstore.server.protocol.codec import API_KEYS, encode_response

_API_VERSIONS, _METADATA = API_KEYS["ApiVersions"], API_KEYS["Metadata"]


def _metadata_response(correlation_id: int) -> bytes:
    body = {"brokers": [{"node_id": 7, "host": "127.0.0.1", "port": 1}], "topics": []}
    return b"".join(encode_response(_METADATA, 4, correlation_id, body))


def _answers_versions_only(header, frame):
    return api_versions(header["correlation_id"], header["api_version"]) if header["api_key"] == _API_VERSIONS else None


def _answers_then_hangs_up():
    metadata_requests = []

    def answer(header, frame):
        if header["api_key"] == _API_VERSIONS:
            return api_versions(header["correlation_id"], header["api_version"])
        metadata_requests.append(header["correlation_id"])
        # the first Metadata request is answered, the second one never: the broker hangs up
        return _metadata_response(header["correlation_id"]) if len(metadata_requests) == 1 else b""
    return answer


def _fallback(header, frame):
    """ApiVersions v3 refused (KIP-511's v0 answer), then v2."""
    if header["api_key"] == _API_VERSIONS and header["api_version"] > 2:
        body = {"error_code": 35, "api_keys": [{"api_key": _API_VERSIONS, "min_version": 0, "max_version": 2}]}
        return b"".join(encode_response(_API_VERSIONS, 0, header["correlation_id"], body))
    return None


def _metadata(connection) -> int:
    return connection.send("Metadata", {"topics": [], "allow_auto_topic_creation": False})


def test_a_silent_broker_does_not_hold_up_another_and_times_out(server):
    with fake_broker(lambda h, f: _fallback(h, f) or _answers_versions_only(h, f)) as port, \
            NetworkClient(server.bootstrap_servers, request_timeout_ms=400) as client:
        live = client.connection_to(*_address(server))
        silent = client.connection_to("127.0.0.1", port)
        asked = _metadata(live), _metadata(silent)
        began = time.monotonic()
        result = client.poll(5000)
        assert time.monotonic() - began < 0.35, "the live broker's answer waited for the silent one"
        assert [r.correlation_id for r in result.responses[live]] == [asked[0]] and not result.broken
        while silent not in result.broken:
            assert time.monotonic() - began < 5
            result = client.poll(5000, [silent])
        assert isinstance(result.broken[silent], RequestTimedOutError)
        assert 0.35 < time.monotonic() - began < 5 and not silent.connected and live.connected


def test_a_broker_that_answers_then_hangs_up_has_its_answers_returned_and_is_broken():
    answer = _answers_then_hangs_up()
    with fake_broker(lambda h, f: _fallback(h, f) or answer(h, f)) as port, \
            NetworkClient(f"127.0.0.1:{port}", request_timeout_ms=5000) as client:
        connection = client.connection_to("127.0.0.1", port)
        first, second = _metadata(connection), _metadata(connection)
        responses, broken = {}, {}
        deadline = time.monotonic() + 5
        while connection not in broken and time.monotonic() < deadline:
            result = client.poll(1000, [connection])
            for answered, got in result.responses.items():
                responses.setdefault(answered, []).extend(got)
            broken.update(result.broken)
        assert [r.correlation_id for r in responses[connection]] == [first] and second == first + 1
        assert "closed the connection" in str(broken[connection]) and not connection.connected


def test_a_closed_connection_is_reported_at_once(server):
    with NetworkClient(server.bootstrap_servers) as client:
        connection = client.connection_to(*_address(server))
        connection.close()
        began = time.monotonic()
        result = client.poll(5000, [connection])
        assert time.monotonic() - began < 1 and isinstance(result.broken[connection], NetworkError)
        with pytest.raises(ValueError, match="-1"):
            client.poll(-1)


def test_responses_read_by_a_blocking_request_are_returned_without_waiting(server):
    with NetworkClient(server.bootstrap_servers) as client:
        connection = client.connection_to(*_address(server))
        asked = [_metadata(connection), _metadata(connection)]
        connection.request("Metadata", {"topics": [], "allow_auto_topic_creation": False})  # reads all three
        assert connection.has_responses
        began = time.monotonic()
        result = client.poll(5000, [connection])
        assert time.monotonic() - began < 1
        assert [r.correlation_id for r in result.responses[connection]] == asked and not connection.has_responses


def test_wakeup_ends_a_wait_from_another_thread(server):
    with NetworkClient(server.bootstrap_servers) as client:
        client.poll(0)  # the selector exists from the first poll on
        threading.Timer(0.2, client.wakeup).start()
        began = time.monotonic()
        result = client.poll(5000)
        assert 0.15 < time.monotonic() - began < 2 and result.responses == {} and result.broken == {}
        client.wakeup()  # a wakeup with nobody waiting ends the next wait at once
        began = time.monotonic()
        client.poll(5000)
        assert time.monotonic() - began < 1


def _address(server) -> tuple[str, int]:
    host, port = server.bootstrap_servers.rsplit(":", 1)
    return host, int(port)
