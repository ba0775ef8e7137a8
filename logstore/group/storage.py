"""``GroupMetadataManager``: the groups cache and the ``__consumer_offsets`` topic behind it.

This module owns everything the coordinator keeps on disk (docs/design.md §9; the records: docs/FORMAT.md §4): creating the
compacted internal topic, mapping a group to its partition (Kafka's mapping, so tools that read the
topic find a group where Kafka would put it), writing group records and offset commits durably
(an append, then an fsync through the store's group-commit flusher, and only then the callback),
writing tombstones, and replaying the topic at start-up into ``GroupMetadata`` objects: the last
record of a key wins, a tombstone deletes, groups with members come back Stable and the others
Empty; offsets committed in a transaction wait for their producer's marker in the log (COMMIT
applies them, ABORT drops them, still open at the end: pending). The replay of a compacted topic
gives the same state, which is what compaction is for.
"""

from __future__ import annotations

import logging
import struct
import threading
from typing import Callable, Iterable

from ..clock import Clock
from ..errors import (CorruptRecordError, InvalidProducerEpochError, InvalidTxnStateError, LogStoreError,
                      RecordTooLargeError, TopicExistsError)
from ..manager.log_manager import LogManager
from ..records.batching import ProducerBatch, RecordColumns
from ..records.decoder import Record
from . import errors, formats
from .config import GroupConfig
from .metadata import EMPTY, STABLE, GroupMetadata, MemberMetadata, OffsetAndMetadata

logger = logging.getLogger(__name__)

OFFSETS_TOPIC = formats.OFFSETS_TOPIC
PARTITION_CACHE_ENTRIES = 4096
"""Group ids whose ``__consumer_offsets`` partition is remembered (hashing a group id is Java's
String.hashCode over its UTF-16 units, paid otherwise by every commit): past this many the memory
starts over, so it is bounded whatever the number of groups."""
_OFFSET_KEY_PARTITION = struct.Struct(">i")
_NO_HEADERS = ()


class GroupMetadataManager:
    """The groups (``groups``: group id -> ``GroupMetadata``) and their records in the store."""

    def __init__(self, store: LogManager, config: GroupConfig, clock: Clock, lock: threading.RLock, *,
                 threaded: bool = True) -> None:
        self.store = store
        self.config = config
        self.clock = clock
        self.lock = lock
        self.threaded = threaded
        self.groups: dict[str, GroupMetadata] = {}
        self.num_partitions = config.offsets_topic_num_partitions
        self.skipped_records = 0  # records of kinds this coordinator does not know (KIP-848 keys)
        self.problems: list[str] = []  # partitions the replay could not read, records it could not decode
        # ``__consumer_offsets`` partitions whose groups are unknown (damaged, missing or undecodable):
        # their groups are answered COORDINATOR_NOT_AVAILABLE, never as empty groups.
        self.unavailable: dict[int, str] = {}
        self._writer: OffsetsWriter | None = None
        self._partitions: dict[str, int] = {}  # group id -> its partition (at most PARTITION_CACHE_ENTRIES)
        self._topic_created = False  # ensure_topic saw the topic: later appends need not look

    # --- the topic -------------------------------------------------------------------------------

    def startup(self) -> None:
        """Replay the topic into ``groups`` if the store has it. It is created on the first write (a
        store whose server never sees a group does not hold 50 partitions' files open for nothing)."""
        store = self.store
        if OFFSETS_TOPIC in store.topics():
            self.num_partitions = store.partitions(OFFSETS_TOPIC)
            self._partitions.clear()
            self.load()

    def ensure_topic(self) -> None:
        """Create ``__consumer_offsets`` (compacted) unless it exists; ``ReadOnlyError`` in a view."""
        if self._topic_created:
            return
        store = self.store
        if OFFSETS_TOPIC in store.topics():
            self._topic_created = True
            return
        try:
            store.create_topic(OFFSETS_TOPIC, partitions=self.num_partitions, config={
                "cleanup.policy": "compact", "segment.bytes": self.config.offsets_topic_segment_bytes})
            logger.info("created %s with %d partitions", OFFSETS_TOPIC, self.num_partitions)
        except TopicExistsError:
            pass  # created meanwhile by another writer of this store
        self._topic_created = True

    def partition_for(self, group_id: str) -> int:
        partitions = self._partitions
        partition = partitions.get(group_id)
        if partition is None:
            partition = formats.partition_for(group_id, self.num_partitions)
            if len(partitions) >= PARTITION_CACHE_ENTRIES:
                partitions.clear()
            partitions[group_id] = partition
        return partition

    def add_group(self, group: GroupMetadata) -> GroupMetadata:
        return self.groups.setdefault(group.group_id, group)

    def remove_group(self, group_id: str) -> None:
        self.groups.pop(group_id, None)

    # --- replay ----------------------------------------------------------------------------------

    def load(self) -> None:
        """Replay every partition of the topic from its start (docs/design.md §9), batch by batch in
        log order: a plain offset record commits at once; a transactional one is held for its
        producer until that producer's marker on the partition (COMMIT applies each held offset
        unless a plain commit of the partition was written after it; ABORT drops them); what is
        still held at the end stays pending (the transaction coordinator sends its marker)."""
        group_values: dict[str, formats.GroupValue] = {}
        offsets: dict[str, dict[tuple[str, int], tuple[OffsetAndMetadata, int]]] = {}
        open_offsets: dict[str, dict[int, dict[tuple[str, int], tuple[OffsetAndMetadata, int]]]] = {}
        self.unavailable.clear()
        for partition in range(self.num_partitions):
            # producer id -> group -> partition -> (offset, record offset): this partition's open transactions
            pending: dict[int, dict[str, dict[tuple[str, int], tuple[OffsetAndMetadata, int]]]] = {}
            try:
                log = self.store.get_log(OFFSETS_TOPIC, partition)
                start = log.log_start_offset
                for batch, producer, marker in log.iter_batches_with_control():
                    if marker is not None:
                        if producer is not None:
                            self._end_transaction(pending.pop(producer.producer_id, None), marker.commit, offsets)
                        continue
                    held = None
                    if producer is not None and producer.transactional:
                        held = pending.setdefault(producer.producer_id, {})
                    for record in batch.iter_records():
                        if record.offset < start:
                            continue
                        try:
                            self._replay(record, group_values, offsets, held, pending)
                        except CorruptRecordError as exc:
                            # One record that does not decode (its batch's CRC held) must not take
                            # every group down: it is skipped, and reported.
                            problem = f"{OFFSETS_TOPIC}-{partition} offset {record.offset}: skipped: {exc}"
                            logger.error("%s", problem)
                            self.problems.append(problem)
                            self.store.problems.append(problem)
            except LogStoreError as exc:
                # Damaged (bad bytes, a hole, a cut), missing or offline: the groups of this
                # partition are unknown. Kafka keeps them "loading"; here they are unavailable until
                # the partition is repaired, never answered as empty groups.
                self._set_unavailable(partition, exc)
                continue
            for producer_id, by_group in pending.items():
                for group_id, held in by_group.items():
                    open_offsets.setdefault(group_id, {})[producer_id] = held
        now_ms = self.clock.time_ms()
        self.groups.clear()
        known = {group_id for group_id in (*group_values, *offsets, *open_offsets)
                 if self.partition_for(group_id) not in self.unavailable}
        group_values = {group_id: value for group_id, value in group_values.items() if group_id in known}
        offsets = {group_id: value for group_id, value in offsets.items() if group_id in known}
        for group_id, value in group_values.items():
            self.groups[group_id] = self._group_from_value(group_id, value, now_ms)
        for group_id, committed in offsets.items():
            if not committed:
                continue  # every offset tombstoned
            group = self.groups.get(group_id)
            if group is None:  # offsets only: a group of assign() consumers or an admin's commits
                group = self.groups[group_id] = GroupMetadata(group_id, now_ms)
            for key, (offset, position) in committed.items():
                group.offsets[key] = offset
                group.offset_positions[key] = position
        for group_id, by_producer in open_offsets.items():
            if group_id not in known:
                continue
            group = self.groups.get(group_id)
            if group is None:  # only an open transaction's offsets so far
                group = self.groups[group_id] = GroupMetadata(group_id, now_ms)
            for producer_id, held in by_producer.items():
                group.pending_transactional_offsets[producer_id] = dict(held)
        if self.groups:
            logger.info("loaded %d group(s) from %s", len(self.groups), OFFSETS_TOPIC)

    @staticmethod
    def _end_transaction(held: dict | None, commit: bool, offsets: dict) -> None:
        """A marker in the replay: its producer's held offsets committed (unless a later plain
        commit of the partition is already there) or dropped."""
        if not held or not commit:
            return
        for group_id, by_key in held.items():
            committed = offsets.setdefault(group_id, {})
            for key, (value, position) in by_key.items():
                current = committed.get(key)
                if current is None or current[1] < position:
                    committed[key] = (value, position)

    def _set_unavailable(self, partition: int, exc: LogStoreError) -> None:
        problem = (f"{OFFSETS_TOPIC}-{partition} cannot be loaded ({exc}): its consumer groups are unavailable "
                   "(COORDINATOR_NOT_AVAILABLE) until the partition is repaired")
        logger.error("%s", problem)
        self.unavailable[partition] = problem
        self.problems.append(problem)
        self.store.problems.append(problem)

    def _replay(self, record: Record, group_values: dict, offsets: dict, held: dict | None = None,
                pending: dict | None = None) -> None:
        """One data record; ``held``: its transaction's offsets (group -> partition), when it is
        transactional; ``pending``: the partition's open transactions (a tombstone drops their
        offsets of its key too, as it does in memory)."""
        if record.key is None:
            self.skipped_records += 1
            return
        key = formats.decode_key(record.key)
        if isinstance(key, formats.OffsetKey):
            partition_key = (key.topic, key.partition)
            if record.value is None:
                offsets.setdefault(key.group, {}).pop(partition_key, None)
                for by_group in (pending or {}).values():
                    by_group.get(key.group, {}).pop(partition_key, None)
                return
            value = formats.decode_offset_value(record.value)
            entry = (OffsetAndMetadata(value.offset, value.leader_epoch, value.metadata, value.commit_timestamp_ms,
                                       value.expire_timestamp_ms), record.offset)
            if held is None:
                offsets.setdefault(key.group, {})[partition_key] = entry
            else:
                held.setdefault(key.group, {})[partition_key] = entry
        elif isinstance(key, formats.GroupKey):
            if record.value is None:
                group_values.pop(key.group, None)
            else:
                group_values[key.group] = formats.decode_group_value(record.value)
        else:
            self.skipped_records += 1

    @staticmethod
    def _group_from_value(group_id: str, value, now_ms: int) -> GroupMetadata:
        state = STABLE if value.members else EMPTY
        timestamp = value.current_state_timestamp_ms
        group = GroupMetadata(group_id, timestamp if timestamp is not None and timestamp >= 0 else now_ms, state)
        if timestamp is None or timestamp < 0:
            group.state_timestamp_ms = None  # unknown: retention falls back to the commit times
        group.generation_id = value.generation
        group.protocol_type = value.protocol_type or None
        group.protocol_name = value.protocol
        for entry in value.members:
            member = MemberMetadata(entry.member_id, entry.group_instance_id, entry.client_id, entry.client_host,
                                    entry.rebalance_timeout_ms, entry.session_timeout_ms, group.protocol_type or "",
                                    [(value.protocol or "", entry.subscription)])
            member.assignment = entry.assignment
            group.add(member)  # not parked: a loaded member has no request waiting
        group.leader_id = value.leader  # as recorded (add() would pick one for a leaderless group)
        group.protocol_type = value.protocol_type or None
        return group

    # --- writes ----------------------------------------------------------------------------------

    def group_value(self, group: GroupMetadata, assignments: dict[str, bytes] | None = None):
        protocol = group.protocol_name or ""
        members = [formats.MemberValue(member.member_id, member.group_instance_id, member.client_id,
                                       member.client_host, member.rebalance_timeout_ms, member.session_timeout_ms,
                                       member.metadata(protocol),
                                       (assignments or {}).get(member.member_id, member.assignment))
                   for member in group.members.values()]
        return formats.GroupValue(group.protocol_type or "", group.generation_id, group.protocol_name,
                                  group.leader_id, group.state_timestamp_ms if group.state_timestamp_ms is not None
                                  else -1, members)

    def store_group(self, group: GroupMetadata, callback: Callable[[int], None],
                    assignments: dict[str, bytes] | None = None) -> None:
        """Write the group's record durably, then ``callback(error)`` (Kafka's error mapping for a
        group write: a storage failure is NOT_COORDINATOR, a timeout REBALANCE_IN_PROGRESS)."""
        record = Record(key=formats.encode_group_key(group.group_id),
                        value=formats.encode_group_value(self.group_value(group, assignments)),
                        timestamp_ms=self.clock.time_ms())

        def done(error: int, _first_offset: int) -> None:
            callback({errors.KAFKA_STORAGE_ERROR: errors.NOT_COORDINATOR,
                      errors.REQUEST_TIMED_OUT: errors.REBALANCE_IN_PROGRESS,
                      errors.INVALID_COMMIT_OFFSET_SIZE: errors.UNKNOWN_SERVER_ERROR}.get(error, error))

        self.append(self.partition_for(group.group_id), [record], done)

    def store_offsets(self, group_id: str, commits: dict[tuple[str, int], OffsetAndMetadata],
                      callback: Callable[[int, int], None], producer: ProducerBatch | None = None) -> None:
        """Write one record per partition, durably; ``callback(error, offset of the first record)``.
        ``producer``: a transactional commit's producer (its records form a batch of their own in
        that producer's transaction). The records are columns (``RecordColumns``): keys and values
        encoded here, each topic's key prefix once, and no ``Record`` built."""
        prefixes: dict[str, bytes] = {}
        keys, values = [], []
        pack_partition, encode_value = _OFFSET_KEY_PARTITION.pack, formats.encode_offset_value_fields
        for (topic, partition), value in commits.items():
            prefix = prefixes.get(topic)
            if prefix is None:
                prefix = prefixes[topic] = formats.offset_key_prefix(group_id, topic)
            keys.append(prefix + pack_partition(partition))
            values.append(encode_value(value.offset, value.leader_epoch, value.metadata, value.commit_timestamp_ms,
                                       value.expire_timestamp_ms))
        count = len(keys)
        self.append(self.partition_for(group_id),
                    RecordColumns(keys, values, (_NO_HEADERS,) * count, [self.clock.time_ms()] * count),
                    callback, producer)

    def append(self, partition: int, records: list[Record], callback: Callable[[int, int], None],
               producer: ProducerBatch | None = None) -> None:
        """Append ``records`` to one partition; ``callback(error, first offset)`` once they are fsynced.
        Threaded: the coordinator's ``OffsetsWriter`` thread appends what every committer queued
        meanwhile as one batch per partition and producer and covers them with one fsync; otherwise
        the append and its fsync happen on this thread (deterministic tests). ``producer``: the
        records are that producer's (a transactional batch, checked against its epoch by the log)."""
        try:
            self.ensure_topic()
        except LogStoreError as exc:
            callback(self.append_error(partition, exc), -1)
            return
        if self.threaded:
            if self._writer is None:
                self._writer = OffsetsWriter(self)
            self._writer.submit(partition, records, callback, producer)
            return
        try:
            log = self.store.get_log(OFFSETS_TOPIC, partition)
            info = log.append(records) if producer is None else log.append(records, producer=producer)
            log.flush()
        except LogStoreError as exc:
            callback(self.append_error(partition, exc), -1)
            return
        callback(errors.NONE, info.first_offset)

    def append_error(self, partition: int, exc: LogStoreError) -> int:
        """The error code for a failed append or fsync of ``__consumer_offsets`` (logged)."""
        if isinstance(exc, InvalidProducerEpochError):  # a fenced producer's transactional commit
            logger.info("%s-%d: %s", OFFSETS_TOPIC, partition, exc)
            return errors.INVALID_PRODUCER_EPOCH
        if isinstance(exc, InvalidTxnStateError):
            logger.info("%s-%d: %s", OFFSETS_TOPIC, partition, exc)
            return errors.INVALID_TXN_STATE
        if isinstance(exc, RecordTooLargeError):
            logger.warning("%s-%d: %s", OFFSETS_TOPIC, partition, exc)
            return errors.INVALID_COMMIT_OFFSET_SIZE
        logger.error("%s-%d: append failed: %s", OFFSETS_TOPIC, partition, exc)
        return errors.KAFKA_STORAGE_ERROR

    def writer_stats(self) -> dict[str, int]:
        """The writer thread's rounds, fsyncs and appends so far (zeros before its first write)."""
        writer = self._writer
        if writer is None:
            return {"rounds": 0, "fsyncs": 0, "appends": 0}
        return {"rounds": writer.rounds, "fsyncs": writer.fsyncs, "appends": writer.appends}

    def shutdown(self) -> None:
        """Write and fsync what is queued, then stop the writer thread."""
        if self._writer is not None:
            self._writer.shutdown()

    def write_tombstones(self, partition: int, keys: Iterable[bytes]) -> None:
        """Append tombstones for ``keys`` (deleted groups, expired offsets); the flusher makes them
        durable soon after. A failure is logged: the next retention round writes them again."""
        now_ms = self.clock.time_ms()
        records = [Record(key=key, value=None, timestamp_ms=now_ms) for key in keys]
        if not records:
            return
        try:
            self.ensure_topic()
            log = self.store.get_log(OFFSETS_TOPIC, partition)
            log.append(records)
            if self.threaded:
                self.store.waits.flusher.request(log)
        except LogStoreError as exc:
            logger.error("%s-%d: writing %d tombstone(s) failed: %s", OFFSETS_TOPIC, partition, len(records), exc)


def _concatenated(parts: list) -> list[Record] | RecordColumns:
    """The records of ``parts`` (sequences of records) as one sequence: columns when every part is
    ``RecordColumns`` (the commits of a round: one batch encoded from their columns, no ``Record``
    built), else a list."""
    if len(parts) == 1:
        return parts[0]
    if all(type(part) is RecordColumns for part in parts):
        keys, values, headers, timestamps = [], [], [], []
        for part in parts:
            keys += part.keys
            values += part.values
            headers += part.headers
            timestamps += part.timestamps
        return RecordColumns(keys, values, headers, timestamps)
    return [record for part in parts for record in part]


class OffsetsWriter:
    """The thread that writes ``__consumer_offsets`` for a threaded coordinator: group commit.

    Committers queue their records (``submit``) and go on; the thread takes everything queued,
    appends it as one batch per partition, fsyncs each partition touched once, and then answers
    every callback of the round. While it fsyncs, the next round's commits queue up, so the number
    of fsyncs and appends per commit falls as the load grows, and no per-commit wait object, timer
    entry or purgatory watch is made. An append or fsync failure answers the round's callbacks of
    that partition with the error (an fsync failure also fails the log: fail-stop).
    """

    def __init__(self, manager: GroupMetadataManager) -> None:
        self.manager = manager
        self._queue: list[tuple[int, list[Record], Callable[[int, int], None], ProducerBatch | None]] = []
        self._cond = threading.Condition(threading.Lock())
        self._stopped = False
        self.rounds = self.fsyncs = self.appends = 0  # counters for benchmarks and tests
        self._thread = threading.Thread(target=self._run, name="logstore-group-offsets-writer", daemon=True)
        self._thread.start()

    def submit(self, partition: int, records: list[Record], callback: Callable[[int, int], None],
               producer: ProducerBatch | None = None) -> None:
        with self._cond:
            if self._stopped:
                stopped = True
            else:
                stopped = False
                self._queue.append((partition, records, callback, producer))
                if len(self._queue) == 1:
                    self._cond.notify()
        if stopped:
            callback(errors.COORDINATOR_NOT_AVAILABLE, -1)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopped:
                    self._cond.wait()
                if not self._queue:
                    return
                work, self._queue = self._queue, []
            self.rounds += 1
            self.appends += len(work)
            try:
                self._write(work)
            except Exception:  # a bug: answer the round rather than leave committers waiting forever
                logger.exception("writing %d queued __consumer_offsets append(s) failed", len(work))
                for _partition, _records, callback, _producer in work:
                    callback(errors.UNKNOWN_SERVER_ERROR, -1)

    def _write(self, work: list[tuple[int, list[Record], Callable[[int, int], None], ProducerBatch | None]]) -> None:
        # One batch per partition and producer: a transactional commit's records are a batch of
        # their producer's alone (the plain commits of the round share one).
        by_batch: dict[tuple[int, ProducerBatch | None], list[tuple[list[Record], Callable[[int, int], None]]]] = {}
        for partition, records, callback, producer in work:
            by_batch.setdefault((partition, producer), []).append((records, callback))
        store = self.manager.store
        written = []
        for (partition, producer), items in by_batch.items():
            records = _concatenated([item_records for item_records, _callback in items])
            log = None
            try:
                log = store.get_log(OFFSETS_TOPIC, partition)
                info = log.append(records) if producer is None else log.append(records, producer=producer)
            except LogStoreError as exc:
                error = self.manager.append_error(partition, exc)
                if isinstance(exc, RecordTooLargeError) and len(items) > 1 and log is not None:
                    # One oversized commit must not fail the others of the round: one by one.
                    written.extend(self._one_by_one(log, partition, items, producer))
                    continue
                for _records, callback in items:
                    callback(error, -1)
                continue
            written.append((log, partition, info.first_offset, items))
        flushed: dict[int, int] = {}  # id(log) -> the error of its one fsync this round
        for log, partition, first_offset, items in written:
            error = flushed.get(id(log))
            if error is None:
                try:
                    log.flush()
                    self.fsyncs += 1
                    error = errors.NONE
                except LogStoreError as exc:
                    error = self.manager.append_error(partition, exc)
                flushed[id(log)] = error
            offset = first_offset
            for records, callback in items:
                callback(error, offset if error == errors.NONE else -1)
                offset += len(records)

    def _one_by_one(self, log, partition: int, items, producer: ProducerBatch | None) -> list:
        written = []
        for records, callback in items:
            try:
                info = log.append(records) if producer is None else log.append(records, producer=producer)
            except LogStoreError as exc:
                callback(self.manager.append_error(partition, exc), -1)
                continue
            written.append((log, partition, info.first_offset, [(records, callback)]))
        return written

    def shutdown(self, timeout_s: float = 10.0) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
