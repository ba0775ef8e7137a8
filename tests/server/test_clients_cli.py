"""The command line with real clients: ``logstore serve`` as its own process (the ready line, real
clients producing and consuming, a clean stop on SIGTERM and SIGINT), and ``logstore read`` printing
exactly what clients produced over the wire. Our server only: there is nothing to compare under Tansu.
"""

import base64
import json
import os
import re
import signal
import subprocess
import sys
import threading

import pytest
from conftest import logstore_only

from clients import WireRecord
from clients.checks import assert_same, expected_records, now_ms, varied_records

pytestmark = [pytest.mark.kafka_clients, logstore_only("the logstore command line")]

READY = re.compile(r"^logstore serve: listening on 127\.0\.0\.1:(\d+) \(node (-?\d+), cluster (\S+)\)$")


def logstore_command() -> list[str]:
    """The installed console script next to this interpreter (the venv's), else ``python -m``."""
    candidate = os.path.join(os.path.dirname(sys.executable), "logstore")
    return [candidate] if os.access(candidate, os.X_OK) else [sys.executable, "-m", "logstore.cli"]


def read_cli(data_dir: str, topic: str, partition: int = 0) -> list[WireRecord]:
    """``logstore --dir D read TOPIC -p P --encoding base64``, parsed: headers are a JSON object, or a
    list of pairs when a name repeats."""
    done = subprocess.run([*logstore_command(), "--dir", data_dir, "read", topic, "-p", str(partition),
                           "--encoding", "base64"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr

    def raw(text):
        return None if text is None else base64.b64decode(text)

    records = []
    for line in done.stdout.splitlines():
        row = json.loads(line)
        headers = row["headers"].items() if isinstance(row["headers"], dict) else row["headers"]
        records.append(WireRecord(row["offset"], raw(row["key"]), raw(row["value"]),
                                  tuple((name, raw(value)) for name, value in headers), row["timestamp"]))
    return records


def test_logstore_read_prints_what_clients_produced(fresh_broker, driver_factory, topic):
    """Records two clients produced over the wire (one with a codec) read back through the CLI,
    byte for byte, with offsets and timestamps, equal to what a consumer client reads."""
    # A store of its own: `logstore read` opens every log of the store read-only, and the session's
    # store has a hundred topics by now (a read-only open of a store that another process holds
    # took 19 s for 80 topics of 2 partitions here, against 0.9 s for 20).
    broker = fresh_broker
    broker.create_topic(topic)
    first, second = driver_factory("confluent-kafka"), driver_factory("kafka-python")
    one, two = varied_records(first, tag=b"-1"), varied_records(second, tag=b"-2")
    produced = first.produce(broker.bootstrap_servers, topic, one, partition=0)
    produced += second.produce(broker.bootstrap_servers, topic, two, partition=0, compression="zstd")
    expected = expected_records(one + two, produced)
    assert_same(read_cli(broker.data_dirs[0], topic), expected)
    assert driver_factory("aiokafka").consume(broker.bootstrap_servers, topic, 0, count=len(expected)) == expected


class ServeProcess:
    """``logstore --dir D serve --listen 127.0.0.1:0`` with its ready line parsed."""

    def __init__(self, data_dir: str):
        self.process = subprocess.Popen([*logstore_command(), "--dir", data_dir, "serve", "--listen", "127.0.0.1:0"],
                                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True)
        self.lines: list[str] = []
        ready = threading.Event()

        def read():
            for line in self.process.stdout:
                self.lines.append(line.rstrip("\n"))
                ready.set()
            ready.set()  # closed without a line: the wait below sees no match

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(30) or not self.lines:
            self.stop(signal.SIGKILL)
            raise AssertionError(f"logstore serve printed no ready line; stderr: {self.process.stderr.read()}")
        match = READY.match(self.lines[0])
        assert match, f"unexpected first line: {self.lines[0]!r}"
        self.bootstrap_servers = f"127.0.0.1:{match.group(1)}"

    def stop(self, sig) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"logstore serve did not stop within 20 s of {sig!r}")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_logstore_serve_with_real_clients_then_a_clean_stop(tmp_path, driver_factory, sig):
    data_dir = str(tmp_path / "data")
    serve = ServeProcess(data_dir)
    try:
        bootstrap = serve.bootstrap_servers
        kafka_python, kcat = driver_factory("kafka-python"), driver_factory("kcat")
        kafka_python.create_topic(bootstrap, "events", partitions=2, config={"retention.ms": "86400000"})
        one, two = varied_records(kafka_python, tag=b"-1"), varied_records(kcat, tag=b"-2")
        start = now_ms()
        produced = kafka_python.produce(bootstrap, "events", one, partition=1)
        produced += kcat.produce(bootstrap, "events", two, partition=1, compression="snappy")
        window = (start, now_ms())  # kcat stamps its records itself
        expected = expected_records(one + two, produced)
        for name in ("confluent-kafka", "aiokafka"):
            assert_same(driver_factory(name).consume(bootstrap, "events", 1, count=len(expected)), expected,
                        window=window, what=name)
    finally:
        code = serve.stop(sig)
    assert code == 0, f"exit code {code} after {sig!r}; stderr: {serve.process.stderr.read()}"

    # Everything acknowledged is in the store, which was closed cleanly (its lock released).
    from logstore import LogManager
    assert_same(read_cli(data_dir, "events", 1), expected, window=window)
    with LogManager([data_dir]) as store:
        assert store.topic_overrides("events") == {"retention.ms": "86400000"}
        assert store.partitions("events") == 2
        assert all(status.clean_shutdown for status in store.status())
