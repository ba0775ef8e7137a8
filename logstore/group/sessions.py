"""``MemberSessions``: how members stay in a group and how they leave it.

This module owns the session side of the coordinator: ``DelayedHeartbeat`` (one timer per member on
the heartbeat purgatory's timing wheel, and one per pending member id handed out with
MEMBER_ID_REQUIRED), moving a member's deadline on every liveness event (a heartbeat, a commit, a
join or sync completing), evicting a member whose session passed, and removing members: by session
expiry and by LeaveGroup (single, batched, or an admin's removal of a static member by instance id).
A departure answers the member's parked requests and starts (or re-checks) the rebalance it causes.

``GroupCoordinator`` holds a ``MemberSessions`` and delegates to it. What the sessions use of the
coordinator (its lock and groups, the two purgatories, the clock, the request pre-check and the
start of a rebalance) is ``SessionOwner``, defined here: this module imports ``delayed`` for the
purgatory keys and ``metadata`` and ``results`` for the data, never the coordinator.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from ..timer.purgatory import DelayedOperation
from . import errors
from .delayed import join_key, member_key
from .metadata import COMPLETING_REBALANCE, DEAD, PREPARING_REBALANCE, STABLE, GroupMetadata, MemberMetadata
from .results import JoinResult, SyncResult

if TYPE_CHECKING:
    import threading

    from ..clock import Clock
    from ..timer.purgatory import DelayedOperationPurgatory

logger = logging.getLogger(__name__)


class SessionOwner(Protocol):
    """What ``MemberSessions`` uses of the coordinator that holds it."""

    lock: threading.RLock
    """Guards every group; the heartbeat timers' lock."""

    clock: Clock
    """Its monotonic reading times the sessions."""

    groups: dict[str, GroupMetadata]
    """The groups by id (a LeaveGroup looks its group up here)."""

    heartbeat_purgatory: DelayedOperationPurgatory
    """Where the ``DelayedHeartbeat`` timers wait, under ``member_key``."""

    rebalance_purgatory: DelayedOperationPurgatory
    """Where a join phase waits (under ``join_key``): a departure re-checks it."""

    def status_error(self, group_id: str, allow_empty_id: bool = False) -> int:
        """The error a request for ``group_id`` gets before its group is looked at (``errors.NONE``
        when it may go on)."""
        ...

    def maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        """Start a rebalance of ``group`` unless one is already preparing."""
        ...


class DelayedHeartbeat(DelayedOperation):
    """A member's session (or a pending member id's wait to rejoin), ending at ``deadline_ms``
    (monotonic). It completes early only when there is nothing left to watch (the member left);
    on expiry ``MemberSessions`` re-arms it if a liveness event moved the member's deadline, and
    otherwise removes the member."""

    def __init__(self, sessions: MemberSessions, group: GroupMetadata, member_id: str, is_pending: bool,
                 timeout_ms: int, deadline_ms: int) -> None:
        super().__init__(timeout_ms, lock=sessions.coordinator.lock)
        self.sessions = sessions
        self.group = group
        self.member_id = member_id
        self.is_pending = is_pending
        self.deadline_ms = deadline_ms

    def try_complete(self) -> bool:
        if self.sessions.obsolete(self):
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        self.sessions.on_expire(self)

    def __repr__(self) -> str:
        return f"DelayedHeartbeat({self.group.group_id!r}, {self.member_id!r}, {self.delay_ms} ms)"


class MemberSessions:
    """The sessions and departures of a coordinator's members."""

    def __init__(self, coordinator: SessionOwner) -> None:
        self.coordinator = coordinator

    def extend(self, group: GroupMetadata, member: MemberMetadata, timeout_ms: int | None = None) -> None:
        """A liveness event: the member's session now ends ``timeout_ms`` (its session timeout) from now.

        The member keeps one DelayedHeartbeat on the timing wheel. A liveness event only moves the
        deadline when that timer fires no later than the new deadline: when it fires it finds the
        later deadline and re-arms for the rest (so a heartbeat or a commit costs no timer work). A
        deadline earlier than the live timer's (a new member's 5 minutes becoming its session
        timeout) replaces the timer."""
        timeout_ms = member.session_timeout_ms if timeout_ms is None else timeout_ms
        deadline_ms = self.coordinator.clock.monotonic_ms() + timeout_ms
        member.heartbeat_deadline_ms = deadline_ms
        live = member.heartbeat_op
        if live is not None and not live.is_completed():
            if live.deadline_ms <= deadline_ms:
                return
            live.force_complete()  # superseded: completed (not just cancelled) so the purgatory purges it
        self._arm(group, member, timeout_ms)

    def _arm(self, group: GroupMetadata, member: MemberMetadata, delay_ms: int) -> None:
        operation = DelayedHeartbeat(self, group, member.member_id, False, delay_ms,
                                     self.coordinator.clock.monotonic_ms() + delay_ms)
        member.heartbeat_op = operation
        self.coordinator.heartbeat_purgatory.try_complete_else_watch(operation, [member_key(group.group_id, member.member_id)])

    def await_rejoin(self, group: GroupMetadata, member_id: str, session_timeout_ms: int) -> None:
        """``member_id`` was just handed out with MEMBER_ID_REQUIRED: keep it in the group's
        ``pending_members`` for one session timeout, for the member to join with it; then forget it."""
        group.pending_members.add(member_id)
        self.coordinator.heartbeat_purgatory.try_complete_else_watch(
            DelayedHeartbeat(self, group, member_id, True, session_timeout_ms,
                             self.coordinator.clock.monotonic_ms() + session_timeout_ms),
            [member_key(group.group_id, member_id)])

    def obsolete(self, operation: DelayedHeartbeat) -> bool:
        """Whether a heartbeat timer has nothing left to watch (the member or pending id is gone)."""
        group = operation.group
        if group.is_state(DEAD):
            return True
        if operation.is_pending:
            return operation.member_id in group.members or operation.member_id not in group.pending_members
        member = group.members.get(operation.member_id)
        return member is None or member.heartbeat_op is not operation

    def on_expire(self, operation: DelayedHeartbeat) -> None:
        """A heartbeat timer fired: re-arm if the session was extended meanwhile; otherwise remove the
        member unless it is parked in a JoinGroup or SyncGroup (which counts as alive, except for a
        new member: it has 5 minutes to complete its first join)."""
        group, member_id = operation.group, operation.member_id
        with self.coordinator.lock:
            if group.is_state(DEAD):
                return
            if operation.is_pending:
                if member_id in group.pending_members:
                    logger.info("group %s: pending member %s did not rejoin in time", group.group_id, member_id)
                    group.pending_members.discard(member_id)
                    if group.is_state(PREPARING_REBALANCE):
                        self.coordinator.rebalance_purgatory.check_and_complete(join_key(group.group_id))
                return
            member = group.members.get(member_id)
            if member is None or member.heartbeat_op is not operation:
                return
            member.heartbeat_op = None
            remaining_ms = member.heartbeat_deadline_ms - self.coordinator.clock.monotonic_ms()
            if remaining_ms > 0:
                self._arm(group, member, remaining_ms)
                return
            if not member.is_new and (member.awaiting_join is not None or member.awaiting_sync is not None):
                return  # parked: alive; the join or sync completion starts its next session
            logger.info("group %s: member %s missed its session (%d ms), removing it", group.group_id,
                        member_id, member.session_timeout_ms)
            self.remove(group, member, "session timeout")

    def remove(self, group: GroupMetadata, member: MemberMetadata, reason: str) -> None:
        """Remove ``member`` (answering its parked JoinGroup UNKNOWN_MEMBER_ID so it rejoins) and
        start or re-check the rebalance its departure causes."""
        if member.awaiting_join is not None:
            answer, member.awaiting_join = member.awaiting_join, None
            answer(JoinResult.error(errors.UNKNOWN_MEMBER_ID))
        if member.awaiting_sync is not None:  # its SyncGroup (sent on another connection) gets an answer too
            answer, member.awaiting_sync = member.awaiting_sync, None
            answer(SyncResult(errors.UNKNOWN_MEMBER_ID))
        self.coordinator.heartbeat_purgatory.cancel_for_key(member_key(group.group_id, member.member_id))
        group.remove(member.member_id)
        if group.state in (STABLE, COMPLETING_REBALANCE):
            self.coordinator.maybe_prepare_rebalance(group, f"member {member.member_id} left ({reason})")
        elif group.is_state(PREPARING_REBALANCE):
            self.coordinator.rebalance_purgatory.check_and_complete(join_key(group.group_id))

    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> tuple[int, list[int]]:
        """Remove members (by member id, or by ``group.instance.id`` with an empty member id: an
        admin's removal of a static member). Returns (top-level error, one error per member)."""
        error = self.coordinator.status_error(group_id)
        if error != errors.NONE:
            return error, []
        with self.coordinator.lock:
            group = self.coordinator.groups.get(group_id)
            if group is None:
                return errors.NONE, [errors.UNKNOWN_MEMBER_ID] * len(members)
            if group.is_state(DEAD):
                return errors.COORDINATOR_NOT_AVAILABLE, []
            results = []
            for member_id, instance_id in members:
                if not member_id and instance_id is not None:
                    current = group.static_member_id(instance_id)
                    if current is None:
                        results.append(errors.UNKNOWN_MEMBER_ID)
                        continue
                    member_id = current
                elif member_id in group.pending_members:
                    group.pending_members.discard(member_id)
                    self.coordinator.heartbeat_purgatory.cancel_for_key(member_key(group_id, member_id))
                    if group.is_state(PREPARING_REBALANCE):
                        self.coordinator.rebalance_purgatory.check_and_complete(join_key(group_id))
                    results.append(errors.NONE)
                    continue
                else:
                    error = group.validate_member(member_id, instance_id)
                    if error != errors.NONE:
                        results.append(error)
                        continue
                self.remove(group, group.members[member_id], "LeaveGroup")
                results.append(errors.NONE)
            return errors.NONE, results
