"""A consumer group's state as the coordinator keeps it: ``GroupMetadata`` and ``MemberMetadata``.

This module owns the five states and their allowed transitions (docs/design.md §9: a transition from
anywhere else is a bug and raises ``IllegalGroupStateError``), the membership bookkeeping (members,
static members by ``group.instance.id``, pending member ids handed out with MEMBER_ID_REQUIRED, the
members still to sync), the protocol vote (Kafka's), the group's committed offsets and the offsets
open transactions hold for it until their markers (``pending_transactional_offsets``). It
makes no decisions about requests and has no timers: ``coordinator`` drives it under its lock.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Callable, Iterable

from . import errors

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"
STATES = (EMPTY, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE, DEAD)

VALID_PREVIOUS_STATES: dict[str, frozenset[str]] = {
    PREPARING_REBALANCE: frozenset({STABLE, COMPLETING_REBALANCE, EMPTY}),
    COMPLETING_REBALANCE: frozenset({PREPARING_REBALANCE}),
    STABLE: frozenset({COMPLETING_REBALANCE}),
    EMPTY: frozenset({PREPARING_REBALANCE}),
    DEAD: frozenset(STATES),
}
"""Target state -> the states it may be entered from (Kafka's ``validPreviousStates``)."""


class IllegalGroupStateError(AssertionError):
    """A transition the state machine does not allow: a coordinator bug, never a client's doing."""


@dataclass
class OffsetAndMetadata:
    """One committed offset as stored: what OffsetFetch returns, and when it expires."""

    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    commit_timestamp_ms: int = -1
    expire_timestamp_ms: int | None = None


class MemberMetadata:
    """One member of a group: who it is, its timeouts, its protocols (in its preference order),
    its assignment, and the JoinGroup/SyncGroup answers it is waiting for (callbacks)."""

    __slots__ = ("member_id", "group_instance_id", "client_id", "client_host", "rebalance_timeout_ms",
                 "session_timeout_ms", "protocol_type", "supported_protocols", "assignment", "awaiting_join",
                 "awaiting_sync", "is_new", "heartbeat_deadline_ms", "heartbeat_op")

    def __init__(self, member_id: str, group_instance_id: str | None, client_id: str, client_host: str,
                 rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                 supported_protocols: list[tuple[str, bytes]]) -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.supported_protocols = list(supported_protocols)
        self.assignment = b""
        self.awaiting_join: Callable | None = None
        self.awaiting_sync: Callable | None = None
        self.is_new = False
        self.heartbeat_deadline_ms = 0  # monotonic ms when its session ends (moved by liveness events)
        self.heartbeat_op = None  # its DelayedHeartbeat on the timing wheel

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.supported_protocols]

    def metadata(self, protocol: str) -> bytes:
        """This member's metadata for ``protocol`` (empty when it does not support it)."""
        for name, data in self.supported_protocols:
            if name == protocol:
                return data
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """True when ``protocols`` are exactly this member's (so a rejoin changes nothing)."""
        return [(name, bytes(data)) for name, data in protocols] == \
            [(name, bytes(data)) for name, data in self.supported_protocols]

    def vote(self, candidates: set[str]) -> str:
        """The first of this member's protocols (its preference order) that every member supports."""
        for name in self.protocol_names:
            if name in candidates:
                return name
        raise IllegalGroupStateError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def __repr__(self) -> str:
        return (f"MemberMetadata({self.member_id!r}, instance={self.group_instance_id!r}, "
                f"protocols={self.protocol_names})")


class GroupMetadata:
    """One group: state, generation, protocol, leader, members and committed offsets."""

    def __init__(self, group_id: str, now_ms: int, state: str = EMPTY) -> None:
        self.group_id = group_id
        self.state = state
        self.state_timestamp_ms = now_ms
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, MemberMetadata] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.pending_members: set[str] = set()  # ids handed out with MEMBER_ID_REQUIRED
        self.pending_sync_members: set[str] = set()
        self.supported_protocols: dict[str, int] = {}  # protocol name -> members supporting it
        self.new_member_added = False
        self.offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
        # The __consumer_offsets offset of the record behind each cached commit: a commit whose
        # fsync completes after a later one's must not overwrite it.
        self.offset_positions: dict[tuple[str, int], int] = {}
        # Transactional commits (TxnOffsetCommit) not yet decided: producer id -> partition ->
        # (offset, its record's __consumer_offsets offset). Invisible to OffsetFetch until that
        # producer's COMMIT marker moves them into ``offsets``; its ABORT marker drops them.
        self.pending_transactional_offsets: dict[int, dict[tuple[str, int], tuple[OffsetAndMetadata, int]]] = {}
        self.join_op = None  # the pending DelayedJoin / InitialDelayedJoin
        self.sync_op = None  # the pending DelayedSync

    # --- state ---------------------------------------------------------------------------------

    def is_state(self, state: str) -> bool:
        return self.state == state

    def transition_to(self, state: str, now_ms: int) -> None:
        """Move to ``state``; ``IllegalGroupStateError`` if the current state may not lead there."""
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise IllegalGroupStateError(f"group {self.group_id!r}: {self.state} -> {state} is not allowed")
        self.state = state
        self.state_timestamp_ms = now_ms

    # --- membership ----------------------------------------------------------------------------

    def generate_member_id(self, client_id: str, group_instance_id: str | None) -> str:
        """``<client.id>-<uuid>``, or ``<group.instance.id>-<uuid>`` for a static member (Kafka's form)."""
        prefix = group_instance_id if group_instance_id is not None else client_id
        return f"{prefix}-{uuid.uuid4()}"

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def add(self, member: MemberMetadata, callback: Callable | None = None) -> None:
        """Add ``member`` (the first member of a leaderless group leads) parked on ``callback``."""
        if not self.members and self.protocol_type is None:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        for name in member.protocol_names:
            self.supported_protocols[name] = self.supported_protocols.get(name, 0) + 1
        member.awaiting_join = callback
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> MemberMetadata | None:
        """Remove a member (and its static mapping); a new leader is picked if it led."""
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        for name in member.protocol_names:
            count = self.supported_protocols.get(name, 0) - 1
            if count > 0:
                self.supported_protocols[name] = count
            else:
                self.supported_protocols.pop(name, None)
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        self.pending_sync_members.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def update_protocols(self, member: MemberMetadata, protocols: list[tuple[str, bytes]]) -> None:
        for name in member.protocol_names:
            count = self.supported_protocols.get(name, 0) - 1
            if count > 0:
                self.supported_protocols[name] = count
            else:
                self.supported_protocols.pop(name, None)
        member.supported_protocols = list(protocols)
        for name in member.protocol_names:
            self.supported_protocols[name] = self.supported_protocols.get(name, 0) + 1

    def replace_static_member(self, instance_id: str, old_member_id: str, new_member_id: str) -> MemberMetadata:
        """Move a static member to a new member id (its restart); returns the member."""
        member = self.members.pop(old_member_id)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        self.static_members[instance_id] = new_member_id
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        return member

    def validate_member(self, member_id: str, group_instance_id: str | None) -> int:
        """0 for a current member; FENCED_INSTANCE_ID (82) for a replaced static incarnation (its
        instance id now maps to another member id); UNKNOWN_MEMBER_ID (25) otherwise."""
        if group_instance_id is not None:
            current = self.static_members.get(group_instance_id)
            if current is not None and current != member_id:
                return errors.FENCED_INSTANCE_ID
            if current is None:
                return errors.UNKNOWN_MEMBER_ID
        return errors.NONE if member_id in self.members else errors.UNKNOWN_MEMBER_ID

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    @property
    def is_leader_missing(self) -> bool:
        return self.leader_id is None or self.leader_id not in self.members

    def num_awaiting_join(self) -> int:
        return sum(1 for member in self.members.values() if member.awaiting_join is not None)

    def has_all_members_joined(self) -> bool:
        return (len(self.members) == self.num_awaiting_join()) and not self.pending_members

    def not_yet_rejoined(self) -> list[MemberMetadata]:
        return [member for member in self.members.values() if member.awaiting_join is None]

    def rebalance_timeout_ms(self) -> int:
        """The longest rebalance timeout of the members: how long a join phase may wait."""
        return max((member.rebalance_timeout_ms for member in self.members.values()), default=0)

    def maybe_elect_new_joined_leader(self) -> bool:
        """If the leader did not rejoin, make a member that did the leader; False if none did."""
        if self.leader_id is not None and self.leader_id in self.members \
                and self.members[self.leader_id].awaiting_join is not None:
            return True
        for member in self.members.values():
            if member.awaiting_join is not None:
                self.leader_id = member.member_id
                return True
        return False

    # --- protocols -----------------------------------------------------------------------------

    def supports_protocols(self, protocol_type: str, names: Iterable[str]) -> bool:
        """Whether a member offering ``names`` under ``protocol_type`` may be in this group."""
        names = list(names)
        if not self.members and self.state == EMPTY:
            return bool(protocol_type) and bool(names)
        if protocol_type != self.protocol_type or not names:
            return False
        count = len(self.members)
        return any(self.supported_protocols.get(name, 0) == count for name in names)

    def candidate_protocols(self) -> set[str]:
        count = len(self.members)
        return {name for name, supporters in self.supported_protocols.items() if supporters == count}

    def select_protocol(self) -> str:
        """The protocol every member supports that most members prefer (ties: the one listed
        first by the earliest member, so the choice is deterministic)."""
        if not self.members:
            raise IllegalGroupStateError(f"group {self.group_id!r}: no members to select a protocol")
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        best = max(votes.values())
        return next(name for name in votes if votes[name] == best)

    def init_next_generation(self, now_ms: int) -> None:
        """Start the next generation: +1, a protocol chosen (or none when empty), a new state."""
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(EMPTY, now_ms)
        self.pending_sync_members = set()

    def current_member_metadata(self) -> list[tuple[str, str | None, bytes]]:
        """(member id, instance id, metadata for the chosen protocol) of every member, for the leader."""
        protocol = self.protocol_name or ""
        return [(member.member_id, member.group_instance_id, member.metadata(protocol))
                for member in self.members.values()]

    # --- offsets -------------------------------------------------------------------------------

    def has_offsets(self) -> bool:
        return bool(self.offsets)

    def has_pending_offset(self, key: tuple[str, int]) -> bool:
        """Whether an open transaction holds an offset for ``key`` (OffsetFetch's require_stable)."""
        return any(key in pending for pending in self.pending_transactional_offsets.values())

    def pending_keys(self) -> set[tuple[str, int]]:
        """Every partition an open transaction holds an offset for."""
        return {key for pending in self.pending_transactional_offsets.values() for key in pending}

    def add_pending_offset(self, producer_id: int, key: tuple[str, int], value: OffsetAndMetadata,
                           position: int) -> None:
        """Hold ``value`` for ``key`` in ``producer_id``'s transaction (the later record wins)."""
        pending = self.pending_transactional_offsets.setdefault(producer_id, {})
        held = pending.get(key)
        if held is None or held[1] < position:
            pending[key] = (value, position)

    def complete_pending(self, producer_id: int, commit: bool) -> list[tuple[str, int]]:
        """End ``producer_id``'s transaction in this group: on commit each held offset becomes the
        committed one unless a plain commit of that partition was written after it (a higher
        record offset wins, whatever the order the two were decided in); on abort they are
        dropped. Returns the partitions whose committed offset changed."""
        pending = self.pending_transactional_offsets.pop(producer_id, None)
        if not pending or not commit:
            return []
        applied = []
        for key, (value, position) in pending.items():
            if self.offset_positions.get(key, -1) < position:
                self.offsets[key] = value
                self.offset_positions[key] = position
                applied.append(key)
        return applied

    def remove_pending(self, keys) -> None:
        """Drop every open transaction's offsets for ``keys`` (deleted or tombstoned partitions)."""
        keys = set(keys)
        for producer_id in list(self.pending_transactional_offsets):
            pending = self.pending_transactional_offsets[producer_id]
            for key in keys & pending.keys():
                del pending[key]

    def __repr__(self) -> str:
        return (f"GroupMetadata({self.group_id!r}, {self.state}, generation={self.generation_id}, "
                f"members={list(self.members)})")
