"""The error codes the transaction coordinator answers with: Kafka's own numbers, as plain ints.

A producer learns it is a zombie from PRODUCER_FENCED and that a transition is still being written
from CONCURRENT_TRANSACTIONS, so the coordinator's results carry Kafka's codes and the server sends
them as they are. The numbers are those of Kafka's ``Errors.java``
(https://kafka.apache.org/protocol#protocol_error_codes). ``fenced_for_version`` gives the code an
older request version understands (PRODUCER_FENCED appeared with Kafka 2.7).
"""

from __future__ import annotations

NONE = 0
UNKNOWN_SERVER_ERROR = -1
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
INVALID_REQUEST = 42
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
TRANSACTION_COORDINATOR_FENCED = 52
UNKNOWN_TOPIC_OR_PARTITION = 3
REQUEST_TIMED_OUT = 7
KAFKA_STORAGE_ERROR = 56
PRODUCER_FENCED = 90
TRANSACTIONAL_ID_NOT_FOUND = 105
TRANSACTION_ABORTABLE = 120

NAMES: dict[int, str] = {code: name for name, code in globals().items()
                         if name.isupper() and isinstance(code, int)}
"""Code -> Kafka's name (``90`` -> ``"PRODUCER_FENCED"``), for messages and logs."""

# The first version of each API whose answers may carry PRODUCER_FENCED; older ones get
# INVALID_PRODUCER_EPOCH, which their clients read as the same fatal condition.
FIRST_VERSION_WITH_PRODUCER_FENCED: dict[str, int] = {
    "InitProducerId": 4, "AddPartitionsToTxn": 2, "AddOffsetsToTxn": 2, "EndTxn": 2}


def name_of(code: int) -> str:
    """Kafka's name for ``code`` (``"ERROR_<n>"`` for one this module does not list)."""
    return NAMES.get(code, f"ERROR_{code}")


def fenced_for_version(code: int, api: str, version: int) -> int:
    """``code`` as request ``version`` of ``api`` may receive it: PRODUCER_FENCED becomes
    INVALID_PRODUCER_EPOCH below the version that introduced it; other codes are unchanged."""
    if api not in FIRST_VERSION_WITH_PRODUCER_FENCED:
        raise ValueError(f"api must be one of {sorted(FIRST_VERSION_WITH_PRODUCER_FENCED)}, got {api!r}")
    if code == PRODUCER_FENCED and version < FIRST_VERSION_WITH_PRODUCER_FENCED[api]:
        return INVALID_PRODUCER_EPOCH
    return code
