"""Who a client is: each connection's ``Session``, SASL authentication (SaslHandshake,
SaslAuthenticate, and the bare tokens of SaslHandshake v0), and the throttle that slows down a host
that keeps failing.

What it owns:
- ``Session``: a connection's principal and its place in the SASL exchange. A ``PLAINTEXT``
  connection is ``User:ANONYMOUS`` from the start; an ``SSL`` one is the subject of the client's
  certificate (``User:ANONYMOUS`` without one); a ``SASL_*`` one is nobody until it authenticates,
  and until then may send only ApiVersions, SaslHandshake and SaslAuthenticate (anything else closes
  the connection, as Kafka does: a scanner learns nothing, not even topic names);
- ``SaslAuthenticator``: the request handlers of APIs 17 and 36 and of bare tokens, over the
  mechanisms of ``sasl.enabled.mechanisms`` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) and the users'
  stored SCRAM credentials (``credentials.CredentialStore``; PLAIN is checked against them too);
- ``AuthenticationThrottle``: a failed authentication is answered only after a delay
  (``connection.failed.authentication.delay.ms``, doubled per recent failure of that host up to
  ``MAX_FAILURE_DELAY_MS``), and the answers of one host leave one after another, so a host that
  keeps guessing gets an answer per delay however many connections it opens; a host whose backlog
  of held answers is long has its new attempts closed unverified, so it cannot make the server
  compute. Nothing sleeps: the network thread holds the answers (``RequestContext.respond(...,
  delay_ms=)``). Then the connection closes, as Kafka closes it;
- the log: every failure is logged with the peer's address, the mechanism and the user name (never
  the password), at most once per host per ``LOG_INTERVAL_MS`` with a count of the ones left out.

It imports the codec's neighbours only: errors, listeners, scram, request_context.
"""

from __future__ import annotations

import collections
import logging
import secrets
import threading
from typing import Callable

from ...clock import SYSTEM_CLOCK, Clock
from ..network.request_context import RAW_TOKEN_API_KEY, RequestContext
from ..protocol import errors
from .listeners import ANONYMOUS, SASL_PLAINTEXT, SASL_SSL, SSL, principal_from_certificate
from .scram import MECHANISMS, AuthenticationError, ScramCredential, ScramServer, verify_plain

logger = logging.getLogger(__name__)

SASL_HANDSHAKE, SASL_AUTHENTICATE, API_VERSIONS = 17, 36, 18
BEFORE_AUTHENTICATION = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE, RAW_TOKEN_API_KEY})
"""What a SASL connection may send before it has authenticated."""
PLAIN = "PLAIN"
SUPPORTED_MECHANISMS = (PLAIN, *sorted(MECHANISMS))
MAX_FAILURE_DELAY_MS = 2000
BACKLOG_MS = 10_000  # held answers a host may have queued before its new attempts are closed unverified
FORGET_MS = 60_000  # a host's failures are forgotten this long after its last one
MAX_HOSTS = 10_000
LOG_INTERVAL_MS = 10_000


class Session:
    """One connection's identity (see the module docstring). ``principal`` is Kafka's
    ``Type:name`` string; ``host`` the client's address, which ACLs may name."""

    __slots__ = ("protocol", "peer", "host", "principal", "state", "mechanism", "raw_tokens", "exchange")

    def __init__(self, protocol: str, peer: str) -> None:
        self.protocol = protocol
        self.peer = peer
        self.host = peer.rpartition(":")[0].strip("[]")
        self.principal = ANONYMOUS
        # handshake -> authenticate -> done; "done" from the start without SASL
        self.state = "handshake" if protocol in (SASL_PLAINTEXT, SASL_SSL) else "done"
        self.mechanism: str | None = None
        self.raw_tokens = False  # SaslHandshake v0: the tokens come bare, without request headers
        self.exchange: ScramServer | None = None

    @property
    def authenticated(self) -> bool:
        return self.state == "done"

    def tls_established(self, certificate: dict | None) -> None:
        """The TLS handshake is done: on an ``SSL`` listener the certificate names the principal
        (on ``SASL_SSL`` SASL does, as in Kafka)."""
        if self.protocol == SSL:
            self.principal = principal_from_certificate(certificate)

    def __repr__(self) -> str:
        return f"Session({self.protocol}, {self.peer}, {self.principal}, {self.state})"


class AuthenticationThrottle:
    """When a host's authentication answers may leave (see the module docstring). Thread-safe."""

    def __init__(self, delay_ms: int = 100, clock: Clock | None = None) -> None:
        if not isinstance(delay_ms, int) or delay_ms < 0:
            raise ValueError(f"delay_ms must be an int >= 0, got {delay_ms!r}")
        self.delay_ms = delay_ms
        self._clock = clock or SYSTEM_CLOCK
        self._lock = threading.Lock()
        # host -> [recent failures, when its next held answer may leave, its last failure]
        self._hosts: collections.OrderedDict[str, list[int]] = collections.OrderedDict()

    def _state(self, host: str, now_ms: int) -> list[int] | None:
        state = self._hosts.get(host)
        if state is not None and now_ms - state[2] > FORGET_MS:
            del self._hosts[host]
            return None
        return state

    def admit(self, host: str) -> bool:
        """Whether an attempt of ``host`` is worth checking (False: its backlog of held answers is
        longer than ``BACKLOG_MS``; close it unverified)."""
        now_ms = self._clock.monotonic_ms()
        with self._lock:
            state = self._state(host, now_ms)
            return state is None or state[1] - now_ms <= BACKLOG_MS

    def answer_delay_ms(self, host: str, failed: bool) -> int:
        """How long to hold the answer of an attempt of ``host`` that ``failed`` (or succeeded). A
        success from a host with recent failures waits for the answers held before it, so its speed
        does not tell a guesser which of its attempts was right."""
        now_ms = self._clock.monotonic_ms()
        with self._lock:
            state = self._state(host, now_ms)
            if not failed:
                return 0 if state is None else max(0, state[1] - now_ms)
            if state is None:
                state = self._hosts[host] = [0, now_ms, now_ms]
                while len(self._hosts) > MAX_HOSTS:
                    self._hosts.popitem(last=False)
            self._hosts.move_to_end(host)
            state[0] += 1
            state[2] = now_ms
            penalty = min(MAX_FAILURE_DELAY_MS, self.delay_ms << min(state[0] - 1, 20)) if self.delay_ms else 0
            state[1] = max(now_ms, state[1]) + penalty
            return state[1] - now_ms


class SaslAuthenticator:
    """SASL for the server's connections. ``lookup(user, mechanism)`` gives a stored SCRAM
    credential or None; ``mechanisms`` are the enabled ones (Kafka's ``sasl.enabled.mechanisms``)."""

    def __init__(self, lookup: Callable[[str, str], ScramCredential | None], mechanisms=SUPPORTED_MECHANISMS, *,
                 throttle: AuthenticationThrottle | None = None, clock: Clock | None = None) -> None:
        unknown = [name for name in mechanisms if name not in SUPPORTED_MECHANISMS]
        if unknown or not mechanisms:
            raise ValueError(f"sasl.enabled.mechanisms takes {', '.join(SUPPORTED_MECHANISMS)}, got {list(mechanisms)!r}")
        self.mechanisms = list(mechanisms)
        self._lookup = lookup
        self._clock = clock or SYSTEM_CLOCK
        self.throttle = throttle or AuthenticationThrottle(clock=self._clock)
        # Makes the fake salt of an unknown user stable for this server's life (scram.ScramServer).
        self._secret = secrets.token_bytes(32)
        self._failure_log = LogLimiter(self._clock)  # one line per host per LOG_INTERVAL_MS
        self.failures = 0
        self.successes = 0

    # --- the gate ----------------------------------------------------------------------------------

    def admits(self, context: RequestContext) -> bool:
        """Whether the request may go on to its handler. A SASL connection that has not
        authenticated may only ask for ApiVersions and SASL; anything else closes it (no answer)."""
        session = context.session
        if session is None or session.state == "done" or context.api_key in BEFORE_AUTHENTICATION:
            return True
        context.close(f"api key {context.api_key} before SASL authentication")
        return False

    # --- SaslHandshake (17) ------------------------------------------------------------------------

    def handshake(self, context: RequestContext, request: dict) -> None:
        session = context.session
        if session is None or session.protocol not in (SASL_PLAINTEXT, SASL_SSL) or session.state != "handshake":
            # Kafka's answer on a listener without SASL, or for a second handshake
            context.respond({"error_code": errors.ILLEGAL_SASL_STATE, "mechanisms": []},
                            then_close=session is not None and session.state != "done")
            return
        mechanism = request["mechanism"]
        if mechanism not in self.mechanisms:
            self._log_failure(session, mechanism, None, "mechanism not enabled")
            context.respond({"error_code": errors.UNSUPPORTED_SASL_MECHANISM, "mechanisms": self.mechanisms},
                            then_close=True)
            return
        session.mechanism = mechanism
        session.state = "authenticate"
        session.raw_tokens = context.api_version == 0
        context.respond({"error_code": errors.NONE, "mechanisms": self.mechanisms})

    # --- SaslAuthenticate (36) and bare tokens -----------------------------------------------------

    def authenticate(self, context: RequestContext, request: dict) -> None:
        session = context.session
        if session is None or session.state != "authenticate" or session.raw_tokens:
            context.respond({"error_code": errors.ILLEGAL_SASL_STATE, "error_message": "SaslAuthenticate out of turn",
                             "auth_bytes": b"", "session_lifetime_ms": 0},
                            then_close=session is not None and session.state != "done")
            return
        reply, delay_ms, failure = self._step(session, bytes(request["auth_bytes"]))
        if failure is not None:
            context.respond({"error_code": errors.SASL_AUTHENTICATION_FAILED, "error_message": failure,
                             "auth_bytes": b"", "session_lifetime_ms": 0}, delay_ms=delay_ms, then_close=True)
        else:
            context.respond({"error_code": errors.NONE, "error_message": None, "auth_bytes": reply,
                             "session_lifetime_ms": 0}, delay_ms=delay_ms)

    def raw_token(self, context: RequestContext) -> None:
        """A bare token after SaslHandshake v0: answered bare; a failure closes the connection (the
        bare exchange has no way to say why)."""
        session = context.session
        reply, delay_ms, failure = self._step(session, bytes(context.frame))
        if failure is not None:
            context.respond_frame([], delay_ms=delay_ms, then_close=True)
            return
        if session.state == "done":
            session.raw_tokens = False  # Kafka requests, with headers, from the next frame on
        context.respond_frame([len(reply).to_bytes(4, "big") + reply], delay_ms=delay_ms)

    def _step(self, session: Session, token: bytes) -> tuple[bytes, int, str | None]:
        """One step of the session's exchange: (the reply, how long to hold it, None) or (b"",
        how long to hold the refusal, the message a client is told)."""
        mechanism = session.mechanism
        host = session.host
        user = None
        try:
            if not self.throttle.admit(host):
                raise AuthenticationError("too many failed authentications from this host: not checked")
            if mechanism == PLAIN:
                user = token.split(b"\0")[1].decode("utf-8", "replace") if token.count(b"\0") == 2 else None
                name = verify_plain(token, self._plain_lookup)
                return self._done(session, name, b"")
            if session.exchange is None:
                session.exchange = ScramServer(mechanism, lambda name: self._lookup(name, mechanism), self._secret)
                return session.exchange.first(token), 0, None
            exchange = session.exchange
            user = exchange.requested_user
            reply = exchange.final(token)
            session.exchange = None
            return self._done(session, exchange.user, reply)
        except AuthenticationError as exc:
            session.exchange = None
            session.state = "failed"
            self.failures += 1
            self._log_failure(session, mechanism, user, str(exc))
            message = (f"Authentication failed during authentication due to invalid credentials with SASL "
                       f"mechanism {mechanism}")
            return b"", self.throttle.answer_delay_ms(host, failed=True), message

    def _done(self, session: Session, user: str, reply: bytes) -> tuple[bytes, int, None]:
        session.principal = f"User:{user}"
        session.state = "done"
        self.successes += 1
        return reply, self.throttle.answer_delay_ms(session.host, failed=False), None

    def _plain_lookup(self, user: str) -> ScramCredential | None:
        for mechanism in sorted(MECHANISMS):
            credential = self._lookup(user, mechanism)
            if credential is not None:
                return credential
        return None

    def _log_failure(self, session: Session, mechanism: str | None, user: str | None, reason: str) -> None:
        left_out = self._failure_log.admit(session.host)
        if left_out is None:
            return
        logger.warning("failed authentication from %s (%s, mechanism %s, user %r): %s%s", session.peer,
                       session.protocol, mechanism, user, reason,
                       f"; {left_out} more from {session.host} in the last {LOG_INTERVAL_MS // 1000} s not logged"
                       if left_out else "")


class LogLimiter:
    """At most one log line per key per ``LOG_INTERVAL_MS``: ``admit(key)`` is None for a line to
    leave out, else how many were left out since the last one (at most ``MAX_HOSTS`` keys kept)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._logged: collections.OrderedDict[object, list[int]] = collections.OrderedDict()

    def admit(self, key) -> int | None:
        now_ms = self._clock.monotonic_ms()
        with self._lock:
            entry = self._logged.get(key)
            if entry is not None and now_ms - entry[0] < LOG_INTERVAL_MS:
                entry[1] += 1
                return None
            self._logged[key] = [now_ms, 0]
            self._logged.move_to_end(key)
            while len(self._logged) > MAX_HOSTS:
                self._logged.popitem(last=False)
            return entry[1] if entry is not None else 0


__all__ = ["AuthenticationThrottle", "BEFORE_AUTHENTICATION", "LOG_INTERVAL_MS", "LogLimiter", "PLAIN", "SUPPORTED_MECHANISMS", "SaslAuthenticator",
           "Session"]
