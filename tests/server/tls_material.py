"""TLS test material made in the test: two CAs, a server certificate, client certificates (good,
expired, signed by the wrong CA), all as PEM files, with the ``openssl`` command-line tool.

Python's standard library cannot create X.509 certificates, so this module runs ``openssl``
(OpenSSL 3.0 or later: ``req -CA`` signs in the same call that makes the key) in a subprocess, each
call bounded by a timeout, in a directory the caller gives. Keys are EC P-256 (a key takes
milliseconds where RSA 2048 takes a good part of a second; Python's ssl, librdkafka, kcat and
kafka-python all accept them) and unencrypted, except one password-protected copy of the server key.
The whole set takes about 0.2 s (nine openssl calls); make it once per test session.

What ``make_tls_material(directory)`` returns (``TlsMaterial``, a frozen dataclass of paths):

- ``ca_cert``, ``ca_key``: the test CA, CN "logstore test CA", self-signed;
- ``server_cert``, ``server_key``: the server, signed by the CA, subjectAltName IP:127.0.0.1 and
  DNS:localhost (so hostname checking passes for both); ``server_pem``: certificate then key in one
  file (``SSLContext.load_cert_chain(server_pem)``); ``server_key_encrypted``: the same key as
  encrypted PKCS#8, password ``server_key_password`` ("changeit");
- ``alice_cert``/``alice_key``, ``bob_cert``/``bob_key``: clients signed by the CA, subjects
  ``ALICE``/``BOB`` ("CN=alice,OU=test,O=logstore", in RFC 2253 order as Kafka's principal builder
  prints it: ``User:CN=alice,OU=test,O=logstore``);
- ``expired_cert``/``expired_key``: a client signed by the CA, valid only on 2020-01-01
  (subject ``EXPIRED``);
- ``other_ca_cert``/``other_ca_key``: an unrelated CA (CN "logstore other CA"), and
  ``wrong_ca_cert``/``wrong_ca_key``: a client it signed, with alice's very subject (an impersonation
  attempt: a server must refuse it, not read "alice" out of it).

Subjects in the certificates are in X.509 (DER) order, O then OU then CN: Python's
``SSLSocket.getpeercert()["subject"]`` lists them in that order, RFC 2253 (and Kafka) prints the
reverse, CN first. ``rfc2253(getpeercert()["subject"])`` gives Kafka's form.

Wiring it into a conftest (this module defines no fixture of its own, so importing it registers
nothing)::

    from tls_material import make_tls_material

    @pytest.fixture(scope="session")
    def tls_material(tmp_path_factory):
        return make_tls_material(tmp_path_factory.mktemp("tls"))

``server_context(material)`` and ``client_context(material, ...)`` build the Python ``ssl``
contexts the raw-socket tests need: a server that requires (or merely accepts) client certificates
from the CA, a client that trusts the CA (or not) and presents a certificate (or not).
"""

from __future__ import annotations

import dataclasses
import ssl
import subprocess
from pathlib import Path

import external_tools

TIMEOUT = 20.0
"""Seconds each openssl call may take (they take milliseconds; a loaded CI box gets slack)."""

CA_SUBJECT = "/CN=logstore test CA"
OTHER_CA_SUBJECT = "/CN=logstore other CA"
SERVER_SUBJECT = "/O=logstore/OU=test/CN=localhost"
ALICE = "CN=alice,OU=test,O=logstore"
BOB = "CN=bob,OU=test,O=logstore"
EXPIRED = "CN=expired,OU=test,O=logstore"
SERVER_KEY_PASSWORD = "changeit"
EXPIRED_NOT_BEFORE = "20200101000000Z"
EXPIRED_NOT_AFTER = "20200102000000Z"
DAYS = 3650

_CONFIG = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca_ext]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth, clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
subjectAltName = IP:127.0.0.1, DNS:localhost
[client_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
[ca]
default_ca = test_ca
[test_ca]
database = {dir}/ca-index.txt
new_certs_dir = {dir}/ca-issued
rand_serial = yes
default_md = sha256
policy = any_policy
unique_subject = no
copy_extensions = none
[any_policy]
organizationName = optional
organizationalUnitName = optional
commonName = supplied
"""
"""Our own config, so that the system's openssl.cnf (whose v3_ca and policies vary) plays no part.
Extensions as Python 3.13's VERIFY_X509_STRICT wants them (key identifiers, critical constraints)."""


@dataclasses.dataclass(frozen=True)
class TlsMaterial:
    """Paths of the PEM files ``make_tls_material`` wrote (see the module docstring)."""

    directory: Path
    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    server_pem: Path
    server_key_encrypted: Path
    alice_cert: Path
    alice_key: Path
    bob_cert: Path
    bob_key: Path
    expired_cert: Path
    expired_key: Path
    other_ca_cert: Path
    other_ca_key: Path
    wrong_ca_cert: Path
    wrong_ca_key: Path
    server_key_password: str = SERVER_KEY_PASSWORD


def _slashed(subject: str) -> str:
    """``"CN=alice,OU=test,O=logstore"`` (RFC 2253) -> ``"/O=logstore/OU=test/CN=alice"`` (openssl's
    ``-subj``, in X.509 order)."""
    return "".join(f"/{part}" for part in reversed(subject.split(",")))


def rfc2253(subject) -> str:
    """``getpeercert()["subject"]`` (relative distinguished names in X.509 order) as RFC 2253 prints
    it: ``"CN=alice,OU=test,O=logstore"``."""
    short = {"commonName": "CN", "organizationalUnitName": "OU", "organizationName": "O", "countryName": "C",
             "localityName": "L", "stateOrProvinceName": "ST"}
    return ",".join("+".join(f"{short.get(name, name)}={value}" for name, value in rdn) for rdn in reversed(subject))


def _openssl(*args: str, cwd: Path) -> None:
    result = subprocess.run([external_tools.require("openssl"), *args], cwd=cwd, capture_output=True, text=True,
                            timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed ({result.returncode}): {result.stderr.strip()}")


_NEW_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-noenc")


def _self_signed_ca(directory: Path, name: str, subject: str) -> None:
    _openssl("req", "-config", "openssl.cnf", "-x509", *_NEW_KEY, "-keyout", f"{name}.key", "-out", f"{name}.pem",
             "-subj", subject, "-days", str(DAYS), "-sha256", "-extensions", "ca_ext", cwd=directory)


def _signed(directory: Path, name: str, subject: str, ca: str, extensions: str) -> None:
    """A new key and a certificate for it signed by ``ca``, in one call (``req -CA``, OpenSSL 3.0+)."""
    _openssl("req", "-config", "openssl.cnf", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", *_NEW_KEY,
             "-keyout", f"{name}.key", "-out", f"{name}.pem", "-subj", subject, "-days", str(DAYS), "-sha256",
             "-extensions", extensions, cwd=directory)


def _expired(directory: Path, name: str, subject: str, ca: str) -> None:
    """A certificate whose validity ended long ago: ``openssl ca`` is the tool of 3.0 that takes
    explicit dates (``x509 -not_before`` came in 3.4)."""
    _openssl("req", "-config", "openssl.cnf", "-new", *_NEW_KEY, "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", subject, cwd=directory)
    (directory / "ca-index.txt").write_text("")  # openssl ca's database: a fresh one every time
    (directory / "ca-issued").mkdir(exist_ok=True)
    _openssl("ca", "-config", "openssl.cnf", "-batch", "-notext", "-cert", f"{ca}.pem", "-keyfile", f"{ca}.key",
             "-in", f"{name}.csr", "-out", f"{name}.pem", "-startdate", EXPIRED_NOT_BEFORE, "-enddate",
             EXPIRED_NOT_AFTER, "-extensions", "client_ext", cwd=directory)
    (directory / f"{name}.csr").unlink()


def make_tls_material(directory) -> TlsMaterial:
    """Write the whole set into ``directory`` (created if missing; existing files of the same names
    are replaced) and return its paths. Skips the test (or the fixture) where the openssl command is
    missing (``external_tools``); raises ``RuntimeError`` if openssl fails, ``subprocess.TimeoutExpired``
    if it hangs."""
    external_tools.require("openssl")
    directory = Path(directory).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "openssl.cnf").write_text(_CONFIG.format(dir=directory))
    _self_signed_ca(directory, "ca", CA_SUBJECT)
    _self_signed_ca(directory, "other-ca", OTHER_CA_SUBJECT)
    _signed(directory, "server", SERVER_SUBJECT, "ca", "server_ext")
    _signed(directory, "alice", _slashed(ALICE), "ca", "client_ext")
    _signed(directory, "bob", _slashed(BOB), "ca", "client_ext")
    _signed(directory, "wrong-ca", _slashed(ALICE), "other-ca", "client_ext")
    _expired(directory, "expired", _slashed(EXPIRED), "ca")
    _openssl("pkey", "-in", "server.key", "-aes256", "-passout", f"pass:{SERVER_KEY_PASSWORD}",
             "-out", "server-encrypted.key", cwd=directory)
    (directory / "server-combined.pem").write_bytes((directory / "server.pem").read_bytes()
                                                    + (directory / "server.key").read_bytes())
    for key in directory.glob("*.key"):
        key.chmod(0o600)
    paths = {}
    for name, stem in (("ca", "ca"), ("server", "server"), ("alice", "alice"), ("bob", "bob"),
                       ("expired", "expired"), ("other_ca", "other-ca"), ("wrong_ca", "wrong-ca")):
        paths[f"{name}_cert"] = directory / f"{stem}.pem"
        paths[f"{name}_key"] = directory / f"{stem}.key"
    return TlsMaterial(directory=directory, server_pem=directory / "server-combined.pem",
                       server_key_encrypted=directory / "server-encrypted.key", **paths)


def server_context(material: TlsMaterial, *, client_certs: ssl.VerifyMode = ssl.CERT_REQUIRED) -> ssl.SSLContext:
    """A TLS server context with the server certificate, verifying client certificates against the
    test CA (``CERT_REQUIRED``: mutual TLS; ``CERT_OPTIONAL``; ``CERT_NONE``: no client certs)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(material.server_cert, material.server_key)
    context.verify_mode = client_certs
    if client_certs != ssl.CERT_NONE:
        context.load_verify_locations(material.ca_cert)
    return context


def client_context(material: TlsMaterial, cert: Path | None = None, key: Path | None = None, *,
                   trust: Path | None = None) -> ssl.SSLContext:
    """A TLS client context that verifies the server (hostname included) against ``trust`` (the
    test CA by default) and presents ``cert``/``key`` if given."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(trust or material.ca_cert)
    if cert is not None:
        context.load_cert_chain(cert, key)
    return context
