"""``Producer``: Kafka's producer on our network layer: ``send`` appends to the record accumulator and
returns a future; a sender thread (``sender.Sender``) drains ready batches into one Produce request per
broker, keeps up to ``max.in.flight.requests.per.connection`` of them in flight per connection, applies
the responses and retries what failed with a retriable error.

What it owns:
- configuration with Kafka's names (``linger.ms``, ``batch.size``, ``buffer.memory``, ``max.block.ms``,
  ``acks``, ``retries``, ``retry.backoff.ms``, ``request.timeout.ms``, ``delivery.timeout.ms``,
  ``max.in.flight.requests.per.connection``, ``enable.idempotence``, ``compression.type``,
  ``reconnect.backoff.ms``, ``reconnect.backoff.max.ms``, ``metadata.max.age.ms``, ``client.id``,
  ``transactional.id``, ``transaction.timeout.ms``),
  given as a dict, or as
  keywords with the dots written as underscores; a bad value is refused at construction, named;
- partitioning: an explicit partition, Kafka's murmur2 of the key, or for a null key the partition
  the topic's open batch is filling (sticky, as Kafka 3.3+ spreads them: a new one for each batch).
  Before its first keyed record to a topic the producer asks the broker for the topic's key
  placement (``partitioner.topic_placement``: one DescribeConfigs, kept for the producer's life as
  its metadata is), so a logstore topic still placed by crc32 gets each key where the store puts it;
- ``flush()`` (every record sent so far is acknowledged or failed when it returns) and ``close()``;
- metadata age: the partition counts ``send`` partitions by are asked for again once they are
  ``metadata.max.age.ms`` old (Kafka's default 300000), so a topic that grew (CreatePartitions) gets
  records in its new partitions from then on, as with Kafka's producer.

Idempotence (``enable.idempotence``, on by default with ``acks=all`` as in Kafka 3+): an id and epoch
from InitProducerId, and per partition a sequence given to each batch at its first send and kept by
its retries, so the broker stores a batch once however often it is sent, and in order with up to 5
batches of a partition in flight (``idempotence``). Without it, ``max.in.flight`` > 1 may reorder a
partition when a batch is retried, as with Kafka's producer.

Transactions (``transactional.id``, ``transaction.timeout.ms``): ``init_transactions``,
``begin_transaction``, ``send_offsets_to_transaction``, ``commit_transaction``,
``abort_transaction``, as Kafka's producer has them (``transactions.TransactionManager`` does the
coordinators' part; ``send`` adds each partition to the transaction before queuing its first record).

``delivery.timeout.ms`` (Kafka's default 120000, at least ``linger.ms + request.timeout.ms``): a record
not acknowledged that long after its batch was created fails with ``DeliveryTimeoutError``, queued
or being retried. ``compression.type``: none, gzip, and snappy, lz4 and zstd where
``logstore.server.wire_records.compression`` has them (the ``server`` extra).
"""

from __future__ import annotations

import logging
import random
import threading
from typing import Any, Iterable, Mapping

from ..clock import SYSTEM_CLOCK, Clock
from ..errors import StoreClosedError
from ..records.decoder import Record
from .accumulator import RecordAccumulator, RecordFuture
from .cluster import NetworkClient
from .errors import AbortableTransactionError, NetworkError, TransactionStateError
from .idempotence import IdempotenceManager
from .partitioner import partition_for_key, topic_placement
from .produce import DeliveryTimeoutError, compression_codec
from .security import SECURITY_DEFAULTS, ClientSecurity
from .sender import Sender
from .consumer import GroupMetadata
from .transactions import TransactionManager, group_metadata

__all__ = ["DEFAULTS", "DeliveryTimeoutError", "Producer", "SETTING_DOCS", "producer_config"]

DEFAULTS: dict[str, Any] = {
    "bootstrap.servers": None, "client.id": "logstore", "acks": "all", "linger.ms": 5, "batch.size": 16384,
    "buffer.memory": 32 * 1024 * 1024, "max.block.ms": 60_000, "retries": 2**31 - 1, "retry.backoff.ms": 100,
    "request.timeout.ms": 30_000, "delivery.timeout.ms": 120_000, "max.in.flight.requests.per.connection": 5,
    "enable.idempotence": None, "compression.type": "none", "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 1000, "metadata.max.age.ms": 300_000, "transactional.id": None,
    "transaction.timeout.ms": 60_000, **SECURITY_DEFAULTS}
SETTING_DOCS: dict[str, str] = {
    "bootstrap.servers": "the brokers to start from, HOST:PORT separated by commas (required)",
    "client.id": "the name the producer gives in every request (the broker's logs show it)",
    "acks": "what a broker answers a Produce after: all (-1, the default), 1 or 0 (no answer waited for)",
    "linger.ms": "how long a batch waits for more records before it is sent",
    "batch.size": "bytes of records at which a partition's batch is sent without waiting for linger.ms",
    "buffer.memory": "bytes of records held waiting to be sent; send waits up to max.block.ms while it is full",
    "max.block.ms": "how long send waits for room in buffer.memory (or for metadata) before it fails",
    "retries": "how often a batch that failed with a retriable error is sent again, within delivery.timeout.ms",
    "retry.backoff.ms": "the wait before a failed batch is sent again",
    "request.timeout.ms": "how long a request waits for its answer before it fails (and may be retried)",
    "delivery.timeout.ms": "a record not acknowledged this long after its batch was made fails with "
                           "DeliveryTimeoutError (at least linger.ms + request.timeout.ms)",
    "max.in.flight.requests.per.connection": "Produce requests waiting for their answer per connection (at "
                                             "most 5 with idempotence)",
    "enable.idempotence": "sequence numbers per partition, so the broker stores a retried batch once and in "
                          "order (default: on when acks=all and at most 5 requests are in flight)",
    "compression.type": "the codec of the batches sent: none, gzip, and snappy, lz4 and zstd with the "
                        "server extra",
    "reconnect.backoff.ms": "the wait before connecting again to a broker whose connection failed, doubled per "
                            "failure in a row",
    "reconnect.backoff.max.ms": "the longest wait between two connection attempts to a broker",
    "metadata.max.age.ms": "partition counts older than this are asked for again (records go to partitions a "
                           "topic gained)",
    "transactional.id": "makes the producer transactional: init_transactions, then records sent between "
                        "begin_transaction and commit_transaction become visible to read_committed readers "
                        "together, or not at all; a new producer with the same id fences the older one (needs "
                        "idempotence)",
    "transaction.timeout.ms": "how long the coordinator lets a transaction stay open before it aborts it (at most "
                              "the broker's transaction.max.timeout.ms)",
}
"""What each producer setting of ``DEFAULTS`` does (the security ones: ``security.SETTING_DOCS``);
the documentation's settings reference is generated from it."""
_ACKS = {"all": -1, "-1": -1, -1: -1, "1": 1, 1: 1, "0": 0, 0: 0}
_MAX_IN_FLIGHT_IDEMPOTENT = 5  # Kafka's limit: the broker keeps the last 5 batches of a producer
logger = logging.getLogger(__name__)


def producer_config(config: Mapping[str, Any] | None, keywords: Mapping[str, Any]) -> dict[str, Any]:
    """Kafka's producer settings from a dict of dotted names and/or keywords with underscores."""
    merged = dict(DEFAULTS)
    given = set()
    for key, value in [*(config or {}).items(), *((k.replace("_", "."), v) for k, v in keywords.items())]:
        if key not in DEFAULTS:
            raise ValueError(f"unknown producer setting {key!r} (known: {', '.join(sorted(DEFAULTS))})")
        merged[key] = value
        given.add(key)
    if not merged["bootstrap.servers"]:
        raise ValueError("bootstrap.servers is required")
    transactional_id = merged["transactional.id"]
    if transactional_id is not None and (not isinstance(transactional_id, str) or not transactional_id):
        raise ValueError(f"transactional.id must be a non-empty str or None, got {transactional_id!r}")
    if type(merged["transaction.timeout.ms"]) is not int or merged["transaction.timeout.ms"] < 1:
        raise ValueError(f"transaction.timeout.ms must be an int >= 1, got {merged['transaction.timeout.ms']!r}")
    if merged["acks"] not in _ACKS:
        raise ValueError(f"acks must be all, -1, 1 or 0, got {merged['acks']!r}")
    for key, low in (("retries", 0), ("retry.backoff.ms", 0), ("linger.ms", 0), ("request.timeout.ms", 1),
                     ("delivery.timeout.ms", 1), ("max.in.flight.requests.per.connection", 1),
                     ("metadata.max.age.ms", 0)):
        if type(merged[key]) is not int or merged[key] < low:
            raise ValueError(f"{key} must be an int >= {low}, got {merged[key]!r}")
    # Kafka's rule: a batch must be able to linger and then wait out one request before it expires.
    # Given explicitly, a smaller value is a mistake; the default is raised to fit, as Kafka does.
    at_least = merged["linger.ms"] + merged["request.timeout.ms"]
    if merged["delivery.timeout.ms"] < at_least:
        if "delivery.timeout.ms" in given:
            raise ValueError(f"delivery.timeout.ms must be at least linger.ms + request.timeout.ms ({at_least}), "
                             f"got {merged['delivery.timeout.ms']!r}")
        merged["delivery.timeout.ms"] = at_least
    compression_codec(merged["compression.type"])  # refused here, named, when unknown or unavailable
    # Kafka 3+: idempotent unless asked otherwise, or unless a setting conflicts with it (acks not
    # "all", more than 5 requests in flight): then it is off, and asking for it is a mistake
    idempotence, acks = merged["enable.idempotence"], _ACKS[merged["acks"]]
    in_flight = merged["max.in.flight.requests.per.connection"]
    if idempotence not in (None, True, False):
        raise ValueError(f"enable.idempotence must be true or false, got {idempotence!r}")
    if idempotence and acks != -1:
        raise ValueError(f"enable.idempotence needs acks=all, got acks={merged['acks']!r}")
    if idempotence and in_flight > _MAX_IN_FLIGHT_IDEMPOTENT:
        raise ValueError(f"enable.idempotence needs max.in.flight.requests.per.connection <= "
                         f"{_MAX_IN_FLIGHT_IDEMPOTENT}, got {in_flight!r}")
    if transactional_id is not None and idempotence is False:
        raise ValueError(f"transactional.id needs idempotence: enable.idempotence is false for {transactional_id!r}")
    if transactional_id is not None and (acks != -1 or in_flight > _MAX_IN_FLIGHT_IDEMPOTENT):
        raise ValueError(f"transactional.id needs idempotence, so acks=all and max.in.flight.requests.per.connection "
                         f"<= {_MAX_IN_FLIGHT_IDEMPOTENT}, got acks={merged['acks']!r}, max.in.flight={in_flight!r}")
    merged["enable.idempotence"] = (acks == -1 and in_flight <= _MAX_IN_FLIGHT_IDEMPOTENT
                                    if idempotence is None else idempotence)
    return merged


class Producer:
    """Sends records to a Kafka-compatible broker (see the module docstring). ``send`` is
    thread-safe; ``close()`` (or a ``with`` block) flushes and stops the sender thread."""

    def __init__(self, config: Mapping[str, Any] | None = None, *, clock: Clock = SYSTEM_CLOCK,
                 **settings: Any) -> None:
        explicit = True in ((config or {}).get("enable.idempotence"), settings.get("enable_idempotence"))
        self.config = settings = producer_config(config, settings)
        explicit = explicit or settings["transactional.id"] is not None
        self._clock = clock
        in_flight = settings["max.in.flight.requests.per.connection"]
        network = dict(client_id=settings["client.id"], request_timeout_ms=settings["request.timeout.ms"],
                       max_in_flight=in_flight, reconnect_backoff_ms=settings["reconnect.backoff.ms"],
                       reconnect_backoff_max_ms=settings["reconnect.backoff.max.ms"], clock=clock,
                       security=ClientSecurity.from_config(settings))
        # Two clients, as connections are not shared between threads: the sender's, and the one the
        # application's threads ask for a topic's partition count (under ``_metadata_lock``).
        self._network = NetworkClient(settings["bootstrap.servers"], **network)
        self._lookup = NetworkClient(settings["bootstrap.servers"], **network)
        # As many batches of a partition in flight as requests on a connection: each request carries
        # at most one batch per partition
        self._accumulator = RecordAccumulator(batch_size=settings["batch.size"], linger_ms=settings["linger.ms"],
                                              buffer_memory=settings["buffer.memory"],
                                              max_block_ms=settings["max.block.ms"], max_in_flight=in_flight,
                                              clock=clock)
        self._metadata_lock = threading.Lock()
        self._metadata_max_age_ms = settings["metadata.max.age.ms"]
        self._metadata_at_ms: int | None = None  # when the lookup's metadata was last asked for
        self._sticky: dict[str, int] = {}
        self._placements: dict[str, str] = {}  # per topic written with keys, as the metadata holds per topic
        self._closed = False
        self._rng = random.Random()
        self._transactions: TransactionManager | None = None
        if settings["transactional.id"] is not None:
            # The coordinators' requests run in the application's threads: a client of their own
            self._coordinators = NetworkClient(settings["bootstrap.servers"], **network)
            self._transactions = TransactionManager(self._coordinators, settings["transactional.id"],
                                                    settings["transaction.timeout.ms"],
                                                    retry_backoff_ms=settings["retry.backoff.ms"],
                                                    max_block_ms=settings["max.block.ms"], clock=clock)
        self._sender = Sender(self._network, self._accumulator, acks=_ACKS[settings["acks"]], retries=settings["retries"],
                              retry_backoff_ms=settings["retry.backoff.ms"],
                              request_timeout_ms=settings["request.timeout.ms"],
                              delivery_timeout_ms=settings["delivery.timeout.ms"],
                              compression=compression_codec(settings["compression.type"]),
                              idempotence=IdempotenceManager() if settings["enable.idempotence"] else None,
                              idempotence_explicit=explicit, clock=clock, transaction=self._transactions,
                              transactional_id=settings["transactional.id"])
        self._thread = threading.Thread(target=self._sender.run, name="logstore-producer-sender", daemon=True)
        self._thread.start()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def idempotent(self) -> bool:
        """Whether batches carry a producer id and sequences (off when the broker gave no id and
        idempotence was only the default)."""
        return self._sender.idempotence is not None

    @property
    def producer_id(self) -> int:
        """The producer id from InitProducerId (-1 before the first send, or without idempotence)."""
        manager = self._sender.idempotence
        return -1 if manager is None else manager.producer_id

    @property
    def producer_epoch(self) -> int:
        manager = self._sender.idempotence
        return -1 if manager is None else manager.producer_epoch

    # --- sending ---------------------------------------------------------------------------------

    def send(self, topic: str, value: bytes | None, key: bytes | None = None,
             headers: Iterable[tuple[str, bytes | None]] | None = None,
             partition: int | None = None, timestamp_ms: int | None = None) -> RecordFuture:
        """Queue a record; the future gives its ``RecordMetadata`` once the broker stored it (or the
        error that stopped it: ``DeliveryTimeoutError`` past ``delivery.timeout.ms``). Blocks while
        the buffer is full (``max.block.ms``)."""
        if self._closed:
            raise StoreClosedError("the producer is closed")
        failure = self._sender.failure
        if failure is not None:
            raise StoreClosedError(f"the producer's sender failed: {failure!r}") from failure
        transactions = self._transactions
        if transactions is not None:
            transactions.check_send()
        record = Record(key, value, tuple(headers) if headers else (),
                        self._clock.time_ms() if timestamp_ms is None else timestamp_ms)
        partitions = self._partitions(topic)
        if partition is None:
            if key is not None:
                partition = partition_for_key(key, partitions, self._placement(topic))
            else:
                partition = self._sticky.get(topic)
                if partition is None or partition >= partitions:
                    partition = self._sticky[topic] = self._rng.randrange(partitions)
        elif type(partition) is not int or not 0 <= partition < partitions:
            raise ValueError(f"partition must be in [0, {partitions}) for {topic}, got {partition!r}")
        if transactions is not None:
            transactions.add_partition(topic, partition)  # before any batch of it can be sent
        future, opened = self._accumulator.append_record(topic, partition, record)
        if opened:
            # A new batch: the sender's wait was set without it. A record joining a batch changes
            # nothing the sender waits for (that batch was ready or lingering already), so it is
            # not woken for each record (Kafka wakes it for a new or a full batch too).
            self._sender.wakeup()
            if key is None:
                self._sticky[topic] = self._rng.randrange(partitions)  # that record opened a batch: next one elsewhere
        return future

    def _partitions(self, topic: str) -> int:
        count = self._lookup.metadata.partitions(topic)
        at_ms = self._metadata_at_ms
        stale = at_ms is not None and self._clock.monotonic_ms() - at_ms >= self._metadata_max_age_ms
        if count is None or stale:
            with self._metadata_lock:
                known = list(self._lookup.metadata.leaders)
                try:
                    metadata = self._lookup.refresh_metadata(list(dict.fromkeys([*known, topic])),
                                                             allow_auto_topic_creation=True)
                except NetworkError:
                    if count is None:
                        raise
                    metadata = self._lookup.metadata  # the broker is away: go on with what is known
                # asked (answered or not): the next ask is one max age away, not at every send
                self._metadata_at_ms = self._clock.monotonic_ms()
            count = metadata.partitions(topic)
            if count is None:
                raise NetworkError(f"no metadata for topic {topic!r}: error {metadata.topic_errors.get(topic)}")
        return count

    def _placement(self, topic: str) -> str:
        placement = self._placements.get(topic)
        if placement is None:
            with self._metadata_lock:
                placement = self._placements[topic] = topic_placement(self._lookup, topic)
        return placement

    def flush(self, timeout_s: float | None = None) -> None:
        """Send everything queued now and wait until each record is acknowledged or failed."""
        results = self._accumulator.results()
        self._accumulator.begin_flush()
        self._sender.wakeup()
        clock = self._clock
        deadline_ms = None if timeout_s is None else clock.monotonic_ms() + timeout_s * 1000
        try:
            for result in results:
                if not result.wait(None if deadline_ms is None else max(deadline_ms - clock.monotonic_ms(), 0) / 1000):
                    break
        finally:
            self._accumulator.end_flush()
        not_done = sum(not result.done() for result in results)
        if not_done:
            raise TimeoutError(f"flush: {not_done} batches not acknowledged within {timeout_s} s")

    # --- transactions ----------------------------------------------------------------------------

    def _manager(self, what: str) -> TransactionManager:
        if self._transactions is None:
            raise TransactionStateError(f"{what} needs a transactional producer: set transactional.id")
        if self._closed:
            raise StoreClosedError("the producer is closed")
        return self._transactions

    def _new_identity(self, producer_id: int, producer_epoch: int) -> None:
        # Called with no batch held (before the first send, or after an abort settled them all); a
        # transactional producer's sender always has its IdempotenceManager (never turned off)
        manager = self._sender.idempotence
        assert manager is not None
        manager.restart(producer_id, producer_epoch)

    @property
    def transactional_id(self) -> str | None:
        """The ``transactional.id`` (None: not a transactional producer)."""
        value = self.config["transactional.id"]
        return value if isinstance(value, str) else None

    def init_transactions(self) -> None:
        """Register the ``transactional.id`` with its coordinator (InitProducerId): a producer id
        and a new epoch, which fences any older producer of that id (its open transaction is
        aborted). Once, before the first ``begin_transaction``; ``RequestTimedOutError`` after
        ``max.block.ms`` without an answer (call it again)."""
        self._manager("init_transactions").init(self._new_identity)

    def begin_transaction(self) -> None:
        """Open a transaction: the records sent from now until ``commit_transaction`` are stored
        together or not at all (for ``read_committed`` readers)."""
        self._manager("begin_transaction").begin()

    def send_offsets_to_transaction(self, offsets: Mapping[tuple[str, int], int | tuple[int, str | None]],
                                    group_metadata_or_id: GroupMetadata | str | Any) -> None:
        """Commit ``offsets`` (``{(topic, partition): next offset to read}``, or ``(offset, metadata
        string)`` as the value) for a consumer group as part of the transaction: they become the
        group's committed offsets only if it commits. The group is a group id, or a consumer's
        ``group_metadata()`` (then the group's coordinator refuses the commit of a member that is
        no longer in the group: KIP-447)."""
        manager = self._manager("send_offsets_to_transaction")
        group = group_metadata(group_metadata_or_id)
        checked: dict[tuple[str, int], tuple[int, str | None]] = {}
        for tp, value in dict(offsets).items():
            if not (isinstance(tp, tuple) and len(tp) == 2 and isinstance(tp[0], str) and type(tp[1]) is int):
                raise TypeError(f"an offset's partition is a (topic, partition) pair, got {tp!r}")
            offset, metadata = value if isinstance(value, tuple) else (value, "")
            if type(offset) is not int or offset < 0:
                raise ValueError(f"an offset to commit is an int >= 0, got {offset!r} for {tp!r}")
            if metadata is not None and not isinstance(metadata, str):
                raise TypeError(f"an offset's metadata is a str or None, got {metadata!r} for {tp!r}")
            checked[tp] = (offset, metadata)
        if checked:
            manager.send_offsets(checked, group)

    def commit_transaction(self, timeout_s: float | None = None) -> None:
        """Flush, then commit the transaction (EndTxn): its records and offsets become visible
        together. ``AbortableTransactionError`` when a record or an offset of it failed (call
        ``abort_transaction``), ``ProducerFencedError`` when a newer producer took the id over,
        ``TimeoutError`` from the flush or ``RequestTimedOutError`` from the coordinator (call it
        again)."""
        manager = self._manager("commit_transaction")
        manager.begin_commit()
        self.flush(timeout_s)
        manager.end(True, self._new_identity)

    def abort_transaction(self, timeout_s: float | None = None) -> None:
        """Abort the transaction: records not sent yet fail (``AbortableTransactionError``), the
        ones sent are waited for, then EndTxn(abort): nothing of it is visible to
        ``read_committed`` readers. After a failed record, the producer goes on under a new epoch
        (sequences start again). The way out of ``AbortableTransactionError``."""
        manager = self._manager("abort_transaction")
        manager.begin_abort()
        self._sender.request_abort(AbortableTransactionError("the transaction was aborted before this record was sent"))
        self.flush(timeout_s)
        # Every batch is settled (no new one until begin_transaction): the sender sends again
        self._sender.clear_abort()
        manager.end(False, self._new_identity)

    def close(self, timeout_s: float | None = None) -> None:
        """Flush, stop the sender, close the connections. Safe twice. With ``timeout_s``, records
        still unacknowledged then fail (``StoreClosedError``) and the sender stops anyway."""
        if self._closed:
            return
        self._closed = True
        try:
            self.flush(timeout_s)
        except TimeoutError:
            pass  # the records left fail below
        finally:
            self._sender.stopping = True
            self._accumulator.close()
            self._sender.wakeup()
            self._thread.join(timeout_s)
            if self._thread.is_alive():  # still waiting on a broker: give up on what is left
                self._sender.force = True
                self._sender.wakeup()
                self._thread.join(10)
            with self._metadata_lock:
                self._lookup.close()
            if self._transactions is not None:
                self._coordinators.close()
