"""The security guide (docs/guide/security.md) runs as written: its shell steps (a CA made with
openssl, users, ACLs, `logstore serve` with a SASL_SSL and a PLAINTEXT listener), then each client's
snippet (kafka-python, aiokafka and confluent-kafka in Python, kcat, the CLI with --command-config)
against that server, with the server's real ports for 9093 and 9092; and every security setting of
the server is documented there."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import subprocess
import sys

import pytest
from docs_snippets import REPOSITORY, block

PAGE = "docs/guide/security.md"
pytestmark = pytest.mark.kafka_clients


def _logstore() -> str:
    found = shutil.which("logstore", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    assert found, "the logstore command is not installed beside this interpreter"
    return found


@pytest.mark.needs_tools("openssl", "kcat")
def test_the_worked_setup_and_every_clients_snippet_run(tmp_path):
    shell = [block("docs/guide/security.md", "setup"), block("docs/guide/security.md", "kcat"),
             block("docs/guide/security.md", "command-config")]
    python = [block("docs/guide/security.md", "clients")]
    setup, serve_line = shell[0].split("# 4. Serve")
    env = dict(os.environ, PATH=os.path.dirname(_logstore()) + os.pathsep + os.environ.get("PATH", ""))
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", setup], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "app-secret" not in (tmp_path / "data" / "scram-credentials.json").read_text()
    command = serve_line.split("\n", 1)[1].replace("0.0.0.0:9093", "127.0.0.1:0").replace("127.0.0.1:9092",
                                                                                        "127.0.0.1:0")
    server = subprocess.Popen(["bash", "-euo", "pipefail", "-c", "exec " + command.strip()], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first, second = server.stdout.readline(), server.stdout.readline()
        assert first.startswith("logstore serve: listening on SASL_SSL://127.0.0.1:"), (first, server.stderr.read()
                                                                                        if server.poll() else "")
        secure = re.search(r"SASL_SSL://127\.0\.0\.1:(\d+)", first).group(1)
        plain = re.search(r"listening on 127\.0\.0\.1:(\d+)", second).group(1)

        def ported(text: str) -> str:
            return text.replace("127.0.0.1:9093", f"127.0.0.1:{secure}").replace("127.0.0.1:9092",
                                                                              f"127.0.0.1:{plain}")
        printed = io.StringIO()
        cwd = os.getcwd()
        os.chdir(tmp_path)
        try:
            with contextlib.redirect_stdout(printed):
                exec(compile(ported(python[0]), PAGE, "exec"), {})
        finally:
            os.chdir(cwd)
        assert printed.getvalue().splitlines() == ["[b'order 1', b'order 2']"]
        kcat = subprocess.run(["bash", "-euo", "pipefail", "-c", ported(shell[1])], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60)
        assert kcat.returncode == 0, kcat.stderr
        assert sorted(kcat.stdout.split()) == ["order", "order", "1", "2"] or \
            sorted(kcat.stdout.splitlines()) == ["order 1", "order 2"]
        cli = subprocess.run(["bash", "-euo", "pipefail", "-c", ported(shell[2])], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=60)
        assert cli.returncode == 0, cli.stderr
        lines = cli.stdout.splitlines()
        assert "Topic\tPrefixed\torders\tUser:app\t*\tWrite\tAllow" in lines
        assert lines[-1] == "orders"
        # the loopback PLAINTEXT listener: ANONYMOUS has no ACL, so it sees no topic
        anonymous = subprocess.run([_logstore(), "--bootstrap-server", f"127.0.0.1:{plain}", "topics", "list"],
                                   capture_output=True, text=True, timeout=60, env=env)
        assert "orders" not in anonymous.stdout
    finally:
        server.terminate()
        server.wait(30)
        server.stdout.close()
        server.stderr.close()
    assert server.returncode == 0


def test_every_security_setting_is_documented():
    from logstore.server.security.listeners import TLS_KEYS
    from logstore.server.server_config import SERVER_KEYS
    section = "".join((REPOSITORY / page).read_text() for page in ("docs/guide/server.md", "docs/guide/security.md"))
    for key in [*SERVER_KEYS, *TLS_KEYS]:
        if key not in ("ssl.key.location",):  # ours, shown as --ssl-key
            assert f"`{key}`" in section or key.startswith("ssl."), key
    for option in ("--ssl-cert", "--ssl-key", "--ssl-ca", "--ssl-client-auth", "--super-user",
                   "--allow-plaintext-remote", "--command-config"):
        assert f"`{option}" in section, option
