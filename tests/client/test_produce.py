"""Produce requests built from accumulator batches (``logstore.client.produce``) against
``logstore serve``: keyed records land in the partitions Kafka's partitioner picks, each future gets
the offset the store gave its record, acks 0/1/-1 all store the records (acks=0 reports offset -1),
an error for one partition fails only that batch, and a retriable error leaves the batch for a retry."""

from __future__ import annotations

import time

import pytest

from logstore import Record
from logstore.client.accumulator import RecordAccumulator
from logstore.client.cluster import NetworkClient
from logstore.client.errors import BrokerResponseError
from logstore.client.partitioner import partition_for_key
from logstore.client.produce import apply_response, produce_request


def _send(client: NetworkClient, accumulator: RecordAccumulator, acks: int) -> list:
    """Drain every batch (a flush), one request per leader, and apply the responses; the outcomes."""
    accumulator.begin_flush()
    outcomes = []
    try:
        while accumulator.pending():
            ready, _ = accumulator.ready(0)
            batches = accumulator.drain(ready, 0)
            by_leader: dict[int, list] = {}
            for batch in batches:
                by_leader.setdefault(client.leader_for(batch.topic, batch.partition), []).append(batch)
            for leader, group in by_leader.items():
                connection = client.connection(leader)
                body = produce_request(group, acks, 10_000)
                if acks == 0:  # no response comes: nothing kept in flight
                    connection.send("Produce", body, expect_response=False)
                    response = None
                else:
                    response = connection.request("Produce", body)
                for outcome in apply_response(group, response, lambda batch: False):
                    accumulator.deallocate(outcome.batch)
                    outcomes.append(outcome)
    finally:
        accumulator.end_flush()
    return outcomes


@pytest.mark.parametrize("acks", [1, -1, 0])
def test_keyed_records_land_where_kafkas_partitioner_puts_them(server, acks):
    topic = f"keyed-{acks + 1}"
    server.store.create_topic(topic, 3)
    with NetworkClient(server.bootstrap_servers) as client:
        client.refresh_metadata([topic])
        accumulator = RecordAccumulator(batch_size=2000, linger_ms=0)
        sent = []
        for i in range(300):
            key = b"user-%d" % (i % 37)
            partition = partition_for_key(key, 3)
            record = Record(key, b"event-%d" % i, (("n", b"%d" % i),), 1_700_000_000_000 + i)
            sent.append((partition, record, accumulator.append(topic, partition, record)))
        outcomes = _send(client, accumulator, acks)
        assert all(outcome.error is None and not outcome.retry for outcome in outcomes)
        # acks=0 returns before the broker stored anything: a request that is answered comes after
        body = client.connection(client.leader_for(topic, 0)).request("Metadata", {"topics": [{"name": topic}]})
        assert body["topics"][0]["error_code"] == 0
        deadline = time.monotonic() + 10
        while sum(server.store.get_log(topic, p).log_end_offset for p in range(3)) < 300 and time.monotonic() < deadline:
            time.sleep(0.01)
    stored = {p: list(server.store.get_log(topic, p).iter_records()) for p in range(3)}
    assert sum(map(len, stored.values())) == 300
    for partition, record, future in sent:
        metadata = future.result(0)
        assert (metadata.topic, metadata.partition) == (topic, partition)
        if acks == 0:
            assert metadata.offset == -1
            continue
        found = stored[partition][metadata.offset]
        assert (found.key, found.value, found.headers, found.timestamp_ms) == record[:4]


def test_an_error_for_one_partition_fails_only_its_batch(server):
    server.store.create_topic("two", 2)
    with NetworkClient(server.bootstrap_servers) as client:
        client.refresh_metadata(["two"])
        accumulator = RecordAccumulator(linger_ms=0)
        good = accumulator.append("two", 0, Record(b"k", b"fine", (), 1))
        bad = accumulator.append("two", 7, Record(b"k", b"no such partition", (), 1))  # the topic has 2
        batches = accumulator.drain([("two", 0), ("two", 7)], 0)
        body = client.connection(client.leader_for("two", 0)).request("Produce", produce_request(batches, 1, 5000))
        outcomes = apply_response(batches, body, lambda batch: False)
    assert good.result(0).offset == 0
    with pytest.raises(BrokerResponseError, match="UNKNOWN_TOPIC_OR_PARTITION") as caught:
        bad.result(0)
    assert caught.value.error_code == 3
    assert [(o.batch.partition, o.retry, o.error is not None) for o in outcomes] == [(0, False, False), (7, False, True)]


def test_a_retriable_error_with_attempts_left_is_retried_not_failed(server):
    accumulator = RecordAccumulator(linger_ms=0)
    future = accumulator.append("gone", 0, Record(b"k", b"v", (), 1))
    batches = accumulator.drain([("gone", 0)], 0)
    response = {"responses": [{"name": "gone", "partition_responses": [
        {"index": 0, "error_code": 6, "base_offset": -1}]}]}  # NOT_LEADER_OR_FOLLOWER
    (outcome,) = apply_response(batches, response, lambda batch: batch.attempts < 3)
    assert outcome.retry and not future.done()
    accumulator.reenqueue(outcome.batch)
    (again,) = accumulator.drain([("gone", 0)], 0)
    assert again is outcome.batch and again.attempts == 2
    (missing,) = apply_response([again], {"responses": []}, lambda batch: False)  # no answer for it
    assert missing.error.error_name == "NETWORK_EXCEPTION" and future.exception(0) is missing.error


def test_acks_must_be_kafkas():
    with pytest.raises(ValueError, match="acks"):
        produce_request([], 2, 1000)
