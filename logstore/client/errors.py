"""The errors of the Kafka client, in the project's three kinds (``logstore.errors``).

- ``NetworkError`` (a ``StorageError``: the environment failed): a broker that cannot be reached,
  a connection closed under a request, bytes from the broker that do not parse;
  ``RequestTimedOutError`` when no response came within ``request.timeout.ms``.
- ``BrokerResponseError`` (a ``RequestError``: the request was refused): a response carrying a
  Kafka error code, which it names; ``NoCommonVersionError`` when the broker speaks no version of
  an API that this client does; ``BufferExhaustedError`` when a producer's buffer stayed full for
  ``max.block.ms``.
- ``TransactionError`` (a ``RequestError``): a transactional producer's transaction failed, in
  Kafka's two kinds. ``AbortableTransactionError``: this transaction cannot commit (a batch was
  refused, an offset commit was refused), but the producer can go on: ``abort_transaction()``, then
  begin a new one. ``FatalTransactionError``: the producer cannot go on (``ProducerFencedError``:
  another producer with the same ``transactional.id`` took over; an authorization refusal; a state
  the coordinator refuses): close it. ``TransactionStateError`` (also a ``ValueError``): a call out
  of order (``begin_transaction`` twice, ``send`` outside a transaction); nothing was sent.
"""

from __future__ import annotations

from ..errors import RequestError, StorageError


class NetworkError(StorageError):
    """A broker connection failed: not reachable, closed, or sent bytes that do not parse. The
    connection is closed; a request in flight on it may or may not have been carried out."""


class RequestTimedOutError(NetworkError, TimeoutError):
    """No response within ``request.timeout.ms``. The connection is closed (as Kafka's clients do):
    a late response must never be matched to a later request."""


class BrokerResponseError(RequestError):
    """The broker answered with a Kafka error code (``error_code``, ``error_name``)."""

    def __init__(self, message: str, error_code: int, error_name: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.error_name = error_name


class BufferExhaustedError(RequestError, TimeoutError):
    """A producer's ``send`` found no room in ``buffer.memory`` within ``max.block.ms``: nothing was
    queued (the sender is not keeping up, or the broker is unreachable)."""


class NoCommonVersionError(RequestError):
    """The broker speaks no version of an API that this client speaks (or does not offer it)."""


class NoOffsetForPartitionError(RequestError):
    """A consumer has no position for a partition (no committed offset, or one out of range) and
    ``auto.offset.reset`` is ``none``: it will not guess where to start (``partitions`` says which)."""

    def __init__(self, message: str, partitions: list[tuple[str, int]]) -> None:
        super().__init__(message)
        self.partitions = partitions


class TransactionError(RequestError):
    """A transactional producer's transaction failed (``error_name``: Kafka's error, when a broker
    answered one; ``None`` for a failure of the client's own)."""

    def __init__(self, message: str, error_code: int | None = None, error_name: str | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.error_name = error_name


class AbortableTransactionError(TransactionError):
    """The current transaction cannot commit: abort it (``abort_transaction``) and begin a new one.
    Nothing of it becomes visible to ``read_committed`` readers."""


class FatalTransactionError(TransactionError):
    """The producer cannot go on with transactions: every later call raises this again; close it.
    A transaction left open is aborted by the coordinator (at the latest after
    ``transaction.timeout.ms``)."""


class ProducerFencedError(FatalTransactionError):
    """Another producer with the same ``transactional.id`` called ``init_transactions`` since this
    one did (Kafka's PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH from a coordinator): this one is a
    zombie, and nothing it sends can commit any more."""


class TransactionStateError(TransactionError, ValueError):
    """A transactional call out of order (Kafka's IllegalStateException): ``begin_transaction``
    with one open, ``commit_transaction`` with none, ``send`` before ``begin_transaction``..."""
