"""``deploy/Dockerfile`` and ``.dockerignore``: hadolint finds nothing; the image is what the docs
say (a pinned slim Python base, the server extra, a non-root user, the data dir a volume, the Kafka
and metrics ports exposed, a HEALTHCHECK on /readyz with what the slim image has); its environment
is one ``logstore serve`` accepts, and needs (the PLAINTEXT listener on every interface is refused
without it); and its ENTRYPOINT and CMD, run here with the image's environment on loopback and a
temp data dir, serve, pass the HEALTHCHECK's own probe once ready, and stop cleanly on SIGTERM,
after which the probe fails.

No Docker engine here or in CI: the image is never built; what it would run is run."""

from __future__ import annotations

import fnmatch
import re
import subprocess
from pathlib import Path

import pytest

import external_tools
from deploy_helpers import (DEPLOY, KAFKA_PORT, METRICS_PORT, ROOT, Served, dockerfile_instructions, env_of,
                            environment, exec_form, final_stage, one, substitute)

DOCKERFILE = DEPLOY / "Dockerfile"
INSTRUCTIONS = dockerfile_instructions(DOCKERFILE)
ENV = env_of(INSTRUCTIONS)
DATA_DIR = "/var/lib/logstore"


def command_line() -> list[str]:
    return exec_form(one(INSTRUCTIONS, "ENTRYPOINT").arguments) + exec_form(one(INSTRUCTIONS, "CMD").arguments)


def healthcheck() -> tuple[list[str], str]:
    """The HEALTHCHECK's command (exec form) and its options."""
    options, _, command = one(INSTRUCTIONS, "HEALTHCHECK").arguments.partition("CMD ")
    return exec_form(command.strip()), options


@pytest.mark.needs_tools("hadolint")
def test_hadolint_finds_nothing():
    done = subprocess.run([external_tools.find("hadolint"), "--no-color", str(DOCKERFILE)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


def test_every_stage_starts_from_a_pinned_slim_python():
    bases = [instruction.arguments.split()[0] for instruction in INSTRUCTIONS if instruction.keyword == "FROM"]
    assert bases, "no FROM"
    for base in bases:
        assert re.fullmatch(r"python:3\.1[1-9]\.\d+-slim(-[a-z]+)?", base), f"not a pinned slim Python: {base}"


def test_it_runs_as_a_user_of_its_own_never_root():
    stage = final_stage(INSTRUCTIONS)
    user = one(INSTRUCTIONS, "USER").arguments.split(":")[0]
    assert user not in ("root", "0"), user
    created = [instruction.arguments for instruction in stage if instruction.keyword == "RUN"
               and "useradd" in instruction.arguments]
    assert created and f"--uid {user}" in created[0], created
    # USER comes after every RUN that installs: those need root, and nothing runs as root after it.
    index = stage.index(one(INSTRUCTIONS, "USER"))
    assert all(instruction.keyword != "RUN" for instruction in stage[index:])


def test_the_data_dir_is_a_volume_owned_by_that_user():
    assert ENV["LOGSTORE_DIRS"] == DATA_DIR
    volumes = exec_form(one(INSTRUCTIONS, "VOLUME").arguments)
    assert volumes == [DATA_DIR]
    run = " ".join(instruction.arguments for instruction in final_stage(INSTRUCTIONS) if instruction.keyword == "RUN")
    assert f"chown logstore:logstore {DATA_DIR}" in run
    assert one(INSTRUCTIONS, "WORKDIR").arguments == DATA_DIR


def test_the_kafka_and_metrics_ports_are_exposed_and_served():
    exposed = {int(port.split("/")[0]) for port in one(INSTRUCTIONS, "EXPOSE").arguments.split()}
    assert exposed == {KAFKA_PORT, METRICS_PORT}
    assert ENV["LOGSTORE_LISTENERS"] == f"PLAINTEXT://0.0.0.0:{KAFKA_PORT}"
    argv = command_line()
    assert argv[:2] == ["logstore", "serve"]
    assert argv[argv.index("--metrics-listen") + 1] == f"0.0.0.0:{METRICS_PORT}"


def test_the_server_extra_is_installed_from_the_checkout():
    run = " ".join(instruction.arguments for instruction in INSTRUCTIONS if instruction.keyword == "RUN")
    assert "pip wheel" in run and "kafka_logstore-*.whl" in run and "[server]" in run, run
    copied = [word for instruction in INSTRUCTIONS if instruction.keyword == "COPY"
              and not instruction.arguments.startswith("--from") for word in instruction.arguments.split()[:-1]]
    for name in ("pyproject.toml", "README.md", "LICENSE", "logstore/", "cli/"):
        assert name in copied, copied
    ignored = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    for name in copied:
        assert (ROOT / name).exists(), name
        assert not any(fnmatch.fnmatch(name.rstrip("/"), pattern) for pattern in ignored), (name, ignored)
    for kept_out in (".git", ".venv", "test-results", "**/node_modules", "**/__pycache__"):
        assert kept_out in ignored, kept_out


def test_the_healthcheck_asks_readyz_with_python_not_curl():
    command, options = healthcheck()
    assert command[0] == "python" and command[1] == "-c", command
    assert f"http://127.0.0.1:{METRICS_PORT}/readyz" in command[2]
    assert "--start-period=" in options and "--timeout=" in options
    # nothing installs or calls a tool the slim image lacks
    assert not [instruction for instruction in INSTRUCTIONS
                if re.search(r"\b(curl|wget|apt-get)\b", instruction.arguments)], INSTRUCTIONS


def _server(env: dict[str, str]):
    from logstore.server.server import KafkaServer
    from logstore.server.server_config import ServeSettings, environment_settings
    settings, warnings = environment_settings(env)
    assert warnings == []
    chosen = ServeSettings.merge([settings])
    return KafkaServer(list(chosen.dirs), listen=list(chosen.listeners), config=chosen.config)


def test_serve_accepts_the_images_environment_and_refuses_it_without_allow_plaintext_remote(tmp_path):
    """Checked as serve checks it, without binding anything (a server is only constructed)."""
    from logstore.errors import InvalidConfigError
    env = {**ENV, "LOGSTORE_DIRS": str(tmp_path)}
    server = _server(env)
    assert [(listener.host, listener.port) for listener in server.listeners] == [("0.0.0.0", KAFKA_PORT)]
    without = {key: value for key, value in env.items() if key != "LOGSTORE_ALLOW_PLAINTEXT_REMOTE"}
    with pytest.raises(InvalidConfigError, match="PLAINTEXT"):
        _server(without)


def test_its_command_serves_passes_its_healthcheck_and_stops_on_sigterm(tmp_path):
    data = tmp_path / "volume"
    data.mkdir()
    ports = {KAFKA_PORT: 0, METRICS_PORT: 0}  # port 0: a free one, read back from what serve prints
    env = environment({key: substitute(value, ports, DATA_DIR, str(data)) for key, value in ENV.items()})
    argv = [substitute(word, ports) for word in command_line()]
    served = Served(argv, env, cwd=data)
    try:
        assert served.metrics is not None, served.lines
        probe_ports = {METRICS_PORT: served.port("metrics")}
        probe = [substitute(word, probe_ports) for word in healthcheck()[0]]
        done = subprocess.run(probe, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert (data / "meta.properties").exists()  # the store is in the volume
        listed = subprocess.run(["logstore", "topics", "list"], env={**env, "LOGSTORE_BOOTSTRAP_SERVER": served.kafka},
                                capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0, listed.stderr
        code, stderr = served.stop(60)
        assert code == 0, stderr
        assert "logstore serve: stopping" in stderr
        after = subprocess.run(probe, env=env, capture_output=True, text=True, timeout=60)
        assert after.returncode != 0  # nothing answers: the probe can fail
    finally:
        served.kill()
