"""``RecordFuture`` and ``BatchResult`` (``logstore.client.accumulator``): a batch's records share one
result; each future gives its own offset and timestamp, the batch's error, callbacks once, and the
first outcome stays."""

from __future__ import annotations

import threading

import pytest

from logstore import Record
from logstore.client.accumulator import ProducerBatch, RecordMetadata


def _batch(count: int) -> tuple[ProducerBatch, list]:
    batch = ProducerBatch("t", 2, 0)
    futures = [batch.try_append(Record(None, b"v%d" % i, (), 1000 + i), 30, 1 << 20) for i in range(count)]
    return batch, futures


def test_each_record_gets_its_offset_and_timestamp_and_callbacks_run_once():
    batch, futures = _batch(3)
    seen = []
    futures[1].add_done_callback(lambda future: seen.append(future.result(0).offset))
    assert not any(future.done() for future in futures)
    with pytest.raises(TimeoutError):
        futures[0].result(0.01)
    threading.Timer(0.05, batch.complete, args=(40,)).start()
    assert futures[2].result(5) == RecordMetadata("t", 2, 42, 1002)
    assert [future.result(0) for future in futures] == [RecordMetadata("t", 2, 40 + i, 1000 + i) for i in range(3)]
    assert seen == [41]
    late = []
    futures[0].add_done_callback(lambda future: late.append(future.exception(0)))  # done: called at once
    assert late == [None]


def test_log_append_time_and_acks_0_offsets():
    batch, futures = _batch(2)
    batch.complete(7, log_append_time_ms=555)
    assert [future.result(0).timestamp_ms for future in futures] == [555, 555]
    batch, futures = _batch(2)
    batch.complete(-1)
    assert [future.result(0).offset for future in futures] == [-1, -1]


def test_the_first_outcome_stays_and_a_raising_callback_does_not_stop_the_batch():
    batch, futures = _batch(2)
    futures[0].add_done_callback(lambda future: 1 / 0)
    error = TimeoutError("expired")
    batch.fail(error)
    batch.complete(10)  # a late answer after the delivery timeout failed the batch
    assert futures[1].exception(0) is error
    with pytest.raises(TimeoutError, match="expired"):
        futures[0].result(0)
    assert not futures[0].cancel() and not futures[0].cancelled()
