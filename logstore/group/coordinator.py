"""``GroupCoordinator``: Kafka's classic group protocol over a store.

This module owns the membership protocol: JoinGroup (new members, MEMBER_ID_REQUIRED for v4+,
static members and their fencing, the protocol vote, leader election), SyncGroup (the leader's
assignment stored, followers parked until it is), Heartbeat (REBALANCE_IN_PROGRESS as the rebalance
signal), and the decisions behind the join and sync phases: when a join phase may complete and what
its completion does, what a sync timeout removes. Sessions and departures (LeaveGroup, evictions)
are ``MemberSessions``' (``sessions``), committed offsets ``OffsetManager``'s (``offsets``), the
groups cache and the ``__consumer_offsets`` topic ``GroupMetadataManager``'s (``storage``).

It is the top of the group package's coordinator side: it imports ``delayed``, ``sessions``,
``offsets`` and ``storage``, and none of them imports it. Each of those names what it uses of the
coordinator in a ``typing.Protocol`` of its own (``delayed.RebalanceOwner``: the lock, the rebalance
purgatory and the join and sync decisions; ``sessions.SessionOwner``; ``offsets.OffsetOwner``), and
the coordinator passes itself as that. The members those protocols name are its public interface to
them: ``lock``, ``groups``, ``storage``, the two purgatories, ``status_error``,
``maybe_prepare_rebalance``, ``complete_and_schedule_next_heartbeat`` and the phases' decisions.

Threading: one re-entrant lock (``lock``) guards every group; the delayed operations use it as their
lock, so a purgatory check runs under it and a timer expiry takes it. Answers go out through the
callbacks the requests came with, possibly on another thread (a timer's, or the one that completed
a rebalance). ``threaded=False`` runs the timers only when ``advance_clock()`` is called and makes
writes synchronous, so a test drives time with a ``ManualClock`` and sees a deterministic order.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Collection, Mapping

from ..clock import SYSTEM_CLOCK, Clock
from ..manager.log_manager import LogManager
from ..timer.purgatory import DelayedOperationPurgatory
from ..timer.system_timer import SystemTimer
from . import errors
from .config import GroupConfig
from .delayed import DelayedJoin, DelayedSync, InitialDelayedJoin, join_key, member_key, sync_key
from .metadata import (COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE, GroupMetadata,
                       MemberMetadata, OffsetAndMetadata)
from .offsets import OffsetManager
from .results import GroupOverview, GroupSummary, JoinMember, JoinResult, MemberSummary, OffsetCommit, SyncResult
from .sessions import MemberSessions
from .storage import GroupMetadataManager

logger = logging.getLogger(__name__)

NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000  # a new member parked in a join phase longer than this is dropped


class GroupCoordinator:
    """The consumer-group coordinator of one store. Use ``GroupCoordinator.of(store)`` to share one
    per store in a process (the server and in-process consumers then see the same groups)."""

    _instances: dict[int, "GroupCoordinator"] = {}  # id(store) -> its coordinator, until either closes
    _instances_lock = threading.Lock()

    def __init__(self, store: LogManager, *, config: GroupConfig | Mapping[str, Any] | None = None,
                 clock: Clock | None = None, threaded: bool = True) -> None:
        if not isinstance(store, LogManager):
            raise TypeError(f"store must be a LogManager, got {store!r}")
        self.store = store
        self.config = config if isinstance(config, GroupConfig) else GroupConfig.from_properties(config)
        self.clock = clock or SYSTEM_CLOCK
        self.threaded = threaded
        self.lock = threading.RLock()
        self.rebalance_purgatory = self._purgatory("Rebalance")
        self.heartbeat_purgatory = self._purgatory("Heartbeat")
        self.storage = GroupMetadataManager(store, self.config, self.clock, self.lock, threaded=threaded)
        self.groups = self.storage.groups
        self.offsets = OffsetManager(self)
        self.sessions = MemberSessions(self)
        self._active = False
        self._retention_task = None
        self.rebalances = 0  # rebalances started, ever (Kafka's group-rebalance-count); under ``lock``

    def _purgatory(self, name: str) -> DelayedOperationPurgatory:
        timer = SystemTimer(f"group-{name.lower()}", clock=self.clock, executor_thread=self.threaded)
        return DelayedOperationPurgatory(name, timer, reaper_enabled=self.threaded)

    @classmethod
    def of(cls, store: LogManager, config: GroupConfig | Mapping[str, Any] | None = None,
           clock: Clock | None = None) -> "GroupCoordinator":
        """The started coordinator of ``store`` in this process, created on first use (with ``config``)."""
        with cls._instances_lock:
            coordinator = cls._instances.get(id(store))
            if coordinator is None or coordinator.store is not store or not coordinator._active:
                coordinator = cls(store, config=config, clock=clock)
                coordinator.startup()
                cls._instances[id(store)] = coordinator
            return coordinator

    @classmethod
    def running(cls, store: LogManager) -> "GroupCoordinator | None":
        """The started coordinator ``of(store)`` made in this process, if there is one."""
        with cls._instances_lock:
            coordinator = cls._instances.get(id(store))
        if coordinator is not None and coordinator.store is store and coordinator._active:
            return coordinator
        return None

    # --- life cycle -------------------------------------------------------------------------------

    def startup(self) -> None:
        """Create ``__consumer_offsets`` if missing (writable stores), replay it, start the timers and
        the offset-retention job. Groups with members come back Stable with fresh session timers."""
        with self.lock:
            self.storage.startup()
            self.offsets.index_pending()
            for group in self.groups.values():
                for member in group.members.values():
                    self.complete_and_schedule_next_heartbeat(group, member)
            self._active = True
        self.store.on_close(self.shutdown)  # stop before the store's logs close
        if self.threaded and not self.store.read_only:
            interval = self.config.offsets_retention_check_interval_ms
            self._retention_task = self.store.scheduler.schedule("group-offsets-retention",
                                                                 self.offsets.remove_expired, interval, interval)

    def shutdown(self) -> None:
        """Stop the timers and the retention job; parked requests are not answered (their connections
        are closing). A second call does nothing."""
        with self.lock:
            if not self._active:
                return
            self._active = False
        if self._retention_task is not None:
            self._retention_task.cancel()
        self.storage.shutdown()  # what committers queued is written and answered first
        self.rebalance_purgatory.shutdown()
        self.heartbeat_purgatory.shutdown()
        with self._instances_lock:
            if self._instances.get(id(self.store)) is self:
                del self._instances[id(self.store)]

    def __enter__(self) -> "GroupCoordinator":
        if not self._active:
            self.startup()
        return self

    def __exit__(self, *exc_info) -> None:
        self.shutdown()

    @property
    def active(self) -> bool:
        return self._active

    def advance_clock(self) -> int:
        """``threaded=False``: run every timer that is due on the clock; returns how many rounds ran."""
        rounds = 0
        while self.rebalance_purgatory.advance_clock(0) | self.heartbeat_purgatory.advance_clock(0):
            rounds += 1
        return rounds

    def partition_for(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition holding ``group_id`` (Kafka's mapping)."""
        return self.storage.partition_for(group_id)

    def status_error(self, group_id: str, allow_empty_id: bool = False) -> int:
        """The error a request for ``group_id`` gets before its group is looked at, ``errors.NONE``
        when it may go on: COORDINATOR_NOT_AVAILABLE while not started or when the group's partition
        could not be loaded, INVALID_GROUP_ID for an empty id unless ``allow_empty_id``. The
        sessions' and the offsets' requests are checked with it too."""
        if not isinstance(group_id, str):
            raise TypeError(f"group_id must be a str, got {group_id!r}")
        if not self._active:
            return errors.COORDINATOR_NOT_AVAILABLE
        if not group_id and not allow_empty_id:
            return errors.INVALID_GROUP_ID
        if self.storage.unavailable and self.storage.partition_for(group_id) in self.storage.unavailable:
            return errors.COORDINATOR_NOT_AVAILABLE  # its partition could not be loaded: unknown, not empty
        return errors.NONE

    def _now(self) -> int:
        return self.clock.time_ms()

    # --- JoinGroup -------------------------------------------------------------------------------

    def join_group(self, group_id: str, member_id: str, *, protocol_type: str, protocols: list[tuple[str, bytes]],
                   session_timeout_ms: int, rebalance_timeout_ms: int = -1, group_instance_id: str | None = None,
                   client_id: str = "", client_host: str = "", require_known_member_id: bool = True,
                   callback: Callable[[JoinResult], None]) -> None:
        """Handle a JoinGroup; ``callback`` gets the answer, now or when the join phase completes."""
        protocols = [(name, bytes(metadata)) for name, metadata in protocols]
        if rebalance_timeout_ms < 0:  # JoinGroup v0 has none: the session timeout stands in
            rebalance_timeout_ms = session_timeout_ms
        error = self.status_error(group_id)
        if error == errors.NONE and not (self.config.min_session_timeout_ms <= session_timeout_ms
                                         <= self.config.max_session_timeout_ms):
            error = errors.INVALID_SESSION_TIMEOUT
        if error != errors.NONE:
            callback(JoinResult.error(error, member_id))
            return
        with self.lock:
            group = self.groups.get(group_id)
            if group is None:
                if member_id:
                    callback(JoinResult.error(errors.UNKNOWN_MEMBER_ID, member_id))
                    return
                group = self.storage.add_group(GroupMetadata(group_id, self._now()))
            if not self._accept_joining_member(group, member_id):
                member = group.members.get(member_id)
                if member is not None:
                    self.remove_member_and_update_group(group, member, "the group is full")
                group.pending_members.discard(member_id)
                callback(JoinResult.error(errors.GROUP_MAX_SIZE_REACHED, member_id))
                return
            args = (protocol_type, protocols, session_timeout_ms, rebalance_timeout_ms, group_instance_id,
                    client_id, client_host, callback)
            if not member_id:
                self._new_member_join(group, require_known_member_id, *args)
            else:
                self._current_member_join(group, member_id, *args)
            if group.is_state(PREPARING_REBALANCE):
                self.rebalance_purgatory.check_and_complete(join_key(group_id))

    def _accept_joining_member(self, group: GroupMetadata, member_id: str) -> bool:
        limit = self.config.max_size
        if group.state in (EMPTY, DEAD):
            return True
        if group.is_state(PREPARING_REBALANCE):
            member = group.members.get(member_id)
            return (member is not None and member.awaiting_join is not None) or group.num_awaiting_join() < limit
        return member_id in group.members or len(group.members) < limit

    def _new_member_join(self, group: GroupMetadata, require_known_member_id: bool, protocol_type, protocols,
                         session_timeout_ms, rebalance_timeout_ms, group_instance_id, client_id, client_host,
                         callback) -> None:
        if group.is_state(DEAD):
            callback(JoinResult.error(errors.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(protocol_type, [name for name, _ in protocols]):
            callback(JoinResult.error(errors.INCONSISTENT_GROUP_PROTOCOL))
            return
        new_member_id = group.generate_member_id(client_id, group_instance_id)
        if group_instance_id is not None:
            old_member_id = group.static_member_id(group_instance_id)
            if old_member_id is not None:
                self._replace_static_member(group, group_instance_id, old_member_id, new_member_id, protocols,
                                            session_timeout_ms, rebalance_timeout_ms, callback)
                return
        elif require_known_member_id:
            # KIP-394: hand out the id and wait for the member to come back with it, so a client that
            # retries a lost JoinGroup does not leave a ghost member behind.
            self.sessions.await_rejoin(group, new_member_id, session_timeout_ms)
            callback(JoinResult.error(errors.MEMBER_ID_REQUIRED, new_member_id))
            return
        self._add_member_and_rebalance(group, new_member_id, protocol_type, protocols, session_timeout_ms,
                                       rebalance_timeout_ms, group_instance_id, client_id, client_host, callback)

    def _current_member_join(self, group: GroupMetadata, member_id: str, protocol_type, protocols,
                             session_timeout_ms, rebalance_timeout_ms, group_instance_id, client_id, client_host,
                             callback) -> None:
        if group.is_state(DEAD):
            callback(JoinResult.error(errors.COORDINATOR_NOT_AVAILABLE, member_id))
            return
        if not group.supports_protocols(protocol_type, [name for name, _ in protocols]):
            callback(JoinResult.error(errors.INCONSISTENT_GROUP_PROTOCOL, member_id))
            return
        if member_id in group.pending_members:
            self._add_member_and_rebalance(group, member_id, protocol_type, protocols, session_timeout_ms,
                                           rebalance_timeout_ms, group_instance_id, client_id, client_host, callback)
            return
        error = group.validate_member(member_id, group_instance_id)
        if error != errors.NONE:
            callback(JoinResult.error(error, member_id))
            return
        member = group.members[member_id]
        if group.state == PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, protocols, session_timeout_ms, rebalance_timeout_ms,
                                              callback)
        elif group.state == COMPLETING_REBALANCE:
            if member.matches(protocols):
                # The member missed its JoinGroup answer: give it the current generation again.
                callback(self._join_result(group, member))
            else:
                self._update_member_and_rebalance(group, member, protocols, session_timeout_ms,
                                                  rebalance_timeout_ms, callback)
        elif group.state == STABLE:
            if member_id == group.leader_id or not member.matches(protocols):
                # The leader rejoining means it wants a new assignment (its metadata changed, or a
                # topic it follows did): always a rebalance.
                self._update_member_and_rebalance(group, member, protocols, session_timeout_ms,
                                                  rebalance_timeout_ms, callback)
            else:
                callback(self._join_result(group, member, with_members=False))
        else:
            callback(JoinResult.error(errors.UNKNOWN_MEMBER_ID, member_id))

    def _join_result(self, group: GroupMetadata, member: MemberMetadata, with_members: bool = True,
                     leader_id: str | None = None) -> JoinResult:
        members = []
        if with_members and member.member_id == group.leader_id:
            members = [JoinMember(*entry) for entry in group.current_member_metadata()]
        return JoinResult(errors.NONE, group.generation_id, group.protocol_type, group.protocol_name,
                          group.leader_id if leader_id is None else leader_id, member.member_id, members)

    def _add_member_and_rebalance(self, group: GroupMetadata, member_id: str, protocol_type, protocols,
                                  session_timeout_ms, rebalance_timeout_ms, group_instance_id, client_id,
                                  client_host, callback) -> None:
        member = MemberMetadata(member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
                                session_timeout_ms, protocol_type, protocols)
        member.is_new = True
        if group.is_state(PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True  # extends the initial delay (KIP-134)
        was_pending = member_id in group.pending_members
        group.add(member, callback)
        # A new member parked in a join phase that never completes is dropped after 5 minutes.
        self.complete_and_schedule_next_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        if was_pending:  # its wait as a pending id is over: that timer leaves the wheel now
            self.heartbeat_purgatory.check_and_complete(member_key(group.group_id, member_id))
        self.maybe_prepare_rebalance(group, f"member {member_id} joined")

    def _update_member_and_rebalance(self, group: GroupMetadata, member: MemberMetadata, protocols,
                                     session_timeout_ms, rebalance_timeout_ms, callback) -> None:
        group.update_protocols(member, protocols)
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.awaiting_join = callback  # a retried JoinGroup replaces the parked one (Kafka does too)
        self.maybe_prepare_rebalance(group, f"member {member.member_id} rejoined")

    def _replace_static_member(self, group: GroupMetadata, instance_id: str, old_member_id: str,
                               new_member_id: str, protocols, session_timeout_ms, rebalance_timeout_ms,
                               callback) -> None:
        """A static member restarted (KIP-345): it takes over its old membership under a new id, and
        its old incarnation is fenced. In a Stable group whose protocol stays the same: no rebalance."""
        old = group.members[old_member_id]
        if old.awaiting_join is not None:
            old.awaiting_join(JoinResult.error(errors.FENCED_INSTANCE_ID, old_member_id))
            old.awaiting_join = None
        if old.awaiting_sync is not None:
            old.awaiting_sync(SyncResult(errors.FENCED_INSTANCE_ID))
            old.awaiting_sync = None
        previous_leader = group.leader_id
        member = group.replace_static_member(instance_id, old_member_id, new_member_id)
        self.heartbeat_purgatory.cancel_for_key(member_key(group.group_id, old_member_id))
        member.heartbeat_op = None  # that timer watched the old id
        self.complete_and_schedule_next_heartbeat(group, member)
        group.update_protocols(member, protocols)
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        if group.state == STABLE:
            if group.select_protocol() == group.protocol_name:
                member.awaiting_join = None

                def stored(error: int) -> None:
                    if error != errors.NONE:
                        callback(JoinResult.error(error, new_member_id))
                    else:
                        # The old leader id: a restarted leader must not run a new assignment (pre-v9).
                        callback(self._join_result(group, member, with_members=False, leader_id=previous_leader))

                self.storage.store_group(group, stored)
            else:
                member.awaiting_join = callback
                self.maybe_prepare_rebalance(group, f"static member {instance_id} changed the protocol")
        elif group.state == COMPLETING_REBALANCE:
            member.awaiting_join = callback
            self._prepare_rebalance(group, f"static member {instance_id} rejoined during a sync")
        else:  # PreparingRebalance: wait with the others
            member.awaiting_join = callback

    def maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        """Start a rebalance of ``group`` (logging ``reason``) unless one is already preparing or the
        group is Dead. Under ``lock``; ``sessions`` calls it when a member leaves."""
        if group.state in (STABLE, COMPLETING_REBALANCE, EMPTY):
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_state(COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, errors.REBALANCE_IN_PROGRESS)
        self.rebalance_purgatory.cancel_for_key(sync_key(group.group_id))
        group.sync_op = None
        if group.is_state(EMPTY):
            delay_ms = self.config.initial_rebalance_delay_ms
            operation = InitialDelayedJoin(self, group, delay_ms, delay_ms,
                                           max(group.rebalance_timeout_ms() - delay_ms, 0))
        else:
            operation = DelayedJoin(self, group, group.rebalance_timeout_ms())
        group.transition_to(PREPARING_REBALANCE, self._now())
        group.join_op = operation
        self.rebalances += 1
        logger.info("group %s: rebalancing (generation %d): %s", group.group_id, group.generation_id, reason)
        self.rebalance_purgatory.try_complete_else_watch(operation, [join_key(group.group_id)])

    # --- the phases' decisions (``delayed.RebalanceOwner``: called by DelayedJoin and DelayedSync) ---

    def can_complete_join(self, group: GroupMetadata) -> bool:
        """Whether ``group``'s join phase may complete: every member has rejoined and no member id
        handed out with MEMBER_ID_REQUIRED is still pending."""
        return group.has_all_members_joined()

    def on_complete_join(self, group: GroupMetadata, operation: DelayedJoin) -> None:
        """End a join phase: drop the members that did not rejoin, start the next generation, answer
        the parked JoinGroups and start the sync phase (or wait another round for static members)."""
        with self.lock:
            if group.join_op is not operation:
                return  # superseded (the group was deleted or a newer join phase started)
            group.join_op = None
            for member in group.not_yet_rejoined():
                if not member.is_static:  # static members keep their place until their session ends
                    self.heartbeat_purgatory.cancel_for_key(member_key(group.group_id, member.member_id))
                    group.remove(member.member_id)
            if group.is_state(DEAD):
                return
            if group.members and not group.maybe_elect_new_joined_leader():
                # Only static members that did not rejoin are left: wait another round for them.
                follow_up = DelayedJoin(self, group, group.rebalance_timeout_ms())
                group.join_op = follow_up
                self.rebalance_purgatory.try_complete_else_watch(follow_up, [join_key(group.group_id)])
                return
            group.init_next_generation(self._now())
            if group.is_state(EMPTY):
                logger.info("group %s: empty at generation %d", group.group_id, group.generation_id)
                self.storage.store_group(group, self._log_store_error(group))
                return
            logger.info("group %s: generation %d with %d member(s), protocol %s", group.group_id,
                        group.generation_id, len(group.members), group.protocol_name)
            for member in list(group.members.values()):
                answer, member.awaiting_join = member.awaiting_join, None
                if answer is not None:
                    answer(self._join_result(group, member))
                self.complete_and_schedule_next_heartbeat(group, member)
                member.is_new = False
                group.pending_sync_members.add(member.member_id)
            sync = DelayedSync(self, group, group.generation_id, group.rebalance_timeout_ms())
            group.sync_op = sync
            self.rebalance_purgatory.try_complete_else_watch(sync, [sync_key(group.group_id)])

    def _log_store_error(self, group: GroupMetadata) -> Callable[[int], None]:
        def done(error: int) -> None:
            if error != errors.NONE:
                logger.warning("group %s: storing the group failed: %s", group.group_id, errors.name_of(error))
        return done

    # --- SyncGroup -------------------------------------------------------------------------------

    def sync_group(self, group_id: str, generation_id: int, member_id: str, *, assignments: Mapping[str, bytes],
                   group_instance_id: str | None = None, protocol_type: str | None = None,
                   protocol_name: str | None = None, callback: Callable[[SyncResult], None]) -> None:
        """Handle a SyncGroup; ``callback`` gets this member's assignment once the leader's is stored."""
        error = self.status_error(group_id)
        if error != errors.NONE:
            callback(SyncResult(error))
            return
        with self.lock:
            group = self.groups.get(group_id)
            if group is None:
                callback(SyncResult(errors.UNKNOWN_MEMBER_ID))
                return
            if group.is_state(DEAD):
                error = errors.COORDINATOR_NOT_AVAILABLE
            else:
                error = group.validate_member(member_id, group_instance_id)
            if error == errors.NONE and generation_id != group.generation_id:
                error = errors.ILLEGAL_GENERATION
            if error == errors.NONE and ((protocol_type is not None and protocol_type != group.protocol_type)
                                         or (protocol_name is not None and protocol_name != group.protocol_name)):
                error = errors.INCONSISTENT_GROUP_PROTOCOL
            if error == errors.NONE and group.state in (EMPTY, PREPARING_REBALANCE):
                error = errors.UNKNOWN_MEMBER_ID if group.is_state(EMPTY) else errors.REBALANCE_IN_PROGRESS
            if error != errors.NONE:
                callback(SyncResult(error))
                return
            member = group.members[member_id]
            if group.is_state(STABLE):
                self._remove_pending_sync_member(group, member_id)
                callback(SyncResult(errors.NONE, group.protocol_type, group.protocol_name, member.assignment))
                self.complete_and_schedule_next_heartbeat(group, member)
                return
            member.awaiting_sync = callback  # CompletingRebalance: wait for the leader's assignment
            self._remove_pending_sync_member(group, member_id)
            if member_id == group.leader_id:
                # Members the leader left out get an empty assignment; ids it made up are ignored.
                full = {mid: bytes(assignments.get(mid, b"") or b"") for mid in group.members}
                generation = group.generation_id

                def stored(error: int) -> None:
                    with self.lock:
                        if not group.is_state(COMPLETING_REBALANCE) or group.generation_id != generation:
                            return
                        if error != errors.NONE:
                            self._reset_and_propagate_assignment_error(group, error)
                            self.maybe_prepare_rebalance(group, "storing the assignment failed")
                            return
                        for mid, assignment in full.items():
                            if mid in group.members:
                                group.members[mid].assignment = assignment
                        self._propagate_assignment(group, errors.NONE)
                        group.transition_to(STABLE, self._now())

                self.storage.store_group(group, stored, assignments=full)

    def _remove_pending_sync_member(self, group: GroupMetadata, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        self.rebalance_purgatory.check_and_complete(sync_key(group.group_id))

    def _propagate_assignment(self, group: GroupMetadata, error: int) -> None:
        for member in list(group.members.values()):
            answer, member.awaiting_sync = member.awaiting_sync, None
            if answer is not None:
                answer(SyncResult(error, group.protocol_type, group.protocol_name,
                                  member.assignment if error == errors.NONE else b""))
                self.complete_and_schedule_next_heartbeat(group, member)

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: int) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def can_complete_sync(self, group: GroupMetadata, generation_id: int) -> bool:
        """Whether the sync phase of ``generation_id`` is over (every member synced, or the group moved on)."""
        if generation_id != group.generation_id or group.state in (DEAD, EMPTY, PREPARING_REBALANCE):
            return True
        return not group.pending_sync_members

    def on_expire_sync(self, group: GroupMetadata, generation_id: int) -> None:
        """The sync phase timed out: remove the members that sent no SyncGroup and rebalance again."""
        with self.lock:
            if generation_id != group.generation_id or group.state not in (COMPLETING_REBALANCE, STABLE):
                return
            if not group.pending_sync_members:
                return
            missing = sorted(group.pending_sync_members)
            for member_id in missing:
                member = group.members.get(member_id)
                if member is not None:
                    self.heartbeat_purgatory.cancel_for_key(member_key(group.group_id, member_id))
                    group.remove(member_id)
            self._prepare_rebalance(group, f"member(s) {missing} sent no SyncGroup within the rebalance timeout")

    # --- Heartbeat and sessions ------------------------------------------------------------------

    def heartbeat(self, group_id: str, generation_id: int, member_id: str,
                  group_instance_id: str | None = None) -> int:
        """Handle a Heartbeat; REBALANCE_IN_PROGRESS tells a member to rejoin."""
        error = self.status_error(group_id)
        if error != errors.NONE:
            return error
        with self.lock:
            group = self.groups.get(group_id)
            if group is None:
                return errors.UNKNOWN_MEMBER_ID
            if group.is_state(DEAD):
                return errors.COORDINATOR_NOT_AVAILABLE
            error = group.validate_member(member_id, group_instance_id)
            if error != errors.NONE:
                return error
            if generation_id != group.generation_id:
                return errors.ILLEGAL_GENERATION
            if group.is_state(EMPTY):
                return errors.UNKNOWN_MEMBER_ID
            self.complete_and_schedule_next_heartbeat(group, group.members[member_id])
            return errors.REBALANCE_IN_PROGRESS if group.is_state(PREPARING_REBALANCE) else errors.NONE

    def complete_and_schedule_next_heartbeat(self, group: GroupMetadata, member: MemberMetadata,
                                             timeout_ms: int | None = None) -> None:
        """A liveness event of ``member`` (see ``MemberSessions.extend``)."""
        self.sessions.extend(group, member, timeout_ms)

    def remove_member_and_update_group(self, group: GroupMetadata, member: MemberMetadata, reason: str) -> None:
        """Remove ``member`` and start or re-check the rebalance (``MemberSessions.remove``)."""
        self.sessions.remove(group, member, reason)

    def leave_group(self, group_id: str, members: list[tuple[str, str | None]]) -> tuple[int, list[int]]:
        """LeaveGroup (``MemberSessions.leave``): (top-level error, one error per member)."""
        return self.sessions.leave(group_id, members)

    # --- listing and describing ------------------------------------------------------------------

    def list_groups(self, states: Collection[str] = ()) -> tuple[int, list[GroupOverview]]:
        """Every group (or those in ``states``, compared case-insensitively)."""
        if not self._active:
            return errors.COORDINATOR_NOT_AVAILABLE, []
        wanted = {state.lower() for state in states}
        # Groups of a partition that could not be loaded are unknown: listed without them, said so.
        error = errors.COORDINATOR_NOT_AVAILABLE if self.storage.unavailable else errors.NONE
        with self.lock:
            return error, [GroupOverview(group.group_id, group.protocol_type or "", group.state)
                                 for group in self.groups.values()
                                 if not wanted or group.state.lower() in wanted]

    def describe_group(self, group_id: str) -> GroupSummary:
        """State, protocol and members; an unknown group is described as ``Dead`` with no error."""
        error = self.status_error(group_id, allow_empty_id=True)
        if error != errors.NONE:
            return GroupSummary(error, group_id, DEAD, "", "")
        with self.lock:
            group = self.groups.get(group_id)
            if group is None:
                return GroupSummary(errors.NONE, group_id, DEAD, "", "")
            stable = group.is_state(STABLE)
            protocol = group.protocol_name or ""
            members = [MemberSummary(member.member_id, member.group_instance_id, member.client_id,
                                     member.client_host, member.metadata(protocol) if stable else b"",
                                     member.assignment if stable else b"")
                       for member in group.members.values()]
            return GroupSummary(errors.NONE, group.group_id, group.state, group.protocol_type or "",
                                protocol if stable else "", group.generation_id, group.leader_id or "", members)

    # --- offsets (OffsetManager does the work) ----------------------------------------------------

    def commit_offsets(self, group_id: str, generation_id: int, member_id: str,
                       offsets: Mapping[tuple[str, int], OffsetCommit], *, group_instance_id: str | None = None,
                       retention_ms: int = -1, callback: Callable[[dict[tuple[str, int], int]], None]) -> None:
        """See ``OffsetManager.commit``."""
        self.offsets.commit(group_id, generation_id, member_id, offsets, group_instance_id=group_instance_id,
                            retention_ms=retention_ms, callback=callback)

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None
                      ) -> tuple[int, dict[tuple[str, int], OffsetAndMetadata | None]]:
        """See ``OffsetManager.fetch``."""
        return self.offsets.fetch(group_id, partitions)

    def unstable_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None) -> set[tuple[str, int]]:
        """See ``OffsetManager.unstable`` (OffsetFetch's require_stable)."""
        return self.offsets.unstable(group_id, partitions)

    def txn_offset_commit(self, group_id: str, transactional_id: str, producer_id: int, producer_epoch: int,
                          generation_id: int, member_id: str, group_instance_id: str | None,
                          offsets: Mapping[tuple[str, int], OffsetCommit], *,
                          callback: Callable[[dict[tuple[str, int], int]], None] | None = None
                          ) -> dict[tuple[str, int], int] | None:
        """TxnOffsetCommit (see ``OffsetManager.txn_commit``): an error per partition, given to
        ``callback`` once the offsets are durable; without ``callback``, waited for and returned."""
        if callback is not None:
            self.offsets.txn_commit(group_id, transactional_id, producer_id, producer_epoch, generation_id,
                                    member_id, group_instance_id, offsets, callback)
            return None
        answers: list[dict[tuple[str, int], int]] = []
        done = threading.Event()

        def answer(results: dict[tuple[str, int], int]) -> None:
            answers.append(results)
            done.set()

        self.offsets.txn_commit(group_id, transactional_id, producer_id, producer_epoch, generation_id, member_id,
                                group_instance_id, offsets, answer)
        done.wait()  # answered on this thread (threaded=False) or by the writer once the fsync is done
        return answers[0]

    def complete_transaction(self, offsets_partition: int, producer_id: int, commit: bool, marker_offset: int) -> int:
        """A transaction marker on ``__consumer_offsets`` is durable: see ``OffsetManager.complete_transaction``."""
        return self.offsets.complete_transaction(offsets_partition, producer_id, commit, marker_offset)

    def delete_groups(self, group_ids):
        """See ``OffsetManager.delete_groups``."""
        return self.offsets.delete_groups(group_ids)

    def delete_offsets(self, group_id, partitions):
        """See ``OffsetManager.delete_offsets``."""
        return self.offsets.delete_offsets(group_id, partitions)
