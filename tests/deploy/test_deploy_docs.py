"""The commands of ``docs/deploy.md`` agree with the files they use.

They need a Docker engine, Docker Compose or a systemd that runs services as root, none of which a
test machine has (nor CI's), so they cannot run as written; what the files themselves run is run by
the other tests of this folder. Here each command block of the page is taken apart and checked
against ``deploy/``: the image it builds and runs, the ports it publishes (exposed, and the ones the
server and its HEALTHCHECK use), the volume's mount point, the settings it passes (accepted by
``logstore serve`` as it reads them), the compose file and services it names, and the unit's
paths, user and metrics port."""

from __future__ import annotations

import re
import shlex

from deploy_helpers import DEPLOY, METRICS_PORT, ROOT, dockerfile_instructions, env_of, exec_form, one, systemd_unit
from docs_snippets import block

INSTRUCTIONS = dockerfile_instructions(DEPLOY / "Dockerfile")
ENV = env_of(INSTRUCTIONS)
VOLUME = exec_form(one(INSTRUCTIONS, "VOLUME").arguments)[0]
EXPOSED = {int(port.split("/")[0]) for port in one(INSTRUCTIONS, "EXPOSE").arguments.split()}


def commands(text: str) -> list[list[str]]:
    """The block's commands as argument lists: continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    found = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words:
            found.append(words)
    return found


def docker_runs(text: str) -> list[list[str]]:
    return [words[2:] for words in commands(text) if words[:2] == ["docker", "run"]]


def options_of(arguments: list[str]) -> tuple[dict[str, list[str]], str, list[str]]:
    """``docker run``'s options (each flag's values), the image, and the arguments after it."""
    options: dict[str, list[str]] = {}
    index = 0
    while arguments[index].startswith("-"):
        flag = arguments[index]
        if flag in ("-d", "--rm", "-i", "-t"):
            options.setdefault(flag, []).append("")
            index += 1
        else:
            options.setdefault(flag, []).append(arguments[index + 1])
            index += 2
    return options, arguments[index], arguments[index + 1:]


def check_run(arguments: list[str], image: str) -> dict[str, list[str]]:
    options, used_image, rest = options_of(arguments)
    assert used_image == image, f"runs {used_image!r}, builds {image!r}"
    for published in options.get("-p", []):
        container_port = int(published.rsplit(":", 1)[1])
        assert container_port in EXPOSED, f"publishes {container_port}, the image exposes {sorted(EXPOSED)}"
    for volume in options.get("-v", []):
        source, target = volume.split(":")[:2]
        if not source.startswith(("/", "$")):
            assert target == VOLUME, f"named volume mounted at {target}, the image's volume is {VOLUME}"
    for variable in options.get("-e", []):
        assert variable.startswith("LOGSTORE_"), variable
    return options


def check_serve_settings(variables: dict[str, str]) -> None:
    """``variables`` on top of the image's environment are what ``logstore serve`` takes."""
    from logstore.server.server_config import ServeSettings, environment_settings
    settings, warnings = environment_settings({**ENV, **variables})
    assert warnings == []
    ServeSettings.merge([settings])


def test_the_image_block_builds_the_dockerfile_and_runs_it_as_the_image_expects():
    text = block("docs/deploy.md", "image")
    words = commands(text)
    build = next(command for command in words if command[:2] == ["docker", "build"])
    dockerfile = build[build.index("-f") + 1]
    image = build[build.index("-t") + 1]
    assert (ROOT / dockerfile).resolve() == DEPLOY / "Dockerfile" and build[-1] == "."
    created = next(command[3] for command in words if command[:3] == ["docker", "volume", "create"])
    [run] = docker_runs(text)
    options = check_run(run, image)
    assert any(volume.split(":")[0] == created for volume in options["-v"])
    published = {int(value.rsplit(":", 1)[1]) for value in options["-p"]}
    assert published == EXPOSED
    probe = next(command for command in words if command[0] == "curl")
    assert probe[-1].endswith(f":{METRICS_PORT}/readyz")
    cmd = exec_form(one(INSTRUCTIONS, "CMD").arguments)
    assert cmd[cmd.index("--metrics-listen") + 1].endswith(f":{METRICS_PORT}")
    stop = next(command for command in words if command[:2] == ["docker", "stop"])
    assert int(stop[stop.index("-t") + 1]) >= 30  # the server's drain and the store's close


def test_the_other_run_blocks_pass_settings_serve_takes_and_keep_the_healthchecks_port():
    image = "kafka-logstore"
    for text in (block("docs/deploy.md", "image-advertised"), block("docs/deploy.md", "image-config")):
        [run] = docker_runs(text)
        options = check_run(run, image)
        check_serve_settings(dict(variable.split("=", 1) for variable in options.get("-e", [])))
        _, _, rest = options_of(run)
        if rest:  # arguments after the image replace CMD: the HEALTHCHECK's port must stay served
            assert rest[0] == "serve" and rest[rest.index("--metrics-listen") + 1].endswith(f":{METRICS_PORT}")
            mounted = {volume.split(":")[1] for volume in options["-v"]}
            assert rest[rest.index("--config") + 1] in mounted


def test_the_compose_block_uses_the_compose_file_and_its_services():
    import yaml
    text = block("docs/deploy.md", "compose")
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    for command in commands(text):
        assert command[:2] == ["docker", "compose"] and (ROOT / command[command.index("-f") + 1]).resolve() == \
            DEPLOY / "compose.yaml"
        if "logs" in command:
            assert command[-1] in compose["services"]
    assert {"logstore", "client"} <= set(compose["services"])


def test_the_unit_block_installs_what_the_unit_runs_where_it_looks():
    text = block("docs/deploy.md", "unit")
    words = commands(text)
    service = {key: values[-1] for key, values in systemd_unit(DEPLOY / "logstore.service")["Service"].items()}
    exec_start = shlex.split(service["ExecStart"])
    venv = next(command[-1] for command in words if command[:3] == ["python3", "-m", "venv"])
    assert exec_start[0] == f"{venv}/bin/logstore"
    assert any(command[0] == f"{venv}/bin/pip" and "kafka-logstore[server]" in command for command in words)
    useradd = next(command for command in words if command[0] == "useradd")
    assert useradd[-1] == service["User"]
    assert useradd[useradd.index("--home-dir") + 1] == f"/var/lib/{service['StateDirectory']}"
    installs = {command[-1]: command[-2] for command in words if command[0] == "install"}
    assert installs[exec_start[exec_start.index("--config") + 1]] == "deploy/server.properties"
    assert installs["/etc/systemd/system/logstore.service"] == "deploy/logstore.service"
    assert all((ROOT / source).is_file() for source in installs.values())
    enabled = next(command for command in words if command[:2] == ["systemctl", "enable"])
    assert enabled[-1] == "logstore"
    probe = next(command for command in words if command[0] == "curl")
    assert probe[-1] == exec_start[exec_start.index("--metrics-listen") + 1] + "/readyz"
