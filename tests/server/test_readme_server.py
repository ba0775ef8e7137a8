"""The README's Kafka protocol server section: its Python snippet runs as written (in a temporary
working dir) and prints what the text says it prints; the serve command prints the line it shows."""

import contextlib
import io
import os
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def server_section() -> str:
    text = README.read_text()
    start = text.index("## Kafka protocol server")
    return text[start:text.index("\n## ", start + 1)]


def test_the_python_snippet_runs_and_both_sides_see_both_records(tmp_path, monkeypatch):
    snippet = re.findall(r"```python\n(.*?)```", server_section(), re.S)[0]
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(snippet, "README.md", "exec"), {})
    lines = printed.getvalue().splitlines()
    assert lines[0] == "[(0, b'from-python', b'1'), (1, b'from-kafka', b'2')]"
    assert "key=b'from-kafka', value=b'2', headers=(('source', b'wire'),)" in lines[1]
    assert os.path.exists(tmp_path / "data" / "meta.properties")


def test_the_documented_settings_are_the_servers():
    from logstore.server.server_config import SERVER_KEYS
    section = server_section()
    for key in SERVER_KEYS:
        assert f"`{key}`" in section, key


@pytest.mark.needs_tools("kcat")
def test_the_other_clients_snippets_run_against_a_server(tmp_path):
    """The confluent-kafka, aiokafka and kcat snippets, with the server's address for 127.0.0.1:9092."""
    import subprocess

    from logstore import LogManager
    from logstore.server import KafkaServer
    python_snippet = re.findall(r"```python\n(.*?)```", server_section(), re.S)[1]
    shell_snippet = re.findall(r"```sh\n(.*?)```", server_section(), re.S)[1]
    with LogManager([str(tmp_path / "data")]) as store, KafkaServer(store, listen="127.0.0.1:0") as server:
        store.create_topic("events")
        address = server.bootstrap_servers
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(python_snippet.replace("127.0.0.1:9092", address), "README.md", "exec"), {})
        assert printed.getvalue().splitlines() == ["b'from-librdkafka'"]
        shell = subprocess.run(["bash", "-euo", "pipefail", "-c", shell_snippet.replace("127.0.0.1:9092", address)],
                               capture_output=True, text=True, timeout=60)
        assert shell.returncode == 0, shell.stderr
        assert "1 brokers:" in shell.stdout and "leader 0" in shell.stdout
        assert shell.stdout.splitlines()[-3:] == ["0 k from-librdkafka", "1 k from-aiokafka", "2 k from-kcat"]
        assert [record.value for record in store.read("events", 0, 0)] == [b"from-librdkafka", b"from-aiokafka",
                                                                           b"from-kcat"]
