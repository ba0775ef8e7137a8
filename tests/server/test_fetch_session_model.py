"""The fetch session cache (KIP-227) against a plain model: sessions created by full fetches,
incremental fetches that add, change and forget partitions and get only what changed, epochs,
principals, closing, the per-session bound, and Kafka's eviction rules driven by a manual clock.

The model keeps every session as a plain dict and decides eviction by scanning them all; the cache
keeps a least-recently-used order and per-session ordered maps. Both see the same requests and the
same answers (a synthetic read of the partitions each fetch says it reads), and must agree on what
each request gets (its kind, error, the partitions read in order, the partitions answered) and on the
sessions left afterwards."""

from __future__ import annotations

import random

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from logstore.clock import ManualClock
from logstore.server.handlers.fetch_sessions import FetchSessionCache, next_epoch
from logstore.server.protocol import errors

SLOTS = 3
EVICTION_MS = 1000
MAX_PARTITIONS = 4
PARTITIONS = [("a", 0), ("a", 1), ("b", 0), ("b", 1), ("bad", 0)]  # "bad" answers an error
PRINCIPALS = ["User:alice", "User:bob"]

partition_lists = st.lists(st.sampled_from(PARTITIONS), unique=True, max_size=5)


def read(wanted, logs):
    """A fetch's answer as the handler builds it: each wanted partition in order, consecutive ones of
    a topic in one entry; records when the fetch offset is below the high watermark."""
    responses: list[dict] = []
    for topic, partition, offset, _max_bytes in wanted:
        if not responses or responses[-1]["topic"] != topic:
            responses.append({"topic": topic, "partitions": []})
        end, start = logs[(topic, partition)]
        error = errors.UNKNOWN_TOPIC_OR_PARTITION if topic == "bad" else errors.NONE
        responses[-1]["partitions"].append({
            "partition_index": partition, "error_code": error, "high_watermark": end, "last_stable_offset": end,
            "log_start_offset": start, "records": [b"x"] if error == errors.NONE and offset < end else b""})
    return {"throttle_time_ms": 0, "error_code": errors.NONE, "session_id": 0, "responses": responses}


def answered(body):
    return [(entry["topic"], data["partition_index"]) for entry in body["responses"] for data in entry["partitions"]]


class FetchSessions(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock(0)
        self.cache = FetchSessionCache(SLOTS, EVICTION_MS, MAX_PARTITIONS, self.clock, random.Random(7))
        self.model: dict[int, dict] = {}  # id -> session
        self.touches = 0
        self.logs = {tp: (5, 0) for tp in PARTITIONS}  # (high watermark, log start offset)

    # --- the model -------------------------------------------------------------------------------

    def _touch(self, session: dict) -> None:
        session["used"] = self.clock.monotonic_ms()
        self.touches += 1
        session["seq"] = self.touches

    def _model_evict_for(self, size: int) -> bool:
        now = self.clock.monotonic_ms()
        oldest = min(self.model.values(), key=lambda s: (s["used"], s["seq"]))
        if now - oldest["used"] > EVICTION_MS:
            del self.model[oldest["id"]]
            return True
        candidates = [s for s in self.model.values() if s["used"] - s["created"] > EVICTION_MS]
        if not candidates:
            return False
        victim = min(candidates, key=lambda s: (len(s["parts"]), s["id"]))
        if size > len(victim["parts"]):
            del self.model[victim["id"]]
            return True
        return False

    @staticmethod
    def _must_answer(cached: dict, data: dict) -> bool:
        if data["error_code"]:
            cached.update(hw=-1, lso=-1, start=-1)
            return True
        changed = bool(data["records"])
        for key, field in (("hw", "high_watermark"), ("lso", "last_stable_offset"), ("start", "log_start_offset")):
            if cached[key] != data[field]:
                cached[key] = data[field]
                changed = True
        return changed

    # --- rules -----------------------------------------------------------------------------------

    @rule(principal=st.sampled_from(PRINCIPALS), parts=partition_lists, offset=st.integers(0, 6),
          close=st.sampled_from([False, False, True]), final=st.sampled_from([False, False, False, True]))
    def full_fetch(self, principal, parts, offset, close, final):
        """A full (epoch 0) or sessionless (epoch -1) fetch, closing a session of the model's if
        ``close`` (whoever owns it: another principal's session must survive)."""
        session_id = next(iter(self.model), 0) if close else 0
        wanted = [(t, p, offset, 100) for t, p in parts]
        context = self.cache.new_context(principal, session_id, -1 if final else 0, wanted)
        if session_id and self.model[session_id]["principal"] == principal:
            del self.model[session_id]
        sessionless = final or len(parts) > MAX_PARTITIONS
        assert context.kind == ("sessionless" if sessionless else "full")
        assert context.wanted == wanted
        body = context.finish(read(wanted, self.logs))
        assert answered(body) == [(t, p) for t, p, *_ in wanted]  # a full answer holds every partition
        created = False
        if not sessionless and parts and (len(self.model) < SLOTS or self._model_evict_for(len(parts))):
            created = True
        assert (body["session_id"] != 0) == created, (body["session_id"], created)
        if created:
            assert body["session_id"] not in self.model
            parts_state = {}
            for t, p, off, mb in wanted:
                cached = {"offset": off, "max_bytes": mb, "hw": -1, "lso": -1, "start": -1}
                self._must_answer(cached, next(d for e in body["responses"] if e["topic"] == t
                                               for d in e["partitions"] if d["partition_index"] == p))
                parts_state[(t, p)] = cached
            now = self.clock.monotonic_ms()
            session = {"id": body["session_id"], "principal": principal, "parts": parts_state, "epoch": 1,
                       "created": now}
            self._touch(session)
            self.model[session["id"]] = session

    @precondition(lambda self: self.model)
    @rule(data=st.data(), stranger=st.sampled_from([False] * 6 + [True]), epoch_off=st.sampled_from([0] * 6 + [1, -1]),
          added=st.lists(st.sampled_from(PARTITIONS), unique=True, max_size=2), offset=st.integers(0, 6),
          forget=st.lists(st.sampled_from(PARTITIONS), unique=True, max_size=2))
    def incremental_fetch(self, data, stranger, epoch_off, added, offset, forget):
        self._incremental(data, stranger, epoch_off, added, offset, forget)

    def _incremental(self, data, stranger, epoch_off, added, offset, forget):
        session_id = data.draw(st.sampled_from(sorted(self.model)))
        if data.draw(st.sampled_from([False] * 9 + [True])):  # an id never handed out
            unknown = session_id ^ 0x40000000
            if unknown not in self.model:
                context = self.cache.new_context(self.model[session_id]["principal"], unknown, 1, [])
                assert (context.kind, context.error) == ("error", errors.FETCH_SESSION_ID_NOT_FOUND)
                return
        session = self.model[session_id]
        principal = PRINCIPALS[1 - PRINCIPALS.index(session["principal"])] if stranger else session["principal"]
        epoch = session["epoch"] + epoch_off
        if epoch <= 0:
            epoch = session["epoch"] + 1
        wanted = [(t, p, offset, 100) for t, p in added]
        context = self.cache.new_context(principal, session_id, epoch, wanted, forget)
        if session["principal"] != principal:
            assert (context.kind, context.error) == ("error", errors.FETCH_SESSION_ID_NOT_FOUND)
            return
        if session["epoch"] != epoch:
            assert (context.kind, context.error) == ("error", errors.INVALID_FETCH_SESSION_EPOCH)
            return
        parts = session["parts"]
        for t, p, off, mb in wanted:
            if (t, p) in parts:
                parts[(t, p)].update(offset=off, max_bytes=mb)
            else:
                parts[(t, p)] = {"offset": off, "max_bytes": mb, "hw": -1, "lso": -1, "start": -1}
        for tp in forget:
            parts.pop(tp, None)
        if len(parts) > MAX_PARTITIONS:
            del self.model[session_id]
            assert (context.kind, context.error) == ("error", errors.FETCH_SESSION_ID_NOT_FOUND)
            return
        if not parts:
            del self.model[session_id]
            assert context.kind == "sessionless"
            assert context.finish(read(context.wanted, self.logs))["session_id"] == 0
            return
        assert context.kind == "incremental"
        session["epoch"] = next_epoch(epoch)
        self._touch(session)
        expected_wanted = [(t, p, c["offset"], c["max_bytes"]) for (t, p), c in parts.items()]
        assert context.wanted == expected_wanted
        body = context.finish(read(context.wanted, self.logs))
        assert body["session_id"] == session_id
        by_tp = {(e["topic"], d["partition_index"]): d for e in read(context.wanted, self.logs)["responses"]
                 for d in e["partitions"]}
        expected = [tp for tp in list(parts) if self._must_answer(parts[tp], by_tp[tp])]
        assert answered(body) == expected
        for tp in expected:  # answered partitions go to the end of the session's order
            parts[tp] = parts.pop(tp)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def plain_incremental_fetch(self, data):
        """The common case, drawn more often: the owner, the right epoch, a partition or none changed."""
        self._incremental(data, False, 0, data.draw(
            st.lists(st.sampled_from(PARTITIONS), unique=True, max_size=1)), data.draw(st.integers(0, 6)), [])

    @precondition(lambda self: self.model)
    @rule(data=st.data(), principal=st.sampled_from(PRINCIPALS))
    def close(self, data, principal):
        session_id = data.draw(st.sampled_from(sorted(self.model)))
        closed = self.cache.close(principal, session_id)
        assert closed == (self.model[session_id]["principal"] == principal)
        if closed:
            del self.model[session_id]

    @rule(delta=st.sampled_from([1, 200, 1000, 1001, 5000]))
    def advance(self, delta):
        self.clock.advance(delta)

    @rule(tp=st.sampled_from(PARTITIONS), end=st.integers(0, 8), start=st.integers(0, 2))
    def log_changes(self, tp, end, start):
        self.logs[tp] = (end, start)

    @invariant()
    def same_sessions(self):
        sessions = {s.id: s for s in self.cache.sessions()}
        assert set(sessions) == set(self.model)
        for session_id, expected in self.model.items():
            got = sessions[session_id]
            assert got.epoch == expected["epoch"]
            assert got.principal == expected["principal"]
            assert list(got.partitions) == list(expected["parts"])
            assert [c[:2] for c in got.partitions.values()] == \
                [[c["offset"], c["max_bytes"]] for c in expected["parts"].values()]
        # least recently used first
        assert [s.id for s in self.cache.sessions()] == \
            [s["id"] for s in sorted(self.model.values(), key=lambda s: (s["used"], s["seq"]))]
        assert len(sessions) <= SLOTS
        assert all(len(s) <= MAX_PARTITIONS for s in sessions.values())


TestFetchSessions = FetchSessions.TestCase
TestFetchSessions.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)


def test_sessions_off_when_no_slots():
    """max.incremental.fetch.session.cache.slots=0: every fetch is sessionless."""
    cache = FetchSessionCache(0, EVICTION_MS, MAX_PARTITIONS, ManualClock(0))
    context = cache.new_context("User:a", 0, 0, [("a", 0, 0, 100)])
    assert context.kind == "sessionless"
    assert context.finish(read(context.wanted, {("a", 0): (1, 0)}))["session_id"] == 0
    assert len(cache) == 0


def test_epoch_wraps_to_one():
    assert [next_epoch(e) for e in (-1, 0, 1, 2**31 - 1)] == [-1, 1, 2, 1]


def test_bad_settings_named():
    for bad in (-1, 1.5, "3"):
        try:
            FetchSessionCache(bad)
        except ValueError as exc:
            assert "max_slots" in str(exc)
        else:
            raise AssertionError(f"max_slots={bad!r} accepted")


def _cache_with(clock, sizes):
    """A cache of ``len(sizes)`` slots filled with sessions of those sizes (one principal), their ids."""
    cache = FetchSessionCache(len(sizes), EVICTION_MS, 10, clock, random.Random(1))
    ids = []
    for size in sizes:
        ids.append(_full(cache, size))
    return cache, ids


def _full(cache, size, principal="User:a"):
    wanted = [("a", p, 0, 100) for p in range(size)]
    context = cache.new_context(principal, 0, 0, wanted)
    return context.finish(read(wanted, {("a", p): (1, 0) for p in range(size)}))["session_id"]


def _use(cache, session_id):
    session = cache.get(session_id)
    context = cache.new_context(session.principal, session_id, session.epoch, [])
    assert context.kind == "incremental"


def test_full_cache_refuses_a_new_session_until_one_is_stale():
    clock = ManualClock(0)
    cache, ids = _cache_with(clock, [1, 2])
    clock.advance(EVICTION_MS)
    assert _full(cache, 5) == 0  # unused for exactly min.incremental.fetch.session.eviction.ms: not stale yet
    clock.advance(1)
    _use(cache, ids[1])  # ids[0] is now the least recently used, unused for 1001 ms
    new = _full(cache, 1)  # stale: evicted for any newcomer, even a smaller one
    assert new and {s.id for s in cache.sessions()} == {ids[1], new}


def test_a_bigger_session_takes_the_slot_of_the_smallest_that_lived_long_enough():
    clock = ManualClock(0)
    cache, ids = _cache_with(clock, [3, 2, 4])
    clock.advance(EVICTION_MS + 1)
    for session_id in ids:
        _use(cache, session_id)  # all used just now: none stale, all lived past the eviction time
    assert _full(cache, 2) == 0  # as big as the smallest: refused
    new = _full(cache, 3)
    assert new and ids[1] not in {s.id for s in cache.sessions()}  # the 2-partition one gave way
    assert cache.evictions == 1


def test_a_session_not_used_since_it_was_created_is_not_evicted_for_size():
    """Kafka ranks a session for eviction by size only once it lived past the eviction time when it was
    last used; until then only staleness frees its slot."""
    clock = ManualClock(0)
    cache, ids = _cache_with(clock, [1])
    clock.advance(EVICTION_MS // 2)
    _use(cache, ids[0])
    assert _full(cache, 9) == 0
    clock.advance(EVICTION_MS // 2 + 1)
    _use(cache, ids[0])  # lived 1001 ms when last used
    assert _full(cache, 9) != 0
