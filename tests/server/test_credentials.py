"""``CredentialStore`` (``logstore.server.security.credentials``): users' SCRAM credentials kept durably in the
data dir, never a password; a hypothesis model with reopen as a step; a damaged file refused and left
alone; a failed write leaving the previous set; the iteration cap (none made above 16384, an old one
above it kept but refused at login); the file owner-only (0600) whatever the umask."""

from __future__ import annotations

import base64
import hmac
import logging
import os
import stat
import tempfile

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from logstore.errors import CorruptCheckpointError
from logstore.fs import FileSystem
from logstore.server.security.checked_json import save_document
from logstore.server.security.credentials import CREDENTIALS_FILE, CredentialStore
from logstore.server.security.scram import MECHANISMS, ScramClient, ScramCredential, ScramServer, scram_credential

USERS = ["alice", "bob", "c,a=rol"]


def _password_matches(store: CredentialStore, user: str, mechanism: str, password: str) -> bool:
    credential = store.lookup(user, mechanism)
    check = scram_credential(mechanism, password, iterations=credential.iterations, salt=credential.salt)
    return hmac.compare_digest(check.stored_key, credential.stored_key)


def test_credentials_against_a_model_with_reopens(tmp_path):
    class Model(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.dir = tempfile.mkdtemp(dir=tmp_path)  # id(self) can repeat once a machine is freed
            self.store = CredentialStore(self.dir)
            self.passwords: dict[tuple[str, str], str] = {}

        @rule(user=st.sampled_from(USERS), mechanism=st.sampled_from(sorted(MECHANISMS)),
              password=st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=8))
        def set(self, user, mechanism, password):
            self.store.set(user, mechanism, password, iterations=4096)
            self.passwords[(user, mechanism)] = password

        @rule(user=st.sampled_from(USERS), mechanism=st.sampled_from([None, *sorted(MECHANISMS)]))
        def delete(self, user, mechanism):
            keys = [key for key in self.passwords if key[0] == user and mechanism in (None, key[1])]
            if not keys:
                with pytest.raises(KeyError, match=repr(user)):
                    self.store.delete(user, mechanism)
                return
            assert self.store.delete(user, mechanism) == len(keys)
            for key in keys:
                del self.passwords[key]

        @rule()
        def reopen(self):
            self.store = CredentialStore(self.dir)

        @invariant()
        def agrees(self):
            assert [(u, m) for u, m, _ in self.store.users()] == sorted(self.passwords)
            for (user, mechanism), password in self.passwords.items():
                assert _password_matches(self.store, user, mechanism, password)

    run_state_machine_as_test(Model, settings=settings(max_examples=10, stateful_step_count=8, deadline=None))


def test_a_stored_user_authenticates_and_the_file_holds_no_password(tmp_path):
    store = CredentialStore(str(tmp_path))
    store.set("alice", "SCRAM-SHA-512", "correct horse", iterations=4096)
    reopened = CredentialStore(str(tmp_path))
    client = ScramClient("SCRAM-SHA-512", "alice", "correct horse")
    server = ScramServer("SCRAM-SHA-512", lambda user: reopened.lookup(user, "SCRAM-SHA-512"), b"secret")
    client.verify(server.final(client.final(server.first(client.first()))))
    assert server.user == "alice"
    assert b"correct horse" not in (tmp_path / CREDENTIALS_FILE).read_bytes()
    with pytest.raises(ValueError, match="control"):
        store.set("bad\nname", "SCRAM-SHA-256", "pw")


def test_a_damaged_file_is_refused_and_left_as_it_is(tmp_path):
    store = CredentialStore(str(tmp_path))
    store.set("alice", "SCRAM-SHA-256", "pw-one", iterations=4096)
    path = tmp_path / CREDENTIALS_FILE
    data = bytearray(path.read_bytes())
    at = data.index(b'"iterations": 4096') + len(b'"iterations": ')
    data[at] = ord("5")  # 5096 iterations: valid JSON, wrong checksum
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpointError, match="checksum"):
        CredentialStore(str(tmp_path))
    assert path.read_bytes() == bytes(data)
    path.write_bytes(b"{not json")
    with pytest.raises(CorruptCheckpointError, match=CREDENTIALS_FILE):
        CredentialStore(str(tmp_path))


def test_a_failed_write_leaves_the_previous_credentials(tmp_path):
    class FailingRename(FileSystem):
        fail = False

        def write_file_atomic(self, path, data, **options):
            if self.fail:
                raise OSError(28, "No space left on device")
            super().write_file_atomic(path, data, **options)

    fs = FailingRename()
    store = CredentialStore(str(tmp_path), fs)
    store.set("alice", "SCRAM-SHA-256", "first", iterations=4096)
    fs.fail = True
    with pytest.raises(OSError):
        store.set("alice", "SCRAM-SHA-256", "second", iterations=4096)
    assert _password_matches(CredentialStore(str(tmp_path)), "alice", "SCRAM-SHA-256", "first")
    assert _password_matches(store, "alice", "SCRAM-SHA-256", "first")  # nor in memory


def test_no_credential_over_the_iteration_cap_is_made(tmp_path):
    store = CredentialStore(str(tmp_path))
    with pytest.raises(ValueError, match="4096..16384, got 3000000"):
        store.set("alice", "SCRAM-SHA-256", "pw", iterations=3_000_000)
    costly = ScramCredential("SCRAM-SHA-256", b"s" * 32, 3_000_000, b"k" * 32, b"k" * 32)
    with pytest.raises(ValueError, match="got 3000000"):
        store.apply({("alice", "SCRAM-SHA-256"): costly}, [])
    assert store.users() == [] and not (tmp_path / CREDENTIALS_FILE).exists()


def test_a_credential_over_the_cap_in_an_old_file_is_kept_but_refused_at_login(tmp_path, caplog):
    """A file written before the cap: nothing is lost (the entry is listed and written back), but a
    login against it is refused like an unknown user's, and the load says so."""
    costly = scram_credential("SCRAM-SHA-256", "pw", iterations=4096)
    body = {"credentials": [{"user": "old", "mechanism": "SCRAM-SHA-256", "salt": base64.b64encode(costly.salt).decode(),
                             "iterations": 3_000_000, "stored_key": base64.b64encode(costly.stored_key).decode(),
                             "server_key": base64.b64encode(costly.server_key).decode()}]}
    save_document(FileSystem(), str(tmp_path / CREDENTIALS_FILE), 1, body)
    with caplog.at_level(logging.WARNING, logger="logstore.server.security.credentials"):
        store = CredentialStore(str(tmp_path))
    assert any("'old'" in line and "3000000 iterations" in line and "refused at login" in line
               for line in caplog.messages), caplog.messages
    assert store.lookup("old", "SCRAM-SHA-256") is None
    assert store.users() == [("old", "SCRAM-SHA-256", 3_000_000)]
    store.set("new", "SCRAM-SHA-256", "pw", iterations=4096)
    reopened = CredentialStore(str(tmp_path))
    assert reopened.users() == [("new", "SCRAM-SHA-256", 4096), ("old", "SCRAM-SHA-256", 3_000_000)]
    reopened.set("old", "SCRAM-SHA-256", "pw2", iterations=4096)  # adding the user again makes it usable
    assert _password_matches(CredentialStore(str(tmp_path)), "old", "SCRAM-SHA-256", "pw2")


@pytest.fixture
def umask():
    """Set the process's umask for the test (restored after)."""
    previous = os.umask(0o022)
    yield os.umask
    os.umask(previous)


def test_the_credentials_file_is_owner_only_whatever_the_umask(tmp_path, umask, caplog):
    path = tmp_path / CREDENTIALS_FILE
    for mask in (0o000, 0o022):
        umask(mask)
        path.unlink(missing_ok=True)
        CredentialStore(str(tmp_path)).set("alice", "SCRAM-SHA-256", "pw", iterations=4096)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, oct(mask)
    # a file made readable by others (an older version wrote 0644): warned about at load, 0600 again
    # at its next change; a leftover temp file someone may hold open is not written into
    path.chmod(0o644)
    leftover = tmp_path / (CREDENTIALS_FILE + ".tmp")
    leftover.write_bytes(b"")
    leftover.chmod(0o644)
    with open(leftover, "rb") as held, caplog.at_level(logging.WARNING, logger="logstore.server.security.checked_json"):
        store = CredentialStore(str(tmp_path))
        assert any(str(path) in line and "mode 644" in line for line in caplog.messages), caplog.messages
        store.set("bob", "SCRAM-SHA-256", "pw", iterations=4096)
        assert held.read() == b""
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
