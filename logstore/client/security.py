"""The client's side of TLS and SASL: how a ``BrokerConnection`` reaches a broker whose listener is
``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL`` (our own server, or any Kafka broker).

What it owns:
- ``SECURITY_DEFAULTS``: the settings, by librdkafka's names, which confluent-kafka users already
  type: ``security.protocol``, ``ssl.ca.location``, ``ssl.certificate.location``,
  ``ssl.key.location``, ``ssl.key.password``, ``ssl.endpoint.identification.algorithm`` (``https``:
  the broker's certificate must name the host connected to; ``none``), ``sasl.mechanism`` (also
  spelled ``sasl.mechanisms``), ``sasl.username``, ``sasl.password``;
- ``ClientSecurity``: those settings checked (a missing file, an unknown mechanism, SASL without a
  user: ``ValueError`` naming the setting, never the password), with the ``SSLContext`` made once;
- ``read_client_properties``: the properties file of ``logstore --command-config`` (Kafka tools'
  option for the same thing), read only when it is a regular file of at most
  ``CLIENT_PROPERTIES_MAX_BYTES`` (``read_regular_file``): a device such as /dev/zero would be read
  without end, a FIFO would wait for a writer; the certificate and key files it names must be regular
  files too; ``read_password_line``: a password from the first line of a stream (stdin), at most
  ``PASSWORD_MAX_CHARS`` read;
- ``wrap`` (the TLS handshake of a new connection, bounded by the connect timeout) and
  ``authenticate`` (SaslHandshake v1, then SaslAuthenticate with PLAIN's one token or SCRAM's two,
  checking the broker's SCRAM signature so that an impostor holding no credential is refused).

The password is kept in memory for reconnections and appears in no ``repr`` and no error.
"""

from __future__ import annotations

import os
import socket
import ssl
import stat
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..server.security.scram import MECHANISMS, AuthenticationError, ScramClient
from .errors import BrokerResponseError, NetworkError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", *sorted(MECHANISMS))
SECURITY_DEFAULTS: dict[str, Any] = {
    "security.protocol": "PLAINTEXT", "ssl.ca.location": None, "ssl.certificate.location": None,
    "ssl.key.location": None, "ssl.key.password": None, "ssl.endpoint.identification.algorithm": "https",
    "sasl.mechanism": None, "sasl.mechanisms": None, "sasl.username": None, "sasl.password": None}
"""The security settings every client takes (merged into the producer's and consumer's defaults)."""
SASL_AUTHENTICATION_FAILED = 58
CLIENT_PROPERTIES_MAX_BYTES = 1 << 20
"""The largest client properties file read (a few settings take a few hundred bytes)."""
PASSWORD_MAX_CHARS = 4096
"""The longest password ``read_password_line`` takes (SCRAM has no limit; a line without end does)."""
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))


class NotARegularFileError(ValueError):
    """A path given for a small file of settings names none: nothing there, or a directory, a
    device, a FIFO or a socket."""


class AuthenticationFailedError(BrokerResponseError):
    """The broker refused the credentials (SASL_AUTHENTICATION_FAILED), or the exchange broke."""


@dataclass(frozen=True)
class ClientSecurity:
    """How to reach the brokers (see the module docstring). ``PLAINTEXT`` with nothing else: the
    default, no TLS, no SASL."""

    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    check_hostname: bool = True
    sasl_mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @classmethod
    def from_config(cls, settings: Mapping[str, Any]) -> "ClientSecurity":
        """The security of a settings dict (``SECURITY_DEFAULTS``' keys; others are ignored)."""
        protocol = str(settings.get("security.protocol") or "PLAINTEXT").upper()
        if protocol not in PROTOCOLS:
            raise ValueError(f"security.protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
        endpoint_check = str(settings.get("ssl.endpoint.identification.algorithm") or "none").lower()
        if endpoint_check not in ("https", "none"):
            raise ValueError(f"ssl.endpoint.identification.algorithm must be https or none, got {endpoint_check!r}")
        context = None
        if protocol in ("SSL", "SASL_SSL"):
            context = _ssl_context(settings, endpoint_check == "https")
        mechanism = settings.get("sasl.mechanism") or settings.get("sasl.mechanisms")
        username, password = settings.get("sasl.username"), settings.get("sasl.password")
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            mechanism = str(mechanism or "PLAIN").upper()
            if mechanism not in SASL_MECHANISMS:
                raise ValueError(f"sasl.mechanism must be one of {', '.join(SASL_MECHANISMS)}, got {mechanism!r}")
            if not username or password is None:
                raise ValueError(f"security.protocol={protocol} needs sasl.username and sasl.password")
        return cls(protocol, context, endpoint_check == "https", mechanism if protocol.startswith("SASL") else None,
                   username, password)

    # --- a new connection ------------------------------------------------------------------------

    def wrap(self, sock: socket.socket, host: str) -> socket.socket:
        """The TLS handshake on a connected blocking socket (its timeout bounds it); the TLS socket.
        ``NetworkError`` saying why when the broker's certificate is not trusted or the handshake
        fails."""
        if self.ssl_context is None:
            return sock
        try:
            return self.ssl_context.wrap_socket(sock, server_hostname=host if self.check_hostname else None)
        except ssl.SSLCertVerificationError as exc:
            sock.close()
            raise NetworkError(f"TLS to {host}: the broker's certificate is not trusted: {exc.verify_message}") from None
        except (ssl.SSLError, OSError) as exc:
            sock.close()
            raise NetworkError(f"TLS handshake with {host} failed: {exc}") from None

    def authenticate(self, request: Callable[[str, int, dict], dict], versions: Mapping[int, int], where: str) -> None:
        """SASL on a connection whose ApiVersions is done: ``request(api_name, version, body)``
        sends one request and returns the response body; ``versions`` the negotiated versions."""
        from ..server.protocol.codec import API_KEYS
        if API_KEYS["SaslAuthenticate"] not in versions:
            raise BrokerResponseError(f"{where} does not offer SaslAuthenticate (the SASL exchange with Kafka "
                                      "request headers, Kafka 1.0+)", 35, "UNSUPPORTED_VERSION")
        handshake = request("SaslHandshake", 1, {"mechanism": self.sasl_mechanism})
        if handshake["error_code"]:
            raise BrokerResponseError(f"{where} does not accept SASL {self.sasl_mechanism} (it offers "
                                      f"{', '.join(handshake.get('mechanisms') or []) or 'none'})",
                                      handshake["error_code"], "UNSUPPORTED_SASL_MECHANISM")
        version = versions[API_KEYS["SaslAuthenticate"]]

        def step(token: bytes) -> bytes:
            answer = request("SaslAuthenticate", version, {"auth_bytes": token})
            if answer["error_code"]:
                raise AuthenticationFailedError(f"{where} refused the credentials of {self.username!r} "
                                                f"({self.sasl_mechanism}): {answer.get('error_message') or 'no reason'}",
                                                answer["error_code"], "SASL_AUTHENTICATION_FAILED")
            return bytes(answer["auth_bytes"] or b"")

        if self.sasl_mechanism == "PLAIN":
            step(b"\0" + self.username.encode() + b"\0" + self.password.encode())
            return
        scram = ScramClient(self.sasl_mechanism, self.username, self.password)
        try:
            server_first = step(scram.first())
            server_final = step(scram.final(server_first))
            scram.verify(server_final)
        except AuthenticationError as exc:
            raise AuthenticationFailedError(f"SCRAM with {where}: {exc}", SASL_AUTHENTICATION_FAILED,
                                            "SASL_AUTHENTICATION_FAILED") from None


def regular_file_problem(path: str) -> str | None:
    """Why ``path`` is not a regular file (``"no such file"``, ``"a FIFO, not a regular file"``...),
    or None when it is one. ``os.stat`` only: nothing is opened, so a FIFO does not block."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "no such file"
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return _not_regular(mode)


def _not_regular(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "not a file")
    return f"{kind}, not a regular file"


def read_regular_file(path: str, max_bytes: int, what: str) -> bytes:
    """The bytes of ``path``, a small file of settings named by the user (``what`` says which, in
    errors). ``NotARegularFileError`` unless it is a regular file (checked before it is opened,
    and again on the descriptor, opened with O_NONBLOCK so that a FIFO put there meanwhile does not
    block); ``ValueError`` when it holds more than ``max_bytes``; ``OSError`` when it cannot be read."""
    problem = regular_file_problem(path)
    if problem is not None:
        raise NotARegularFileError(f"{what} {path!r}: {problem}")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _O_CLOEXEC)
    try:
        problem = _not_regular(os.fstat(fd).st_mode)
        if problem is not None:
            raise NotARegularFileError(f"{what} {path!r}: {problem}")
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, max_bytes + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > max_bytes:
        raise ValueError(f"{what} {path!r} holds more than {max_bytes} bytes: not a file of settings")
    return b"".join(chunks)


def read_client_properties(path: str) -> dict[str, str]:
    """The ``key=value`` lines of a client properties file (Kafka tools' ``--command-config``),
    security settings only (``SECURITY_DEFAULTS``' keys): ``#`` and ``!`` comments and blank lines
    skipped, whitespace around keys and values stripped. Only a regular file of at most
    ``CLIENT_PROPERTIES_MAX_BYTES`` is read (``read_regular_file``: ``NotARegularFileError``
    otherwise).
    ``ValueError`` naming the file and line of a line that is not ``key=value`` (never its value:
    it may be a password)."""
    data = read_regular_file(path, CLIENT_PROPERTIES_MAX_BYTES, "the client properties file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    settings: dict[str, str] = {}
    for number, line in enumerate(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"), 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, found, value = line.partition("=")
        if not found or not key.strip():
            raise ValueError(f"{path} line {number}: expected key=value")
        if key.strip() not in SECURITY_DEFAULTS:
            raise ValueError(f"{path} line {number}: {key.strip()!r} is not a security setting (known: "
                             f"{', '.join(sorted(SECURITY_DEFAULTS))})")
        settings[key.strip()] = value.strip()
    ClientSecurity.from_config(settings)  # a missing file or a bad value: refused now, named
    return settings


def read_password_line(stream) -> str:
    """The first line of the text ``stream`` (stdin) without its line end, reading at most
    ``PASSWORD_MAX_CHARS`` and a line end: ``ValueError`` for a longer line (a stream such as
    /dev/zero, which has no line end, is not read without end)."""
    line = stream.readline(PASSWORD_MAX_CHARS + 2)
    password = line[:-1] if line.endswith("\n") else line
    password = password[:-1] if password.endswith("\r") else password
    if len(password) > PASSWORD_MAX_CHARS:
        raise ValueError(f"the password line is longer than {PASSWORD_MAX_CHARS} characters")
    return password


def _ssl_context(settings: Mapping[str, Any], check_hostname: bool) -> ssl.SSLContext:
    for key in ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location"):
        path = settings.get(key)
        problem = None if path is None else regular_file_problem(path)
        if problem is not None:  # a device or a FIFO would be read without end, or wait for a writer
            raise ValueError(f"{key} {path!r}: {problem}")
    context = ssl.create_default_context(cafile=settings.get("ssl.ca.location"))
    context.check_hostname = check_hostname
    certificate = settings.get("ssl.certificate.location")
    if certificate:
        try:
            context.load_cert_chain(certificate, settings.get("ssl.key.location"), settings.get("ssl.key.password"))
        except (ssl.SSLError, OSError) as exc:
            raise ValueError(f"ssl.certificate.location {certificate!r}: cannot load the certificate and key "
                             f"({exc.__class__.__name__}; a wrong ssl.key.password?)") from None
    elif settings.get("ssl.key.location"):
        raise ValueError("ssl.key.location needs ssl.certificate.location")
    return context


__all__ = ["AuthenticationFailedError", "CLIENT_PROPERTIES_MAX_BYTES", "ClientSecurity", "NotARegularFileError",
           "PASSWORD_MAX_CHARS", "PROTOCOLS", "SASL_MECHANISMS", "SECURITY_DEFAULTS", "read_client_properties",
           "read_password_line", "read_regular_file", "regular_file_problem"]
