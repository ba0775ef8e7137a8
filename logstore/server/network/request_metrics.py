"""Per-API request counts and total times (Kafka's ``RequestMetrics``: ``RequestsPerSec`` and
``TotalTimeMs`` per request type), kept by the network thread as it finishes each request.

A request's total time runs from the moment its frame was complete (``RequestContext.received_ms``,
on the server's monotonic clock) to the moment its answer (or its close) reached the network
thread, queueing, handling and any wait in a purgatory included, as Kafka's ``TotalTimeMs``. Times
go into fixed buckets (a Prometheus histogram): recording is a lookup and two additions, and only
the network thread records, so no lock is taken; a scrape reads a copy.

It imports nothing of the server.
"""

from __future__ import annotations

import bisect

BUCKETS_MS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)
"""The histogram's upper bounds in milliseconds (each bucket counts the times at or below it; the
last, unbounded, bucket is implied)."""


class ApiTimes:
    """One API's total time and per-bucket counts (not cumulative; ``BUCKETS_MS`` plus the unbounded
    last one). The count is the buckets' sum, so a copy is always a consistent histogram."""

    __slots__ = ("sum_ms", "buckets")

    def __init__(self) -> None:
        self.sum_ms = 0
        self.buckets = [0] * (len(BUCKETS_MS) + 1)

    @property
    def count(self) -> int:
        return sum(self.buckets)

    def copy(self) -> "ApiTimes":
        other = ApiTimes()
        other.sum_ms, other.buckets = self.sum_ms, list(self.buckets)
        return other


class RequestMetrics:
    """Request counts and total-time histograms per API key. ``record`` is called by one thread
    only (the network thread); ``snapshot`` may be called from any."""

    def __init__(self) -> None:
        self._apis: dict[int, ApiTimes] = {}

    def record(self, api_key: int, elapsed_ms: int) -> None:
        times = self._apis.get(api_key)
        if times is None:
            times = self._apis[api_key] = ApiTimes()
        elapsed_ms = max(elapsed_ms, 0)
        times.sum_ms += elapsed_ms
        times.buckets[bisect.bisect_left(BUCKETS_MS, elapsed_ms)] += 1

    def snapshot(self) -> dict[int, ApiTimes]:
        """A copy of every API's figures, by API key (the sum of one may be a request ahead of its
        buckets: a scrape is not a transaction)."""
        return {api_key: times.copy() for api_key, times in list(self._apis.items())}


__all__ = ["ApiTimes", "BUCKETS_MS", "RequestMetrics"]
