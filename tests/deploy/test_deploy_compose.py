"""``deploy/compose.yaml``: the server service builds ``deploy/Dockerfile`` from the repository root,
keeps its data in a named volume at the image's data dir and is health-checked on /readyz; the
client waits for that check (``service_healthy``) and runs the same image. Then what they run, run
here: the server with the image's command and the service's environment (loopback, port 0, a temp
data dir), and the client's shell script against it, which must create the topic, append three
records and print them back."""

from __future__ import annotations

import json
import subprocess

import yaml  # PyYAML: the test extra

from deploy_helpers import (DEPLOY, KAFKA_PORT, METRICS_PORT, ROOT, Served, dockerfile_instructions, env_of,
                            environment, exec_form, one, substitute)

COMPOSE = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
SERVER = COMPOSE["services"]["logstore"]
CLIENT = COMPOSE["services"]["client"]
IMAGE = dockerfile_instructions(DEPLOY / "Dockerfile")
DATA_DIR = "/var/lib/logstore"


def test_the_server_builds_the_dockerfile_with_a_named_volume_and_a_readyz_healthcheck():
    build = SERVER["build"]
    assert (DEPLOY / build["context"]).resolve() == ROOT
    assert (DEPLOY / build["context"] / build["dockerfile"]).resolve() == DEPLOY / "Dockerfile"
    volume, _, target = SERVER["volumes"][0].partition(":")
    assert volume in COMPOSE["volumes"] and target == DATA_DIR
    assert env_of(IMAGE)["LOGSTORE_DIRS"] == DATA_DIR
    test = SERVER["healthcheck"]["test"]
    assert test[0] == "CMD" and test[1] == "python" and f"127.0.0.1:{METRICS_PORT}/readyz" in test[-1]
    assert SERVER["environment"]["LOGSTORE_ADVERTISED_LISTENERS"] == f"PLAINTEXT://logstore:{KAFKA_PORT}"
    for published in SERVER["ports"]:
        assert published.startswith("127.0.0.1:"), published  # the listener is PLAINTEXT


def test_the_client_waits_for_the_server_to_be_healthy_and_runs_the_same_image():
    assert CLIENT["depends_on"]["logstore"]["condition"] == "service_healthy"
    assert CLIENT["image"] == SERVER["image"] and CLIENT["build"] == SERVER["build"]
    assert CLIENT["environment"]["LOGSTORE_BOOTSTRAP_SERVER"] == f"logstore:{KAFKA_PORT}"
    assert CLIENT["healthcheck"] == {"disable": True}


def test_the_client_script_runs_against_the_server_as_compose_runs_them(tmp_path):
    data = tmp_path / "logstore-data"
    data.mkdir()
    ports = {KAFKA_PORT: 0, METRICS_PORT: 0}
    image_env = env_of(IMAGE)
    server_env = {**image_env, **{key: str(value) for key, value in SERVER["environment"].items()}}
    # advertised port 0: the bound one (the listener's port is picked at start)
    env = environment({key: substitute(value, ports, DATA_DIR, str(data)) for key, value in server_env.items()})
    argv = [substitute(word, ports) for word in exec_form(one(IMAGE, "ENTRYPOINT").arguments)
            + exec_form(one(IMAGE, "CMD").arguments)]
    served = Served(argv, env, cwd=data)
    try:
        assert served.kafka.startswith("127.0.0.1:"), served.lines
        broker = {KAFKA_PORT: served.port("kafka")}
        client_env = environment({key: substitute(value, broker) for key, value in
                                  {**image_env, **{key: str(value) for key, value in CLIENT["environment"].items()}}.items()})
        client_env["LOGSTORE_DIRS"] = str(tmp_path / "client-has-no-store")  # the client container's own
        argv = CLIENT["entrypoint"] + CLIENT["command"]
        assert argv[:2] == ["sh", "-ec"], argv
        done = subprocess.run(argv, env=client_env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        lines = done.stdout.splitlines()
        assert lines[0] == "Created topic greetings with 1 partition.", lines
        records = [json.loads(line) for line in lines if line.startswith('{"topic": "greetings", "partition": 0, "offset"')]
        assert [(record["offset"], record["key"], record["value"]) for record in records] == [
            (0, "k1", "hello"), (1, "k2", "from"), (2, "k3", "compose")]
        assert not (tmp_path / "client-has-no-store").exists()  # it went through the broker
        code, stderr = served.stop(float(SERVER["stop_grace_period"].removesuffix("s")))
        assert code == 0, stderr
    finally:
        served.kill()
