"""The authentication throttle and the session (``logstore.server.security.sasl``) on a manual clock: how
long a failed attempt's answer is held, that one host's answers leave one after another, that a
success does not overtake held failures, that one host has at most ``max_pending`` attempts checked
or held (the rest are closed unchecked, at once) and that its correct login goes through within a
few delays once it stops guessing, that failures are forgotten after a while; that PLAIN's password
checks are bounded in total (a full pool closes an attempt unchecked); and a hypothesis model of the
answer times."""

from __future__ import annotations

import logging
import threading

import pytest
from hypothesis import given, settings, strategies as st

from logstore.clock import ManualClock
from logstore.server.security import sasl
from logstore.server.security.listeners import ANONYMOUS
from logstore.server.security.authorization import DenialLog
from logstore.server.protocol import errors
from logstore.server.security.password_checks import PasswordChecks
from logstore.server.security.sasl import AuthenticationThrottle, SaslAuthenticator, Session
from logstore.server.security.scram import ScramClient, scram_credential
from test_sasl_model import FakeContext

SASL_AUTHENTICATE = 36


def test_failures_are_answered_later_and_later_and_one_host_is_served_in_turn():
    clock = ManualClock()
    throttle = AuthenticationThrottle(100, clock=clock)
    # five failures at the same instant (five connections): each answer leaves after the previous
    delays = [throttle.answer_delay_ms("10.0.0.1", failed=True) for _ in range(5)]
    assert delays == [100, 300, 700, 1500, 3100]
    # another host is not slowed by the first
    assert throttle.answer_delay_ms("10.0.0.2", failed=True) == 100
    # a success of the first host waits for the held answers (its speed would tell a guesser)
    assert throttle.answer_delay_ms("10.0.0.1", failed=False) == 3100
    assert throttle.answer_delay_ms("10.0.0.3", failed=False) == 0
    # the delay per failure stops growing at MAX_FAILURE_DELAY_MS
    clock.advance(3100)
    for _ in range(5):
        throttle.answer_delay_ms("10.0.0.1", failed=True)
    clock.advance(100_000)  # long after: forgotten
    assert throttle.answer_delay_ms("10.0.0.1", failed=True) == 100


def test_one_host_has_at_most_max_pending_attempts_checked_or_held():
    clock = ManualClock()
    throttle = AuthenticationThrottle(100, clock=clock, max_pending=3)
    assert [throttle.admit("10.0.0.9") for _ in range(4)] == [True, True, True, False]  # three being checked
    assert throttle.pending("10.0.0.9") == 3
    assert throttle.admit("10.0.0.8")  # another host is not touched
    throttle.release("10.0.0.8")
    delays = [throttle.answer_delay_ms("10.0.0.9", failed=True) for _ in range(3)]
    assert delays == [100, 300, 700] and throttle.pending("10.0.0.9") == 3  # now held
    assert not any(throttle.admit("10.0.0.9") for _ in range(300))  # closed unchecked: nothing added
    assert throttle.answer_delay_ms("10.0.0.9", failed=False) == 700  # the backlog did not grow
    clock.advance(100)  # the first held answer left: room for one more attempt
    assert throttle.pending("10.0.0.9") == 2
    assert throttle.admit("10.0.0.9") and not throttle.admit("10.0.0.9")
    throttle.release("10.0.0.9")
    clock.advance(600)
    assert throttle.pending("10.0.0.9") == 0


def test_a_correct_login_goes_through_within_a_few_delays_after_a_flood_of_wrong_ones():
    """The probe's case: 300 wrong passwords from one host at once. At most ``max_pending`` are
    checked and held, the rest closed at once; the guesser's backlog is at most that many delays,
    so its correct login is admitted and answered within seconds of the flood's end."""
    clock = ManualClock()
    throttle = AuthenticationThrottle(100, clock=clock)  # the default max_pending
    held = []
    for _ in range(300):  # at the same instant, on 300 connections
        if throttle.admit("10.0.0.9"):
            held.append(throttle.answer_delay_ms("10.0.0.9", failed=True))
    assert len(held) == sasl.MAX_PENDING_PER_HOST
    stopped_ms = clock.monotonic_ms()
    while not throttle.admit("10.0.0.9"):
        clock.advance(100)
        assert clock.monotonic_ms() - stopped_ms <= sasl.MAX_PENDING_PER_HOST * sasl.MAX_FAILURE_DELAY_MS
    delay = throttle.answer_delay_ms("10.0.0.9", failed=False)
    assert clock.monotonic_ms() + delay - stopped_ms <= sasl.MAX_PENDING_PER_HOST * sasl.MAX_FAILURE_DELAY_MS


def authenticate_request(session) -> FakeContext:
    """A SaslAuthenticate request as the authenticator sees it, recording how it was finished."""
    return FakeContext(session, SASL_AUTHENTICATE)


def scram_attempt(authenticator, password: str, host: str = "10.0.0.9"):
    """One connection's SCRAM-SHA-256 login as alice: the outcome of its last step."""
    session = Session("SASL_PLAINTEXT", f"{host}:4000")
    handshake = authenticate_request(session)
    authenticator.handshake(handshake, {"mechanism": "SCRAM-SHA-256"})
    client = ScramClient("SCRAM-SHA-256", "alice", password)
    first = authenticate_request(session)
    authenticator.authenticate(first, {"auth_bytes": client.first()})
    if first.outcome[0] != "respond" or first.outcome[1]["error_code"] != errors.NONE:
        return first.outcome
    final = authenticate_request(session)
    authenticator.authenticate(final, {"auth_bytes": client.final(first.outcome[1]["auth_bytes"])})
    return final.outcome


def test_a_flood_of_wrong_logins_holds_a_few_answers_and_closes_the_rest_at_once():
    """300 wrong SCRAM logins from one host, as the probe sent them: at most ``max_pending`` answers
    are held, every other attempt is closed at once without an answer (nothing held, nothing
    checked); then a correct login from that host is answered within a few delays."""
    credentials = {("alice", "SCRAM-SHA-256"): scram_credential("SCRAM-SHA-256", "right", iterations=4096)}
    clock = ManualClock()
    authenticator = SaslAuthenticator(lambda user, mechanism: credentials.get((user, mechanism)), clock=clock,
                                      throttle=AuthenticationThrottle(100, clock=clock))
    outcomes, held_until = [], []
    for attempt in range(300):  # one every 10 ms, each on a new connection
        clock.advance(10)
        now_ms = clock.monotonic_ms()
        outcome = scram_attempt(authenticator, f"guess-{attempt}")
        outcomes.append(outcome)
        if outcome[0] == "respond":
            held_until.append(now_ms + outcome[2])
        assert sum(1 for due_ms in held_until if due_ms > now_ms) <= sasl.MAX_PENDING_PER_HOST, attempt
    held = [outcome for outcome in outcomes if outcome[0] == "respond"]
    closed = [outcome for outcome in outcomes if outcome[0] == "frame"]
    assert all(body["error_code"] == errors.SASL_AUTHENTICATION_FAILED and delay > 0 and close
               for _kind, body, delay, close in held)
    assert len(closed) == 300 - len(held) and len(closed) > 250
    assert all(frame == b"" and delay == 0 and close for _kind, frame, delay, close in closed)
    # the guesser stops; its correct login is answered within the backlog it could build
    stopped_ms = clock.monotonic_ms()
    while (outcome := scram_attempt(authenticator, "right"))[0] != "respond":
        clock.advance(100)
        assert clock.monotonic_ms() - stopped_ms <= sasl.MAX_PENDING_PER_HOST * sasl.MAX_FAILURE_DELAY_MS, outcome
    _kind, body, delay, close = outcome
    assert body["error_code"] == errors.NONE and not close
    assert clock.monotonic_ms() + delay - stopped_ms <= sasl.MAX_PENDING_PER_HOST * sasl.MAX_FAILURE_DELAY_MS


def test_a_zero_delay_holds_nothing_and_bad_delays_are_refused():
    throttle = AuthenticationThrottle(0, clock=ManualClock())
    assert [throttle.answer_delay_ms("h", failed=True) for _ in range(3)] == [0, 0, 0]
    for bad in (-1, 1.5, "100"):
        try:
            AuthenticationThrottle(bad)
        except ValueError as exc:
            assert repr(bad) in str(exc)
        else:
            raise AssertionError(f"{bad!r} accepted")
    for bad in (0, 2.0):
        try:
            AuthenticationThrottle(100, max_pending=bad)
        except ValueError as exc:
            assert repr(bad) in str(exc)
        else:
            raise AssertionError(f"max_pending {bad!r} accepted")


def test_the_hosts_remembered_are_bounded(monkeypatch):
    monkeypatch.setattr(sasl, "MAX_HOSTS", 3)
    clock = ManualClock()
    throttle = AuthenticationThrottle(100, clock=clock)
    for host in ("a", "b", "c", "d"):
        throttle.answer_delay_ms(host, failed=True)
    assert throttle.answer_delay_ms("a", failed=False) == 0  # the oldest was dropped
    assert throttle.answer_delay_ms("d", failed=False) == 100


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["h1", "h2"]), st.booleans(), st.integers(0, 3000)), max_size=40))
def test_answer_times_follow_the_policy(steps):
    """Model: per host, the failures of the last FORGET_MS and the time its last held answer leaves;
    a failure leaves a penalty after max(now, that time); a success leaves at that time or now."""
    clock = ManualClock()
    throttle = AuthenticationThrottle(100, clock=clock)
    model: dict[str, list[int]] = {}
    for host, failed, wait_ms in steps:
        clock.advance(wait_ms)
        now = clock.monotonic_ms()
        state = model.get(host)
        if state is not None and now - state[2] > sasl.FORGET_MS:
            model.pop(host)
            state = None
        if failed:
            state = model.setdefault(host, [0, now, now])
            state[0] += 1
            state[2] = now
            state[1] = max(now, state[1]) + min(sasl.MAX_FAILURE_DELAY_MS, 100 * 2 ** (state[0] - 1))
            expected = state[1] - now
        else:
            expected = 0 if state is None else max(0, state[1] - now)
        assert throttle.answer_delay_ms(host, failed) == expected


def test_sessions_start_where_their_protocol_says():
    assert Session("PLAINTEXT", "127.0.0.1:5").authenticated
    assert Session("SSL", "127.0.0.1:5").principal == ANONYMOUS
    sasl_session = Session("SASL_SSL", "[::1]:5")
    assert not sasl_session.authenticated and sasl_session.host == "::1"
    tls = Session("SSL", "10.0.0.1:5")
    tls.tls_established({"subject": ((("commonName", "alice"),),)})
    assert tls.principal == "User:CN=alice"
    sasl_session.tls_established({"subject": ((("commonName", "alice"),),)})
    assert sasl_session.principal == ANONYMOUS  # on SASL_SSL the SASL exchange names the principal


def test_denials_are_logged_once_per_principal_operation_and_resource_per_interval(caplog):
    clock = ManualClock()
    log = DenialLog(clock)
    with caplog.at_level(logging.WARNING, logger="logstore.server.security.authorization"):
        for _ in range(5):
            log.denied("User:bob", "10.0.0.1", "Write", "Topic", "orders")
        log.denied("User:bob", "10.0.0.1", "Read", "Topic", "orders")
        clock.advance(sasl.LOG_INTERVAL_MS)
        log.denied("User:bob", "10.0.0.1", "Write", "Topic", "orders")
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 3, lines
    assert lines[0] == "denied: User:bob from 10.0.0.1 may not Write Topic 'orders'"
    assert "may not Read" in lines[1]
    assert lines[2].endswith("(4 more times in the last 10 s)")


def test_password_checks_are_bounded_and_a_full_pool_closes_plain_attempts_unchecked():
    release = threading.Event()
    checks = PasswordChecks(1, max_queued=2)
    ran = []
    try:
        assert checks.submit(lambda: (release.wait(10), ran.append("first")))
        assert checks.submit(lambda: ran.append("second"))
        assert not checks.submit(lambda: ran.append("third"))  # two pending: the bound
        throttle = AuthenticationThrottle(100, clock=ManualClock())
        authenticator = SaslAuthenticator(lambda user, mechanism: None, throttle=throttle, checks=checks)
        session = Session("SASL_PLAINTEXT", "10.0.0.5:4000")
        authenticator.handshake(authenticate_request(session), {"mechanism": "PLAIN"})
        context = authenticate_request(session)
        authenticator.authenticate(context, {"auth_bytes": b"\0alice\0guess"})
        assert context.outcome == ("frame", b"", 0, True)  # closed at once, without an answer
        assert throttle.pending("10.0.0.5") == 0 and authenticator.refused == 1
    finally:
        release.set()
        checks.close()
    assert ran == ["first", "second"]
    assert not checks.submit(lambda: ran.append("after close"))
    for bad in ({"threads": -1}, {"max_queued": 0}, {"threads": 1.0}):
        with pytest.raises(ValueError, match=repr(next(iter(bad.values())))):
            PasswordChecks(**bad)
