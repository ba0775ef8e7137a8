"""The metrics and probes listener (``KafkaServer(metrics_listen=)``, ``logstore serve
--metrics-listen``): what a Prometheus scrape reads after real clients produced, fetched, joined a
group and failed a login, checked against what they did (parsed with ``prometheus_client``'s own
text parser); ``/healthz`` and ``/readyz`` through the server's life; the listener's bounds (request
size, handler slots, a request that never ends) and its addresses.

Every server binds 127.0.0.1 and is stopped by the test that started it; loops are bounded.
"""

from __future__ import annotations

import logging
import socket
import threading

import pytest

from logstore.server import KafkaServer
from logstore.server.metrics import KAFKA_NAMES, MetricsServer, parse_metrics_address
from wire_client import WireClient
from http_probe import http_get

prometheus_parser = pytest.importorskip("prometheus_client.parser", reason="pip install prometheus-client (test extra)")

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


def scrape(address: str) -> dict[str, dict[tuple, float]]:
    """``{sample name: {sorted label items: value}}`` of a scrape, parsed as Prometheus parses it."""
    status, content_type, text = http_get(address, "/metrics")
    assert status == 200, text
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    samples: dict[str, dict[tuple, float]] = {}
    for family in prometheus_parser.text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def value(samples, name: str, **labels) -> float:
    return samples[name][tuple(sorted((key, str(label)) for key, label in labels.items()))]


def test_a_scrape_counts_what_the_clients_did(tmp_path):
    from kafka import KafkaConsumer, KafkaProducer

    config = {"offsets.topic.num.partitions": 1, "group.initial.rebalance.delay.ms": 0, "num.partitions": 2}
    with KafkaServer(str(tmp_path / "data"), listen="127.0.0.1:0", config=config,
                     metrics_listen="127.0.0.1:0") as server:
        address = server.metrics_address
        before = scrape(address)
        assert "logstore_topic_messages_in_total" not in before  # no sample yet (a family without samples)
        assert value(before, "logstore_partitions") == 0

        producer = KafkaProducer(bootstrap_servers=server.bootstrap_servers, linger_ms=0)
        payload = b"v" * 200
        for index in range(25):
            producer.send("metered", value=payload, partition=0)
        for index in range(15):
            producer.send("metered", value=payload, partition=1)
        producer.flush(10)
        producer.close()

        consumer = KafkaConsumer("metered", bootstrap_servers=server.bootstrap_servers, group_id="meters",
                                 auto_offset_reset="earliest", enable_auto_commit=False)
        try:
            consumed = 0
            for _ in range(100):
                consumed += sum(len(batch) for batch in consumer.poll(timeout_ms=200).values())
                if consumed >= 40:
                    break
            assert consumed == 40
            samples = scrape(address)
        finally:
            consumer.close()

        # BrokerTopicMetrics: every record produced counted once, its batch bytes (records and
        # batch headers) plausible, and what was fetched at least the records' values
        assert value(samples, "logstore_topic_messages_in_total", topic="metered") == 40
        bytes_in = value(samples, "logstore_topic_bytes_in_total", topic="metered")
        assert 40 * len(payload) < bytes_in < 40 * (len(payload) + 100) + 2 * 40 * 61
        assert value(samples, "logstore_topic_bytes_out_total", topic="metered") >= 40 * len(payload)
        # the partitions and their logs
        assert value(samples, "logstore_partitions") == 3
        assert value(samples, "logstore_log_end_offset", topic="metered", partition=0) == 25
        assert value(samples, "logstore_log_end_offset", topic="metered", partition=1) == 15
        assert value(samples, "logstore_log_start_offset", topic="metered", partition=0) == 0
        assert value(samples, "logstore_log_size_bytes", topic="metered", partition=0) > 25 * len(payload)
        assert value(samples, "logstore_log_segments", topic="metered", partition=1) == 1
        # requests per API: counted, and the histogram's count is the same figure
        requests = {dict(labels)["request"]: count for labels, count in samples["logstore_requests_total"].items()}
        for api in ("ApiVersions", "Metadata", "Produce", "Fetch", "FindCoordinator", "JoinGroup", "SyncGroup"):
            assert requests.get(api, 0) >= 1, (api, requests)
            assert value(samples, "logstore_request_total_time_seconds_count", request=api) == requests[api]
            assert value(samples, "logstore_request_total_time_seconds_bucket", request=api, le="+Inf") == requests[api]
        assert "logstore_requests_total" not in before  # no request yet then
        # the group: one Stable group of one member, after at least one rebalance
        assert value(samples, "logstore_groups", state="Stable") == 1
        assert value(samples, "logstore_group_members", state="Stable") == 1
        assert value(samples, "logstore_groups", state="Empty") == 0
        assert value(samples, "logstore_group_rebalances_total") >= 1
        assert value(samples, "logstore_purgatory_size", operation="Heartbeat") >= 1  # the member's session
        assert {dict(labels)["operation"] for labels in samples["logstore_purgatory_size"]} == {
            "Fetch", "Produce", "Rebalance", "Heartbeat"}
        # the network: the consumer's connections are open on the PLAINTEXT listener
        assert value(samples, "logstore_connections", listener="PLAINTEXT") >= 1
        assert value(samples, "logstore_connections_accepted_total") >= 2
        for name in ("logstore_connections_refused_total", "logstore_connections_evicted_total",
                     "logstore_accept_pauses_total"):
            assert value(samples, name) == 0, name
        assert value(samples, "logstore_request_queue_bytes_peak") > 40 * len(payload) / 2
        # the process
        assert value(samples, "process_resident_memory_bytes") > 1 << 20
        assert value(samples, "process_open_fds") > 0
        assert value(samples, "process_threads") >= threading.active_count()
        assert value(samples, "process_cpu_seconds_total") > 0
        # every metric rendered is documented with its Kafka name (or as logstore's own)
        ours = {name.removesuffix("_bucket").removesuffix("_sum").removesuffix("_count")
                for name in samples if name.startswith("logstore_")}
        assert ours <= set(KAFKA_NAMES), ours - set(KAFKA_NAMES)


def test_a_failed_sasl_login_is_counted(tmp_path):
    from logstore.server.security.credentials import CredentialStore

    data = tmp_path / "data"
    data.mkdir()
    CredentialStore(str(data)).set("alice", "SCRAM-SHA-256", "alice-secret")
    config = {"offsets.topic.num.partitions": 1, "connection.failed.authentication.delay.ms": 0,
              "authorizer.enable": "false"}
    with KafkaServer(str(data), listen="SASL_PLAINTEXT://127.0.0.1:0", config=config,
                     metrics_listen="127.0.0.1:0") as server:
        assert value(scrape(server.metrics_address), "logstore_authentications_failed_total") == 0
        client = WireClient(server.bootstrap_servers)
        try:
            assert client.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
            answer = client.call(SASL_AUTHENTICATE, 1, {"auth_bytes": b"\0alice\0wrong-password"})
            assert answer["error_code"] != 0
        finally:
            client.sock.close()
        samples = scrape(server.metrics_address)
        assert value(samples, "logstore_authentications_failed_total") == 1
        assert value(samples, "logstore_authentications_succeeded_total") == 0
        assert value(samples, "logstore_connections_accepted_total") == 1


def test_readyz_follows_the_servers_life(tmp_path):
    server = KafkaServer(str(tmp_path / "data"), listen="127.0.0.1:0", config={"offsets.topic.num.partitions": 1})
    # A listener of our own around the server's whole life: before start and after stop too.
    probes = MetricsServer("127.0.0.1", 0, server.metrics.render, server.readiness).start()
    try:
        assert http_get(probes.address, "/healthz")[::2] == (200, "ok\n")
        assert http_get(probes.address, "/readyz")[::2] == (503, "not started\n")
        status, _type, text = http_get(probes.address, "/metrics")  # the process's own metrics already
        assert status == 200 and "process_threads " in text and "logstore_partitions" not in text
        seen_while_stopping = []
        with server:
            assert http_get(probes.address, "/readyz")[::2] == (200, "ready\n")
            # the store closes inside stop(): the probe answered then is the "stopping" one
            server.store.on_close(lambda: seen_while_stopping.append(http_get(probes.address, "/readyz")[::2]))
        assert seen_while_stopping == [(503, "stopping\n")]
        assert http_get(probes.address, "/readyz")[::2] == (503, "stopped\n")
        assert http_get(probes.address, "/healthz")[0] == 200
    finally:
        probes.stop()


def test_the_servers_own_listener_opens_first_and_closes_last(tmp_path):
    with KafkaServer(str(tmp_path / "data"), listen="127.0.0.1:0", config={"offsets.topic.num.partitions": 1},
                     metrics_listen="127.0.0.1:0") as server:
        address = server.metrics_address
        assert http_get(address, "/readyz")[::2] == (200, "ready\n")
        assert http_get(address, "/nothing-here")[0] == 404
        assert http_get(address, "/metrics", method="HEAD")[::2] == (200, "")
        assert http_get(address, "/metrics", method="POST")[0] == 501
        seen_while_stopping = []
        server.store.on_close(lambda: seen_while_stopping.append(http_get(address, "/readyz")[0]))
    assert seen_while_stopping == [503]
    host, port = address.rsplit(":", 1)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=5).close()


def _raw(address: str, data: bytes) -> bytes:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(data)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received


def test_the_listener_is_bounded():
    probes = MetricsServer("127.0.0.1", 0, lambda: "up 1\n", lambda: None, max_handlers=1, max_request_bytes=512,
                           timeout_ms=300).start()
    try:
        # a request larger than max_request_bytes: refused, whatever follows
        answer = _raw(probes.address, b"GET /metrics HTTP/1.0\r\nX-Pad: " + b"a" * 2000 + b"\r\n\r\n")
        assert answer.startswith(b"HTTP/1.0 431 "), answer[:80]
        # a request that never ends (slowloris): answered 408 once timeout_ms passed, the slot freed
        # (the 431's handler may still hold the only slot for a moment: then this one is closed unread)
        for _ in range(50):
            answer = _raw(probes.address, b"GET /metrics HTTP/1.0\r\nX-Slow: 1\r\n")
            if answer:
                break
        assert answer.startswith(b"HTTP/1.0 408 "), answer[:80]
        # every handler busy (one stalled client holds the only slot): the next one is closed unread
        host, port = probes.address.rsplit(":", 1)
        stalled = socket.create_connection((host, int(port)), timeout=10)
        try:
            stalled.sendall(b"GET /metrics HTTP/1.0\r\n")  # and nothing more
            refused = b""
            for _ in range(50):  # the stalled one is accepted first; until its handler holds the slot
                refused = _raw(probes.address, b"GET /healthz HTTP/1.0\r\n\r\n")
                if refused == b"":
                    break
            assert refused == b"" and probes.rejected >= 1
        finally:
            stalled.close()
        for _ in range(50):  # the slot comes back once the stalled handler saw the close
            if _raw(probes.address, b"GET /healthz HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.0 200 "):
                break
        else:
            raise AssertionError("the handler slot never came back")
    finally:
        probes.stop()


@pytest.mark.parametrize("text, expected", [
    ("9100", ("127.0.0.1", 9100)), (":9100", ("127.0.0.1", 9100)), ("0", ("127.0.0.1", 0)),
    ("0.0.0.0:9100", ("0.0.0.0", 9100)), ("localhost:9", ("localhost", 9)), ("[::1]:9100", ("::1", 9100)),
])
def test_metrics_addresses(text, expected):
    assert parse_metrics_address(text) == expected


@pytest.mark.parametrize("text", ["", "host", "host:", "1:2:3", "::1:9100", "[::1]", "70000", "127.0.0.1:-1"])
def test_a_bad_metrics_address_is_refused_naming_it(text, tmp_path):
    with pytest.raises(ValueError, match="metrics address"):
        parse_metrics_address(text)
    with pytest.raises(ValueError, match="metrics address"):  # InvalidConfigError, before anything binds
        KafkaServer(str(tmp_path / "data"), listen="127.0.0.1:0", metrics_listen=text)


def test_metrics_beyond_loopback_are_warned_about(caplog):
    # 127.0.0.2 is loopback too (no warning); the warning's test binds nothing else: a wildcard
    # address is looked at before binding by the same rule the PLAINTEXT listeners use.
    from logstore.server.metrics import beyond_loopback_warning
    assert beyond_loopback_warning("127.0.0.2", 9100) is None
    assert beyond_loopback_warning("localhost", 9100) is None
    warning = beyond_loopback_warning("0.0.0.0", 9100)
    assert warning is not None and "0.0.0.0:9100" in warning and "no authentication" in warning
    with caplog.at_level(logging.WARNING, logger="logstore.server.metrics"):
        MetricsServer("127.0.0.1", 0, str, lambda: None).start().stop()
    assert not caplog.records
