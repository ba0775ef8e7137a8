"""Listeners: where the server accepts connections, with which security protocol, and the TLS
settings of those that speak TLS.

What it owns:
- ``Listener``: one ``PROTOCOL://HOST:PORT`` with Kafka's protocol names (``PLAINTEXT``, ``SSL``,
  ``SASL_PLAINTEXT``, ``SASL_SSL``), the address it is advertised as in Metadata and FindCoordinator
  answers, and for the TLS ones the server's ``ssl.SSLContext``;
- ``parse_listeners`` (several ``--listen`` values and their ``--advertised-listener`` values, matched
  by protocol name, as Kafka matches ``listeners`` and ``advertised.listeners`` by listener name) and
  the safe-default rule: a ``PLAINTEXT`` listener on an address other than loopback is refused unless
  the caller says it is meant (``allow_plaintext_remote``), and then warned about;
- ``TlsSettings`` (Kafka's ``ssl.*`` names, mapped to PEM files) and ``server_ssl_context``;
- ``principal_from_certificate``: the principal of a client that showed a certificate, ``User:`` and
  the subject as an RFC 2253 string (``User:CN=alice,OU=test,O=example``), as Kafka's default
  principal builder makes it.

A listener whose address is an absolute path (``PLAINTEXT:///run/x.sock``) is a Unix domain socket:
PLAINTEXT only, port 0, allowed like loopback (only the file's owner can connect).

It imports only the standard library, the store's errors and the network's ``is_unix_socket_path``.
"""

from __future__ import annotations

import ipaddress
import os
import ssl
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping

from ...errors import InvalidConfigError
from ..network.socket_server import is_unix_socket_path

PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL = "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"
PROTOCOLS = (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)
ANONYMOUS = "User:ANONYMOUS"
"""The principal of a connection that did not authenticate (Kafka's name)."""

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}

# The TLS settings, by Kafka's names. Kafka reads PEM with ssl.keystore.type=PEM; here PEM is the only
# type, so the locations are PEM files: a certificate chain (which may also hold the key), the key when
# it is a file of its own (ssl.key.location is ours: Kafka has it only inline), CAs to trust.
TLS_KEYS = ("ssl.keystore.location", "ssl.key.location", "ssl.key.password", "ssl.truststore.location",
            "ssl.client.auth", "ssl.enabled.protocols")


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (or ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class TlsSettings:
    """A TLS listener's settings (``TLS_KEYS``). ``keystore`` is a PEM certificate chain (the key in
    the same file, or in ``key``); ``truststore`` the PEM CAs client certificates must chain to;
    ``client_auth`` Kafka's ``ssl.client.auth``: ``none``, ``requested`` or ``required``."""

    keystore: str | None = None
    key: str | None = None
    key_password: str | None = None
    truststore: str | None = None
    client_auth: str = "none"
    minimum_version: str = "TLSv1.2"

    @classmethod
    def from_config(cls, settings: Mapping[str, Any]) -> "TlsSettings":
        """The ``ssl.*`` keys of a settings dict (the others are ignored)."""
        client_auth = str(settings.get("ssl.client.auth", "none")).lower()
        if client_auth not in CLIENT_AUTH:
            raise InvalidConfigError(f"ssl.client.auth must be one of {sorted(CLIENT_AUTH)}, got {client_auth!r}")
        protocols = str(settings.get("ssl.enabled.protocols", "TLSv1.2,TLSv1.3")).replace(" ", "").split(",")
        unknown = [name for name in protocols if name not in ("TLSv1.2", "TLSv1.3")]
        if unknown or not protocols:
            raise InvalidConfigError(f"ssl.enabled.protocols takes TLSv1.2 and TLSv1.3, got {unknown or protocols!r}")
        return cls(keystore=settings.get("ssl.keystore.location"), key=settings.get("ssl.key.location"),
                   key_password=settings.get("ssl.key.password"), truststore=settings.get("ssl.truststore.location"),
                   client_auth=client_auth, minimum_version=min(protocols))

    def __repr__(self) -> str:  # never the key's password
        password = "***" if self.key_password else None
        return (f"TlsSettings(keystore={self.keystore!r}, key={self.key!r}, key_password={password!r}, "
                f"truststore={self.truststore!r}, client_auth={self.client_auth!r})")


def server_ssl_context(settings: TlsSettings) -> ssl.SSLContext:
    """The server side ``SSLContext`` of ``settings``; ``InvalidConfigError`` naming the file that is
    missing or cannot be used (never the password)."""
    if not settings.keystore:
        raise InvalidConfigError("a TLS listener needs ssl.keystore.location (--ssl-cert): a PEM certificate chain")
    for name, path in (("ssl.keystore.location", settings.keystore), ("ssl.key.location", settings.key),
                       ("ssl.truststore.location", settings.truststore)):
        if path and not os.path.isfile(path):
            raise InvalidConfigError(f"{name}: no such file {path!r}")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = (ssl.TLSVersion.TLSv1_3 if settings.minimum_version == "TLSv1.3"
                               else ssl.TLSVersion.TLSv1_2)
    try:
        context.load_cert_chain(settings.keystore, settings.key, settings.key_password)
    except (ssl.SSLError, OSError) as exc:
        raise InvalidConfigError(f"cannot load the certificate {settings.keystore!r}"
                                 f"{f' and key {settings.key!r}' if settings.key else ''}: {exc.__class__.__name__}"
                                 f" ({getattr(exc, 'reason', None) or exc.strerror or 'bad PEM or wrong password'})"
                                 ) from None
    context.verify_mode = CLIENT_AUTH[settings.client_auth]
    if settings.client_auth != "none":
        if not settings.truststore:
            raise InvalidConfigError(f"ssl.client.auth={settings.client_auth} needs ssl.truststore.location "
                                     "(--ssl-ca): the CAs client certificates are checked against")
        try:
            context.load_verify_locations(cafile=settings.truststore)
        except (ssl.SSLError, OSError) as exc:
            raise InvalidConfigError(f"cannot load the CA certificates {settings.truststore!r}: {exc}") from None
    return context


_RFC2253_NAMES = {"commonName": "CN", "organizationalUnitName": "OU", "organizationName": "O", "localityName": "L",
                  "stateOrProvinceName": "ST", "countryName": "C", "streetAddress": "STREET",
                  "domainComponent": "DC", "userId": "UID"}


def _escape_rdn_value(value: str) -> str:
    escaped = "".join("\\" + char if char in ',+"\\<>;' else char for char in value)
    if escaped.startswith((" ", "#")):
        escaped = "\\" + escaped
    if escaped.endswith(" ") and not escaped.endswith("\\ "):
        escaped = escaped[:-1] + "\\ "
    return escaped


def principal_from_certificate(certificate: Mapping[str, Any] | None) -> str:
    """``User:`` and the certificate's subject in RFC 2253 form (the last RDN of the certificate
    first, as Java's ``X500Principal.getName()`` writes it), from ``SSLSocket.getpeercert()``;
    ``User:ANONYMOUS`` when the client showed none."""
    if not certificate or not certificate.get("subject"):
        return ANONYMOUS
    rdns = []
    for rdn in reversed(certificate["subject"]):
        rdns.append("+".join(f"{_RFC2253_NAMES.get(name, name)}={_escape_rdn_value(value)}" for name, value in rdn))
    return "User:" + ",".join(rdns)


def parse_host_port(text: str, default_port: int = 9092) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6; a bare HOST takes ``default_port``) as (host, port);
    ``ValueError`` naming the text when it is not one."""
    if not isinstance(text, str) or not text:
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    value = text.split("://", 1)[1] if "://" in text else text
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    elif value.count(":") == 1:
        host, port_text = value.split(":")
    elif ":" in value:
        raise ValueError(f"expected HOST:PORT (an IPv6 host in brackets), got {text!r}")
    else:
        host, port_text = value, ""
    try:
        port = int(port_text) if port_text else default_port
    except ValueError:
        raise ValueError(f"expected HOST:PORT with a numeric port, got {text!r}") from None
    if not host or not 0 <= port <= 65535:
        raise ValueError(f"expected HOST:PORT with a port in 0..65535, got {text!r}")
    return host, port


@dataclass(frozen=True)
class Listener:
    """One listener: ``protocol`` (Kafka's name, also the listener's name), the address to bind, the
    address advertised to clients (None: the bound one), and its TLS context (TLS protocols only)."""

    protocol: str
    host: str
    port: int
    advertised_host: str | None = None
    advertised_port: int | None = None
    ssl_context: ssl.SSLContext | None = None

    @property
    def uses_tls(self) -> bool:
        return self.protocol in (SSL, SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in (SASL_PLAINTEXT, SASL_SSL)

    def __str__(self) -> str:
        if is_unix_socket_path(self.host):
            return f"{self.protocol}://{self.host}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.protocol}://{host}:{self.port}"


def parse_listener(text: str, default_protocol: str = PLAINTEXT) -> Listener:
    """``PROTOCOL://HOST:PORT`` (or a bare ``HOST:PORT``: ``default_protocol``) as a ``Listener``;
    ``ValueError`` naming the text when it is not one."""
    if not isinstance(text, str):
        raise TypeError(f"a listener is a str like SASL_SSL://0.0.0.0:9093, got {text!r}")
    protocol, found, _rest = text.partition("://")
    if not found:
        protocol = default_protocol
    protocol = protocol.upper()
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown security protocol {protocol!r} in listener {text!r} (one of {', '.join(PROTOCOLS)})")
    address = text.split("://", 1)[1] if found else text
    if is_unix_socket_path(address):
        if protocol != PLAINTEXT:
            raise ValueError(f"listener {text!r}: a Unix socket is PLAINTEXT (only its owner can connect to it)")
        return Listener(protocol, address, 0)
    host, port = parse_host_port(text)
    return Listener(protocol, host, port)


def parse_listeners(listen: Iterable[str] | str, advertised: Iterable[str] | str | None = None, *,
                    tls: TlsSettings | None = None, allow_plaintext_remote: bool = False) -> list[Listener]:
    """The listeners of ``listen`` (one value or several), each with its advertised address from
    ``advertised`` (matched by protocol; a bare ``HOST:PORT`` advertises the only listener) and, for
    the TLS ones, a context from ``tls``. Refuses two listeners with one protocol (Kafka's listener
    names must differ), an advertised address without its listener, and a ``PLAINTEXT`` listener
    bound beyond loopback unless ``allow_plaintext_remote``."""
    values = [listen] if isinstance(listen, str) else list(listen)
    if not values:
        raise ValueError("no listener given")
    listeners = [parse_listener(value) for value in values]
    protocols = [listener.protocol for listener in listeners]
    duplicated = sorted({name for name in protocols if protocols.count(name) > 1})
    if duplicated:
        raise ValueError(f"two listeners with the security protocol {duplicated[0]}: a listener's protocol is its "
                         "name, and names must differ")
    advertised_values = [] if advertised is None else [advertised] if isinstance(advertised, str) else list(advertised)
    for value in advertised_values:
        default = listeners[0].protocol if len(listeners) == 1 else None
        if "://" not in value and default is None:
            raise ValueError(f"advertised listener {value!r} names no protocol, and there are several listeners")
        target = parse_listener(value, default or PLAINTEXT)
        index = next((i for i, listener in enumerate(listeners) if listener.protocol == target.protocol), None)
        if index is None:
            raise ValueError(f"advertised listener {value!r} has no {target.protocol} listener to advertise")
        listeners[index] = replace(listeners[index], advertised_host=target.host, advertised_port=target.port)
    for index, listener in enumerate(listeners):
        if (listener.protocol == PLAINTEXT and not is_loopback(listener.host) and not is_unix_socket_path(listener.host)
                and not allow_plaintext_remote):
            raise ValueError(f"{listener} accepts anyone who can reach it, without TLS or authentication: "
                             "pass --allow-plaintext-remote (allow.plaintext.remote=true) if that is meant, or "
                             "use SASL_SSL")
        if listener.uses_tls:
            listeners[index] = replace(listener, ssl_context=server_ssl_context(tls or TlsSettings()))
    return listeners


__all__ = ["ANONYMOUS", "Listener", "parse_host_port", "PLAINTEXT", "PROTOCOLS", "SASL_PLAINTEXT", "SASL_SSL", "SSL", "TLS_KEYS",
           "TlsSettings", "is_loopback", "parse_listener", "parse_listeners", "principal_from_certificate",
           "server_ssl_context"]
