"""``mirror``: copy topics from a store or a broker to a store or a broker (``logstore mirror``), with
their partition counts, config overrides, keys, values, headers and timestamps, resumably.

What it owns:
- the two ends: a data dir (``StoreEnd``: the store read-only as a source, a writer as a
  destination) or a Kafka-compatible broker (``BrokerEnd``: a consumer as a source, a producer as a
  destination); ``open_end`` tells them apart (an existing directory is a store, ``HOST:PORT`` a
  broker, any other path a new store, but a bare host such as ``localhost`` is refused:
  ``check_end``); a failed mirror ``discard``s the store it created when no record reached it;
- the copy: each source partition to the same partition of the destination topic (created with the
  source's partition count, overrides and key placement; an existing one must have the same
  partition count and placement, so a key written to either topic later lands where its mirrored
  records are: a topic placed by crc32 can only be mirrored to a store or a logstore broker),
  record by record in offset order, with the source's timestamps (the destination keeps them as
  CreateTime) and headers;
- resuming: after each chunk the destination's consumer group ``group`` (default
  ``logstore-mirror``) commits, per partition, the next source offset to copy, with the destination
  partition's end offset then as the commit's metadata. A mirror started again resumes there; the
  records a crash left copied after the last commit (the destination end is past the one committed)
  are skipped in the source, not copied twice, so the destination gets every record once;
- progress: ``progress(done, total)`` after each chunk (records copied so far, records to copy);
- what is copied: committed records only (a broker is read ``read_committed``, a store through its
  committed view, ``Log.fetch``): an aborted transaction's records are never copied; a transaction
  still open in a broker's partition is waited for, and a store's partition is copied up to its
  last stable offset (a later run copies the rest);
- exactly once into a broker (``exactly_once``): each chunk is copied in one transaction of a
  transactional producer (``transactional.id`` ``logstore-mirror-<group>``), and the chunk's next
  source offset is committed as the group's offset inside that same transaction
  (``send_offsets_to_transaction``), so the records and the position are stored together or not
  at all: no bookkeeping topic, no skipping after a crash. A mirror started again first fences
  the one it replaces (``init_transactions`` aborts its open transaction), then reads the group's
  offsets with ``require_stable`` and resumes there. Readers of the destination must read
  ``read_committed`` to see each record once. Refused (``check_exactly_once``) where it cannot
  hold: a store as the destination (no transactions in a data dir written directly).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from typing import Callable, Iterator

from ..errors import RequestError
from ..group.admin import GroupAdmin
from ..manager.log_manager import LogManager
from ..manager.topics import CRC32, INTERNAL_TOPICS, MURMUR2, PLACEMENT_CONFIG
from ..records.decoder import Record
from .admin import BrokerAdmin, BrokerGroupAdmin
from .consumer import Consumer
from .errors import AbortableTransactionError
from .producer import Producer
from .security import ClientSecurity

DEFAULT_GROUP = "logstore-mirror"
TRANSACTIONAL_ID_PREFIX = "logstore-mirror-"
"""An exactly-once mirror's ``transactional.id`` is this and its group: the same for every run of
one mirror (so a run fences the one it replaces), distinct per group."""
_EXACTLY_ONCE_METADATA = json.dumps({"exactly_once": True})
_CHUNK_RECORDS = 5000
_CHUNK_BYTES = 4 << 20
_BROKER = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.-]+):\d{1,5}(,(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.-]+):\d{1,5})*$")


class StoreEnd:
    """A store in a data dir, as a mirror's source (read-only) or destination (a writer)."""

    def __init__(self, path: str, *, writable: bool) -> None:
        self.name = path
        self.created = writable and not os.path.lexists(path)  # a dir this end makes: removed if left empty
        self.store = LogManager([path], read_only=not writable)
        self.groups = GroupAdmin(self.store) if writable else None

    def close(self) -> None:
        if self.groups is not None:
            self.groups.close()
        self.store.close()

    def discard(self) -> None:
        """Close after a failed mirror; the dir goes too when this end created it and it holds no
        record yet (a mirror that failed before copying leaves nothing behind; one that copied some
        is kept, to resume)."""
        empty = self.created and all(log.log_end_offset == 0 for log in self.store.logs())
        self.close()
        if empty:
            shutil.rmtree(self.name)

    def topics(self) -> list[str]:
        return [name for name in self.store.topics() if name not in INTERNAL_TOPICS]

    def partitions(self, topic: str) -> int | None:
        return self.store.partitions(topic) if topic in self.store.topics() else None

    def overrides(self, topic: str) -> dict[str, str]:
        return {key: str(value) for key, value in self.store.topic_overrides(topic).items()}

    def placement(self, topic: str) -> str:
        return self.store.topic_placement(topic)

    def create_topic(self, topic: str, partitions: int, overrides: dict[str, str], placement: str) -> None:
        self.store.create_topic(topic, partitions, {**overrides, **_placement_config(placement)})

    def offsets(self, topic: str, partition: int) -> tuple[int, int]:
        log = self.store.get_log(topic, partition)
        return log.log_start_offset, log.log_end_offset

    def read(self, topic: str, partition: int, start: int, end: int) -> Iterator[list[Record]]:
        log = self.store.get_log(topic, partition)
        while start < end:
            # Committed records only; the next offset moves past markers and aborted data, and stays
            # at the last stable offset while a transaction is open (then this copy stops there)
            result = log.fetch(start, _CHUNK_BYTES, _CHUNK_RECORDS, isolation="read_committed")
            records = [record for record in result.records if record.offset < end]
            if records:
                yield records
            if result.next_offset <= start:
                return
            start = result.next_offset

    def write(self, topic: str, partition: int, records: list[Record]) -> None:
        self.store.append(topic, [record._replace(offset=None) for record in records], partition=partition,
                          acks="all")


class BrokerEnd:
    """A Kafka-compatible broker at ``bootstrap_servers``, as a mirror's source or destination."""

    def __init__(self, bootstrap_servers: str, client_config: dict | None = None) -> None:
        self.name = bootstrap_servers
        self._config = client_config  # security settings (--command-config)
        self.admin = BrokerAdmin(bootstrap_servers, client_id="logstore-mirror",
                                 security=ClientSecurity.from_config(client_config or {}))
        self.groups = BrokerGroupAdmin(self.admin)
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        self._transactional: Producer | None = None

    def close(self) -> None:
        try:
            if self._producer is not None:
                self._producer.close()
            if self._transactional is not None:
                self._transactional.close()
            if self._consumer is not None:
                self._consumer.close()
        finally:
            self.groups.close()
            self.admin.close()

    def discard(self) -> None:
        """Close after a failed mirror (a broker's topics stay as they are)."""
        self.close()

    def topics(self) -> list[str]:
        return [name for name in self.admin.topics() if name not in INTERNAL_TOPICS]

    def partitions(self, topic: str) -> int | None:
        return self.admin.network.refresh_metadata([topic]).partitions(topic)

    def overrides(self, topic: str) -> dict[str, str]:
        return {key: value for key, value in self.admin.topic_configs(topic)[1].items()
                if value is not None and key != PLACEMENT_CONFIG}

    def placement(self, topic: str) -> str:
        """The topic's placement as a logstore broker reports it; Kafka's (murmur2) when the broker has
        no such config, as Kafka's brokers have not."""
        return self.admin.topic_configs(topic)[0].get(PLACEMENT_CONFIG) or MURMUR2

    def create_topic(self, topic: str, partitions: int, overrides: dict[str, str], placement: str) -> None:
        try:
            self.admin.create_topic(topic, partitions, {**overrides, **_placement_config(placement)})
        except RequestError as exc:
            if placement != CRC32:
                raise
            raise RequestError(f"{exc} (topic {topic!r} places keys by crc32, which only a store or a logstore "
                               "broker keeps: Kafka's clients place keys by murmur2)") from None

    def offsets(self, topic: str, partition: int) -> tuple[int, int]:
        return self.admin.log_offsets(topic, [partition])[partition]

    def read(self, topic: str, partition: int, start: int, end: int) -> Iterator[list[Record]]:
        if self._consumer is None:
            self._consumer = Consumer(self._config, bootstrap_servers=self.name, client_id="logstore-mirror",
                                      enable_auto_commit=False, auto_offset_reset="none", max_poll_records=_CHUNK_RECORDS,
                                      isolation_level="read_committed")
        consumer = self._consumer
        consumer.assign([(topic, partition)])
        consumer.seek(topic, partition, start)
        while consumer.position(topic, partition) < end:
            records = [Record(r.key, r.value, r.headers, r.timestamp_ms, r.offset) for r in consumer.poll(1000)
                       if r.offset < end]
            if records:
                yield records

    def write(self, topic: str, partition: int, records: list[Record]) -> None:
        if self._producer is None:
            self._producer = Producer(self._config, bootstrap_servers=self.name, client_id="logstore-mirror", linger_ms=5,
                                      batch_size=256 * 1024)
        producer = self._producer
        futures = [producer.send(topic, r.value, key=r.key, headers=r.headers, partition=partition,
                                 timestamp_ms=r.timestamp_ms) for r in records]
        producer.flush()
        for future in futures:
            future.result(0)  # a record the broker refused fails the mirror here, before the commit


    def offers_transactions(self) -> bool:
        """Whether the broker speaks the transaction APIs (EndTxn in its ApiVersions)."""
        network = self.admin.network
        address = next(iter(dict.fromkeys([*network.metadata.brokers.values(), *network.bootstrap])))
        try:
            network.connection_to(*address).version_of("EndTxn")
        except RequestError:
            return False
        return True

    def begin_exactly_once(self, group: str) -> None:
        """The transactional producer of the mirror of ``group``: registered (fencing the run it
        replaces, whose open transaction the coordinator aborts) before any offset is read."""
        self._transactional = Producer(self._config, bootstrap_servers=self.name, client_id="logstore-mirror",
                                       linger_ms=5, batch_size=256 * 1024,
                                       transactional_id=TRANSACTIONAL_ID_PREFIX + group)
        self._transactional.init_transactions()

    def claim(self, offsets: dict[tuple[str, int], int], group: str) -> None:
        """Commit ``offsets`` for ``group`` in a transaction of their own (no records)."""
        producer = self._transactional
        producer.begin_transaction()
        producer.send_offsets_to_transaction({tp: (offset, _EXACTLY_ONCE_METADATA) for tp, offset in offsets.items()},
                                             group)
        producer.commit_transaction()

    def write_transaction(self, topic: str, partition: int, records: list[Record], group: str,
                          next_offset: int) -> None:
        """``records`` and the group's offset ``next_offset`` of ``topic``/``partition`` in one
        transaction: both are stored, or neither (an error aborts it, and is raised)."""
        producer = self._transactional
        producer.begin_transaction()
        try:
            futures = [producer.send(topic, r.value, key=r.key, headers=r.headers, partition=partition,
                                     timestamp_ms=r.timestamp_ms) for r in records]
            producer.send_offsets_to_transaction({(topic, partition): (next_offset, _EXACTLY_ONCE_METADATA)}, group)
            producer.commit_transaction()
        except AbortableTransactionError:
            producer.abort_transaction()
            raise
        for future in futures:
            future.result(0)


def _placement_config(placement: str) -> dict[str, str]:
    """The creation config that gives a topic ``placement``: none for Kafka's default (so a Kafka
    broker, which knows no such config, takes the topic)."""
    return {} if placement == MURMUR2 else {PLACEMENT_CONFIG: placement}


_BARE_HOST = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*)$")


def check_end(where: str, *, writable: bool) -> None:
    """Refuse (``ValueError``) an end that is no existing directory and looks like a host without
    its port (``localhost``, ``kafka1.example.com``): a destination would otherwise become a new
    store of that name. A new store's dir is named as a path (``./localhost``) instead. A source
    must be an existing directory or ``HOST:PORT``."""
    if os.path.isdir(where) or _BROKER.match(where):
        return
    if _BARE_HOST.match(where) and not os.path.lexists(where):
        raise ValueError(f"{where!r} looks like a host without its port and is no existing directory: give "
                         f"HOST:PORT for a broker, or a path (./{where}) for a data dir")
    if not writable:
        raise ValueError(f"{where!r} is neither a data dir nor HOST:PORT of a broker")


def check_exactly_once(destination: str) -> None:
    """Refuse (``ValueError``) ``--exactly-once`` into ``destination`` unless it is a broker
    (``HOST:PORT``): a store's data dir is written directly, with no transaction to put the records
    and the position in together."""
    if os.path.isdir(destination) or not _BROKER.match(destination):
        raise ValueError(f"--exactly-once needs a Kafka broker (HOST:PORT) as the destination, got "
                         f"{destination!r} (a data dir): a store is written without transactions")


def open_end(where: str, *, writable: bool, client_config: dict | None = None) -> StoreEnd | BrokerEnd:
    """A store when ``where`` is an existing directory (or, for a destination, a path that is not
    ``HOST:PORT``), else the broker at ``where`` (reached with ``client_config``'s security
    settings); ``check_end`` refuses a host without its port."""
    check_end(where, writable=writable)
    if os.path.isdir(where):
        return StoreEnd(where, writable=writable)
    if _BROKER.match(where):
        return BrokerEnd(where, client_config)
    return StoreEnd(where, writable=True)


def mirror(source: StoreEnd | BrokerEnd, destination: StoreEnd | BrokerEnd, topics: list[str] | None = None, *,
           group: str = DEFAULT_GROUP, progress: Callable[[int, int], None] | None = None,
           exactly_once: bool = False) -> dict[str, int]:
    """Copy ``topics`` (default: every topic of the source but internal ones) from ``source`` to
    ``destination``; returns the records copied per topic (see the module docstring)."""
    if exactly_once:
        if not isinstance(destination, BrokerEnd):
            raise ValueError(f"--exactly-once needs a Kafka broker as the destination, got the data dir "
                             f"{destination.name!r}")
        if not destination.offers_transactions():
            raise RequestError(f"--exactly-once: {destination.name} does not offer transactions (no EndTxn in its "
                               "ApiVersions)")
        destination.begin_exactly_once(group)
    names = list(topics) if topics else source.topics()
    plan = []
    counts = {}
    for topic in names:
        counts[topic] = source.partitions(topic)
        if counts[topic] is None:
            raise RequestError(f"topic {topic!r} does not exist in {source.name}")
    committed = destination.groups.committed_entries(group, [(topic, p) for topic in names
                                                             for p in range(counts[topic])],
                                                     **({"require_stable": True} if exactly_once else {}))
    for topic in names:
        count = counts[topic]
        placement = source.placement(topic)
        existing = destination.partitions(topic)
        if existing is None:
            destination.create_topic(topic, count, source.overrides(topic), placement)
        elif existing != count:
            raise RequestError(f"topic {topic!r} has {existing} partitions in {destination.name} and {count} in "
                               f"{source.name}: a mirror keeps each record's partition, so they must match")
        elif destination.placement(topic) != placement:
            raise RequestError(f"topic {topic!r} places keys by {destination.placement(topic)} in {destination.name} "
                               f"and by {placement} in {source.name}: a mirror keeps each record's partition, so "
                               "keys written later would land elsewhere; mirror into a new topic")
        for partition in range(count):
            start, end = source.offsets(topic, partition)
            resume, skip = _resume_point(committed.get((topic, partition)), destination, topic, partition,
                                         exactly_once)
            plan.append((topic, partition, max(start, resume), end, skip))
    if exactly_once:
        # Claim the destination partitions not committed yet (checked empty above) with their start
        # offsets, in a transaction of their own: after a crash, whatever a later transaction left
        # (aborted records) is behind a commit of this mirror, not taken for someone else's data.
        claims = {(topic, partition): start for topic, partition, start, _, _ in plan
                  if (topic, partition) not in committed}
        if claims:
            destination.claim(claims, group)
    total = sum(max(end - start, 0) for _, _, start, end, _ in plan)
    done = 0
    copied: dict[str, int] = dict.fromkeys(names, 0)
    if progress is not None:
        progress(0, total)
    for topic, partition, start, end, skip in plan:
        for records in source.read(topic, partition, start, end):
            dropped: list[Record] = []
            if skip:  # copied after the last commit, before an interruption: already there
                dropped, records = records[:skip], records[skip:]
                skip -= len(dropped)
            next_offset = (records or dropped)[-1].offset + 1
            if exactly_once:
                destination.write_transaction(topic, partition, records, group, next_offset)
                copied[topic] += len(records)
            else:
                if records:
                    destination.write(topic, partition, records)
                    copied[topic] += len(records)
                dest_end = destination.offsets(topic, partition)[1]
                destination.groups.commit(group, {(topic, partition): next_offset}, doing="mirroring",
                                          metadata={(topic, partition): json.dumps({"dest_end": dest_end})})
            done += next_offset - start
            start = next_offset
            if progress is not None:
                progress(min(done, total), total)
    return copied


def _resume_point(entry: tuple[int, str | None] | None, destination, topic: str, partition: int,
                  exactly_once: bool = False) -> tuple[int, int]:
    """Where a partition's copy resumes: the committed source offset, and how many source records
    from there are already in the destination (written after that commit). An exactly-once commit
    was made with its records: none after it (its metadata is not relied on: Tansu does not keep a
    transactional commit's)."""
    if entry is None:
        written = destination.offsets(topic, partition)[1] if destination.partitions(topic) is not None else 0
        if written:
            raise RequestError(f"{topic}-{partition} in {destination.name} already holds {written} records that no "
                               f"mirror committed: mirror into a new topic, or use the group that wrote them")
        return 0, 0
    offset, metadata = entry
    try:
        dest_end = json.loads(metadata or "{}")["dest_end"]
    except (ValueError, KeyError, TypeError):
        if exactly_once or metadata == _EXACTLY_ONCE_METADATA:
            return offset, 0  # committed with its records in one transaction: nothing after it
        raise RequestError(f"group commit of {topic}-{partition} in {destination.name} is not a mirror's "
                           f"(metadata {metadata!r}): choose another --group") from None
    return offset, max(destination.offsets(topic, partition)[1] - dest_end, 0)
