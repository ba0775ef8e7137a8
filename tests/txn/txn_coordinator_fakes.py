"""Fakes of the transaction coordinator's collaborators, for its unit and model tests.

- ``FakeStateLog``: ``__transaction_state`` in memory. ``records`` is every append in order (the
  "topic"); ``load()`` replays it. ``fail_next(exc)`` makes the next append raise; ``during_append``
  runs a callback inside an append, before the record is durable (a slow fsync: the coordinator is
  then mid-transition and other requests can be tried against it).
- ``FakeMarkers``: the marker writer. It keeps each request with its ``done`` callback until the test
  completes it (``complete_all``), or completes at once when ``auto`` is set; ``written`` lists every
  marker written as (partition, producer_id, producer_epoch, commit).
- ``ProducerIds``: a counter of producer ids.
- ``make_coordinator``: a started coordinator on a manual clock and an unthreaded scheduler.
"""

from __future__ import annotations

from logstore.clock import ManualClock
from logstore.timer.scheduler import Scheduler
from logstore.txn.coordinator import TransactionCoordinator


class FakeStateLog:
    def __init__(self):
        self.records = []  # (transactional_id, value or None)
        self._fail = None
        self.during_append = None

    def fail_next(self, exc):
        self._fail = exc

    def append(self, transactional_id, value):
        if self._fail is not None:
            exc, self._fail = self._fail, None
            raise exc
        if self.during_append is not None:
            hook, self.during_append = self.during_append, None
            hook()
        self.records.append((transactional_id, value))

    def load(self):
        state = {}
        for transactional_id, value in self.records:
            if value is None:
                state.pop(transactional_id, None)
            else:
                state[transactional_id] = value
        return state

    def last(self, transactional_id):
        for tid, value in reversed(self.records):
            if tid == transactional_id:
                return value
        raise KeyError(transactional_id)


class FakeMarkers:
    def __init__(self, auto=False):
        self.auto = auto
        self.pending = []  # (request, done)
        self.written = []
        self.requests = []
        self.errors = {}  # partition -> code to answer once

    def __call__(self, request, done):
        self.requests.append(request)
        if self.auto:
            self._answer(request, done)
        else:
            self.pending.append((request, done))

    def _answer(self, request, done):
        results = {}
        for partition in sorted(request.partitions):
            code = self.errors.pop(partition, 0)
            results[partition] = code
            if code == 0:
                self.written.append((partition, request.producer_id, request.producer_epoch, request.commit))
        done(results)

    def complete_all(self):
        while self.pending:
            request, done = self.pending.pop(0)
            self._answer(request, done)

    def drop_all(self):
        """The coordinator crashed before these markers were written."""
        self.pending.clear()


class ProducerIds:
    def __init__(self, start=1000):
        self.next = start

    def __call__(self):
        pid, self.next = self.next, self.next + 1
        return pid


def make_coordinator(state_log=None, markers=None, clock=None, pids=None, config=None, start=True):
    clock = clock or ManualClock()
    scheduler = Scheduler(clock, threaded=False)
    scheduler.startup()
    coordinator = TransactionCoordinator(state_log if state_log is not None else FakeStateLog(),
                                         markers if markers is not None else FakeMarkers(auto=True), clock,
                                         scheduler, pids or ProducerIds(), config)
    if start:
        coordinator.startup()
    return coordinator
