"""SCRAM (RFC 5802, with RFC 7677's SHA-256 and Kafka's SHA-512) and PLAIN (RFC 4616): the SASL
mechanisms the server will authenticate Kafka clients with.

What it owns:
- ``ScramCredential``: what the store keeps of a user's password per mechanism: a random salt, the
  iteration count, ``StoredKey`` and ``ServerKey``. Never the password, and nothing from which the
  password can be computed without a search (``scram_credential`` derives it: PBKDF2-HMAC, then the
  two keys), with Kafka's bounds on the iterations (``MIN_ITERATIONS``..``MAX_ITERATIONS``, 4096 to
  16384, ``check_iterations``), which bound what a PLAIN login costs the server;
- ``ScramServer``: the server's side of one exchange: ``first(client_first)`` gives the
  server-first message (its nonce, the salt, the iterations), ``final(client_final)`` checks the
  client's proof and gives the server-final message (the server's signature, so the client knows
  the server holds the credential). An unknown user is answered like a known one, with a salt and
  iteration count derived from the user name and a server secret, and fails at the proof like a
  wrong password: a scanner learns nothing about which users exist;
- ``ScramClient``: the client's side, for our own client and for tests;
- ``verify_plain``: a PLAIN ``authzid NUL authcid NUL password`` message checked against the user's
  SCRAM credential (the password is run through the credential's salt and iterations), so PLAIN
  needs no stored password either.

Failures raise ``AuthenticationError`` with one message for every reason a client could use to tell
users apart ("invalid credentials"); malformed messages say what is malformed. Comparisons of
secrets are constant-time (``hmac.compare_digest``). Standard library only (hashlib, hmac,
secrets).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Callable

from ...errors import RequestError

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MECHANISM_CODES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
"""Kafka's codes of the SCRAM mechanisms in the credential admin APIs (50, 51)."""
MECHANISMS_BY_CODE = {code: name for name, code in MECHANISM_CODES.items()}
MIN_ITERATIONS = 4096  # Kafka's minimum for SCRAM credentials
MAX_ITERATIONS = 16384  # Kafka's maximum: each PLAIN login costs the server this many HMACs
DEFAULT_ITERATIONS = 8192
_GS2_HEADER = "n,,"  # no channel binding, no authzid: what Kafka's clients send
_CHANNEL_BINDING = base64.b64encode(_GS2_HEADER.encode()).decode()  # "biws"
_INVALID = "authentication failed: invalid credentials"


class AuthenticationError(RequestError):
    """A SASL exchange that failed: bad credentials, or a message that breaks the mechanism."""


@dataclass(frozen=True)
class ScramCredential:
    """A user's SCRAM credential for one mechanism (RFC 5802 §3): never the password."""

    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


def _digest(mechanism: str) -> str:
    digest = MECHANISMS.get(mechanism)
    if digest is None:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r} (known: {', '.join(MECHANISMS)})")
    return digest


def _hmac(digest: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, digest).digest()


def _salted_password(digest: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(digest, _saslprep(password).encode(), salt, iterations)


def check_iterations(iterations) -> int:
    """``iterations`` if it is an int in ``MIN_ITERATIONS..MAX_ITERATIONS`` (Kafka's bounds), else
    ``ValueError`` naming it."""
    if type(iterations) is not int or not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be an int in {MIN_ITERATIONS}..{MAX_ITERATIONS}, got {iterations!r}")
    return iterations


def _saslprep(text: str) -> str:
    # Kafka's clients send passwords as they are (no SASLprep); so do we, refusing what SASLprep
    # would change for ASCII: control characters
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in text):
        raise ValueError("a password or user name with control characters is refused")
    return text


def scram_credential(mechanism: str, password: str, *, iterations: int = DEFAULT_ITERATIONS,
                     salt: bytes | None = None) -> ScramCredential:
    """The credential of ``password`` for ``mechanism`` (a random 32-byte salt unless given)."""
    digest = _digest(mechanism)
    if not isinstance(password, str) or not password:
        raise ValueError("a password is a non-empty str")
    check_iterations(iterations)
    salt = secrets.token_bytes(32) if salt is None else salt
    salted = _salted_password(digest, password, salt, iterations)
    client_key = _hmac(digest, salted, b"Client Key")
    return ScramCredential(mechanism, salt, iterations, hashlib.new(digest, client_key).digest(),
                           _hmac(digest, salted, b"Server Key"))


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """SCRAM's SaltedPassword (PBKDF2-HMAC of ``password``): what a client sends in
    AlterUserScramCredentials, so the password never leaves it."""
    check_iterations(iterations)
    return _salted_password(_digest(mechanism), password, salt, iterations)


def credential_from_salted(mechanism: str, salt: bytes, iterations: int, salted_password: bytes) -> ScramCredential:
    """The credential of a password a client already salted and iterated (AlterUserScramCredentials
    sends ``SaltedPassword``, never the password): StoredKey and ServerKey derived from it."""
    digest = _digest(mechanism)
    check_iterations(iterations)
    if not salt or not salted_password:
        raise ValueError("the salt and the salted password must not be empty")
    client_key = _hmac(digest, salted_password, b"Client Key")
    return ScramCredential(mechanism, bytes(salt), iterations, hashlib.new(digest, client_key).digest(),
                           _hmac(digest, salted_password, b"Server Key"))


def _escape(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _unescape(name: str) -> str:
    if "=" in name.replace("=3D", "").replace("=2C", ""):
        raise AuthenticationError("malformed SCRAM message: a user name with a bad '=' escape")
    return name.replace("=2C", ",").replace("=3D", "=")


def _attributes(message: str, what: str) -> list[tuple[str, str]]:
    pairs = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise AuthenticationError(f"malformed SCRAM {what}: {part!r} is not an attribute")
        pairs.append((part[0], part[2:]))
    return pairs


def _text(message: bytes, what: str) -> str:
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        raise AuthenticationError(f"malformed SCRAM {what}: not UTF-8") from None


def _b64decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise AuthenticationError(f"malformed SCRAM message: {what} is not base64") from None


class ScramServer:
    """The server's side of one SCRAM exchange. ``lookup(user)`` gives the user's credential for
    this mechanism, or None; ``secret`` (bytes kept by the server) makes the fake salt of an
    unknown user stable, so asking twice does not reveal that it is fake."""

    def __init__(self, mechanism: str, lookup: Callable[[str], ScramCredential | None], secret: bytes, *,
                 nonce: Callable[[], str] = lambda: secrets.token_urlsafe(24)) -> None:
        self.mechanism = mechanism
        self._digest = _digest(mechanism)
        self._lookup = lookup
        self._secret = secret
        self._nonce = nonce
        self._credential: ScramCredential | None = None
        self._known = False
        self._client_first_bare = ""
        self._server_first = ""
        self._combined_nonce = ""
        self.user: str | None = None  # set once the exchange succeeded
        self.requested_user: str | None = None  # the name the client gave (logged on failure; no proof yet)
        self._state = "first"

    def first(self, client_first: bytes) -> bytes:
        """The server-first message for the client-first message ``client_first``."""
        if self._state != "first":
            raise AuthenticationError("SCRAM: a client-first message out of turn")
        self._state = "final"
        text = _text(client_first, "client-first message")
        if not text.startswith(_GS2_HEADER):
            # "y,," or "p=...": channel binding, which Kafka does not do; an authzid: refused too
            raise AuthenticationError("SCRAM: only the 'n,,' GS2 header (no channel binding, no authzid) is supported")
        self._client_first_bare = bare = text[len(_GS2_HEADER):]
        # n=USER,r=NONCE, then Kafka's extensions (key=value, e.g. tokenauth=true), which may have
        # longer keys than SCRAM's one-letter attributes
        attributes = _attributes(",".join(bare.split(",")[:2]), "client-first message")
        if len(attributes) < 2 or attributes[0][0] != "n" or attributes[1][0] != "r" or not attributes[1][1]:
            raise AuthenticationError("malformed SCRAM client-first message: it must start with n=USER,r=NONCE "
                                      "(mandatory extensions are not supported)")
        if any(part.startswith("tokenauth=true") for part in bare.split(",")[2:]):
            raise AuthenticationError("SCRAM: delegation tokens are not supported")
        user = _unescape(attributes[0][1])
        credential = self._lookup(user)
        self._known = credential is not None and credential.mechanism == self.mechanism
        if self._known:
            self._credential = credential
        else:
            # A fake credential, the same for the same name on every try: the exchange goes on and
            # fails at the proof, as a wrong password does
            seed = _hmac(self._digest, self._secret, user.encode())
            self._credential = ScramCredential(self.mechanism, seed[:32], DEFAULT_ITERATIONS,
                                               _hmac(self._digest, seed, b"stored"), _hmac(self._digest, seed, b"server"))
        self._user = self.requested_user = user
        self._combined_nonce = attributes[1][1] + self._nonce()
        self._server_first = (f"r={self._combined_nonce},s={base64.b64encode(self._credential.salt).decode()},"
                              f"i={self._credential.iterations}")
        return self._server_first.encode()

    def final(self, client_final: bytes) -> bytes:
        """The server-final message for ``client_final``; ``AuthenticationError`` for a wrong proof."""
        if self._state != "final":
            raise AuthenticationError("SCRAM: a client-final message out of turn")
        self._state = "done"
        text = _text(client_final, "client-final message")
        attributes = _attributes(text, "client-final message")
        if len(attributes) < 3 or attributes[0][0] != "c" or attributes[1][0] != "r" or attributes[-1][0] != "p":
            raise AuthenticationError("malformed SCRAM client-final message: it must be c=...,r=...,p=...")
        if attributes[0][1] != _CHANNEL_BINDING:
            raise AuthenticationError("SCRAM: the channel binding does not match the GS2 header")
        # Kafka accepts a nonce that ENDS with the exchange's: librdkafka before 2.6.1 sends its own
        # nonce again in front of it. The proof covers the message as sent, so nothing is weakened.
        nonce = attributes[1][1]
        if len(nonce) < len(self._combined_nonce) or not hmac.compare_digest(nonce[len(nonce) - len(self._combined_nonce):],
                                                                             self._combined_nonce):
            raise AuthenticationError("SCRAM: the nonce does not match the exchange's")
        proof = _b64decode(attributes[-1][1], "the proof")
        without_proof = text[: text.rindex(",p=")]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        credential = self._credential
        signature = _hmac(self._digest, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise AuthenticationError(_INVALID)
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not (hmac.compare_digest(hashlib.new(self._digest, client_key).digest(), credential.stored_key)
                and self._known):
            raise AuthenticationError(_INVALID)
        self.user = self._user
        server_signature = _hmac(self._digest, credential.server_key, auth_message)
        return f"v={base64.b64encode(server_signature).decode()}".encode()


class ScramClient:
    """The client's side of one SCRAM exchange (``first``, ``final``, ``verify``)."""

    def __init__(self, mechanism: str, user: str, password: str, *,
                 nonce: Callable[[], str] = lambda: secrets.token_urlsafe(24)) -> None:
        self._digest = _digest(mechanism)
        self._user, self._password = user, password
        self._nonce = nonce()
        self._client_first_bare = ""
        self._auth_message = b""
        self._salted = b""

    def first(self) -> bytes:
        self._client_first_bare = f"n={_escape(_saslprep(self._user))},r={self._nonce}"
        return (_GS2_HEADER + self._client_first_bare).encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode("utf-8")
        attributes = dict(_attributes(text, "server-first message"))
        nonce, salt, iterations = attributes.get("r", ""), attributes.get("s", ""), attributes.get("i", "")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce) or not iterations.isdigit():
            raise AuthenticationError("SCRAM: the server's first message is not a valid answer")
        if not MIN_ITERATIONS <= int(iterations) <= MAX_ITERATIONS:
            raise AuthenticationError(f"SCRAM: the server asks for {iterations} iterations, not in "
                                      f"{MIN_ITERATIONS}..{MAX_ITERATIONS}")
        self._salted = _salted_password(self._digest, self._password, _b64decode(salt, "the salt"), int(iterations))
        without_proof = f"c={_CHANNEL_BINDING},r={nonce}"
        self._auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
        client_key = _hmac(self._digest, self._salted, b"Client Key")
        signature = _hmac(self._digest, hashlib.new(self._digest, client_key).digest(), self._auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        """Check the server's signature: it holds the user's credential (not an impostor)."""
        text = server_final.decode("utf-8")
        if text.startswith("e="):
            raise AuthenticationError(f"SCRAM: the server refused: {text[2:]}")
        expected = _hmac(self._digest, _hmac(self._digest, self._salted, b"Server Key"), self._auth_message)
        if not text.startswith("v=") or not hmac.compare_digest(_b64decode(text[2:], "the signature"), expected):
            raise AuthenticationError("SCRAM: the server's signature is wrong: it does not hold this credential")


def verify_plain(message: bytes, lookup: Callable[[str], ScramCredential | None]) -> str:
    """The user a PLAIN message authenticates, checked against the user's SCRAM credential;
    ``AuthenticationError`` otherwise (the same message for an unknown user and a wrong password)."""
    parts = message.split(b"\0")
    if len(parts) != 3:
        raise AuthenticationError("malformed PLAIN message: it must be authzid NUL user NUL password")
    try:
        authzid, user, password = (part.decode("utf-8") for part in parts)
    except UnicodeDecodeError:
        raise AuthenticationError("malformed PLAIN message: not UTF-8") from None
    if not user or not password:
        raise AuthenticationError("malformed PLAIN message: an empty user or password")
    if authzid and authzid != user:
        raise AuthenticationError("PLAIN: acting for another user (authzid) is not supported")
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in password):
        raise AuthenticationError("malformed PLAIN message: a password with control characters")
    credential = lookup(user)
    if credential is None:
        # The same work as for a known user, so that timing does not tell which users exist
        scram_credential("SCRAM-SHA-256", password, salt=b"\0" * 32)
        raise AuthenticationError(_INVALID)
    check = scram_credential(credential.mechanism, password, iterations=credential.iterations, salt=credential.salt)
    if not hmac.compare_digest(check.stored_key, credential.stored_key):
        raise AuthenticationError(_INVALID)
    return user
