"""A program using logstore's public API the way the README shows, with full annotations: checked
with ``mypy --strict`` by tests/test_typing.py (its ``store_example`` also runs there, on a temporary
dir). ``assert_type`` pins the types a user's checker must see: a public function whose annotation
is dropped (its result then Any) or loosened fails that check. Not a test module (no ``test_``
prefix): pytest does not collect it."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Sequence, assert_type

from logstore import AppendInfo, Log, LogManager, ManualClock, Record, Scheduler, ScheduledTask
from logstore.client import Consumer, ConsumerRecord, Producer
from logstore.client.accumulator import RecordFuture, RecordMetadata
from logstore.group.consumer import Consumer as GroupConsumer
from logstore.records import ColumnBatch


def store_example(data_dir: str) -> list[bytes | None]:
    """Open a store, create a topic, append and read back (README "Quick start")."""
    with LogManager([data_dir]) as store:
        assert_type(store, LogManager)
        store.create_topic("orders", partitions=3)
        log = store.get_log("orders", 0)
        assert_type(log, Log)
        info = log.append([Record(key=b"k", value=b"v", headers=[("h", b"x")], timestamp_ms=1700000000000)])
        assert_type(info, AppendInfo)
        assert_type(info.first_offset, int | None)
        assert_type(info.record_count, int)
        records = log.read(0, max_bytes=1 << 20)
        assert_type(records, list[Record])
        for record in records:
            assert_type(record.key, bytes | None)
            assert_type(record.value, bytes | None)
            assert_type(record.headers, Sequence[tuple[str, bytes | None]])
            assert_type(record.offset, int | None)
        appended = store.append("orders", [Record(key=b"k2", value=b"v2")], acks="all")
        assert_type(appended, dict[int, AppendInfo])  # per partition
        fetched = store.fetch({("orders", 0): 0})
        assert_type(fetched, dict[tuple[str, int], list[Record]])
        for columns in log.iter_columns(0):  # columnar reads: a ColumnBatch per stored batch
            assert_type(columns, ColumnBatch)
            assert_type(columns.values_data, memoryview)
            assert_type(columns.value_bytes, int)
            assert_type(columns.offsets(), Sequence[int])
        assert_type(store.fetch_columns({("orders", 0): 0})[("orders", 0)].batches, list[ColumnBatch])
        assert_type(store.topics(), list[str])
        assert_type(store.partitions("orders"), int)
        with GroupConsumer(store, "billing", ["orders"]) as consumer:  # the in-process group consumer
            polled = consumer.poll(100)
            assert_type(polled, list[ConsumerRecord])
            consumer.commit()
        return [record.value for record in store.read("orders", 0, 0)]


def scheduler_example() -> int:
    """A scheduler on a manual clock: the timer's public names keep their types."""
    clock = ManualClock()
    runs: list[int] = []
    with Scheduler(clock=clock) as scheduler:
        task = scheduler.schedule("tick", lambda: runs.append(clock.monotonic_ms()), period_ms=10)
        assert_type(task, ScheduledTask)
        task.cancel()
    return len(runs)


def client_example(bootstrap_servers: str) -> list[tuple[int, bytes | None]]:
    """Our own Kafka client against a broker (README "Kafka client"): produce, then consume."""
    with Producer({"bootstrap.servers": bootstrap_servers}, linger_ms=0) as producer:
        future = producer.send("events", b"hello", key=b"k", headers=[("source", b"typing")])
        assert_type(future, RecordFuture)
        metadata = future.result(timeout=10)
        assert_type(metadata, RecordMetadata)
        assert_type(metadata.offset, int)
        producer.flush()
    with Consumer({"bootstrap.servers": bootstrap_servers, "group.id": "typed"}) as consumer:
        consumer.subscribe(["events"])
        batch = consumer.poll(1000)
        assert_type(batch, list[ConsumerRecord])
        committed = consumer.commit_async()
        assert_type(committed, Future[dict[tuple[str, int], int]])
        assert_type(consumer.position("events", 0), int)
        return [(record.offset, record.value) for record in batch]
