"""Incremental fetch sessions (Kafka's KIP-227): the ``FetchSessionCache`` the fetch handler asks
what each Fetch reads and what its answer carries, so a consumer of many partitions sends and
receives only what changed.

The protocol (Fetch v7+, ``session_id`` and ``session_epoch`` in the request, ``session_id`` in the
answer):

- epoch -1 (sessionless; every client before v7): the fetch names every partition and is answered
  in full, session id 0. A session id sent with epoch -1 closes that session.
- epoch 0 (full): as above, and the server may create a session holding the partitions it named
  (their fetch offsets and ``partition_max_bytes``, and what the answer told about each: high
  watermark, last stable offset, log start offset). The answer carries its id, or 0 when none was
  created (the cache refused: the client goes on sessionless). A session id sent with epoch 0 is
  closed first (a client starting over).
- epoch > 0 (incremental): the request names only the partitions added or changed since the last
  request (a new fetch offset or size) and lists in ``forgotten_topics_data`` the ones to drop; the
  server reads every partition of the session, at the offsets it holds, and answers only those with
  records, a new high watermark, last stable offset or log start offset, or an error. A partition
  answered moves to the end of the session's order, so under ``fetch.max.bytes`` the others get
  their turn. The epoch the server expects next is one more (after 2**31-1 comes 1). An unknown id
  is ``FETCH_SESSION_ID_NOT_FOUND`` (70), a wrong epoch ``INVALID_FETCH_SESSION_EPOCH`` (71) and the
  session stays; a session left with no partitions is closed (answer session id 0).

The cache (Kafka's rules): at most ``max.incremental.fetch.session.cache.slots`` sessions. When full,
a new session takes the slot of the least recently used one if that was unused for
``min.incremental.fetch.session.eviction.ms``; else of the smallest session (fewest partitions, then
lowest id) that had lived longer than that when last used, provided the new one has strictly more
partitions (a big session saves more than a small one); else it is refused. Ours on top: a
session belongs to the principal of the connection that created it (another principal's id is
"not found", so it cannot be read, closed or probed), and holds at most
``max.incremental.fetch.session.partitions`` partitions: a full fetch naming more gets no session,
an incremental one growing past it closes the session (70, so the client starts over with a full
fetch, answered sessionless). What a client costs the server is then bounded by what it sent.

Session ids are random (31 bits, never 0). Thread-safe: one lock over the cache and its sessions
(the request handler threads share it). Topic ids (v13+) and so ``FETCH_SESSION_TOPIC_ID_ERROR``
do not apply: the server speaks Fetch up to v11, which names topics.
"""

from __future__ import annotations

import random
import threading
from collections import Counter, OrderedDict
from typing import Any, Iterable

from ...clock import SYSTEM_CLOCK, Clock
from ...errors import LogStoreError
from ...log.waits import FetchPosition
from ..protocol import errors

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1

TopicPartition = tuple[str, int]
Wanted = tuple[str, int, int, int]  # (topic, partition, fetch offset, partition max bytes)

# the slots of a cached partition's list
_OFFSET, _MAX_BYTES, _HIGH_WATERMARK, _STABLE, _START = range(5)


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch``: -1 stays -1 (no session), 2**31-1 wraps to 1 (0 means "new")."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == 0x7FFFFFFF else epoch + 1


class FetchSession:
    """One session: its partitions in fetch order, ``(topic, partition) -> [fetch offset, max
    bytes, high watermark, last stable offset, log start offset]`` (the last three as last answered,
    -1 when unknown or after an error), the epoch expected next, its principal and times."""

    __slots__ = ("id", "principal", "partitions", "epoch", "created_ms", "last_used_ms")

    def __init__(self, session_id: int, principal: Any, partitions: OrderedDict, now_ms: int) -> None:
        self.id = session_id
        self.principal = principal
        self.partitions = partitions
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.created_ms = now_ms
        self.last_used_ms = now_ms

    def __len__(self) -> int:
        return len(self.partitions)

    def __repr__(self) -> str:
        return f"FetchSession(id={self.id}, partitions={len(self.partitions)}, epoch={self.epoch})"


class FetchContext:
    """What one Fetch reads and how its answer is finished: ``error`` (a session error: answer it
    with no partitions), ``wanted`` (the partitions to read, in order) and ``finish(body)`` (the
    answer as sent: its session id, and for an incremental fetch only what changed)."""

    __slots__ = ("cache", "kind", "error", "wanted", "session", "principal")

    def __init__(self, cache: "FetchSessionCache", kind: str, wanted: list[Wanted], *, error: int = errors.NONE,
                 session: FetchSession | None = None, principal: Any = None) -> None:
        self.cache = cache
        self.kind = kind  # "sessionless", "full", "incremental" or "error"
        self.error = error
        self.wanted = wanted
        self.session = session
        self.principal = principal

    def split_quiet(self, store, committed: bool, wanted: list[Wanted]) -> tuple[list[Wanted], list[FetchPosition]]:
        """``wanted`` (an incremental fetch's partitions, or those of them it may read) split into (those to read, the wait positions of the
        quiet ones). Quiet: the consumer is at the log end and the log end, last stable and log start
        offsets are what the session last answered, so a read would find no records and nothing
        changed to answer; a consumer of many partitions, few of them busy, costs the server a few
        attribute reads per idle partition (the positions keep a parked fetch watching them all)."""
        if self.kind != "incremental":
            return wanted, []
        partitions = self.session.partitions
        get_log = store.get_log
        read: list[Wanted] = []
        positions: list[FetchPosition] = []
        for entry in wanted:
            topic, partition, offset, _max_bytes = entry
            cached = partitions.get((topic, partition))
            try:
                log = get_log(topic, partition)
                end = log.log_end_offset
                quiet = (cached is not None and offset == end == cached[_HIGH_WATERMARK]
                         and min(log.last_stable_offset, end) == cached[_STABLE]
                         and log.log_start_offset == cached[_START])
            except LogStoreError:
                quiet = False  # read: the error is answered
            if quiet:
                positions.append(FetchPosition.at(log, offset, 0, committed))
            else:
                read.append(entry)
        return read, positions

    def finish(self, body: dict) -> dict:
        """``body`` (the read of ``wanted``, partitions in that order) made the answer to send."""
        if self.kind == "full":
            body["session_id"] = self.cache._create(self.principal, self.wanted, body["responses"])
        elif self.kind == "incremental":
            body["session_id"] = self.session.id
            body["responses"] = self.cache._changed(self.session, body["responses"])
        else:
            body["session_id"] = INVALID_SESSION_ID
        return body


class FetchSessionCache:
    """The server's fetch sessions (see the module docstring). ``new_context`` is asked once per
    Fetch; the context's ``finish`` once its answer is read."""

    def __init__(self, max_slots: int = 1000, eviction_ms: int = 120_000, max_partitions: int = 10_000,
                 clock: Clock = SYSTEM_CLOCK, rng: random.Random | None = None) -> None:
        for name, value in (("max_slots", max_slots), ("eviction_ms", eviction_ms),
                            ("max_partitions", max_partitions)):
            if type(value) is not int or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self.max_partitions = max_partitions
        self.clock = clock
        self._rng = rng or random.SystemRandom()
        self._lock = threading.Lock()
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()  # least recently used first
        self.evictions = 0
        self.served: Counter[str] = Counter()  # fetches by kind: sessionless, full, incremental, error

    def __len__(self) -> int:
        return len(self._sessions)

    @property
    def partitions(self) -> int:
        """Partitions held over all sessions."""
        with self._lock:
            return sum(len(session) for session in self._sessions.values())

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def sessions(self) -> list[FetchSession]:
        """The sessions, least recently used first."""
        with self._lock:
            return list(self._sessions.values())

    # --- one request ------------------------------------------------------------------------------

    def new_context(self, principal: Any, session_id: int, epoch: int, wanted: list[Wanted],
                    forgotten: Iterable[TopicPartition] = ()) -> FetchContext:
        """The context of a Fetch of ``principal`` with ``session_id``/``epoch``, naming ``wanted``
        and forgetting ``forgotten`` (see the module docstring)."""
        with self._lock:
            context = self._context(principal, session_id, epoch, wanted, forgotten)
            self.served[context.kind] += 1
            return context

    def _context(self, principal: Any, session_id: int, epoch: int, wanted: list[Wanted],
                 forgotten: Iterable[TopicPartition]) -> FetchContext:
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                old = self._sessions.get(session_id)
                if old is not None and old.principal == principal:
                    del self._sessions[session_id]  # a full fetch closes the session it names
            if epoch == FINAL_EPOCH or self.max_slots == 0 or len(wanted) > self.max_partitions:
                return FetchContext(self, "sessionless", wanted)
            return FetchContext(self, "full", wanted, principal=principal)
        session = self._sessions.get(session_id)
        if session is None or session.principal != principal:
            return FetchContext(self, "error", [], error=errors.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return FetchContext(self, "error", [], error=errors.INVALID_FETCH_SESSION_EPOCH)
        partitions = session.partitions
        for topic, partition, offset, max_bytes in wanted:
            cached = partitions.get((topic, partition))
            if cached is None:
                partitions[(topic, partition)] = [offset, max_bytes, -1, -1, -1]
            else:
                cached[_OFFSET] = offset
                cached[_MAX_BYTES] = max_bytes
        for tp in forgotten:
            partitions.pop(tp, None)
        if len(partitions) > self.max_partitions:
            # grown past its bound: closed, and the client starts over (its full fetch is
            # answered without a session)
            del self._sessions[session_id]
            return FetchContext(self, "error", [], error=errors.FETCH_SESSION_ID_NOT_FOUND)
        if not partitions:
            del self._sessions[session_id]
            return FetchContext(self, "sessionless", wanted)
        session.epoch = next_epoch(session.epoch)
        session.last_used_ms = self.clock.monotonic_ms()
        self._sessions.move_to_end(session_id)
        return FetchContext(self, "incremental",
                            [(topic, partition, cached[_OFFSET], cached[_MAX_BYTES])
                             for (topic, partition), cached in partitions.items()], session=session)

    def close(self, principal: Any, session_id: int) -> bool:
        """Drop ``principal``'s session ``session_id``; whether there was one."""
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None or session.principal != principal:
                return False
            del self._sessions[session_id]
            return True

    # --- finishing an answer -----------------------------------------------------------------------

    def _create(self, principal: Any, wanted: list[Wanted], responses: list[dict]) -> int:
        """A full fetch of ``wanted`` answered with ``responses``: its new session's id, or 0 when
        the cache refuses one."""
        partitions: OrderedDict[TopicPartition, list] = OrderedDict(
            ((topic, partition), [offset, max_bytes, -1, -1, -1]) for topic, partition, offset, max_bytes in wanted)
        for entry in responses:
            topic = entry["topic"]
            for data in entry["partitions"]:
                cached = partitions.get((topic, data["partition_index"]))
                if cached is not None:
                    _must_answer(cached, data)
        with self._lock:
            now = self.clock.monotonic_ms()
            if not partitions:
                return INVALID_SESSION_ID  # nothing to hold: Kafka's empty session would be dropped
            if len(self._sessions) >= self.max_slots and not self._evict_for(len(partitions), now):
                return INVALID_SESSION_ID
            session_id = self._new_id()
            session = FetchSession(session_id, principal, partitions, now)
            self._sessions[session_id] = session
            return session_id

    def _evict_for(self, size: int, now: int) -> bool:
        """Free a slot for a new session of ``size`` partitions, by Kafka's rules; whether one was."""
        if not self._sessions:
            return False
        oldest = next(iter(self._sessions.values()))
        if now - oldest.last_used_ms > self.eviction_ms:
            del self._sessions[oldest.id]
            self.evictions += 1
            return True
        # Only sessions that had lived past the eviction time when last used may give way to a bigger one.
        candidates = [s for s in self._sessions.values() if s.last_used_ms - s.created_ms > self.eviction_ms]
        if not candidates:
            return False
        victim = min(candidates, key=lambda s: (len(s), s.id))
        if size <= len(victim):
            return False
        del self._sessions[victim.id]
        self.evictions += 1
        return True

    def _new_id(self) -> int:
        while True:
            session_id = self._rng.randrange(1, 0x80000000)
            if session_id not in self._sessions:
                return session_id

    def _changed(self, session: FetchSession, responses: list[dict]) -> list[dict]:
        """The answered partitions an incremental answer must carry, the session's view of them
        updated; those moved to the end of the session's order."""
        out: list[dict] = []
        with self._lock:
            partitions = session.partitions
            for entry in responses:
                topic = entry["topic"]
                kept = []
                for data in entry["partitions"]:
                    key = (topic, data["partition_index"])
                    cached = partitions.get(key)
                    if cached is None:
                        continue  # forgotten while this fetch waited
                    if not _must_answer(cached, data):
                        continue
                    kept.append(data)
                    partitions.move_to_end(key)
                if kept:
                    out.append({**entry, "partitions": kept})
        return out


def _must_answer(cached: list, data: dict) -> bool:
    """Whether an incremental answer carries this partition (records, an error, or a changed high
    watermark, last stable offset or log start offset); ``cached`` updated to what is answered."""
    answer = bool(data["records"])
    if data["error_code"] != errors.NONE:
        # -1: once the error is gone the partition is answered again
        cached[_HIGH_WATERMARK] = cached[_STABLE] = cached[_START] = -1
        return True
    for slot, key in ((_HIGH_WATERMARK, "high_watermark"), (_STABLE, "last_stable_offset"),
                      (_START, "log_start_offset")):
        value = data[key]
        if cached[slot] != value:
            cached[slot] = value
            answer = True
    return answer
