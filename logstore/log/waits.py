"""The two waits a user of a log has: a read that waits for data, served through the fetch
purgatory (Kafka's DelayedFetch), and a durable append that waits for an fsync, served by the
group-commit flusher that makes durable appends cheap.

This module owns:

- ``DelayedFetch``: a read that waits until ``min_bytes`` of new data are available at one or more
  (log, offset) positions, or ``max_wait_ms`` passes. Appends complete it: a log publishes its new
  end offset, then calls ``check_and_complete`` on the fetch purgatory for its key, outside its lock.
- ``GroupCommitFlusher``: one thread that fsyncs the logs durable appends are waiting on. An
  ``acks="all"`` append writes its batch (encoded outside any lock), joins the log's next
  ``FlushRound`` and blocks on a lock of its own; the flusher takes every waiting log with its
  round, flushes each (one fsync covers every append so far) and releases the round, waking all its
  appends at once (no purgatory operation, timer entry or completion per append). While it fsyncs,
  more appends arrive: the next round covers them all. After each flush it also completes what the
  server parked in the produce purgatory (Kafka's DelayedProduce: a response, not a thread).
  Durable appends that return a future (``durable_futures``) leave a part in the round instead of
  blocking; the round's release settles it.
- ``LogWaits``: the two purgatories, the flusher and the futures' registry, shared by every log of
  a store (a standalone ``Log`` makes its own on first use).

The ``Log`` calls into this module, so the waits do not import it: they see a log through
``WaitedLog``, a protocol of just what they use (its key, offsets, state, segments and ``flush``).

Wake-ups are never lost: whoever changes the state (the appender, the flusher, a close) publishes it
first and wakes after; a waiter registers and checks again (``purgatory``'s contract; for a flush
round: join the round, then re-check the recovery point, ``closed`` and ``failed``).
"""

from __future__ import annotations

import logging
import threading
from _thread import allocate_lock as _allocate_lock
from dataclasses import dataclass
from typing import Callable, Hashable, Mapping, Protocol, Sequence, TypeVar

from ..clock import SYSTEM_CLOCK, Stopwatch
from ..errors import ShutdownError
from ..records.decoder import RECORD_OVERHEAD_BYTES
from ..timer.purgatory import DelayedOperation, DelayedOperationPurgatory
from ..timer.system_timer import SystemTimer
from .dir_watch import DirectoryWatcher
from .durable_futures import DEFAULT_MAX_PENDING_APPENDS, DurableFutures, DurablePart, FutureLog, RoundExpiry

logger = logging.getLogger(__name__)

# A waiter that the timer somehow never woke gives up this long after its deadline (defensive: the
# timer is tested, but a waiter must never hang forever).
DURABLE_GRACE_S = _GRACE_S = 5.0
# Before it starts, a round waits for the appenders in flight (those the last round woke append
# again within moments; those already waiting) to join it, for at most this fraction of the last
# round's flush time, bounded below and above. Without it, N synchronous callers settle into two
# groups of N/2 taking turns, each fsync covering half of them; with a fast disk, into many small
# rounds, each costing the flusher's Python work and an fsync's CPU. It ends as soon as everyone in
# flight joined, so it costs time only when an appender does not come back (then the next round
# expects fewer).
LINGER_FRACTION = 0.5
MIN_LINGER_S = 0.002
MAX_LINGER_S = 0.005


class GrowingSegment(Protocol):
    """A log's segment as a fetch wait sees it: appends to the active one grow its size."""

    @property
    def size_bytes(self) -> int: ...


class WaitedLog(FutureLog, Protocol):
    """What the waits use of a log (``Log`` is one; it calls into this module, which therefore
    cannot import it): what a durable append's part uses (``FutureLog``: its key in the
    purgatories, recovery point and state), its other offsets, its segments (the last is the
    active one), a flush, and a read-only view's directory and ``refresh``."""

    @property
    def name(self) -> str: ...

    @property
    def dir_path(self) -> str: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def last_stable_offset(self) -> int: ...

    @property
    def segments(self) -> Sequence[GrowingSegment]: ...

    def flush(self) -> int: ...

    def refresh(self) -> bool: ...


@dataclass
class FetchPosition:
    """Where one log is read from: the offset, the active segment and its size when the wait began,
    and the bytes the first read already found there. ``committed``: a read_committed read, for
    which only data below the last stable offset is available."""

    log: WaitedLog
    offset: int
    segment: GrowingSegment
    size_bytes: int
    found_bytes: int = 0
    committed: bool = False

    @classmethod
    def at(cls, log: WaitedLog, offset: int, found_bytes: int = 0, committed: bool = False) -> "FetchPosition":
        segment = log.segments[-1]
        return cls(log, offset, segment, segment.size_bytes, found_bytes, committed)

    def available_bytes(self) -> int | None:
        """Bytes available since the wait began; None when the read must be answered at once
        (the log closed, failed or was truncated below the offset, or a new segment was rolled)."""
        log = self.log
        if log.closed or log.failed or log.log_end_offset < self.offset:
            return None
        active = log.segments[-1]
        if active is not self.segment:
            return None  # Kafka's "the end offset moved to another segment": answer with what is there
        if (log.last_stable_offset if self.committed else log.log_end_offset) <= self.offset:
            return self.found_bytes  # (read_committed: appended, but not decided yet)
        return self.found_bytes + max(active.size_bytes - self.size_bytes, 1)


class DelayedFetch(DelayedOperation):
    """A read of one or more positions that completes once ``min_bytes`` are available in total
    (batch bytes appended since the wait began, plus what the first read found), when any position
    must be answered at once, or after ``delay_ms``."""

    def __init__(self, delay_ms: int, positions: Sequence[FetchPosition], min_bytes: int) -> None:
        super().__init__(delay_ms)
        self.positions = list(positions)
        self.min_bytes = min_bytes
        self.done = threading.Event()
        self.expired = False

    def try_complete(self) -> bool:
        total = 0
        for position in self.positions:
            available = position.available_bytes()
            if available is None:
                return self.force_complete()
            total += available
        if total >= self.min_bytes:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.done.set()

    def on_expiration(self) -> None:
        self.expired = True


class FlushRound:
    """The durable appends of one log waiting for the flusher's next flush of it. Each blocking
    waiter parks on a lock of its own, held from the start, that ``release`` (the flusher, once that
    flush ended: fsynced, failed, or skipped because the log is closed or failed) lets go: one
    wake-up per waiter, no shared lock for the woken to queue on again (a ``Condition`` has one).
    The appends that return futures (``durable_futures``) leave a part each instead, which
    ``release`` settles, and the round's ``RoundExpiry`` times them out."""

    __slots__ = ("waiters", "parts", "expiry")

    def __init__(self) -> None:
        self.waiters: list = []  # held locks (``GroupCommitFlusher.join``)
        self.parts: list[DurablePart] | None = None  # (``GroupCommitFlusher.join_parts``)
        self.expiry: RoundExpiry | None = None

    def release(self) -> None:
        """Wake every waiter and settle every part (once per round; a waiter that timed out
        meanwhile ignores it)."""
        for waiter in self.waiters:
            waiter.release()
        parts = self.parts
        if parts is not None:
            if self.expiry is not None:
                self.expiry.finish()
            for part in parts:
                part.settle()


class GroupCommitFlusher:
    """A thread that flushes the logs durable appends wait on, many appends per fsync.

    ``wait(log, required_offset, timeout_s)`` (a durable append, after writing its batch) joins the
    log's next ``FlushRound`` and blocks on it; ``request(log)`` only marks ``log`` (for waiters
    that park elsewhere: the server's produce responses); ``join_parts`` adds a future's parts
    (``durable_futures``) to the rounds of their logs. A round takes every marked log and its
    round, flushes each log (one fsync covers everything appended to it so far), releases the
    round's waiters, and completes what waits in the produce purgatory (``check_and_complete``).
    Appends that arrive during an fsync are covered by the next round, which starts once the
    appenders in flight (those the last round woke, those already waiting) joined it, or after a
    bounded fraction of the last flush time (``LINGER_FRACTION``), whichever comes first. An fsync
    error makes that log fail-stop (``Log.flush``); its waiters wake and see the failure. The thread
    starts on the first request."""

    def __init__(self, produce: DelayedOperationPurgatory | None = None, name: str = "logstore-group-commit") -> None:
        self.produce = produce  # set by LogWaits once the server or a caller parks operations there
        self.name = name
        self._lock = threading.Lock()
        self._wanted = threading.Event()
        self._pending: dict[int, WaitedLog] = {}
        self._rounds: dict[int, FlushRound] = {}  # id(log) -> the round of its next flush
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._full = threading.Event()
        self._joined = 0
        self._expected = 0
        self._linger_s = 0.0
        self.expiry_timer: SystemTimer | None = None  # set by LogWaits once futures wait (join_parts)
        self.rounds = 0  # flush rounds so far
        self.flushes = 0  # log flushes so far (a round flushes each requested log once)

    def request(self, log: WaitedLog) -> None:
        """Ask for ``log`` to be flushed soon (cheap; many requests before a round cost one flush)."""
        with self._lock:
            if self._stopped:
                return  # shutting down: the store's own shutdown flush covers the log
            self._pending[id(log)] = log
            if self._thread is None:
                self._start()
        self._wanted.set()

    def wait(self, log: WaitedLog, required_offset: int, timeout_s: float) -> None:
        """Block until a flush of ``log`` that began after this call ended, the log closed or
        failed, or ``timeout_s`` passed; the caller checks ``log.recovery_point``. The records
        below ``required_offset`` must be written (their end offset published) before the call."""
        waiter = _allocate_lock()
        waiter.acquire()
        # Joined, then checked again: a close or a failure after the caller's check either shows
        # here or wakes the round (``wake``), so no wake-up is lost.
        if (self.join(log, waiter) and log.recovery_point < required_offset and not log.closed
                and not log.failed):
            waiter.acquire(timeout=timeout_s)

    def join(self, log: WaitedLog, waiter) -> bool:
        """Add ``waiter``, a lock its owner holds and will block on, to ``log``'s next flush round,
        which releases it once that flush ended (or the log closed or failed). False, with nothing
        joined, once the flusher has shut down (the store closed: no flush comes)."""
        key = id(log)
        with self._lock:
            if self._stopped:
                return False
            round_ = self._rounds.get(key)
            if round_ is None:
                round_ = self._rounds[key] = FlushRound()
            round_.waiters.append(waiter)
            self._pending[key] = log
            self._joined_locked()
        self._want_flush()
        return True

    def join_parts(self, parts: Sequence[tuple[WaitedLog, DurablePart]]) -> bool:
        """Add each ``(log, part)`` (a durable append's future's share of ``log``) to ``log``'s next
        flush round, all at once (so one round covers every log of a call), which settles it once
        that flush ended; a round's expiry, armed at the earliest deadline of its parts on
        ``expiry_timer``, fails those still waiting then. False, with nothing joined, once the
        flusher has shut down."""
        with self._lock:
            if self._stopped:
                return False
            for log, part in parts:
                key = id(log)
                round_ = self._rounds.get(key)
                if round_ is None:
                    round_ = self._rounds[key] = FlushRound()
                joined = round_.parts
                if joined is None:
                    joined = round_.parts = [part]
                    timer = self.expiry_timer
                    if timer is not None:
                        round_.expiry = RoundExpiry(joined, timer, part.deadline_ms)
                        self._arm(round_.expiry, part.deadline_ms)
                else:
                    joined.append(part)
                    expiry = round_.expiry
                    if expiry is not None and part.deadline_ms < expiry.at_ms:  # a shorter timeout than the others'
                        self._arm(expiry, part.deadline_ms)
                self._pending[key] = log
            self._joined_locked()
        self._want_flush()
        return True

    def _joined_locked(self) -> None:
        """A caller joined (under the lock): the round is full when every expected caller has; the
        flusher thread starts with the first."""
        self._joined += 1
        if self._joined == self._expected:
            self._full.set()
        if self._thread is None:
            self._start()

    def _want_flush(self) -> None:
        wanted = self._wanted
        if not wanted.is_set():  # (a check first: set() takes the event's lock every time)
            wanted.set()

    @staticmethod
    def _arm(expiry: RoundExpiry, at_ms: int) -> None:
        try:
            expiry.arm(at_ms)
        except ShutdownError:  # the store is closing: its close settles every round
            pass

    def wake(self, key: Hashable) -> None:
        """Wake the waiters of every log under ``key`` now (it closed or failed): they re-check."""
        with self._lock:
            woken = [self._rounds.pop(k) for k, log in self._pending.items() if log.key == key and k in self._rounds]
        for round_ in woken:
            round_.release()

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            # Lingering first: the appenders in flight join (the one that completes the count wakes
            # this thread, the others' ``_wanted.set()`` finds nobody to wake), then ``_wanted`` is
            # set already. One wake-up per round, not one to start lingering and one to end it.
            linger_s = self._linger_s
            if linger_s and self._joined < self._expected:
                self._full.wait(linger_s)
            self._wanted.wait()
            with self._lock:
                self._wanted.clear()
                self._full.clear()
                logs, self._pending = self._pending, {}
                rounds, self._rounds = self._rounds, {}
                joined, self._joined = self._joined, 0
                stopped = self._stopped
            started = Stopwatch.now_s()
            for key, log in logs.items():
                self._flush(log, rounds.pop(key, None))
            if logs:
                self.rounds += 1
                flush_s = Stopwatch.now_s() - started
                with self._lock:
                    # Everyone in flight: the appenders just woken, who append again within
                    # moments, and those already waiting for the next round.
                    self._expected = joined + self._joined
                self._linger_s = (min(max(flush_s * LINGER_FRACTION, MIN_LINGER_S), MAX_LINGER_S)
                                 if self._expected > 1 else 0.0)
            if stopped:
                return

    def _flush(self, log: WaitedLog, round_: FlushRound | None) -> None:
        try:
            if not log.closed and not log.failed:
                log.flush()
                self.flushes += 1
        except Exception as exc:  # the log is fail-stop or closed; its waiters learn it from the log
            logger.warning("group commit: flushing %s failed: %s", log.name, exc)
        finally:
            if round_ is not None:
                round_.release()
            produce = self.produce
            if produce is not None:
                produce.check_and_complete(log.key)

    def shutdown(self, timeout_s: float | None = 5.0) -> None:
        """Finish the round in progress and any requested flushes, then stop. Idempotent."""
        with self._lock:
            self._stopped = True
            thread = self._thread
        self._full.set()  # no lingering: finish now
        self._wanted.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)


class LogWaits:
    """The fetch and produce purgatories and the group-commit flusher of one store (or one
    standalone log). Threads start lazily: a store that never waits starts none, and durable
    appends alone start only the flusher (they wait on its rounds, not in the produce purgatory);
    the first future (``futures``) starts the produce purgatory too, whose timer times out rounds."""

    def __init__(self, name: str = "logstore", max_pending_appends: int = DEFAULT_MAX_PENDING_APPENDS) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._fetch: DelayedOperationPurgatory | None = None
        self._produce: DelayedOperationPurgatory | None = None
        self._flusher: GroupCommitFlusher | None = None
        self._futures: DurableFutures | None = None
        self._max_pending_appends = max_pending_appends
        self._closed = False

    @property
    def fetch(self) -> DelayedOperationPurgatory:
        if self._fetch is None:
            with self._lock:
                if self._fetch is None:
                    self._fetch = DelayedOperationPurgatory(f"{self.name}-fetch")
        return self._fetch

    @property
    def produce(self) -> DelayedOperationPurgatory:
        """The purgatory of operations that wait for fsyncs without a thread each (the server's
        produce responses); the flusher completes them after each flush."""
        if self._produce is None:
            with self._lock:
                if self._produce is None:
                    self._produce = DelayedOperationPurgatory(f"{self.name}-produce")
                    if self._flusher is not None:
                        self._flusher.produce = self._produce
        return self._produce

    @property
    def flusher(self) -> GroupCommitFlusher:
        if self._flusher is None:
            with self._lock:
                if self._flusher is None:
                    self._flusher = GroupCommitFlusher(self._produce, f"{self.name}-group-commit")
        return self._flusher

    @property
    def futures(self) -> DurableFutures:
        """The futures of durable appends that do not block (``Log.append_future``): they join the
        flusher's rounds, and time out on the produce purgatory's timer (one entry per round)."""
        if self._futures is None:
            flusher, timer = self.flusher, self.produce.timer  # (each takes the lock: not under it)
            with self._lock:
                if self._futures is None:
                    flusher.expiry_timer = timer
                    self._futures = DurableFutures(flusher.join_parts, self._max_pending_appends)
        return self._futures

    def purgatory_sizes(self) -> dict[str, tuple[int, int]]:
        """``{"Fetch": (watched, delayed), "Produce": ...}``: each purgatory's watch-list entries and
        operations in its timer (Kafka's PurgatorySize and NumDelayedOperations); (0, 0) for one not
        made yet (asking makes none)."""
        return {name: (0, 0) if purgatory is None else (purgatory.watched(), purgatory.delayed())
                for name, purgatory in (("Fetch", self._fetch), ("Produce", self._produce))}

    def wait_fsynced(self, log: WaitedLog, required_offset: int, timeout_ms: int) -> None:
        """Block until ``log``'s recovery point covers ``required_offset`` or ``timeout_ms`` passes,
        sharing the flusher's fsync with every other waiter (the caller checks the recovery point)."""
        self.flusher.wait(log, required_offset, timeout_ms / 1000.0)

    def data_arrived(self, key: Hashable) -> None:
        """Called by a log after it published a new end offset: completes the reads it satisfies."""
        fetch = self._fetch
        if fetch is not None:
            fetch.check_and_complete(key)

    def wake_all(self, keys: Sequence[Hashable]) -> None:
        """Complete every wait on ``keys`` whose condition now holds (after a close or a failure)."""
        for key in keys:
            if self._fetch is not None:
                self._fetch.check_and_complete(key)
            if self._produce is not None:
                self._produce.check_and_complete(key)
            if self._flusher is not None:
                self._flusher.wake(key)

    def shutdown(self) -> None:
        """Flush what durable appends wait for, then stop the threads. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            flusher, fetch, produce = self._flusher, self._fetch, self._produce
        if flusher is not None:
            flusher.shutdown()
        for purgatory in (fetch, produce):
            if purgatory is not None:
                purgatory.shutdown()


def wait_for(op: DelayedFetch, purgatory: DelayedOperationPurgatory, keys: Sequence[Hashable],
             delay_ms: int) -> None:
    """Watch ``op`` under ``keys`` and block until it completes (or expires)."""
    if purgatory.try_complete_else_watch(op, keys):
        return
    if not op.done.wait(delay_ms / 1000.0 + _GRACE_S) and op.force_complete():
        logger.error("%s was not completed by its timer after %d ms; completed by its waiter", op, delay_ms)


# --- argument checks and helpers shared by Log and LogManager ---------------------------------------

DEFAULT_DURABLE_TIMEOUT_MS = 30000  # Kafka's request.timeout.ms
MAX_TIMEOUT_MS = 2**31 - 1  # Kafka's int32 timeouts; the timers and the OS waits hold far more
ACKS = (1, "1", "all", -1, "-1")


def durable_acks(acks, timeout_ms) -> bool:
    """Whether an append with ``acks`` waits for fsync; raises ``ValueError`` for an ``acks`` or
    ``timeout_ms`` an append cannot take, before anything is appended (a timeout that failed after
    the append would make a retry duplicate the records). The default, ``acks=1`` with an int
    timeout in range, costs two comparisons."""
    if acks == 1 and type(acks) is int and type(timeout_ms) is int and 0 <= timeout_ms <= MAX_TIMEOUT_MS:
        return False
    if acks not in ACKS or isinstance(acks, bool):
        raise ValueError(f"acks must be 1 (written to the OS) or 'all' (fsynced), got {acks!r}")
    check_timeout("timeout_ms", timeout_ms)
    return acks in ("all", -1, "-1")


def check_timeout(name: str, value) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is an int in [0, ``MAX_TIMEOUT_MS``]."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_TIMEOUT_MS:
        raise ValueError(f"{name} must be an int between 0 and {MAX_TIMEOUT_MS} (ms), got {value!r}")


def check_wait(min_bytes, max_wait_ms) -> None:
    """Raise ``ValueError`` for a ``min_bytes`` or ``max_wait_ms`` a read cannot take."""
    if not isinstance(min_bytes, int) or isinstance(min_bytes, bool) or min_bytes < 0:
        raise ValueError(f"min_bytes must be an int >= 0, got {min_bytes!r}")
    check_timeout("max_wait_ms", max_wait_ms)


def records_bytes(records) -> int:
    """What ``min_bytes`` is compared with for records already read: their keys, values and a
    per-record overhead (as ``max_bytes`` counts them)."""
    total = 0
    for record in records:
        total += RECORD_OVERHEAD_BYTES + len(record.value or b"") + len(record.key or b"")
    return total


_Key = TypeVar("_Key", bound=Hashable)
_Read = TypeVar("_Read")


def read_or_wait(reads: Mapping[_Key, tuple[WaitedLog, int]], read_all: Callable[[], dict[_Key, list[_Read]]],
                 min_bytes: int, max_wait_ms: int, waits: LogWaits | None,
                 enough: Callable[[dict[_Key, list[_Read]]], bool] | None = None,
                 committed: bool = False) -> dict[_Key, list[_Read]]:
    """Kafka's fetch: ``read_all()`` the positions ``reads`` (key -> (log, offset)); when that found
    fewer than ``min_bytes`` (and ``enough`` of it, if given, says it is not enough) and
    ``max_wait_ms`` > 0, wait (``wait_for_data``) for appends to any of them to bring ``min_bytes``
    or for ``max_wait_ms``, then read again. The caller checks ``min_bytes``/``max_wait_ms``."""
    found = read_all()
    found_bytes = {key: records_bytes(records) for key, records in found.items()}
    if (max_wait_ms == 0 or not reads or sum(found_bytes.values()) >= min_bytes
            or (enough is not None and enough(found))):
        return found
    wait_for_data([FetchPosition.at(log, offset, found_bytes[key], committed) for key, (log, offset) in reads.items()],
                  min_bytes, max_wait_ms, waits)
    return read_all()


def wait_for_data(positions: Sequence[FetchPosition], min_bytes: int, max_wait_ms: int,
                  waits: LogWaits | None) -> None:
    """Block until ``min_bytes`` are available at ``positions`` or ``max_wait_ms`` passes: through
    the fetch purgatory of ``waits`` (appends in this process complete it), or, for read-only views
    (``waits`` is None), by watching the files another process appends to."""
    if waits is None:
        wait_for_files(positions, min_bytes, max_wait_ms)
    else:
        keys = [position.log.key for position in positions]
        wait_for(DelayedFetch(max_wait_ms, positions, min_bytes), waits.fetch, keys, max_wait_ms)


def wait_for_files(positions: Sequence[FetchPosition], min_bytes: int, max_wait_ms: int) -> None:
    """The fetch wait of a read-only view, whose appends happen in another process: watch the
    partition dirs (inotify, no polling where available), refresh the views on each change, and
    return once ``min_bytes`` are available or ``max_wait_ms`` passed (real time)."""
    deadline_ms = SYSTEM_CLOCK.monotonic_ms() + max_wait_ms
    with DirectoryWatcher(sorted({position.log.dir_path for position in positions})) as watcher:
        while True:
            total = 0
            for position in positions:
                position.log.refresh()
                available = position.available_bytes()
                if available is None:
                    return
                total += available
            remaining_ms = deadline_ms - SYSTEM_CLOCK.monotonic_ms()
            if total >= min_bytes or remaining_ms <= 0:
                return
            watcher.wait(remaining_ms)
