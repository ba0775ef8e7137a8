"""The field tables of the group coordinator's APIs. For now FindCoordinator alone: librdkafka
enables lz4 (and its group features) only when a broker advertises FindCoordinator v0, so the server
advertises it and answers COORDINATOR_NOT_AVAILABLE until consumer groups exist (the next step adds
JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch and the rest here).

Transcribed from Kafka's JSON message specs like ``messages``. It imports only ``schema``.
"""

from __future__ import annotations

from .schema import api, field

f = field

# --- FindCoordinator (10) ------------------------------------------------------------------------

FIND_COORDINATOR = api(10, "FindCoordinator", "0-2", "3+", request=[
    f("Key", "string", "0+"),
    f("KeyType", "int8", "1+", default=0),
], response=[
    f("ThrottleTimeMs", "int32", "1+"),
    f("ErrorCode", "int16", "0+"),
    f("ErrorMessage", "string", "1+", nullable="1+"),
    f("NodeId", "int32", "0+"),
    f("Host", "string", "0+"),
    f("Port", "int32", "0+"),
])

SPECS = (FIND_COORDINATOR,)
