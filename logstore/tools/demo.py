"""The guided tour behind ``logstore demo``: a short run on a real store that shows the main ideas.

Owns the demo's steps, in order: create the topic ``demo-orders`` (3 partitions) unless it exists,
append a few keyed records with headers and timestamps (keys pick the partition), read them back by
offset, look an offset up by timestamp, close the store, show the files on disk, verify them with
``logstore.verify`` on a read-only open, and print the commands to try next. Running it again on the
same dirs appends more records after the earlier ones (offsets keep growing).

Output goes through an ``emit`` callback (one line per call), so the command line decides where it
is printed. Time comes from ``logstore.clock``.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
from typing import Any, Callable, Mapping, Sequence

from ..clock import SYSTEM_CLOCK, Clock
from ..log.log import AppendInfo
from ..manager.log_manager import LogManager
from ..records.decoder import Record
from .check import verify_store

logger = logging.getLogger(__name__)

DEMO_TOPIC = "demo-orders"
DEMO_PARTITIONS = 3
_ORDERS = [  # (customer, item, quantity)
    ("customer-1", "coffee", 2),
    ("customer-3", "tea", 1),
    ("customer-2", "cake", 3),
    ("customer-1", "croissant", 1),
    ("customer-3", "coffee", 1),
    ("customer-2", "water", 2),
]  # Kafka's partition of the key (murmur2) sends these customers to partitions 0, 1 and 2
_LOOKUP_INDEX = 3  # the order whose timestamp the offset-for-timestamp step looks up
_SPACING_MS = 1000

Emit = Callable[[str], None]


def run_demo(log_dirs: Sequence[str], emit: Emit, *, config: Mapping[str, Any] | None = None,
             clock: Clock | None = None, command: str = "logstore") -> None:
    """Run every step of the demo on the store in ``log_dirs`` (created if missing), writing each
    line of output through ``emit``. ``command`` is how the closing hints spell the command line
    (e.g. ``"logstore --dir /tmp/data"``). Raises ``LogStoreError`` like any store operation (e.g.
    ``LockedError`` when another process holds the store)."""
    clock = clock or SYSTEM_CLOCK
    with LogManager(log_dirs, config=config, clock=clock) as store:
        emit(f"logstore demo: a store in {', '.join(store.log_dirs)}")
        _step_topic(store, emit)
        records = _demo_records(clock.time_ms())
        appended = _step_append(store, records, emit)
        _step_read(store, appended, emit)
        _step_offset_for_timestamp(store, records[_LOOKUP_INDEX].timestamp_ms, emit)
        partition_dirs = [store.get_log(DEMO_TOPIC, partition).dir_path
                          for partition in range(store.partitions(DEMO_TOPIC))]
    _step_files(partition_dirs, emit)
    _step_check(log_dirs, config, emit)
    _step_next(command, os.path.join(partition_dirs[0], "00000000000000000000.log"), emit)


def _step_topic(store: LogManager, emit: Emit) -> None:
    emit("")
    emit(f"1. Topic {DEMO_TOPIC!r}")
    if DEMO_TOPIC in store.topics():
        ends = [store.get_log(DEMO_TOPIC, partition).log_end_offset for partition in range(store.partitions(DEMO_TOPIC))]
        emit(f"   exists already ({len(ends)} partitions, log end offsets {ends}): appending after its records")
        return
    store.create_topic(DEMO_TOPIC, partitions=DEMO_PARTITIONS)
    emit(f"   created with {DEMO_PARTITIONS} partitions (a directory per partition: {DEMO_TOPIC}-0 ...)")


def _demo_records(now_ms: int) -> list[Record]:
    """The demo's orders, one second apart and ending now."""
    first_ms = now_ms - (len(_ORDERS) - 1) * _SPACING_MS
    return [Record(key=customer.encode(),
                   value=json.dumps({"item": item, "quantity": quantity}).encode(),
                   headers=[("source", b"logstore-demo"), ("order", str(number).encode())],
                   timestamp_ms=first_ms + number * _SPACING_MS)
            for number, (customer, item, quantity) in enumerate(_ORDERS)]


def _step_append(store: LogManager, records: list[Record], emit: Emit) -> dict[int, AppendInfo]:
    emit("")
    emit(f"2. Append {len(records)} orders keyed by customer (the key picks the partition, as Kafka's producers do)")
    appended = store.append(DEMO_TOPIC, records)
    for partition, info in sorted(appended.items()):
        emit(f"   partition {partition}: {info.record_count} records at offsets {info.first_offset}..{info.last_offset}")
    return appended


def _step_read(store: LogManager, appended: Mapping[int, AppendInfo], emit: Emit) -> None:
    emit("")
    emit("3. Read them back by offset (the same key always lands in the same partition, in order)")
    for partition, info in sorted(appended.items()):
        count = info.last_offset - info.first_offset + 1
        for record in store.read(DEMO_TOPIC, partition, info.first_offset, max_records=count):
            headers = ", ".join(f"{key}={value.decode()}" for key, value in record.headers)
            emit(f"   partition {partition} offset {record.offset}: key={record.key.decode()} "
                 f"value={record.value.decode()} headers=[{headers}] timestamp_ms={record.timestamp_ms}")


def _step_offset_for_timestamp(store: LogManager, timestamp_ms: int, emit: Emit) -> None:
    emit("")
    emit(f"4. Offset for timestamp {timestamp_ms}: the first offset of each partition whose record "
         "timestamp is >= it (uses the time index)")
    for partition in range(store.partitions(DEMO_TOPIC)):
        log = store.get_log(DEMO_TOPIC, partition)
        offset = log.offset_for_timestamp(timestamp_ms)
        if offset is None:
            emit(f"   partition {partition}: none (every record is older)")
            continue
        record = log.read(offset, max_records=1)[0]
        emit(f"   partition {partition}: offset {offset} (key={record.key.decode()}, "
             f"timestamp_ms={record.timestamp_ms})")


def _step_files(partition_dirs: list[str], emit: Emit) -> None:
    emit("")
    emit("5. The files on disk (after a clean close): per segment a .log with the batches, a sparse "
         ".index (offset -> position) and a .timeindex (timestamp -> offset)")
    for dir_path in partition_dirs:
        emit(f"   {dir_path}/")
        for name in sorted(os.listdir(dir_path)):
            emit(f"     {name}  {os.path.getsize(os.path.join(dir_path, name))} bytes")


def _step_check(log_dirs: Sequence[str], config: Mapping[str, Any] | None, emit: Emit) -> None:
    emit("")
    emit("6. Verify every batch CRC and index entry (a read-only open, as `logstore check` does)")
    with LogManager(log_dirs, config=config, read_only=True) as store:
        report = verify_store(store)
    emit(f"   {report.summary()}")
    for problem in report.problems:
        emit(f"   {problem}")


def _step_next(command: str, segment_path: str, emit: Emit) -> None:
    emit("")
    emit("Next, try:")
    hints = [
        (f"{command} topics describe {DEMO_TOPIC}", "config and offsets per partition (JSON)"),
        (f"{command} read {DEMO_TOPIC} --from-beginning", "every record as JSON lines"),
        (f"echo hello | {command} append {DEMO_TOPIC} --key customer-9", "append a line of stdin"),
        (f"{command} read {DEMO_TOPIC} --partition 0 --offset 0 --format value", "values only"),
        (f"{command} check", "verify the whole store (exit code 1 on damage)"),
        (f"{command} dump {shlex.quote(segment_path)} --records", "look inside a segment"),
        (f"{command} topics create events --partitions 2 --config retention.ms=86400000", "your own topic"),
    ]
    for line, what in hints:
        emit(f"   {line}")
        emit(f"       {what}")
