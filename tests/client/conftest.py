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
