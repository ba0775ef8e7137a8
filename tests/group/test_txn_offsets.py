"""Offsets committed inside transactions (TxnOffsetCommit): held pending per producer until its
marker on the group's ``__consumer_offsets`` partition, committed or dropped by it, rebuilt by the
replay at start-up (also after compaction), KIP-447's member checks, OffsetFetch's require_stable,
and retention and deletion with open transactions."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logstore.group import errors, formats
from logstore.group.results import OffsetCommit

from conftest import GroupEnv  # (at import: another folder's conftest is 'conftest' once tests run)

T0, T1 = ("t", 0), ("t", 1)
PID, OTHER_PID = 4000, 4001


def txn_commit(env, group, offsets, *, pid=PID, epoch=0, generation=-1, member_id="", instance=None, tid="tx"):
    commits = {key: value if isinstance(value, OffsetCommit) else OffsetCommit(value) for key, value in offsets.items()}
    return env.coordinator.txn_offset_commit(group, tid, pid, epoch, generation, member_id, instance, commits)


def marker(env, group, commit, *, pid=PID, epoch=0):
    """Write ``pid``'s marker on ``group``'s offsets partition (durably), then tell the coordinator,
    as the transaction coordinator's marker writer does; returns the marker's offset."""
    partition = env.coordinator.partition_for(group)
    log = env.store.get_log(formats.OFFSETS_TOPIC, partition)
    offset = log.append_marker(pid, epoch, 0, commit)
    log.flush()
    env.coordinator.complete_transaction(partition, pid, commit, offset)
    return offset


def committed(env, group):
    return {key: value.offset for key, value in env.fetch(group, None)[1].items()}


def pending(env, group):
    found = env.coordinator.groups.get(group)
    return {} if found is None else {pid: {key: value.offset for key, (value, _position) in held.items()}
                                     for pid, held in found.pending_transactional_offsets.items()}


def test_offsets_are_pending_until_the_commit_marker(env):
    assert env.commit("g", {T0: 1}) == {T0: 0}
    assert txn_commit(env, "g", {T0: 10, T1: 11}) == {T0: 0, T1: 0}
    assert committed(env, "g") == {T0: 1}  # not visible before the marker
    assert env.coordinator.unstable_offsets("g", [T0, T1, ("u", 0)]) == {T0, T1}
    assert env.coordinator.unstable_offsets("g", None) == {T0}  # of the committed partitions
    marker(env, "g", True)
    assert committed(env, "g") == {T0: 10, T1: 11}
    assert env.coordinator.unstable_offsets("g", [T0, T1]) == set()
    assert pending(env, "g") == {}


def test_an_abort_marker_drops_them(env):
    env.commit("g", {T0: 1})
    txn_commit(env, "g", {T0: 10, T1: 11})
    marker(env, "g", False)
    assert committed(env, "g") == {T0: 1}
    assert env.coordinator.unstable_offsets("g", [T0, T1]) == set()


def test_a_marker_decides_only_its_producer_and_a_later_commit_in_the_transaction_wins(env):
    txn_commit(env, "g", {T0: 10})
    txn_commit(env, "g", {T0: 12})  # the same transaction commits again: the later record counts
    txn_commit(env, "g", {T1: 20}, pid=OTHER_PID)
    marker(env, "g", True)
    assert committed(env, "g") == {T0: 12}
    assert pending(env, "g") == {OTHER_PID: {T1: 20}}
    assert env.coordinator.unstable_offsets("g", [T0, T1]) == {T1}
    marker(env, "g", False, pid=OTHER_PID)
    assert committed(env, "g") == {T0: 12} and pending(env, "g") == {}


def test_a_plain_commit_written_after_the_pending_one_wins(env):
    txn_commit(env, "g", {T0: 10, T1: 11})
    env.commit("g", {T0: 20})  # written after the transactional record: it is the newer commit
    assert committed(env, "g") == {T0: 20}
    marker(env, "g", True)
    assert committed(env, "g") == {T0: 20, T1: 11}
    env.restart()  # the replay decides the same way
    assert committed(env, "g") == {T0: 20, T1: 11}


def test_a_pending_offset_wins_over_an_older_plain_commit(env):
    env.commit("g", {T0: 5})
    txn_commit(env, "g", {T0: 10})
    marker(env, "g", True)
    assert committed(env, "g") == {T0: 10}


def test_replay_rebuilds_committed_aborted_and_open_transactions(env):
    txn_commit(env, "g", {T0: 10}, pid=1)
    marker(env, "g", True, pid=1)
    txn_commit(env, "g", {T1: 11}, pid=2)
    marker(env, "g", False, pid=2)
    env.commit("g", {("u", 0): 3})
    txn_commit(env, "g", {T1: 12, ("u", 1): 4}, pid=3)  # still open at the restart
    txn_commit(env, "open-only", {T0: 7}, pid=3)
    before = committed(env, "g"), pending(env, "g"), pending(env, "open-only")
    assert before == ({T0: 10, ("u", 0): 3}, {3: {T1: 12, ("u", 1): 4}}, {3: {T0: 7}})
    env.restart()
    assert (committed(env, "g"), pending(env, "g"), pending(env, "open-only")) == before
    assert env.coordinator.unstable_offsets("g", [T1]) == {T1}
    # The transaction coordinator sends the open transaction's marker after the restart.
    marker(env, "g", True, pid=3)
    if env.coordinator.partition_for("open-only") != env.coordinator.partition_for("g"):
        marker(env, "open-only", True, pid=3)
    assert committed(env, "g") == {T0: 10, T1: 12, ("u", 0): 3, ("u", 1): 4}
    assert committed(env, "open-only") == {T0: 7}
    env.restart()
    assert committed(env, "g") == {T0: 10, T1: 12, ("u", 0): 3, ("u", 1): 4}
    assert pending(env, "g") == {} and committed(env, "open-only") == {T0: 7}


def compacted_and_restarted(env, group):
    log = env.store.get_log(formats.OFFSETS_TOPIC, env.coordinator.partition_for(group))
    log.roll()
    env.store.compact(formats.OFFSETS_TOPIC)
    env.restart()


def test_replay_after_compaction_gives_the_same_state_for_one_producers_commits(env):
    for round_ in range(60):
        txn_commit(env, "g", {T0: round_, T1: round_ * 2})
        env.commit("g", {("u", 0): round_})
        marker(env, "g", True)
    before = committed(env, "g")
    assert before == {T0: 59, T1: 118, ("u", 0): 59}
    compacted_and_restarted(env, "g")
    assert committed(env, "g") == before and pending(env, "g") == {}
    txn_commit(env, "g", {T0: 1000})  # the producer goes on after the compaction
    marker(env, "g", True)
    env.restart()
    assert committed(env, "g") == {T0: 1000, T1: 118, ("u", 0): 59}


def test_replay_after_compaction_gives_the_same_state_with_aborts_and_several_producers(env):
    for round_ in range(60):
        pid = 100 + round_ % 3
        txn_commit(env, "g", {T0: round_, T1: round_ * 2}, pid=pid)
        env.commit("g", {("u", 0): round_})
        marker(env, "g", round_ % 4 != 3, pid=pid)
    txn_commit(env, "g", {T0: 1000}, pid=200)  # open
    before = committed(env, "g"), pending(env, "g")
    compacted_and_restarted(env, "g")
    assert (committed(env, "g"), pending(env, "g")) == before


def test_kip_447_member_checks(env):
    a, b = env.form()
    assert txn_commit(env, "g", {T0: 1}, generation=1, member_id=a) == {T0: 0}
    assert txn_commit(env, "g", {T0: 1}, generation=0, member_id=a) == {T0: errors.ILLEGAL_GENERATION}
    assert txn_commit(env, "g", {T0: 1}, generation=1, member_id="zombie") == {T0: errors.UNKNOWN_MEMBER_ID}
    # generation -1 without a member (TxnOffsetCommit v0-v2) is accepted in an active group
    assert txn_commit(env, "g", {T0: 2}) == {T0: 0}
    # into an unknown group only with generation -1 (a group without members is made)
    assert txn_commit(env, "new", {T0: 1}, generation=2, member_id="x") == {T0: errors.ILLEGAL_GENERATION}
    assert "new" not in env.coordinator.groups
    assert txn_commit(env, "simple", {T0: 1}) == {T0: 0}
    assert env.coordinator.describe_group("simple").state == "Empty"
    # a rebalance does not stop the members of the current generation (no REBALANCE_IN_PROGRESS)
    env.join(member_id=a)
    env.join(member_id=b)
    assert env.state() == "CompletingRebalance"
    assert txn_commit(env, "g", {T0: 3}, generation=2, member_id=b) == {T0: 0}
    assert txn_commit(env, "g", {T0: 3}, generation=1, member_id=b) == {T0: errors.ILLEGAL_GENERATION}


def test_kip_447_fences_a_replaced_static_member(env):
    (old,) = env.form(count=1, instance="i1")
    (new,) = [r.member_id for r in env.join(instance="i1") if r.error_code == 0]  # the instance restarts
    assert new != old
    generation = env.coordinator.describe_group("g").generation_id
    assert txn_commit(env, "g", {T0: 1}, generation=generation, member_id=old, instance="i1") == \
        {T0: errors.FENCED_INSTANCE_ID}
    assert txn_commit(env, "g", {T0: 1}, generation=generation, member_id=new, instance="i1") == {T0: 0}


def test_refusals_and_partial_answers_write_nothing(env):
    result = txn_commit(env, "g", {T0: 1, ("nope", 0): 1, T1: OffsetCommit(5, metadata="x" * 5000)})
    assert result == {T0: 0, ("nope", 0): errors.UNKNOWN_TOPIC_OR_PARTITION, T1: errors.OFFSET_METADATA_TOO_LARGE}
    assert pending(env, "g") == {PID: {T0: 1}}
    for bad in ("", None):
        try:
            env.coordinator.txn_offset_commit("g", bad, PID, 0, -1, "", None, {T0: OffsetCommit(1)})
        except ValueError:
            pass
        else:
            raise AssertionError(f"transactional id {bad!r} accepted")


def test_retention_keeps_what_an_open_transaction_is_about_to_replace(make_env):
    env = make_env({"offsets.retention.minutes": 1})
    env.commit("simple", {T0: 1, T1: 2})
    txn_commit(env, "simple", {T0: 10})
    env.clock.advance(120_000)
    env.coordinator.offsets.remove_expired()
    assert committed(env, "simple") == {T0: 1}  # T1 expired; T0 kept under the open transaction
    marker(env, "simple", False)
    env.coordinator.offsets.remove_expired()
    assert committed(env, "simple") == {}  # a group left without offsets and transactions goes
    assert "simple" not in env.coordinator.groups


def test_a_group_with_an_open_transaction_is_not_removed_by_retention(make_env):
    env = make_env({"offsets.retention.minutes": 1})
    txn_commit(env, "only-txn", {T0: 10})
    env.clock.advance(120_000)
    env.coordinator.offsets.remove_expired()
    assert "only-txn" in env.coordinator.groups
    marker(env, "only-txn", True)
    assert committed(env, "only-txn") == {T0: 10}


def test_deleting_a_group_or_an_offset_drops_its_pending_offsets_for_good(env):
    env.commit("g", {T0: 1})
    txn_commit(env, "g", {T0: 10, T1: 11})
    assert env.coordinator.delete_offsets("g", [T1]) == (0, {T1: 0})
    assert env.coordinator.unstable_offsets("g", [T0, T1]) == {T0}
    assert env.coordinator.delete_groups(["g"]) == {"g": 0}
    marker(env, "g", True)
    assert committed(env, "g") == {}
    env.restart()  # the tombstones drop them in the replay too
    assert committed(env, "g") == {} and pending(env, "g") == {}


def test_a_marker_that_lands_while_the_offsets_are_being_written_still_decides_them(env):
    """The transaction coordinator may end a transaction (its timeout) while the offsets' append
    is between its write and its answer: the marker is then applied when the answer comes, never
    lost, so the offsets do not stay pending with no marker to come."""
    storage = env.coordinator.storage
    real_append = storage.append

    def append_then_marker(partition, records, callback, producer=None):
        def answered(error, first_offset):
            marker(env, "g", False)  # the coordinator aborts in between
            callback(error, first_offset)
        real_append(partition, records, answered, producer)

    storage.append = append_then_marker
    try:
        assert txn_commit(env, "g", {T0: 10}) == {T0: 0}
    finally:
        storage.append = real_append
    assert pending(env, "g") == {} and committed(env, "g") == {}
    assert env.coordinator.unstable_offsets("g", [T0]) == set()


def test_the_writer_thread_writes_a_transactional_commit_as_its_producers_own_batch(env):
    """One round of the threaded coordinator's writer with plain and transactional commits queued
    for the same partition: the plain ones share a batch, each producer's records are a batch of
    their own with its producer block, every callback gets the offset of its own first record."""
    from logstore.group.storage import OffsetsWriter
    from logstore.records.batching import ProducerBatch
    from logstore.records.decoder import Record

    env.commit("g", {T0: 1})  # creates the topic
    partition = env.coordinator.partition_for("g")
    log = env.store.get_log(formats.OFFSETS_TOPIC, partition)
    start = log.log_end_offset

    def record(offset):
        return Record(key=formats.encode_offset_key("g", "t", 0), value=formats.encode_offset_value(
            formats.OffsetValue(offset, -1, "", 0, None)), timestamp_ms=0)

    answers = []
    work = [(partition, [record(1), record(2)], lambda e, o: answers.append(("plain-a", e, o)), None),
            (partition, [record(3)], lambda e, o: answers.append(("txn", e, o)), ProducerBatch(PID, 0, -1, True)),
            (partition, [record(4)], lambda e, o: answers.append(("plain-b", e, o)), None)]
    writer = OffsetsWriter(env.coordinator.storage)
    try:
        writer._write(work)
    finally:
        writer.shutdown()
    assert sorted(answers) == [("plain-a", 0, start), ("plain-b", 0, start + 2), ("txn", 0, start + 3)]
    assert writer.fsyncs == 1
    batches = [(batch.base_offset, batch.record_count, producer) for batch, producer, _marker
               in log.iter_batches_with_control(start)]
    assert [(base, count) for base, count, _producer in batches] == [(start, 3), (start + 3, 1)]
    assert batches[0][2] is None and (batches[1][2].producer_id, batches[1][2].transactional) == (PID, True)


def test_a_threaded_coordinator_answers_a_transactional_commit_once_it_is_durable(tmp_path):
    from logstore.group.coordinator import GroupCoordinator
    from logstore.manager.log_manager import LogManager

    with LogManager([str(tmp_path / "threaded")]) as store:
        store.create_topic("t", partitions=1)
        coordinator = GroupCoordinator(store, config={"offsets.topic.num.partitions": 2}, threaded=True)
        coordinator.startup()
        try:
            assert coordinator.txn_offset_commit("g", "tx", PID, 0, -1, "", None, {T0: OffsetCommit(9)}) == {T0: 0}
            assert coordinator.unstable_offsets("g", [T0]) == {T0}
            partition = coordinator.partition_for("g")
            log = store.get_log(formats.OFFSETS_TOPIC, partition)
            offset = log.append_marker(PID, 0, 0, True)
            log.flush()
            assert coordinator.complete_transaction(partition, PID, True, offset) == 1
            assert coordinator.fetch_offsets("g", [T0])[1][T0].offset == 9
        finally:
            coordinator.shutdown()


def test_a_fenced_producers_offsets_are_refused(env):
    assert txn_commit(env, "g", {T0: 10}, epoch=1) == {T0: 0}
    assert txn_commit(env, "g", {T0: 11}, epoch=0) == {T0: errors.INVALID_PRODUCER_EPOCH}  # a zombie
    assert pending(env, "g") == {PID: {T0: 10}}
    marker(env, "g", True, epoch=1)
    assert committed(env, "g") == {T0: 10}


OPERATIONS = st.lists(st.one_of(
    st.tuples(st.just("txn"), st.sampled_from((1, 2)), st.sampled_from((T0, T1)), st.integers(0, 99)),
    st.tuples(st.just("plain"), st.sampled_from((T0, T1)), st.integers(0, 99)),
    st.tuples(st.just("marker"), st.sampled_from((1, 2)), st.booleans()),
    st.tuples(st.just("delete"), st.sampled_from((T0, T1)))), max_size=25)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=OPERATIONS)
def test_memory_and_replay_agree_with_a_model(tmp_path_factory, operations):
    """Random transactional and plain commits, markers and offset deletions of one group: the
    coordinator's committed and pending offsets equal a model's (the later record wins, a COMMIT
    applies a pending offset unless a plain record of its key came after it, an ABORT drops, a
    deletion drops both), and a restart's replay rebuilds exactly that."""
    env = GroupEnv(tmp_path_factory.mktemp("model") / "store")
    try:
        committed_model: dict = {}  # key -> (offset, position)
        pending_model: dict = {}  # pid -> key -> (offset, position)
        position = 0  # a stand-in for the record's place in the log: only the order matters
        for operation in operations:
            position += 1
            if operation[0] == "txn":
                _, pid, key, offset = operation
                assert txn_commit(env, "g", {key: offset}, pid=pid) == {key: 0}
                pending_model.setdefault(pid, {})[key] = (offset, position)
            elif operation[0] == "plain":
                _, key, offset = operation
                assert env.commit("g", {key: offset}) == {key: 0}
                committed_model[key] = (offset, position)
            elif operation[0] == "marker":
                _, pid, commit = operation
                if pid not in pending_model:
                    continue  # no open transaction of that producer
                marker(env, "g", commit, pid=pid)
                for key, (offset, at) in pending_model.pop(pid).items():
                    if commit and committed_model.get(key, (None, -1))[1] < at:
                        committed_model[key] = (offset, at)
            else:
                _, key = operation
                if "g" not in env.coordinator.groups:
                    continue
                assert env.coordinator.delete_offsets("g", [key]) == (0, {key: 0})
                committed_model.pop(key, None)
                for held in pending_model.values():
                    held.pop(key, None)
        expected = ({key: offset for key, (offset, _at) in committed_model.items()},
                    {pid: {key: offset for key, (offset, _at) in held.items()} for pid, held in pending_model.items()})
        assert (committed(env, "g"), pending(env, "g")) == expected
        env.restart()
        assert (committed(env, "g"), pending(env, "g")) == expected
    finally:
        env.close()
