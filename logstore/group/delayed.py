"""The rebalance's delayed operations, completed through the timer layer's purgatory.

This module owns ``DelayedJoin`` (a join phase: completes when every member has rejoined, or after
the group's rebalance timeout), ``InitialDelayedJoin`` (the first join of an empty group waits
``group.initial.rebalance.delay.ms`` and extends itself while members keep arriving, KIP-134),
``DelayedSync`` (the sync phase: completes when every member has synced, expires after the rebalance
timeout and removes those that did not), and the purgatory keys of the group operations (the join
and sync phases' and the member sessions'). The sessions' ``DelayedHeartbeat`` is ``sessions``'.

The decisions are not made here: these classes only connect them to the purgatory's rules
(``try_complete`` under the shared lock, ``on_complete`` exactly once, on expiry too). What they
need from whoever runs the rebalance (``GroupCoordinator``) is ``RebalanceOwner``, defined here so
that this module depends only on the timer layer and, for types, on ``metadata``; the coordinator
imports this module, never the other way round.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ..timer.purgatory import DelayedOperation

if TYPE_CHECKING:
    import threading

    from ..timer.purgatory import DelayedOperationPurgatory
    from .metadata import GroupMetadata


def join_key(group_id: str) -> tuple[str, str]:
    return ("join", group_id)


def sync_key(group_id: str) -> tuple[str, str]:
    return ("sync", group_id)


def member_key(group_id: str, member_id: str) -> tuple[str, str, str]:
    return ("heartbeat", group_id, member_id)


class RebalanceOwner(Protocol):
    """What the join and sync phases' operations use of the object that runs the rebalance."""

    lock: threading.RLock
    """Guards every group: the operations' lock, so a purgatory check runs under it."""

    rebalance_purgatory: DelayedOperationPurgatory
    """Where a join phase is watched (under ``join_key``): an ``InitialDelayedJoin`` that extends
    itself puts its follow-up there."""

    def can_complete_join(self, group: GroupMetadata) -> bool:
        """Whether ``group``'s join phase may complete now (nobody left to wait for)."""
        ...

    def on_complete_join(self, group: GroupMetadata, operation: DelayedJoin) -> None:
        """End ``group``'s join phase ``operation`` (completed or expired); takes ``lock`` itself and
        ignores an operation that is no longer the group's ``join_op``."""
        ...

    def can_complete_sync(self, group: GroupMetadata, generation_id: int) -> bool:
        """Whether the sync phase of ``generation_id`` is over: every member synced, or the group moved
        on (another generation, or no longer waiting for syncs)."""
        ...

    def on_expire_sync(self, group: GroupMetadata, generation_id: int) -> None:
        """The sync phase of ``generation_id`` timed out: remove the members that did not sync."""
        ...


class DelayedJoin(DelayedOperation):
    """The join phase of a rebalance."""

    def __init__(self, coordinator: RebalanceOwner, group: GroupMetadata, rebalance_timeout_ms: int) -> None:
        super().__init__(rebalance_timeout_ms, lock=coordinator.lock)
        self.coordinator = coordinator
        self.group = group

    def try_complete(self) -> bool:
        if self.coordinator.can_complete_join(self.group):
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.coordinator.on_complete_join(self.group, self)

    def __repr__(self) -> str:
        return f"DelayedJoin({self.group.group_id!r}, {self.delay_ms} ms)"


class InitialDelayedJoin(DelayedJoin):
    """The first join phase of an empty group (KIP-134): never completes early; when its delay ends
    and a member arrived meanwhile, it is followed by another, up to the rebalance timeout."""

    def __init__(self, coordinator: RebalanceOwner, group: GroupMetadata, configured_delay_ms: int,
                 delay_ms: int, remaining_ms: int) -> None:
        super().__init__(coordinator, group, delay_ms)
        self.configured_delay_ms = configured_delay_ms
        self.remaining_ms = remaining_ms

    def try_complete(self) -> bool:
        return False

    def on_complete(self) -> None:
        coordinator, group = self.coordinator, self.group
        with coordinator.lock:
            if group.new_member_added and self.remaining_ms != 0:
                group.new_member_added = False
                delay_ms = min(self.configured_delay_ms, self.remaining_ms)
                remaining_ms = max(self.remaining_ms - self.delay_ms, 0)
                follow_up = InitialDelayedJoin(coordinator, group, self.configured_delay_ms, delay_ms, remaining_ms)
                group.join_op = follow_up
                coordinator.rebalance_purgatory.try_complete_else_watch(follow_up, [join_key(group.group_id)])
            else:
                coordinator.on_complete_join(group, self)

    def __repr__(self) -> str:
        return f"InitialDelayedJoin({self.group.group_id!r}, {self.delay_ms} ms, {self.remaining_ms} ms left)"


class DelayedSync(DelayedOperation):
    """The sync phase after a join (as Kafka 3.0+ has it): removes the members that never sent
    SyncGroup once the rebalance timeout passes, so a silent leader cannot stall the group."""

    def __init__(self, coordinator: RebalanceOwner, group: GroupMetadata, generation_id: int,
                 rebalance_timeout_ms: int) -> None:
        super().__init__(rebalance_timeout_ms, lock=coordinator.lock)
        self.coordinator = coordinator
        self.group = group
        self.generation_id = generation_id

    def try_complete(self) -> bool:
        if self.coordinator.can_complete_sync(self.group, self.generation_id):
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        self.coordinator.on_expire_sync(self.group, self.generation_id)

    def __repr__(self) -> str:
        return f"DelayedSync({self.group.group_id!r}, generation {self.generation_id})"
