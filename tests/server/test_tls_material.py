"""The TLS test material (``tls_material``) works, with Python's ssl module alone: TLS handshakes on
127.0.0.1 between a server thread and a client, mutual TLS, and every certificate refused that should
be (expired, signed by the wrong CA, a server the client does not trust, a wrong hostname).

Every wait is bounded (socket timeouts, thread joins) and every socket is closed by the test that
opened it.
"""

from __future__ import annotations

import socket
import ssl
import stat
import threading
import time

import pytest

from tls_material import (ALICE, BOB, EXPIRED, SERVER_KEY_PASSWORD, TlsMaterial, client_context, make_tls_material,
                          rfc2253, server_context)

TIMEOUT = 10.0


@pytest.fixture(scope="module")
def material(tmp_path_factory) -> TlsMaterial:
    return make_tls_material(tmp_path_factory.mktemp("tls"))


def handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext, server_hostname: str = "127.0.0.1"):
    """One TLS connection on 127.0.0.1: the server, in a thread, sends ``hello <client subject>`` and
    closes. Returns ``(server outcome, client outcome)``: the client's subject (RFC 2253, None
    without a certificate) or the exception the server met; the bytes the client read or its
    exception."""
    outcome: dict[str, object] = {}
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(TIMEOUT)

        def serve():
            try:
                connection, _ = listener.accept()
            except OSError as error:
                outcome["server"] = error
                return
            with connection:
                connection.settimeout(TIMEOUT)
                try:
                    with server_ctx.wrap_socket(connection, server_side=True) as tls:
                        peer = tls.getpeercert()
                        subject = rfc2253(peer["subject"]) if peer else None
                        tls.sendall(f"hello {subject}".encode())
                        outcome["server"] = subject
                except (ssl.SSLError, OSError) as error:
                    outcome["server"] = error

        thread = threading.Thread(target=serve, name="tls-test-server", daemon=True)
        thread.start()
        try:
            with socket.create_connection(listener.getsockname(), timeout=TIMEOUT) as raw:
                with client_ctx.wrap_socket(raw, server_hostname=server_hostname) as tls:
                    received = b""
                    while chunk := tls.recv(4096):
                        received += chunk
                    outcome["client"] = received
        except (ssl.SSLError, OSError) as error:
            outcome["client"] = error
        finally:
            thread.join(TIMEOUT)
        assert not thread.is_alive(), "the TLS server thread did not finish"
    return outcome["server"], outcome["client"]


def refused(client_outcome) -> bool:
    """The client learned nothing: an error (with TLS 1.3 a refused client certificate shows on the
    client's first read, as the server's alert) or an empty read."""
    return isinstance(client_outcome, (ssl.SSLError, OSError)) or client_outcome == b""


# --- the files -----------------------------------------------------------------------------------


def test_the_whole_set_is_made_quickly_with_private_keys_private(tmp_path):
    started = time.monotonic()
    made = make_tls_material(tmp_path / "set")
    assert time.monotonic() - started < 10  # about 0.2 s; a loaded CI box gets slack
    for name in ("ca", "server", "alice", "bob", "expired", "other_ca", "wrong_ca"):
        assert getattr(made, f"{name}_cert").read_text().startswith("-----BEGIN CERTIFICATE-----")
        key = getattr(made, f"{name}_key")
        assert key.read_text().startswith("-----BEGIN PRIVATE KEY-----")
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert made.server_key_encrypted.read_text().startswith("-----BEGIN ENCRYPTED PRIVATE KEY-----")
    assert made.server_key_password == SERVER_KEY_PASSWORD == "changeit"
    assert made.server_pem.read_text() == made.server_cert.read_text() + made.server_key.read_text()
    # Made again in the same place: replaced, not refused (openssl ca's database starts afresh).
    assert make_tls_material(tmp_path / "set") == made


def test_the_certificates_say_what_they_are(material):
    # The decoder behind getpeercert(), for files: what a Python server will see of these certificates.
    decoded = {name: ssl._ssl._test_decode_cert(str(getattr(material, f"{name}_cert")))
               for name in ("ca", "server", "alice", "bob", "expired", "other_ca", "wrong_ca")}
    assert rfc2253(decoded["ca"]["subject"]) == rfc2253(decoded["ca"]["issuer"]) == "CN=logstore test CA"
    assert rfc2253(decoded["other_ca"]["subject"]) == "CN=logstore other CA"
    assert decoded["server"]["subjectAltName"] == (("IP Address", "127.0.0.1"), ("DNS", "localhost"))
    assert rfc2253(decoded["alice"]["subject"]) == ALICE == "CN=alice,OU=test,O=logstore"
    assert rfc2253(decoded["bob"]["subject"]) == BOB
    assert rfc2253(decoded["expired"]["subject"]) == EXPIRED
    assert decoded["expired"]["notAfter"] == "Jan  2 00:00:00 2020 GMT"
    # The impersonation attempt: alice's subject, the other CA's signature.
    assert rfc2253(decoded["wrong_ca"]["subject"]) == ALICE
    assert rfc2253(decoded["wrong_ca"]["issuer"]) == "CN=logstore other CA"
    for name in ("server", "alice", "bob", "expired"):
        assert rfc2253(decoded[name]["issuer"]) == "CN=logstore test CA"


def test_the_server_key_loads_from_every_form(material):
    ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(material.server_pem)
    ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(material.server_cert, material.server_key_encrypted,
                                                            password=material.server_key_password)
    with pytest.raises(ssl.SSLError):
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(material.server_cert, material.server_key_encrypted,
                                                                password="wrong")


# --- handshakes ----------------------------------------------------------------------------------


@pytest.mark.parametrize("client, subject", [("alice", ALICE), ("bob", BOB)])
def test_mutual_tls_the_server_sees_the_client_s_subject(material, client, subject):
    server, received = handshake(server_context(material), client_context(
        material, getattr(material, f"{client}_cert"), getattr(material, f"{client}_key")))
    assert server == subject
    assert received == f"hello {subject}".encode()


def test_a_server_with_the_encrypted_key_or_the_combined_file_serves_too(material):
    encrypted = server_context(material)
    encrypted.load_cert_chain(material.server_cert, material.server_key_encrypted, password=SERVER_KEY_PASSWORD)
    combined = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    combined.load_cert_chain(material.server_pem)
    alice = client_context(material, material.alice_cert, material.alice_key)
    assert handshake(encrypted, alice) == (ALICE, f"hello {ALICE}".encode())
    assert handshake(combined, alice) == (None, b"hello None")  # no client certificates asked for


@pytest.mark.parametrize("client, reason", [("expired", "certificate has expired"),
                                            ("wrong_ca", "unable to get local issuer certificate")])
def test_expired_and_wrong_ca_client_certificates_are_refused(material, client, reason):
    server, received = handshake(server_context(material), client_context(
        material, getattr(material, f"{client}_cert"), getattr(material, f"{client}_key")))
    assert isinstance(server, ssl.SSLCertVerificationError), server
    assert server.verify_message == reason
    assert refused(received), received


def test_a_client_without_a_certificate_is_refused_when_one_is_required_and_not_otherwise(material):
    server, received = handshake(server_context(material), client_context(material))
    assert isinstance(server, ssl.SSLError) and "certificate" in str(server).lower(), server
    assert refused(received), received
    assert handshake(server_context(material, client_certs=ssl.CERT_OPTIONAL), client_context(material)) == (
        None, b"hello None")
    assert handshake(server_context(material, client_certs=ssl.CERT_NONE), client_context(
        material, material.alice_cert, material.alice_key)) == (None, b"hello None")


def test_a_client_that_does_not_trust_the_ca_refuses_the_server(material):
    server, received = handshake(server_context(material, client_certs=ssl.CERT_NONE),
                                 client_context(material, trust=material.other_ca_cert))
    assert isinstance(received, ssl.SSLCertVerificationError), received
    assert received.verify_message == "unable to get local issuer certificate"
    assert isinstance(server, (ssl.SSLError, OSError)), server


@pytest.mark.parametrize("hostname", ["127.0.0.1", "localhost"])
def test_the_server_certificate_matches_its_loopback_names(material, hostname):
    context = client_context(material)
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    assert handshake(server_context(material, client_certs=ssl.CERT_NONE), context, hostname) == (None, b"hello None")


def test_a_wrong_hostname_is_refused(material):
    _server, received = handshake(server_context(material, client_certs=ssl.CERT_NONE), client_context(material),
                                  "logstore.example.com")
    assert isinstance(received, ssl.SSLCertVerificationError) and "mismatch" in received.verify_message, received
