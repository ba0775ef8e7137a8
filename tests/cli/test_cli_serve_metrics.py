"""``logstore serve --metrics-listen``: the metrics line printed after the lines scripts already read
(the listening line stays first), the metrics and probes served while it runs, and a bad address
refused in one line before anything starts."""

import signal
import subprocess
import sys

from click.testing import CliRunner

from logstore.cli.main import main
from http_probe import status_and_body


def test_serve_prints_the_metrics_address_after_its_listening_lines(tmp_path):
    process = subprocess.Popen([sys.executable, "-P", "-m", "logstore.cli", "--dir", str(tmp_path / "data"), "serve",
                                "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = [process.stdout.readline() for _ in range(3)]
        assert lines[0].startswith("logstore serve: listening on 127.0.0.1:"), lines
        assert lines[1].startswith("logstore serve: descriptor limit") or "descriptor" in lines[1], lines
        assert lines[2].startswith("logstore serve: metrics on http://127.0.0.1:") and lines[2].rstrip().endswith(
            "/metrics"), lines
        address = lines[2].split("http://", 1)[1].rstrip().removesuffix("/metrics")
        assert status_and_body(address, "/readyz") == (200, "ready\n")
        assert status_and_body(address, "/healthz") == (200, "ok\n")
        status, text = status_and_body(address, "/metrics")
        assert status == 200 and "\nlogstore_partitions " in text and "\nprocess_resident_memory_bytes " in text
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
        process.stdout.close()
        process.stderr.close()


def test_a_bad_metrics_address_is_one_line(tmp_path):
    result = CliRunner().invoke(main, ["--dir", str(tmp_path / "d"), "serve", "--listen", "127.0.0.1:0",
                                       "--metrics-listen", "nohost:notaport"])
    assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
    assert "metrics address 'nohost:notaport'" in result.output
