"""kafka-python 3.x behind the drivers' interface (see ``clients/__init__.py``).

kafka-python is imported at module load on purpose: a missing client must fail the tests that use
it, not skip them. Its producer is idempotent by default (KIP-679, kafka-python 3.0), so every
produce here also exercises InitProducerId unless a test turns idempotence off; snappy, lz4 and zstd
need python-snappy, lz4 and zstandard (the ``clients`` extra installs kafka-python with them).
"""

from __future__ import annotations

import kafka
import kafka.errors
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.admin._configs import AlterConfigOp

from . import EARLIEST, LATEST, ClientError, ClientTimeout, Deadline, Driver, WireRecord, parse_start


def _error(exc: BaseException) -> ClientError:
    """A kafka-python exception as a ClientError named like Kafka's error (its classes carry the
    protocol name as a class attribute ``message``, e.g. ``INVALID_REPLICATION_FACTOR``)."""
    name = getattr(type(exc), "message", None)
    if not isinstance(name, str) or not name.isupper():
        name = type(exc).__name__
    return ClientError.from_code(getattr(exc, "errno", None), name, str(exc))


class KafkaPythonDriver(Driver):
    name = "kafka-python"
    null_header_values = False  # send() insists on (str, bytes) header tuples
    null_key_and_value = False  # send() raises "Need at least one: key or value"

    def produce(self, bootstrap, topic, records, *, acks=-1, compression="none", partition=None, timeout_s=30.0,
                config=None):
        deadline = Deadline(timeout_s)
        settings = {"acks": "all" if acks == -1 else acks,
                    "compression_type": None if compression == "none" else compression,
                    "request_timeout_ms": int(timeout_s * 1000), "max_block_ms": int(timeout_s * 1000)}
        if acks != -1:  # kafka-python refuses idempotence without acks=all: this is a non-idempotent run
            settings["enable_idempotence"] = False
        settings.update(config or {})
        producer = KafkaProducer(bootstrap_servers=bootstrap, **settings)
        try:
            futures = [producer.send(topic, key=r.key, value=r.value, headers=list(r.headers or ()) or None,
                                     partition=partition, timestamp_ms=r.timestamp_ms) for r in records]
            producer.flush(timeout=deadline.remaining())
            results = []
            for future in futures:
                try:
                    metadata = future.get(timeout=deadline.remaining())
                except kafka.errors.KafkaTimeoutError as exc:
                    raise ClientTimeout(f"kafka-python produce to {topic}: {exc}") from exc
                except kafka.errors.KafkaError as exc:
                    raise _error(exc) from exc
                # acks=0: no response, so no offset (kafka-python reports -1 + the record's index)
                results.append((metadata.partition, metadata.offset if acks != 0 and metadata.offset >= 0 else None))
            return results
        finally:
            producer.close(timeout=5)

    def _consumer(self, bootstrap, config, timeout_s) -> KafkaConsumer:
        settings = {"group_id": None, "enable_auto_commit": False, "auto_offset_reset": "earliest",
                    "request_timeout_ms": int(max(timeout_s, 31) * 1000)}
        settings.update(config or {})
        return KafkaConsumer(bootstrap_servers=bootstrap, **settings)

    def consume(self, bootstrap, topic, partition, *, start=EARLIEST, count, timeout_s=30.0, on_positioned=None,
                config=None):
        deadline = Deadline(timeout_s)
        kind, ts = parse_start(start)
        consumer = self._consumer(bootstrap, config, timeout_s)
        try:
            tp = TopicPartition(topic, partition)
            consumer.assign([tp])
            if kind == EARLIEST:
                consumer.seek_to_beginning(tp)
            elif kind == LATEST:
                consumer.seek_to_end(tp)
            else:
                found = consumer.offsets_for_times({tp: ts}, timeout_ms=int(deadline.remaining() * 1000))[tp]
                if found is None:  # no record at or after ts: Kafka's answer is "the end"
                    consumer.seek_to_end(tp)
                else:
                    consumer.seek(tp, found.offset)
            consumer.position(tp, timeout_ms=int(deadline.remaining() * 1000))  # resolves the reset now
            if on_positioned is not None:
                on_positioned()
            out: list[WireRecord] = []
            while len(out) < count and not deadline.expired:
                polled = consumer.poll(timeout_ms=int(min(deadline.remaining(), 0.5) * 1000) or 1,
                                       max_records=count - len(out))
                for message in polled.get(tp, ()):
                    out.append(WireRecord(message.offset, message.key, message.value,
                                          tuple((name, value) for name, value in message.headers or ()),
                                          message.timestamp))
            return out
        finally:
            consumer.close(autocommit=False)

    def list_offset(self, bootstrap, topic, partition, spec, *, timeout_s=15.0):
        consumer = self._consumer(bootstrap, None, timeout_s)
        try:
            tp = TopicPartition(topic, partition)
            timeout_ms = int(timeout_s * 1000)
            try:
                if spec == EARLIEST:
                    return consumer.beginning_offsets([tp], timeout_ms=timeout_ms)[tp]
                if spec == LATEST:
                    return consumer.end_offsets([tp], timeout_ms=timeout_ms)[tp]
                _, ts = parse_start(spec)
                found = consumer.offsets_for_times({tp: ts}, timeout_ms=timeout_ms)[tp]
                return -1 if found is None else found.offset
            except kafka.errors.KafkaError as exc:
                raise _error(exc) from exc
        finally:
            consumer.close(autocommit=False)

    # --- admin ---

    def _admin(self, bootstrap, timeout_s) -> KafkaAdminClient:
        return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000))

    def create_topic(self, bootstrap, topic, *, partitions=1, replication_factor=1, config=None, validate_only=False,
                     timeout_s=15.0):
        admin = self._admin(bootstrap, timeout_s)
        try:
            spec = {topic: {"num_partitions": partitions, "replication_factor": replication_factor,
                            "configs": dict(config or {})}}
            admin.create_topics(spec, timeout_ms=int(timeout_s * 1000), validate_only=validate_only)
        except kafka.errors.KafkaError as exc:
            raise _error(exc) from exc
        finally:
            admin.close()

    def create_partitions(self, bootstrap, topic, total, *, assignments=None, validate_only=False, timeout_s=15.0):
        admin = self._admin(bootstrap, timeout_s)
        try:
            spec = total if assignments is None else {"count": total, "assignments": assignments}
            admin.create_partitions({topic: spec}, timeout_ms=int(timeout_s * 1000), validate_only=validate_only)
        except kafka.errors.KafkaError as exc:
            raise _error(exc) from exc
        finally:
            admin.close()

    def describe_configs(self, bootstrap, topic, *, timeout_s=15.0):
        admin = self._admin(bootstrap, timeout_s)
        try:
            # config_filter="all": every entry the broker sent, not only the ones kafka-python
            # judges "modified" from their config_source.
            result = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
        except kafka.errors.KafkaError as exc:
            raise _error(exc) from exc
        finally:
            admin.close()
        entries = result["topic"][topic]
        return {name: entry["value"] if isinstance(entry, dict) else entry for name, entry in entries.items()}

    def alter_configs(self, bootstrap, topic, *, set=None, delete=(), timeout_s=15.0):
        admin = self._admin(bootstrap, timeout_s)
        try:
            configs = {name: (AlterConfigOp.SET, value) for name, value in (set or {}).items()}
            configs.update({name: (AlterConfigOp.DELETE, None) for name in delete})
            # incremental=True: IncrementalAlterConfigs, the only alter the server speaks;
            # raise_on_unknown=False: kafka-python would otherwise check the keys against its own list.
            result = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs)],
                                         raise_on_unknown=False, incremental=True)
        except kafka.errors.KafkaError as exc:
            raise _error(exc) from exc
        finally:
            admin.close()
        # kafka-python reports each resource as "OK" or as the text of the error it built, "ClassName: message"
        outcome = result["topic"][topic]
        if outcome != "OK":
            class_name = outcome.split(":", 1)[0]
            cls = getattr(kafka.errors, class_name, None)
            raise ClientError.from_code(getattr(cls, "errno", None), getattr(cls, "message", class_name), outcome)

    def delete_topic(self, bootstrap, topic, *, timeout_s=15.0):
        admin = self._admin(bootstrap, timeout_s)
        try:
            admin.delete_topics([topic], timeout_ms=int(timeout_s * 1000))
        except kafka.errors.KafkaError as exc:
            raise _error(exc) from exc
        finally:
            admin.close()

    def delete_records(self, bootstrap, topic, partition, before_offset, *, timeout_s=15.0):
        admin = self._admin(bootstrap, timeout_s)
        tp = TopicPartition(topic, partition)
        try:
            result = admin.delete_records({tp: before_offset}, timeout_ms=int(timeout_s * 1000))
        except kafka.errors.KafkaError as exc:
            raise _error(exc) from exc
        finally:
            admin.close()
        return result[tp]["low_watermark"]

    def list_topics(self, bootstrap, *, timeout_s=15.0):
        admin = self._admin(bootstrap, timeout_s)
        try:
            return set(admin.list_topics())
        except kafka.errors.KafkaError as exc:
            raise _error(exc) from exc
        finally:
            admin.close()

    # --- transactions (not supported by our server) ---

    def init_transactions(self, bootstrap, transactional_id, *, timeout_s=15.0) -> None:
        """Start a transactional producer (init_transactions), or raise ClientError or
        ClientTimeout with what kafka-python said."""
        producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id,
                                 max_block_ms=int(timeout_s * 1000))
        try:
            producer.init_transactions()
        except kafka.errors.KafkaTimeoutError as exc:
            raise ClientTimeout(f"kafka-python init_transactions: {exc}") from exc
        except kafka.errors.KafkaError as exc:
            raise _error(exc) from exc
        finally:
            producer.close(timeout=5)


VERSION = kafka.__version__
DRIVER = KafkaPythonDriver()
