"""``logstore --command-config FILE`` reads only a regular file of at most 1 MiB: /dev/zero, a FIFO,
a directory or a missing path is a one-line usage error (exit 2) given at once, without reading
(the CLI once grew to gigabytes on /dev/zero, and waited forever on a FIFO for a writer); a file too
big, or naming a device as a certificate, is a one-line usage error (exit 2) too. ``users add --password-stdin``
reads one bounded line: /dev/zero on stdin is refused at once, not read into memory."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest
from click.testing import CliRunner

from logstore.cli.main import main
from logstore import properties
from logstore.client import security
from logstore.client.security import CLIENT_PROPERTIES_MAX_BYTES, NotARegularFileError, read_regular_file

_MEMORY_LIMIT = 1 << 30  # the child's address space: a CLI reading /dev/zero must not take the machine's memory


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (_MEMORY_LIMIT, _MEMORY_LIMIT))


def _cli(*args, env=None) -> subprocess.CompletedProcess:
    # An unreachable broker: the properties file is refused before any connection.
    return subprocess.run([sys.executable, "-P", "-m", "logstore.cli", "--bootstrap-server", "127.0.0.1:1", *args,
                           "topics", "list"], capture_output=True, text=True, timeout=60, env=env,
                          preexec_fn=_limit_memory)


@pytest.fixture
def fifo(tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this platform")
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return str(path)


@pytest.mark.parametrize("kind", ["/dev/zero", "fifo", "directory", "missing"])
def test_a_command_config_that_is_not_a_regular_file_is_a_usage_error_given_at_once(kind, tmp_path, fifo):
    if kind == "/dev/zero" and not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    path = {"/dev/zero": "/dev/zero", "fifo": fifo, "directory": str(tmp_path), "missing": str(tmp_path / "none")}[kind]
    said = {"/dev/zero": "a character device, not a regular file", "fifo": "a FIFO, not a regular file",
            "directory": "a directory, not a regular file", "missing": "no such file"}[kind]
    for result in (_cli("--command-config", path),
                   _cli(env={**os.environ, "LOGSTORE_COMMAND_CONFIG": path})):
        assert result.returncode == 2, result
        assert result.stdout == "" and len(result.stderr.splitlines()) == 1, result.stderr
        assert result.stderr.startswith("Error: ") and said in result.stderr and path in result.stderr


def test_a_command_config_too_big_or_naming_a_device_is_a_one_line_usage_error(tmp_path):
    big = tmp_path / "big.properties"
    big.write_bytes(b"# " + b"x" * CLIENT_PROPERTIES_MAX_BYTES + b"\n")
    result = CliRunner().invoke(main, ["--bootstrap-server", "127.0.0.1:1", "--command-config", str(big),
                                       "topics", "list"])
    assert result.exit_code == 2 and len(result.output.splitlines()) == 1, result.output
    assert f"more than {CLIENT_PROPERTIES_MAX_BYTES} bytes" in result.output
    if os.path.exists("/dev/zero"):
        device = tmp_path / "device.properties"
        device.write_text("security.protocol=SSL\nssl.ca.location=/dev/zero\n")
        result = CliRunner().invoke(main, ["--bootstrap-server", "127.0.0.1:1", "--command-config", str(device),
                                           "topics", "list"])
        assert result.exit_code == 2 and len(result.output.splitlines()) == 1, result.output
        assert "ssl.ca.location '/dev/zero': a character device, not a regular file" in result.output


def test_a_fifo_put_in_place_after_the_check_does_not_block_the_read(fifo, monkeypatch):
    """The type is checked with os.stat before the open, and again on the descriptor, opened with
    O_NONBLOCK: a FIFO swapped in between (here: the first check skipped) is refused, not waited on."""
    monkeypatch.setattr(properties, "regular_file_problem", lambda path: None)
    with pytest.raises(NotARegularFileError, match="a FIFO, not a regular file"):
        read_regular_file(fifo, 100, "the test's file")


def test_a_regular_properties_file_is_read_up_to_the_limit(tmp_path):
    path = tmp_path / "client.properties"
    text = "# comment\r\nsecurity.protocol = PLAINTEXT\n"
    path.write_text(text + "#" * (CLIENT_PROPERTIES_MAX_BYTES - len(text)))
    assert os.path.getsize(path) == CLIENT_PROPERTIES_MAX_BYTES
    assert security.read_client_properties(str(path)) == {"security.protocol": "PLAINTEXT"}


def test_a_password_on_stdin_is_one_bounded_line(tmp_path):
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    with open("/dev/zero", "rb") as zeros:
        result = subprocess.run([sys.executable, "-P", "-m", "logstore.cli", "--dir", str(tmp_path / "data"), "users",
                                 "add", "bob", "--password-stdin"], stdin=zeros, capture_output=True, text=True,
                                timeout=60, preexec_fn=_limit_memory)
    assert result.returncode == 1 and len(result.stderr.splitlines()) == 1, result.stderr
    assert f"longer than {security.PASSWORD_MAX_CHARS} characters" in result.stderr
    result = CliRunner().invoke(main, ["--dir", str(tmp_path / "data"), "users", "add", "bob", "--password-stdin"],
                                input="x" * security.PASSWORD_MAX_CHARS + "\r\n")
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("text, expected", [
    ('org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="alice-secret";',
     ("org.apache.kafka.common.security.plain.PlainLoginModule", {"username": "alice", "password": "alice-secret"})),
    # JAAS as Java's StreamTokenizer reads it: escapes in quotes, bare words, comments, any flag
    ('org.apache.kafka.common.security.scram.ScramLoginModule optional /* a comment */ username=bob\n'
     '  // another\n  password = "p\\"w\\\\d\\101" ;',
     ("org.apache.kafka.common.security.scram.ScramLoginModule", {"username": "bob", "password": 'p"w\\dA'})),
])
def test_jaas_config_is_read_as_kafka_reads_it(text, expected):
    assert security.parse_jaas_config(text) == expected


@pytest.mark.parametrize("text, said", [
    ('org.apache.kafka.common.security.plain.PlainLoginModule maybe username="a" password="secret";',
     "flag must be one of required"),
    ('org.apache.kafka.common.security.plain.PlainLoginModule required username="a" password="secret;',
     "unclosed quote"),
    ('org.apache.kafka.common.security.plain.PlainLoginModule required username="a" tokenauth="secret";',
     "option 'tokenauth' is not read here"),
    ('org.apache.kafka.common.security.plain.PlainLoginModule required username="a" password "secret";',
     "name=value pairs"),
])
def test_a_bad_jaas_config_is_refused_without_its_values(text, said):
    with pytest.raises(ValueError, match=said) as caught:
        security.parse_jaas_config(text)
    assert "secret" not in str(caught.value)
