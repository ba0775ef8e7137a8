"""Consumer groups with real clients (docs/design.md §9, §12): members of
kafka-python, confluent-kafka, aiokafka and kafkajs, each a process of its own (``clients/groups.py``
runs ``group_member.py`` / ``kafkajs_group_member.js``), join groups on 4-partition topics and
report their assignments, records and commits as JSON lines.

- two members of a group split the partitions 2/2 (every client), and DescribeGroups agrees;
- a member that closes (LeaveGroup) hands its partitions over at once; one that is SIGKILLed is
  evicted after ``session.timeout.ms`` and not before (every client);
- committed offsets survive a restart of ``logstore serve``, clean and kill -9: a new member resumes
  at them, no record lost or read twice;
- cooperative-sticky (two back-to-back generations): the first member keeps what it retains;
- kafka-python and confluent-kafka in one group, both with ``range``, split 2/2;
- a static member (``group.instance.id``) restarts within the session timeout without a rebalance;
- confluent-kafka with ``group.protocol=consumer`` (KIP-848) fails with a clear error and the
  server stays healthy.

The group broker runs with ``group.initial.rebalance.delay.ms=0`` (``GROUP_SETTINGS``); members use
a 6 s session timeout (the server's ``group.min.session.timeout.ms`` default) and 500 ms heartbeats.
Every wait is bounded; every member process is killed in the fixture's finalizer.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import pytest
from conftest import TANSU, logstore_only, tansu_gets_wrong

from clients.confluent_driver import ConfluentDriver
from clients.groups import GroupMember, describe_group, wait_split
from clients.registry import DRIVER_CLASSES  # noqa: F401 - a missing Python client fails collection
from logstore import Record

pytestmark = pytest.mark.kafka_clients

PARTITIONS = range(4)
ALL = set(PARTITIONS)
SESSION_MS = 6000
HEARTBEAT_MS = 500
# A rebalance: the members learn of it on their next heartbeat, rejoin and sync. Generous for 2 cores.
REBALANCE_S = 20
EVERY_CLIENT = ["kafka-python", "confluent-kafka", "aiokafka", "kafkajs"]


@pytest.fixture
def members(tmp_path, driver_factory):
    """``start(client, bootstrap, group, topic, name=..., **options)`` -> a running ``GroupMember``;
    every member is killed at the end of the test. kafkajs skips (or fails under
    LOGSTORE_REQUIRE_TOOLS) without node or kafkajs, as the other client tests do."""
    started: list[GroupMember] = []

    def start(client, bootstrap, group, topic, *, name, **options):
        if client == "kafkajs":
            driver_factory("kafkajs")  # skips or fails where node or kafkajs is missing
        options.setdefault("session_timeout_ms", SESSION_MS)
        options.setdefault("heartbeat_interval_ms", HEARTBEAT_MS)
        member = GroupMember(client, bootstrap, group, topic, log_dir=tmp_path, name=name, **options)
        started.append(member)
        return member

    try:
        yield start
    finally:
        for member in started:
            member.stop()


@pytest.fixture
def group(request):
    return f"group-{request.node.name[:60]}-{uuid.uuid4().hex[:8]}"


def make_topic(bootstrap: str, topic: str, partitions: int = 4) -> str:
    """Created through confluent-kafka's admin client (the broker may be a separate process)."""
    ConfluentDriver().create_topic(bootstrap, topic, partitions=partitions)
    return topic


def produce(bootstrap: str, topic: str, per_partition: int, tag: str) -> set[tuple[int, str]]:
    """``per_partition`` records into every partition, through confluent-kafka; {(partition, value)}."""
    sent = set()
    producer = ConfluentDriver()
    for partition in PARTITIONS:
        values = [f"{tag}-p{partition}-{i}" for i in range(per_partition)]
        producer.produce(bootstrap, topic, [Record(None, v.encode(), [], None) for v in values], partition=partition)
        sent.update((partition, v) for v in values)
    return sent


def wait_consumed(member: GroupMember, wanted, timeout_s: float, what: str):
    """Wait until ``member`` consumed every (partition, value) in ``wanted``."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = {(p, v) for p, _, v in member.consumed()}
        if set(wanted) <= got or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    missing = set(wanted) - got
    assert not missing, f"{what}: {member.name} never consumed {sorted(missing)[:10]}\n{member.report()}"


def start_pair(members, client_a, client_b, bootstrap, group, topic, **options):
    """Two members of ``group``, A then B (A first gets everything), split 2/2: (A, B)."""
    a = members(client_a, bootstrap, group, topic, name=f"{client_a}-a", **options)
    a.wait_assignment(ALL, REBALANCE_S)
    b = members(client_b, bootstrap, group, topic, name=f"{client_b}-b", **options)
    wait_split([a, b], PARTITIONS, REBALANCE_S, "two members")
    return a, b


def described(bootstrap, group, expected_count, timeout_s=REBALANCE_S) -> dict:
    """DescribeGroups until it shows a Stable group of ``expected_count`` members: the description
    (``describe_group``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        description = describe_group(bootstrap, group)
        if (description["state"] == "Stable" and len(description["members"]) == expected_count) \
                or time.monotonic() >= deadline:
            return description
        time.sleep(0.2)


# Tansu 0.6.0's DescribeGroups lists the members' ids and nothing else of them: no protocol name,
# client id, instance id or assignment (empty strings and nulls). Those checks run on our server only.
TANSU_DESCRIBE = TANSU


def check_described(description, topic, holding: dict[str, set[int]], member_ids: dict[str, str]) -> None:
    """``description`` shows a Stable group whose members are ``member_ids`` (name -> member id) and
    hold ``holding`` (name -> partitions)."""
    assert description["state"] == "Stable", description
    by_id = {m["member_id"]: m for m in description["members"]}
    assert set(by_id) == set(member_ids.values()), f"DescribeGroups members {sorted(by_id)}, the clients say " \
                                                   f"{member_ids}: {description}"
    if TANSU_DESCRIBE:
        return
    assert description["protocol_type"] == "consumer", description
    for name, member_id in member_ids.items():
        assert set(by_id[member_id]["assignment"].get(topic, ())) == holding[name], \
            f"DescribeGroups: {name} ({member_id}) holds {by_id[member_id]['assignment']}, it says " \
            f"{sorted(holding[name])}: {description}"


def member_id(member: GroupMember) -> str:
    return member.of("assigned")[-1]["member_id"]


def generation(member: GroupMember, since: int = 0) -> int | None:
    """The generation of its last assignment from ``since`` on, where the client tells it
    (kafka-python, aiokafka); None otherwise."""
    assigned = [e for e in member.events[since:] if e["event"] == "assigned"]
    return assigned[-1].get("generation") if assigned else None


# --- a. two members split the partitions ----------------------------------------------------------

@pytest.mark.parametrize("client", EVERY_CLIENT)
def test_two_members_split_four_partitions(group_broker, members, group, topic, client):
    """Two members of one group hold 2 partitions each; records produced then reach the member that
    holds their partition, and only it; DescribeGroups shows the same two members and assignments."""
    bootstrap = group_broker.bootstrap_servers
    make_topic(bootstrap, topic)
    a, b = start_pair(members, client, client, bootstrap, group, topic)
    held = {a.name: a.assignment, b.name: b.assignment}
    sent = produce(bootstrap, topic, 2, "split")
    for member in (a, b):
        wait_consumed(member, {(p, v) for p, v in sent if p in held[member.name]}, 20, "after the split")
        strays = {(p, v) for p, _, v in member.consumed() if (p, v) in sent and p not in held[member.name]}
        assert not strays, f"{member.name} consumed records of partitions it does not hold: {sorted(strays)}"
    check_described(described(bootstrap, group, 2), topic, held, {a.name: member_id(a), b.name: member_id(b)})
    assert generation(a) == generation(b), "the two members hold assignments of different generations"


# --- b. a member leaves -----------------------------------------------------------------------------

@pytest.mark.parametrize("client", EVERY_CLIENT)
def test_member_that_closes_hands_its_partitions_over(group_broker, members, group, topic, client):
    """B closes (LeaveGroup): A holds all 4 partitions well before B's session could have expired,
    and the group has one member."""
    bootstrap = group_broker.bootstrap_servers
    make_topic(bootstrap, topic)
    a, b = start_pair(members, client, client, bootstrap, group, topic)
    mark = a.mark()
    before = generation(a)
    closed_at = time.monotonic()
    b.close()
    got_all = a.wait_assignment(ALL, REBALANCE_S, since=mark)
    waited = got_all["at"] - closed_at
    assert waited < SESSION_MS / 1000 - 1, \
        f"A got B's partitions {waited:.1f}s after B closed: by session expiry, not by LeaveGroup\n{a.report()}"
    if before is not None:
        assert generation(a, mark) == before + 1, f"one rebalance, one generation more\n{a.report()}"
    check_described(described(bootstrap, group, 1), topic, {a.name: ALL}, {a.name: member_id(a)})


# --- c. a member is killed --------------------------------------------------------------------------

@pytest.mark.parametrize("client", EVERY_CLIENT)
def test_killed_member_is_evicted_after_the_session_timeout(group_broker, members, group, topic, client):
    """B is SIGKILLed (no LeaveGroup): the group keeps its assignment until B's session expires
    (``session.timeout.ms`` after B's last heartbeat), then A gets all 4 partitions."""
    bootstrap = group_broker.bootstrap_servers
    make_topic(bootstrap, topic)
    a, b = start_pair(members, client, client, bootstrap, group, topic)
    mark = a.mark()
    before = generation(a)
    b.kill()
    killed_at = time.monotonic()
    # until B's session expires the group is as it was: Stable, B still a member
    check_described(described(bootstrap, group, 2, timeout_s=0), topic, {a.name: a.assignment, b.name: b.assignment},
                    {a.name: member_id(a), b.name: member_id(b)})
    got_all = a.wait_assignment(ALL, SESSION_MS / 1000 + REBALANCE_S, since=mark)
    waited = got_all["at"] - killed_at
    # B's last heartbeat was at most one interval before the kill; a little slack for scheduling.
    earliest = (SESSION_MS - 2 * HEARTBEAT_MS) / 1000 - 0.5
    assert waited >= earliest, (f"A got B's partitions {waited:.1f}s after B was killed: before B's session "
                                f"({SESSION_MS} ms) could expire\n{a.report()}")
    early = [e for e in a.events[mark:] if e["event"] in ("revoked", "lost") and e["at"] < killed_at + earliest]
    assert not early, f"A saw a rebalance before B's session expired: {early}"
    if before is not None:
        assert generation(a, mark) == before + 1, f"one rebalance, one generation more\n{a.report()}"
    check_described(described(bootstrap, group, 1), topic, {a.name: ALL}, {a.name: member_id(a)})


# --- d. committed offsets survive a restart ---------------------------------------------------------

PER_PARTITION = 10
RESTARTS = [
    ("confluent-kafka", "none"),  # the baseline (runs under Tansu too, whose memory engine cannot restart)
    ("kafka-python", "clean"),
    ("confluent-kafka", "kill9"),
]


@pytest.mark.parametrize("client,how", RESTARTS, ids=[f"{c}-{h}" for c, h in RESTARTS])
def test_committed_offsets_survive_a_server_restart(serve_process, members, group, topic, client, how):
    """A member consumes 15 of 40 records, commits exactly what it consumed and closes; the server
    restarts (SIGTERM, or kill -9); a new member of the group starts at the committed offsets and
    reads the other 25: no record lost, none read twice."""
    if how != "none" and not serve_process.can_restart:
        pytest.skip("Tansu's memory engine keeps nothing across a restart")
    bootstrap = serve_process.bootstrap_servers
    make_topic(bootstrap, topic)
    sent = produce(bootstrap, topic, PER_PARTITION, "commit")
    first = members(client, bootstrap, group, topic, name=f"{client}-first", stop_after=15)
    first.wait_for(lambda e: e["event"] in ("committed", "error"), REBALANCE_S + 10, "commit")
    first.wait_exit(20)
    assert not first.errors(), first.report()
    before = first.consumed()
    committed = first.committed()
    assert len(before) == 15, first.report()
    assert committed == {p: max(o for q, o, _ in before if q == p) + 1 for p in {q for q, _, _ in before}}

    if how != "none":
        serve_process.restart(how)
        bootstrap = serve_process.bootstrap_servers
    # the group (its last member left) is there, Empty: loaded from __consumer_offsets, not unknown ("Dead")
    description = describe_group(bootstrap, group)
    assert description["state"] == "Empty" and not description["members"], \
        f"after a {how} restart: {description}\n--- server log:\n{serve_process.log_tail()}"
    second = members(client, bootstrap, group, topic, name=f"{client}-second")
    try:
        wait_consumed(second, sent - {(p, v) for p, _, v in before}, REBALANCE_S + 10, f"after a {how} restart")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- server log:\n{serve_process.log_tail()}") from None
    time.sleep(0.5)  # anything read twice would come right behind
    after = second.consumed()
    for partition in PARTITIONS:
        offsets = [o for p, o, _ in after if p == partition]
        if committed.get(partition) == PER_PARTITION:
            assert not offsets, f"partition {partition} was read to its end and committed, then read again"
            continue
        assert offsets and offsets[0] == committed.get(partition, 0), \
            (f"partition {partition}: the new member started at {offsets[:1]}, the group committed "
             f"{committed.get(partition)}\n{second.report()}\n--- server log:\n{serve_process.log_tail()}")
    read = [(p, v) for p, _, v in before + after]
    assert sorted(set(read)) == sorted(sent), "a record was lost"
    assert len(read) == len(set(read)), f"records read twice: {sorted(r for r in set(read) if read.count(r) > 1)}"


# --- e. cooperative-sticky --------------------------------------------------------------------------

@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
def test_cooperative_sticky_keeps_the_partitions_the_first_member_retains(group_broker, members, group, topic,
                                                                           client):
    """KIP-429: B joins A's cooperative-sticky group. A gives up only the partitions that move (one
    incremental revoke), never the two it keeps; B gets them in the generation after (two
    back-to-back generations, where the client reports generations)."""
    bootstrap = group_broker.bootstrap_servers
    make_topic(bootstrap, topic)
    options = {"assignor": ["cooperative-sticky"]}
    a = members(client, bootstrap, group, topic, name=f"{client}-a", **options)
    a.wait_assignment(ALL, REBALANCE_S)
    mark = a.mark()
    b = members(client, bootstrap, group, topic, name=f"{client}-b", **options)
    holding = wait_split([a, b], PARTITIONS, 2 * REBALANCE_S, "cooperative-sticky")
    kept, moved = holding[a.name], holding[b.name]
    after = a.events[mark:]
    dropped = [e for e in after if e["event"] in ("revoked", "lost") and set(e["partitions"]) & kept]
    assert not dropped, f"A was made to give up partitions it kept: {dropped}\n{a.report()}"
    revoked = [p for e in after if e["event"] == "revoked" for p in e["partitions"]]
    assert sorted(revoked) == sorted(moved), f"A revoked {revoked}, B got {sorted(moved)}\n{a.report()}"
    assert not [e for e in after if e["event"] == "lost"], a.report()
    generations = [e["generation"] for e in a.of("assigned") + b.of("assigned") if e.get("generation") is not None]
    if generations:  # kafka-python tells its generation: B's partitions come one generation after A's revoke
        # (the generation in which A got everything: kafka-python's leader may first assign nothing,
        # when it joins before it has the topic's metadata, and rejoin at once)
        first = [e for e in a.events[:mark] if e["event"] == "assigned"][-1]["generation"]
        final = b.of("assigned")[-1]["generation"]
        assert final == first + 2, f"generations {first} -> {final}, expected two back-to-back rebalances\n" \
                                   f"{a.report()}\n{b.report()}"


# --- f. mixed clients -------------------------------------------------------------------------------

def test_kafka_python_and_confluent_kafka_share_a_group_with_range(group_broker, members, group, topic):
    """Both offer ``range``: the leader (whichever) assigns 0-1 to one and 2-3 to the other."""
    bootstrap = group_broker.bootstrap_servers
    make_topic(bootstrap, topic)
    a, b = start_pair(members, "kafka-python", "confluent-kafka", bootstrap, group, topic, assignor=["range"])
    assert sorted(map(sorted, (a.assignment, b.assignment))) == [[0, 1], [2, 3]], (a.assignment, b.assignment)
    description = described(bootstrap, group, 2)
    check_described(description, topic, {a.name: a.assignment, b.name: b.assignment},
                    {a.name: member_id(a), b.name: member_id(b)})
    assert description["protocol"] == "range" or TANSU_DESCRIBE, description


# --- g. static membership ---------------------------------------------------------------------------

STATIC = [("kafka-python", "close"), ("confluent-kafka", "kill")]


@tansu_gets_wrong("a static member that rejoins with its group.instance.id makes Tansu 0.6.0 rebalance the group "
                  "(the other member is revoked and reassigned, a new generation), and the rejoin takes ~6 s")
@pytest.mark.parametrize("client,how", STATIC, ids=[f"{c}-{h}" for c, h in STATIC])
def test_static_member_restarts_without_a_rebalance(group_broker, members, group, topic, client, how):
    """KIP-345: B (``group.instance.id``) stops without leaving (a static member's close sends no
    LeaveGroup; or SIGKILL) and a new process with the same instance id joins within the session
    timeout: it gets B's partitions back, A sees no rebalance, not then and not when B's old session
    would have expired, and DescribeGroups shows the instance with a new member id."""
    bootstrap = group_broker.bootstrap_servers
    make_topic(bootstrap, topic)
    a = members(client, bootstrap, group, topic, name=f"{client}-a", instance_id=f"{group}-a")
    a.wait_assignment(ALL, REBALANCE_S)
    b = members(client, bootstrap, group, topic, name=f"{client}-b", instance_id=f"{group}-b")
    holding = wait_split([a, b], PARTITIONS, REBALANCE_S, "two static members")
    old_member_id = b.of("assigned")[-1]["member_id"]
    mark = a.mark()
    stopped_at = time.monotonic()
    if how == "close":
        b.close()
    else:
        b.kill()
    again = members(client, bootstrap, group, topic, name=f"{client}-b-again", instance_id=f"{group}-b")
    back = again.wait_for(lambda e: e["event"] == "assigned" and e["assignment"], SESSION_MS / 1000, "assignment")
    assert back["at"] - stopped_at < SESSION_MS / 1000, "the restart took longer than the session timeout"
    assert set(back["assignment"]) == holding[b.name], again.report()
    # past the moment B's old session would have expired: still no rebalance
    time.sleep(max(0.0, stopped_at + SESSION_MS / 1000 + 2 * HEARTBEAT_MS / 1000 + 0.5 - time.monotonic()))
    rebalances = [e for e in a.events[mark:] if e["event"] in ("revoked", "assigned", "lost")]
    assert not rebalances, f"A saw a rebalance when static member B restarted: {rebalances}\n{a.report()}"
    assert again.assignment == holding[b.name], again.report()
    description = described(bootstrap, group, 2)
    check_described(description, topic, {a.name: a.assignment, again.name: again.assignment},
                    {a.name: member_id(a), again.name: member_id(again)})
    assert member_id(again) != old_member_id, "the restarted static member kept its old member id"
    assert generation(again) == generation(b), "the static member came back in another generation"
    if not TANSU_DESCRIBE:
        instances = {m["group_instance_id"]: m["member_id"] for m in description["members"]}
        assert instances == {f"{group}-a": member_id(a), f"{group}-b": member_id(again)}, description


# --- h. KIP-848 -------------------------------------------------------------------------------------

def test_consumer_group_protocol_fails_clearly_and_the_server_stays_healthy(group_broker, members, group, topic):
    """confluent-kafka with ``group.protocol=consumer`` needs ConsumerGroupHeartbeat (API 68, KIP-848),
    which the server does not offer: the member never joins and librdkafka says why. (librdkafka
    2.16 raises no error for it, to error_cb or poll: it logs "ConsumerGroupHeartbeatRequest not
    supported by broker" under debug=cgrp and keeps retrying; where a librdkafka makes it a fatal
    _UNSUPPORTED_FEATURE error, that counts as well.) A classic member of another group then works as
    usual: the server stays healthy."""
    bootstrap = group_broker.bootstrap_servers
    make_topic(bootstrap, topic)
    modern = members("confluent-kafka", bootstrap, group, topic, name="kip848", group_protocol="consumer",
                     extra_args=["--debug", "cgrp", "--log-match", "not supported by broker"])

    def says_why(event):
        text = f"{event.get('error', '')} {event.get('message', '')}"
        return (event["event"] in ("error", "log") and "ConsumerGroupHeartbeat" in text) or \
            (event["event"] == "error" and "UNSUPPORTED_FEATURE" in text)

    modern.wait_for(says_why, 20, "a word that the broker lacks ConsumerGroupHeartbeat")
    assert not modern.of("assigned"), f"a KIP-848 member got an assignment\n{modern.report()}"
    modern.close()
    classic = members("confluent-kafka", bootstrap, f"{group}-classic", topic, name="classic")
    classic.wait_assignment(ALL, REBALANCE_S)


# --- logstore groups describe beside the server --------------------------------------------------

@logstore_only("the CLI reads our server's data dir")
def test_groups_describe_beside_the_server_shows_what_real_clients_did(serve_process, members, group, topic):
    """While `logstore serve` runs, `logstore groups describe` (a read-only view of its data dir)
    shows a real client's group: the member and its four partitions while it is in the group, then,
    after another committed 15 of 40 records and left, its committed offsets and the lag per partition."""
    bootstrap = serve_process.bootstrap_servers
    make_topic(bootstrap, topic)
    produce(bootstrap, topic, PER_PARTITION, "lag")

    def describe() -> dict:
        command = [sys.executable, "-P", "-m", "logstore.cli", "--dir", str(serve_process.data),
                   "groups", "describe", group, "--json"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    live = members("kafka-python", bootstrap, group, topic, name="live")
    live.wait_for(lambda e: e["event"] == "assigned" and len(e.get("assignment") or ()) == 4, REBALANCE_S, "assigned")
    deadline = time.monotonic() + 20  # the group record is written when the leader's assignment is stored
    while True:
        described = describe()
        if described["state"] == "Stable" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert described["state"] == "Stable" and len(described["members"]) == 1, described
    assert sorted(map(tuple, described["members"][0]["partitions"])) == [(topic, p) for p in PARTITIONS]
    live.close()

    first = members("kafka-python", bootstrap, group, topic, name="first", stop_after=15)
    first.wait_for(lambda e: e["event"] in ("committed", "error"), REBALANCE_S + 10, "commit")
    first.wait_exit(20)
    committed = first.committed()
    described = describe()
    assert described["state"] == "Empty" and described["members"] == []
    by_partition = {entry["partition"]: entry for entry in described["partitions"] if entry["topic"] == topic}
    for partition, offset in committed.items():
        entry = by_partition[int(partition)]
        assert (entry["committed_offset"], entry["log_end_offset"], entry["lag"]) == \
            (offset, PER_PARTITION, PER_PARTITION - offset), described
    assert sum(committed.values()) == 15  # what it consumed, committed: the rest is the lag shown
