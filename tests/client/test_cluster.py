"""``NetworkClient`` (``logstore.client.cluster``): bootstrap from several addresses (a dead one first
is skipped), the cluster metadata of ``logstore serve``, reconnect backoff on a manual clock (a dead
broker is not tried again before its backoff passed, and the backoff doubles up to its maximum), and
Kafka's ``bootstrap.servers`` syntax."""

from __future__ import annotations

import random
import socket

import pytest

from logstore.client.cluster import NetworkClient, parse_bootstrap_servers
from logstore.client.errors import NetworkError
from logstore.clock import ManualClock


@pytest.fixture
def dead_port():
    """A port that refuses connections (bound, not listening) for the test's duration."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        yield probe.getsockname()[1]


def test_bootstrap_skips_a_dead_address_and_reads_the_metadata(server, dead_port):
    with NetworkClient(f"127.0.0.1:{dead_port},{server.bootstrap_servers}") as client:
        metadata = client.refresh_metadata(["orders"])
        host, port = server.bootstrap_servers.rsplit(":", 1)
        assert list(metadata.brokers.values()) == [(host, int(port))]
        assert metadata.partitions("orders") == 4
        leader = client.leader_for("orders", 3)
        assert client.connection(leader).connected
        assert client.connect_attempts == 2  # the dead one, then the live one (kept open since)


def test_an_unknown_topic_is_reported_not_raised(server):
    with NetworkClient(server.bootstrap_servers) as client:
        metadata = client.refresh_metadata(["no-such-topic"])
        assert metadata.partitions("no-such-topic") is None and metadata.topic_errors["no-such-topic"] == 3
        with pytest.raises(NetworkError, match="no leader known"):
            client.leader_for("no-such-topic", 0)
        created = client.refresh_metadata(["made-on-demand"], allow_auto_topic_creation=True)
        assert created.partitions("made-on-demand") == 1  # the broker's num.partitions


def test_no_live_broker_names_every_address_tried(dead_port):
    with NetworkClient(f"127.0.0.1:{dead_port}") as client:
        with pytest.raises(NetworkError, match=f"127.0.0.1:{dead_port}: cannot connect"):
            client.refresh_metadata()


def test_a_dead_broker_backs_off_doubling_up_to_the_maximum(dead_port):
    clock = ManualClock()
    client = NetworkClient(f"127.0.0.1:{dead_port}", reconnect_backoff_ms=100, reconnect_backoff_max_ms=400,
                           clock=clock, rng=random.Random(1))
    waits = []
    for _ in range(5):
        with pytest.raises(NetworkError, match="cannot connect"):
            client.connection_to("127.0.0.1", dead_port)
        attempts = client.connect_attempts
        with pytest.raises(NetworkError, match="backing off") as caught:  # not tried again meanwhile
            client.connection_to("127.0.0.1", dead_port)
        assert client.connect_attempts == attempts
        wait_ms = int(str(caught.value).split("next attempt in ")[1].split(" ms")[0])
        waits.append(wait_ms)
        clock.advance(wait_ms)
    assert client.connect_attempts == 5
    for failures, wait_ms in enumerate(waits, start=1):
        base = min(100 * 2 ** (failures - 1), 400)
        assert 0.8 * base <= wait_ms <= 1.2 * base, (failures, waits)


def test_a_broker_that_answers_again_is_used_at_once_after_its_backoff(server):
    clock = ManualClock()
    host, port = server.bootstrap_servers.rsplit(":", 1)
    client = NetworkClient(server.bootstrap_servers, clock=clock)
    client._failed((host, int(port)), 3)  # as after three failed attempts
    with pytest.raises(NetworkError, match="backing off"):
        client.connection_to(host, int(port))
    clock.advance(10_000)
    assert client.connection_to(host, int(port)).connected
    client.close()


@pytest.mark.parametrize("servers, expected", [
    ("a:1", [("a", 1)]), ("a:1, b:2", [("a", 1), ("b", 2)]), (["[::1]:9092"], [("::1", 9092)]),
    ("host.example:65535", [("host.example", 65535)])])
def test_bootstrap_servers_parse(servers, expected):
    assert parse_bootstrap_servers(servers) == expected


@pytest.mark.parametrize("servers", ["", "a", "a:", ":1", "a:0", "a:70000", "a:x", [1], []])
def test_bad_bootstrap_servers_are_refused(servers):
    with pytest.raises(ValueError):
        parse_bootstrap_servers(servers)
