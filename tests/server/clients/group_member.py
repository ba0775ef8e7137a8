"""One consumer-group member of a real Python client, run as its own process (so a test can SIGKILL
it): ``python group_member.py --client kafka-python --bootstrap HOST:PORT --group G --topic T ...``.

It subscribes to one topic with the group, polls until told to stop, and prints one JSON object per
line on stdout (flushed at once), each with ``"event"`` and ``"t"`` (wall-clock seconds):

- ``started``: ``pid``, ``client``, ``version``;
- ``revoked`` / ``lost``: ``partitions`` taken away (eager: all; cooperative: only those that move);
- ``assigned``: ``partitions`` given by the callback (eager: the whole assignment; cooperative: the
  increment), ``assignment`` (the whole assignment after it), ``generation`` and ``member_id``
  where the client tells them (kafka-python, aiokafka; confluent-kafka: the member id only);
- ``consumed``: ``records``, ``[partition, offset, value]`` (value decoded as UTF-8, None for null);
- ``committed``: ``offsets``, ``{partition: next offset}`` (after a synchronous commit succeeded);
- ``error``: ``error`` (Kafka's or the client's error name), ``fatal``, ``message``;
- ``log`` (confluent-kafka): a librdkafka log line, ``level`` and ``message`` (warnings and worse,
  and debug lines containing ``--log-match``);
- ``closed``: after the consumer was closed (a dynamic member sends LeaveGroup then).

It stops, closing the consumer, when a line ``close`` or end-of-file arrives on stdin (so it dies
with its parent), after ``--stop-after N`` records (which it commits first: the next offset of the
last record consumed per partition), on a fatal client error, or after ``--max-run-s`` seconds.
Errors in the script itself go to stderr and exit non-zero.

It imports only the client it runs (startup time counts in the tests) and nothing from the test
package: it is a script, not a module of it. kafkajs has its own runner, ``kafkajs_group_member.js``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import threading
import time

CLIENTS = ("kafka-python", "confluent-kafka", "aiokafka")


def emit(event: str, **fields) -> None:
    sys.stdout.write(json.dumps({"event": event, "t": round(time.time(), 3), **fields}) + "\n")
    sys.stdout.flush()


def decode(value: bytes | None):
    return None if value is None else value.decode("utf-8", "replace")


class Member:
    """What every client's loop shares: the assignment kept from the callbacks, the stop signal,
    the records consumed and the offsets to commit."""

    def __init__(self, args):
        self.args = args
        self.assignment: set[int] = set()
        self.stop = threading.Event()
        self.deadline = time.monotonic() + args.max_run_s
        self.consumed = 0
        self.next_offsets: dict[int, int] = {}  # partition -> last consumed offset + 1
        threading.Thread(target=self._read_stdin, daemon=True).start()

    def _read_stdin(self):
        for line in sys.stdin:
            if line.strip() == "close":
                break
        self.stop.set()  # "close", or EOF: the parent is gone

    def running(self) -> bool:
        if self.stop.is_set():
            return False
        if time.monotonic() >= self.deadline:
            emit("error", error="MAX_RUN_S", fatal=False, message=f"ran {self.args.max_run_s}s: closing")
            return False
        return True

    def revoked(self, partitions, event="revoked"):
        partitions = sorted(partitions)
        self.assignment.difference_update(partitions)
        emit(event, partitions=partitions, assignment=sorted(self.assignment))

    def assigned(self, partitions, generation=None, member_id=None):
        partitions = sorted(partitions)
        self.assignment.update(partitions)
        emit("assigned", partitions=partitions, assignment=sorted(self.assignment), generation=generation,
             member_id=member_id)

    def record(self, batch):
        """``batch``: (partition, offset, value) tuples just consumed."""
        if batch:
            for partition, offset, _ in batch:
                self.next_offsets[partition] = offset + 1
            self.consumed += len(batch)
            emit("consumed", records=[[p, o, decode(v)] for p, o, v in batch])

    def want(self) -> int:
        """How many records the next poll may return (``--stop-after`` counts down)."""
        if self.args.stop_after is None:
            return 500
        return max(self.args.stop_after - self.consumed, 0)

    def done_consuming(self) -> bool:
        return self.args.stop_after is not None and self.consumed >= self.args.stop_after


# --- kafka-python ---------------------------------------------------------------------------------

def run_kafka_python(args, member: Member) -> None:
    import kafka
    import kafka.errors
    from kafka import ConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata, TopicPartition
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

    assignors = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
                 "sticky": StickyPartitionAssignor, "cooperative-sticky": CooperativeStickyAssignor}
    emit("started", pid=os.getpid(), client="kafka-python", version=kafka.__version__)
    settings = {"bootstrap_servers": args.bootstrap, "group_id": args.group, "client_id": args.client_id,
                "enable_auto_commit": False, "auto_offset_reset": "earliest",
                "session_timeout_ms": args.session_timeout_ms, "heartbeat_interval_ms": args.heartbeat_interval_ms,
                "max_poll_interval_ms": args.rebalance_timeout_ms,
                "request_timeout_ms": max(30000, args.rebalance_timeout_ms + 5000)}
    if args.instance_id:
        settings["group_instance_id"] = args.instance_id
    if args.assignor:
        settings["partition_assignment_strategy"] = [assignors[name] for name in args.assignor]
    consumer = KafkaConsumer(**settings)

    def generation():
        current = consumer._coordinator._generation  # noqa: SLF001 - what the client joined with
        return current.generation_id, current.member_id

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            member.revoked(tp.partition for tp in revoked)

        def on_partitions_assigned(self, assigned):
            member.assigned((tp.partition for tp in assigned), *generation())

        def on_partitions_lost(self, lost):
            member.revoked((tp.partition for tp in lost), "lost")

    consumer.subscribe(topics=[args.topic], listener=Listener())
    # kafka-python 3.0.12 joins (in its first poll) before it has its topic's metadata: with the
    # broker's group.initial.rebalance.delay.ms at 0 (the tests' setting; Kafka's 3 s default hides
    # it) the leader assigns from what it has, then rejoins when the metadata comes (its snapshot
    # changed). If a poll's timeout ends during that rejoin, the client loses it: the leader's
    # assignment in flight makes need_rejoin() false, no later poll takes the join's result, and
    # the member never gets its partitions nor heartbeats again (the broker rightly expires it).
    # Fetching the topic's metadata after subscribing and before the first poll (the subscription's
    # snapshot is taken from it) keeps the tests about the group, not about that client defect.
    deadline = time.monotonic() + 30
    while not consumer.partitions_for_topic(args.topic) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        while member.running() and not member.done_consuming():
            try:
                polled = consumer.poll(timeout_ms=200, max_records=member.want())
            except kafka.errors.KafkaError as exc:
                emit("error", error=getattr(type(exc), "message", type(exc).__name__), fatal=True, message=str(exc))
                return
            member.record([(tp.partition, m.offset, m.value) for tp, messages in polled.items() for m in messages])
        if member.done_consuming():
            offsets = {TopicPartition(args.topic, p): OffsetAndMetadata(o, "", -1)
                       for p, o in member.next_offsets.items()}
            consumer.commit(offsets)
            emit("committed", offsets=member.next_offsets)
    finally:
        consumer.close(autocommit=False)
        emit("closed")


# --- confluent-kafka ------------------------------------------------------------------------------

def run_confluent(args, member: Member) -> None:
    import confluent_kafka
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    emit("started", pid=os.getpid(), client="confluent-kafka", version=confluent_kafka.version()[0],
         librdkafka=confluent_kafka.libversion()[0])
    fatal = []

    def on_error(err):
        emit("error", error=err.name(), fatal=err.fatal(), message=err.str())
        if err.fatal():
            fatal.append(err)

    class Log(logging.Handler):
        """librdkafka's log lines: warnings and worse, and those with ``--log-match`` in them."""

        def emit(self, record):
            text = record.getMessage()
            if record.levelno >= logging.WARNING or (args.log_match and args.log_match in text):
                emit("log", level=record.levelname, message=text)  # the module's emit (methods skip class scope)

    logger = logging.getLogger("librdkafka")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(Log())
    settings = {"bootstrap.servers": args.bootstrap, "group.id": args.group, "client.id": args.client_id,
                "enable.auto.commit": False, "auto.offset.reset": "earliest", "error_cb": on_error}
    if args.debug:
        settings["debug"] = args.debug
    if args.group_protocol:
        settings["group.protocol"] = args.group_protocol
    if args.group_protocol != "consumer":  # the KIP-848 protocol refuses the classic group settings
        settings.update({"session.timeout.ms": args.session_timeout_ms,
                         "heartbeat.interval.ms": args.heartbeat_interval_ms,
                         "max.poll.interval.ms": args.rebalance_timeout_ms})
        if args.assignor:
            settings["partition.assignment.strategy"] = ",".join(args.assignor)
    if args.instance_id:
        settings["group.instance.id"] = args.instance_id
    consumer = Consumer(settings, logger=logger)

    def on_assign(_consumer, partitions):
        member.assigned((tp.partition for tp in partitions), None, consumer.memberid())

    def on_revoke(_consumer, partitions):
        member.revoked(tp.partition for tp in partitions)

    def on_lost(_consumer, partitions):
        member.revoked((tp.partition for tp in partitions), "lost")

    # confluent-kafka (un)assigns by itself after a callback that did not (incrementally under
    # cooperative-sticky), so the callbacks only report.
    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    try:
        while member.running() and not member.done_consuming() and not fatal:
            messages = consumer.consume(num_messages=member.want() or 1, timeout=0.2)
            batch = []
            for message in messages:
                if message.error() is not None:
                    err = message.error()
                    if err.code() == confluent_kafka.KafkaError._PARTITION_EOF:
                        continue
                    emit("error", error=err.name(), fatal=err.fatal(), message=err.str())
                    if err.fatal():
                        fatal.append(err)
                    continue
                batch.append((message.partition(), message.offset(), message.value()))
            member.record(batch)
        if member.done_consuming() and not fatal:
            offsets = [TopicPartition(args.topic, p, o) for p, o in member.next_offsets.items()]
            try:
                results = consumer.commit(offsets=offsets, asynchronous=False)
            except KafkaException as exc:
                err = exc.args[0]
                emit("error", error=err.name(), fatal=err.fatal(), message=err.str())
            else:
                failed = [tp for tp in results or () if tp.error is not None]
                if failed:
                    emit("error", error=failed[0].error.name(), fatal=False, message=str(failed))
                else:
                    emit("committed", offsets=member.next_offsets)
    finally:
        consumer.close()
        emit("closed")


# --- aiokafka -------------------------------------------------------------------------------------

def run_aiokafka(args, member: Member) -> None:
    import aiokafka
    import aiokafka.errors
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

    assignors = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
                 "sticky": StickyPartitionAssignor}
    emit("started", pid=os.getpid(), client="aiokafka", version=aiokafka.__version__)

    async def run():
        settings = {"bootstrap_servers": args.bootstrap, "group_id": args.group, "client_id": args.client_id,
                    "enable_auto_commit": False, "auto_offset_reset": "earliest",
                    "session_timeout_ms": args.session_timeout_ms,
                    "heartbeat_interval_ms": args.heartbeat_interval_ms,
                    "max_poll_interval_ms": args.rebalance_timeout_ms,
                    "rebalance_timeout_ms": args.rebalance_timeout_ms,
                    "request_timeout_ms": max(40000, args.rebalance_timeout_ms + 5000)}
        if args.instance_id:
            settings["group_instance_id"] = args.instance_id
        if args.assignor:
            settings["partition_assignment_strategy"] = tuple(assignors[name] for name in args.assignor)
        consumer = AIOKafkaConsumer(**settings)

        def generation():
            coordinator = consumer._coordinator  # noqa: SLF001 - what the client joined with
            return coordinator.generation, coordinator.member_id

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                member.revoked(tp.partition for tp in revoked)

            def on_partitions_assigned(self, assigned):
                member.assigned((tp.partition for tp in assigned), *generation())

        consumer.subscribe(topics=[args.topic], listener=Listener())
        await consumer.start()
        try:
            while member.running() and not member.done_consuming():
                try:
                    polled = await consumer.getmany(timeout_ms=200, max_records=member.want())
                except aiokafka.errors.KafkaError as exc:
                    emit("error", error=getattr(type(exc), "message", type(exc).__name__), fatal=True,
                         message=str(exc))
                    return
                member.record([(tp.partition, m.offset, m.value) for tp, messages in polled.items()
                               for m in messages])
            if member.done_consuming():
                await consumer.commit({TopicPartition(args.topic, p): o for p, o in member.next_offsets.items()})
                emit("committed", offsets=member.next_offsets)
        finally:
            await consumer.stop()
            emit("closed")

    asyncio.run(run())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--client", choices=CLIENTS, required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--client-id", default="logstore-group-test")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=500)
    parser.add_argument("--rebalance-timeout-ms", type=int, default=15000,
                        help="max.poll.interval.ms (and aiokafka's rebalance_timeout_ms)")
    parser.add_argument("--instance-id", help="group.instance.id: a static member")
    parser.add_argument("--assignor", action="append",
                        help="range, roundrobin, sticky, cooperative-sticky (repeatable, in order); "
                             "default: the client's own")
    parser.add_argument("--group-protocol", help="confluent-kafka's group.protocol (classic, consumer)")
    parser.add_argument("--debug", help="confluent-kafka: librdkafka's debug contexts (e.g. cgrp)")
    parser.add_argument("--log-match", help="confluent-kafka: report librdkafka log lines containing this "
                                            "(warnings and worse are always reported)")
    parser.add_argument("--stop-after", type=int, help="commit and close after this many records")
    parser.add_argument("--max-run-s", type=float, default=60.0)
    args = parser.parse_args(argv)
    if os.environ.get("GROUP_MEMBER_DEBUG"):  # diagnosis: the client's own log, timed, on stderr
        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr,
                            format="%(asctime)s.%(msecs)03d %(name)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    member = Member(args)
    {"kafka-python": run_kafka_python, "confluent-kafka": run_confluent, "aiokafka": run_aiokafka}[args.client](
        args, member)
    return 0


if __name__ == "__main__":
    sys.exit(main())
