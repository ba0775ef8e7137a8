"""``logstore serve`` as a user runs it: the ready line with the bound port, a real client served,
a clean stop on SIGTERM and on SIGINT (clean-shutdown marker written, the store opens without
recovery), and one-line errors for a bad address, a port in use and a missing extra."""

import os
import signal
import socket
import subprocess
import sys

import pytest
from click.testing import CliRunner

from logstore import LogManager, Record
from logstore.cli.main import main
from logstore.log.checkpoint import CLEAN_SHUTDOWN_MARKER


def serve(data_dir, *extra):
    process = subprocess.Popen([sys.executable, "-P", "-m", "logstore.cli", "--dir", str(data_dir), *extra, "serve",
                                "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    return process, line


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_serve_prints_its_address_serves_and_stops_cleanly(tmp_path, stop_signal):
    from kafka import KafkaProducer
    data = tmp_path / "data"
    process, line = serve(data, "--set", "num.partitions=2")
    try:
        assert line.startswith("logstore serve: listening on 127.0.0.1:") and "(node 0, cluster " in line, line
        address = line.split("listening on ", 1)[1].split()[0]
        producer = KafkaProducer(bootstrap_servers=address)
        producer.send("cli", key=b"k", value=b"v").get(10)
        producer.close()
        process.send_signal(stop_signal)
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
        process.stdout.close()
        process.stderr.close()
    assert os.path.exists(data / CLEAN_SHUTDOWN_MARKER)
    with LogManager([str(data)], read_only=True) as store:
        assert store.partitions("cli") == 2
        assert [record.value for p in (0, 1) for record in store.get_log("cli", p).iter_records()] == [b"v"]


def test_serve_errors_are_one_line(tmp_path, monkeypatch):
    runner = CliRunner()
    # a bad listener or setting is a usage error (exit 2), refused before anything starts
    result = runner.invoke(main, ["--dir", str(tmp_path / "d"), "serve", "--listen", "nohost:notaport"])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and "HOST:PORT" in result.output
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = runner.invoke(main, ["--dir", str(tmp_path / "d"), "serve", "--listen", f"127.0.0.1:{port}"])
        assert result.exit_code == 1 and result.output.count("\n") == 1 and "in use" in result.output
    result = runner.invoke(main, ["--dir", str(tmp_path / "d"), "--set", "no.such=1", "serve", "--listen", "127.0.0.1:0"])
    assert result.exit_code == 2 and "Invalid value for '--set': unknown setting 'no.such'" in result.output
    import logstore.server
    monkeypatch.setattr(logstore.server, "missing_extra", lambda: ["cramjam"])
    result = runner.invoke(main, ["--dir", str(tmp_path / "d"), "serve"])
    assert result.exit_code == 1
    assert result.output == "Error: logstore serve needs the server extra: pip install 'kafka-logstore[server]'\n"


def test_a_store_in_use_cannot_be_served_twice(tmp_path):
    data = tmp_path / "data"
    with LogManager([str(data)]) as store:
        store.create_topic("t")
        store.append("t", [Record(value=b"x")])
        result = CliRunner().invoke(main, ["--dir", str(data), "serve", "--listen", "127.0.0.1:0"])
    assert result.exit_code == 1 and result.output.count("\n") == 1 and "lock" in result.output.lower()
