"""The time seam: the only module of the engine that reads the system clock.

Every component takes a ``Clock`` as a parameter, so tests run the real code on a ``ManualClock``
and move time explicitly. Two readings are offered: wall-clock milliseconds (``time_ms``, used for
record timestamps, segment ages and retention) and a monotonic clock (``monotonic_ms``, used for
durations and deadlines). ``Stopwatch`` is for benchmarks and progress reporting.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """What logstore needs to know about time."""

    def time_ms(self) -> int:
        """Wall-clock time in milliseconds since the epoch."""
        ...

    def monotonic_ms(self) -> int:
        """A monotonic reading in milliseconds (only differences are meaningful)."""
        ...

    def sleep_ms(self, delay_ms: int) -> None:
        """Block the calling thread for ``delay_ms`` milliseconds (a manual clock advances)."""
        ...


class SystemClock:
    """The real clock."""

    def time_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def sleep_ms(self, delay_ms: int) -> None:
        if delay_ms > 0:
            time.sleep(delay_ms / 1000.0)


SYSTEM_CLOCK = SystemClock()


class ManualClock:
    """A clock that only moves when told to: ``advance(delta_ms)`` or ``sleep_ms``.

    Thread-safe. Both readings move together, starting from ``start_ms``.
    """

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        if not isinstance(start_ms, int):
            raise TypeError(f"start_ms must be an int, got {start_ms!r}")
        self._now_ms = start_ms
        self._lock = threading.Lock()

    def time_ms(self) -> int:
        return self._now_ms

    def monotonic_ms(self) -> int:
        return self._now_ms

    def sleep_ms(self, delay_ms: int) -> None:
        self.advance(max(0, delay_ms))

    def advance(self, delta_ms: int) -> int:
        """Move time forward by ``delta_ms`` (>= 0) and return the new time."""
        if delta_ms < 0:
            raise ValueError(f"a clock cannot go backwards: delta_ms={delta_ms!r}")
        with self._lock:
            self._now_ms += delta_ms
            return self._now_ms


class Stopwatch:
    """Measures elapsed wall time with ``time.perf_counter`` (benchmarks, progress lines)."""

    def __init__(self) -> None:
        self._start = time.perf_counter()

    def restart(self) -> None:
        self._start = time.perf_counter()

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self._start

    @staticmethod
    def now_s() -> float:
        """A ``perf_counter`` reading in seconds (only differences are meaningful)."""
        return time.perf_counter()

    @staticmethod
    def cpu_s() -> float:
        """Process CPU time in seconds (for reporting CPU-bound rates on a noisy machine)."""
        return time.process_time()
