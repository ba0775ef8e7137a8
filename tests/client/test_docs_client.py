"""The server guide's "Consuming" block (docs/guide/server.md) runs as written against a server:
our Consumer joins group billing, prints every record of the topic once and commits them; its
"Transactions" block turns each order into one invoice, committed with the group's offsets."""

from __future__ import annotations

import contextlib
import io

from docs_snippets import block

from logstore import LogManager, Record
from logstore.client import Consumer
from logstore.server import KafkaServer


def test_the_consuming_block_prints_every_record_and_commits(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = block("docs/guide/server.md", "consumer")
    assert '"127.0.0.1:9092"' in code
    with LogManager([str(tmp_path / "data")]) as store, \
            KafkaServer(store, listen="127.0.0.1:0", config={"group.initial.rebalance.delay.ms": 0}) as server:
        store.create_topic("orders", 2)
        store.append("orders", [Record(b"customer-%d" % i, b"order %d" % i) for i in range(6)])
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(code.replace("127.0.0.1:9092", server.bootstrap_servers), "docs/guide/server.md", "exec"),
                 {})
        lines = printed.getvalue().splitlines()
        # each line: topic partition offset key value headers timestamp
        assert sorted(line.split(" b'")[2].split("'")[0] for line in lines) == [f"order {i}" for i in range(6)], lines
        assert all(line.startswith("orders ") for line in lines)
        with Consumer(bootstrap_servers=server.bootstrap_servers, group_id="billing") as check:
            committed = {partition: check.committed("orders", partition) for partition in (0, 1)}
        assert sum(committed.values()) == 6, committed


def test_the_transactions_block_copies_each_order_once_with_the_groups_offsets(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = block("docs/guide/server.md", "transactions")
    assert '"127.0.0.1:9092"' in code and "send_offsets_to_transaction" in code
    with LogManager([str(tmp_path / "data")]) as store, \
            KafkaServer(store, listen="127.0.0.1:0", config={"group.initial.rebalance.delay.ms": 0}) as server:
        store.create_topic("orders", 2)
        store.create_topic("invoices", 1)
        store.append("orders", [Record(b"customer-%d" % i, b"order %d" % i) for i in range(6)])
        exec(compile(code.replace("127.0.0.1:9092", server.bootstrap_servers), "docs/guide/server.md", "exec"), {})
        with Consumer(bootstrap_servers=server.bootstrap_servers, isolation_level="read_committed",
                      auto_offset_reset="earliest") as reader:
            reader.assign([("invoices", 0)])
            invoices = []
            for _ in range(20):
                invoices.extend(record.value for record in reader.poll(200))
                if reader.position("invoices", 0) >= reader.end_offsets([("invoices", 0)])[("invoices", 0)]:
                    break
        assert sorted(invoices) == [b"invoice for order %d" % i for i in range(6)]
        with Consumer(bootstrap_servers=server.bootstrap_servers, group_id="invoicer") as check:
            committed = {partition: check.committed("orders", partition) for partition in (0, 1)}
        assert sum(committed.values()) == 6, committed
