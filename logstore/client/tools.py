"""What the command line does against a broker (``logstore --bootstrap-server``): appending records
with the producer and reading them with the consumer, in the shapes the store's own commands use,
so the output is the same whichever the command talks to.

What it owns:
- ``append_chunks``: records sent chunk by chunk (a chunk: consecutive records for one partition, or
  for partitioning by key), each chunk acknowledged before the next is sent, reported per partition
  as ``AppendSummary`` (first and last offset, count), as ``LogManager.append`` reports them;
- ``read_chunks``: the records of a topic from where the caller says (an offset, the beginning, a
  time, or a consumer group's committed offsets) as ``(partition, [Record])`` chunks, up to the end
  offsets found at the start, or on and on with ``follow``. With a group and no partition it is a
  member of the group (``subscribe``), as kafka-console-consumer is: readers of the same group split
  the partitions, and a rebalance moves them between readers; with a partition (or a start of its
  own) it reads without joining (as ``logstore read --group`` does on a store). Either way it commits
  the position after each chunk the caller took, before it reads on, so what was printed is what is
  committed (and a rebalance, which happens only while reading on, finds nothing printed and not
  committed). A broker restarting is ridden: the reader
  keeps its positions (nothing is read twice), and a commit waits for the coordinator up to
  ``default.api.timeout.ms``; when following, a commit that still could not be made is kept and
  made at the next turn, and one left when reading ends is reported (those records would be read
  again).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

from ..records.decoder import Record
from .admin import BrokerAdmin, BrokerGroupAdmin
from .consumer import Consumer
from .errors import NetworkError
from .group_member import coordinator_unavailable
from .producer import Producer
from .security import ClientSecurity

logger = logging.getLogger(__name__)

_POLL_MS = 500


@dataclass(frozen=True)
class AppendSummary:
    """What one chunk put in one partition (the shape of ``LogManager.append``'s ``AppendInfo``)."""

    first_offset: int
    last_offset: int
    record_count: int


def append_chunks(bootstrap_servers: str, topic: str, chunks: Iterable[tuple[int | None, Sequence[Record]]], *,
                  acks: str = "1", timeout_ms: int = 30_000, client_config: dict | None = None
                  ) -> Iterator[dict[int, AppendSummary]]:
    """Send each ``(partition or None, records)`` chunk and yield, once the broker acknowledged it,
    what it put in each partition. ``acks`` is ``"1"`` or ``"all"``; ``client_config`` the client
    settings of ``--command-config`` (security)."""
    with Producer(client_config, bootstrap_servers=bootstrap_servers, acks=acks, linger_ms=0, client_id="logstore-cli",
                  request_timeout_ms=max(timeout_ms, 1000)) as producer:
        for partition, records in chunks:
            futures = [producer.send(topic, record.value, key=record.key, headers=record.headers,
                                     partition=partition, timestamp_ms=record.timestamp_ms) for record in records]
            producer.flush(timeout_ms / 1000 + 30)
            placed: dict[int, list[int]] = {}
            for future in futures:
                metadata = future.result(0)
                placed.setdefault(metadata.partition, []).append(metadata.offset)
            yield {p: AppendSummary(min(offsets), max(offsets), len(offsets)) for p, offsets in placed.items()}


def read_chunks(bootstrap_servers: str, topic: str, *, partition: int | None = None, offset: int | None = None,
                from_timestamp_ms: int | None = None, follow: bool = False, group: str | None = None,
                max_records: int | None = None, client_config: dict | None = None
                ) -> Iterator[tuple[int, list[Record]]]:
    """``(partition, records)`` chunks of ``topic`` (or its ``partition``) from ``offset`` (needs
    ``partition``), the first record at or after ``from_timestamp_ms``, the group's committed
    offsets, or else the log start; up to the end found at the start, unless ``follow``. With
    ``group``, a chunk is committed when the caller comes back for the next one; close the
    iterator (``contextlib.closing``) to learn of a commit that could not be made."""
    if group is not None and partition is None and offset is None and from_timestamp_ms is None:
        yield from _read_as_member(bootstrap_servers, topic, group, follow=follow, max_records=max_records,
                                   client_config=client_config)
        return
    remaining = max_records if max_records is not None else -1
    with BrokerGroupAdmin.connect(bootstrap_servers, client_id="logstore-cli",
                                  security=ClientSecurity.from_config(client_config or {})) as groups, \
            Consumer(client_config, bootstrap_servers=bootstrap_servers, client_id="logstore-cli", enable_auto_commit=False,
                     auto_offset_reset="earliest") as consumer:
        admin: BrokerAdmin = groups.admin
        partitions = [partition] if partition is not None else list(range(admin.partitions(topic)))
        if partition is not None and partition >= admin.partitions(topic):
            raise ValueError(f"topic {topic!r} has no partition {partition}")
        consumer.assign([(topic, p) for p in partitions])
        if group is not None:
            starts = {start.partition: start.offset for start in groups.start_positions(group, topic, partitions)}
        elif offset is not None:
            starts = {partition: offset}
        elif from_timestamp_ms is not None:
            found = consumer.offsets_for_times({(topic, p): from_timestamp_ms for p in partitions})
            ends = consumer.end_offsets([(topic, p) for p in partitions])
            starts = {p: ends[(topic, p)] if found[(topic, p)] is None else found[(topic, p)][0] for p in partitions}
        else:
            starts = {p: start for (_, p), start in consumer.beginning_offsets([(topic, p) for p in partitions]).items()}
        for p, start in starts.items():
            consumer.seek(topic, p, start)
        ends = {p: end for (_, p), end in consumer.end_offsets([(topic, p) for p in partitions]).items()}
        uncommitted: dict[int, int] = {}  # partition -> the offset after the last record taken, not committed yet

        def commit(last: bool) -> None:
            if group is None or not uncommitted:
                return
            try:
                groups.commit(group, {(topic, p): offset for p, offset in uncommitted.items()},
                              doing="reading as the group")
            except Exception as exc:
                if last or not follow or not coordinator_unavailable(exc):
                    raise
                logger.warning("group %s: committing %s later: %s", group, uncommitted, exc)
                return
            uncommitted.clear()

        try:
            while remaining != 0:
                commit(last=False)
                if not follow and all(consumer.position(topic, p) >= ends[p] for p in partitions):
                    return
                records = consumer.poll(_POLL_MS)
                by_partition: dict[int, list[Record]] = {}
                for record in records:
                    by_partition.setdefault(record.partition, []).append(
                        Record(record.key, record.value, record.headers, record.timestamp_ms, record.offset))
                for p in sorted(by_partition):
                    chunk = by_partition[p]
                    if remaining > 0:
                        chunk = chunk[:remaining]
                        remaining -= len(chunk)
                    if not chunk:
                        continue
                    yield p, chunk
                    if group is not None:  # the caller printed the chunk: commit past it
                        uncommitted[p] = chunk[-1].offset + 1
                        commit(last=False)
                    if remaining == 0:
                        return
        finally:
            if follow and uncommitted:  # without follow a commit that fails has raised already
                try:
                    commit(last=True)
                except Exception as exc:
                    if not coordinator_unavailable(exc):
                        raise
                    raise NetworkError(f"group {group}: the offsets after the records printed ("
                                       f"{', '.join(f'{topic}-{p}: {o}' for p, o in sorted(uncommitted.items()))}) "
                                       f"could not be committed, so they will be read again: {exc}") from exc


def _read_as_member(bootstrap_servers: str, topic: str, group: str, *, follow: bool, max_records: int | None,
                    client_config: dict | None) -> Iterator[tuple[int, list[Record]]]:
    """``read_chunks`` as a member of ``group``: the partitions the group assigns, from its committed
    offsets (the log start where it has none). Without ``follow`` it stops once every partition it
    holds is read up to the end it had when the partition was assigned (or at once when the group
    gives it none)."""
    remaining = max_records if max_records is not None else -1
    with Consumer(client_config, bootstrap_servers=bootstrap_servers, client_id="logstore-cli", group_id=group,
                  enable_auto_commit=False, auto_offset_reset="earliest") as consumer:
        consumer.subscribe([topic])
        ends: dict[int, int] = {}  # partition -> its end offset when first assigned (without follow)
        uncommitted: dict[int, int] = {}

        def commit(last: bool) -> None:
            if not uncommitted:
                return
            try:
                consumer.commit({(topic, p): offset for p, offset in uncommitted.items()})
            except Exception as exc:
                if last or not follow or not coordinator_unavailable(exc):
                    raise
                logger.warning("group %s: committing %s later: %s", group, uncommitted, exc)
                return
            uncommitted.clear()

        try:
            while remaining != 0:
                commit(last=False)
                records = consumer.poll(_POLL_MS)
                held = sorted(p for t, p in consumer.assignment() if t == topic)
                if not follow:
                    new = [p for p in held if p not in ends]
                    if new:
                        ends.update({p: end for (_, p), end in consumer.end_offsets([(topic, p) for p in new]).items()})
                    if not records and consumer.generation >= 0 and all(
                            consumer.position(topic, p) >= ends[p] for p in held):
                        return
                by_partition: dict[int, list[Record]] = {}
                for record in records:
                    by_partition.setdefault(record.partition, []).append(
                        Record(record.key, record.value, record.headers, record.timestamp_ms, record.offset))
                for p in sorted(by_partition):
                    chunk = by_partition[p]
                    if remaining > 0:
                        chunk = chunk[:remaining]
                        remaining -= len(chunk)
                    if not chunk:
                        continue
                    yield p, chunk
                    uncommitted[p] = chunk[-1].offset + 1
                    commit(last=False)
                    if remaining == 0:
                        return
        finally:
            if uncommitted:
                try:
                    commit(last=True)
                except Exception as exc:
                    raise NetworkError(f"group {group}: the offsets after the records printed ("
                                       f"{', '.join(f'{topic}-{p}: {o}' for p, o in sorted(uncommitted.items()))}) "
                                       f"could not be committed, so they will be read again: {exc}") from exc
