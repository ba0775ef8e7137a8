"""The coordinator's membership protocol, case by case (docs/design.md §9).

Each test drives a ``GroupCoordinator(threaded=False)`` on a manual clock (conftest ``GroupEnv``),
so timeouts are steps of the test, not sleeps.
"""

from __future__ import annotations

from logstore.group import errors
from logstore.group.coordinator import NEW_MEMBER_JOIN_TIMEOUT_MS


def test_one_consumer_gets_generation_1_and_leads(env):
    box = env.join()
    assert box == []  # parked until the join phase completes
    env.advance(0)
    (result,) = box
    assert result.error_code == 0 and result.generation_id == 1 and result.leader_id == result.member_id
    assert result.protocol_name == "range" and [m.member_id for m in result.members] == [result.member_id]
    assert result.member_id.startswith("client-")
    assert env.state() == "CompletingRebalance"
    sync = env.sync("g", 1, result.member_id, {result.member_id: b"all four"})
    assert sync[-1].error_code == 0 and sync[-1].assignment == b"all four"
    assert env.state() == "Stable"


def test_two_members_share_a_generation_and_only_the_leader_gets_the_member_list(env):
    first, second = env.join(), env.join()
    env.advance(0)
    a, b = first[-1], second[-1]
    assert a.generation_id == b.generation_id == 1 and a.leader_id == b.leader_id == a.member_id
    assert len(a.members) == 2 and b.members == []
    follower_sync = env.sync("g", 1, b.member_id)
    assert follower_sync == []  # parked until the leader's assignment is stored
    leader_sync = env.sync("g", 1, a.member_id, {a.member_id: b"p0,p1", b.member_id: b"p2,p3"})
    assert leader_sync[-1].assignment == b"p0,p1" and follower_sync[-1].assignment == b"p2,p3"
    # A later SyncGroup in Stable returns the same bytes.
    assert env.sync("g", 1, b.member_id)[-1].assignment == b"p2,p3"


def test_initial_delay_waits_and_extends_once_for_a_second_member(make_env):
    env = make_env({"group.initial.rebalance.delay.ms": 3000})
    first = env.join(rebalance=60000)
    env.advance(1000)
    second = env.join(rebalance=60000)
    env.advance(1999)
    assert first == [] and second == []
    env.advance(1)  # 3 s after the first join: the delay is extended because a member came
    assert first == [] and second == []
    env.advance(2999)
    assert first == []
    env.advance(1)  # about 6 s after the first join, both in generation 1
    assert first[-1].generation_id == second[-1].generation_id == 1


def test_initial_delay_with_a_rebalance_timeout_below_it_completes_after_one_delay(make_env):
    env = make_env({"group.initial.rebalance.delay.ms": 3000})
    first = env.join(rebalance=1000)
    env.advance(500)
    env.join(rebalance=1000)
    env.advance(2499)
    assert first == []
    env.advance(1)
    assert first[-1].generation_id == 1


def test_a_leave_rebalances_the_survivor_who_learns_it_from_a_heartbeat(env):
    a, b = env.form()
    assert env.coordinator.leave_group("g", [(b, None)]) == (0, [0])
    assert env.state() == "PreparingRebalance"
    assert env.heartbeat("g", 1, a) == errors.REBALANCE_IN_PROGRESS
    rejoin = env.join(member_id=a)
    env.advance(0)
    assert rejoin[-1].generation_id == 2 and [m.member_id for m in rejoin[-1].members] == [a]
    assert len(env.coordinator.describe_group("g").members) == 1


def test_a_member_that_stops_heartbeating_is_evicted_after_its_session(env):
    a, b = env.form(session=10000)
    for _ in range(3):
        env.advance(3000)
        assert env.heartbeat("g", 1, a) == 0
    env.advance(1000)
    # b never heartbeated: gone 10 s after its last liveness event (its sync); the group rebalances.
    assert env.state() == "PreparingRebalance"
    assert env.heartbeat("g", 1, b) == errors.UNKNOWN_MEMBER_ID
    assert env.heartbeat("g", 1, a) == errors.REBALANCE_IN_PROGRESS


def test_the_group_stays_stable_before_the_session_ends(env):
    a, b = env.form(session=10000)
    env.advance(5000)
    assert env.heartbeat("g", 1, a) == 0
    env.advance(4999)
    assert env.state() == "Stable"
    env.advance(1)
    assert env.state() == "PreparingRebalance"


def test_a_member_that_does_not_rejoin_is_removed_when_the_join_phase_times_out(env):
    a, b = env.form(session=10000, rebalance=5000)
    leader_join = env.join(member_id=a, rebalance=5000)  # the leader rejoining starts a rebalance
    for _ in range(2):
        env.advance(2000)
        assert env.heartbeat("g", 1, b) == errors.REBALANCE_IN_PROGRESS  # alive but never rejoins
    assert leader_join == []
    env.advance(1000)  # the rebalance timeout
    assert leader_join[-1].generation_id == 2 and [m.member_id for m in leader_join[-1].members] == [a]
    assert env.heartbeat("g", 1, b) == errors.UNKNOWN_MEMBER_ID
    fresh = env.join()  # it comes back with an empty member id
    assert fresh == [] and env.state() == "PreparingRebalance"


def test_the_join_phase_completes_as_soon_as_every_member_rejoined(env):
    a, b = env.form(rebalance=300000)
    first = env.join(member_id=a)
    second = env.join(member_id=b)
    assert first and second  # no waiting for the 300 s timeout
    assert first[-1].generation_id == second[-1].generation_id == 2


def test_a_follower_rejoining_with_the_same_metadata_in_stable_gets_the_current_generation(env):
    a, b = env.form()
    box = env.join(member_id=b)
    assert box[-1].error_code == 0 and box[-1].generation_id == 1 and box[-1].members == []
    assert env.state() == "Stable"
    changed = env.join(member_id=b, protocols=[("range", b"another topic")])
    assert changed == [] and env.state() == "PreparingRebalance"


def test_protocol_vote_and_inconsistent_protocols(env):
    a = env.join(protocols=[("range", b""), ("roundrobin", b"")])
    b = env.join(protocols=[("roundrobin", b"")])
    env.advance(0)
    assert a[-1].protocol_name == b[-1].protocol_name == "roundrobin"
    assert env.join(protocols=[("sticky", b"")])[-1].error_code == errors.INCONSISTENT_GROUP_PROTOCOL
    assert env.join(protocol_type="connect", protocols=[("roundrobin", b"")])[-1].error_code == \
        errors.INCONSISTENT_GROUP_PROTOCOL


def test_the_leader_leaving_during_a_rebalance_hands_the_lead_to_a_rejoined_member(env):
    a, b = env.form()
    follower = env.join(member_id=b, protocols=[("range", b"changed")])
    assert env.coordinator.leave_group("g", [(a, None)]) == (0, [0])
    assert follower[-1].leader_id == b and [m.member_id for m in follower[-1].members] == [b]


def test_the_last_member_leaving_empties_the_group_and_bumps_the_generation(env):
    (a,) = env.form(count=1)
    env.coordinator.leave_group("g", [(a, None)])
    summary = env.coordinator.describe_group("g")
    assert summary.state == "Empty" and summary.generation_id == 2
    assert [g.group_id for g in env.coordinator.list_groups()[1]] == ["g"]
    again = env.join()
    env.advance(0)
    assert again[-1].generation_id == 3


def test_member_id_required_for_v4_and_direct_join_for_v3(env):
    first = env.join(v4=True)
    assert first[-1].error_code == errors.MEMBER_ID_REQUIRED and first[-1].member_id.startswith("client-")
    joined = env.join(member_id=first[-1].member_id, v4=True)
    env.advance(0)
    assert joined[-1].error_code == 0 and joined[-1].member_id == first[-1].member_id
    direct = env.join("h")
    env.advance(0)
    assert direct[-1].error_code == 0


def test_a_pending_member_id_that_never_returns_expires_and_unblocks_the_rebalance(env):
    a, b = env.form(session=10000)
    leader = env.join(member_id=a)
    follower = env.join(member_id=b)
    assert leader and follower  # generation 2 formed
    env.sync("g", 2, a, {})
    env.sync("g", 2, b)
    pending = env.join(v4=True, session=10000)[-1].member_id
    rejoin_a = env.join(member_id=a)  # the leader starts a rebalance; the pending id blocks it
    rejoin_b = env.join(member_id=b)
    assert rejoin_a == [] and rejoin_b == []
    env.advance(10000)
    assert rejoin_a[-1].generation_id == 3 and pending not in [m.member_id for m in rejoin_a[-1].members]


def test_join_validation_errors(env):
    assert env.join(session=1000)[-1].error_code == errors.INVALID_SESSION_TIMEOUT
    assert env.join(session=2_000_000)[-1].error_code == errors.INVALID_SESSION_TIMEOUT
    assert env.join(group="")[-1].error_code == errors.INVALID_GROUP_ID
    assert env.join(member_id="nobody")[-1].error_code == errors.UNKNOWN_MEMBER_ID
    env.form()
    assert env.join(member_id="nobody")[-1].error_code == errors.UNKNOWN_MEMBER_ID


def test_group_max_size(make_env):
    env = make_env({"group.max.size": 2})
    env.form(count=2)
    assert env.join()[-1].error_code == errors.GROUP_MAX_SIZE_REACHED


def test_sync_errors(env):
    a, b = env.form()
    assert env.sync("g", 0, a)[-1].error_code == errors.ILLEGAL_GENERATION
    assert env.sync("g", 1, "nobody")[-1].error_code == errors.UNKNOWN_MEMBER_ID
    env.join(member_id=a)
    assert env.sync("g", 1, b)[-1].error_code == errors.REBALANCE_IN_PROGRESS
    box = []
    env.coordinator.sync_group("g", 1, b, assignments={}, protocol_name="roundrobin", callback=box.append)
    assert box[-1].error_code == errors.INCONSISTENT_GROUP_PROTOCOL


def test_a_leader_that_never_syncs_is_removed_after_the_rebalance_timeout(env):
    first, second = env.join(rebalance=5000), env.join(rebalance=5000)
    env.advance(0)
    leader, follower = first[-1].member_id, second[-1].member_id
    parked = env.sync("g", 1, follower)
    env.advance(4999)
    assert parked == []
    env.advance(1)
    assert parked[-1].error_code == errors.REBALANCE_IN_PROGRESS
    assert env.heartbeat("g", 1, leader) == errors.UNKNOWN_MEMBER_ID
    # The follower never synced either... it did: it is kept, and forms the next generation alone.
    rejoin = env.join(member_id=follower, rebalance=5000)
    env.advance(0)
    assert rejoin[-1].generation_id == 2 and rejoin[-1].leader_id == follower


def test_a_member_the_leader_left_out_gets_empty_bytes(env):
    first, second = env.join(), env.join()
    env.advance(0)
    parked = env.sync("g", 1, second[-1].member_id)
    env.sync("g", 1, first[-1].member_id, {first[-1].member_id: b"x", "made-up": b"y"})
    assert parked[-1].error_code == 0 and parked[-1].assignment == b""


def test_heartbeat_answers_by_state(env):
    first, second = env.join(), env.join()
    env.advance(0)
    a, b = first[-1].member_id, second[-1].member_id
    assert env.heartbeat("g", 1, a) == 0  # CompletingRebalance
    env.sync("g", 1, a, {})
    assert env.heartbeat("g", 1, a) == 0  # Stable
    assert env.heartbeat("g", 0, a) == errors.ILLEGAL_GENERATION
    assert env.heartbeat("g", 1, "nobody") == errors.UNKNOWN_MEMBER_ID
    assert env.heartbeat("nothing", 1, a) == errors.UNKNOWN_MEMBER_ID
    env.join(member_id=a)
    assert env.heartbeat("g", 1, b) == errors.REBALANCE_IN_PROGRESS


def test_a_static_member_restarts_without_a_rebalance_and_fences_its_old_self(env):
    a = env.join(instance="i-a")
    b = env.join(instance="i-b")
    env.advance(0)
    old_a, old_b = a[-1].member_id, b[-1].member_id
    assert old_a.startswith("i-a-")
    env.sync("g", 1, old_a, {old_a: b"A", old_b: b"B"}, instance="i-a")
    env.sync("g", 1, old_b, instance="i-b")
    restarted = env.join(instance="i-b")  # a new process, same instance id, empty member id
    result = restarted[-1]
    assert result.error_code == 0 and result.generation_id == 1 and result.member_id != old_b
    assert env.state() == "Stable"
    assert env.sync("g", 1, result.member_id, instance="i-b")[-1].assignment == b"B"
    assert env.heartbeat("g", 1, old_b, "i-b") == errors.FENCED_INSTANCE_ID
    # A restarted leader is told the old leader id, so it does not run an assignment of its own.
    leader_again = env.join(instance="i-a")[-1]
    assert leader_again.leader_id == old_a and leader_again.member_id != old_a and leader_again.members == []


def test_an_admin_removes_a_static_member_by_instance_id(env):
    env.join(instance="i-a", session=10000)
    env.join(instance="i-b", session=10000)
    env.advance(0)
    assert env.coordinator.leave_group("g", [("", "i-unknown"), ("", "i-b")]) == (0, [errors.UNKNOWN_MEMBER_ID, 0])
    assert len(env.coordinator.describe_group("g").members) == 1


def test_a_retried_join_from_a_parked_member_gets_the_answer(env):
    a, b = env.form()
    first_try = env.join(member_id=a)
    retry = env.join(member_id=a)
    env.join(member_id=b)
    assert first_try == [] and retry[-1].generation_id == 2


def test_a_new_member_parked_too_long_is_dropped(env):
    a, b = env.form(session=10000, rebalance=600000)
    newcomer = env.join(rebalance=600000)
    for _ in range(NEW_MEMBER_JOIN_TIMEOUT_MS // 5000):
        env.advance(5000)
        env.heartbeat("g", 1, a)  # a and b keep heartbeating but never rejoin
        env.heartbeat("g", 1, b)
    assert newcomer[-1].error_code == errors.UNKNOWN_MEMBER_ID


def test_describe_shows_metadata_and_assignments_only_when_stable(env):
    a, b = env.form(protocols=[("range", b"subscription")])
    summary = env.coordinator.describe_group("g")
    assert (summary.state, summary.protocol_type, summary.protocol_name) == ("Stable", "consumer", "range")
    assert {(m.member_id, m.metadata, m.assignment) for m in summary.members} == \
        {(a, b"subscription", a.encode()), (b, b"subscription", b.encode())}
    env.join(member_id=a, protocols=[("range", b"subscription")])  # a rebalance starts
    summary = env.coordinator.describe_group("g")
    assert summary.state == "PreparingRebalance" and summary.protocol_name == ""
    assert all(m.metadata == b"" and m.assignment == b"" for m in summary.members) and len(summary.members) == 2
    unknown = env.coordinator.describe_group("nothing")
    assert (unknown.error_code, unknown.state, unknown.members) == (0, "Dead", [])


def test_list_groups_filters_by_state(env):
    env.form(group="stable-one")
    env.commit("simple", {("t", 0): 1})
    _, stable = env.coordinator.list_groups(["Stable"])
    _, empty = env.coordinator.list_groups(["empty"])  # case-insensitive, as Kafka parses states
    assert [g.group_id for g in stable] == ["stable-one"] and [g.group_id for g in empty] == ["simple"]


def test_each_member_keeps_one_session_timer_and_leaving_members_leave_none(env):
    purgatory = env.coordinator.heartbeat_purgatory
    first = env.join(v4=True)[-1].member_id  # a pending id: one timer
    assert purgatory.delayed() == 1
    env.join(member_id=first, v4=True)
    env.advance(0)
    assert purgatory.delayed() == 1  # the pending wait ended; one session timer
    for _ in range(5):
        env.advance(1000)
        assert env.heartbeat("g", 1, first) == 0
    assert purgatory.delayed() == 1  # heartbeats move the deadline, they add no timers
    env.coordinator.leave_group("g", [(first, None)])
    assert purgatory.delayed() == 0  # its timer left the wheel with it


def test_a_member_leaving_while_its_sync_is_parked_gets_an_answer(env):
    _leader, second = env.join(), env.join()
    env.advance(0)
    parked = env.sync("g", 1, second[-1].member_id)
    assert parked == []
    env.coordinator.leave_group("g", [(second[-1].member_id, None)])
    assert parked[-1].error_code == errors.UNKNOWN_MEMBER_ID
