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
  keeps guessing gets an answer per delay however many connections it opens. What one host may have
  pending is bounded (``sasl.max.pending.per.host``: attempts being checked plus failures whose
  answer is held): an attempt beyond it is closed unchecked and at once, without an answer, so it
  makes the server neither compute nor hold a connection, and a host's backlog is never longer than
  that many delays: once a host stops guessing, its correct login goes through within seconds.
  Nothing sleeps: the network thread holds the answers (``RequestContext.respond(...,
  delay_ms=)``). Then the connection closes, as Kafka closes it;
- PLAIN's password check (PBKDF2 with the credential's iterations) runs on the
  ``password_checks.PasswordChecks`` threads, never on a request handler thread; the check's thread
  answers the request. SCRAM needs no such thread: its PBKDF2 is the client's;
- the log: every failure is logged with the peer's address, the mechanism and the user name (never
  the password), at most once per host per ``LOG_INTERVAL_MS`` with a count of the ones left out.

It imports the codec's neighbours only: errors, listeners, scram, password_checks, request_context.
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
from .password_checks import PasswordChecks
from .scram import MECHANISMS, AuthenticationError, ScramCredential, ScramServer, verify_plain

logger = logging.getLogger(__name__)

SASL_HANDSHAKE, SASL_AUTHENTICATE, API_VERSIONS = 17, 36, 18
BEFORE_AUTHENTICATION = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE, RAW_TOKEN_API_KEY})
"""What a SASL connection may send before it has authenticated."""
PLAIN = "PLAIN"
SUPPORTED_MECHANISMS = (PLAIN, *sorted(MECHANISMS))
MAX_FAILURE_DELAY_MS = 2000
MAX_PENDING_PER_HOST = 4  # sasl.max.pending.per.host's default: a backlog of at most 4 delays (8 s)
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
        # handshake -> authenticate (-> checking, while a PLAIN password is checked) -> done or failed;
        # "done" from the start without SASL. A request sent before the SaslAuthenticate answer
        # (clients wait for it) is served if the check is done by then, else closes the connection.
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


class _Host:
    """The throttle's memory of one host that failed."""

    __slots__ = ("failures", "free_ms", "last_failure_ms", "held")

    def __init__(self, now_ms: int) -> None:
        self.failures = 0  # recent failures: the next penalty doubles with them
        self.free_ms = now_ms  # when the last held answer leaves: the next one leaves after it
        self.last_failure_ms = now_ms
        self.held: collections.deque[int] = collections.deque()  # when each held answer leaves, in order


class AuthenticationThrottle:
    """When a host's authentication answers may leave, and whether its next attempt is checked at all
    (see the module docstring). ``admit(host)`` starts an attempt; every admitted attempt ends with
    ``answer_delay_ms(host, failed)`` (it was checked) or ``release(host)`` (it was not, or was a step
    that decides nothing). Thread-safe."""

    def __init__(self, delay_ms: int = 100, clock: Clock | None = None, *,
                 max_pending: int = MAX_PENDING_PER_HOST) -> None:
        if not isinstance(delay_ms, int) or delay_ms < 0:
            raise ValueError(f"delay_ms must be an int >= 0, got {delay_ms!r}")
        if type(max_pending) is not int or max_pending < 1:
            raise ValueError(f"max_pending must be an int >= 1, got {max_pending!r}")
        self.delay_ms = delay_ms
        self.max_pending = max_pending
        self._clock = clock or SYSTEM_CLOCK
        self._lock = threading.Lock()
        self._hosts: collections.OrderedDict[str, _Host] = collections.OrderedDict()
        # host -> attempts admitted and not ended: at most the checks running or queued, so bounded
        # by the handler and check threads' queues, not by the number of hosts
        self._checking: dict[str, int] = {}

    def _state(self, host: str, now_ms: int) -> _Host | None:
        state = self._hosts.get(host)
        if state is not None and now_ms - state.last_failure_ms > FORGET_MS:
            del self._hosts[host]
            return None
        if state is not None:
            held = state.held
            while held and held[0] <= now_ms:  # sent by now
                held.popleft()
        return state

    def pending(self, host: str) -> int:
        """``host``'s attempts being checked plus its failures whose answers are still held."""
        now_ms = self._clock.monotonic_ms()
        with self._lock:
            state = self._state(host, now_ms)
            return self._checking.get(host, 0) + (len(state.held) if state is not None else 0)

    def admit(self, host: str) -> bool:
        """Start an attempt of ``host``: False when it has ``max_pending`` pending already (close the
        attempt unchecked, at once); True counts it as pending until it ends."""
        now_ms = self._clock.monotonic_ms()
        with self._lock:
            state = self._state(host, now_ms)
            checking = self._checking.get(host, 0)
            if checking + (len(state.held) if state is not None else 0) >= self.max_pending:
                return False
            self._checking[host] = checking + 1
            return True

    def release(self, host: str) -> None:
        """End an admitted attempt of ``host`` that leaves no answer to hold."""
        with self._lock:
            self._end(host)

    def _end(self, host: str) -> None:
        checking = self._checking.get(host, 0)
        if checking > 1:
            self._checking[host] = checking - 1
        else:
            self._checking.pop(host, None)

    def answer_delay_ms(self, host: str, failed: bool) -> int:
        """End an attempt of ``host`` that ``failed`` (or succeeded): how long to hold its answer. A
        success from a host with recent failures waits for the answers held before it, so its speed
        does not tell a guesser which of its attempts was right (at most ``max_pending`` delays)."""
        now_ms = self._clock.monotonic_ms()
        with self._lock:
            self._end(host)
            state = self._state(host, now_ms)
            if not failed:
                return 0 if state is None else max(0, state.free_ms - now_ms)
            if state is None:
                state = self._hosts[host] = _Host(now_ms)
                while len(self._hosts) > MAX_HOSTS:
                    self._hosts.popitem(last=False)
            self._hosts.move_to_end(host)
            state.failures += 1
            state.last_failure_ms = now_ms
            penalty = min(MAX_FAILURE_DELAY_MS, self.delay_ms << min(state.failures - 1, 20)) if self.delay_ms else 0
            state.free_ms = max(now_ms, state.free_ms) + penalty
            if state.free_ms > now_ms:
                state.held.append(state.free_ms)
            return state.free_ms - now_ms


class SaslAuthenticator:
    """SASL for the server's connections. ``lookup(user, mechanism)`` gives a stored SCRAM
    credential or None; ``mechanisms`` are the enabled ones (Kafka's ``sasl.enabled.mechanisms``);
    ``checks`` runs PLAIN's password checks (default: one thread of its own; ``close()`` stops it)."""

    def __init__(self, lookup: Callable[[str, str], ScramCredential | None], mechanisms=SUPPORTED_MECHANISMS, *,
                 throttle: AuthenticationThrottle | None = None, clock: Clock | None = None,
                 checks: PasswordChecks | None = None) -> None:
        unknown = [name for name in mechanisms if name not in SUPPORTED_MECHANISMS]
        if unknown or not mechanisms:
            raise ValueError(f"sasl.enabled.mechanisms takes {', '.join(SUPPORTED_MECHANISMS)}, got {list(mechanisms)!r}")
        self.mechanisms = list(mechanisms)
        self._lookup = lookup
        self._clock = clock or SYSTEM_CLOCK
        self.throttle = throttle or AuthenticationThrottle(clock=self._clock)
        self.checks = checks if checks is not None else PasswordChecks()
        # Makes the fake salt of an unknown user stable for this server's life (scram.ScramServer).
        self._secret = secrets.token_bytes(32)
        self._failure_log = LogLimiter(self._clock)  # one line per host per LOG_INTERVAL_MS
        self._counts_lock = threading.Lock()  # the counts are bumped by handler and check threads
        self.failures = 0
        self.successes = 0
        self.refused = 0  # attempts closed unchecked (a host with too many pending, or no check room)

    def close(self) -> None:
        """Stop the password check threads (the queued checks are answered first)."""
        self.checks.close()

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
        self._step(context, bytes(request["auth_bytes"]))

    def raw_token(self, context: RequestContext) -> None:
        """A bare token after SaslHandshake v0: answered bare; a failure closes the connection (the
        bare exchange has no way to say why)."""
        if context.session.state != "authenticate":  # sent while the previous token is being checked
            context.close("a bare SASL token out of turn")
            return
        self._step(context, bytes(context.frame))

    def _step(self, context: RequestContext, token: bytes) -> None:
        """One step of the session's exchange, if its host may have one more attempt pending: PLAIN's
        on a password check thread, SCRAM's here (its steps cost a few HMACs)."""
        session = context.session
        if not self.throttle.admit(session.host):
            self._refuse(context, "too many authentications from this host pending")
            return
        if session.mechanism != PLAIN:
            self._answer(context, *self._check(session, token))
            return
        session.state = "checking"  # until answered: a token or request sent meanwhile closes the connection
        if not self.checks.submit(lambda: self._check_and_answer(context, token)):
            self.throttle.release(session.host)
            self._refuse(context, f"{self.checks.max_queued} password checks pending")

    def _check_and_answer(self, context: RequestContext, token: bytes) -> None:
        """PLAIN's step on a password check thread: it answers the request, whatever happens."""
        try:
            result = self._check(context.session, token)
        except Exception:
            logger.exception("checking a PLAIN password from %s failed", context.peer)
            context.close("the password check failed")
            return
        self._answer(context, *result)

    def _check(self, session: Session, token: bytes) -> tuple[bytes, int, str | None]:
        """One step of an admitted attempt, which it ends (``throttle.answer_delay_ms`` or ``release``):
        (the reply, how long to hold it, None) or (b"", how long to hold the refusal, the message a
        client is told)."""
        mechanism = session.mechanism
        host = session.host
        user = None
        ended = False
        try:
            if mechanism == PLAIN:
                user = token.split(b"\0")[1].decode("utf-8", "replace") if token.count(b"\0") == 2 else None
                name = verify_plain(token, self._plain_lookup)
                ended = True
                return self._done(session, name, b"")
            if session.exchange is None:
                session.exchange = ScramServer(mechanism, lambda name: self._lookup(name, mechanism), self._secret)
                reply = session.exchange.first(token)
                ended = True
                self.throttle.release(host)  # the first step decides nothing: the proof comes next
                return reply, 0, None
            exchange = session.exchange
            user = exchange.requested_user
            reply = exchange.final(token)
            session.exchange = None
            ended = True
            return self._done(session, exchange.user, reply)
        except AuthenticationError as exc:
            session.exchange = None
            session.state = "failed"
            with self._counts_lock:
                self.failures += 1
            self._log_failure(session, mechanism, user, str(exc))
            message = (f"Authentication failed during authentication due to invalid credentials with SASL "
                       f"mechanism {mechanism}")
            ended = True
            return b"", self.throttle.answer_delay_ms(host, failed=True), message
        finally:
            if not ended:  # a bug (the handler's caller closes the connection): the attempt is over
                self.throttle.release(host)

    def _done(self, session: Session, user: str, reply: bytes) -> tuple[bytes, int, None]:
        session.principal = f"User:{user}"
        session.state = "done"
        with self._counts_lock:
            self.successes += 1
        return reply, self.throttle.answer_delay_ms(session.host, failed=False), None

    @staticmethod
    def _answer(context: RequestContext, reply: bytes, delay_ms: int, failure: str | None) -> None:
        """Answer a step: SaslAuthenticate's response, or a bare token (a failure closes the bare
        exchange without an answer)."""
        if context.api_key == RAW_TOKEN_API_KEY:
            if failure is not None:
                context.respond_frame([], delay_ms=delay_ms, then_close=True)
                return
            if context.session.state == "done":
                context.session.raw_tokens = False  # Kafka requests, with headers, from the next frame on
            context.respond_frame([len(reply).to_bytes(4, "big") + reply], delay_ms=delay_ms)
        elif failure is not None:
            context.respond({"error_code": errors.SASL_AUTHENTICATION_FAILED, "error_message": failure,
                             "auth_bytes": b"", "session_lifetime_ms": 0}, delay_ms=delay_ms, then_close=True)
        else:
            context.respond({"error_code": errors.NONE, "error_message": None, "auth_bytes": reply,
                             "session_lifetime_ms": 0}, delay_ms=delay_ms)

    def _refuse(self, context: RequestContext, reason: str) -> None:
        """Close an attempt unchecked, at once and without an answer (nothing is sent, so the network
        layer logs nothing either: the failure log says it, once per host per interval)."""
        session = context.session
        session.exchange = None
        session.state = "failed"
        with self._counts_lock:
            self.refused += 1
        self._log_failure(session, session.mechanism, None, f"not checked: {reason}")
        context.respond_frame([], then_close=True)

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
