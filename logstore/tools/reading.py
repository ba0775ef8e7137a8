"""Reading a topic's records in chunks on a store, at an isolation level: the engine of ``logstore
read`` (without ``--bootstrap-server``).

Owns ``fetch_results`` (several partitions at once, waiting for records: what the in-process
consumer's ``poll`` reads with), ``read_chunks`` (one partition from an offset up to its end: the log end offset, or with
``read_committed`` the last stable offset) and ``follow_chunks`` (every partition given, waiting
for new records). Both hand back each chunk with the offset to read from next, which the caller
stores once it has printed the chunk: a read's ``next_offset``, past transaction markers and
aborted records that end it, so a reader never stalls at a marker (a chunk may then hold no record
and still move the position). Markers are never records; ``read_committed`` also leaves aborted
transactions' records out.
"""

from __future__ import annotations

from typing import Iterator, Mapping

from ..log.log import READ_UNCOMMITTED, Log, ReadResult, check_isolation
from ..manager.log_manager import LogManager
from ..records.decoder import Record

DEFAULT_ISOLATION = READ_UNCOMMITTED

TopicPartition = tuple[str, int]


def read_chunks(log: Log, start: int, max_records: int, *, chunk_bytes: int, chunk_records: int,
                isolation: str = DEFAULT_ISOLATION) -> Iterator[tuple[list[Record], int]]:
    """``(records, next_offset)`` chunks of ``log`` from ``start``, at most ``max_records`` records
    in all, until a read moves no further (the end the isolation level sees)."""
    check_isolation(isolation)
    position, remaining = start, max_records
    while remaining > 0:
        result = log.fetch(position, chunk_bytes, min(remaining, chunk_records), isolation=isolation)
        if result.next_offset <= position and not result.records:
            return
        yield result.records, result.next_offset
        position = result.next_offset
        remaining -= len(result.records)


def fetch_results(store: LogManager, positions: Mapping[TopicPartition, int], *, max_bytes: int,
                  max_wait_ms: int = 0, isolation: str = DEFAULT_ISOLATION) -> dict[TopicPartition, ReadResult]:
    """``store.fetch_results``: a ``ReadResult`` per partition of ``positions``; when none moved
    (no record, no marker passed) and ``max_wait_ms`` > 0, first waits up to ``max_wait_ms`` for
    records there (the store's waiting fetch), then reads again."""
    check_isolation(isolation)
    results = store.fetch_results(positions, max_bytes=max_bytes, isolation=isolation)
    if max_wait_ms > 0 and not any(result.records or result.next_offset > positions[key]
                                   for key, result in results.items()):
        store.fetch(positions, max_bytes=max_bytes, max_wait_ms=max_wait_ms, isolation=isolation)
        results = store.fetch_results(positions, max_bytes=max_bytes, isolation=isolation)
    return results


def follow_chunks(store: LogManager, positions: Mapping[TopicPartition, int], *, chunk_bytes: int, wait_ms: int,
                  isolation: str = DEFAULT_ISOLATION) -> dict[TopicPartition, tuple[list[Record], int]]:
    """One turn of ``read --follow``: ``{(topic, partition): (records, next_offset)}`` for the
    partitions that moved, after waiting up to ``wait_ms`` for records at ``positions``."""
    results = fetch_results(store, positions, max_bytes=chunk_bytes, max_wait_ms=wait_ms, isolation=isolation)
    return {key: (result.records, result.next_offset) for key, result in results.items()
            if result.records or result.next_offset > positions[key]}
