"""``PasswordChecks``: the threads that check PLAIN passwords, so that the PBKDF2 of a login (up to
``scram.MAX_ITERATIONS`` HMACs) never runs on a request handler thread: a few wrong PLAIN logins
must not stall the requests of every other client behind them.

What it owns:
- a few threads (``sasl.password.check.threads``), started at the first check, that run the checks
  in the order they came; a check finishes its request itself (``RequestContext.respond`` from this
  thread, as a request parked in a purgatory does);
- the bound: at most ``max_queued`` checks (``sasl.password.check.max.queued``) wait or run at
  once, from every host together; ``submit`` refuses one more (the caller closes that attempt
  unchecked). What one host may have pending is the throttle's bound (``sasl.AuthenticationThrottle``);
- ``threads=0``: a check runs at once on the caller's thread (tests, tools with no other client).

Threads, not processes: ``hashlib.pbkdf2_hmac`` releases the GIL while OpenSSL computes (measured:
another thread keeps ~93% of its speed during a 200,000-iteration PBKDF2-SHA-256, and two run in
the time of one), so the network and handler threads go on meanwhile.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import Callable

logger = logging.getLogger(__name__)


class PasswordChecks:
    """A bounded pool of threads for password checks (see the module docstring). Thread-safe."""

    def __init__(self, threads: int = 1, max_queued: int = 64, *, name: str = "logstore-password-check") -> None:
        if type(threads) is not int or threads < 0:
            raise ValueError(f"threads must be an int >= 0, got {threads!r}")
        if type(max_queued) is not int or max_queued < 1:
            raise ValueError(f"max_queued must be an int >= 1, got {max_queued!r}")
        self.threads = threads
        self.max_queued = max_queued
        self._name = name
        self._condition = threading.Condition()
        self._queue: collections.deque[Callable[[], None]] = collections.deque()
        self._pending = 0  # queued or running
        self._workers: list[threading.Thread] = []
        self._closed = False

    @property
    def pending(self) -> int:
        """Checks queued or running."""
        return self._pending

    def submit(self, check: Callable[[], None]) -> bool:
        """Run ``check`` (which must finish its request, whatever happens) on a check thread; False,
        without running it, when ``max_queued`` checks are pending already or the pool is closed."""
        if self.threads == 0:
            if self._closed:
                return False
            self._run_one(check)
            return True
        with self._condition:
            if self._closed or self._pending >= self.max_queued:
                return False
            self._pending += 1
            self._queue.append(check)
            if len(self._workers) < self.threads and len(self._workers) < self._pending:
                worker = threading.Thread(target=self._work, name=f"{self._name}-{len(self._workers)}", daemon=True)
                self._workers.append(worker)
                worker.start()
            self._condition.notify()
        return True

    def _work(self) -> None:
        while True:
            with self._condition:
                while not self._queue and not self._closed:
                    self._condition.wait()
                if not self._queue:
                    return
                check = self._queue.popleft()
            try:
                self._run_one(check)
            finally:
                with self._condition:
                    self._pending -= 1

    @staticmethod
    def _run_one(check: Callable[[], None]) -> None:
        try:
            check()
        except Exception:  # the check answers its own failures; this is a bug, not a wrong password
            logger.exception("a password check failed")

    def close(self, timeout_s: float = 5.0) -> None:
        """Refuse new checks, run the queued ones, stop the threads. Idempotent."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()
            workers, self._workers = self._workers, []
        for worker in workers:
            if worker is not threading.current_thread():
                worker.join(timeout_s)


__all__ = ["PasswordChecks"]
