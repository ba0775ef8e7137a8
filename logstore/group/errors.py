"""The error codes the group coordinator answers with: Kafka's own numbers, as plain ints.

The coordinator's answers are Kafka's answers (a member learns of a rebalance from
REBALANCE_IN_PROGRESS, a stale member from ILLEGAL_GENERATION), so its results carry Kafka's codes
and the server sends them as they are; an in-process consumer reads them the same way. The numbers
are those of Kafka's ``Errors.java`` (https://kafka.apache.org/protocol#protocol_error_codes). Exceptions are kept
for misuse (``ValueError``/``TypeError``) and for the engine's own failures below this layer.
"""

from __future__ import annotations

NONE = 0
UNKNOWN_SERVER_ERROR = -1
UNKNOWN_TOPIC_OR_PARTITION = 3
REQUEST_TIMED_OUT = 7
OFFSET_METADATA_TOO_LARGE = 12
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
INVALID_COMMIT_OFFSET_SIZE = 28
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
KAFKA_STORAGE_ERROR = 56
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
MEMBER_ID_REQUIRED = 79
GROUP_MAX_SIZE_REACHED = 81
FENCED_INSTANCE_ID = 82
GROUP_SUBSCRIBED_TO_TOPIC = 86
UNSTABLE_OFFSET_COMMIT = 88

NAMES: dict[int, str] = {code: name for name, code in globals().items()
                         if name.isupper() and isinstance(code, int)}
"""Code -> Kafka's name (``25`` -> ``"UNKNOWN_MEMBER_ID"``), for messages and logs."""


def name_of(code: int) -> str:
    """Kafka's name for ``code`` (``"ERROR_<n>"`` for one this module does not list)."""
    return NAMES.get(code, f"ERROR_{code}")
