"""``logstore users`` (add, delete, list): credentials stored salted in the store's first data dir,
passwords read from stdin or a prompt, never from the command line; errors are one line."""

from __future__ import annotations

from click.testing import CliRunner

from logstore.cli.main import main
from logstore.server.security.credentials import CREDENTIALS_FILE, CredentialStore
from logstore.server.security.scram import ScramClient, ScramServer


def cli(store_dir, *args, input=None):
    return CliRunner().invoke(main, ["--dir", str(store_dir), *args], input=input)


def test_add_list_authenticate_and_delete(tmp_path):
    result = cli(tmp_path, "users", "add", "alice", "--password-stdin", "--iterations", "4096", input="s3cret\n")
    assert result.exit_code == 0 and "Added user alice (SCRAM-SHA-256, SCRAM-SHA-512)." in result.output
    assert cli(tmp_path, "users", "list").output.splitlines() == ["alice\tSCRAM-SHA-256\t4096",
                                                                 "alice\tSCRAM-SHA-512\t4096"]
    assert b"s3cret" not in (tmp_path / CREDENTIALS_FILE).read_bytes()
    credentials = CredentialStore(str(tmp_path))
    client = ScramClient("SCRAM-SHA-256", "alice", "s3cret")
    server = ScramServer("SCRAM-SHA-256", lambda user: credentials.lookup(user, "SCRAM-SHA-256"), b"k")
    client.verify(server.final(client.final(server.first(client.first()))))
    result = cli(tmp_path, "users", "delete", "alice", "--mechanism", "SCRAM-SHA-512")
    assert result.exit_code == 0 and "Deleted 1 credential of user alice." in result.output
    assert cli(tmp_path, "users", "list").output.splitlines() == ["alice\tSCRAM-SHA-256\t4096"]


def test_prompted_password_and_one_line_errors(tmp_path):
    result = cli(tmp_path, "users", "add", "bob", "--mechanism", "SCRAM-SHA-256", input="pw\npw\n")
    assert result.exit_code == 0 and "Added user bob (SCRAM-SHA-256)." in result.output
    result = cli(tmp_path, "users", "delete", "nobody")
    assert result.exit_code == 1 and result.output.strip() == "Error: no SCRAM credential for user 'nobody'"
    result = cli(tmp_path, "users", "add", "carol", "--password-stdin", input="\n")
    assert result.exit_code == 2 and "empty" in result.output
    result = cli(tmp_path, "users", "add", "carol", "--iterations", "10", "--password-stdin", input="x\n")
    assert result.exit_code == 2 and "4096" in result.output
    assert cli(tmp_path, "users", "list").output.splitlines() == ["bob\tSCRAM-SHA-256\t8192"]
