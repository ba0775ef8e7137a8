"""``logstore users`` (add, delete, list): credentials stored salted in the store's first data dir,
passwords read from stdin or a prompt, never from the command line; errors are one line; Kafka's
bounds on the iterations; the file owner-only (0600)."""

from __future__ import annotations

import json
import os
import stat

from click.testing import CliRunner

from logstore.cli.main import main
from logstore.server.security.checked_json import body_crc
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


def test_prompted_password_and_one_line_errors(tmp_path, monkeypatch):
    from logstore.cli import users
    monkeypatch.setattr(users, "_can_prompt_hidden", lambda: True)  # CliRunner answers click's hidden prompt
    result = cli(tmp_path, "users", "add", "bob", "--mechanism", "SCRAM-SHA-256", input="pw\npw\n")
    assert result.exit_code == 0 and "Added user bob (SCRAM-SHA-256)." in result.output
    result = cli(tmp_path, "users", "delete", "nobody")
    assert result.exit_code == 1 and result.output.strip() == "Error: no SCRAM credential for user 'nobody'"
    result = cli(tmp_path, "users", "add", "carol", "--password-stdin", input="\n")
    assert result.exit_code == 2 and "empty" in result.output
    result = cli(tmp_path, "users", "add", "carol", "--iterations", "10", "--password-stdin", input="x\n")
    assert result.exit_code == 2 and "4096" in result.output
    # Kafka's cap: each PLAIN login costs the server the credential's iterations
    result = cli(tmp_path, "users", "add", "carol", "--iterations", "3000000", "--password-stdin", input="x\n")
    assert result.exit_code == 2 and "16384" in result.output and "Traceback" not in result.output
    assert cli(tmp_path, "users", "list").output.splitlines() == ["bob\tSCRAM-SHA-256\t8192"]


def test_the_credentials_file_is_owner_only_and_an_old_costly_credential_is_listed_as_refused(tmp_path):
    previous = os.umask(0o022)
    try:
        result = cli(tmp_path, "users", "add", "alice", "--password-stdin", input="s3cret\n")
    finally:
        os.umask(previous)
    assert result.exit_code == 0
    assert stat.S_IMODE((tmp_path / CREDENTIALS_FILE).stat().st_mode) == 0o600
    # a file from before the cap, with a credential of 3,000,000 iterations: listed, marked refused
    document = json.loads((tmp_path / CREDENTIALS_FILE).read_text())
    document["body"]["credentials"][0]["iterations"] = 3_000_000
    document["crc32"] = body_crc(document["body"])
    (tmp_path / CREDENTIALS_FILE).write_text(json.dumps(document))
    assert cli(tmp_path, "users", "list").output.splitlines() == [
        "alice\tSCRAM-SHA-256\t3000000\trefused at login (more than 16384 iterations): add the user again",
        "alice\tSCRAM-SHA-512\t8192"]
