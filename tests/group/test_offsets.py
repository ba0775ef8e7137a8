"""Committed offsets: commit and fetch, who may commit when, durability across restarts, retention,
deletion, and the compaction of ``__consumer_offsets`` (docs/design.md §9)."""

from __future__ import annotations

from logstore.group import errors, formats
from logstore.group.consumer_protocol import Subscription, encode_subscription
from logstore.group.results import OffsetCommit

T0, T1 = ("t", 0), ("t", 1)


def test_commit_then_fetch_returns_offset_metadata_and_leader_epoch(env):
    assert env.commit("g", {T0: OffsetCommit(42, leader_epoch=3, metadata="m")}) == {T0: 0}
    error, offsets = env.fetch("g", [T0, T1])
    assert error == 0 and offsets[T1] is None
    assert (offsets[T0].offset, offsets[T0].leader_epoch, offsets[T0].metadata) == (42, 3, "m")
    assert env.fetch("g", None)[1].keys() == {T0}
    assert env.fetch("unknown", [T0]) == (0, {T0: None})
    assert env.fetch("unknown", None) == (0, {})


def test_commit_validation_for_members(env):
    a, b = env.form()
    assert env.commit("g", {T0: 1}, generation=1, member_id=a) == {T0: 0}
    assert env.commit("g", {T0: 1}, generation=0, member_id=a) == {T0: errors.ILLEGAL_GENERATION}
    assert env.commit("g", {T0: 1}, generation=1, member_id="nobody") == {T0: errors.UNKNOWN_MEMBER_ID}
    assert env.commit("g", {T0: 1}) == {T0: errors.UNKNOWN_MEMBER_ID}  # generation -1 into an active group
    assert env.commit("new", {T0: 1}, generation=3, member_id="x") == {T0: errors.ILLEGAL_GENERATION}
    env.join(member_id=a)  # PreparingRebalance: members of the previous generation may still commit
    assert env.commit("g", {T0: 2}, generation=1, member_id=b) == {T0: 0}
    env.join(member_id=b)  # the join completes: CompletingRebalance
    assert env.commit("g", {T0: 3}, generation=2, member_id=b) == {T0: errors.REBALANCE_IN_PROGRESS}


def test_an_assign_consumer_commit_creates_a_simple_group(env):
    assert env.commit("simple", {T0: 7}) == {T0: 0}
    assert [(g.group_id, g.protocol_type, g.state) for g in env.coordinator.list_groups()[1]] == \
        [("simple", "", "Empty")]


def test_unknown_partitions_and_large_metadata_fail_only_their_partitions(env):
    result = env.commit("g", {T0: 1, ("nope", 0): 1, ("t", 9): 1, T1: OffsetCommit(5, metadata="x" * 5000)})
    assert result == {T0: 0, ("nope", 0): errors.UNKNOWN_TOPIC_OR_PARTITION, ("t", 9): errors.UNKNOWN_TOPIC_OR_PARTITION,
                      T1: errors.OFFSET_METADATA_TOO_LARGE}
    assert env.fetch("g", None)[1].keys() == {T0}


def test_commits_and_groups_survive_a_restart_and_live_members_go_on(env):
    a, b = env.form(session=10000)
    env.commit("g", {T0: 10, T1: 11}, generation=1, member_id=a)
    env.commit("simple", {T0: 5})
    env.restart()
    assert {k: v.offset for k, v in env.fetch("g", None)[1].items()} == {T0: 10, T1: 11}
    assert env.fetch("simple", [T0])[1][T0].offset == 5
    summary = env.coordinator.describe_group("g")
    assert summary.state == "Stable" and summary.generation_id == 1 and {m.member_id for m in summary.members} == {a, b}
    assert env.sync("g", 1, b)[-1].assignment == b.encode()  # the stored assignment came back
    for _ in range(3):  # a keeps heartbeating with the same generation: no rebalance
        env.advance(3000)
        assert env.heartbeat("g", 1, a) == 0
    env.advance(1000)  # b's last liveness event was its SyncGroup 10 s ago: evicted
    assert env.state() == "PreparingRebalance"


def test_an_empty_group_comes_back_empty_with_its_generation(env):
    (a,) = env.form(count=1)
    env.coordinator.leave_group("g", [(a, None)])
    env.restart()
    summary = env.coordinator.describe_group("g")
    assert (summary.state, summary.generation_id) == ("Empty", 2)


def test_replay_after_compaction_gives_the_same_state(env):
    a, b = env.form()
    for offset in range(200):
        env.commit("g", {T0: offset, T1: offset * 2}, generation=1, member_id=a)
    env.commit("gone", {T0: 1})
    assert env.coordinator.delete_groups(["gone"]) == {"gone": 0}
    before = {k: v.offset for k, v in env.fetch("g", None)[1].items()}
    partition = env.coordinator.partition_for("g")
    log = env.store.get_log(formats.OFFSETS_TOPIC, partition)
    records_before = sum(1 for _ in log.iter_records())
    log.roll()
    env.store.compact(formats.OFFSETS_TOPIC)
    records_after = sum(1 for _ in env.store.get_log(formats.OFFSETS_TOPIC, partition).iter_records())
    assert records_after < records_before / 10
    env.restart()
    assert {k: v.offset for k, v in env.fetch("g", None)[1].items()} == before
    assert env.coordinator.describe_group("gone").state == "Dead"
    assert env.coordinator.describe_group("g").generation_id == 1


def test_delete_groups(env):
    env.form(group="busy")
    env.commit("idle", {T0: 3})
    assert env.coordinator.delete_groups(["busy", "nothing", "idle"]) == {
        "busy": errors.NON_EMPTY_GROUP, "nothing": errors.GROUP_ID_NOT_FOUND, "idle": 0}
    assert env.fetch("idle", [T0]) == (0, {T0: None})
    env.restart()
    assert env.fetch("idle", [T0]) == (0, {T0: None})
    assert "idle" not in [g.group_id for g in env.coordinator.list_groups()[1]]


def test_offset_delete_refuses_subscribed_topics_of_an_active_group(env):
    metadata = encode_subscription(Subscription(["t"]))
    a, b = env.form(protocols=[("range", metadata)])
    env.commit("g", {T0: 1, ("u", 0): 2}, generation=1, member_id=a)
    error, results = env.coordinator.delete_offsets("g", [T0, ("u", 0)])
    assert error == 0 and results == {T0: errors.GROUP_SUBSCRIBED_TO_TOPIC, ("u", 0): 0}
    assert env.fetch("g", None)[1].keys() == {T0}
    assert env.coordinator.delete_offsets("nothing", [T0])[0] == errors.GROUP_ID_NOT_FOUND


def test_retention_of_an_empty_group_counts_from_when_it_became_empty(make_env):
    env = make_env({"offsets.retention.minutes": 1})
    (a,) = env.form(count=1)
    env.commit("g", {T0: 1}, generation=1, member_id=a)
    env.advance(50_000)
    env.coordinator.leave_group("g", [(a, None)])  # Empty from now on
    env.advance(30_000)  # 80 s after the commit, 30 s after it became Empty: kept
    assert env.coordinator.offsets.remove_expired() == 0
    env.advance(30_000)
    assert env.coordinator.offsets.remove_expired() == 1
    assert env.coordinator.describe_group("g").state == "Dead"
    env.restart()
    assert env.fetch("g", [T0]) == (0, {T0: None}) and env.coordinator.list_groups()[1] == []


def test_retention_keeps_a_stable_groups_subscribed_topics_and_expires_simple_groups_by_commit(make_env):
    env = make_env({"offsets.retention.minutes": 1})
    metadata = encode_subscription(Subscription(["t"]))
    a, b = env.form(protocols=[("range", metadata)], session=600_000)
    env.commit("g", {T0: 1, ("u", 0): 1}, generation=1, member_id=a)
    env.commit("simple", {T0: 9})
    env.advance(60_000)
    assert env.coordinator.offsets.remove_expired() == 2  # g's u-0 (not subscribed) and simple's t-0
    assert env.fetch("g", None)[1].keys() == {T0}
    assert "simple" not in [g.group_id for g in env.coordinator.list_groups()[1]]


def test_an_explicit_retention_time_from_offset_commit_v2_is_honoured(env):
    env.commit("simple", {T0: 1}, retention_ms=5000)
    env.advance(4999)
    assert env.coordinator.offsets.remove_expired() == 0
    env.advance(1)
    assert env.coordinator.offsets.remove_expired() == 1


def test_the_group_to_partition_mapping_is_kafkas(env):
    assert formats.partition_for("my-group") == 12
    assert env.coordinator.partition_for("a") == formats.partition_for("a", 5)
    env.commit("my-group", {T0: 4})
    log = env.store.get_log(formats.OFFSETS_TOPIC, formats.partition_for("my-group", 5))
    (record,) = list(log.iter_records())
    key = formats.decode_key(record.key)
    assert (key.group, key.topic, key.partition) == ("my-group", "t", 0)
    assert formats.decode_offset_value(record.value).offset == 4


def test_a_record_that_does_not_decode_is_skipped_and_reported_not_fatal(env):
    from logstore.records.decoder import Record
    env.commit("g", {T0: 5})
    partition = env.coordinator.partition_for("g")
    # Through the partition's log, as the coordinator writes: the store's append refuses internal topics.
    env.store.get_log(formats.OFFSETS_TOPIC, partition).append(
        [Record(key=formats.encode_offset_key("g", "t", 1), value=b"\x00\x09junk")])
    env.restart()
    assert env.fetch("g", None)[1].keys() == {T0}
    (problem,) = env.coordinator.storage.problems
    assert f"{formats.OFFSETS_TOPIC}-{partition}" in problem and "skipped" in problem


def test_a_commit_to_unknown_partitions_only_creates_no_group(env):
    assert env.commit("ghost", {("no-such-topic", 0): 1}) == {("no-such-topic", 0): errors.UNKNOWN_TOPIC_OR_PARTITION}
    assert env.coordinator.list_groups()[1] == []


def test_a_damaged_offsets_partition_makes_its_groups_unavailable_not_empty(env):
    """File-fuzz findings: a damaged, cut or removed ``__consumer_offsets`` segment must not
    make a group look empty (committed offsets None, error 0): its groups answer
    COORDINATOR_NOT_AVAILABLE, the other partitions' groups work, and the store reports it."""
    import os

    env.commit("g", {T0: 10, T1: 11})
    other = next(name for name in (f"o{n}" for n in range(100))
                 if env.coordinator.partition_for(name) != env.coordinator.partition_for("g"))
    env.commit(other, {T0: 5})
    partition = env.coordinator.partition_for("g")
    env.close()
    folder = os.path.join(str(env.path), f"{formats.OFFSETS_TOPIC}-{partition}")
    segment = os.path.join(folder, sorted(name for name in os.listdir(folder) if name.endswith(".log"))[0])
    with open(segment, "r+b") as file:  # a clean store's last bytes cut: damage, not a torn tail
        file.truncate(os.path.getsize(segment) - 3)
    env.open()
    assert env.fetch("g", [T0, T1])[0] == errors.COORDINATOR_NOT_AVAILABLE
    assert env.join("g")[-1].error_code == errors.COORDINATOR_NOT_AVAILABLE
    assert env.commit("g", {T0: 12}) == {T0: errors.COORDINATOR_NOT_AVAILABLE}
    assert env.fetch(other, [T0])[1][T0].offset == 5  # the other partitions' groups work
    assert env.coordinator.list_groups()[0] == errors.COORDINATOR_NOT_AVAILABLE
    assert any(f"{formats.OFFSETS_TOPIC}-{partition}" in problem and "unavailable" in problem
               for problem in env.store.problems)


# --- the commit path's per-commit work -----------------------------------------------------------


def test_a_commit_looks_each_topic_up_once_and_writes_columns(env, monkeypatch):
    """A commit of several partitions asks the store for a topic's partition count once (not once per
    partition), and hands the log its records as columns: each key the topic's key prefix and the
    partition, each value the offset value, one timestamp for all, no ``Record`` built."""
    from logstore.records.batching import RecordColumns
    asked, appended = [], []
    real_partitions = env.store.partitions
    monkeypatch.setattr(env.store, "partitions", lambda topic: asked.append(topic) or real_partitions(topic))
    env.commit("g", {T0: 1})  # creates __consumer_offsets
    log = env.store.get_log(formats.OFFSETS_TOPIC, env.coordinator.partition_for("g"))
    real_append = log.append
    monkeypatch.setattr(log, "append", lambda records, **kw: appended.append(records) or real_append(records, **kw))
    asked.clear()
    env.clock.advance(5)
    assert env.commit("g", {T0: 10, T1: 11, ("t", 3): 13, ("u", 1): 21, ("t", 4): 5}) == {
        T0: 0, T1: 0, ("t", 3): 0, ("u", 1): 0, ("t", 4): errors.UNKNOWN_TOPIC_OR_PARTITION}
    assert sorted(asked) == ["t", "u"]
    [records] = appended
    assert type(records) is RecordColumns and len(set(records.timestamps)) == 1
    assert [formats.decode_key(key) for key in records.keys] == [
        formats.OffsetKey("g", "t", 0), formats.OffsetKey("g", "t", 1), formats.OffsetKey("g", "t", 3),
        formats.OffsetKey("g", "u", 1)]
    assert [formats.decode_offset_value(value).offset for value in records.values] == [10, 11, 13, 21]
    env.restart()
    assert {key: value.offset for key, value in env.fetch("g", None)[1].items()} == {
        T0: 10, T1: 11, ("t", 3): 13, ("u", 1): 21}


def test_the_partition_of_a_group_is_remembered_within_a_bound(env, monkeypatch):
    from logstore.group import storage
    hashed = []
    real_partition_for = formats.partition_for
    monkeypatch.setattr(formats, "partition_for", lambda group_id, partitions: hashed.append(group_id)
                        or real_partition_for(group_id, partitions))
    monkeypatch.setattr(storage, "PARTITION_CACHE_ENTRIES", 3)
    manager = env.coordinator.storage
    for _ in range(3):
        assert manager.partition_for("g") == real_partition_for("g", 5)
    assert hashed == ["g"]  # hashed once
    for group_id in ("a", "b", "c", "d", "e"):
        assert manager.partition_for(group_id) == real_partition_for(group_id, 5)
    assert len(manager._partitions) <= 3


def test_a_writer_round_of_column_commits_is_one_batch_with_each_answer_at_its_own_offset(env):
    """The threaded coordinator's writer: the plain commits queued in one round are one batch (their
    columns joined), one fsync, and each callback gets the offset of its own first record."""
    from logstore.group.storage import OffsetsWriter
    from logstore.records.batching import RecordColumns

    env.commit("g", {T0: 1})  # creates the topic
    partition = env.coordinator.partition_for("g")
    log = env.store.get_log(formats.OFFSETS_TOPIC, partition)
    start = log.log_end_offset

    def columns(*offsets):
        return RecordColumns([formats.encode_offset_key("g", "t", 0)] * len(offsets),
                             [formats.encode_offset_value_fields(o, -1, "", 0, None) for o in offsets],
                             [()] * len(offsets), [0] * len(offsets))

    answers = []
    work = [(partition, columns(1, 2), lambda e, o: answers.append(("a", e, o)), None),
            (partition, columns(3), lambda e, o: answers.append(("b", e, o)), None),
            (partition, columns(4, 5, 6), lambda e, o: answers.append(("c", e, o)), None)]
    writer = OffsetsWriter(env.coordinator.storage)
    try:
        writer._write(work)
    finally:
        writer.shutdown()
    assert answers == [("a", 0, start), ("b", 0, start + 2), ("c", 0, start + 3)] and writer.fsyncs == 1
    batches = [(batch.base_offset, batch.record_count) for batch, _producer, _marker in log.iter_batches_with_control(start)]
    assert batches == [(start, 6)]
    assert [formats.decode_offset_value(record.value).offset for batch, _p, _m in log.iter_batches_with_control(start)
            for record in batch.iter_records()] == [1, 2, 3, 4, 5, 6]


def test_a_threaded_commit_is_answered_only_once_an_fsync_covers_its_records(tmp_path):
    """Concurrent committers through the writer thread: when a commit is answered, the recovery point
    of its ``__consumer_offsets`` partition (what an fsync covered) is past its records, and every
    answered offset is there after a restart."""
    import threading

    from logstore.group.coordinator import GroupCoordinator
    from logstore.manager.log_manager import LogManager

    def open_coordinator(store):
        coordinator = GroupCoordinator(store, config={"offsets.topic.num.partitions": 3}, threaded=True)
        coordinator.startup()
        return coordinator

    seen, problems = {}, []
    with LogManager([str(tmp_path / "threaded")]) as store:
        store.create_topic("t", partitions=4)
        coordinator = open_coordinator(store)
        try:
            def committer(group):
                for offset in range(1, 21):
                    done = threading.Event()

                    def answered(results, group=group, offset=offset, done=done):
                        log = store.get_log(formats.OFFSETS_TOPIC, coordinator.partition_for(group))
                        if results != {T0: 0, T1: 0}:
                            problems.append((group, results))
                        elif log.recovery_point <= coordinator.storage.groups[group].offset_positions[T1]:
                            problems.append((group, offset, "answered before its fsync"))
                        seen[group] = offset
                        done.set()
                    coordinator.commit_offsets(group, -1, "", {T0: OffsetCommit(offset), T1: OffsetCommit(offset)},
                                               callback=answered)
                    assert done.wait(10)

            threads = [threading.Thread(target=committer, args=(f"g{i}",)) for i in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
            assert coordinator.storage.writer_stats()["fsyncs"] >= 1
        finally:
            coordinator.shutdown()
    assert problems == [] and seen == {f"g{i}": 20 for i in range(4)}
    with LogManager([str(tmp_path / "threaded")]) as store:
        coordinator = open_coordinator(store)
        try:
            for i in range(4):
                assert {key: value.offset for key, value in coordinator.fetch_offsets(f"g{i}", None)[1].items()} == \
                    {T0: 20, T1: 20}
        finally:
            coordinator.shutdown()
