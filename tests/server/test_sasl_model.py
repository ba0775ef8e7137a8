"""SASL on one connection against a plain model (hypothesis): any order of ApiVersions, other
requests, SaslHandshake (v0 or v1, an enabled mechanism or not), SaslAuthenticate and bare tokens
(right or wrong PLAIN credentials, SCRAM's two steps) drives ``sasl.SaslAuthenticator`` and a
``Session``; after each step the model says whether the request reached its handler, was answered
(and with which error), or closed the connection, whether the answer was held back, and who the
principal is. A closed connection takes no more steps (the network layer reads nothing more); the
client may connect again."""

from __future__ import annotations

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from logstore.clock import ManualClock
from logstore.server.network.request_context import RAW_TOKEN_API_KEY
from logstore.server.protocol import errors
from logstore.server.security.listeners import ANONYMOUS
from logstore.server.security.password_checks import PasswordChecks
from logstore.server.security.sasl import AuthenticationThrottle, SaslAuthenticator, Session
from logstore.server.security.scram import ScramClient, scram_credential

CREDENTIALS = {("alice", "SCRAM-SHA-256"): scram_credential("SCRAM-SHA-256", "right", iterations=4096)}


class FakeContext:
    """What the authenticator sees of a request, recording how it was finished."""

    def __init__(self, session, api_key, api_version=1, frame=b""):
        self.session, self.api_key, self.api_version, self.frame = session, api_key, api_version, frame
        self.peer = session.peer
        self.outcome = None  # ("respond", body, delay_ms, then_close) | ("frame", bytes, delay, close) | ("close",)

    def respond(self, body, *, delay_ms=0, then_close=False):
        self.outcome = ("respond", body, delay_ms, then_close)

    def respond_frame(self, chunks, *, delay_ms=0, then_close=False):
        self.outcome = ("frame", b"".join(chunks), delay_ms, then_close)

    def close(self, reason):
        self.outcome = ("close", reason)


class SaslConnection(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.authenticator = SaslAuthenticator(lambda user, mech: CREDENTIALS.get((user, mech)),
                                               ["PLAIN", "SCRAM-SHA-256"],
                                               throttle=AuthenticationThrottle(100, clock=ManualClock()),
                                               checks=PasswordChecks(0))  # PLAIN checked on the caller's thread
        self.session = Session("SASL_PLAINTEXT", "10.0.0.7:4000")
        self.state = "handshake"  # the model: handshake, authenticate, done, closed
        self.raw = False
        self.mechanism = None
        self.scram: ScramClient | None = None
        self.host_failed = False  # the throttle's memory of this host

    def _finish(self, context, closes: bool):
        if closes:
            self.state = "closed"
        assert self.session.principal == ("User:alice" if self.state == "done" else ANONYMOUS) or \
            (self.state == "closed" and self.session.principal == ANONYMOUS)

    @precondition(lambda self: self.state != "closed")
    @rule(api_key=st.sampled_from([18, 3, 0, 16]))
    def a_request(self, api_key):
        context = FakeContext(self.session, api_key)
        if self.raw and self.state == "authenticate":
            return  # after a v0 handshake every frame is a bare token (covered by the token rules)
        admitted = self.authenticator.admits(context)
        expected = self.state == "done" or api_key == 18
        assert admitted == expected
        assert (context.outcome is None) == expected
        if not expected:
            assert context.outcome[0] == "close"
        self._finish(context, not expected)

    @precondition(lambda self: self.state != "closed" and not (self.raw and self.state == "authenticate"))
    @rule(version=st.sampled_from([0, 1]), mechanism=st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]))
    def handshake(self, version, mechanism):
        context = FakeContext(self.session, 17, version)
        self.authenticator.handshake(context, {"mechanism": mechanism})
        kind, body, delay_ms, then_close = context.outcome
        assert kind == "respond" and delay_ms == 0
        if self.state != "handshake":
            assert body["error_code"] == errors.ILLEGAL_SASL_STATE
            assert then_close == (self.state != "done")
            self._finish(context, then_close)
        elif mechanism == "SCRAM-SHA-512":
            assert body["error_code"] == errors.UNSUPPORTED_SASL_MECHANISM and then_close
            assert body["mechanisms"] == ["PLAIN", "SCRAM-SHA-256"]
            self._finish(context, True)
        else:
            assert body["error_code"] == errors.NONE and not then_close
            self.state, self.raw, self.mechanism = "authenticate", version == 0, mechanism
            self.scram = None
            self._finish(context, False)

    def _token(self, right: bool) -> tuple[bytes, bool, bool]:
        """The next token of the exchange, whether it ends it, and whether its password is right
        (SCRAM's is chosen at its first step)."""
        if self.mechanism == "PLAIN":
            return b"\0alice\0" + (b"right" if right else b"wrong"), True, right
        if self.scram is None:
            self.scram = ScramClient("SCRAM-SHA-256", "alice", "right" if right else "wrong")
            self.scram_right = right
            return self.scram.first(), False, right
        return self.scram.final(self._server_first), True, self.scram_right

    @precondition(lambda self: self.state != "closed")
    @rule(right=st.booleans(), bare=st.booleans())
    def authenticate(self, right, bare):
        if self.state != "authenticate" or bare != self.raw:
            if bare:
                return  # a bare frame is only ever read after a v0 handshake
            context = FakeContext(self.session, 36, 1)
            self.authenticator.authenticate(context, {"auth_bytes": b"x"})
            kind, body, _delay, then_close = context.outcome
            assert body["error_code"] == errors.ILLEGAL_SASL_STATE
            assert then_close == (self.state != "done")
            self._finish(context, then_close)
            return
        token, last, right = self._token(right)
        context = FakeContext(self.session, RAW_TOKEN_API_KEY if bare else 36, 1, token)
        if bare:
            self.authenticator.raw_token(context)
        else:
            self.authenticator.authenticate(context, {"auth_bytes": token})
        kind, payload, delay_ms, then_close = context.outcome
        fails = last and not right
        if bare:
            assert kind == "frame"
            reply = payload[4:] if not fails else b""
        else:
            assert kind == "respond"
            assert payload["error_code"] == (errors.SASL_AUTHENTICATION_FAILED if fails else errors.NONE)
            reply = payload["auth_bytes"]
        # a failure is held; so is a success of a host that failed before, behind the held answers
        # (the manual clock stands still: they are all still held)
        assert then_close == fails and (delay_ms > 0) == (fails or (last and self.host_failed))
        if fails:
            self.host_failed = True
            self._finish(context, True)
        elif last:
            self.state = "done"
            if self.scram is not None:
                self.scram.verify(reply)  # the server proved it holds the credential
            self._finish(context, False)
        else:
            self._server_first = reply
            self._finish(context, False)
        if self.state == "done":
            assert self.session.authenticated and not self.session.raw_tokens


    @precondition(lambda self: self.state == "closed")
    @rule()
    def reconnect(self):
        """The client connects again: a new session, from the start (the throttle remembers the host)."""
        self.session = Session("SASL_PLAINTEXT", "10.0.0.7:4001")
        self.state, self.raw, self.mechanism, self.scram = "handshake", False, None, None


TestSaslConnection = SaslConnection.TestCase
TestSaslConnection.settings = settings(max_examples=150, stateful_step_count=12, deadline=None)
