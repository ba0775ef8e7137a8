"""Drivers for the real Kafka clients that the tests of ``logstore serve`` run (docs/design.md §12).

Each module here wraps one client behind the same small interface, so that one test can be
parametrized over every client and records produced by one client can be read by every other:

- ``kafka_python_driver`` (kafka-python 3.x), ``confluent_driver`` (confluent-kafka, librdkafka),
  ``aiokafka_driver`` (aiokafka, asyncio), ``kcat_driver`` (the kcat command line, Debian's
  librdkafka) and ``kafkajs_driver`` (kafkajs 2.2.4 in Node, through ``kafkajs_driver.js``).

The interface (``Driver`` below; each module has one subclass) is bytes in, bytes out: records go in
as ``logstore.Record`` values (key, value, headers, timestamp_ms) and come out as ``WireRecord``
tuples, so a test can compare what one client sent, what another received and what the store holds
without any client's own types. Every call is bounded in time: a client that hangs makes its call
return what it has (consume) or raise ``ClientTimeout``, never block a test forever.

Errors the broker returns come back as ``ClientError`` carrying Kafka's error name
(``"INVALID_REPLICATION_FACTOR"``, ``"UNKNOWN_TOPIC_OR_PARTITION"``...), whatever exception type the
client raised, so the tests assert the protocol's answer and not a client's exception hierarchy.

These are plain helper modules, not tests; the fixtures in ``tests/server/conftest.py`` build them.
"""

from __future__ import annotations

import time
from typing import NamedTuple, Sequence

# Start positions for ``Driver.consume``: "earliest", "latest" or ("timestamp", ms).
EARLIEST = "earliest"
LATEST = "latest"


class WireRecord(NamedTuple):
    """One record as a consumer client received it (or as the store returned it): the same fields
    as ``logstore.Record``, with headers as a tuple of ``(name, bytes | None)`` pairs."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_ms: int


# Kafka's names of the error codes the tests meet (apache/kafka Errors.java;
# https://kafka.apache.org/protocol#protocol_error_codes). The clients spell some differently (librdkafka: UNKNOWN_TOPIC_OR_PART), so drivers name errors by code.
ERROR_NAMES = {
    -1: "UNKNOWN_SERVER_ERROR", 1: "OFFSET_OUT_OF_RANGE", 2: "CORRUPT_MESSAGE", 3: "UNKNOWN_TOPIC_OR_PARTITION",
    5: "LEADER_NOT_AVAILABLE", 7: "REQUEST_TIMED_OUT", 10: "MESSAGE_TOO_LARGE", 15: "COORDINATOR_NOT_AVAILABLE",
    17: "INVALID_TOPIC_EXCEPTION", 21: "INVALID_REQUIRED_ACKS", 35: "UNSUPPORTED_VERSION",
    36: "TOPIC_ALREADY_EXISTS", 37: "INVALID_PARTITIONS", 38: "INVALID_REPLICATION_FACTOR",
    39: "INVALID_REPLICA_ASSIGNMENT", 40: "INVALID_CONFIG",
    41: "NOT_CONTROLLER", 42: "INVALID_REQUEST", 53: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    87: "INVALID_RECORD", 29: "TOPIC_AUTHORIZATION_FAILED", 30: "GROUP_AUTHORIZATION_FAILED",
    31: "CLUSTER_AUTHORIZATION_FAILED", 54: "SECURITY_DISABLED", 58: "SASL_AUTHENTICATION_FAILED",
    91: "RESOURCE_NOT_FOUND", 93: "UNACCEPTABLE_CREDENTIAL",
}


class ClientError(Exception):
    """A request failed at the broker (or the client refused it): ``error`` is Kafka's error name
    (e.g. ``"INVALID_REPLICATION_FACTOR"``) when the client reports one, else the client's own."""

    def __init__(self, error: str, message: str = ""):
        super().__init__(f"{error}: {message}" if message else error)
        self.error = error
        self.message = message

    @classmethod
    def from_code(cls, code: int, fallback: str, message: str = "") -> "ClientError":
        """The error for a broker error ``code``, named by Kafka (``fallback``: the client's name)."""
        return cls(ERROR_NAMES.get(code, fallback), message)


class ClientTimeout(Exception):
    """A client call did not finish within its time limit."""


def as_wire(record, offset: int | None = None) -> WireRecord:
    """A ``logstore.Record`` (or anything with its fields) as a ``WireRecord``; ``offset`` overrides
    the record's own."""
    headers = tuple((name, None if value is None else bytes(value)) for name, value in (record.headers or ()))
    return WireRecord(record.offset if offset is None else offset, record.key, record.value, headers,
                      record.timestamp_ms)


def parse_start(start) -> tuple[str, int | None]:
    """``"earliest"``, ``"latest"`` or ``("timestamp", ms)`` as ``(kind, ms)``; anything else is a
    ValueError (a typo must not silently read from the beginning)."""
    if start in (EARLIEST, LATEST):
        return start, None
    if isinstance(start, tuple) and len(start) == 2 and start[0] == "timestamp" and isinstance(start[1], int):
        return "timestamp", start[1]
    raise ValueError(f"start must be 'earliest', 'latest' or ('timestamp', ms), got {start!r}")


class Deadline:
    """A point in time: ``remaining()`` seconds left (never negative), ``expired``."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def remaining(self) -> float:
        return max(0.0, self.end - time.monotonic())

    @property
    def expired(self) -> bool:
        return time.monotonic() >= self.end


ACKS = (0, 1, -1)
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


class Driver:
    """The interface every client driver implements. ``bootstrap`` is ``"host:port"``.

    Capabilities (class attributes) say what a client can express, so tests build only records and
    calls it can make; what it cannot is documented there, not skipped at run time:

    - ``name``: the client's name in test ids;
    - ``codecs``: the compression codecs its producer supports (``"none"`` included);
    - ``sets_timestamps``: its producer can set a record's timestamp (kcat cannot);
    - ``null_header_values``: it can send a header whose value is null;
    - ``null_key_and_value``: it can send a record whose key and value are both null;
    - ``can_consume``: it can consume without a consumer group (kafkajs cannot: it has no assign());
    - ``incremental_alter``: its admin client has IncrementalAlterConfigs (the only alter our
      server speaks; kafkajs 2.2.4 and aiokafka 0.14 send the legacy AlterConfigs);
    - ``admin``: it has an admin client (kcat has none).
    """

    name = "?"
    codecs: tuple[str, ...] = CODECS
    sets_timestamps = True
    null_header_values = True
    null_key_and_value = True
    can_consume = True
    incremental_alter = True
    admin = True

    def produce(self, bootstrap: str, topic: str, records: Sequence, *, acks: int = -1, compression: str = "none",
                partition: int | None = None, timeout_s: float = 30.0,
                config: dict | None = None) -> list[tuple[int, int | None]]:
        """Send ``records`` (``logstore.Record``: key, value, headers, timestamp_ms) to ``topic``, to
        ``partition`` or where the client's partitioner puts them, and wait for every delivery.
        Returns ``(partition, offset)`` per record, in order; the offset is None when the broker
        does not say (acks=0). ``config``: extra client settings in the client's own names."""
        raise NotImplementedError

    def consume(self, bootstrap: str, topic: str, partition: int, *, start=EARLIEST, count: int,
                timeout_s: float = 30.0, on_positioned=None, config: dict | None = None) -> list[WireRecord]:
        """Read ``partition`` of ``topic`` with assign() (no group, no commits) from ``start``:
        ``"earliest"``, ``"latest"`` or ``("timestamp", ms)``. Returns once ``count`` records arrived,
        or what arrived by ``timeout_s``. ``on_positioned()``, when given, is called once the
        consumer's position is resolved (for "latest": records produced by it are after the start)."""
        raise NotImplementedError

    def list_offset(self, bootstrap: str, topic: str, partition: int, spec, *, timeout_s: float = 15.0) -> int:
        """ListOffsets for one partition: ``spec`` is "earliest" (the log start offset), "latest"
        (the high watermark) or ("timestamp", ms) (the first offset at or after it; -1 if none)."""
        raise NotImplementedError

    # --- admin ---

    def create_topic(self, bootstrap: str, topic: str, *, partitions: int = 1, replication_factor: int = 1,
                     config: dict[str, str] | None = None, validate_only: bool = False,
                     timeout_s: float = 15.0) -> None:
        """CreateTopics; raises ClientError with the broker's error."""
        raise NotImplementedError

    def create_partitions(self, bootstrap: str, topic: str, total: int, *, assignments=None,
                          validate_only: bool = False, timeout_s: float = 15.0) -> None:
        """CreatePartitions: grow ``topic`` to ``total`` partitions (``assignments``: the broker ids
        of each new partition, or None); raises ClientError with the broker's error."""
        raise NotImplementedError

    def describe_configs(self, bootstrap: str, topic: str, *, timeout_s: float = 15.0) -> dict[str, str | None]:
        """DescribeConfigs of a topic: every entry the broker returns, name -> value."""
        raise NotImplementedError

    def alter_configs(self, bootstrap: str, topic: str, *, set: dict[str, str] | None = None,
                      delete: Sequence[str] = (), timeout_s: float = 15.0) -> None:
        """IncrementalAlterConfigs of a topic: SET ``set``, DELETE (back to the default) ``delete``."""
        raise NotImplementedError

    def delete_topic(self, bootstrap: str, topic: str, *, timeout_s: float = 15.0) -> None:
        """DeleteTopics; raises ClientError with the broker's error."""
        raise NotImplementedError

    def delete_records(self, bootstrap: str, topic: str, partition: int, before_offset: int, *,
                       timeout_s: float = 15.0) -> int:
        """DeleteRecords up to ``before_offset`` (-1: the high watermark); returns the new low
        watermark (log start offset) the broker reports."""
        raise NotImplementedError

    def list_topics(self, bootstrap: str, *, timeout_s: float = 15.0) -> set[str]:
        """Metadata for all topics: their names."""
        raise NotImplementedError
