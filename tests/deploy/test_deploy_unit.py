"""``deploy/logstore.service`` and the ``deploy/server.properties`` it reads: ``systemd-analyze
verify`` finds nothing (and would say so of a key it does not know or a value it cannot parse); the
unit is what the docs say (a user of its own, the state directory the config's ``log.dirs`` names,
``--config``, restart on failure but not on a usage error, the descriptor limit, the hardening, a
SIGTERM stop with a timeout longer than serve's drain); and its ExecStart, run here with its config
(addresses and the data dir substituted), serves, answers /readyz, and exits 0 on SIGTERM within
TimeoutStopSec."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

import external_tools
from deploy_helpers import BIN, DEPLOY, KAFKA_PORT, METRICS_PORT, Served, environment, substitute, systemd_unit
from http_probe import status_and_body

UNIT = DEPLOY / "logstore.service"
PROPERTIES = DEPLOY / "server.properties"
SECTIONS = systemd_unit(UNIT)
SERVICE = {key: values[-1] for key, values in SECTIONS["Service"].items()}
INSTALLED = "/opt/logstore/bin/logstore"  # where docs/deploy.md installs the command
DRAIN_S = 5  # KafkaServer's drain of requests in flight when it stops (_DRAIN_MS)


def exec_start() -> list[str]:
    return shlex.split(SERVICE["ExecStart"])


def seconds(value: str) -> float:
    units = {"ms": 0.001, "s": 1, "min": 60}
    for unit, factor in units.items():
        if value.endswith(unit) and value[:-len(unit)].isdigit():
            return int(value[:-len(unit)]) * factor
    return float(value)


def verify(unit_text: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """``systemd-analyze verify`` of ``unit_text`` as logstore.service, its ExecStart pointed at this
    venv's logstore (verify checks that the command exists and is executable)."""
    directory = tmp_path / "units"
    directory.mkdir(exist_ok=True)
    path = directory / "logstore.service"
    path.write_text(unit_text.replace(INSTALLED, str(BIN / "logstore")))
    return subprocess.run([external_tools.find("systemd-analyze"), "verify", str(path)], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.needs_tools("systemd-analyze")
def test_systemd_analyze_verify_finds_nothing(tmp_path):
    assert (BIN / "logstore").exists()
    done = verify(UNIT.read_text(), tmp_path)
    assert done.returncode == 0 and not done.stdout.strip() and not done.stderr.strip(), done.stdout + done.stderr


@pytest.mark.needs_tools("systemd-analyze")
def test_verify_would_report_a_bad_key_or_value(tmp_path):
    """What the test above relies on: verify prints (and exits 0 for) what it ignores."""
    done = verify(UNIT.read_text().replace("ProtectSystem=strict", "ProtectSystem=stricter"), tmp_path)
    assert "ProtectSystem" in done.stderr or "protect system" in done.stderr.lower(), done.stderr
    done = verify(UNIT.read_text().replace("Restart=on-failure", "Restart=on-faillure"), tmp_path)
    assert "restart" in done.stderr.lower(), done.stderr


def test_it_runs_serve_with_its_config_as_a_user_of_its_own():
    argv = exec_start()
    assert argv[0] == INSTALLED and argv[1] == "serve", argv
    assert argv[argv.index("--config") + 1] == "/etc/logstore/server.properties"
    assert argv[argv.index("--metrics-listen") + 1] == f"127.0.0.1:{METRICS_PORT}"
    assert SERVICE["User"] == SERVICE["Group"] == "logstore"
    assert "DynamicUser" not in SERVICE
    assert SERVICE["StateDirectory"] == "logstore" and SERVICE["ConfigurationDirectory"] == "logstore"
    from logstore.server.server_config import read_server_properties
    config = read_server_properties(str(PROPERTIES))
    assert config["log.dirs"] == "/var/lib/logstore"  # the StateDirectory systemd creates and owns
    assert config["listeners"] == f"PLAINTEXT://127.0.0.1:{KAFKA_PORT}"


def test_restart_stop_limits_and_hardening():
    assert SERVICE["Restart"] == "on-failure"
    assert SERVICE["RestartPreventExitStatus"] == "2"  # serve's usage errors: a restart mends none
    assert int(SERVICE["LimitNOFILE"]) >= 65536
    assert SERVICE["KillSignal"] == "SIGTERM"
    assert seconds(SERVICE["TimeoutStopSec"]) > 2 * DRAIN_S  # the drain, the threads' joins, the store's close
    for key, value in {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
                       "PrivateTmp": "yes", "PrivateDevices": "yes", "RestrictSUIDSGID": "yes",
                       "CapabilityBoundingSet": ""}.items():
        assert SERVICE.get(key) == value, key
    assert SECTIONS["Install"]["WantedBy"] == ["multi-user.target"]


def test_its_exec_start_serves_with_its_config_and_stops_cleanly_on_sigterm(tmp_path):
    state = tmp_path / "var-lib-logstore"
    state.mkdir()
    ports = {KAFKA_PORT: 0, METRICS_PORT: 0}
    config = tmp_path / "server.properties"
    config.write_text(substitute(PROPERTIES.read_text(), ports, "/var/lib/logstore", str(state)))
    argv = [substitute(word, ports) for word in exec_start()]
    argv[0] = shutil.which("logstore", path=str(BIN))
    argv[argv.index("--config") + 1] = str(config)
    served = Served(argv, environment({}), cwd=state)  # WorkingDirectory=/var/lib/logstore
    try:
        assert served.kafka.startswith("127.0.0.1:") and served.metrics is not None, served.lines
        assert status_and_body(served.metrics, "/readyz") == (200, "ready\n")
        assert (state / "meta.properties").exists()  # the store is in the state directory
        code, stderr = served.stop(seconds(SERVICE["TimeoutStopSec"]))
        assert code == 0, stderr
        assert "logstore serve: stopping" in stderr
        assert (state / ".kafka_cleanshutdown").exists(), sorted(path.name for path in state.iterdir())
    finally:
        served.kill()
