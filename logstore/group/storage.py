"""``GroupMetadataManager``: the groups cache and the ``__consumer_offsets`` topic behind it.

This module owns everything the coordinator keeps on disk (reference §6.4–§6.5): creating the
compacted internal topic, mapping a group to its partition (Kafka's mapping, so tools that read the
topic find a group where Kafka would put it), writing group records and offset commits durably
(an append, then an fsync through the store's group-commit flusher, and only then the callback),
writing tombstones, and replaying the topic at start-up into ``GroupMetadata`` objects: the last
record of a key wins, a tombstone deletes, groups with members come back Stable and the others
Empty. The replay of a compacted topic gives the same state, which is what compaction is for.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Iterable

from ..clock import Clock
from ..errors import CorruptRecordError, LogStoreError, RecordTooLargeError, StorageError
from ..log.waits import DelayedProduce
from ..manager.log_manager import LogManager
from ..records.decoder import Record
from . import errors, formats
from .config import GroupConfig
from .metadata import EMPTY, STABLE, GroupMetadata, MemberMetadata, OffsetAndMetadata

logger = logging.getLogger("logstore.group.storage")

OFFSETS_TOPIC = formats.OFFSETS_TOPIC


class DurableAppend(DelayedProduce):
    """Waits in the store's produce purgatory until an append to ``__consumer_offsets`` is fsynced,
    then calls ``done(error)``: NONE, REQUEST_TIMED_OUT, or KAFKA_STORAGE_ERROR."""

    def __init__(self, delay_ms: int, log, required_offset: int, done: Callable[[int], None]) -> None:
        super().__init__(delay_ms, log, required_offset)
        self.callback = done

    def on_complete(self) -> None:
        super().on_complete()
        log = self.log
        if log.recovery_point >= self.required_offset:
            error = errors.NONE
        elif log.failed or log.closed:
            error = errors.KAFKA_STORAGE_ERROR
        else:
            error = errors.REQUEST_TIMED_OUT
        self.callback(error)


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
        self.problems: list[str] = []  # records the replay could not decode

    # --- the topic -------------------------------------------------------------------------------

    def startup(self) -> None:
        """Create the topic (a writable store) and replay it into ``groups``."""
        store = self.store
        if OFFSETS_TOPIC in store.topics():
            self.num_partitions = store.partitions(OFFSETS_TOPIC)
        elif not store.read_only:
            store.create_topic(OFFSETS_TOPIC, partitions=self.num_partitions, config={
                "cleanup.policy": "compact", "segment.bytes": self.config.offsets_topic_segment_bytes})
            logger.info("created %s with %d partitions", OFFSETS_TOPIC, self.num_partitions)
        else:
            return  # a read-only view of a store that never had groups
        self.load()

    def partition_for(self, group_id: str) -> int:
        return formats.partition_for(group_id, self.num_partitions)

    def add_group(self, group: GroupMetadata) -> GroupMetadata:
        return self.groups.setdefault(group.group_id, group)

    def remove_group(self, group_id: str) -> None:
        self.groups.pop(group_id, None)

    # --- replay ----------------------------------------------------------------------------------

    def load(self) -> None:
        """Replay every partition of the topic from its start (reference §6.5)."""
        group_values: dict[str, formats.GroupValue] = {}
        offsets: dict[str, dict[tuple[str, int], tuple[OffsetAndMetadata, int]]] = {}
        for partition in range(self.num_partitions):
            try:
                log = self.store.get_log(OFFSETS_TOPIC, partition)
            except LogStoreError as exc:  # an offline partition: its groups are unknown, say so
                logger.error("%s-%d cannot be loaded: %s", OFFSETS_TOPIC, partition, exc)
                continue
            for record in log.iter_records():
                try:
                    self._replay(record, group_values, offsets)
                except CorruptRecordError as exc:
                    # One bad record must not take every group down: it is skipped, and reported.
                    problem = f"{OFFSETS_TOPIC}-{partition} offset {record.offset}: skipped: {exc}"
                    logger.error("%s", problem)
                    self.problems.append(problem)
        now_ms = self.clock.time_ms()
        self.groups.clear()
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
        if self.groups:
            logger.info("loaded %d group(s) from %s", len(self.groups), OFFSETS_TOPIC)

    def _replay(self, record: Record, group_values: dict, offsets: dict) -> None:
        if record.key is None:
            self.skipped_records += 1
            return
        key = formats.decode_key(record.key)
        if isinstance(key, formats.OffsetKey):
            committed = offsets.setdefault(key.group, {})
            if record.value is None:
                committed.pop((key.topic, key.partition), None)
            else:
                value = formats.decode_offset_value(record.value)
                committed[(key.topic, key.partition)] = (
                    OffsetAndMetadata(value.offset, value.leader_epoch, value.metadata, value.commit_timestamp_ms,
                                      value.expire_timestamp_ms), record.offset)
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
        group.leader_id = value.leader
        for entry in value.members:
            member = MemberMetadata(entry.member_id, entry.group_instance_id, entry.client_id, entry.client_host,
                                    entry.rebalance_timeout_ms, entry.session_timeout_ms, group.protocol_type or "",
                                    [(value.protocol or "", entry.subscription)])
            member.assignment = entry.assignment
            group.members[member.member_id] = member
            if member.group_instance_id is not None:
                group.static_members[member.group_instance_id] = member.member_id
            for name in member.protocol_names:
                group.supported_protocols[name] = group.supported_protocols.get(name, 0) + 1
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
                      callback: Callable[[int, int], None]) -> None:
        """Write one record per partition, durably; ``callback(error, offset of the first record)``."""
        now_ms = self.clock.time_ms()
        records = [Record(key=formats.encode_offset_key(group_id, topic, partition),
                          value=formats.encode_offset_value(formats.OffsetValue(
                              value.offset, value.leader_epoch, value.metadata, value.commit_timestamp_ms,
                              value.expire_timestamp_ms)),
                          timestamp_ms=now_ms)
                   for (topic, partition), value in commits.items()]
        self.append(self.partition_for(group_id), records, callback)

    def append(self, partition: int, records: list[Record], callback: Callable[[int, int], None]) -> None:
        """Append ``records`` to one partition; ``callback(error, first offset)`` once they are fsynced
        (at once on a failed append). Threaded: the fsync is waited for in the produce purgatory, not
        on this thread; otherwise the append blocks until durable (deterministic tests)."""
        try:
            log = self.store.get_log(OFFSETS_TOPIC, partition)
            info = log.append(records)
        except RecordTooLargeError as exc:
            logger.warning("%s-%d: %s", OFFSETS_TOPIC, partition, exc)
            callback(errors.INVALID_COMMIT_OFFSET_SIZE, -1)
            return
        except (StorageError, LogStoreError) as exc:
            logger.error("%s-%d: append failed: %s", OFFSETS_TOPIC, partition, exc)
            callback(errors.KAFKA_STORAGE_ERROR, -1)
            return
        first_offset = info.first_offset
        timeout_ms = self.config.offsets_commit_timeout_ms
        waits = self.store.waits
        operation = DurableAppend(timeout_ms, log, info.last_offset + 1, lambda error: callback(error, first_offset))
        if self.threaded:
            waits.flusher.request(log)
            waits.produce.try_complete_else_watch(operation, [log.key])
        else:
            log.flush()
            operation.force_complete()

    def write_tombstones(self, partition: int, keys: Iterable[bytes]) -> None:
        """Append tombstones for ``keys`` (deleted groups, expired offsets); the flusher makes them
        durable soon after. A failure is logged: the next retention round writes them again."""
        now_ms = self.clock.time_ms()
        records = [Record(key=key, value=None, timestamp_ms=now_ms) for key in keys]
        if not records:
            return
        try:
            log = self.store.get_log(OFFSETS_TOPIC, partition)
            log.append(records)
            if self.threaded:
                self.store.waits.flusher.request(log)
        except LogStoreError as exc:
            logger.error("%s-%d: writing %d tombstone(s) failed: %s", OFFSETS_TOPIC, partition, len(records), exc)
