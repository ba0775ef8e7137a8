"""The authentication throttle and the session (``logstore.server.security.sasl``) on a manual clock: how
long a failed attempt's answer is held, that one host's answers leave one after another, that a
success does not overtake held failures, that a long backlog closes new attempts unverified, that
failures are forgotten after a while; and a hypothesis model of the answer times."""

from __future__ import annotations

import logging

from hypothesis import given, settings, strategies as st

from logstore.clock import ManualClock
from logstore.server.security import sasl
from logstore.server.security.listeners import ANONYMOUS
from logstore.server.security.authorization import DenialLog
from logstore.server.security.sasl import AuthenticationThrottle, Session


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


def test_a_host_with_a_long_backlog_is_not_checked_at_all():
    clock = ManualClock()
    throttle = AuthenticationThrottle(100, clock=clock)
    while throttle.admit("10.0.0.9"):
        throttle.answer_delay_ms("10.0.0.9", failed=True)
    assert throttle.answer_delay_ms("10.0.0.9", failed=False) > sasl.BACKLOG_MS
    assert throttle.admit("10.0.0.8")
    clock.advance(sasl.BACKLOG_MS)
    assert throttle.admit("10.0.0.9")  # the backlog drained as time passed


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
