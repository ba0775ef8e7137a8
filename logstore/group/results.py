"""What the coordinator answers: plain dataclasses, one per kind of request.

This module owns the result types shared by the coordinator, the server's handlers (which map them
onto each API version's fields) and the in-process consumer. Error codes are Kafka's (``errors``).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class JoinMember:
    """A member as the leader sees it in its JoinGroup answer."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True)
class JoinResult:
    """The answer to a JoinGroup. ``members`` is filled for the leader only."""

    error_code: int
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    member_id: str = ""
    members: list[JoinMember] = field(default_factory=list)
    skip_assignment: bool = False

    @classmethod
    def error(cls, error_code: int, member_id: str = "") -> "JoinResult":
        return cls(error_code=error_code, member_id=member_id)


@dataclass(frozen=True)
class SyncResult:
    """The answer to a SyncGroup: this member's assignment bytes."""

    error_code: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True)
class OffsetCommit:
    """One partition's commit as a request gives it."""

    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    commit_timestamp_ms: int = -1


@dataclass(frozen=True)
class GroupOverview:
    """A group as ListGroups lists it."""

    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True)
class MemberSummary:
    """A member as DescribeGroups describes it."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupSummary:
    """A group as DescribeGroups describes it (an unknown group: state ``Dead``, no members)."""

    error_code: int
    group_id: str
    state: str
    protocol_type: str
    protocol_name: str
    generation_id: int = -1
    leader_id: str = ""
    members: list[MemberSummary] = field(default_factory=list)
