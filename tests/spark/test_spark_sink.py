"""The Spark sink's staging and commit protocol (``logstore.spark.sink``), without Spark.

Invariants checked:

- Staging then committing appends exactly the staged rows: per partition, the rows of each task in
  row order, tasks in task-id order (whatever order the commit messages come in); a keyed row goes
  to ``partition_for_key``, an explicit partition is kept, a keyless row goes round-robin per task
  (the k-th keyless row of task t to ``(t + k) % n``); the topic option overrides the column; str
  values are UTF-8, None values are tombstones, headers and given timestamps are kept, a missing
  timestamp becomes the append time. ``TargetPlan`` and ``StagedFile`` pickle.
- Misuse is refused clearly, naming the row or the topic, and changes nothing in the store: a missing
  topic (with the create command), a row without topic and no option, a bad partition, bad types, a
  keyless row for a compacted topic, a failed task (None) in the commit, a file of another job, a
  damaged or cut staged file (found before anything is appended).
- All or nothing: a failure mid-commit truncates every touched partition back to its earlier log end
  offset and keeps the staged files, so a retry appends everything once; ``abort_staged`` removes them.
- The store's loader ignores ``.staging`` (no problem reported); ``clear_staging`` removes only old job
  dirs, never the sinks' journals.
- Another writer holding the store: the commit fails with ``LockedError`` saying so, nothing staged is
  lost, and a retry (or ``lock_wait_s``) succeeds.
- Exactly-once streaming per (sink id, batch id): a batch committed twice appends once; a crash after
  the intent with part (or all) of the batch appended, even followed by other writers' records, ends
  with each record exactly once after the retry (in process, in a killed subprocess, and in a
  hypothesis state machine against a plain model); on a LogAppendTime topic the comparison ignores
  the rows' timestamps (the log replaced them); an abandoned intent of an older batch id is overwritten.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tempfile
import textwrap
import threading
from contextlib import ExitStack, contextmanager
from unittest import mock

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from logstore.clock import ManualClock
from logstore.errors import (CorruptCheckpointError, CorruptRecordError, InvalidRecordError, InvalidTopicError,
                             LockedError, UnknownTopicOrPartitionError)
from logstore.manager.log_manager import LogManager
from logstore.manager.topics import STAGING_DIR, partition_for_key
from logstore.records.decoder import Record
from logstore.spark import sink
from logstore.spark.sink import (StagedFile, TargetPlan, abort_staged, clear_staging, commit_staged, read_staged,
                                 stage_records)


def make_store(path) -> str:
    path = str(path)
    with LogManager(path) as store:
        store.create_topic("t", 3)
        store.create_topic("u", 1)
        store.create_topic("c", 2, config={"cleanup.policy": "compact"})
    return path


@pytest.fixture
def store(tmp_path) -> str:
    return make_store(tmp_path / "store")


def contents(path, topic="t") -> dict[int, list[Record]]:
    view = LogManager(path, read_only=True)
    try:
        return {partition: list(view.get_log(topic, partition).iter_records())
                for partition in range(view.partitions(topic))}
    finally:
        view.close()


def pairs(path, topic="t") -> dict[int, list[tuple]]:
    return {partition: [(record.key, record.value) for record in records]
            for partition, records in contents(path, topic).items()}


def ends(path) -> dict[tuple[str, int], int]:
    view = LogManager(path, read_only=True)
    try:
        return {(log.topic, log.partition): log.log_end_offset for log in view.logs()}
    finally:
        view.close()


def staged_paths(plan) -> list[str]:
    return sorted(os.listdir(plan.job_dir)) if os.path.isdir(plan.job_dir) else []


def expected_partition(key: bytes, partitions: int = 3) -> int:
    return partition_for_key(key, partitions)


# --- staging and committing ----------------------------------------------------------------------------


def test_commit_appends_rows_in_task_order_per_partition(store):
    plan = pickle.loads(pickle.dumps(TargetPlan.for_store(store)))
    tasks = {task: [("t", None, f"k{task}-{i % 4}".encode(), f"v{task}-{i}", None, None) for i in range(30)]
             for task in range(3)}
    staged = [stage_records(plan, task, rows) for task, rows in tasks.items()]
    assert [pickle.loads(pickle.dumps(item)) for item in staged] == staged
    result = commit_staged(plan, [staged[2], staged[0], staged[1]])  # any message order: task-id order
    expected: dict[int, list] = {0: [], 1: [], 2: []}
    for task in range(3):
        for _, _, key, value, _, _ in tasks[task]:
            expected[expected_partition(key)].append((key, value.encode()))
    assert pairs(store) == expected
    assert result.appended == {("t", p): len(rows) for p, rows in expected.items() if rows}
    assert result.total_appended == 90 and not result.skipped and result.recovered == {}
    assert result.first_offsets == {target: 0 for target in result.appended}
    assert result.last_offsets == {target: count - 1 for target, count in result.appended.items()}
    assert not os.path.exists(plan.job_dir)


def test_record_fields_partitions_and_topic_option(store):
    plan = TargetPlan.for_store(store)
    rows = [("t", 2, b"k", b"bytes", [("h1", b"x"), ("h2", None)], 1_600_000_000_000),
            ("u", 1, None, "str é", None, None),  # partition 1 of t: u is only the column
            ("t", 0, b"k", None, [], 7),  # a tombstone
            ("t", None, "strkey", bytearray(b"ba"), (("h", "s"),), 0)]
    with pytest.raises(UnknownTopicOrPartitionError, match="partition 1"):
        stage_records(plan, 0, rows[1:2])  # topic u has one partition
    commit_staged(plan, [stage_records(plan, 0, rows[:1] + rows[2:])])
    found = contents(store)
    assert found[2][0][:4] == (b"k", b"bytes", (("h1", b"x"), ("h2", None)), 1_600_000_000_000)
    assert found[0][0][:4] == (b"k", None, (), 7)
    assert found[expected_partition(b"strkey")][-1][:4] == (b"strkey", b"ba", (("h", b"s"),), 0)
    option = TargetPlan.for_store(store, "u")
    commit_staged(option, [stage_records(option, 0, [("t", None, None, "str é", None, None), (None, None, b"k", b"v",
                                                                                               None, None)])])
    records = contents(store, "u")[0]
    assert [(r.key, r.value) for r in records] == [(None, "str é".encode()), (b"k", b"v")]
    assert all(r.timestamp_ms > 1_000_000_000_000 for r in records)  # the append time


def test_keyless_rows_go_round_robin_per_task(store):
    plan = TargetPlan.for_store(store)
    staged = stage_records(plan, 4, [("t", None, None, b"%d" % i, None, None) for i in range(7)]
                           + [("t", None, b"key", b"keyed", None, None)])
    keyed = expected_partition(b"key")
    assert dict(staged.records_per_partition) == {("t", p): 2 + (p == 1) + (p == keyed) for p in range(3)}
    commit_staged(plan, [staged])
    found = pairs(store)
    for k in range(7):
        assert (None, b"%d" % k) in found[(4 + k) % 3]


def test_headers_left_out_when_the_plan_excludes_them(store):
    plan = TargetPlan.for_store(store, "u", include_headers=False)
    commit_staged(plan, [stage_records(plan, 0, [(None, None, b"k", b"v", [("h", b"x")], None)])])
    assert contents(store, "u")[0][0].headers == ()


def test_large_tasks_are_staged_in_bounded_batches(store):
    plan = TargetPlan.for_store(store, "u")
    staged = stage_records(plan, 0, ((None, None, None, b"x" * 10, None, i) for i in range(2500)))
    batches = [records for _, records in read_staged(staged.path)]
    assert [len(records) for records in batches] == [1000, 1000, 500]
    assert staged.total_records == 2500
    commit_staged(plan, [staged])
    assert [r.timestamp_ms for r in contents(store, "u")[0]] == list(range(2500))


# --- errors leave the store unchanged --------------------------------------------------------------------


def test_a_missing_topic_is_named_with_the_command_to_create_it(store):
    with pytest.raises(UnknownTopicOrPartitionError, match=r"'nope'.*topics create nope --partitions N"):
        TargetPlan.for_store(store, "nope")
    with pytest.raises(InvalidTopicError):
        TargetPlan.for_store(store, "bad name")
    plan = TargetPlan.for_store(store)
    with pytest.raises(UnknownTopicOrPartitionError, match=r"row 1 of task 3: topic 'nope' does not exist.*nope"):
        stage_records(plan, 3, [("t", None, b"k", b"v", None, None), ("nope", None, b"k", b"v", None, None)])
    assert staged_paths(plan) == []  # the failed task's file is gone


@pytest.mark.parametrize("row, error, message", [
    ((None, None, b"k", b"v", None, None), ValueError, "row 0 of task 0: no topic"),
    (("t", 3, b"k", b"v", None, None), UnknownTopicOrPartitionError, r"no partition 3 \(partitions: 0..2\)"),
    (("t", -1, b"k", b"v", None, None), UnknownTopicOrPartitionError, "no partition -1"),
    (("t", "1", b"k", b"v", None, None), TypeError, "partition must be an int"),
    (("t", None, b"k", 5, None, None), TypeError, "value must be bytes, str or None, got 5"),
    (("t", None, 1.5, b"v", None, None), TypeError, "key must be"),
    (("t", None, b"k", b"v", "h", None), TypeError, "headers must be a list"),
    (("t", None, b"k", b"v", [("h",)], None), TypeError, "a header must be a"),
    (("t", None, b"k", b"v", [(1, b"x")], None), TypeError, "header name must be a str"),
    (("t", None, b"k", b"v", None, -5), ValueError, "timestamp_ms must be an int64 >= 0 or None, got -5"),
    (("t", None, b"k", b"v", None, "now"), ValueError, "timestamp_ms"),
    (("c", None, None, b"v", None, None), InvalidRecordError, "compacted"),
    (("c", 1, None, b"v", None, None), InvalidRecordError, "compacted"),
    (("t", b"k", b"v"), TypeError, r"expected \(topic, partition, key, value, headers, timestamp_ms\)"),
])
def test_bad_rows_are_refused_naming_the_row(store, row, error, message):
    plan = TargetPlan.for_store(store)
    with pytest.raises(error, match=message) as caught:
        stage_records(plan, 0, [row])
    assert str(caught.value).startswith("row 0 of task 0: ")
    assert staged_paths(plan) == []


def test_a_failed_task_or_a_foreign_file_is_refused_before_anything_changes(store, tmp_path):
    plan = TargetPlan.for_store(store)
    good = stage_records(plan, 0, [("t", 0, b"k", b"v", None, None)])
    before = ends(store)
    with pytest.raises(ValueError, match=r"tasks \[1\] .* staged nothing"):
        commit_staged(plan, [good, None])
    other = TargetPlan.for_store(store)
    stranger = stage_records(other, 1, [("t", 0, b"k", b"v", None, None)])
    with pytest.raises(ValueError, match="is not part of job"):
        commit_staged(plan, [good, stranger])
    with pytest.raises(ValueError, match="task ids staged twice"):
        commit_staged(plan, [good, good])
    for sink_id, batch_id in [("s", None), (None, 0), ("", 0), ("s", -1), ("s", True)]:
        with pytest.raises(ValueError, match="a streaming commit takes both sink_id"):
            commit_staged(plan, [good], sink_id=sink_id, batch_id=batch_id)
    with pytest.raises(ValueError, match="task_id must be an int >= 0"):
        stage_records(plan, -1, [])
    assert ends(store) == before and os.path.exists(good.path)
    commit_staged(plan, [good])
    assert pairs(store)[0] == [(b"k", b"v")]


@pytest.mark.parametrize("damage", ["flip", "cut", "missing", "count"])
def test_a_damaged_staged_file_fails_the_commit_before_any_append(store, damage):
    plan = TargetPlan.for_store(store)
    first = stage_records(plan, 0, [("t", 0, b"a", b"1", None, None)])
    second = stage_records(plan, 1, [("t", 1, b"b", b"%d" % i, None, None) for i in range(50)])
    if damage == "flip":
        data = bytearray(open(second.path, "rb").read())
        data[-3] ^= 0xFF
        open(second.path, "wb").write(bytes(data))
    elif damage == "cut":
        os.truncate(second.path, os.path.getsize(second.path) - 10)
    elif damage == "missing":
        os.remove(second.path)
    else:
        second = StagedFile(second.path, 1, ((("t", 1), 49),), 49)
    with pytest.raises((CorruptRecordError, sink.StorageError), match="staged file"):
        commit_staged(plan, [first, second])
    assert ends(store) == {key: 0 for key in ends(store)}


# --- rollback, abort, cleanup -------------------------------------------------------------------------


class Crash(BaseException):
    """A simulated death of the committing process (not an Exception: nothing may catch it)."""


@contextmanager
def failing_appends(after: int, error: BaseException, *, roll_back: bool = True):
    """LogManager.append raises ``error`` from its call number ``after`` on (0: the first). Without
    ``roll_back`` the commit's rollback is skipped, as when the process dies."""
    real = LogManager.append
    calls = [0]

    def append(self, *args, **kwargs):
        calls[0] += 1
        if calls[0] > after:
            raise error
        return real(self, *args, **kwargs)

    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(LogManager, "append", append))
        if not roll_back:
            stack.enter_context(mock.patch.object(sink, "_roll_back", lambda *args: None))
        yield calls


def two_task_job(path, tag="x", count=40):
    plan = TargetPlan.for_store(path)
    staged = [stage_records(plan, task, [("t", None, f"{tag}{task}-{i}".encode(), f"{tag}{task}v{i}", None, None)
                                         for i in range(count)]) for task in range(2)]
    return plan, staged


def test_a_failure_mid_commit_rolls_every_partition_back(store):
    base_plan, base = two_task_job(store, "base", 10)
    commit_staged(base_plan, base)
    before, before_records = ends(store), pairs(store)
    plan, staged = two_task_job(store)
    with failing_appends(2, OSError("disk full")), pytest.raises(OSError, match="disk full"):
        commit_staged(plan, staged)
    assert ends(store) == before and pairs(store) == before_records
    assert all(os.path.exists(item.path) for item in staged)  # kept for a retry or an abort
    result = commit_staged(plan, staged)
    assert result.total_appended == 80 and sum(map(len, pairs(store).values())) == 100
    assert not os.path.exists(plan.job_dir)


def test_abort_removes_the_staged_files_and_the_job_dir(store):
    plan, staged = two_task_job(store)
    open(os.path.join(plan.job_dir, "task-9-straggler.stage"), "wb").close()  # a speculative attempt's file
    os.remove(staged[0].path)
    abort_staged(plan, [staged[0], None, staged[1]])
    assert not os.path.exists(plan.job_dir)
    abort_staged(plan, staged)  # twice: nothing left, no error
    assert ends(store) == {key: 0 for key in ends(store)}


def test_the_loader_ignores_the_staging_dir(store):
    plan, _ = two_task_job(store)
    assert os.path.isdir(os.path.join(store, STAGING_DIR))
    for read_only in (True, False):
        opened = LogManager(store, read_only=read_only)
        try:
            assert opened.problems == []
        finally:
            opened.close()


def test_clear_staging_removes_only_old_job_dirs(store):
    old_plan, _ = two_task_job(store)
    young_plan, _ = two_task_job(store)
    commit_staged(TargetPlan.for_store(store), [], sink_id="s", batch_id=0)  # makes the sinks' dir
    for root, _, names in os.walk(old_plan.job_dir):
        for name in [*names, "."]:
            os.utime(os.path.join(root, name), (1_000_000, 1_000_000))
    sinks = os.path.join(store, STAGING_DIR, "sinks")
    os.utime(sinks, (1_000_000, 1_000_000))
    assert clear_staging(store) == [old_plan.job_dir]
    assert os.path.isdir(young_plan.job_dir) and os.listdir(sinks)
    young_ms = int(os.path.getmtime(young_plan.job_dir) * 1000)
    assert clear_staging(store, older_than_s=60, clock=ManualClock(young_ms + 30_000)) == []  # 30 s old
    assert clear_staging(store, older_than_s=60, clock=ManualClock(young_ms + 61_000)) == [young_plan.job_dir]


def test_another_writer_makes_the_commit_fail_clearly_and_loses_nothing(store):
    plan, staged = two_task_job(store)
    holder = LogManager(store)  # flock refuses a second open even in the same process
    try:
        with pytest.raises(LockedError, match=r"locked by process \d+.*staged files stay in .*retry the commit"):
            commit_staged(plan, staged)
        assert all(os.path.exists(item.path) for item in staged)
        threading.Timer(0.2, holder.close).start()
        result = commit_staged(plan, staged, lock_wait_s=10)  # waits for the lock
    finally:
        holder.close()
    assert result.total_appended == 80 and sum(map(len, pairs(store).values())) == 80


# --- exactly-once streaming ---------------------------------------------------------------------------


def stream_rows(batch: int, task: int, count: int = 20) -> list[tuple]:
    return [("t", None, None if i % 5 == 0 else b"k%d" % (i % 7), b"b%d-t%d-%d" % (batch, task, i), None, None)
            for i in range(count)]


def stage_batch(path, batch: int, tasks: int = 2):
    plan = TargetPlan.for_store(path)  # every attempt is a new Spark job: a new job id
    return plan, [stage_records(plan, task, stream_rows(batch, task)) for task in range(tasks)]


def test_a_batch_committed_twice_appends_once(store):
    plan, staged = stage_batch(store, 0)
    assert commit_staged(plan, staged, sink_id="query-1", batch_id=0).total_appended == 40
    once = pairs(store)
    plan, staged = stage_batch(store, 0)
    again = commit_staged(plan, staged, sink_id="query-1", batch_id=0)
    assert again.skipped and again.total_appended == 0 and pairs(store) == once
    assert not os.path.exists(plan.job_dir)  # a skipped batch's files are removed too
    plan, staged = stage_batch(store, 1)
    assert commit_staged(plan, staged, sink_id="query-1", batch_id=1).total_appended == 40
    plan, staged = stage_batch(store, 0)
    assert commit_staged(plan, staged, sink_id="another query", batch_id=0).total_appended == 40  # its own journal


@pytest.mark.parametrize("appends_before_crash", [0, 1, 3])
@pytest.mark.parametrize("foreign", [False, True])
def test_a_crash_after_the_intent_and_part_of_the_append_is_resumed_exactly_once(store, appends_before_crash, foreign):
    plan, staged = stage_batch(store, 0)
    commit_staged(plan, staged, sink_id="q", batch_id=0)
    plan, staged = stage_batch(store, 1)
    with failing_appends(appends_before_crash, Crash(), roll_back=False), pytest.raises(Crash):
        commit_staged(plan, staged, sink_id="q", batch_id=1)
    partial = pairs(store)
    if foreign:  # another producer appends between the crash and the retry
        with LogManager(store) as writer:
            for partition in range(3):
                writer.append("t", [Record(b"other", b"foreign")], partition=partition)
    plan, staged = stage_batch(store, 1)  # Spark re-runs the batch under the same id
    result = commit_staged(plan, staged, sink_id="q", batch_id=1)
    assert sum(result.recovered.values()) == sum(map(len, partial.values())) - 40
    expected = {p: list(partial[p]) for p in range(3)}
    batch_one: dict[int, list] = {0: [], 1: [], 2: []}
    for task in range(2):  # the batch's records per partition, in commit order
        keyless = 0
        for _, _, key, value, _, _ in stream_rows(1, task):
            if key is None:
                partition, keyless = (task + keyless) % 3, keyless + 1
            else:
                partition = expected_partition(key)
            batch_one[partition].append((key, value))
    for p in range(3):
        already = len(partial[p]) - len([r for r in partial[p] if r[1].startswith(b"b0-")])
        if foreign:
            expected[p].append((b"other", b"foreign"))
        expected[p].extend(batch_one[p][already:])
    assert pairs(store) == expected
    values = [v for records in pairs(store).values() for _, v in records if v != b"foreign"]
    assert len(values) == len(set(values)) == 80  # each record of batches 0 and 1 exactly once


def test_a_crash_after_the_whole_append_before_committed_appends_nothing_again(store):
    plan, staged = stage_batch(store, 7)
    with mock.patch.object(sink._Journal, "write_committed", side_effect=Crash()), pytest.raises(Crash):
        commit_staged(plan, staged, sink_id="q", batch_id=7)
    once = pairs(store)
    assert sum(map(len, once.values())) == 40
    plan, staged = stage_batch(store, 7)
    result = commit_staged(plan, staged, sink_id="q", batch_id=7)
    assert result.total_appended == 0 and sum(result.recovered.values()) == 40 and pairs(store) == once
    assert commit_staged(*stage_batch(store, 7), sink_id="q", batch_id=7).skipped


def test_a_resumed_batch_ignores_timestamps_a_log_append_time_topic_replaced(store):
    with LogManager(store) as writer:
        writer.create_topic("stamped", 2, config={"message.timestamp.type": "LogAppendTime"})

    def stage():
        plan = TargetPlan.for_store(store, "stamped")
        return plan, [stage_records(plan, 0, [(None, None, b"k%d" % i, b"v%d" % i, None, 1000 + i) for i in range(9)])]

    with failing_appends(1, Crash(), roll_back=False), pytest.raises(Crash):
        commit_staged(*stage(), sink_id="q", batch_id=0)
    result = commit_staged(*stage(), sink_id="q", batch_id=0)
    assert result.recovered and sum(result.recovered.values()) + result.total_appended == 9
    records = [r for rs in contents(store, "stamped").values() for r in rs]
    assert sorted(r.value for r in records) == [b"v%d" % i for i in range(9)]
    assert all(r.timestamp_ms > 1_000_000_000_000 for r in records)  # the log's append time, not the rows'


def test_an_abandoned_intent_of_an_older_batch_is_overwritten(store):
    plan, staged = stage_batch(store, 3)
    with failing_appends(1, Crash(), roll_back=False), pytest.raises(Crash):
        commit_staged(plan, staged, sink_id="q", batch_id=3)
    partial = sum(map(len, pairs(store).values()))
    plan, staged = stage_batch(store, 4)
    result = commit_staged(plan, staged, sink_id="q", batch_id=4)
    assert result.total_appended == 40 and result.recovered == {}
    assert sum(map(len, pairs(store).values())) == partial + 40
    journal = json.load(open(os.path.join(store, STAGING_DIR, "sinks", sink._journal_name("q"))))
    assert journal["last_batch_id"] == 4 and journal["intent"] is None


def test_a_damaged_journal_is_reported(store):
    commit_staged(*stage_batch(store, 0), sink_id="q/1", batch_id=0)
    path = os.path.join(store, STAGING_DIR, "sinks", sink._journal_name("q/1"))
    assert os.path.basename(path).startswith("q_1-")
    open(path, "a").write(" ")  # still JSON, same content: fine
    assert commit_staged(*stage_batch(store, 0), sink_id="q/1", batch_id=0).skipped
    open(path, "w").write(open(path).read().replace('"last_batch_id": 0', '"last_batch_id": 9'))
    with pytest.raises(CorruptCheckpointError, match="exactly-once cannot be guaranteed"):
        commit_staged(*stage_batch(store, 1), sink_id="q/1", batch_id=1)


def test_a_killed_committing_process_is_resumed_exactly_once(store):
    plan, staged = stage_batch(store, 5, tasks=3)
    script = textwrap.dedent("""
        import os, pickle, sys
        from logstore.manager import LogManager
        from logstore.spark.sink import commit_staged
        plan, staged = pickle.loads(bytes.fromhex(sys.argv[1]))
        real, calls = LogManager.append, [0]
        def append(self, *args, **kwargs):
            calls[0] += 1
            if calls[0] > 4:
                os._exit(17)  # killed mid-commit: no rollback, no clean close
            return real(self, *args, **kwargs)
        LogManager.append = append
        commit_staged(plan, staged, sink_id="q", batch_id=5)
    """)
    child = subprocess.run([sys.executable, "-c", script, pickle.dumps((plan, staged)).hex()],
                           capture_output=True, text=True, timeout=60)
    assert child.returncode == 17, child.stderr
    assert 0 < sum(map(len, pairs(store).values())) < 60
    result = commit_staged(*stage_batch(store, 5, tasks=3), sink_id="q", batch_id=5)
    assert result.recovered and result.total_appended + sum(result.recovered.values()) == 60
    values = [v for records in pairs(store).values() for _, v in records]
    assert len(values) == len(set(values)) == 60


# --- a state machine against a plain model ------------------------------------------------------------

ROWS = st.lists(st.lists(st.tuples(st.none() | st.sampled_from([b"a", b"b", b"c", b"d"]), st.integers(0, 9)),
                         max_size=6), min_size=1, max_size=3)


class ExactlyOnce(RuleBasedStateMachine):
    """Commits, retries and crashed commits of a streaming sink; the store must always equal the
    model: every batch's records once, in commit order, after whatever other writers appended."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="logstore-sink-model-")
        with LogManager(self.dir) as store:
            store.create_topic("t", 3)
        self.model: dict[int, list[tuple]] = {0: [], 1: [], 2: []}
        self.batch_id = 0
        self.committed: list | None = None  # the last committed batch's rows
        self.serial = 0

    def _stage(self, batch_id: int, rows: list[list[tuple]]):
        plan = TargetPlan.for_store(self.dir)
        staged = [stage_records(plan, task, [("t", None, key, b"%d:%d:%d:%d" % (batch_id, task, i, value), None, None)
                                             for i, (key, value) in enumerate(task_rows)])
                  for task, task_rows in enumerate(rows)]
        return plan, staged

    def _expected(self, plan, staged) -> dict[int, list[tuple]]:
        batch: dict[int, list[tuple]] = {0: [], 1: [], 2: []}
        for item in staged:
            for (_, partition), records in read_staged(item.path):
                batch[partition].extend((record.key, record.value) for record in records)
        return batch

    @rule(rows=ROWS)
    def commit_batch(self, rows):
        plan, staged = self._stage(self.batch_id, rows)
        batch = self._expected(plan, staged)
        assert not commit_staged(plan, staged, sink_id="s", batch_id=self.batch_id).skipped
        for partition, records in batch.items():
            self.model[partition].extend(records)
        self.committed, self.batch_id = rows, self.batch_id + 1

    @rule()
    def retry_last_batch(self):
        if self.committed is not None:
            plan, staged = self._stage(self.batch_id - 1, self.committed)
            assert commit_staged(plan, staged, sink_id="s", batch_id=self.batch_id - 1).skipped

    @rule(rows=ROWS, appends=st.integers(0, 8), after_append=st.booleans(), foreign=st.booleans())
    def crash_then_retry(self, rows, appends, after_append, foreign):
        plan, staged = self._stage(self.batch_id, rows)
        batch = self._expected(plan, staged)
        crash = (mock.patch.object(sink._Journal, "write_committed", side_effect=Crash()) if after_append
                 else failing_appends(appends, Crash(), roll_back=False))
        try:
            with crash:
                commit_staged(plan, staged, sink_id="s", batch_id=self.batch_id)
        except Crash:
            pass
        found = pairs(self.dir)
        for partition in range(3):
            partial = found[partition][len(self.model[partition]):]
            assert partial == batch[partition][:len(partial)]  # the crashed attempt appended a prefix
            self.model[partition].extend(partial)
            batch[partition] = batch[partition][len(partial):]
        if foreign:
            self.serial += 1
            with LogManager(self.dir) as writer:
                for partition in range(3):
                    record = (b"other", b"foreign-%d" % self.serial)
                    writer.append("t", [Record(*record)], partition=partition)
                    self.model[partition].append(record)
        plan, staged = self._stage(self.batch_id, rows)
        commit_staged(plan, staged, sink_id="s", batch_id=self.batch_id)
        for partition, records in batch.items():
            self.model[partition].extend(records)
        self.committed, self.batch_id = rows, self.batch_id + 1

    @invariant()
    def store_equals_model(self):
        assert pairs(self.dir) == self.model

    def teardown(self):
        import shutil

        shutil.rmtree(self.dir, ignore_errors=True)


TestExactlyOnce = ExactlyOnce.TestCase
TestExactlyOnce.settings = settings(max_examples=20, stateful_step_count=8, deadline=None)
