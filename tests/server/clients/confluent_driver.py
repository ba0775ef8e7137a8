"""confluent-kafka (librdkafka, bundled in the wheel) behind the drivers' interface (see
``clients/__init__.py``).

Imported at module load on purpose: a missing client must fail the tests that use it. librdkafka's
consumer defaults to ``isolation.level=read_committed``, so every consume here is a
read_committed one unless a test says otherwise. ``Consumer`` insists on a ``group.id`` even for
assign(): each consumer gets a throw-away one and never commits (``enable.auto.commit`` and
``enable.auto.offset.store`` off), so no group API is needed (the server has none yet).
"""

from __future__ import annotations

import itertools
import logging
import os

import confluent_kafka
from confluent_kafka import (OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, KafkaException, Producer,
                             TopicPartition)
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions,
                                  NewTopic)

from . import EARLIEST, LATEST, ClientError, ClientTimeout, Deadline, Driver, WireRecord, parse_start

_groups = itertools.count()
_librdkafka_log = logging.getLogger("logstore.tests.librdkafka")
_librdkafka_log.setLevel(logging.DEBUG)
_librdkafka_log.propagate = False  # debug lines are for NOT_COMPRESSING only, not for the test log
# What librdkafka logs (debug "msg") when it decides from the broker's ApiVersions that the broker
# cannot take a codec, and then sends the batch uncompressed (src/rdkafka_msgset_writer.c; the
# NOTICE version of the line is rate-limited and does not come on the first batch): a produce "with
# lz4" that sent no lz4 must not pass as one.
NOT_COMPRESSING = "not compressing batch"


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def _error(err) -> ClientError:
    """A KafkaError (or a KafkaException carrying one) as a ClientError named like Kafka's error
    (librdkafka's local errors keep their leading underscore, e.g. ``_TIMED_OUT``)."""
    if isinstance(err, KafkaException) and err.args and isinstance(err.args[0], KafkaError):
        err = err.args[0]
    if isinstance(err, KafkaError):
        return ClientError.from_code(err.code(), err.name(), err.str())
    return ClientError(type(err).__name__, str(err))


def _result(future, deadline: Deadline, what: str):
    """The result of an admin future within the deadline, errors as ClientError."""
    try:
        return future.result(timeout=deadline.remaining())
    except KafkaException as exc:
        raise _error(exc) from exc
    except TimeoutError as exc:  # concurrent.futures.TimeoutError is TimeoutError since 3.11
        raise ClientTimeout(f"confluent-kafka {what}") from exc


class ConfluentDriver(Driver):
    name = "confluent-kafka"

    def produce(self, bootstrap, topic, records, *, acks=-1, compression="none", partition=None, timeout_s=30.0,
                config=None):
        deadline = Deadline(timeout_s)
        settings = {"bootstrap.servers": bootstrap, "acks": str(acks), "compression.type": compression,
                    "message.timeout.ms": int(timeout_s * 1000)}
        if compression != "none":
            settings["debug"] = "msg"  # to see NOT_COMPRESSING (the lines go to the logger, not stderr)
        settings.update(config or {})
        logged = _Lines()
        _librdkafka_log.addHandler(logged)
        try:
            return self._produce(Producer(settings, logger=_librdkafka_log), topic, records, partition, deadline,
                                 logged)
        finally:
            _librdkafka_log.removeHandler(logged)

    def _produce(self, producer, topic, records, partition, deadline, logged):
        results: list = [None] * len(records)

        def delivered(index):
            def callback(err, msg):
                # (an exception raised in here would be lost inside librdkafka's poll: keep it total)
                offset = msg.offset()  # None, or a negative "invalid offset", when acks=0
                results[index] = _error(err) if err is not None else (
                    msg.partition(), offset if offset is not None and offset >= 0 else None)
            return callback

        for index, record in enumerate(records):
            kwargs = {"key": record.key, "value": record.value, "on_delivery": delivered(index)}
            if record.headers:
                kwargs["headers"] = list(record.headers)
            if record.timestamp_ms is not None:
                kwargs["timestamp"] = record.timestamp_ms
            if partition is not None:
                kwargs["partition"] = partition
            try:
                producer.produce(topic, **kwargs)
            except KafkaException as exc:  # refused at once, e.g. a partition its metadata lacks
                raise _error(exc) from exc
        remaining = producer.flush(deadline.remaining())
        if remaining:
            raise ClientTimeout(f"confluent-kafka produce to {topic}: {remaining} messages not delivered")
        refused = [line for line in logged.lines if NOT_COMPRESSING in line]
        if refused:
            raise ClientError("CODEC_NOT_USED", refused[0])
        for result in results:
            if isinstance(result, ClientError):
                raise result
        return results

    def _consumer(self, bootstrap, config) -> Consumer:
        settings = {"bootstrap.servers": bootstrap,
                    # a group.id is mandatory; it is never used for commits (no group APIs needed)
                    "group.id": f"logstore-tests-{os.getpid()}-{next(_groups)}",
                    "enable.auto.commit": False, "enable.auto.offset.store": False,
                    "enable.partition.eof": True,  # tells when the position is resolved and the end reached
                    "auto.offset.reset": "earliest"}
        settings.update(config or {})
        return Consumer(settings)

    def consume(self, bootstrap, topic, partition, *, start=EARLIEST, count, timeout_s=30.0, on_positioned=None,
                config=None):
        deadline = Deadline(timeout_s)
        kind, ts = parse_start(start)
        consumer = self._consumer(bootstrap, config)
        try:
            if kind == EARLIEST:
                offset = OFFSET_BEGINNING
            elif kind == LATEST:
                offset = OFFSET_END
            else:
                found = consumer.offsets_for_times([TopicPartition(topic, partition, ts)],
                                                   timeout=deadline.remaining())
                if found[0].error is not None:
                    raise _error(found[0].error)
                offset = found[0].offset if found[0].offset >= 0 else OFFSET_END
            consumer.assign([TopicPartition(topic, partition, offset)])
            out: list[WireRecord] = []
            waiting_for_position = on_positioned is not None
            while len(out) < count and not deadline.expired:
                message = consumer.poll(min(deadline.remaining(), 0.5))
                if message is None:
                    continue
                if message.error() is not None:
                    if message.error().code() == KafkaError._PARTITION_EOF:
                        # The first EOF event comes after the start offset was resolved (and, for
                        # "latest", reached): what is produced from now on is after it.
                        if waiting_for_position:
                            waiting_for_position = False
                            on_positioned()
                        continue
                    if message.error().fatal() or not message.error().retriable():
                        raise _error(message.error())
                    continue
                if waiting_for_position:  # data before any EOF: the position is resolved too
                    waiting_for_position = False
                    on_positioned()
                _, timestamp = message.timestamp()
                out.append(WireRecord(message.offset(), message.key(), message.value(),
                                      tuple(message.headers() or ()), timestamp))
            return out
        finally:
            consumer.close()

    def list_offset(self, bootstrap, topic, partition, spec, *, timeout_s=15.0):
        consumer = self._consumer(bootstrap, None)
        try:
            tp = TopicPartition(topic, partition)
            if spec in (EARLIEST, LATEST):
                try:
                    low, high = consumer.get_watermark_offsets(tp, timeout=timeout_s, cached=False)
                except KafkaException as exc:
                    raise _error(exc) from exc
                return low if spec == EARLIEST else high
            _, ts = parse_start(spec)
            found = consumer.offsets_for_times([TopicPartition(topic, partition, ts)], timeout=timeout_s)[0]
            if found.error is not None:
                raise _error(found.error)
            return found.offset if found.offset >= 0 else -1
        finally:
            consumer.close()

    # --- admin ---

    def _admin(self, bootstrap) -> AdminClient:
        return AdminClient({"bootstrap.servers": bootstrap})

    def create_topic(self, bootstrap, topic, *, partitions=1, replication_factor=1, config=None, validate_only=False,
                     timeout_s=15.0):
        deadline = Deadline(timeout_s)
        admin = self._admin(bootstrap)  # held until the future is done: its destruction fails the call
        futures = admin.create_topics(
            [NewTopic(topic, partitions, replication_factor, config=dict(config or {}))],
            validate_only=validate_only, request_timeout=timeout_s, operation_timeout=timeout_s)
        _result(futures[topic], deadline, f"create_topics {topic}")

    def create_partitions(self, bootstrap, topic, total, *, assignments=None, validate_only=False, timeout_s=15.0):
        deadline = Deadline(timeout_s)
        admin = self._admin(bootstrap)
        spec = NewPartitions(topic, total) if assignments is None else NewPartitions(topic, total, assignments)
        futures = admin.create_partitions([spec],
                                          validate_only=validate_only, request_timeout=timeout_s,
                                          operation_timeout=timeout_s)
        _result(futures[topic], deadline, f"create_partitions {topic}")

    def describe_configs(self, bootstrap, topic, *, timeout_s=15.0):
        deadline = Deadline(timeout_s)
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        admin = self._admin(bootstrap)
        futures = admin.describe_configs([resource], request_timeout=timeout_s)
        entries = _result(next(iter(futures.values())), deadline, f"describe_configs {topic}")
        return {name: entry.value for name, entry in entries.items()}

    def alter_configs(self, bootstrap, topic, *, set=None, delete=(), timeout_s=15.0):
        deadline = Deadline(timeout_s)
        entries = [ConfigEntry(name, str(value), incremental_operation=AlterConfigOpType.SET)
                   for name, value in (set or {}).items()]
        entries += [ConfigEntry(name, None, incremental_operation=AlterConfigOpType.DELETE) for name in delete]
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
        admin = self._admin(bootstrap)
        futures = admin.incremental_alter_configs([resource], request_timeout=timeout_s)
        _result(next(iter(futures.values())), deadline, f"incremental_alter_configs {topic}")

    def delete_topic(self, bootstrap, topic, *, timeout_s=15.0):
        deadline = Deadline(timeout_s)
        admin = self._admin(bootstrap)
        futures = admin.delete_topics([topic], request_timeout=timeout_s, operation_timeout=timeout_s)
        _result(futures[topic], deadline, f"delete_topics {topic}")

    def delete_records(self, bootstrap, topic, partition, before_offset, *, timeout_s=15.0):
        deadline = Deadline(timeout_s)
        admin = self._admin(bootstrap)
        futures = admin.delete_records([TopicPartition(topic, partition, before_offset)],
                                                        request_timeout=timeout_s, operation_timeout=timeout_s)
        deleted = _result(next(iter(futures.values())), deadline, f"delete_records {topic}")
        return deleted.low_watermark

    def list_topics(self, bootstrap, *, timeout_s=15.0):
        try:
            return set(self._admin(bootstrap).list_topics(timeout=timeout_s).topics)
        except KafkaException as exc:
            raise _error(exc) from exc

    # --- transactions (not supported by our server) ---

    def init_transactions(self, bootstrap, transactional_id, *, timeout_s=15.0) -> None:
        """Start a transactional producer (init_transactions), or raise ClientError with why not."""
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
        try:
            producer.init_transactions(timeout_s)
        except KafkaException as exc:
            raise _error(exc) from exc


VERSION = f"{confluent_kafka.version()[0]} (librdkafka {confluent_kafka.libversion()[0]})"
DRIVER = ConfluentDriver()
