"""The server under hostile conditions: kill -9 of `logstore serve` while clients produce with
acks=all loses no acknowledged record (and an idempotent producer's retry after the restart is not
appended twice); a fuzzer sending truncated, oversized, bit-flipped and random frames to a live
server never disturbs a well-formed client or the store (`logstore check` passes afterwards).

Both are sized by a time budget (LOGSTORE_SERVER_CRASH_S, LOGSTORE_SERVER_FUZZ_S), not a count."""

import os
import random
import signal
import struct
import subprocess
import sys
import threading
import time

import pytest

from logstore import LogManager, Record
from logstore.server.protocol.codec import encode_request
from logstore.server.server import KafkaServer
from logstore.server.wire_records import encode_produce_batch
from logstore.tools.check import verify_store
from wire_client import WireClient

CRASH_BUDGET_S = float(os.environ.get("LOGSTORE_SERVER_CRASH_S", "12"))
FUZZ_BUDGET_S = float(os.environ.get("LOGSTORE_SERVER_FUZZ_S", "8"))


def start_serve(data_dir):
    """`logstore serve` on a free port: (process, "127.0.0.1:PORT")."""
    process = subprocess.Popen([sys.executable, "-P", "-m", "logstore.cli", "--dir", data_dir, "serve", "--listen",
                                "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    if not line.startswith("logstore serve: listening on "):
        process.kill()
        raise AssertionError(f"serve did not start: {line!r} {process.stderr.read()[-2000:]}")
    return process, line.split("listening on ", 1)[1].split()[0]


@pytest.mark.slow
def test_kill_9_during_acks_all_produces_loses_no_acknowledged_record(tmp_path):
    """Idempotent producers (one per partition) send numbered batches with acks=all while the
    server is killed at random moments; after each restart every producer first retries the batch
    that was in flight (same producer id, epoch and sequence). Every acknowledged record is there,
    and no record is there twice: a retried batch that had made it into the log before the kill is
    answered from the producer state, not appended again."""
    data = str(tmp_path / "data")
    with LogManager([data]) as store:
        store.create_topic("crash", partitions=2)
    acknowledged: dict[int, set] = {0: set(), 1: set()}
    producers = {}  # partition -> [producer_id, next_sequence, in-flight values or None]
    deadline = time.monotonic() + CRASH_BUDGET_S
    cycles = retried = 0
    failures = []
    while time.monotonic() < deadline or cycles < 2:
        process, address = start_serve(data)
        stop = threading.Event()
        if not producers:
            setup = WireClient(address)
            for partition in (0, 1):
                pid = setup.call(22, 1, {"transactional_id": None, "transaction_timeout_ms": -1})["producer_id"]
                producers[partition] = [pid, 0, None]
            setup.close()

        def produce(partition):
            state = producers[partition]
            try:
                client = WireClient(address, timeout_s=5)
                while not stop.is_set():
                    if state[2] is None:
                        state[2] = [b"%d-%d-%d" % (partition, state[1], i) for i in range(5)]
                    values = state[2]
                    result = client.produce("crash", partition, [Record(key=b"k", value=v) for v in values], acks=-1,
                                            producer_id=state[0], producer_epoch=0, base_sequence=state[1])
                    assert result["error_code"] == 0, result
                    acknowledged[partition].update(values)
                    state[1] += len(values)
                    state[2] = None
            except (OSError, ConnectionError):
                return  # the server died under us: the batch in flight is retried after the restart
            except Exception as exc:  # noqa: BLE001 - a refused batch fails the test below
                failures.append(exc)

        retried += sum(1 for state in producers.values() if state[2] is not None)
        threads = [threading.Thread(target=produce, args=(p,)) for p in (0, 1)]
        for thread in threads:
            thread.start()
        time.sleep(random.uniform(0.3, 1.0))
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        stop.set()
        for thread in threads:
            thread.join(10)
        process.stdout.close()
        process.stderr.close()
        cycles += 1
    assert not failures, failures
    with LogManager([data]) as store:
        for partition in (0, 1):
            values = [r.value for r in store.get_log("crash", partition).iter_records()]
            assert acknowledged[partition] <= set(values), partition
            assert len(values) == len(set(values))  # nothing appended twice
    assert sum(len(values) for values in acknowledged.values()) > 0 and retried > 0
    with LogManager([data], read_only=True) as view:
        report = verify_store(view)
    assert report.ok, report


@pytest.mark.slow
def test_fuzzed_frames_never_disturb_good_clients_or_the_store(tmp_path):
    data = str(tmp_path / "data")
    rng = random.Random(1234)
    valid = [
        encode_request(18, 3, 1, "fuzz", {"client_software_name": "f", "client_software_version": "1"}),
        encode_request(3, 8, 2, "fuzz", {"topics": [{"name": "fuzz"}], "allow_auto_topic_creation": True}),
        encode_request(0, 8, 3, "fuzz", {"acks": 1, "timeout_ms": 1000, "topic_data": [{"name": "fuzz", "partition_data": [
            {"index": 0, "records": encode_produce_batch([Record(key=b"k", value=b"v" * 50)] * 3)}]}]}),
        encode_request(1, 11, 4, "fuzz", {"max_wait_ms": 10, "min_bytes": 1, "max_bytes": 1 << 20, "session_epoch": -1,
                                          "replica_id": -1, "topics": [{"topic": "fuzz", "partitions": [
                                              {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]}),
        encode_request(19, 4, 5, "fuzz", {"topics": [{"name": "fz2", "num_partitions": 1, "replication_factor": 1}],
                                          "timeout_ms": 100}),
    ]

    def mutate(frame: bytes) -> bytes:
        kind = rng.randrange(5)
        if kind == 0:  # truncated
            return frame[:rng.randrange(1, len(frame))]
        if kind == 1:  # a size prefix that lies
            return struct.pack(">i", rng.choice([-1, 0, 3, len(frame) * 2, 2**31 - 1])) + frame[4:]
        if kind == 2:  # bit flips in the body
            data = bytearray(frame)
            for _ in range(rng.randrange(1, 4)):
                position = rng.randrange(4, len(data))
                data[position] ^= 1 << rng.randrange(8)
            return bytes(data)
        if kind == 3:  # random bytes in a well-sized frame
            body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 64)))
            return struct.pack(">i", len(body)) + body
        return frame  # a valid one now and then

    with LogManager([data]) as store:
        store.create_topic("good")
        with KafkaServer(store, listen="127.0.0.1:0") as server:
            good = WireClient(server.bootstrap_servers)
            sent = 0
            deadline = time.monotonic() + FUZZ_BUDGET_S
            frames = 0
            while time.monotonic() < deadline:
                fuzzer = WireClient(server.bootstrap_servers, timeout_s=2)
                try:
                    for _ in range(rng.randrange(1, 4)):
                        fuzzer.send_raw(mutate(rng.choice(valid)))
                        frames += 1
                    fuzzer.sock.settimeout(0.05)
                    fuzzer.sock.recv(1 << 16)
                except OSError:
                    pass  # the server closed the connection on a bad frame (or had nothing to say yet)
                finally:
                    fuzzer.close()
                result = good.produce("good", 0, [Record(key=b"g", value=b"%d" % sent)])
                assert result["error_code"] == 0 and result["base_offset"] == sent
                sent += 1
            _partition, fetched = good.fetch("good", 0, 0)
            assert [r.value for r in fetched] == [b"%d" % i for i in range(sent)]
            good.close()
            assert frames > 50
    with LogManager([data], read_only=True) as view:
        report = verify_store(view)
    assert report.ok, report
