"""Fetch sessions (KIP-227) over the wire: raw Fetch requests against the server (sessions created,
incremental answers holding only what changed, forgotten partitions, the session errors, sessions
bound to a principal, the settings), the byte figures of a consumer of 1,000 partitions, and the
real clients: kafka-python uses sessions and reads correctly through them; confluent-kafka
(librdkafka), aiokafka and kafkajs fetch sessionless (epoch -1) and still work."""

from __future__ import annotations

import contextlib

import pytest

from clients import registry
from logstore import LogManager, Record
from logstore.bench.fetch_sessions import measure
from logstore.server import KafkaServer
from logstore.server.protocol import errors
from logstore.server.security.credentials import CredentialStore
from wire_client import WireClient

FETCH = 1
SESSION_USERS = {"alice": "alice-secret", "bob": "bob-secret"}


@contextlib.contextmanager
def sessions_server(data_dir, config=None, listen="127.0.0.1:0"):
    with LogManager([str(data_dir)]) as store, KafkaServer(store, listen=listen, config=config) as server:
        yield server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with sessions_server(tmp_path_factory.mktemp("fetch-sessions")) as running:
        yield running


def fetch_body(partitions, session_id=0, epoch=-1, forgotten=(), topic="t", max_wait_ms=0):
    """A Fetch v11 body naming ``partitions`` ({partition: fetch offset}) of ``topic``."""
    forgotten_by_topic: dict[str, list] = {}
    for name, partition in forgotten:
        forgotten_by_topic.setdefault(name, []).append(partition)
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": session_id, "session_epoch": epoch, "rack_id": "",
            "forgotten_topics_data": [{"topic": name, "partitions": parts} for name, parts in forgotten_by_topic.items()],
            "topics": [{"topic": topic, "partitions": [
                {"partition": p, "current_leader_epoch": -1, "fetch_offset": offset, "log_start_offset": -1,
                 "partition_max_bytes": 1 << 20} for p, offset in partitions.items()]}] if partitions else []}


def answered(body) -> dict:
    return {(entry["topic"], data["partition_index"]): data for entry in body["responses"]
            for data in entry["partitions"]}


def append(store, topic, partition, *values):
    store.get_log(topic, partition).append([Record(value=value) for value in values])


def test_full_then_incremental_fetches(server):
    store = server.store
    store.create_topic("inc", 4)
    for p in range(4):
        append(store, "inc", p, b"a")
    client = WireClient(server.bootstrap_servers)
    full = client.call(FETCH, 11, fetch_body(dict.fromkeys(range(4), 0), epoch=0, topic="inc"))
    session_id = full["session_id"]
    assert session_id != 0 and full["error_code"] == errors.NONE
    assert sorted(answered(full)) == [("inc", p) for p in range(4)]
    # Nothing moved: the consumer names the partitions whose offsets moved, and nothing comes back.
    idle = client.call(FETCH, 11, fetch_body(dict.fromkeys(range(4), 1), session_id, 1, topic="inc"))
    assert (idle["error_code"], idle["session_id"], idle["responses"]) == (errors.NONE, session_id, [])
    append(store, "inc", 2, b"b", b"c")
    got = client.call(FETCH, 11, fetch_body({}, session_id, 2, topic="inc"))
    assert list(answered(got)) == [("inc", 2)]
    assert answered(got)[("inc", 2)]["high_watermark"] == 3 and answered(got)[("inc", 2)]["records"]
    # Forget partition 2 and move 3 back to 0: only 3 comes back (records again).
    append(store, "inc", 2, b"d")
    got = client.call(FETCH, 11, fetch_body({3: 0}, session_id, 3, forgotten=[("inc", 2)], topic="inc"))
    assert list(answered(got)) == [("inc", 3)]
    assert list(server.fetch_sessions.get(session_id).partitions) == [("inc", 0), ("inc", 1), ("inc", 3)]
    # A wrong epoch is refused and the session stays; an unknown id is not found.
    wrong = client.call(FETCH, 11, fetch_body({}, session_id, 9, topic="inc"))
    assert (wrong["error_code"], wrong["session_id"], wrong["responses"]) == (errors.INVALID_FETCH_SESSION_EPOCH, 0, [])
    unknown = client.call(FETCH, 11, fetch_body({}, session_id ^ 0x40000000, 1, topic="inc"))
    assert unknown["error_code"] == errors.FETCH_SESSION_ID_NOT_FOUND
    assert client.call(FETCH, 11, fetch_body({}, session_id, 4, topic="inc"))["error_code"] == errors.NONE
    # Epoch -1 with the id closes the session (answered in full, sessionless).
    last = client.call(FETCH, 11, fetch_body({0: 1}, session_id, -1, topic="inc"))
    assert last["session_id"] == 0 and list(answered(last)) == [("inc", 0)]
    assert server.fetch_sessions.get(session_id) is None
    client.close()


def test_an_error_is_answered_until_it_is_gone(server):
    """A partition with an error is in every incremental answer; once it is gone it comes back once."""
    client = WireClient(server.bootstrap_servers)
    server.store.create_topic("err", 1)
    full = client.call(FETCH, 11, fetch_body({0: 5}, epoch=0, topic="err"))  # out of range
    session_id = full["session_id"]
    assert answered(full)[("err", 0)]["error_code"] == errors.OFFSET_OUT_OF_RANGE and session_id
    again = client.call(FETCH, 11, fetch_body({}, session_id, 1, topic="err"))
    assert answered(again)[("err", 0)]["error_code"] == errors.OFFSET_OUT_OF_RANGE
    fixed = client.call(FETCH, 11, fetch_body({0: 0}, session_id, 2, topic="err"))
    assert answered(fixed)[("err", 0)]["error_code"] == errors.NONE
    assert client.call(FETCH, 11, fetch_body({}, session_id, 3, topic="err"))["responses"] == []
    client.close()


def test_an_incremental_fetch_waits_for_new_data(server):
    """max_wait_ms: an idle incremental fetch parks; an append answers it with just that partition."""
    server.store.create_topic("wait", 3)
    client = WireClient(server.bootstrap_servers)
    session_id = client.call(FETCH, 11, fetch_body(dict.fromkeys(range(3), 0), epoch=0, topic="wait"))["session_id"]
    client.send(FETCH, 11, fetch_body({}, session_id, 1, topic="wait", max_wait_ms=10_000))
    append(server.store, "wait", 1, b"late")
    _, got = client.receive(FETCH, 11)
    assert list(answered(got)) == [("wait", 1)] and got["session_id"] == session_id
    client.close()


def test_old_versions_and_disabled_cache_are_sessionless(tmp_path):
    with sessions_server(tmp_path, {"max.incremental.fetch.session.cache.slots": 0}) as off:
        off.store.create_topic("t", 1)
        client = WireClient(off.bootstrap_servers)
        body = client.call(FETCH, 11, fetch_body({0: 0}, epoch=0))
        assert body["session_id"] == 0 and list(answered(body)) == [("t", 0)]
        assert len(off.fetch_sessions) == 0
        client.close()


def test_a_session_belongs_to_its_principal(tmp_path):
    """Another principal's fetch with the id is "not found" (it can neither read nor close the
    session); the owner's other connection uses it."""
    store = CredentialStore(str(tmp_path))
    for user, password in SESSION_USERS.items():
        store.set(user, "SCRAM-SHA-256", password)
    with sessions_server(tmp_path, {"authorizer.enable": "false"},
                         listen=["SASL_PLAINTEXT://127.0.0.1:0", "PLAINTEXT://127.0.0.1:0"]) as running:
        running.store.create_topic("t", 2)
        addresses = {protocol: f"{host}:{port}" for protocol, (host, port) in running.endpoints.items()}
        alice, alice2, bob = (_login(addresses["SASL_PLAINTEXT"], user) for user in ("alice", "alice", "bob"))
        anonymous = WireClient(addresses["PLAINTEXT"])
        session_id = alice.call(FETCH, 11, fetch_body({0: 0, 1: 0}, epoch=0))["session_id"]
        assert session_id
        for stranger in (bob, anonymous):
            assert stranger.call(FETCH, 11, fetch_body({}, session_id, 1))["error_code"] == \
                errors.FETCH_SESSION_ID_NOT_FOUND
            stranger.call(FETCH, 11, fetch_body({0: 0}, session_id, -1))  # cannot close it either
        assert alice2.call(FETCH, 11, fetch_body({}, session_id, 1))["error_code"] == errors.NONE
        assert running.fetch_sessions.get(session_id).principal == "User:alice"
        for client in (alice, alice2, bob, anonymous):
            client.close()


def test_a_withdrawn_read_acl_ends_a_sessions_data(tmp_path):
    """With ACLs enforced, an incremental fetch's session topics are checked on every fetch: a READ
    denied after the session was made answers TOPIC_AUTHORIZATION_FAILED and no records."""
    from logstore.server.security.acls import bindings_for
    with sessions_server(tmp_path, {"authorizer.enable": "true"}) as running:
        running.authorizer.create(bindings_for(allow_principals=["User:ANONYMOUS"], topics=["open", "secret"],
                                               operations=["All"]))
        for topic in ("open", "secret"):
            running.store.create_topic(topic, 1)
            append(running.store, topic, 0, b"a")
        client = WireClient(running.bootstrap_servers)
        body = fetch_body({0: 0}, epoch=0, topic="open")
        body["topics"].append({"topic": "secret", "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "log_start_offset": -1,
             "partition_max_bytes": 1 << 20}]})
        full = client.call(FETCH, 11, body)
        assert sorted(answered(full)) == [("open", 0), ("secret", 0)] and full["session_id"]
        running.authorizer.create(bindings_for(deny_principals=["User:ANONYMOUS"], topics=["secret"],
                                               operations=["Read"]))
        append(running.store, "secret", 0, b"b")
        got = client.call(FETCH, 11, fetch_body({0: 1}, full["session_id"], 1, topic="open"))
        assert list(answered(got)) == [("secret", 0)]
        assert answered(got)[("secret", 0)]["error_code"] == errors.TOPIC_AUTHORIZATION_FAILED
        assert not answered(got)[("secret", 0)]["records"]
        client.close()


def _login(address: str, user: str) -> WireClient:
    from logstore.server.security.scram import ScramClient
    client = WireClient(address)
    assert client.call(17, 1, {"mechanism": "SCRAM-SHA-256"})["error_code"] == errors.NONE
    scram = ScramClient("SCRAM-SHA-256", user, SESSION_USERS[user])
    first = client.call(36, 1, {"auth_bytes": scram.first()})
    final = client.call(36, 1, {"auth_bytes": scram.final(first["auth_bytes"])})
    assert final["error_code"] == errors.NONE, final
    return client


def test_a_consumer_of_1000_partitions_gets_only_what_changed(tmp_path):
    """The figure of docs/guide/server.md, measured in bytes: with nothing changed an incremental
    round names and answers no partition and is tens of bytes each way (the sessionless round names
    and answers all 1,000); with one partition changed it answers exactly that one."""
    results = measure(partitions=1000, rounds=1, work_dir=str(tmp_path))
    session, sessionless = results["session"], results["sessionless"]
    assert session["session_id"] != 0
    assert sessionless["idle"]["partitions_answered"] == 1000 and sessionless["idle"]["partitions_sent"] == 1000
    assert session["idle"]["partitions_answered"] == 0 and session["idle"]["partitions_sent"] == 0
    assert session["idle"]["request_bytes"] < 100 and session["idle"]["response_bytes"] < 100
    assert sessionless["idle"]["response_bytes"] > 1000 * 30  # every partition's 30+ bytes
    for row in session["one_changed"]["all"]:
        assert row["partitions_answered"] == 1 and row["response_bytes"] < 300
    assert results["goal"]["pass"]


# --- real clients ----------------------------------------------------------------------------------

SMALL_FETCH = {  # below one batch: one batch per fetch (KIP-74 sends the first whole)
    "kafka-python": {"max_partition_fetch_bytes": 64},
    "confluent-kafka": {"max.partition.fetch.bytes": 64, "fetch.max.bytes": 1024, "message.max.bytes": 1000},
    "aiokafka": {"max_partition_fetch_bytes": 64},
    "kcat": {"max.partition.fetch.bytes": 64, "fetch.max.bytes": 1024, "message.max.bytes": 1000},
}
SESSION_CLIENTS = {"kafka-python"}
"""The clients that send fetch sessions (kafka-python's FetchSessionHandler, on by default); the
others send epoch -1 on every fetch: librdkafka implements only KIP-932 share sessions, aiokafka and
kafkajs none (kafkajs's driver does not consume by assignment: its consumers run in
test_txn_kafkajs.py and the group tests, sessionless, against this server)."""


@pytest.mark.parametrize("driver", registry.CONSUMERS, indirect=True)
def test_clients_read_every_record_through_sessions_or_without(server, driver, request):
    """Twelve one-record batches read one batch per fetch (max.partition.fetch.bytes below a batch),
    so a session client goes through many incremental fetches with moving offsets; every record comes
    back once, in order, whatever the client."""
    topic = f"clients-{driver.name}"
    server.store.create_topic(topic, 1)
    for i in range(12):
        append(server.store, topic, 0, b"v%d" % i)
    before = dict(server.fetch_sessions.served)
    got = driver.consume(server.bootstrap_servers, topic, 0, count=12, timeout_s=30,
                         config=SMALL_FETCH.get(driver.name))
    assert [record.value for record in got] == [b"v%d" % i for i in range(12)]
    assert [record.offset for record in got] == list(range(12))
    incremental = server.fetch_sessions.served["incremental"] - before.get("incremental", 0)
    if driver.name in SESSION_CLIENTS:
        assert incremental >= 3
    else:
        assert incremental == 0
        assert server.fetch_sessions.served["full"] == before.get("full", 0)


def test_perf_sessions_smoke(tmp_path):
    """`logstore perf sessions` at a tiny size: its table and the goal line."""
    from click.testing import CliRunner

    from logstore.cli.main import main
    outcome = CliRunner().invoke(main, ["perf", "sessions", "--partitions", "20", "--rounds", "1",
                                        "--dir", str(tmp_path)])
    assert outcome.exit_code == 0, outcome.output
    assert "session      idle                 69          22      0         0" in outcome.output
    goal = [line for line in outcome.output.splitlines() if line.startswith("goal:")]
    assert len(goal) == 1 and goal[0].endswith("PASS"), outcome.output
