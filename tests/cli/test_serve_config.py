"""``logstore serve --config FILE``, ``LOGSTORE_<KEY>`` variables and ``--set``: one set of Kafka key
names from three places, file < environment < command line; every bad file, key or value a one-line
usage error (exit 2) naming where it came from; unknown ``LOGSTORE_`` variables that look like
settings warned about; and docs/configuration.md is the table the code prints."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from docs_snippets import block

from logstore.cli.main import main
from logstore.errors import InvalidConfigError
from logstore.server.server_config import (GROUP_KEYS, MANAGER_KEYS, SERVE_KEYS, SERVER_KEYS, TLS_KEY_DOCS,
                                           ServeSettings, check_setting, config_reference,
                                           config_reference_markdown, env_variable, environment_settings,
                                           known_keys, read_server_properties)
from logstore.server.security.listeners import TLS_KEYS

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "configuration.md"


def _clean_env() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if not key.startswith("LOGSTORE_")}


def run(*args, env=None):
    return CliRunner().invoke(main, list(args), env=env)


# --- the file ------------------------------------------------------------------------------------

def test_a_kafka_style_file_is_read_with_every_separator_and_escape(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("# Kafka's own names\n"
                    "listeners=SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0\n"
                    "log.dirs: /var/lib/logstore/a,\\\n          /var/lib/logstore/b\n"
                    "num.partitions 3\n"
                    "! a comment\n"
                    "super.users=User:admin;User:ops\n"
                    "ssl.keystore.type=PEM\n"
                    "log.retention.hours=\\u0031\n")
    assert read_server_properties(str(path)) == {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        "log.dirs": "/var/lib/logstore/a,/var/lib/logstore/b", "num.partitions": "3",
        "super.users": "User:admin;User:ops", "ssl.keystore.type": "PEM", "log.retention.hours": "1"}


@pytest.mark.parametrize("line, said", [
    ("log.retention.mss=1", "line 3: unknown setting 'log.retention.mss' (did you mean 'log.retention.ms'?)"),
    ("num.partitions=zero", "line 3: invalid value 'zero' for config 'num.partitions': expected an integer"),
    ("listeners=HTTP://127.0.0.1:0", "line 3: listeners: unknown security protocol 'HTTP'"),
    ("ssl.truststore.type=JKS", "line 3: ssl.truststore.type takes PEM"),
    ("ssl.client.auth=maybe", "line 3: ssl.client.auth must be one of"),
    ("log.cleaner.threads=-1", "line 3: invalid value -1 for config 'log.cleaner.threads': must be between 0 and 64"),
    ("group.max.size=0", "line 3: invalid value 0 for config 'group.max.size': must be between 1 and"),
    ("bad=\\u12", "line 3: malformed \\uxxxx escape"),
])
def test_a_bad_key_or_value_in_the_file_is_one_line_naming_the_file_and_line(tmp_path, line, said):
    path = tmp_path / "server.properties"
    path.write_text(f"# header\nnum.io.threads=2\n{line}\n")
    result = run("--dir", str(tmp_path / "data"), "serve", "--config", str(path), env=_clean_env())
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert result.output.startswith(f"Error: Invalid value for '--config': {path} {said}"), result.output
    assert not (tmp_path / "data").exists()  # refused before anything started


@pytest.mark.parametrize("kind", ["/dev/zero", "directory", "missing", "big"])
def test_a_config_that_is_not_a_small_regular_file_is_a_usage_error(tmp_path, kind):
    if kind == "/dev/zero" and not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    big = tmp_path / "big.properties"
    big.write_bytes(b"#" * ((1 << 20) + 1))
    path = {"/dev/zero": "/dev/zero", "directory": str(tmp_path), "missing": str(tmp_path / "none"),
            "big": str(big)}[kind]
    said = {"/dev/zero": "a character device, not a regular file", "directory": "a directory, not a regular file",
            "missing": "no such file", "big": "holds more than 1048576 bytes"}[kind]
    result = run("serve", "--config", path, env=_clean_env())
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert said in result.output and path in result.output


# --- the environment -----------------------------------------------------------------------------

def test_environment_variables_are_the_keys_upper_cased_with_underscores():
    assert env_variable("log.retention.ms") == "LOGSTORE_LOG_RETENTION_MS"
    assert env_variable("ssl.key.password") == "LOGSTORE_SSL_KEY_PASSWORD"  # the variable serve always read
    settings, warnings = environment_settings({
        "LOGSTORE_LOG_RETENTION_MS": "1000", "LOGSTORE_LISTENERS": "SSL://127.0.0.1:0",
        "LOGSTORE_GROUP_INITIAL_REBALANCE_DELAY_MS": "0", "PATH": "/bin", "KAFKA_LOG_RETENTION_MS": "5"})
    assert settings == {"log.retention.ms": "1000", "listeners": "SSL://127.0.0.1:0",
                        "group.initial.rebalance.delay.ms": "0"}
    assert warnings == []


def test_an_unknown_variable_that_looks_like_a_setting_is_warned_about_and_others_are_left_alone():
    settings, warnings = environment_settings({
        "LOGSTORE_LOG_RETENTION_MSS": "1", "LOGSTORE_SSL_CLIENT_AUTHH": "required",
        # not settings: the tests' and the command line's own variables
        "LOGSTORE_REQUIRE_TOOLS": "all", "LOGSTORE_KILL9_SEED": "1", "LOGSTORE_BOOTSTRAP_SERVER": "x:1",
        "LOGSTORE_COMMAND_CONFIG": "c.properties", "LOGSTORE_TEST_BROKER": "tansu"})
    assert settings == {}
    assert warnings == [
        "$LOGSTORE_LOG_RETENTION_MSS is not a setting: ignored (did you mean $LOGSTORE_LOG_RETENTION_MS?)",
        "$LOGSTORE_SSL_CLIENT_AUTHH is not a setting: ignored (did you mean $LOGSTORE_SSL_CLIENT_AUTH?)"]


def test_a_bad_value_in_the_environment_names_the_variable(tmp_path):
    with pytest.raises(InvalidConfigError, match=r"^\$LOGSTORE_NUM_PARTITIONS: invalid value 'many'"):
        environment_settings({"LOGSTORE_NUM_PARTITIONS": "many"})
    result = run("--dir", str(tmp_path), "serve", env={**_clean_env(), "LOGSTORE_NUM_PARTITIONS": "many"})
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert "$LOGSTORE_NUM_PARTITIONS: invalid value 'many' for config 'num.partitions'" in result.output


def test_logstore_dirs_is_read_as_log_dirs_after_logstore_log_dirs():
    assert environment_settings({"LOGSTORE_DIRS": "/a:/b"})[0] == {"log.dirs": "/a,/b"}
    assert environment_settings({"LOGSTORE_DIRS": "/a:/b", "LOGSTORE_LOG_DIRS": "/c"})[0] == {"log.dirs": "/c"}


# --- precedence ----------------------------------------------------------------------------------

def test_each_layer_overrides_the_ones_before_and_log_dirs_wins_over_log_dir():
    chosen = ServeSettings.merge([
        {"num.partitions": "2", "log.retention.ms": "1000", "log.segment.bytes": "2000000", "log.dir": "/file",
         "listeners": "PLAINTEXT://127.0.0.1:0", "ssl.keystore.type": "PEM"},
        {"log.retention.ms": "2000", "log.segment.bytes": "3000000", "log.dirs": "/env1,/env2"},
        {"log.segment.bytes": "4000000"},
        {"listeners": ["SASL_PLAINTEXT://127.0.0.1:0"]},
    ])
    assert chosen.dirs == ("/env1", "/env2")
    assert chosen.listeners == ("SASL_PLAINTEXT://127.0.0.1:0",)
    assert chosen.advertised_listeners is None
    assert chosen.config == {"num.partitions": "2", "log.retention.ms": "2000", "log.segment.bytes": "4000000"}
    assert ServeSettings.merge([{"log.dir": "/one", "log.dirs": "/many"}]).dirs == ("/many",)
    assert ServeSettings.merge([]).dirs == ("./logstore-data",)
    assert ServeSettings.merge([]).listeners == ("PLAINTEXT://127.0.0.1:9092",)


def _serve(args: list[str], env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen([sys.executable, "-P", "-m", "logstore.cli", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=env)
    ready, _, _ = select.select([process.stdout], [], [], 60)  # bounded: a server that never says it listens fails
    line = process.stdout.readline() if ready else ""
    if not line.startswith("logstore serve: listening on "):
        process.kill()
        _out, err = process.communicate(timeout=30)
        raise AssertionError(f"logstore serve did not start: {line!r} {err}")
    return process, line.split("listening on ", 1)[1].split()[0]


def _stop(process: subprocess.Popen) -> str:
    process.send_signal(signal.SIGTERM)
    _out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    return err


def test_a_served_store_takes_the_file_then_the_environment_then_the_command_line(tmp_path):
    """The same keys from the file, the environment and --set, through a real server: DescribeConfigs
    of the broker and of a new topic say which layer won."""
    from logstore.client.admin import BrokerAdmin
    config = tmp_path / "server.properties"
    config.write_text(f"listeners=PLAINTEXT://127.0.0.1:0\nlog.dirs={tmp_path / 'from-file'}\n"
                      "num.partitions=2\nnum.io.threads=3\n"
                      "log.retention.ms=1000\nlog.segment.bytes=2000000\n"
                      "group.max.size=7\ngroup.initial.rebalance.delay.ms=0\noffsets.topic.num.partitions=1\n")
    env = {**_clean_env(), "LOGSTORE_LOG_RETENTION_MS": "2000", "LOGSTORE_LOG_SEGMENT_BYTES": "3000000",
           "LOGSTORE_NUM_IO_THREADS": "4", "LOGSTORE_LOG_RETENTION_MSX": "1"}
    process, address = _serve(["--set", "log.segment.bytes=4000000", "--set", "group.max.size=9",
                               "serve", "--config", str(config)], env)
    try:
        with BrokerAdmin(address) as admin:
            admin.create_topic("orders", partitions=1)
            effective, _overrides = admin.topic_configs("orders")
            broker = admin.network.request_any("DescribeConfigs", {
                "resources": [{"resource_type": 4, "resource_name": "", "configuration_keys": None}],
                "include_synonyms": False})["results"][0]
        values = {entry["name"]: entry["value"] for entry in broker["configs"]}
    finally:
        err = _stop(process)
    assert effective["retention.ms"] == "2000"  # the environment over the file
    assert effective["segment.bytes"] == "4000000"  # --set over the environment
    assert values["num.partitions"] == "2"  # the file alone
    assert values["num.io.threads"] == "4"
    assert values["group.max.size"] == "9"
    assert (tmp_path / "from-file" / "orders-0").is_dir()  # log.dirs from the file
    assert "warning: $LOGSTORE_LOG_RETENTION_MSX is not a setting: ignored" in err


def test_explicit_options_override_the_file_and_the_environment(tmp_path):
    config = tmp_path / "server.properties"
    config.write_text(f"listeners=PLAINTEXT://127.0.0.1:1\nlog.dirs={tmp_path / 'from-file'}\n")
    env = {**_clean_env(), "LOGSTORE_LOG_DIRS": str(tmp_path / "from-env")}
    process, address = _serve(["--dir", str(tmp_path / "from-option"), "serve", "--config", str(config),
                               "--listen", "PLAINTEXT://127.0.0.1:0"], env)
    _stop(process)
    assert not address.endswith(":1")
    assert (tmp_path / "from-option").is_dir()
    assert not (tmp_path / "from-file").exists() and not (tmp_path / "from-env").exists()


def test_a_bad_set_is_a_usage_error_before_anything_starts(tmp_path):
    result = run("--dir", str(tmp_path / "data"), "--set", "log.retention.msx=1", "serve", env=_clean_env())
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert "Invalid value for '--set': unknown setting 'log.retention.msx'" in result.output
    assert not (tmp_path / "data").exists()


# --- the reference -------------------------------------------------------------------------------

def test_every_key_serve_reads_is_in_the_reference_once():
    rows = [row[0] for _title, section in config_reference() for row in section]
    assert len(rows) == len(set(rows))
    assert set(rows) == known_keys()
    assert set(TLS_KEY_DOCS) == set(TLS_KEYS)
    for key in (*SERVE_KEYS, *SERVER_KEYS, *GROUP_KEYS, *MANAGER_KEYS, "log.retention.hours", "log.dirs"):
        assert key in rows
    for key in rows:
        if key not in ("log.dir", "advertised.listeners"):
            check_setting(key, _example(key))  # every documented key is one serve takes


def _example(key: str) -> str:
    for title, section in config_reference():
        for name, default, _dynamic, _doc in section:
            if name == key and default:
                return default.split(" ")[0].replace("unlimited", "1")
    return {"node.id": "1", "broker.id": "1", "max.connections": "10", "authorizer.enable": "true", "super.users": "User:admin",
            "log.roll.hours": "1", "log.retention.minutes": "1", "log.retention.hours": "1"}.get(
        key, "/some/path")


def test_print_config_is_the_reference_and_loads_no_server(tmp_path):
    result = run("serve", "--print-config", env=_clean_env())
    assert result.exit_code == 0
    assert result.output == config_reference_markdown() + "\n"
    assert "| `log.retention.ms` | `604800000` | per topic: retention.ms | `LOGSTORE_LOG_RETENTION_MS` |" in result.output


def test_docs_configuration_page_holds_the_generated_tables():
    text = DOCS.read_text()
    match = re.search(r"<!-- generated: logstore serve --print-config -->\n(.*?)<!-- end generated -->", text, re.S)
    assert match, "docs/configuration.md lost its generated section"
    assert match.group(1) == config_reference_markdown() + "\n", (
        "docs/configuration.md differs from the code's tables: regenerate it with `logstore serve --print-config`")


def test_the_readme_snippet_serves_with_its_file_and_variable(tmp_path):
    """The server guide's "Configuring the server" commands, with a free port and a temporary data dir."""
    from logstore.client.admin import BrokerAdmin
    snippet = block("docs/guide/server.md", "serve-config")
    snippet = snippet.replace("127.0.0.1:9092", "127.0.0.1:0").replace("/var/lib/logstore", str(tmp_path / "data"))
    setup, serve_line = snippet.strip().rsplit("\n", 1)
    subprocess.run(["bash", "-euo", "pipefail", "-c", setup], cwd=tmp_path, check=True, timeout=30)
    variable, _command = serve_line.split(" ", 1)
    name, value = variable.split("=")
    process, address = _serve(["serve", "--config", str(tmp_path / "server.properties")],
                              {**_clean_env(), name: value})
    try:
        with BrokerAdmin(address) as admin:
            broker = admin.network.request_any("DescribeConfigs", {
                "resources": [{"resource_type": 4, "resource_name": "", "configuration_keys": ["num.partitions"]}],
                "include_synonyms": False})["results"][0]
            admin.create_topic("t")
            effective, _overrides = admin.topic_configs("t")
    finally:
        _stop(process)
    assert {entry["name"]: entry["value"] for entry in broker["configs"]}["num.partitions"] == "3"
    assert effective["retention.ms"] == str(24 * 3600 * 1000)
    assert (tmp_path / "data" / "t-0").is_dir()


def test_the_configuration_pages_file_and_variable_are_what_serve_takes(tmp_path):
    """docs/configuration.md's example: every key of its server.properties and the variable its
    command sets are settings `serve` takes, with values it accepts (as serve checks them before it
    opens anything); its listeners and paths are a network's, so nothing is started here."""
    (tmp_path / "server.properties").write_text(block("docs/configuration.md", "properties"))
    settings = read_server_properties(str(tmp_path / "server.properties"))
    assert {"listeners", "log.dirs", "super.users", "ssl.keystore.location"} <= set(settings)
    for key, value in settings.items():
        check_setting(key, value)
    command = block("docs/configuration.md", "serve-with-file").strip()
    variable, rest = command.split(" ", 1)
    assert rest == "logstore serve --config server.properties"
    name, value = variable.split("=")
    from_environment, unknown = environment_settings({name: value})
    assert from_environment == {"log.retention.ms": value} and not unknown
