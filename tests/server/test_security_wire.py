"""The server's security behaviour on the wire, where clients hide it: raw sockets (Python's
``ssl`` for TLS) and the server's own codec.

- an unauthenticated scanner on a SASL listener gets ApiVersions, and nothing else: Metadata,
  Produce, Fetch or ListGroups before authenticating close the connection without an answer byte,
  the store is unchanged, and no topic name is in anything it received;
- the SASL state machine: an unknown mechanism gets UNSUPPORTED_SASL_MECHANISM with the enabled
  ones, SaslAuthenticate before SaslHandshake gets ILLEGAL_SASL_STATE, and so does a SaslHandshake
  on a listener without SASL; SaslHandshake v0 then bare tokens (PLAIN, SCRAM-SHA-256/512)
  authenticates, and the connection then serves requests;
- the brute-force throttle: a host that keeps guessing gets its answers one after another, later and
  later (100, 200, 400... ms, up to 2 s each), however many connections it opens; at most
  ``sasl.max.pending.per.host`` of its attempts are held, the rest closed at once; a correct login
  from another host goes through at once, one from the guessing host within a few seconds once it
  stops, and the server stays responsive to everyone else;
- PLAIN's password checks run on their own thread: wrong PLAIN logins whose checks do not finish
  leave the request handler threads free (a Metadata of another client is answered meanwhile);
- failed authentications are logged with the peer's address, never the password, one line per host
  per 10 s with a count of the ones left out;
- TLS: a plaintext client on a TLS port gets no Kafka answer, and the server keeps serving others;
  the server key's password is never shown (DescribeConfigs: sensitive, no value).

Every server binds 127.0.0.1 and is stopped by its fixture; every socket read has a timeout. ACLs are
off (authorizer.enable=false): authorization is tested elsewhere.
"""

from __future__ import annotations

import logging
import socket
import threading
import time

import pytest

from logstore import Record
from logstore.clock import SYSTEM_CLOCK
from logstore.server.protocol import errors
from logstore.server.security import sasl
from logstore.server.security.sasl import MAX_FAILURE_DELAY_MS, MAX_PENDING_PER_HOST
from logstore.server.security.scram import ScramClient
from logstore.server.wire_records import encode_produce_batch
from security_helpers import (API_VERSIONS, DESCRIBE_CONFIGS, FETCH, LIST_GROUPS, METADATA, PASSWORD, PRODUCE,
                              SASL_AUTHENTICATE, SASL_HANDSHAKE, USER, SecureWireClient, decode, secured_server)
from tls_material import client_context, make_tls_material

SECRET_TOPIC = "payroll-secret-topic"
ENABLED = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
SASL_PROTOCOLS = ["SASL_PLAINTEXT", "SASL_SSL"]


@pytest.fixture(scope="session")
def tls_material(tmp_path_factory):
    return make_tls_material(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def server(tmp_path_factory, tls_material):
    """Every listener, the default authentication delay, and a topic with records a scanner must
    not learn about."""
    with secured_server(tmp_path_factory.mktemp("security-wire") / "data", tls_material) as running:
        running.store.create_topic(SECRET_TOPIC, partitions=1)
        running.store.append(SECRET_TOPIC, [Record(b"k", b"salary", [], 1_700_000_000_000)], partition=0)
        yield running


@pytest.fixture
def connect(server, tls_material):
    """``connect(protocol, source=None)`` -> a SecureWireClient to that listener (TLS ones trust the
    test CA), closed after the test."""
    clients = []

    def make(protocol: str, source: str | None = None, timeout_s: float = 5.0, target=None) -> SecureWireClient:
        context = client_context(tls_material) if protocol.endswith("SSL") else None
        client = SecureWireClient((target or server).bootstrap_for(protocol), context, source=source,
                                  timeout_s=timeout_s)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def api_versions(client: SecureWireClient) -> dict:
    return client.call(API_VERSIONS, 3, {"client_software_name": "security-test", "client_software_version": "1"})


def metadata(client: SecureWireClient) -> dict:
    return client.call(METADATA, 1, {"topics": None})


def store_state(store) -> dict:
    """Every topic and the log end offset of each of its partitions."""
    return {topic: [store.get_log(topic, p).log_end_offset for p in range(store.partitions(topic))]
            for topic in sorted(store.topics())}


def produce_body(topic: str) -> dict:
    return {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": encode_produce_batch(
            [Record(b"k", b"injected", [], 1_700_000_000_000)])}]}]}


def fetch_body(topic: str) -> dict:
    return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                                        "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}


FORBIDDEN = {  # name -> (api key, version, body)
    "Metadata": (METADATA, 1, {"topics": None}),
    "Produce": (PRODUCE, 8, produce_body(SECRET_TOPIC)),
    "Produce-new-topic": (PRODUCE, 8, produce_body("created-by-a-scanner")),
    "Fetch": (FETCH, 11, fetch_body(SECRET_TOPIC)),
    "ListGroups": (LIST_GROUPS, 4, {"states_filter": []}),
}


# --- the unauthenticated scanner -------------------------------------------------------------------

@pytest.mark.parametrize("request_name", list(FORBIDDEN))
@pytest.mark.parametrize("protocol", SASL_PROTOCOLS)
def test_scanner_gets_api_versions_and_nothing_else(server, connect, protocol, request_name):
    """Before authenticating, ApiVersions is answered; any other request closes the connection with
    not one byte of answer. The store is unchanged and no topic name reached the scanner."""
    before = store_state(server.store)
    scanner = connect(protocol)
    versions = api_versions(scanner)
    assert versions["error_code"] == errors.NONE
    assert {entry["api_key"] for entry in versions["api_keys"]} >= {SASL_HANDSHAKE, SASL_AUTHENTICATE}
    api_key, version, body = FORBIDDEN[request_name]
    scanner.send(api_key, version, body)
    answer, closed = scanner.read_all(timeout_s=3)
    assert closed and answer == b"", (closed, answer)
    assert store_state(server.store) == before
    assert SECRET_TOPIC.encode() not in scanner.received
    assert b"created-by-a-scanner" not in scanner.received
    # The others are still served: an authenticated client sees the topic
    assert SECRET_TOPIC in {topic["name"] for topic in metadata(authenticated(connect, "SASL_PLAINTEXT"))["topics"]}


def authenticated(connect, protocol: str, mechanism: str = "SCRAM-SHA-256", **kwargs) -> SecureWireClient:
    """A connection authenticated with SaslHandshake v1 and SaslAuthenticate v1."""
    client = connect(protocol, **kwargs)
    assert sasl_login(client, mechanism, USER, PASSWORD) is None
    return client


def sasl_login(client: SecureWireClient, mechanism: str, user: str, password: str):
    """SaslHandshake v1 + SaslAuthenticate v1 (PLAIN: one token; SCRAM: two, the server's signature
    checked). None when authenticated; else the failed SaslAuthenticate response, or "closed" when
    the server closed the connection without one."""
    assert client.call(SASL_HANDSHAKE, 1, {"mechanism": mechanism})["error_code"] == errors.NONE
    try:
        if mechanism == "PLAIN":
            answer = client.call(SASL_AUTHENTICATE, 1, {"auth_bytes": f"\0{user}\0{password}".encode()})
            return None if answer["error_code"] == errors.NONE else answer
        scram = ScramClient(mechanism, user, password)
        first = client.call(SASL_AUTHENTICATE, 1, {"auth_bytes": scram.first()})
        if first["error_code"] != errors.NONE:
            return first
        final = client.call(SASL_AUTHENTICATE, 1, {"auth_bytes": scram.final(first["auth_bytes"])})
    except (ConnectionError, OSError):
        return "closed"
    if final["error_code"] != errors.NONE:
        return final
    scram.verify(final["auth_bytes"])
    return None


# --- the SASL state machine -------------------------------------------------------------------------

@pytest.mark.parametrize("protocol", SASL_PROTOCOLS)
def test_unknown_mechanism_is_refused_with_the_enabled_ones(connect, protocol):
    client = connect(protocol)
    answer = client.call(SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
    assert answer == {"error_code": errors.UNSUPPORTED_SASL_MECHANISM, "mechanisms": ENABLED}
    assert client.is_closed_by_server(3)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_authenticate_before_handshake_is_an_illegal_state(connect, version):
    client = connect("SASL_PLAINTEXT")
    answer = client.call(SASL_AUTHENTICATE, version, {"auth_bytes": f"\0{USER}\0{PASSWORD}".encode()})
    assert answer["error_code"] == errors.ILLEGAL_SASL_STATE
    assert client.is_closed_by_server(3)


@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SSL"])
def test_handshake_on_a_listener_without_sasl_is_an_illegal_state(connect, protocol):
    client = connect(protocol)
    assert client.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}) == {"error_code": errors.ILLEGAL_SASL_STATE,
                                                                        "mechanisms": []}
    assert SECRET_TOPIC in {topic["name"] for topic in metadata(client)["topics"]}  # still served


def test_second_handshake_after_login_is_an_illegal_state(connect):
    client = authenticated(connect, "SASL_SSL", "PLAIN")
    assert client.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == errors.ILLEGAL_SASL_STATE


@pytest.mark.parametrize("mechanism", ENABLED)
@pytest.mark.parametrize("protocol", SASL_PROTOCOLS)
def test_handshake_v0_then_bare_tokens(fresh_server, connect, protocol, mechanism):
    """SaslHandshake v0, then the tokens as bare size-prefixed frames (PLAIN: one, answered by an
    empty frame; SCRAM: client-first and client-final, answered by the server's messages, whose
    signature proves it holds the credential); then Kafka requests on the same connection, and on
    others. (A server of its own: a server that hangs here must not take the module's down.)"""
    target = fresh_server()
    client = connect(protocol, target=target, timeout_s=3)
    assert client.call(SASL_HANDSHAKE, 0, {"mechanism": mechanism}) == {"error_code": errors.NONE,
                                                                          "mechanisms": ENABLED}
    if mechanism == "PLAIN":
        client.send_token(f"\0{USER}\0{PASSWORD}".encode())
        assert client.receive_token() == b""
    else:
        scram = ScramClient(mechanism, USER, PASSWORD)
        client.send_token(scram.first())
        server_first = client.receive_token()
        client.send_token(scram.final(server_first))
        scram.verify(client.receive_token())
    assert api_versions(client)["error_code"] == errors.NONE
    assert metadata(client)["brokers"]
    assert api_versions(connect("PLAINTEXT", target=target, timeout_s=3))["error_code"] == errors.NONE


def test_handshake_v0_with_a_wrong_password_closes_without_an_answer(fresh_server, connect):
    """A bare PLAIN token with a wrong password: the connection is closed (the bare exchange has no
    way to say why), after the throttle's delay; the server goes on serving others."""
    target = fresh_server()
    client = connect("SASL_PLAINTEXT", target=target, timeout_s=3)
    client.call(SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})
    client.send_token(f"\0{USER}\0wrong".encode())
    answer, closed = client.read_all(timeout_s=3)
    assert closed and answer == b""
    assert api_versions(connect("PLAINTEXT", target=target, timeout_s=3))["error_code"] == errors.NONE


@pytest.mark.parametrize("mechanism", ENABLED)
def test_handshake_v1_login_then_requests(connect, mechanism):
    client = authenticated(connect, "SASL_SSL", mechanism)
    assert SECRET_TOPIC in {topic["name"] for topic in metadata(client)["topics"]}


# --- brute force -------------------------------------------------------------------------------------

ATTACK_S = 3.0
ATTACKERS = 3
BASELINE_S = 0.5  # the same attack without the throttle, for comparison


def policy_answers(window_ms: int, delay_ms: int = 100) -> int:
    """The most failure answers one host can receive within ``window_ms`` of its first attempt:
    they leave one after another, the n-th ``min(2 s, delay * 2**n)`` after the one before it."""
    count, due = 0, 0
    while True:
        due += min(MAX_FAILURE_DELAY_MS, delay_ms << count)
        if due > window_ms:
            return count
        count += 1


def attack(address: str, seconds: float, attackers: int, stop: threading.Event) -> dict:
    """``attackers`` threads, each trying wrong SCRAM-SHA-256 passwords over SaslAuthenticate v1 on a
    new connection each time, until ``seconds`` passed: the failure answers each received in that
    window (the sockets of attempts still waiting then are shut down)."""
    results = {"answers": 0, "closed": 0, "answer_times": []}
    lock = threading.Lock()
    sockets: list = []
    start = time.monotonic()
    deadline = start + seconds

    def run(index: int):
        attempt = 0
        while time.monotonic() < deadline and not stop.is_set():
            attempt += 1
            try:
                client = SecureWireClient(address, timeout_s=seconds + MAX_PENDING_PER_HOST * MAX_FAILURE_DELAY_MS / 1000 + 5)
            except OSError:
                continue
            with lock:
                sockets.append(client.sock)
            try:
                outcome = sasl_login(client, "SCRAM-SHA-256", USER, f"guess-{index}-{attempt}")
            finally:
                client.close()
            at = time.monotonic()
            if at > deadline:
                return
            with lock:
                if outcome == "closed":
                    results["closed"] += 1
                else:
                    assert outcome["error_code"] == errors.SASL_AUTHENTICATION_FAILED, outcome
                    results["answers"] += 1
                    results["answer_times"].append(round(at - start, 3))

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(attackers)]
    for thread in threads:
        thread.start()
    results["threads"] = threads
    results["sockets"] = sockets
    results["start"] = start
    return results


def end_attack(results: dict, stop: threading.Event) -> None:
    """Wait for the window to end, then unblock the attempts still waiting for a held answer."""
    remaining = results["start"] + ATTACK_S - time.monotonic()
    if remaining > 0:
        time.sleep(remaining)
    stop.set()
    for sock in list(results["sockets"]):
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    for thread in results["threads"]:
        thread.join(5)
    assert not any(thread.is_alive() for thread in results["threads"])


@pytest.fixture
def fresh_server(tmp_path, tls_material):
    """``fresh_server(**config)``: a server of the test's own (a fresh throttle and failure log)."""
    made = []

    def make(config: dict | None = None, clock=None):
        manager = secured_server(tmp_path / f"data{len(made)}", tls_material, config=config, clock=clock)
        made.append(manager)
        return manager.__enter__()

    yield make
    for manager in reversed(made):
        manager.__exit__(None, None, None)


def test_brute_force_is_throttled_per_host(fresh_server, connect, tls_material, record_property):
    """Three connections from 127.0.0.1 guessing SCRAM passwords for 3 s get at most the answers the
    policy lets out (100, 200, 400, 800 ms... apart, one after another: 4 in 3 s), against hundreds
    without the throttle; meanwhile a correct login from another loopback address (127.0.0.2) is answered at once, and a
    PLAINTEXT round trip takes well under 0.5 s; once the guessing stops, a correct login from the
    guessing host goes through within the backlog it could build (at most 4 delays)."""
    # Without the throttle (delay 0), for comparison: the same attack for BASELINE_S
    unthrottled_server = fresh_server({"connection.failed.authentication.delay.ms": 0})
    stop = threading.Event()
    baseline = attack(unthrottled_server.bootstrap_for("SASL_PLAINTEXT"), BASELINE_S, ATTACKERS, stop)
    time.sleep(BASELINE_S)
    stop.set()
    for thread in baseline["threads"]:
        thread.join(5)
    unthrottled = round(baseline["answers"] * ATTACK_S / BASELINE_S)

    target = fresh_server()  # connection.failed.authentication.delay.ms: the default, 100
    stop = threading.Event()
    results = attack(target.bootstrap_for("SASL_PLAINTEXT"), ATTACK_S, ATTACKERS, stop)
    try:
        time.sleep(0.5)
        other_host = connect("SASL_PLAINTEXT", source="127.0.0.2", target=target)
        started = time.monotonic()
        assert sasl_login(other_host, "SCRAM-SHA-256", USER, PASSWORD) is None
        other_host_s = time.monotonic() - started

        plain = connect("PLAINTEXT", target=target)
        started = time.monotonic()
        assert api_versions(plain)["error_code"] == errors.NONE
        metadata(plain)
        plaintext_s = time.monotonic() - started
    finally:
        end_attack(results, stop)
    started = time.monotonic()
    same_host_s = correct_login_within(target, connect, MAX_PENDING_PER_HOST * MAX_FAILURE_DELAY_MS / 1000 + 2)

    bound = policy_answers(int(ATTACK_S * 1000))
    numbers = {"failure answers in 3 s": results["answers"], "at (s)": results["answer_times"],
               "closed unverified": results["closed"], "policy bound": bound, "unthrottled (est. 3 s)": unthrottled,
               "other host login (ms)": round(other_host_s * 1000, 1), "same host login (ms)": round(same_host_s * 1000, 1),
               "PLAINTEXT ApiVersions+Metadata (ms)": round(plaintext_s * 1000, 1)}
    record_property("brute_force", numbers)
    print("brute force:", numbers)
    assert bound == 4
    assert 1 <= results["answers"] <= bound, numbers
    assert unthrottled >= 10 * bound, numbers
    assert other_host_s < 1.0, numbers
    assert plaintext_s < 0.5, numbers


def correct_login_within(target, connect, seconds: float) -> float:
    """Log in correctly from 127.0.0.1, again on a new connection while attempts are closed
    unchecked, until it succeeds (the seconds it took) or ``seconds`` passed (a failed assertion)."""
    started = time.monotonic()
    while True:
        client = connect("SASL_PLAINTEXT", target=target, timeout_s=seconds + 1)
        outcome = sasl_login(client, "SCRAM-SHA-256", USER, PASSWORD)
        if outcome is None:
            assert metadata(client)["brokers"]  # then served
            return time.monotonic() - started
        assert outcome == "closed", outcome  # closed unchecked, never answered as a failure
        assert time.monotonic() - started < seconds, f"no correct login within {seconds} s"
        time.sleep(0.1)


def test_a_flood_of_wrong_logins_holds_few_connections_and_a_correct_login_follows(fresh_server, connect):
    """The probe's case on real sockets: 40 wrong PLAIN logins from one host at once. At most
    ``sasl.max.pending.per.host`` are answered (late, as failures); every other one is closed at once,
    so the server holds at most that many of the host's connections; once they stop, a correct login
    from the same host goes through within the backlog those few could build (4 delays: 1.5 s here)."""
    target = fresh_server()
    guessers = []
    for attempt in range(40):
        client = connect("SASL_PLAINTEXT", target=target, timeout_s=10)
        assert client.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == errors.NONE
        client.send(SASL_AUTHENTICATE, 1, {"auth_bytes": f"\0{USER}\0guess-{attempt}".encode()})
        guessers.append(client)
    answered = closed_at_once = 0
    for client in guessers:
        data, closed = client.read_all(timeout_s=MAX_PENDING_PER_HOST * MAX_FAILURE_DELAY_MS / 1000 + 2)
        assert closed, "a guess was neither answered nor closed"
        if data:
            answered += 1
            assert decode(SASL_AUTHENTICATE, 1, data[4:])["error_code"] == errors.SASL_AUTHENTICATION_FAILED
        else:
            closed_at_once += 1
    assert answered <= MAX_PENDING_PER_HOST and answered + closed_at_once == 40, (answered, closed_at_once)
    correct_login_within(target, connect, MAX_PENDING_PER_HOST * MAX_FAILURE_DELAY_MS / 1000 + 2)


def test_password_checks_leave_the_request_handlers_free(fresh_server, connect, monkeypatch):
    """Wrong PLAIN logins whose password checks cannot finish (each held on an event here: a
    high-iteration PBKDF2 on a busy machine, deterministically) occupy no request handler thread:
    with one handler thread (num.io.threads=1), a Metadata from a PLAINTEXT client is answered while
    they wait, and the checks ran on the password check thread. Then they are answered as failures."""
    release = threading.Event()
    ran_on: list[str] = []
    verify_plain = sasl.verify_plain

    def held_verify_plain(token, lookup):
        ran_on.append(threading.current_thread().name)
        release.wait(30)
        return verify_plain(token, lookup)

    monkeypatch.setattr(sasl, "verify_plain", held_verify_plain)
    target = fresh_server({"num.io.threads": 1})
    guessers = []
    try:
        for attempt in range(3):
            client = connect("SASL_PLAINTEXT", target=target, timeout_s=10)
            assert client.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == errors.NONE
            client.send(SASL_AUTHENTICATE, 1, {"auth_bytes": f"\0{USER}\0guess-{attempt}".encode()})
            guessers.append(client)
        deadline = time.monotonic() + 10
        while not ran_on and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ran_on, "no password check started"
        plain = connect("PLAINTEXT", target=target, timeout_s=10)
        assert metadata(plain)["brokers"]  # the only handler thread is free
        assert not release.is_set()
        assert ran_on == ["logstore-server-password-check-0"], ran_on
    finally:
        release.set()
    for client in guessers:
        data, closed = client.read_all(timeout_s=10)
        assert closed and decode(SASL_AUTHENTICATE, 1, data[4:])["error_code"] == errors.SASL_AUTHENTICATION_FAILED


# --- the failure log ------------------------------------------------------------------------------

class SkewedClock:
    """The system clock, ``offset_ms`` ahead once ``advance`` is called (both readings)."""

    def __init__(self):
        self.offset_ms = 0

    def time_ms(self) -> int:
        return SYSTEM_CLOCK.time_ms() + self.offset_ms

    def monotonic_ms(self) -> int:
        return SYSTEM_CLOCK.monotonic_ms() + self.offset_ms

    def sleep_ms(self, delay_ms: int) -> None:
        SYSTEM_CLOCK.sleep_ms(delay_ms)

    def advance(self, delta_ms: int) -> None:
        self.offset_ms += delta_ms


def test_failures_are_logged_with_the_peer_never_the_password(fresh_server, connect, caplog):
    """Each failure's log line names the peer (address and port), the listener, the mechanism and
    the user, never the password; failures of one host within 10 s are one line, and the next line
    says how many were left out."""
    caplog.set_level(logging.INFO, logger="logstore.server.security.sasl")
    clock = SkewedClock()
    target = fresh_server({"connection.failed.authentication.delay.ms": 0}, clock=clock)
    passwords = []

    def fail(mechanism: str, user: str = USER) -> int:
        client = connect("SASL_PLAINTEXT", target=target)
        port = client.sock.getsockname()[1]
        password = f"hunter2-{len(passwords)}-secret"
        passwords.append(password)
        outcome = sasl_login(client, mechanism, user, password)
        assert outcome != "closed" and outcome["error_code"] == errors.SASL_AUTHENTICATION_FAILED
        return port

    def lines():
        return [record.getMessage() for record in caplog.records if record.name == "logstore.server.security.sasl"]

    first_port = fail("PLAIN")
    fail("SCRAM-SHA-256")
    fail("SCRAM-SHA-512", "mallory")
    logged = lines()
    assert len(logged) == 1, logged
    assert f"127.0.0.1:{first_port}" in logged[0] and "SASL_PLAINTEXT" in logged[0], logged
    assert "PLAIN" in logged[0] and f"user {USER!r}" in logged[0], logged

    clock.advance(11_000)
    last_port = fail("SCRAM-SHA-256")
    logged = lines()
    assert len(logged) == 2, logged
    assert f"127.0.0.1:{last_port}" in logged[1], logged
    assert "2 more from 127.0.0.1 in the last 10 s not logged" in logged[1], logged
    everything = "\n".join(caplog.text.splitlines() + [record.getMessage() for record in caplog.records])
    for password in passwords:
        assert password not in everything


# --- TLS on the wire ----------------------------------------------------------------------------

@pytest.mark.parametrize("protocol", ["SSL", "SASL_SSL"])
def test_plaintext_client_on_a_tls_port_gets_no_kafka_answer(server, connect, protocol, caplog):
    """A client speaking Kafka in the clear to a TLS listener: the handshake fails, the connection
    closes, and nothing it got back is a Kafka answer (at most a TLS alert record); the server keeps
    serving TLS and plaintext clients."""
    caplog.set_level(logging.WARNING, logger="logstore.server.network.socket_server")
    host, port = server.bootstrap_for(protocol).rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        plain = SecureWireClient.__new__(SecureWireClient)
        plain.sock, plain.client_id, plain.correlation_id, plain.received = sock, "plain", 0, bytearray()
        plain.send(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
        answer, closed = plain.read_all(timeout_s=5)
    assert closed, answer
    assert answer == b"" or answer[0] == 0x15, answer  # 0x15: a TLS alert record, not a Kafka frame
    assert SECRET_TOPIC.encode() not in answer
    assert api_versions(connect("SSL"))["error_code"] == errors.NONE
    assert SECRET_TOPIC in {topic["name"] for topic in metadata(connect("PLAINTEXT"))["topics"]}
    deadline = time.monotonic() + 3
    while not any("TLS handshake failed" in record.getMessage() for record in caplog.records):
        assert time.monotonic() < deadline, "the server did not log the failed handshake"
        time.sleep(0.02)


def test_key_password_is_never_shown(tmp_path, tls_material, caplog):
    """A server started with the encrypted server key and its password (ssl.key.password) serves
    TLS, and DescribeConfigs of the broker answers ssl.key.password as sensitive with no value; the
    password is in nothing it sent and in no log line."""
    caplog.set_level(logging.DEBUG, logger="logstore")
    config = {"ssl.key.location": str(tls_material.server_key_encrypted),
              "ssl.key.password": tls_material.server_key_password}
    password = tls_material.server_key_password.encode()
    with secured_server(tmp_path / "data", tls_material, listen=["SSL://127.0.0.1:0", "PLAINTEXT://127.0.0.1:0"],
                        config=config) as target:
        for protocol in ("SSL", "PLAINTEXT"):
            client = SecureWireClient(target.bootstrap_for(protocol),
                                      client_context(tls_material) if protocol == "SSL" else None)
            try:
                for name in ("0", ""):
                    answer = client.call(DESCRIBE_CONFIGS, 2, {"resources": [
                        {"resource_type": 4, "resource_name": name, "configuration_keys": None}],
                        "include_synonyms": True})
                    (result,) = answer["results"]
                    assert result["error_code"] == errors.NONE
                    entries = {entry["name"]: entry for entry in result["configs"]}
                    entry = entries["ssl.key.password"]
                    assert entry["is_sensitive"] is True and entry["value"] is None, entry
                    assert all(synonym["value"] is None for synonym in entry["synonyms"]), entry
                    assert entries["ssl.key.location"]["value"] == str(tls_material.server_key_encrypted)
                    only = client.call(DESCRIBE_CONFIGS, 0, {"resources": [
                        {"resource_type": 4, "resource_name": name, "configuration_keys": ["ssl.key.password"]}]})
                    assert [(c["name"], c["value"], c["is_sensitive"]) for c in only["results"][0]["configs"]] == [
                        ("ssl.key.password", None, True)]
                assert password not in client.received
            finally:
                client.close()
        assert password.decode() not in repr(target.config)
    assert password.decode() not in caplog.text
