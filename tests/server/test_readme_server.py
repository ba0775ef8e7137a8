"""The server guide (docs/guide/server.md): its Python snippet runs as written (in a temporary
working dir) and prints what the text says it prints; the serve command prints the line it shows."""

import contextlib
import io
import os

import pytest
from docs_snippets import REPOSITORY, block

PAGE = "docs/guide/server.md"


def server_section() -> str:
    return (REPOSITORY / PAGE).read_text()


def test_the_python_snippet_runs_and_both_sides_see_both_records(tmp_path, monkeypatch):
    snippet = block("docs/guide/server.md", "kafka-server")
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(snippet, PAGE, "exec"), {})
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
    python_snippet = block("docs/guide/server.md", "other-clients")
    shell_snippet = block("docs/guide/server.md", "kcat")
    with LogManager([str(tmp_path / "data")]) as store, KafkaServer(store, listen="127.0.0.1:0") as server:
        store.create_topic("events")
        address = server.bootstrap_servers
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(python_snippet.replace("127.0.0.1:9092", address), PAGE, "exec"), {})
        assert printed.getvalue().splitlines() == ["b'from-librdkafka'"]
        shell = subprocess.run(["bash", "-euo", "pipefail", "-c", shell_snippet.replace("127.0.0.1:9092", address)],
                               capture_output=True, text=True, timeout=60)
        assert shell.returncode == 0, shell.stderr
        assert "1 brokers:" in shell.stdout and "leader 0" in shell.stdout
        assert shell.stdout.splitlines()[-3:] == ["0 k from-librdkafka", "1 k from-aiokafka", "2 k from-kcat"]
        assert [record.value for record in store.read("events", 0, 0)] == [b"from-librdkafka", b"from-aiokafka",
                                                                           b"from-kcat"]


def test_the_transactional_clients_snippet_commits_and_aborts_against_a_server(tmp_path):
    """confluent-kafka, kafka-python and aiokafka transactional producers as the guide shows them:
    the read_committed consumer prints exactly what the guide says (never the aborted record)."""
    from logstore import LogManager
    from logstore.server import KafkaServer
    snippet = block("docs/guide/server.md", "transactions-clients")
    expected = snippet.rstrip().splitlines()[-1].removeprefix("# ")
    with LogManager([str(tmp_path / "data")]) as store, KafkaServer(store, listen="127.0.0.1:0") as server:
        store.create_topic("orders", 2)
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(snippet.replace("127.0.0.1:9092", server.bootstrap_servers), PAGE, "exec"), {})
        assert printed.getvalue().splitlines() == [expected]
        uncommitted = [record.value for partition in (0, 1) for record in store.read("orders", partition, 0)]
        assert b"never" in uncommitted  # aborted, yet in the log (read_uncommitted shows it, as Kafka's)
        assert store.get_log("orders", 0).last_stable_offset == store.get_log("orders", 0).log_end_offset


@pytest.mark.needs_tools("node", "kafkajs")
def test_the_kafkajs_transaction_snippet_commits_against_a_server(tmp_path):
    import subprocess

    from clients.kafkajs_driver import find_node, node_env

    from logstore import LogManager
    from logstore.server import KafkaServer
    snippet = block("docs/guide/server.md", "transactions-kafkajs")
    env = node_env()
    env["NODE_PATH"] = env["LOGSTORE_TEST_NODE_MODULES"]  # require("kafkajs") from a script in tmp_path
    with LogManager([str(tmp_path / "data")]) as store, KafkaServer(store, listen="127.0.0.1:0") as server:
        store.create_topic("orders", 2)
        script = tmp_path / "transaction.js"
        script.write_text(snippet.replace("127.0.0.1:9092", server.bootstrap_servers))
        done = subprocess.run([find_node(), str(script)], capture_output=True, text=True, timeout=60, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        log = store.get_log("orders", 0)
        assert [record.value for record in log.read(0, isolation="read_committed")] == [b"from-kafkajs"]
        assert log.last_stable_offset == log.log_end_offset == 2  # the record and its COMMIT marker
