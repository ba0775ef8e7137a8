"""aiokafka 0.14 (asyncio) behind the drivers' interface (see ``clients/__init__.py``): every call
runs its own event loop with ``asyncio.run`` and is bounded with ``asyncio.wait_for``.

Imported at module load on purpose: a missing client must fail the tests that use it. aiokafka
picks the highest version *it implements* inside the broker's range, so it is the
client most sensitive to the advertised ApiVersions. snappy, lz4 and zstd go through cramjam. Its
admin client has no IncrementalAlterConfigs (only the legacy AlterConfigs, which our server does not
speak), so ``alter_configs`` is not offered.
"""

from __future__ import annotations

import asyncio

import aiokafka
import aiokafka.errors
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic, RecordsToDelete
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from . import EARLIEST, LATEST, ClientError, ClientTimeout, Deadline, Driver, WireRecord, parse_start


def _error(exc: BaseException) -> ClientError:
    """An aiokafka exception as a ClientError named like Kafka's error (its broker errors carry the
    protocol name as the class attribute ``message``, as kafka-python's do)."""
    name = getattr(type(exc), "message", None)
    if not isinstance(name, str) or not name.isupper():
        name = type(exc).__name__
    return ClientError.from_code(getattr(exc, "errno", None), name, str(exc))


def _check(code: int, message: str | None = None) -> None:
    if code:
        cls = aiokafka.errors.for_code(code)
        raise ClientError.from_code(code, cls.message, message or getattr(cls, "description", ""))


def _run(coro, timeout_s: float, what: str):
    """Run ``coro`` in a fresh event loop, at most ``timeout_s`` seconds; errors as ClientError."""
    async def bounded():
        return await asyncio.wait_for(coro, timeout_s)
    try:
        return asyncio.run(bounded())
    except asyncio.TimeoutError as exc:
        raise ClientTimeout(f"aiokafka {what} took more than {timeout_s}s") from exc
    except aiokafka.errors.KafkaError as exc:
        raise _error(exc) from exc


class AiokafkaDriver(Driver):
    name = "aiokafka"
    incremental_alter = False  # AIOKafkaAdminClient.alter_configs sends AlterConfigs (key 33) only
    null_key_and_value = False  # send() asserts "Need at least one: key or value"

    def produce(self, bootstrap, topic, records, *, acks=-1, compression="none", partition=None, timeout_s=30.0,
                config=None):
        async def run():
            settings = {"acks": "all" if acks == -1 else acks,
                        "compression_type": None if compression == "none" else compression,
                        "request_timeout_ms": int(timeout_s * 1000)}
            settings.update(config or {})
            producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **settings)
            await producer.start()
            try:
                futures = [await producer.send(topic, key=r.key, value=r.value, partition=partition,
                                               timestamp_ms=r.timestamp_ms, headers=list(r.headers or ()) or None)
                           for r in records]
                results = []
                for future in futures:
                    metadata = await future
                    if metadata is None:  # acks=0: aiokafka resolves the future with None
                        results.append((partition, None))
                    else:
                        results.append((metadata.partition, metadata.offset if metadata.offset >= 0 else None))
                return results
            finally:
                await producer.stop()
        return _run(run(), timeout_s, f"produce to {topic}")

    def _consumer(self, bootstrap, config, timeout_s) -> AIOKafkaConsumer:
        settings = {"group_id": None, "enable_auto_commit": False, "auto_offset_reset": "earliest",
                    "request_timeout_ms": int(max(timeout_s, 41) * 1000)}
        settings.update(config or {})
        return AIOKafkaConsumer(bootstrap_servers=bootstrap, **settings)

    def consume(self, bootstrap, topic, partition, *, start=EARLIEST, count, timeout_s=30.0, on_positioned=None,
                config=None):
        kind, ts = parse_start(start)
        deadline = Deadline(timeout_s)
        out: list[WireRecord] = []

        async def run():
            consumer = self._consumer(bootstrap, config, timeout_s)
            await consumer.start()
            try:
                tp = TopicPartition(topic, partition)
                consumer.assign([tp])
                if kind == EARLIEST:
                    await consumer.seek_to_beginning(tp)
                elif kind == LATEST:
                    await consumer.seek_to_end(tp)
                else:
                    found = (await consumer.offsets_for_times({tp: ts}))[tp]
                    if found is None:  # no record at or after ts: Kafka's answer is "the end"
                        await consumer.seek_to_end(tp)
                    else:
                        consumer.seek(tp, found.offset)
                await consumer.position(tp)  # resolves the reset now
                if on_positioned is not None:  # in a thread: it may run another client's own loop
                    await asyncio.to_thread(on_positioned)
                while len(out) < count and not deadline.expired:
                    batches = await consumer.getmany(tp, timeout_ms=int(min(deadline.remaining(), 0.5) * 1000) or 1,
                                                     max_records=count - len(out))
                    for message in batches.get(tp, ()):
                        out.append(WireRecord(message.offset, message.key, message.value,
                                              tuple((name, value) for name, value in message.headers or ()),
                                              message.timestamp))
            finally:
                await consumer.stop()

        try:
            # The loop ends by the deadline by itself; the margin lets stop() finish.
            _run(run(), timeout_s + 10, f"consume from {topic}")
        except ClientTimeout:
            pass  # what arrived by then is the answer (the test compares it)
        return out

    def list_offset(self, bootstrap, topic, partition, spec, *, timeout_s=15.0):
        async def run():
            consumer = self._consumer(bootstrap, None, timeout_s)
            await consumer.start()
            try:
                tp = TopicPartition(topic, partition)
                if spec == EARLIEST:
                    return (await consumer.beginning_offsets([tp]))[tp]
                if spec == LATEST:
                    return (await consumer.end_offsets([tp]))[tp]
                _, ts = parse_start(spec)
                found = (await consumer.offsets_for_times({tp: ts}))[tp]
                return -1 if found is None else found.offset
            finally:
                await consumer.stop()
        return _run(run(), timeout_s, f"list offsets of {topic}")

    # --- admin ---

    def _admin_call(self, bootstrap, timeout_s, what, call):
        async def run():
            admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000))
            await admin.start()
            try:
                return await call(admin)
            finally:
                await admin.close()
        return _run(run(), timeout_s, what)

    def create_topic(self, bootstrap, topic, *, partitions=1, replication_factor=1, config=None, validate_only=False,
                     timeout_s=15.0):
        async def call(admin):
            response = await admin.create_topics(
                [NewTopic(topic, partitions, replication_factor, topic_configs=dict(config or {}))],
                timeout_ms=int(timeout_s * 1000), validate_only=validate_only)
            for name, code, *rest in response.topic_errors:
                _check(code, rest[0] if rest else None)
        self._admin_call(bootstrap, timeout_s, f"create topic {topic}", call)

    def create_partitions(self, bootstrap, topic, total, *, assignments=None, validate_only=False, timeout_s=15.0):
        async def call(admin):
            try:
                await admin.create_partitions({topic: NewPartitions(total, assignments)},
                                              timeout_ms=int(timeout_s * 1000), validate_only=validate_only)
            except aiokafka.errors.KafkaError as exc:
                raise _error(exc) from exc
        self._admin_call(bootstrap, timeout_s, f"create partitions of {topic}", call)

    def describe_configs(self, bootstrap, topic, *, timeout_s=15.0):
        async def call(admin):
            responses = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
            entries = {}
            for response in responses:
                for code, message, _type, _name, configs, *_ in response.resources:
                    _check(code, message)
                    for name, value, *_ in configs:
                        entries[name] = value
            return entries
        return self._admin_call(bootstrap, timeout_s, f"describe configs of {topic}", call)

    def delete_topic(self, bootstrap, topic, *, timeout_s=15.0):
        async def call(admin):
            response = await admin.delete_topics([topic], timeout_ms=int(timeout_s * 1000))
            for name, code, *_ in response.topic_error_codes:
                _check(code)
        self._admin_call(bootstrap, timeout_s, f"delete topic {topic}", call)

    def delete_records(self, bootstrap, topic, partition, before_offset, *, timeout_s=15.0):
        tp = TopicPartition(topic, partition)

        async def call(admin):
            return (await admin.delete_records({tp: RecordsToDelete(before_offset)},
                                               timeout_ms=int(timeout_s * 1000)))[tp]
        return self._admin_call(bootstrap, timeout_s, f"delete records of {topic}", call)

    def list_topics(self, bootstrap, *, timeout_s=15.0):
        async def call(admin):
            return set(await admin.list_topics())
        return self._admin_call(bootstrap, timeout_s, "list topics", call)


VERSION = aiokafka.__version__
DRIVER = AiokafkaDriver()
