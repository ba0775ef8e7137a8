"""``CredentialStore``: the SCRAM credentials of the server's users, kept in the first data dir as
``scram-credentials.json`` (``logstore users`` and AlterUserScramCredentials change it; SASL reads it).

What it owns:
- the file: JSON with a version, one entry per (user, mechanism): the salt, the iteration count,
  StoredKey and ServerKey in base64 (``scram.ScramCredential``), never a password, and a CRC-32 of
  the body. It replaces its previous copy durably (temp file, fsync, rename, directory fsync:
  ``FileSystem.write_file_atomic``), so a crash leaves the old set or the new one;
- ``set(user, mechanism, password, iterations)``, ``apply(upserts, deletions)`` (many in one
  write), ``delete(user, mechanism=None)``, ``lookup(user, mechanism)`` (what ``scram.ScramServer``
  asks), ``users()`` (names and mechanisms, no secrets);
- the iteration cap: a credential with more than ``scram.MAX_ITERATIONS`` (16384, Kafka's maximum)
  cannot be made (``set``, ``apply``: ``ValueError``), and one in a file written before the cap is
  kept (loaded, listed, written back unchanged: nothing is lost) but refused at login (``lookup``
  answers None, as for an unknown user), with a warning at load that names it: a PLAIN login
  against it would cost the server its iterations of PBKDF2. Adding the user again replaces it;
- the file is the server's secret (an offline password search needs only it): it is written
  owner-only, 0600 (``checked_json``), and one found readable by others is warned about at load;
- a damaged file (bad JSON, a checksum that does not match, an unknown version) is refused with
  ``CorruptCheckpointError`` naming it: a server must not start with nobody able to log in, or with
  credentials it cannot trust; nothing is rewritten over it (the format: ``checked_json``).

Readers never lock (each change swaps in a new dict); changes must not run at once: the server's
admin handler serialises them, the CLI has the store to itself.
"""

from __future__ import annotations

import base64
import logging
import os

from ...fs import FileSystem
from .checked_json import load_document, save_document
from .scram import DEFAULT_ITERATIONS, MAX_ITERATIONS, MECHANISMS, ScramCredential, check_iterations, scram_credential

logger = logging.getLogger(__name__)
CREDENTIALS_FILE = "scram-credentials.json"
VERSION = 1


def _credentials(body: dict) -> dict[tuple[str, str], ScramCredential]:
    """The credentials of a document's body; ValueError/KeyError/TypeError when it holds none."""
    loaded = {}
    for entry in body["credentials"]:
        credential = ScramCredential(entry["mechanism"], base64.b64decode(entry["salt"], validate=True),
                                     int(entry["iterations"]), base64.b64decode(entry["stored_key"], validate=True),
                                     base64.b64decode(entry["server_key"], validate=True))
        if credential.mechanism not in MECHANISMS:
            raise ValueError(f"unknown mechanism {credential.mechanism!r}")
        loaded[(entry["user"], credential.mechanism)] = credential
    return loaded


def _check_user(user) -> None:
    if not isinstance(user, str) or not user or any(ord(char) < 0x20 for char in user):
        raise ValueError(f"a user name is a non-empty str without control characters, got {user!r}")


class CredentialStore:
    """The users' SCRAM credentials in ``dir_path`` (see the module docstring)."""

    def __init__(self, dir_path: str, fs: FileSystem | None = None) -> None:
        self._fs = fs or FileSystem()
        self.path = os.path.join(dir_path, CREDENTIALS_FILE)
        self._credentials: dict[tuple[str, str], ScramCredential] = self._load()

    def _load(self) -> dict[tuple[str, str], ScramCredential]:
        loaded = load_document(self._fs, self.path, VERSION, _credentials, "SCRAM credentials file",
                               "fix or remove it (then add the users again)")
        loaded = {} if loaded is None else loaded
        for (user, mechanism), credential in sorted(loaded.items()):
            if credential.iterations > MAX_ITERATIONS:
                logger.warning("%s: the %s credential of user %r has %d iterations, more than %d: it is kept but "
                               "refused at login; add the user again (logstore users add) to give it a usable one",
                               self.path, mechanism, user, credential.iterations, MAX_ITERATIONS)
        return loaded

    def _save(self, credentials: dict[tuple[str, str], ScramCredential]) -> None:
        """Write ``credentials`` durably, then make them this store's (a failed write changes nothing)."""
        body = {"credentials": [
            {"user": user, "mechanism": mechanism, "salt": base64.b64encode(c.salt).decode(),
             "iterations": c.iterations, "stored_key": base64.b64encode(c.stored_key).decode(),
             "server_key": base64.b64encode(c.server_key).decode()}
            for (user, mechanism), c in sorted(credentials.items())]}
        save_document(self._fs, self.path, VERSION, body)
        self._credentials = credentials

    def set(self, user: str, mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS) -> None:
        """Give ``user`` a new credential for ``mechanism`` (a new salt), durably."""
        _check_user(user)
        self._save({**self._credentials, (user, mechanism): scram_credential(mechanism, password, iterations=iterations)})

    def apply(self, upserts: dict[tuple[str, str], ScramCredential], deletions: list[tuple[str, str]]) -> None:
        """Set and remove many (user, mechanism) credentials in one durable write
        (AlterUserScramCredentials); the caller has checked that each deletion exists."""
        for (user, _mechanism), credential in upserts.items():
            _check_user(user)
            check_iterations(credential.iterations)
        credentials = {key: value for key, value in self._credentials.items() if key not in set(deletions)}
        credentials.update(upserts)
        self._save(credentials)

    def delete(self, user: str, mechanism: str | None = None) -> int:
        """Remove ``user``'s credential for ``mechanism`` (every one when None); how many went.
        ``KeyError`` naming the user when it had none."""
        keys = [key for key in self._credentials if key[0] == user and (mechanism is None or key[1] == mechanism)]
        if not keys:
            raise KeyError(f"no SCRAM credential for user {user!r}" + (f" and {mechanism}" if mechanism else ""))
        self._save({key: value for key, value in self._credentials.items() if key not in keys})
        return len(keys)

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        """``user``'s credential for ``mechanism``, or None (also for one over the iteration cap)."""
        credential = self._credentials.get((user, mechanism))
        return None if credential is None or credential.iterations > MAX_ITERATIONS else credential

    def users(self) -> list[tuple[str, str, int]]:
        """``(user, mechanism, iterations)`` of every credential, sorted: no secrets."""
        return [(user, mechanism, c.iterations) for (user, mechanism), c in sorted(self._credentials.items())]
