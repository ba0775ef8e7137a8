"""``logstore perf serve``'s transactional row (``confluent_produce_transactional``): one real run at
tiny sizes against ``logstore serve`` (a smoke test: the figures exist and relate as documented; no
timing is asserted)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

try:
    from logstore.cli.perf import perf
except ModuleNotFoundError:  # the source tree keeps the CLI in cli/, installed as logstore.cli
    from cli.perf import perf

pytestmark = pytest.mark.kafka_clients


def test_the_transactional_produce_row_and_its_share_of_acks_all():
    arguments = ["serve", "--sizes", "1000", "--kafka-python-records", "0", "--latency-producers", "0",
                 "--records-per-transaction", "100", "--broker", "logstore", "--json"]
    result = CliRunner().invoke(perf, arguments)
    assert result.exit_code == 0, result.output
    rows = {row["workload"]: row for row in json.loads(result.output)["results"]}
    rate = rows["confluent transactional produce 1,000 (100/txn)"]
    assert rate["unit"] == "rec/s" and rate["value"] > 0
    p50, p99 = rows["commit p50, 100 records/txn"], rows["commit p99, 100 records/txn"]
    assert p50["unit"] == p99["unit"] == "ms" and 0 < p50["value"] <= p99["value"]
    share = rows["transactional / acks=all produce"]
    assert share["value"] == rate["value"] / rows["confluent produce 1,000 acks=all"]["value"]
