"""The errors of the Kafka client, in the project's three kinds (``logstore.errors``).

- ``NetworkError`` (a ``StorageError``: the environment failed): a broker that cannot be reached,
  a connection closed under a request, bytes from the broker that do not parse;
  ``RequestTimedOutError`` when no response came within ``request.timeout.ms``.
- ``BrokerResponseError`` (a ``RequestError``: the request was refused): a response carrying a
  Kafka error code, which it names; ``NoCommonVersionError`` when the broker speaks no version of
  an API that this client does; ``BufferExhaustedError`` when a producer's buffer stayed full for
  ``max.block.ms``.
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
