"""kafkajs's transactions against ``logstore serve``: its transactional producer
(``producer({transactionalId, idempotent: true, maxInFlightRequests: 1})``, ``transaction()``,
``send``, ``sendOffsets``, ``commit``, ``abort``) commits and aborts across two topics of two
partitions, and kafkajs consumers (readUncommitted false and true) and a confluent-kafka one see
exactly the committed records, or the aborted ones too, never a marker; consume-transform-produce
commits the group's offsets with the transaction and an aborted round is redone from them; a second
producer with the same transactionalId fences the first. kafkajs runs as ``node
clients/js/kafkajs_txn.js`` with one JSON command; every wait is bounded by a deadline only a failure
meets, and the consumers stop at a record the test appends after the transactions, not after a
quiet time."""

from __future__ import annotations

import json
import subprocess
import uuid

import confluent_kafka
import pytest
from clients.kafkajs_driver import find_kafkajs, find_node, node_env
from conftest import logstore_only
from test_txn_clients import markers, read_all, wait_stable

pytestmark = [pytest.mark.kafka_clients, pytest.mark.needs_tools("node", "kafkajs"),
              logstore_only("reads the markers and the coordinator of our server")]

SCRIPT = str(__import__("pathlib").Path(__file__).parent / "clients" / "js" / "kafkajs_txn.js")
DEADLINE_S = 60.0
END = "end"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def kafkajs(op: str, bootstrap: str, **fields):
    """Run one kafkajs_txn.js command; its ``ok`` answer, or AssertionError with its error."""
    find_kafkajs()
    command = {"op": op, "brokers": [bootstrap], **fields}
    done = subprocess.run([find_node(), SCRIPT], input=json.dumps(command).encode(), capture_output=True, check=False,
                          timeout=DEADLINE_S, env=node_env())
    lines = done.stdout.decode().strip().splitlines()
    assert done.returncode == 0 and lines, f"kafkajs {op} exited {done.returncode}: {done.stderr.decode()[-3000:]}"
    answer = json.loads(lines[-1])
    assert "error" not in answer, f"kafkajs {op}: {answer['error']}; stderr: {done.stderr.decode()[-3000:]}"
    return answer["ok"]


def append_end(broker, topics, partitions=2):
    """A non-transactional record ``END`` at the end of every partition: where the consumers stop."""
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers})
    for topic in topics:
        for index in range(partitions):
            producer.produce(topic, value=END.encode(), partition=index)
    assert producer.flush(DEADLINE_S) == 0


def kafkajs_read(broker, topics, read_uncommitted, partitions=2):
    """(topic, partition, value) of what a kafkajs group consumer reads up to the END records."""
    seen = kafkajs("consume", broker.bootstrap_servers, topics=topics, partitions=partitions,
                   read_uncommitted=read_uncommitted, group=unique("kafkajs-reader"), end_value=END)
    # the offsets a partition's records came with strictly increase: nothing twice, in order
    for topic in topics:
        for index in range(partitions):
            offsets = [offset for t, p, offset, _v in seen if (t, p) == (topic, index)]
            assert offsets == sorted(set(offsets)), (topic, index, offsets)
    return sorted((t, p, v.encode()) for t, p, _offset, v in seen if v != END)


def test_kafkajs_commits_and_aborts_across_partitions_and_topics(broker):
    first, second = (broker.create_topic(unique("txn-js"), partitions=2) for _ in range(2))
    committed = [(first, 0, b"c0"), (first, 1, b"c1"), (second, 1, b"c2")]
    aborted = [(first, 0, b"a0"), (second, 0, b"a1"), (second, 1, b"a2")]
    later = [(second, 0, b"c3")]
    plan = [{"commit": commit, "records": [[t, p, v.decode()] for t, p, v in records]}
            for commit, records in ((True, committed), (False, aborted), (True, later))]
    kafkajs("transactions", broker.bootstrap_servers, transactional_id=unique("kafkajs"), plan=plan)
    wait_stable(broker, [first, second])
    assert markers(broker, first, 0) == [True, False] and markers(broker, first, 1) == [True]
    assert markers(broker, second, 0) == [False, True] and markers(broker, second, 1) == [True, False]
    # a Python client agrees before the END records go in
    assert read_all(broker, [first, second], "read_committed") == sorted(committed + later)
    assert read_all(broker, [first, second], "read_uncommitted") == sorted(committed + aborted + later)
    append_end(broker, [first, second])
    assert kafkajs_read(broker, [first, second], read_uncommitted=False) == sorted(committed + later)
    assert kafkajs_read(broker, [first, second], read_uncommitted=True) == sorted(committed + aborted + later)


def test_kafkajs_reads_what_confluent_kafka_committed_and_aborted(broker):
    """kafkajs's read_committed consumer drops the aborted records of another client's transaction
    (the fetch's aborted transactions), and its read_uncommitted one keeps them."""
    [topic] = [broker.create_topic(unique("txn-js"), partitions=2)]
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers,
                                         "transactional.id": unique("confluent")})
    producer.init_transactions(DEADLINE_S)
    rounds = [(True, [(topic, 0, b"c0"), (topic, 1, b"c1")]), (False, [(topic, 0, b"a0"), (topic, 1, b"a1")]),
              (True, [(topic, 1, b"c2")])]
    for commit, records in rounds:
        producer.begin_transaction()
        for t, p, value in records:
            producer.produce(t, value=value, partition=p)
        if commit:
            producer.commit_transaction(DEADLINE_S)
        else:
            producer.flush(DEADLINE_S)
            producer.abort_transaction(DEADLINE_S)
    wait_stable(broker, [topic])
    append_end(broker, [topic])
    everything = sorted(r for _c, records in rounds for r in records)
    assert kafkajs_read(broker, [topic], read_uncommitted=True) == everything
    assert kafkajs_read(broker, [topic], read_uncommitted=False) == sorted(
        r for commit, records in rounds if commit for r in records)


def test_kafkajs_consume_transform_produce_commits_offsets_with_the_transaction(broker):
    """Round 1 commits in0..in2 -> out0..out2 with offset 3; round 2 takes in3..in5 and aborts (its
    offset 6 is dropped); the consumer seeks back to the committed 3 and round 3 redoes in3..in5."""
    source = broker.create_topic(unique("txn-js-src"), partitions=1)
    sink = broker.create_topic(unique("txn-js-sink"), partitions=1)
    group = unique("kafkajs-eos")
    seed = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers})
    for index in range(6):
        seed.produce(source, value=b"in%d" % index, partition=0)
    assert seed.flush(DEADLINE_S) == 0
    taken = kafkajs("transform", broker.bootstrap_servers, source=source, sink=sink, group=group,
                    transactional_id=unique("kafkajs-eos"),
                    rounds=[{"count": 3, "commit": True}, {"count": 3, "commit": False},
                            {"count": 3, "commit": True}])
    assert taken == [[0, 1, 2], [3, 4, 5], [3, 4, 5]]
    wait_stable(broker, [sink], partitions=1)
    values = [value for _t, _p, value in read_all(broker, [sink], "read_committed", partitions=1)]
    assert values == [b"out0", b"out1", b"out2", b"out3", b"out4", b"out5"]
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        [committed] = consumer.committed([confluent_kafka.TopicPartition(source, 0)], timeout=DEADLINE_S)
    finally:
        consumer.close()
    assert committed.offset == 6
    from logstore.group.formats import partition_for
    offsets_partition = partition_for(group, broker.store.partitions("__consumer_offsets"))
    assert markers(broker, "__consumer_offsets", offsets_partition)[-3:] == [True, False, True]


def test_a_second_kafkajs_producer_fences_the_first(broker):
    topic = broker.create_topic(unique("txn-js-zombie"), partitions=1)
    answer = kafkajs("fence", broker.bootstrap_servers, topic=topic, transactional_id=unique("kafkajs-zombie"))
    assert answer["zombie_error"] is not None, "the fenced producer's commit succeeded"
    # kafkajs 2.2.4 sends EndTxn v1, older than PRODUCER_FENCED (which needs v2 and later): a fenced
    # epoch is answered INVALID_PRODUCER_EPOCH there, as Kafka does
    assert answer["zombie_error"] == {"type": "INVALID_PRODUCER_EPOCH", "code": 47}, answer
    wait_stable(broker, [topic], partitions=1)
    assert [value for _t, _p, value in read_all(broker, [topic], "read_committed", partitions=1)] == [
        b"from the successor"]
    # the zombie's open transaction was aborted when the successor's InitProducerId fenced it
    assert markers(broker, topic, 0) == [False, True]
