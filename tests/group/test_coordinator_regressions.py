"""Regressions found by the coordinator's model test (test_coordinator_model.py), minimised.

Each test is the shortest sequence that showed the problem, kept after the fix.
"""

from __future__ import annotations

from logstore.group import errors

def two_members_in_completing_rebalance(env, instance=None):
    """Generation 1 of two members; the follower's SyncGroup is parked, waiting for the leader's."""
    leader_box, follower_box = env.join(), env.join(instance=instance)
    env.advance(0)
    leader, follower = leader_box[-1].member_id, follower_box[-1].member_id
    parked = env.sync("g", 1, follower, instance=instance)
    assert parked == [] and env.state() == "CompletingRebalance"
    return leader, follower, parked


def test_an_admin_removal_answers_the_removed_static_members_parked_sync(env):
    leader, follower, parked = two_members_in_completing_rebalance(env, instance="i-b")
    assert env.coordinator.leave_group("g", [("", "i-b")]) == (errors.NONE, [errors.NONE])
    assert env.state() == "PreparingRebalance"
    # The leader rejoins and forms generation 2 alone; the removed member's SyncGroup is still open.
    assert env.join(member_id=leader)[-1].generation_id == 2
    assert parked, "the removed member's parked SyncGroup was never answered"
    assert parked[-1].error_code in (errors.UNKNOWN_MEMBER_ID, errors.REBALANCE_IN_PROGRESS)


def test_a_member_leaving_with_its_sync_parked_gets_an_answer_to_it(env):
    # A client that closes while its SyncGroup is in flight sends LeaveGroup on the same connection:
    # the server answers a connection's requests in order, so an unanswered SyncGroup would hold the
    # LeaveGroup's answer back too.
    leader, follower, parked = two_members_in_completing_rebalance(env)
    assert env.coordinator.leave_group("g", [(follower, None)]) == (errors.NONE, [errors.NONE])
    assert parked, "the leaving member's parked SyncGroup was never answered"
    assert parked[-1].error_code in (errors.UNKNOWN_MEMBER_ID, errors.REBALANCE_IN_PROGRESS)
