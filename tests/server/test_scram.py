"""SCRAM and PLAIN (``logstore.server.security.scram``), the first building block of the security work: RFC 7677's
SCRAM-SHA-256 test vector, our client and server against each other for both mechanisms, against
kafka-python's SCRAM client, and every way an exchange must fail: a wrong password, an unknown user
(the same answer, the same salt when asked twice), a tampered proof or nonce, malformed messages,
and PLAIN checked against the stored SCRAM credential."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logstore.server.security.scram import (MAX_ITERATIONS, MECHANISMS, AuthenticationError, ScramClient,
                                            ScramServer, credential_from_salted, salted_password, scram_credential,
                                            verify_plain)

SECRET = b"server secret"


def _exchange(mechanism: str, user: str, password: str, users: dict) -> str:
    client = ScramClient(mechanism, user, password)
    server = ScramServer(mechanism, users.get, SECRET)
    server_final = server.final(client.final(server.first(client.first())))
    client.verify(server_final)
    return server.user


def test_rfc_7677_sha_256_vector():
    # RFC 7677 §3: user "user", password "pencil", 4096 iterations
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = scram_credential("SCRAM-SHA-256", "pencil", iterations=4096, salt=salt)
    server = ScramServer("SCRAM-SHA-256", {"user": credential}.get, SECRET,
                         nonce=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=lambda: "rOprNGfwEbeRWgbNEkqO")
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = server.first(client.first())
    assert server_first == (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,"
                            b"i=4096")
    client_final = client.final(server_first)
    assert client_final == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                            b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert server.final(client_final) == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.user == "user"


@pytest.mark.parametrize("mechanism", sorted(MECHANISMS))
def test_our_client_and_server_agree_and_a_wrong_password_or_unknown_user_fail_alike(mechanism):
    users = {"alice": scram_credential(mechanism, "s3cret", iterations=4096),
             "b,ob=": scram_credential(mechanism, "pw", iterations=4096)}
    assert _exchange(mechanism, "alice", "s3cret", users) == "alice"
    assert _exchange(mechanism, "b,ob=", "pw", users) == "b,ob="  # escaped as b=2Cob=3D on the wire
    with pytest.raises(AuthenticationError) as wrong:
        _exchange(mechanism, "alice", "guess", users)
    with pytest.raises(AuthenticationError) as unknown:
        _exchange(mechanism, "mallory", "guess", users)
    assert str(wrong.value) == str(unknown.value) == "authentication failed: invalid credentials"
    # An unknown user's salt and iterations are the same each time, like a real user's
    firsts = [ScramServer(mechanism, users.get, SECRET).first(b"n,,n=mallory,r=abc").split(b",")[1:] for _ in range(2)]
    assert firsts[0] == firsts[1]


def test_the_stored_credential_holds_no_password_and_each_salt_is_new():
    one, two = (scram_credential("SCRAM-SHA-512", "hunter22", iterations=4096) for _ in range(2))
    assert one.salt != two.salt and one.stored_key != two.stored_key
    assert b"hunter22" not in repr(one).encode() and len(one.stored_key) == 64
    with pytest.raises(ValueError, match="4096"):
        scram_credential("SCRAM-SHA-256", "pw", iterations=100)
    with pytest.raises(ValueError, match="SCRAM-MD5"):
        scram_credential("SCRAM-MD5", "pw")


def test_kafka_pythons_scram_client_authenticates():
    from kafka.net.sasl.scram import ScramClient as KafkaPythonScramClient

    for mechanism in sorted(MECHANISMS):
        users = {"carol": scram_credential(mechanism, "p@ss", iterations=4096)}
        theirs = KafkaPythonScramClient("carol", "p@ss", mechanism)
        server = ScramServer(mechanism, users.get, SECRET)
        server_first = server.first(theirs.first_message())
        theirs.process_server_first_message(server_first)
        server_final = server.final(theirs.final_message())
        theirs.process_server_final_message(server_final)  # raises if our signature is wrong
        assert server.user == "carol"


def test_tampered_and_malformed_messages_are_refused():
    users = {"alice": scram_credential("SCRAM-SHA-256", "s3cret", iterations=4096)}
    client = ScramClient("SCRAM-SHA-256", "alice", "s3cret")
    server = ScramServer("SCRAM-SHA-256", users.get, SECRET)
    client_final = client.final(server.first(client.first()))
    tampered = client_final[:-6] + (b"AAAAA=" if not client_final.endswith(b"AAAAA=") else b"BBBBB=")
    with pytest.raises(AuthenticationError, match="invalid credentials"):
        server.final(tampered)
    with pytest.raises(AuthenticationError, match="out of turn"):
        server.final(client_final)  # the exchange is over
    for first, why in ((b"y,,n=alice,r=x", "GS2"), (b"n,a=bob,n=alice,r=x", "GS2"), (b"n,,r=x,n=alice", "n=USER"),
                       (b"n,,n=alice,r=x,tokenauth=true", "delegation"), (b"\xff", "UTF-8"), (b"n,,n=a=1,r=x", "escape")):
        with pytest.raises(AuthenticationError, match=why):
            ScramServer("SCRAM-SHA-256", users.get, SECRET).first(first)
    server = ScramServer("SCRAM-SHA-256", users.get, SECRET)
    client = ScramClient("SCRAM-SHA-256", "alice", "s3cret")
    final = client.final(server.first(client.first()))
    with pytest.raises(AuthenticationError, match="nonce"):
        server.final(final.replace(b",p=", b"x,p=", 1))  # the server's part of the nonce changed
    server = ScramServer("SCRAM-SHA-256", users.get, SECRET)
    client = ScramClient("SCRAM-SHA-256", "alice", "s3cret")
    final = client.final(server.first(client.first()))
    with pytest.raises(AuthenticationError, match="invalid credentials"):
        server.final(final.replace(b"r=", b"r=x", 1))  # a nonce that still ends right: the proof fails it
    impostor = ScramServer("SCRAM-SHA-256", {"alice": scram_credential("SCRAM-SHA-256", "other", iterations=4096)}.get,
                           SECRET)
    client = ScramClient("SCRAM-SHA-256", "alice", "s3cret")
    client.final(impostor.first(client.first()))
    with pytest.raises(AuthenticationError, match="signature"):
        client.verify(b"v=" + base64.b64encode(b"x" * 32))


def test_plain_is_checked_against_the_scram_credential():
    users = {"alice": scram_credential("SCRAM-SHA-512", "s3cret", iterations=4096)}
    assert verify_plain(b"\0alice\0s3cret", users.get) == "alice"
    assert verify_plain(b"alice\0alice\0s3cret", users.get) == "alice"
    for message in (b"\0alice\0nope", b"\0mallory\0s3cret"):
        with pytest.raises(AuthenticationError, match="invalid credentials"):
            verify_plain(message, users.get)
    for message, why in ((b"alice\0s3cret", "NUL"), (b"bob\0alice\0s3cret", "authzid"), (b"\0\0x", "empty")):
        with pytest.raises(AuthenticationError, match=why):
            verify_plain(message, users.get)


@settings(max_examples=25, deadline=None)
@given(user=st.text(st.characters(min_codepoint=0x21, max_codepoint=0x2FFF, blacklist_characters="\x7f"), min_size=1,
                   max_size=12),
       password=st.text(st.characters(min_codepoint=0x20, max_codepoint=0x2FFF, blacklist_characters="\x7f"),
                        min_size=1, max_size=16),
       mechanism=st.sampled_from(sorted(MECHANISMS)))
def test_any_user_and_password_round_trip(user, password, mechanism):
    users = {user: scram_credential(mechanism, password, iterations=4096)}
    assert _exchange(mechanism, user, password, users) == user
    with pytest.raises(AuthenticationError):
        _exchange(mechanism, user, password + "x", users)


def test_librdkafkas_doubled_client_nonce_is_accepted_as_kafka_accepts_it():
    """librdkafka before 2.1 (Debian's kcat) sends its own nonce again in front of the combined
    one in the client-final message; Kafka accepts a nonce that ends with the exchange's, and the
    proof, computed over the message as sent, still binds the exchange."""
    import base64
    import hashlib
    import hmac

    users = {"alice": scram_credential("SCRAM-SHA-256", "s3cret", iterations=4096)}
    server = ScramServer("SCRAM-SHA-256", users.get, SECRET)
    client_nonce = "fyko+d2lbbFgONRv9qkxdawL"
    first_bare = f"n=alice,r={client_nonce}"
    server_first = server.first(("n,," + first_bare).encode()).decode()
    fields = dict(part.split("=", 1) for part in server_first.split(","))
    salted = hashlib.pbkdf2_hmac("sha256", b"s3cret", base64.b64decode(fields["s"]), int(fields["i"]))
    without_proof = f"c=biws,r={client_nonce}{fields['r']}"  # the doubled nonce, as librdkafka 2.0 sends it
    auth_message = f"{first_bare},{server_first},{without_proof}".encode()
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    signature = hmac.new(hashlib.sha256(client_key).digest(), auth_message, "sha256").digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
    answer = server.final(f"{without_proof},p={proof}".encode())
    assert answer.startswith(b"v=") and server.user == "alice"


def test_iterations_are_capped_at_kafkas_16384_everywhere():
    """Each PLAIN login costs the server the credential's iterations: no path makes more than
    Kafka's 16384, and our client refuses a server that asks for more."""
    assert scram_credential("SCRAM-SHA-256", "pw", iterations=MAX_ITERATIONS).iterations == 16384
    for make in (lambda n: scram_credential("SCRAM-SHA-256", "pw", iterations=n),
                 lambda n: credential_from_salted("SCRAM-SHA-256", b"salt", n, b"salted"),
                 lambda n: salted_password("SCRAM-SHA-512", "pw", b"salt", n)):
        for bad in (16385, 3_000_000, 4095, 8192.0):
            with pytest.raises(ValueError, match=f"4096..16384, got {bad!r}"):
                make(bad)
    client = ScramClient("SCRAM-SHA-256", "alice", "pw")
    nonce = client.first().decode().split("r=")[1]
    with pytest.raises(AuthenticationError, match="3000000 iterations"):
        client.final(f"r={nonce}xyz,s=c2FsdA==,i=3000000".encode())
