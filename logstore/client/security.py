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
  option for the same thing), in librdkafka's names or the Java clients' (``sasl.jaas.config`` with
  Kafka's Plain and Scram login modules, PEM trust and key stores: ``JAVA_CLIENT_KEYS``), read only when it is a regular file of at most
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

import socket
import ssl
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..properties import NotARegularFileError, read_properties_file, read_regular_file, regular_file_problem
from ..server.security.scram import MECHANISMS, AuthenticationError, ScramClient
from .errors import BrokerResponseError, NetworkError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", *sorted(MECHANISMS))
SECURITY_DEFAULTS: dict[str, Any] = {
    "security.protocol": "PLAINTEXT", "ssl.ca.location": None, "ssl.certificate.location": None,
    "ssl.key.location": None, "ssl.key.password": None, "ssl.endpoint.identification.algorithm": "https",
    "sasl.mechanism": None, "sasl.mechanisms": None, "sasl.username": None, "sasl.password": None}
"""The security settings every client takes (merged into the producer's and consumer's defaults)."""
SETTING_DOCS: dict[str, str] = {
    "security.protocol": "how the brokers are reached: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL",
    "ssl.ca.location": "PEM CAs the broker's certificate must chain to (default: the system's CAs)",
    "ssl.certificate.location": "the client's PEM certificate, for a broker that asks for one",
    "ssl.key.location": "the certificate's private key, when it is in a PEM file of its own",
    "ssl.key.password": "the private key's password",
    "ssl.endpoint.identification.algorithm": "https: the broker's certificate must name the host connected "
                                             "to; none: it need not",
    "sasl.mechanism": "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (default PLAIN on a SASL protocol)",
    "sasl.mechanisms": "librdkafka's spelling of sasl.mechanism",
    "sasl.username": "the SASL user",
    "sasl.password": "the SASL user's password (shown in no repr and no error)",
}
"""What each setting of ``SECURITY_DEFAULTS`` does; the documentation's settings reference is
generated from it."""
SASL_AUTHENTICATION_FAILED = 58
CLIENT_PROPERTIES_MAX_BYTES = 1 << 20
"""The largest client properties file read (a few settings take a few hundred bytes)."""
PASSWORD_MAX_CHARS = 4096
"""The longest password ``read_password_line`` takes (SCRAM has no limit; a line without end does)."""
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


def read_client_properties(path: str) -> dict[str, str]:
    """The security settings of a client properties file (Kafka tools' ``--command-config``), by
    ``SECURITY_DEFAULTS``' names. The file is a Java properties file (``logstore.properties``:
    ``key=value``, ``key: value``, comments, continued lines, escapes) of at most
    ``CLIENT_PROPERTIES_MAX_BYTES`` (``read_regular_file``: ``NotARegularFileError`` otherwise). It
    may use librdkafka's names or the Java clients' (``JAVA_CLIENT_KEYS``): ``sasl.jaas.config`` with
    Kafka's ``PlainLoginModule`` or ``ScramLoginModule`` and its ``username`` and ``password``, and
    PEM trust and key stores (``ssl.truststore.location`` with ``ssl.truststore.type=PEM``...).
    ``ValueError`` naming the file and line of an unknown key or a bad value (never a value: it may
    be a password)."""
    settings: dict[str, str] = {}
    lines: dict[str, int] = {}
    for key, value, number in read_properties_file(path, CLIENT_PROPERTIES_MAX_BYTES, "the client properties file"):
        if key not in SECURITY_DEFAULTS and key not in JAVA_CLIENT_KEYS:
            raise ValueError(f"{path} line {number}: {key!r} is not a security setting (known: "
                             f"{', '.join(sorted({*SECURITY_DEFAULTS, *JAVA_CLIENT_KEYS}))})")
        settings[key], lines[key] = value.strip(), number
    settings = _from_java_names(settings, lines, path)
    ClientSecurity.from_config(settings)  # a missing file or a bad value: refused now, named
    return settings


JAVA_CLIENT_KEYS = {
    "sasl.jaas.config": "the login module and its options: PlainLoginModule or ScramLoginModule, with "
                        "username and password (sasl.username and sasl.password)",
    "ssl.truststore.location": "the CA certificates (ssl.ca.location), with ssl.truststore.type=PEM",
    "ssl.truststore.type": "PEM (the only type read)",
    "ssl.keystore.location": "the client's certificate chain and key in one PEM file (ssl.certificate.location), "
                             "with ssl.keystore.type=PEM",
    "ssl.keystore.type": "PEM (the only type read)",
}
"""The Java clients' names a client properties file may use besides ``SECURITY_DEFAULTS``' (Kafka's
tools read such files), with what each stands for."""
LOGIN_MODULES = {"org.apache.kafka.common.security.plain.PlainLoginModule": ("PLAIN",),
                 "org.apache.kafka.common.security.scram.ScramLoginModule": ("SCRAM-SHA-256", "SCRAM-SHA-512")}
"""The JAAS login modules of ``sasl.jaas.config`` read, with the SASL mechanisms each serves."""
_JAAS_FLAGS = ("required", "requisite", "sufficient", "optional")
_RENAMED = {"ssl.truststore.location": "ssl.ca.location", "ssl.keystore.location": "ssl.certificate.location"}


def _from_java_names(settings: dict[str, str], lines: Mapping[str, int], path: str) -> dict[str, str]:
    """``settings`` with the Java clients' keys put as ``SECURITY_DEFAULTS``' (see
    ``JAVA_CLIENT_KEYS``); ``ValueError`` naming the file and line of a key that cannot be."""
    out = {key: value for key, value in settings.items() if key not in JAVA_CLIENT_KEYS}

    def where(key: str) -> str:
        return f"{path} line {lines[key]}"

    def put(key: str, value: str, source: str) -> None:
        if out.get(key) not in (None, value):
            raise ValueError(f"{where(source)}: {source} and {key} (line {lines[key]}) disagree: give one of them")
        out[key] = value

    for store in ("ssl.truststore", "ssl.keystore"):
        kind = settings.get(f"{store}.type")
        if kind is not None and kind.upper() != "PEM":
            raise ValueError(f"{where(store + '.type')}: {store}.type={kind}: only PEM files are read (openssl "
                             f"converts a JKS or PKCS12 store to PEM)")
        if f"{store}.location" in settings:
            put(_RENAMED[f"{store}.location"], settings[f"{store}.location"], f"{store}.location")
    if "sasl.jaas.config" in settings:
        module, options = parse_jaas_config(settings["sasl.jaas.config"], where("sasl.jaas.config"))
        mechanism = (out.get("sasl.mechanism") or out.get("sasl.mechanisms") or "").upper()
        served = LOGIN_MODULES[module]
        if not mechanism and len(served) == 1:
            out["sasl.mechanism"] = mechanism = served[0]
        if mechanism not in served:
            raise ValueError(f"{where('sasl.jaas.config')}: {module.rsplit('.', 1)[1]} serves sasl.mechanism "
                             f"{' or '.join(served)}, not {mechanism or 'none given'}")
        for option, key in (("username", "sasl.username"), ("password", "sasl.password")):
            if option not in options:
                raise ValueError(f"{where('sasl.jaas.config')}: sasl.jaas.config has no {option}")
            if out.get(key) not in (None, options[option]):
                raise ValueError(f"{where('sasl.jaas.config')}: sasl.jaas.config and {key} disagree: give one "
                                 "of them")
            out[key] = options[option]
    return out


def parse_jaas_config(text: str, where: str = "sasl.jaas.config") -> tuple[str, dict[str, str]]:
    """(login module, options) of a ``sasl.jaas.config`` value, JAAS syntax as Kafka reads it:
    ``Module flag name="value" ...;``, one module of ``LOGIN_MODULES``, values quoted (with
    backslash escapes) or bare words, ``//`` and ``/* */`` comments. ``ValueError`` starting with
    ``where``, never quoting a value (a password)."""
    tokens = _jaas_tokens(text, where)
    if len(tokens) < 3 or tokens[-1] != (";", False):
        raise ValueError(f"{where}: sasl.jaas.config must be one login module: "
                         "'<LoginModule> required username=\"...\" password=\"...\";'")
    (module, module_quoted), (flag, _), *body = tokens[:-1]
    if module_quoted or module not in LOGIN_MODULES:
        known = " or ".join(LOGIN_MODULES)
        raise ValueError(f"{where}: login module {module if not module_quoted else '(a quoted name)'} is not "
                         f"read here: {known}")
    if flag.lower() not in _JAAS_FLAGS:
        raise ValueError(f"{where}: the login module's flag must be one of {', '.join(_JAAS_FLAGS)}")
    options: dict[str, str] = {}
    if len(body) % 3:
        raise ValueError(f"{where}: sasl.jaas.config options must be name=value pairs ended by one ';'")
    for index in range(0, len(body), 3):
        (name, name_quoted), equals, (value, _) = body[index:index + 3]
        if name_quoted or equals != ("=", False) or value in ("=", ";"):
            raise ValueError(f"{where}: sasl.jaas.config options must be name=value pairs ended by one ';'")
        if name not in ("username", "password"):
            raise ValueError(f"{where}: sasl.jaas.config option {name!r} is not read here (username, password)")
        options[name] = value
    return module, options


def _jaas_tokens(text: str, where: str) -> list[tuple[str, bool]]:
    """(token, quoted) of a JAAS text: words, quoted strings (escapes resolved), ``=`` and ``;``."""
    tokens: list[tuple[str, bool]] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char.isspace():
            index += 1
        elif text.startswith("//", index):
            end = text.find("\n", index)
            index = len(text) if end < 0 else end + 1
        elif text.startswith("/*", index):
            end = text.find("*/", index + 2)
            if end < 0:
                raise ValueError(f"{where}: sasl.jaas.config has an unclosed /* comment")
            index = end + 2
        elif char in "=;":
            tokens.append((char, False))
            index += 1
        elif char == '"':
            value, index = _jaas_quoted(text, index + 1, where)
            tokens.append((value, True))
        else:
            start = index
            while index < len(text) and not text[index].isspace() and text[index] not in '=;"':
                index += 1
            tokens.append((text[start:index], False))
    return tokens


_JAAS_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


def _jaas_quoted(text: str, index: int, where: str) -> tuple[str, int]:
    """The quoted string starting at ``index`` (after its quote) and the index after its closing
    quote; backslash escapes as Java's ``StreamTokenizer`` reads them."""
    out: list[str] = []
    while index < len(text):
        char = text[index]
        index += 1
        if char == '"':
            return "".join(out), index
        if char == "\\" and index < len(text):
            char = text[index]
            index += 1
            if char in "01234567":
                digits = char
                while len(digits) < (3 if digits[0] <= "3" else 2) and index < len(text) and text[index] in "01234567":
                    digits += text[index]
                    index += 1
                out.append(chr(int(digits, 8)))
            else:
                out.append(_JAAS_ESCAPES.get(char, char))
        else:
            out.append(char)
    raise ValueError(f"{where}: sasl.jaas.config has an unclosed quote")


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


__all__ = ["AuthenticationFailedError", "CLIENT_PROPERTIES_MAX_BYTES", "ClientSecurity", "JAVA_CLIENT_KEYS",
           "LOGIN_MODULES", "NotARegularFileError", "PASSWORD_MAX_CHARS", "PROTOCOLS", "SASL_MECHANISMS",
           "SECURITY_DEFAULTS", "SETTING_DOCS", "parse_jaas_config", "read_client_properties", "read_password_line",
           "read_regular_file", "regular_file_problem"]
