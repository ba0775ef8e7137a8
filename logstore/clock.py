"""The time seam: the only module of the engine that reads the system clock.

Every component takes a ``Clock`` as a parameter, so tests run the real code on a ``ManualClock``
and move time explicitly. Two readings are offered: wall-clock milliseconds (``time_ms``, used for
record timestamps, segment ages and retention) and a monotonic clock (``monotonic_ms``, used for
durations and deadlines). ``Stopwatch`` is for benchmarks and progress reporting.

Timestamps as people write them: ``parse_iso_ms`` reads an ISO 8601 date or date and time (a time
without an offset is the machine's local time, as Kafka's tools read ``--to-datetime``) and
``format_iso_ms`` writes one in UTC with milliseconds (``2026-11-29T13:05:01.123Z``).
"""

from __future__ import annotations

import datetime
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


def parse_iso_ms(text: str) -> int:
    """ms since the epoch of an ISO 8601 date (``2026-11-29``: its midnight) or date and time
    (``2026-11-29T13:05``, ``...T13:05:01.123``, with ``Z`` or ``+hh:mm``/``-hh:mm``); without an
    offset it is the machine's local time (daylight saving included), as Kafka's
    ``kafka-consumer-groups --to-datetime`` reads it. A value that is not one, or is before 1970,
    raises ``ValueError`` naming it."""
    if not isinstance(text, str):
        raise TypeError(f"expected an ISO 8601 date and time as text, got {text!r}")
    try:
        moment = datetime.datetime.fromisoformat(text.strip())
        if moment.tzinfo is None:
            moment = moment.astimezone()  # the machine's zone at that moment
        millis = (moment - _EPOCH) // datetime.timedelta(milliseconds=1)
    except (ValueError, OverflowError, OSError):
        raise ValueError(f"{text!r} is not an ISO 8601 date or date and time (e.g. 2026-11-29, "
                         "2026-11-29T13:05:01Z, 2026-11-29T14:05:01.123+01:00)") from None
    if millis < 0:
        raise ValueError(f"{text!r} is before 1970 (timestamps are ms since 1970-01-01T00:00:00Z)")
    return millis


def format_iso_ms(timestamp_ms: int) -> str:
    """``timestamp_ms`` (ms since the epoch) as ISO 8601 UTC with milliseconds,
    ``2026-11-29T13:05:01.123Z``; a negative one (Kafka's -1: no timestamp) stays the number."""
    if timestamp_ms < 0:
        return str(timestamp_ms)
    try:
        moment = _EPOCH + datetime.timedelta(milliseconds=timestamp_ms)
    except OverflowError:  # past year 9999: only a number can say it
        return str(timestamp_ms)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
