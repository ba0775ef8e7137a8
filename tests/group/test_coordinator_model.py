"""Model test of the group coordinator: a hypothesis state machine of simulated consumers against a
plain model of what Kafka's classic group protocol guarantees (docs/design.md §9).

A few consumers (up to five, dynamic or static, each with its own session timeout of at least 6 s
and a small rebalance timeout) talk to a ``GroupCoordinator(threaded=False)`` on a manual clock
(conftest ``GroupEnv``) the way real clients do: a fresh consumer joins with JoinGroup v3 or v4
(then MEMBER_ID_REQUIRED and a second JoinGroup), the leader computes a real assignment with the
range or roundrobin assignor over topic ``t`` (4 partitions) from the members' subscriptions and
every member sends SyncGroup, members heartbeat (REBALANCE_IN_PROGRESS: rejoin;
UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION / FENCED_INSTANCE_ID: a fresh join), commit, leave, crash
(they stop talking), static consumers restart under the same ``group.instance.id``. The clock moves
by steps of various sizes, either as a jump (everyone may miss a session) or as time in which the
running consumers keep heartbeating and reacting every 500 ms. The coordinator restarts (store
closed, reopened, ``__consumer_offsets`` replayed); answers still pending are lost with the old
coordinator and their consumers treat the requests as failed and rejoin, as a real client would.

What is checked, after every step, only from what the protocol promises:
- DescribeGroups answers one of the five states; in Stable its members are exactly the members of
  the current generation (the leader's member list, with static replacements), the leader is one
  of them, and the stored assignments give every partition of ``t`` to exactly one member.
- One leader per generation: every JoinGroup answer of a generation names the same leader (up to a
  static member's change of member id) and the same protocol; only the leader gets the member list.
- The generation grows by exactly one per completed join phase: between two steps the generations
  handed out in JoinGroup answers (plus the ones at which the group went Empty) are exactly the
  numbers from the old generation + 1 up to the new one. A generation the group reached Stable (or
  Empty) in is written, so a restart comes back at exactly the last written generation and members.
- No partition is handed to two members in one generation (SyncGroup answers).
- Every commit answered 0 is returned by OffsetFetch afterwards, also after restarts, until its
  group is deleted (no retention runs here: ``offsets.retention.minutes`` is days away); commits
  answered with an error are never returned.
- Heartbeats and member commits get exactly the answer Kafka's coordinator gives for the group as
  DescribeGroups showed it just before; a Stable SyncGroup returns the member's stored assignment.
- A consumer that stopped talking is gone from the group once its session timeout has passed since
  the last event that may have refreshed it (its own requests, a completed join phase, a restart),
  unless a JoinGroup/SyncGroup of it is still parked.
- No member leaves the group without a reason the protocol gives: LeaveGroup, a static member's
  restart, a join phase that ended without it (at the earliest its rebalance timeout after the
  rebalance began), a SyncGroup it did not send within the rebalance timeout, or a session that
  passed since the last event that surely refreshed it, while no request of it was parked.
- A parked JoinGroup is answered when its join phase ends, a parked SyncGroup when the leader's
  assignment is stored or the group rebalances: a request still waiting at the end of a step means
  the group is in PreparingRebalance (JoinGroup) or CompletingRebalance (SyncGroup).
- ``settle``: once the running consumers behave (heartbeat every 500 ms, react at once) for 40 s,
  the group is Stable with exactly them as members, all in the current generation.

One known issue is tolerated (``abandon_unanswered_syncs``, minimised in
test_coordinator_regressions.py): a member removed by LeaveGroup while its SyncGroup is parked is
never answered; the model's client then gives up on that request as a real one would at its request
timeout. Remove the tolerance with the fix.

Sized for CI: the profile's example count (100 in ``ci``), 50 steps each; a few seconds here.
``HYPOTHESIS_PROFILE=soak`` runs 2000 examples.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field

from conftest import GroupEnv
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from logstore.group import errors
from logstore.group.consumer_protocol import (ASSIGNORS, Assignment, Subscription, decode_assignment,
                                              decode_subscription, encode_assignment, encode_subscription)
from logstore.group.metadata import STATES
from logstore.group.results import JoinResult, OffsetCommit, SyncResult

GROUP, SIMPLE = "g", "simple"
TOPIC_PARTITIONS = {"t": 4}
ALL_PARTITIONS = frozenset(("t", p) for p in range(4))
SESSIONS_MS = (6000, 8000, 10000)
REBALANCES_MS = (1000, 3000, 6000)
# Every consumer offers both assignors (in its own order): a group loaded from its record knows only
# the protocol it chose, so a consumer offering one assignor alone could be refused
# INCONSISTENT_GROUP_PROTOCOL after a restart, as by Kafka; that is not what this model is about.
PREFERENCES = (("range", "roundrobin"), ("roundrobin", "range"))
HEARTBEAT_INTERVAL_MS = 500  # below every rebalance timeout, so a behaving member never misses a join
SETTLE_MS = 40_000
CONFIG = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 3}

JOIN_ERRORS = {errors.NONE, errors.MEMBER_ID_REQUIRED, errors.UNKNOWN_MEMBER_ID, errors.FENCED_INSTANCE_ID}
MEMBER_ERRORS = {errors.NONE, errors.ILLEGAL_GENERATION, errors.UNKNOWN_MEMBER_ID, errors.REBALANCE_IN_PROGRESS,
                 errors.FENCED_INSTANCE_ID}
FRESH_JOIN = {errors.UNKNOWN_MEMBER_ID, errors.ILLEGAL_GENERATION, errors.FENCED_INSTANCE_ID}


def protocols_for(preference: tuple[str, ...], user_data: bytes) -> list[tuple[str, bytes]]:
    metadata = encode_subscription(Subscription(["t"], user_data=user_data))
    return [(name, metadata) for name in preference]


@dataclass(repr=False)
class Slot:
    """One consumer's configuration; ``client`` is its running process (None: not running)."""

    index: int
    instance: str | None
    session_ms: int
    rebalance_ms: int
    preference: tuple[str, ...]
    v4: bool
    client: "Client | None" = None

    def __repr__(self) -> str:
        kind = f"static {self.instance}" if self.instance else ("dynamic v4" if self.v4 else "dynamic v3")
        return f"<consumer {self.index}: {kind}, session {self.session_ms}, rebalance {self.rebalance_ms}>"


@dataclass(repr=False)
class Client:
    """One process of a consumer: what it knows (member id, generation) and what it waits for."""

    slot: Slot
    preference: tuple[str, ...]
    user_data: bytes = b""
    member_id: str = ""
    generation: int = -1
    phase: str = "idle"  # idle (must join) | joining | syncing | stable
    outstanding: int | None = None  # token of the request whose answer it waits for
    outstanding_member_id: str = ""  # the member id that request carried
    inbox: list = field(default_factory=list)
    assignment: frozenset = frozenset()
    running: bool = True

    @property
    def protocols(self) -> list[tuple[str, bytes]]:
        return protocols_for(self.preference, self.user_data)

    def __repr__(self) -> str:
        return (f"<process of consumer {self.slot.index}: {self.phase}, member {self.member_id or '-'}, "
                f"generation {self.generation}>")


@dataclass
class IdInfo:
    """A member id ever handed out: whose, and what may still refresh its session."""

    identity: str  # group.instance.id for static members, else the member id
    touch_ms: int  # latest event that may have refreshed its session (an upper bound)
    refreshed_ms: int  # latest event that surely refreshed it (a lower bound)
    session_ms: int | None = None  # known once its own JoinGroup answer arrived
    client: Client | None = None


class CoordinatorModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        self.dir = tempfile.mkdtemp(prefix="logstore-group-model-", dir=base)
        self.env = GroupEnv(os.path.join(self.dir, "store"), CONFIG)
        self.slots: list[Slot] = []
        self.clients: list[Client] = []  # every process ever started
        self.unanswered_syncs = 0
        self.tokens = 0
        self.in_call: int | None = None  # token of the JoinGroup being handled right now
        self.in_call_state = ""  # the group's state when that JoinGroup was sent
        self.epoch = 0  # coordinator restarts
        self.incarnation = 0  # deletions of group g (a new group starts again at generation 0)
        self.ids: dict[str, IdInfo] = {}
        # The model of group g.
        self.current_gen = 0
        self.current_members: dict[str, str | None] = {}  # member id -> instance id, this generation
        self.persisted: tuple[int, dict[str, str | None]] | None = None  # the last group record
        # (incarnation, epoch, generation) -> the (leader id, protocol) pairs its JoinGroup answers gave
        self.leaders: dict[tuple[int, int, int], set[tuple[str, str]]] = {}
        self.owners: dict[tuple[int, int], dict[tuple[str, int], str]] = {}  # (incarnation, gen)
        self.max_gen_seen = 0
        self.committed: dict[str, dict[tuple[str, int], int]] = {GROUP: {}, SIMPLE: {}}
        # Per step.
        self.step_gens: set[int] = set()
        self.step_empty_gens: set[int] = set()
        self.step_left: set[str] = set()  # identities removed by LeaveGroup in this step
        self.step_replaced: set[str] = set()  # instances that got a new member id in this step
        self.skip_generation_check = False
        self.preparing_since = self.now
        # (incarnation, epoch, generation) -> when its join phase completed and who was in it; who synced
        self.completed_at: dict[tuple[int, int, int], tuple[int, frozenset[str]]] = {}
        self.synced: dict[tuple[int, int, int], set[str]] = {}
        self.before = self.describe()
        self.seen, self.seen_at = self.before, self.now  # the group at the last look

    def teardown(self) -> None:
        try:
            self.env.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    # --- plumbing --------------------------------------------------------------------------------

    @property
    def now(self) -> int:
        return self.env.clock.time_ms()

    @property
    def coordinator(self):
        return self.env.coordinator

    def describe(self):
        return self.coordinator.describe_group(GROUP)

    def running(self) -> list[Client]:
        return [slot.client for slot in self.slots if slot.client is not None]

    def observe(self) -> None:
        """After every request and clock move: an Empty group at a generation > 0 has just written
        its record; no member left the group without a reason."""
        summary = self.describe()
        if summary.state == "Empty" and summary.generation_id > 0:
            self.persisted = (summary.generation_id, {})
            self.current_members = {}
            self.current_gen = summary.generation_id
            self.step_empty_gens.add(summary.generation_id)
        remaining = {member.member_id for member in summary.members}
        for member in self.seen.members:
            if member.member_id not in remaining:
                self.assert_removal_allowed(member.member_id, member.group_instance_id)
        if summary.state == "PreparingRebalance" and self.seen.state != "PreparingRebalance":
            self.preparing_since = self.seen_at  # it began after the last look, not before
        self.seen, self.seen_at = summary, self.now

    def identity(self, member_id: str) -> str:
        info = self.ids.get(member_id)
        return info.identity if info is not None else member_id

    def register(self, member_id: str, instance: str | None, session_ms: int | None = None,
                 client: Client | None = None) -> IdInfo:
        info = self.ids.get(member_id)
        if info is None:
            info = self.ids[member_id] = IdInfo(instance or member_id, self.now, self.now)
        assert info.identity == (instance or member_id), (member_id, instance, info)
        if client is not None:
            info.client, info.session_ms = client, session_ms
        return info

    def touch(self, member_id: str) -> None:
        if member_id in self.ids:
            self.ids[member_id].touch_ms = max(self.ids[member_id].touch_ms, self.now)

    def touch_all(self) -> None:
        for info in self.ids.values():
            info.touch_ms = self.now

    def refresh(self, member_id: str) -> None:
        """An event that surely gave ``member_id`` a new session (if it is a member)."""
        self.touch(member_id)
        if member_id in self.ids:
            self.ids[member_id].refreshed_ms = self.now

    def callback(self, client: Client, kind: str, request_member_id: str):
        self.tokens += 1
        token = self.tokens
        client.outstanding = token
        client.outstanding_member_id = request_member_id

        def answer(result) -> None:
            immediate = self.in_call == token
            if kind == "join":
                self.on_join_result(client, result, request_member_id, immediate)
            else:
                self.on_sync_result(client, result)
            if client.outstanding == token:
                client.outstanding = None
                if client.member_id:
                    self.touch(client.member_id)
                if client.running:
                    client.inbox.append((kind, result))

        return token, answer

    # --- what the coordinator answers, checked as it arrives ---------------------------------------

    def on_join_result(self, client: Client, result: JoinResult, request_member_id: str, immediate: bool) -> None:
        assert result.error_code in JOIN_ERRORS, result
        slot = client.slot
        if result.error_code == errors.MEMBER_ID_REQUIRED:
            assert slot.instance is None and slot.v4 and not request_member_id, result
            self.register(result.member_id, None, slot.session_ms, client)
            return
        if result.error_code == errors.FENCED_INSTANCE_ID:
            assert slot.instance is not None, result
        if result.error_code != errors.NONE:
            return
        gen = result.generation_id
        assert gen >= 1 and result.protocol_type == "consumer", result
        self.register(result.member_id, slot.instance, slot.session_ms, client)
        for member in result.members:  # members whose own answers are still to come
            self.register(member.member_id, member.group_instance_id)
        # Only the leader gets the member list, and the list holds the leader and no id twice.
        assert (result.member_id == result.leader_id) == bool(result.members), result
        if result.members:
            ids = [member.member_id for member in result.members]
            assert len(ids) == len(set(ids)) and result.leader_id in ids, result
        # One leader and one protocol per generation (checked at the end of the step, when every
        # member id in it is known).
        self.leaders.setdefault((self.incarnation, self.epoch, gen), set()).add((result.leader_id,
                                                                               result.protocol_name))
        assert result.protocol_name in {name for name, _ in client.protocols}, result
        key = (self.incarnation, self.epoch, gen)
        completion = gen > self.max_gen_seen
        if completion:  # a join phase completed: every member's session restarts
            self.max_gen_seen = gen
            self.touch_all()
            self.completed_at[key] = (self.now, frozenset())
        self.step_gens.add(gen)
        if result.members and key in self.completed_at and self.completed_at[key][0] == self.now:
            listed = frozenset(member.member_id for member in result.members)
            self.completed_at[key] = (self.now, listed)
            for member_id in listed:
                self.refresh(member_id)
        if result.members:
            assert gen >= self.current_gen, (gen, self.current_gen)
            self.current_gen = gen
            self.current_members = {member.member_id: member.group_instance_id for member in result.members}
        elif (slot.instance is not None and not request_member_id and immediate and not completion
              and self.in_call_state == "Stable"):
            # A static member's restart in a Stable group: it takes over its old membership (and
            # the group record is written again) without a rebalance.
            assert gen == self.current_gen, (gen, self.current_gen)
            self.current_members = {mid: inst for mid, inst in self.current_members.items() if inst != slot.instance}
            self.current_members[result.member_id] = slot.instance
            self.persisted = (gen, dict(self.current_members))
            self.refresh(result.member_id)

    def on_sync_result(self, client: Client, result: SyncResult) -> None:
        assert result.error_code in MEMBER_ERRORS, result
        if result.error_code != errors.NONE:
            return
        parts = frozenset(decode_assignment(result.assignment).partitions) if result.assignment else frozenset()
        gen = client.generation
        owners = self.owners.setdefault((self.incarnation, gen), {})
        who = self.identity(client.member_id)
        for tp in parts:
            assert owners.setdefault(tp, who) == who, f"generation {gen}: {tp} given to {who} and {owners[tp]}"
        # The leader's assignment is written before any SyncGroup is answered.
        assert gen == self.current_gen and client.member_id in self.current_members, (gen, self.current_gen)
        self.refresh(client.member_id)
        self.persisted = (gen, dict(self.current_members))

    # --- what a client does ----------------------------------------------------------------------

    def send_join(self, client: Client) -> None:
        slot = client.slot
        member_id = client.member_id
        token, answer = self.callback(client, "join", member_id)
        client.phase = "joining"
        if member_id:
            self.touch(member_id)
        elif slot.instance is not None:
            self.step_replaced.add(slot.instance)  # takes over the instance's membership, if any
        self.in_call, self.in_call_state = token, self.describe().state
        try:
            self.coordinator.join_group(GROUP, member_id, protocol_type="consumer", protocols=client.protocols,
                                        session_timeout_ms=slot.session_ms, rebalance_timeout_ms=slot.rebalance_ms,
                                        group_instance_id=slot.instance, client_id=f"c{slot.index}",
                                        client_host="/127.0.0.1", require_known_member_id=slot.v4 and not slot.instance,
                                        callback=answer)
        finally:
            self.in_call = None
        self.observe()

    def send_sync(self, client: Client, result: JoinResult) -> None:
        assignments = {}
        if result.members:  # the leader assigns, with the protocol the group chose
            subscriptions = {m.member_id: decode_subscription(m.metadata) for m in result.members}
            instances = {m.member_id: m.group_instance_id for m in result.members}
            plan = ASSIGNORS[result.protocol_name](subscriptions, TOPIC_PARTITIONS, instance_ids=instances)
            assignments = {mid: encode_assignment(Assignment(parts)) for mid, parts in plan.items()}
        token, answer = self.callback(client, "sync", client.member_id)
        client.phase = "syncing"
        self.touch(client.member_id)
        self.synced.setdefault((self.incarnation, self.epoch, client.generation), set()).add(client.member_id)
        self.coordinator.sync_group(GROUP, client.generation, client.member_id, assignments=assignments,
                                    group_instance_id=client.slot.instance, callback=answer)
        self.observe()

    def reset(self, client: Client, fresh: bool) -> None:
        """Back to a join: with the same member id, or (fresh) with none."""
        client.phase = "idle"
        client.generation = -1
        client.assignment = frozenset()
        if fresh:
            client.member_id = ""

    def react(self, client: Client) -> None:
        kind, result = client.inbox.pop(0)
        code = result.error_code
        if kind == "join":
            if code == errors.NONE:
                client.member_id, client.generation = result.member_id, result.generation_id
                self.send_sync(client, result)
            elif code == errors.MEMBER_ID_REQUIRED:
                client.member_id = result.member_id
                self.send_join(client)
            else:
                self.reset(client, fresh=True)
                self.send_join(client)
        else:
            if code == errors.NONE:
                client.phase = "stable"
                client.assignment = frozenset(decode_assignment(result.assignment).partitions) \
                    if result.assignment else frozenset()
            else:
                self.reset(client, fresh=code in FRESH_JOIN)
                self.send_join(client)

    def expected_member_error(self, summary, client: Client) -> int:
        """What Kafka's coordinator answers to a member's Heartbeat or OffsetCommit in the group described."""
        members = {m.member_id: m.group_instance_id for m in summary.members}
        if summary.state == "Dead":
            return errors.UNKNOWN_MEMBER_ID
        instance = client.slot.instance
        if instance is not None:
            current = [mid for mid, inst in members.items() if inst == instance]
            if current and current[0] != client.member_id:
                return errors.FENCED_INSTANCE_ID
            if not current:
                return errors.UNKNOWN_MEMBER_ID
        if client.member_id not in members:
            return errors.UNKNOWN_MEMBER_ID
        if client.generation != summary.generation_id:
            return errors.ILLEGAL_GENERATION
        return errors.NONE

    def heartbeat(self, client: Client) -> None:
        summary = self.describe()
        expected = self.expected_member_error(summary, client)
        if expected == errors.NONE and summary.state == "PreparingRebalance":
            expected = errors.REBALANCE_IN_PROGRESS
        code = self.coordinator.heartbeat(GROUP, client.generation, client.member_id, client.slot.instance)
        assert code == expected, (errors.name_of(code), errors.name_of(expected), summary)
        if code in (errors.NONE, errors.REBALANCE_IN_PROGRESS):
            self.refresh(client.member_id)
        if code == errors.REBALANCE_IN_PROGRESS:
            self.reset(client, fresh=False)
            self.send_join(client)
        elif code != errors.NONE:
            self.reset(client, fresh=True)
            self.send_join(client)
        self.observe()

    def act(self, client: Client) -> None:
        """The next thing a behaving client does."""
        if client.inbox:
            self.react(client)
        elif client.phase == "idle":
            self.send_join(client)
        elif client.phase == "stable":
            self.heartbeat(client)

    def drain(self, client: Client) -> None:
        for _ in range(10):
            if not client.inbox:
                return
            self.react(client)

    def run_for(self, total_ms: int) -> None:
        """Time passes with every running client behaving: heartbeats every 500 ms, answers at once."""
        while total_ms > 0:
            step = min(HEARTBEAT_INTERVAL_MS, total_ms)
            total_ms -= step
            self.env.advance(step)
            self.observe()
            for client in self.running():
                self.drain(client)
                if client.phase == "idle":
                    self.send_join(client)
                elif client.phase == "stable":
                    self.heartbeat(client)
                self.drain(client)

    # --- rules -----------------------------------------------------------------------------------

    @initialize(configs=st.lists(st.tuples(st.booleans(), st.sampled_from(SESSIONS_MS),
                                           st.sampled_from(REBALANCES_MS), st.sampled_from(PREFERENCES),
                                           st.booleans(), st.booleans()), min_size=2, max_size=5))
    def setup(self, configs):
        for index, (static, session_ms, rebalance_ms, preference, v4, started) in enumerate(configs):
            slot = Slot(index, f"i{index}" if static else None, session_ms, rebalance_ms, preference, v4)
            self.slots.append(slot)
            if started or index == 0:
                self.start_client(slot)

    def start_client(self, slot: Slot) -> None:
        slot.client = Client(slot, slot.preference)
        self.clients.append(slot.client)
        self.send_join(slot.client)

    def stopped(self) -> list[Slot]:
        return [slot for slot in self.slots if slot.client is None]

    def stable(self) -> list[Client]:
        return [client for client in self.running() if client.phase == "stable"]

    def with_generation(self) -> list[Client]:
        return [client for client in self.running() if client.member_id and client.generation >= 0]

    @precondition(lambda self: self.stopped())
    @rule(data=st.data())
    def start(self, data):
        """A consumer process starts: a fresh JoinGroup (a static one takes over its instance id)."""
        self.start_client(data.draw(st.sampled_from(self.stopped())))

    @precondition(lambda self: self.running())
    @rule(data=st.data())
    def act_one(self, data):
        self.act(data.draw(st.sampled_from(self.running())))

    @precondition(lambda self: self.running())
    @rule()
    def act_all(self):
        for client in self.running():
            self.act(client)

    @precondition(lambda self: self.stable())
    @rule(data=st.data(), change=st.booleans())
    def rejoin(self, data, change):
        """A stable member rejoins (the leader always rebalances; a follower only if it changed)."""
        client = data.draw(st.sampled_from(self.stable()))
        if change:  # another assignor order and other user data: a changed subscription
            client.preference = PREFERENCES[(PREFERENCES.index(client.preference) + 1) % len(PREFERENCES)]
            client.user_data = b"x" if client.user_data == b"" else b""
        self.reset(client, fresh=False)
        self.send_join(client)

    @precondition(lambda self: self.running())
    @rule(data=st.data(), clean=st.booleans())
    def stop(self, data, clean):
        """A process ends. A crash: nothing more from it, no LeaveGroup. A clean close: a dynamic
        member sends LeaveGroup; a static one does not (KIP-345), so that is a crash as well."""
        client = data.draw(st.sampled_from(self.running()))
        client.running = False
        client.inbox.clear()
        client.slot.client = None
        if clean and client.slot.instance is None and client.member_id:
            self.step_left.add(client.member_id)
            error, results = self.coordinator.leave_group(GROUP, [(client.member_id, None)])
            assert error == errors.NONE and results[0] in (errors.NONE, errors.UNKNOWN_MEMBER_ID), (error, results)
            self.abandon_unanswered_syncs()
            self.observe()

    @rule(data=st.data(), what=st.sampled_from(["remove static", "delete simple", "delete g"]))
    def admin(self, data, what):
        """An admin removes a static member by its group.instance.id (LeaveGroup v3+), or deletes a
        group (DeleteGroups: only an Empty one)."""
        if what == "remove static":
            statics = [slot for slot in self.slots if slot.instance]
            if not statics:
                return
            slot = data.draw(st.sampled_from(statics))
            mapped = any(m.group_instance_id == slot.instance for m in self.describe().members)
            self.step_left.add(slot.instance)
            error, results = self.coordinator.leave_group(GROUP, [("", slot.instance)])
            assert error == errors.NONE, error
            assert results == [errors.NONE if mapped else errors.UNKNOWN_MEMBER_ID], (results, mapped)
            self.abandon_unanswered_syncs()
            self.observe()
            return
        group = SIMPLE if what == "delete simple" else GROUP
        summary = self.coordinator.describe_group(group)
        expected = {"Empty": errors.NONE, "Dead": errors.GROUP_ID_NOT_FOUND}.get(summary.state, errors.NON_EMPTY_GROUP)
        assert self.coordinator.delete_groups([group]) == {group: expected}, summary
        if expected == errors.NONE:
            self.committed[group] = {}
            if group == GROUP:
                self.forget_group()
        self.observe()

    @precondition(lambda self: self.with_generation())
    @rule(data=st.data(), partitions=st.sets(st.sampled_from(sorted(ALL_PARTITIONS)), min_size=1, max_size=2),
          offset=st.integers(0, 10_000))
    def commit(self, data, partitions, offset):
        """A member commits with its generation: exactly Kafka's OffsetCommit answer for the group as described."""
        client = data.draw(st.sampled_from(self.with_generation()))
        summary = self.describe()
        expected = self.expected_member_error(summary, client)
        if expected == errors.NONE and summary.state == "CompletingRebalance":
            expected = errors.REBALANCE_IN_PROGRESS
        if summary.state == "Dead" and client.generation >= 0:
            expected = errors.ILLEGAL_GENERATION  # an unknown group: a generation >= 0 is illegal
        offsets = {tp: OffsetCommit(offset + tp[1]) for tp in partitions}
        answer = self.env.commit(GROUP, offsets, generation=client.generation, member_id=client.member_id,
                                 instance=client.slot.instance)
        assert answer == {tp: expected for tp in partitions}, (answer, errors.name_of(expected), summary)
        if expected == errors.NONE:
            self.refresh(client.member_id)
            self.committed[GROUP].update({tp: commit.offset for tp, commit in offsets.items()})
        self.observe()

    @rule(group=st.sampled_from([SIMPLE, SIMPLE, GROUP]),
          partitions=st.sets(st.sampled_from(sorted(ALL_PARTITIONS)), min_size=1, max_size=3),
          offset=st.integers(0, 10_000))
    def commit_without_generation(self, group, partitions, offset):
        """An assign() consumer's commit (generation -1, no member id): only into a group without
        members (Empty, or unknown: it is created)."""
        summary = self.coordinator.describe_group(group)
        expected = errors.NONE if summary.state in ("Empty", "Dead") else errors.UNKNOWN_MEMBER_ID
        offsets = {tp: OffsetCommit(offset) for tp in partitions}
        answer = self.env.commit(group, offsets)
        assert answer == {tp: expected for tp in partitions}, (answer, summary)
        if expected == errors.NONE:
            self.committed[group].update({tp: offset for tp in partitions})
        self.observe()

    def abandon_unanswered_syncs(self) -> None:
        """KNOWN ISSUE (test_coordinator_regressions.py): a member removed by LeaveGroup while its
        SyncGroup is parked never gets an answer to it. A real client gives up on it after its
        request timeout; so does this one (and rejoins afresh), so the machine can go on."""
        members = {m.member_id for m in self.describe().members}
        for client in self.clients:
            if client.outstanding is not None and client.phase == "syncing" \
                    and client.outstanding_member_id not in members:
                self.unanswered_syncs += 1
                client.outstanding = None
                if client.running:
                    self.reset(client, fresh=True)

    def forget_group(self) -> None:
        """Group g is gone: a new one starts at generation 0 with nothing written."""
        self.incarnation += 1
        self.persisted = None
        self.current_gen = 0
        self.current_members = {}
        self.max_gen_seen = 0
        self.skip_generation_check = True

    @rule(ms=st.sampled_from([0, 1, 499, 1000, 2999, 5999, 6000, 8000, 10_000, 30_000]), jump=st.booleans())
    def advance(self, ms, jump):
        """Time passes and nobody talks (every client paused): in one jump (the coordinator paused
        too), or in 100 ms ticks looked at one by one (when members leave is then seen closely)."""
        if jump:
            self.env.advance(ms)
            self.observe()
            return
        while ms > 0:
            self.env.advance(min(ms, 100))
            ms -= min(ms, 100)
            self.observe()

    @rule(ms=st.sampled_from([500, 2000, 7000]))
    def run(self, ms):
        self.run_for(ms)

    @rule()
    def settle(self):
        """After 40 s of behaving clients the group is Stable with exactly them as members."""
        self.run_for(SETTLE_MS)
        clients = self.running()
        summary = self.describe()
        if not clients:
            assert summary.state in ("Empty", "Dead"), summary
            return
        assert summary.state == "Stable", summary
        assert {m.member_id for m in summary.members} == {c.member_id for c in clients}, \
            (summary.members, [(c.member_id, c.phase) for c in clients])
        for client in clients:
            assert client.phase == "stable" and client.generation == summary.generation_id, client

    @rule()
    def restart(self):
        """The coordinator restarts: parked requests die with it; clients retry (rejoin)."""
        self.env.restart()
        self.epoch += 1
        self.skip_generation_check = True
        for member_id in self.ids:  # a loaded group's members all get a fresh session
            self.refresh(member_id)
        for client in self.clients:  # what was parked died with the old coordinator
            if client.outstanding is not None:
                client.outstanding = None
                if client.running:
                    self.reset(client, fresh=False)
        summary = self.describe()
        if self.persisted is not None:
            gen, members = self.persisted
            assert summary.generation_id == gen, (summary, self.persisted)
            assert summary.state == ("Stable" if members else "Empty"), (summary, self.persisted)
            assert {m.member_id for m in summary.members} == set(members), (summary, self.persisted)
            self.current_gen, self.current_members = gen, dict(members)
        elif self.committed[GROUP]:
            assert (summary.state, summary.generation_id, summary.members) == ("Empty", 0, []), summary
            self.current_gen, self.current_members = 0, {}
        else:
            assert summary.state == "Dead", summary
            self.current_gen, self.current_members = 0, {}
        self.max_gen_seen = max(summary.generation_id, 0)
        self.seen, self.seen_at = summary, self.now

    # --- invariants ------------------------------------------------------------------------------

    @invariant()
    def check(self):
        summary = self.describe()
        assert summary.error_code == errors.NONE and summary.state in STATES, summary
        gen = summary.generation_id
        self.observe()
        # The generation grows by one per completed join phase.
        if not self.skip_generation_check:
            before = self.before.generation_id if self.before.state != "Dead" else 0
            after = gen if summary.state != "Dead" else 0
            completed = sorted(g for g in self.step_gens | self.step_empty_gens if g > before)
            assert all(g >= before for g in self.step_gens), (self.step_gens, before)
            assert completed == list(range(before + 1, after + 1)), (before, after, completed)
        # Stable: exactly the generation's members, one leader among them, every partition once.
        if summary.state == "Stable":
            ids = {m.member_id for m in summary.members}
            assert gen == self.current_gen and ids == set(self.current_members), \
                (summary, self.current_gen, self.current_members)
            assert summary.leader_id in ids, summary
            seen: set = set()
            for member in summary.members:
                parts = set(decode_assignment(member.assignment).partitions) if member.assignment else set()
                assert not parts & seen, summary
                seen |= parts
            assert seen == ALL_PARTITIONS, summary
            for client in self.running():
                if client.phase == "stable" and client.generation == gen:
                    assert client.member_id in ids, (client, summary)
        # Every accepted commit is returned by OffsetFetch.
        for group, offsets in self.committed.items():
            error, fetched = self.coordinator.fetch_offsets(group, None)
            assert error == errors.NONE
            assert {tp: value.offset for tp, value in fetched.items()} == offsets, (group, fetched, offsets)
        # One leader and one protocol per generation.
        for key, answers in self.leaders.items():
            if key[1] == self.epoch and key[2] in self.step_gens:
                assert len({self.identity(leader) for leader, _ in answers}) == 1, (key, answers)
                assert len({protocol for _, protocol in answers}) == 1, (key, answers)
        # A parked JoinGroup is answered when its join phase completes, a parked SyncGroup when the
        # leader's assignment is stored or the group rebalances.
        for client in self.clients:
            if client.outstanding is not None:
                kind = "join" if client.phase == "joining" else "sync"
                wanted = "PreparingRebalance" if kind == "join" else "CompletingRebalance"
                assert summary.state == wanted, (kind, client.outstanding_member_id, summary.state)
        # A member nobody speaks for is gone once its session has passed.
        members = {m.member_id for m in summary.members}
        speaking = {c.member_id for c in self.running()}
        for member_id, info in self.ids.items():
            if member_id in speaking or member_id not in members or info.session_ms is None:
                continue
            client = info.client
            parked = client.outstanding is not None and client.outstanding_member_id == member_id
            if not parked and self.now >= info.touch_ms + info.session_ms:
                raise AssertionError(f"{member_id} outlived its session: touched at {info.touch_ms}, "
                                     f"session {info.session_ms} ms, now {self.now}")
        self.before = summary
        self.step_gens = set()
        self.step_empty_gens = set()
        self.step_left = set()
        self.step_replaced = set()
        self.skip_generation_check = False


    def assert_removal_allowed(self, member_id: str, instance: str | None) -> None:
        info = self.ids.get(member_id)
        identity = instance or member_id
        if identity in self.step_left or identity in self.step_replaced:
            return  # LeaveGroup, or a static member's restart under a new member id
        for (incarnation, epoch, gen), (at, listed) in self.completed_at.items():
            if (incarnation, epoch) != (self.incarnation, self.epoch):
                continue
            if gen in self.step_gens and member_id not in listed:
                return  # a join phase completed without it
            if member_id in listed and member_id not in self.synced.get((incarnation, epoch, gen), ()):
                timeout = max((self.ids[m].client.slot.rebalance_ms for m in listed
                               if m in self.ids and self.ids[m].client is not None), default=0)
                if self.now >= at + timeout:
                    return  # it never sent SyncGroup within the rebalance timeout
        assert info is not None and info.session_ms is not None, f"{member_id} removed, never known"
        client = info.client
        parked = client.outstanding is not None and client.outstanding_member_id == member_id
        assert not parked, f"{member_id} removed while its {client.phase} request is parked"
        if instance is None:
            # A join phase ends (by its timeout, at least the member's own rebalance timeout after the
            # rebalance began) removing the dynamic members that did not rejoin, even when no member
            # rejoined at all and the phase is extended for static leftovers (no answer shows it).
            began = self.preparing_since if self.seen.state == "PreparingRebalance" else self.seen_at
            if self.now >= began + client.slot.rebalance_ms:
                return
        assert self.now >= info.refreshed_ms + info.session_ms, \
            f"{member_id} removed at {self.now}, session {info.session_ms} ms since {info.refreshed_ms}"


CoordinatorModel.TestCase.settings = settings(stateful_step_count=50)
TestCoordinatorModel = CoordinatorModel.TestCase
