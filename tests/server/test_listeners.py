"""Listeners (``logstore.server.security.listeners``): parsing several ``PROTOCOL://HOST:PORT`` values and
their advertised addresses, the rule against a remote PLAINTEXT listener, TLS settings refused with
a clear message, and the principal read from a client certificate's subject."""

from __future__ import annotations

import ssl

import pytest

from logstore.errors import InvalidConfigError
from logstore.server.security.listeners import (ANONYMOUS, TlsSettings, is_loopback, parse_listener, parse_listeners,
                                                principal_from_certificate, server_ssl_context)
from tls_material import make_tls_material


@pytest.fixture(scope="module")
def material(tmp_path_factory):
    return make_tls_material(tmp_path_factory.mktemp("tls"))


def test_a_bare_address_is_plaintext_and_protocols_are_case_insensitive():
    assert parse_listener("127.0.0.1:9092").protocol == "PLAINTEXT"
    listener = parse_listener("sasl_ssl://0.0.0.0:9093")
    assert (listener.protocol, listener.host, listener.port) == ("SASL_SSL", "0.0.0.0", 9093)
    assert listener.uses_tls and listener.uses_sasl
    assert str(parse_listener("SSL://[::1]:9094")) == "SSL://[::1]:9094"


@pytest.mark.parametrize("text, message", [
    ("KERBEROS://127.0.0.1:9092", "unknown security protocol 'KERBEROS'"),
    ("PLAINTEXT://127.0.0.1:port", "numeric port"),
    ("PLAINTEXT://127.0.0.1:70000", "0..65535"),
])
def test_a_bad_listener_is_refused_naming_it(text, message):
    with pytest.raises(ValueError, match=message):
        parse_listener(text)


def test_several_listeners_each_get_their_own_advertised_address(material):
    tls = TlsSettings(keystore=str(material.server_cert), key=str(material.server_key))
    listeners = parse_listeners(["SASL_SSL://0.0.0.0:9093", "PLAINTEXT://127.0.0.1:9092"],
                                ["SASL_SSL://broker.example:19093"], tls=tls)
    by_protocol = {listener.protocol: listener for listener in listeners}
    assert (by_protocol["SASL_SSL"].advertised_host, by_protocol["SASL_SSL"].advertised_port) == ("broker.example", 19093)
    assert by_protocol["PLAINTEXT"].advertised_host is None
    assert isinstance(by_protocol["SASL_SSL"].ssl_context, ssl.SSLContext)
    assert by_protocol["PLAINTEXT"].ssl_context is None


def test_listener_names_must_differ_and_an_advertised_address_needs_its_listener():
    with pytest.raises(ValueError, match="two listeners with the security protocol PLAINTEXT"):
        parse_listeners(["127.0.0.1:9092", "PLAINTEXT://127.0.0.1:9093"])
    with pytest.raises(ValueError, match="has no SSL listener"):
        parse_listeners(["127.0.0.1:9092"], ["SSL://h:1"])
    with pytest.raises(ValueError, match="names no protocol"):
        parse_listeners(["127.0.0.1:9092", "SASL_PLAINTEXT://127.0.0.1:9093"], ["h:1"])
    # one listener: a bare advertised address is that listener's
    assert parse_listeners("127.0.0.1:0", "h:1")[0].advertised_host == "h"


def test_a_plaintext_listener_beyond_loopback_needs_an_explicit_flag():
    with pytest.raises(ValueError, match="allow-plaintext-remote"):
        parse_listeners(["PLAINTEXT://0.0.0.0:9092"])
    assert parse_listeners(["PLAINTEXT://0.0.0.0:9092"], allow_plaintext_remote=True)[0].host == "0.0.0.0"
    # SASL without TLS on a remote address is allowed (SCRAM never sends the password)
    assert parse_listeners(["SASL_PLAINTEXT://0.0.0.0:9092"])[0].protocol == "SASL_PLAINTEXT"
    assert is_loopback("127.0.0.2") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3") and not is_loopback("example.org")


def test_tls_settings_that_cannot_work_are_refused_naming_the_file_never_the_password(material, tmp_path):
    with pytest.raises(InvalidConfigError, match="ssl.keystore.location"):
        parse_listeners(["SSL://127.0.0.1:0"])
    with pytest.raises(InvalidConfigError, match="no such file"):
        server_ssl_context(TlsSettings(keystore=str(tmp_path / "missing.pem")))
    with pytest.raises(InvalidConfigError, match="needs ssl.truststore.location"):
        server_ssl_context(TlsSettings(keystore=str(material.server_pem), client_auth="required"))
    wrong = TlsSettings(keystore=str(material.server_cert), key=str(material.server_key_encrypted),
                        key_password="not-" + material.server_key_password)
    with pytest.raises(InvalidConfigError) as refused:
        server_ssl_context(wrong)
    assert material.server_key_password not in str(refused.value) and "not-" not in str(refused.value)
    assert material.server_key_password not in repr(TlsSettings(key_password=material.server_key_password))
    right = TlsSettings(keystore=str(material.server_cert), key=str(material.server_key_encrypted),
                        key_password=material.server_key_password)
    assert server_ssl_context(right).verify_mode == ssl.CERT_NONE
    with pytest.raises(InvalidConfigError, match="ssl.client.auth"):
        TlsSettings.from_config({"ssl.client.auth": "sometimes"})
    with pytest.raises(InvalidConfigError, match="ssl.enabled.protocols"):
        TlsSettings.from_config({"ssl.enabled.protocols": "TLSv1.1"})
    assert TlsSettings.from_config({"ssl.enabled.protocols": "TLSv1.3"}).minimum_version == "TLSv1.3"


def test_the_principal_of_a_certificate_is_its_subject_in_rfc_2253_order():
    subject = ((("organizationName", "logstore"),), (("organizationalUnitName", "test"),), (("commonName", "alice"),))
    assert principal_from_certificate({"subject": subject}) == "User:CN=alice,OU=test,O=logstore"
    tricky = ((("commonName", "a,b+c"),), (("organizationName", " lead"),))
    assert principal_from_certificate({"subject": tricky}) == "User:O=\\ lead,CN=a\\,b\\+c"
    multi = ((("commonName", "x"), ("userId", "7")),)
    assert principal_from_certificate({"subject": multi}) == "User:CN=x+UID=7"
    assert principal_from_certificate(None) == ANONYMOUS
    assert principal_from_certificate({}) == ANONYMOUS
