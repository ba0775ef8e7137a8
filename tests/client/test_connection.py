"""``BrokerConnection`` (``logstore.client.connection``) against ``logstore serve`` (an in-process
``KafkaServer`` on 127.0.0.1) and against small fake brokers that misbehave on purpose: a silent one,
one that hangs up, one that answers with the wrong correlation id, one that only speaks an older
ApiVersions. Pins: versions are negotiated to the highest both sides speak; several requests in
flight get their own responses, in order; every failure closes the connection and raises a
``NetworkError`` (``RequestTimedOutError`` for silence) within the timeout."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logstore.bench.serve import BrokerProcess
from logstore.client.connection import BrokerConnection
from logstore.client.errors import NetworkError, NoCommonVersionError, RequestTimedOutError
from logstore.server.protocol.codec import API_KEYS, SUPPORTED_VERSIONS, decode_request_header, encode_response
from logstore.server.protocol.messages import APIS


def address(server) -> tuple[str, int]:
    host, port = server.bootstrap_servers.rsplit(":", 1)
    return host, int(port)


def test_versions_are_the_highest_both_sides_speak(server):
    with BrokerConnection(*address(server)) as connection:
        for name in ("ApiVersions", "Metadata", "Produce", "Fetch", "ListOffsets", "OffsetCommit"):
            key = API_KEYS[name]
            assert connection.versions[key] == min(SUPPORTED_VERSIONS[key][1], APIS[key].versions[1]), name
        assert connection.broker_versions == {key: tuple(v) for key, v in SUPPORTED_VERSIONS.items()}


def test_a_metadata_request_describes_the_broker_and_the_topic(server):
    host, port = address(server)
    with BrokerConnection(host, port) as connection:
        body = connection.request("Metadata", {"topics": [{"name": "t"}]})
    assert [(b["host"], b["port"]) for b in body["brokers"]] == [(host, port)]
    (topic,) = body["topics"]
    assert topic["name"] == "t" and topic["error_code"] == 0 and len(topic["partitions"]) == 3


def test_requests_in_flight_get_their_own_responses_in_order(server):
    with BrokerConnection(*address(server), max_in_flight=3) as connection:
        sent = []
        for i in range(7):  # more than max_in_flight: send waits for room and keeps what arrived
            api = "Metadata" if i % 2 else "ApiVersions"
            sent.append((connection.send(api, {"topics": [{"name": "t"}]} if i % 2 else {}), API_KEYS[api]))
        responses = []
        deadline = time.monotonic() + 10
        while len(responses) < 7 and time.monotonic() < deadline:
            responses += connection.poll(1000)
        assert [(r.correlation_id, r.api_key) for r in responses] == sent
        assert all(r.body["error_code"] == 0 for r in responses if r.api_key == API_KEYS["ApiVersions"])
        assert connection.in_flight == 0


@settings(max_examples=25, deadline=None)
@given(steps=st.lists(st.sampled_from(["send-metadata", "send-api-versions", "poll", "request"]), max_size=25),
       max_in_flight=st.integers(1, 4))
def test_sends_polls_and_requests_against_a_model(server, steps, max_in_flight):
    """Model: the ids sent and not yet returned, in order. ``poll`` returns a prefix of them; a
    ``request`` returns its own response and keeps the earlier ones for ``poll``; nothing is lost or
    repeated; at most ``max_in_flight`` are ever in flight."""
    with BrokerConnection(*address(server), max_in_flight=max_in_flight) as connection:
        outstanding, returned = [], []
        for step in steps:
            if step.startswith("send"):
                api = "Metadata" if step == "send-metadata" else "ApiVersions"
                outstanding.append(connection.send(api, {"topics": []} if api == "Metadata" else {}))
            elif step == "poll":
                got = [r.correlation_id for r in connection.poll(2000)]
                assert got == outstanding[: len(got)]
                del outstanding[: len(got)]
                returned += got
            else:
                body = connection.request("ApiVersions", {})
                assert body["error_code"] == 0
            assert connection.in_flight <= max_in_flight
        deadline = time.monotonic() + 10
        while outstanding and time.monotonic() < deadline:
            got = [r.correlation_id for r in connection.poll(1000)]
            assert got == outstanding[: len(got)]
            del outstanding[: len(got)]
            returned += got
        assert not outstanding and len(set(returned)) == len(returned)


def test_tansu_negotiates_and_answers_metadata(tmp_path):
    # Tansu: another implementation of the protocol (Rust), with its own version ranges. The clients
    # extra installs it; a missing binary fails here (no skip).
    broker = BrokerProcess("tansu", str(tmp_path))
    try:
        host, port = broker.address.rsplit(":", 1)
        with BrokerConnection(host, int(port)) as connection:
            for name in ("ApiVersions", "Metadata", "Produce", "Fetch"):
                key = API_KEYS[name]
                low, high = connection.broker_versions[key]
                ours = APIS[key].versions
                assert connection.versions[key] == min(high, ours[1]) >= max(low, ours[0]), name
            body = connection.request("Metadata", {"topics": None})
            assert [(b["host"], b["port"]) for b in body["brokers"]] == [(host, int(port))]
    finally:
        broker.stop()


def test_an_api_the_broker_does_not_offer_is_refused_before_sending(server):
    with BrokerConnection(*address(server)) as connection:
        del connection.versions[API_KEYS["Metadata"]]  # as if the broker offered none we speak
        with pytest.raises(NoCommonVersionError, match="Metadata"):
            connection.request("Metadata", {"topics": []})
        assert connection.connected


def test_an_unreachable_broker_is_a_network_error():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, not listening: connections are refused
        with pytest.raises(NetworkError, match="cannot connect"):
            BrokerConnection("127.0.0.1", port, connect_timeout_ms=2000).connect()


# --- fake brokers ------------------------------------------------------------------------------------


@contextlib.contextmanager
def fake_broker(answer):
    """A one-connection broker on 127.0.0.1: ``answer(header, frame) -> bytes | None`` for each
    request (None: say nothing; b"": hang up). Stops within a second of the test's end."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve():
        connection = None
        while connection is None and not stop.is_set():
            with contextlib.suppress(socket.timeout):
                connection, _ = listener.accept()
        if connection is None:
            return
        connection.settimeout(0.2)
        buffer = b""
        with connection:
            while not stop.is_set():
                try:
                    data = connection.recv(65536)
                except socket.timeout:
                    continue
                if not data:
                    return
                buffer += data
                while len(buffer) >= 4 and len(buffer) - 4 >= int.from_bytes(buffer[:4], "big"):
                    size = int.from_bytes(buffer[:4], "big")
                    frame, buffer = buffer[4 : 4 + size], buffer[4 + size :]
                    header, _ = decode_request_header(frame)
                    reply = answer(header, frame)
                    if reply == b"":
                        return
                    if reply:
                        connection.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def api_versions(correlation_id: int, version: int = 2) -> bytes:
    """An ApiVersions response at ``version``: ApiVersions up to v2, Metadata up to v4."""
    body = {"error_code": 0, "throttle_time_ms": 0,
            "api_keys": [{"api_key": API_KEYS["ApiVersions"], "min_version": 0, "max_version": 2},
                         {"api_key": API_KEYS["Metadata"], "min_version": 0, "max_version": 4}]}
    return b"".join(encode_response(API_KEYS["ApiVersions"], version, correlation_id, body))


def test_a_broker_that_speaks_an_older_api_versions_is_asked_again_at_its_version():
    asked = []

    def answer(header, frame):
        asked.append(header["api_version"])
        if header["api_version"] > 2:
            return _fallback_v2(header)
        return api_versions(header["correlation_id"])

    with fake_broker(answer) as port, BrokerConnection("127.0.0.1", port, request_timeout_ms=5000) as connection:
        assert asked == [3, 2]
        assert connection.versions == {API_KEYS["ApiVersions"]: 2, API_KEYS["Metadata"]: 4}


def _fallback_v2(header) -> bytes:
    """KIP-511's answer of a broker whose ApiVersions goes up to v2: v0, UNSUPPORTED_VERSION, its range."""
    body = {"error_code": 35, "api_keys": [{"api_key": API_KEYS["ApiVersions"], "min_version": 0, "max_version": 2}]}
    return b"".join(encode_response(API_KEYS["ApiVersions"], 0, header["correlation_id"], body))


def test_a_silent_broker_times_out_and_the_connection_closes():
    with fake_broker(lambda header, frame: None) as port:
        connection = BrokerConnection("127.0.0.1", port, request_timeout_ms=300)
        began = time.monotonic()
        with pytest.raises(RequestTimedOutError, match="did not answer ApiVersions"):
            connection.connect()
        assert 0.25 < time.monotonic() - began < 5 and not connection.connected


def test_a_broker_that_hangs_up_mid_request_is_a_network_error():
    with fake_broker(lambda header, frame: b"") as port:
        connection = BrokerConnection("127.0.0.1", port, request_timeout_ms=5000)
        with pytest.raises(NetworkError, match="closed the connection"):
            connection.connect()
        assert not connection.connected


def test_a_response_to_another_request_breaks_the_connection():
    with fake_broker(lambda header, frame: api_versions(header["correlation_id"] + 1, header["api_version"])) as port:
        connection = BrokerConnection("127.0.0.1", port, request_timeout_ms=5000)
        with pytest.raises(NetworkError, match="correlation id"):
            connection.connect()
        assert not connection.connected


@pytest.mark.parametrize("name, value", [("port", -1), ("request_timeout_ms", 0), ("max_in_flight", 0),
                                         ("connect_timeout_ms", 1.5)])
def test_bad_settings_are_refused(name, value):
    settings = {"port": 9092, name: value}
    port = settings.pop("port")
    with pytest.raises(ValueError, match=name):
        BrokerConnection("127.0.0.1", port, **settings)
