"""Stand-in for ``formats``: the two types the coordinator shares with the state log.

``TransactionState`` (Kafka's state ids, the byte stored in ``__transaction_state``) and
``TransactionLogValue`` (one record's value), with the names and fields of the real module, so the
coordinator can be built and tested before the state log's encoding exists. It is replaced by
``formats`` when both are in the tree.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class TransactionState(enum.IntEnum):
    """Kafka's transaction states, valued by the byte id the transaction log stores."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


@dataclass(frozen=True)
class TransactionLogValue:
    """The value of one ``__transaction_state`` record: a transactional id's durable state."""

    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    state: TransactionState
    partitions: tuple[tuple[str, int], ...]
    last_update_timestamp_ms: int
    start_timestamp_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0
