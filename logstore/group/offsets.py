"""``OffsetManager``: committed offsets — commit, fetch, delete, and their retention.

This module owns the offset APIs of the coordinator: OffsetCommit's validation (members of the
current generation, and generation -1 commits of ``assign()`` consumers into groups without
members), the durable write before the answer (the cache is updated only once the record is
fsynced), OffsetFetch (one partition, several, or all of a group), DeleteGroups and OffsetDelete
(tombstones), and the periodic expiry of ``offsets.retention.minutes`` with Kafka's KIP-211 rules:
an Empty group's offsets expire counted from when it became Empty, a group that never had members
counts from each commit, a Stable consumer group keeps the offsets of topics it subscribes to. A
group left Empty without offsets is removed (Dead) and its group record tombstoned.

It also owns the offsets of transactions (TxnOffsetCommit, KIP-447's member checks): they are
appended as the producer's transactional batch and held pending per producer until its marker on
the group's ``__consumer_offsets`` partition decides them (``complete_transaction``); OffsetFetch's
require_stable names the partitions they hold (UNSTABLE_OFFSET_COMMIT), retention keeps an offset a
pending one is about to replace and a group with an open transaction, and deleting a group or an
offset drops the pending ones too (as a tombstone does in a replay).

``GroupCoordinator`` holds an ``OffsetManager`` and delegates to it. What the offsets use of the
coordinator (its lock, groups and storage, the store, clock and config, whether it runs, the request
pre-check, and a commit counting as a member's liveness) is ``OffsetOwner``, defined here: this
module imports ``metadata``, ``formats``, ``consumer_protocol`` and ``results`` (and, for the
protocol's types only, ``storage``, ``config``, the clock and the store), never the coordinator.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, Mapping, Protocol

from ..errors import CorruptRecordError, LogStoreError
from ..records.batching import ProducerBatch
from . import errors, formats
from .consumer_protocol import decode_subscription
from .metadata import (COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE, GroupMetadata, MemberMetadata,
                       OffsetAndMetadata)
from .results import OffsetCommit

if TYPE_CHECKING:
    import threading

    from ..clock import Clock
    from ..manager.log_manager import LogManager
    from .config import GroupConfig
    from .storage import GroupMetadataManager

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


def subscribed_topics(group: GroupMetadata) -> set[str] | None:
    """The topics a consumer group's members subscribe to, from their metadata; None when unknown
    (not a consumer group, no protocol chosen, or metadata that does not parse)."""
    if group.protocol_type != "consumer" or not group.protocol_name or not group.members:
        return None
    topics: set[str] = set()
    try:
        for member in group.members.values():
            topics.update(decode_subscription(member.metadata(group.protocol_name)).topics)
    except CorruptRecordError:  # a client's opaque bytes that are not ConsumerProtocol: nothing is known
        return None
    return topics


class OffsetOwner(Protocol):
    """What ``OffsetManager`` uses of the coordinator that holds it."""

    lock: threading.RLock
    """Guards every group and its offsets."""

    groups: dict[str, GroupMetadata]
    """The groups by id; a commit into an unknown group may add one through ``storage``."""

    storage: GroupMetadataManager
    """Writes the offsets and tombstones to ``__consumer_offsets``, adds and removes groups."""

    store: LogManager
    """The store whose topics the offsets are for (and whether it is read-only)."""

    clock: Clock
    """Commit and expiry timestamps."""

    config: GroupConfig
    """The metadata limit and the retention."""

    @property
    def active(self) -> bool:
        """Started and not yet shut down (the retention job does nothing otherwise)."""
        ...

    def status_error(self, group_id: str, allow_empty_id: bool = False) -> int:
        """The error a request for ``group_id`` gets before its group is looked at (``errors.NONE``
        when it may go on)."""
        ...

    def complete_and_schedule_next_heartbeat(self, group: GroupMetadata, member: MemberMetadata,
                                             timeout_ms: int | None = None) -> None:
        """A liveness event of ``member``: a commit extends its session."""
        ...


class OffsetManager:
    """The offset side of a coordinator (shares its lock, groups and storage)."""

    def __init__(self, coordinator: OffsetOwner) -> None:
        self.coordinator = coordinator
        # (offsets partition, producer id) -> the groups holding that producer's pending offsets,
        # so that a marker finds them without a walk over every group (entries end with their
        # transaction).
        self._open: dict[tuple[int, int], set[str]] = {}
        # (offsets partition, producer id) -> transactional appends not yet answered, and the last
        # marker decided meanwhile ((marker offset, commit)): a transaction the coordinator ended
        # (a timeout) while its offsets' fsync was still running is applied or dropped when the
        # append is answered, never left pending with no marker to come.
        self._in_flight: dict[tuple[int, int], int] = {}
        self._decided: dict[tuple[int, int], tuple[int, bool]] = {}

    def _partition_exists(self, topic: str, partition: int) -> bool:
        return 0 <= partition < self._partition_count(topic)

    def _partition_count(self, topic: str) -> int:
        """How many partitions ``topic`` has in the store (0: no such topic)."""
        try:
            return self.coordinator.store.partitions(topic)
        except LogStoreError:
            return 0

    def _valid_offsets(self, group_id: str, offsets: Mapping[TopicPartition, OffsetCommit],
                       callback: Callable[[dict[TopicPartition, int]], None]
                       ) -> tuple[dict[TopicPartition, OffsetCommit], dict[TopicPartition, int]] | None:
        """The first checks of a commit (plain or transactional): the coordinator's state for the
        group, then each partition's existence. ``(the offsets to commit, the errors so far)``, or
        None when ``callback`` has been answered already (nothing to commit: no group is created for
        it, as Kafka never asks its coordinator)."""
        error = self.coordinator.status_error(group_id, allow_empty_id=True)
        if error != errors.NONE:
            callback({key: error for key in offsets})
            return None
        results: dict[TopicPartition, int] = {}
        valid: dict[TopicPartition, OffsetCommit] = {}
        counts: dict[str, int] = {}  # topic -> its partitions, looked up once per commit
        for key, commit in offsets.items():
            topic, partition = key
            count = counts.get(topic)
            if count is None:
                count = counts[topic] = self._partition_count(topic)
            if 0 <= partition < count:
                valid[key] = commit
            else:
                results[key] = errors.UNKNOWN_TOPIC_OR_PARTITION
        if not valid:
            callback(results)
            return None
        return valid, results

    def _group_for_commit(self, group_id: str, generation_id: int) -> tuple[GroupMetadata | None, int]:
        """Under the coordinator's lock: the group a commit goes to, or ILLEGAL_GENERATION for a
        commit naming a generation of a group that does not exist. A commit without one creates a
        group without members (an assign() consumer's or an admin's commit, or a transactional
        producer's whose consumer assigns its partitions itself)."""
        coordinator = self.coordinator
        group = coordinator.groups.get(group_id)
        if group is not None:
            return group, errors.NONE
        if generation_id >= 0:
            return None, errors.ILLEGAL_GENERATION
        return coordinator.storage.add_group(GroupMetadata(group_id, coordinator.clock.time_ms())), errors.NONE

    # --- OffsetCommit ----------------------------------------------------------------------------

    def commit(self, group_id: str, generation_id: int, member_id: str,
               offsets: Mapping[TopicPartition, OffsetCommit], *, group_instance_id: str | None = None,
               retention_ms: int = -1, callback: Callable[[dict[TopicPartition, int]], None]) -> None:
        """Commit ``offsets`` for a group; ``callback`` gets an error per partition once the commit
        is durable (or refused). ``retention_ms`` is OffsetCommit v2–v4's (-1: the broker's)."""
        coordinator = self.coordinator
        checked = self._valid_offsets(group_id, offsets, callback)
        if checked is None:
            return
        valid, results = checked
        with coordinator.lock:
            group, error = self._group_for_commit(group_id, generation_id)
            if group is not None:
                error = self._validate_commit(group, generation_id, member_id, group_instance_id)
            if error == errors.NONE and group.is_state(COMPLETING_REBALANCE):
                error = errors.REBALANCE_IN_PROGRESS
            if error != errors.NONE:
                results.update({key: error for key in valid})
                callback(results)
                return
            member = group.members.get(member_id)
            if member is not None and group.state in (STABLE, PREPARING_REBALANCE):
                coordinator.complete_and_schedule_next_heartbeat(group, member)
            now_ms = coordinator.clock.time_ms()
            limit = coordinator.config.offset_metadata_max_bytes
            to_store: dict[TopicPartition, OffsetAndMetadata] = {}
            for key, commit in valid.items():
                if commit.metadata is not None and len(commit.metadata.encode("utf-8")) > limit:
                    results[key] = errors.OFFSET_METADATA_TOO_LARGE
                    continue
                to_store[key] = OffsetAndMetadata(
                    commit.offset, commit.leader_epoch, commit.metadata,
                    commit.commit_timestamp_ms if commit.commit_timestamp_ms != -1 else now_ms,
                    now_ms + retention_ms if retention_ms != -1 else None)
            if not to_store:
                callback(results)
                return

            def stored(error: int, first_position: int) -> None:
                with coordinator.lock:
                    if error == errors.NONE and not group.is_state(DEAD):
                        for position, (key, value) in enumerate(to_store.items(), first_position):
                            # Fsyncs can complete out of order: the later record must win.
                            if group.offset_positions.get(key, -1) < position:
                                group.offsets[key] = value
                                group.offset_positions[key] = position
                    mapped = {errors.KAFKA_STORAGE_ERROR: errors.NOT_COORDINATOR}.get(error, error)
                    results.update({key: mapped for key in to_store})
                callback(results)

            coordinator.storage.store_offsets(group_id, to_store, stored)

    def _validate_commit(self, group: GroupMetadata, generation_id: int, member_id: str,
                         group_instance_id: str | None) -> int:
        if group.is_state(DEAD):
            return errors.COORDINATOR_NOT_AVAILABLE
        if generation_id >= 0 or member_id or group_instance_id is not None:
            error = group.validate_member(member_id, group_instance_id)
            if error != errors.NONE:
                return error
            return errors.ILLEGAL_GENERATION if generation_id != group.generation_id else errors.NONE
        # generation -1 without a member: only while the group has no members
        return errors.NONE if group.is_state(EMPTY) else errors.UNKNOWN_MEMBER_ID

    # --- TxnOffsetCommit and the markers that decide it ------------------------------------------

    def txn_commit(self, group_id: str, transactional_id: str, producer_id: int, producer_epoch: int,
                   generation_id: int, member_id: str, group_instance_id: str | None,
                   offsets: Mapping[TopicPartition, OffsetCommit],
                   callback: Callable[[dict[TopicPartition, int]], None]) -> None:
        """Write ``offsets`` into ``producer_id``'s transaction: appended to the group's
        ``__consumer_offsets`` partition as that producer's transactional batch (the log checks
        its epoch) and held pending until the producer's marker on that partition
        (``complete_transaction``). KIP-447: a request naming a member (generation >= 0, a member
        id or an instance id) must be a current member of the current generation
        (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION); generation -1 without a member
        (TxnOffsetCommit v0-v2) is accepted whatever the group's state. ``callback`` gets an error
        per partition once the batch is durable (or refused)."""
        if not isinstance(transactional_id, str) or not transactional_id:
            raise ValueError(f"transactional_id must be a non-empty str, got {transactional_id!r}")
        for name, value, bits in (("producer_id", producer_id, 64), ("producer_epoch", producer_epoch, 16)):
            if type(value) is not int or not 0 <= value < 2 ** (bits - 1):
                raise ValueError(f"{name} must be an int{bits} >= 0, got {value!r}")
        coordinator = self.coordinator
        checked = self._valid_offsets(group_id, offsets, callback)
        if checked is None:
            return
        valid, results = checked
        with coordinator.lock:
            group, error = self._group_for_commit(group_id, generation_id)
            if group is not None:
                error = self._validate_txn_commit(group, generation_id, member_id, group_instance_id)
            if error != errors.NONE:
                results.update({key: error for key in valid})
                callback(results)
                return
            now_ms = coordinator.clock.time_ms()
            limit = coordinator.config.offset_metadata_max_bytes
            to_store: dict[TopicPartition, OffsetAndMetadata] = {}
            for key, commit in valid.items():
                if commit.metadata is not None and len(commit.metadata.encode("utf-8")) > limit:
                    results[key] = errors.OFFSET_METADATA_TOO_LARGE
                    continue
                to_store[key] = OffsetAndMetadata(commit.offset, commit.leader_epoch, commit.metadata,
                                                  commit.commit_timestamp_ms if commit.commit_timestamp_ms != -1
                                                  else now_ms, None)
            if not to_store:
                callback(results)
                return
            partition = coordinator.storage.partition_for(group_id)
            slot = (partition, producer_id)
            self._in_flight[slot] = self._in_flight.get(slot, 0) + 1

            def stored(error: int, first_position: int) -> None:
                with coordinator.lock:
                    left = self._in_flight.get(slot, 1) - 1
                    if left > 0:
                        self._in_flight[slot] = left
                    else:
                        self._in_flight.pop(slot, None)
                    decided = self._decided.get(slot)
                    if left <= 0:
                        self._decided.pop(slot, None)
                    if error == errors.NONE and not group.is_state(DEAD):
                        for position, (key, value) in enumerate(to_store.items(), first_position):
                            group.add_pending_offset(producer_id, key, value, position)
                        self._open.setdefault(slot, set()).add(group_id)
                        if decided is not None and first_position < decided[0]:
                            # Its marker came first (the transaction ended while this was fsynced).
                            self._complete_group(group, slot, decided[1])
                    mapped = {errors.KAFKA_STORAGE_ERROR: errors.NOT_COORDINATOR}.get(error, error)
                    results.update({key: mapped for key in to_store})
                callback(results)

            logger.debug("group %s: %d offset(s) in the transaction of %r (producer %d, epoch %d)", group_id,
                         len(to_store), transactional_id, producer_id, producer_epoch)
            coordinator.storage.store_offsets(group_id, to_store, stored,
                                              ProducerBatch(producer_id, producer_epoch, -1, transactional=True))

    @staticmethod
    def _validate_txn_commit(group: GroupMetadata, generation_id: int, member_id: str,
                             group_instance_id: str | None) -> int:
        if group.is_state(DEAD):
            return errors.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.is_state(EMPTY):
            return errors.NONE
        if generation_id >= 0 or member_id or group_instance_id is not None:
            error = group.validate_member(member_id, group_instance_id)
            if error != errors.NONE:
                return error
            return errors.ILLEGAL_GENERATION if generation_id != group.generation_id else errors.NONE
        # Generation -1 without a member: what TxnOffsetCommit v0-v2 send; their producers were fenced
        # by their transactional ids alone, so the group's state is not asked (as Kafka).
        return errors.NONE

    def complete_transaction(self, offsets_partition: int, producer_id: int, commit: bool,
                             marker_offset: int) -> int:
        """``producer_id``'s marker at ``marker_offset`` of ``__consumer_offsets``-``offsets_partition``
        is durable: on commit its pending offsets of that partition's groups become committed (a
        plain commit written after one of them keeps its place), on abort they are dropped. Returns
        how many committed offsets changed."""
        coordinator = self.coordinator
        slot = (offsets_partition, producer_id)
        changed = 0
        with coordinator.lock:
            if self._in_flight.get(slot):
                previous = self._decided.get(slot)
                if previous is None or previous[0] < marker_offset:
                    self._decided[slot] = (marker_offset, commit)
            for group_id in self._open.pop(slot, ()):
                group = coordinator.groups.get(group_id)
                if group is not None:
                    changed += self._complete_group(group, None, commit, producer_id)
        if changed:
            logger.debug("__consumer_offsets-%d: producer %d's marker committed %d offset(s)", offsets_partition,
                         producer_id, changed)
        return changed

    def _complete_group(self, group: GroupMetadata, slot: tuple[int, int] | None, commit: bool,
                        producer_id: int | None = None) -> int:
        if slot is not None:
            producer_id = slot[1]
            groups = self._open.get(slot)
            if groups is not None:
                groups.discard(group.group_id)
                if not groups:
                    del self._open[slot]
        return len(group.complete_pending(producer_id, commit))

    def index_pending(self) -> None:
        """Rebuild the index of open transactions from the groups (after a replay)."""
        coordinator = self.coordinator
        with coordinator.lock:
            self._open.clear()
            for group in coordinator.groups.values():
                partition = coordinator.storage.partition_for(group.group_id)
                for producer_id in group.pending_transactional_offsets:
                    self._open.setdefault((partition, producer_id), set()).add(group.group_id)

    # --- OffsetFetch -----------------------------------------------------------------------------

    def fetch(self, group_id: str, partitions: list[TopicPartition] | None
              ) -> tuple[int, dict[TopicPartition, OffsetAndMetadata | None]]:
        """(error, committed offset per partition: None where nothing is committed); ``partitions``
        None asks for every committed partition of the group. Answered whatever the group's state."""
        coordinator = self.coordinator
        error = coordinator.status_error(group_id, allow_empty_id=True)
        if error != errors.NONE:
            return error, {}
        with coordinator.lock:
            group = coordinator.groups.get(group_id)
            if group is None or group.is_state(DEAD):
                return errors.NONE, {} if partitions is None else {key: None for key in partitions}
            if partitions is None:
                return errors.NONE, dict(group.offsets)
            return errors.NONE, {key: group.offsets.get(key) for key in partitions}

    def unstable(self, group_id: str, partitions: list[TopicPartition] | None) -> set[TopicPartition]:
        """Of ``partitions`` (None: the group's committed ones), those an open transaction holds an
        offset for: OffsetFetch with require_stable answers them UNSTABLE_OFFSET_COMMIT, so that a
        consumer does not start from the offset the transaction is about to replace."""
        coordinator = self.coordinator
        with coordinator.lock:
            group = coordinator.groups.get(group_id)
            if group is None or group.is_state(DEAD) or not group.pending_transactional_offsets:
                return set()
            pending = group.pending_keys()
            return pending & set(group.offsets if partitions is None else partitions)

    # --- deleting --------------------------------------------------------------------------------

    def delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        """Delete Empty groups (their offsets and record tombstoned): NONE, NON_EMPTY_GROUP for a
        group with members, GROUP_ID_NOT_FOUND for an unknown one."""
        coordinator = self.coordinator
        results: dict[str, int] = {}
        for group_id in group_ids:
            error = coordinator.status_error(group_id, allow_empty_id=True)
            if error != errors.NONE:
                results[group_id] = error
                continue
            with coordinator.lock:
                group = coordinator.groups.get(group_id)
                if group is None or group.is_state(DEAD):
                    results[group_id] = errors.GROUP_ID_NOT_FOUND
                elif not group.is_state(EMPTY):
                    results[group_id] = errors.NON_EMPTY_GROUP
                else:
                    # An open transaction's offsets go too (tombstoned where nothing is committed),
                    # so its commit marker brings none of them back, in memory or in a replay.
                    removed = list(dict.fromkeys([*group.offsets, *group.pending_keys()]))
                    group.offsets.clear()
                    group.offset_positions.clear()
                    group.remove_pending(removed)
                    group.transition_to(DEAD, coordinator.clock.time_ms())
                    coordinator.storage.remove_group(group_id)
                    self._tombstone(group, removed, group_key=group.generation_id > 0)
                    logger.info("group %s deleted (%d committed offset(s))", group_id, len(removed))
                    results[group_id] = errors.NONE
        return results

    def delete_offsets(self, group_id: str, partitions: list[TopicPartition]
                       ) -> tuple[int, dict[TopicPartition, int]]:
        """OffsetDelete: remove a group's offsets for ``partitions`` unless an active consumer group
        subscribes to their topic (GROUP_SUBSCRIBED_TO_TOPIC)."""
        coordinator = self.coordinator
        error = coordinator.status_error(group_id, allow_empty_id=True)
        if error != errors.NONE:
            return error, {}
        with coordinator.lock:
            group = coordinator.groups.get(group_id)
            if group is None or group.is_state(DEAD):
                return errors.GROUP_ID_NOT_FOUND, {}
            if not group.is_state(EMPTY) and group.protocol_type != "consumer":
                return errors.NON_EMPTY_GROUP, {}
            subscribed = None if group.is_state(EMPTY) else subscribed_topics(group)
            results: dict[TopicPartition, int] = {}
            removed = []
            for key in partitions:
                if not self._partition_exists(*key):
                    results[key] = errors.UNKNOWN_TOPIC_OR_PARTITION
                elif not group.is_state(EMPTY) and (subscribed is None or key[0] in subscribed):
                    results[key] = errors.GROUP_SUBSCRIBED_TO_TOPIC
                else:
                    pending = group.has_pending_offset(key)
                    if group.offsets.pop(key, None) is not None or pending:
                        group.offset_positions.pop(key, None)
                        group.remove_pending([key])
                        removed.append(key)
                    results[key] = errors.NONE
            self._tombstone(group, removed, group_key=False)
            return errors.NONE, results

    def _tombstone(self, group: GroupMetadata, removed: list[TopicPartition], group_key: bool) -> None:
        keys = [formats.encode_offset_key(group.group_id, topic, partition) for topic, partition in removed]
        if group_key:
            keys.append(formats.encode_group_key(group.group_id))
        storage = self.coordinator.storage
        storage.write_tombstones(storage.partition_for(group.group_id), keys)

    # --- retention -------------------------------------------------------------------------------

    def remove_expired(self, now_ms: int | None = None) -> int:
        """One retention round (``offsets.retention.check.interval.ms``): expire offsets by KIP-211's
        rules, tombstone them, and remove Empty groups left without offsets. Returns how many
        offsets expired."""
        coordinator = self.coordinator
        if not coordinator.active or coordinator.store.read_only:
            return 0
        now_ms = coordinator.clock.time_ms() if now_ms is None else now_ms
        retention_ms = coordinator.config.offsets_retention_ms
        expired_total = 0
        with coordinator.lock:
            for group in list(coordinator.groups.values()):
                expired = self._expired_offsets(group, now_ms, retention_ms)
                for key in expired:
                    group.offsets.pop(key, None)
                    group.offset_positions.pop(key, None)
                # A group with an open transaction stays: its marker may still commit offsets.
                gone = group.is_state(EMPTY) and not group.offsets and not group.pending_transactional_offsets
                if gone:
                    group.transition_to(DEAD, now_ms)
                    coordinator.storage.remove_group(group.group_id)
                if expired or gone:
                    self._tombstone(group, expired, group_key=gone and group.generation_id > 0)
                    logger.info("group %s: %d offset(s) expired%s", group.group_id, len(expired),
                                "; group removed" if gone else "")
                expired_total += len(expired)
        return expired_total

    @staticmethod
    def _expired_offsets(group: GroupMetadata, now_ms: int, retention_ms: int) -> list[TopicPartition]:
        pending = group.pending_keys()  # an offset an open transaction is about to replace is kept

        def expired(base_of: Callable[[OffsetAndMetadata], int], keep: set[str] = frozenset()) -> list:
            found = []
            for key, value in group.offsets.items():
                if key[0] in keep or key in pending:
                    continue
                if value.expire_timestamp_ms is not None:  # OffsetCommit v2-v4 set its own expiry
                    if now_ms >= value.expire_timestamp_ms:
                        found.append(key)
                elif now_ms - base_of(value) >= retention_ms:
                    found.append(key)
            return found

        if group.protocol_type and group.is_state(EMPTY):
            state_ms = group.state_timestamp_ms
            return expired(lambda value: state_ms if state_ms is not None else value.commit_timestamp_ms)
        if group.protocol_type == "consumer" and group.is_state(STABLE):
            topics = subscribed_topics(group)
            if topics is not None:
                return expired(lambda value: value.commit_timestamp_ms, topics)
            return []
        if not group.protocol_type:
            return expired(lambda value: value.commit_timestamp_ms)
        return []
